"""``dlbridge report`` and ``dlbridge doctor``: the compatibility matrix of the installed stack."""

from __future__ import annotations
