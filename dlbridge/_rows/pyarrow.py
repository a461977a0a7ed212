"""Apache Arrow (pyarrow ``Array`` and ``Tensor``): a source only. dlbridge reads its arrays (their states,
errors and read-only exports) but never converts into it, so it has no capability rows of its own."""

from __future__ import annotations

from ._common import Framework, Row

# The registry's entry (dlbridge._rows): its names, its array class, where its adapter lives. A Tensor is
# no Array subclass: it is recognised by its module (producer_modules) and the adapter's is_array.
FRAMEWORK = Framework(
    name="pyarrow",
    module="pyarrow",
    array_type=("pyarrow", "Array"),
    adapter="dlbridge._adapters._pyarrow:PyarrowAdapter",
    producer_modules=("pyarrow",),
    target=False,
)

ROWS: tuple[Row, ...] = ()
