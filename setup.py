"""The optional compiled accelerator, dlbridge._accel; all other metadata lives in pyproject.toml.

It is built against CPython's limited API (one abi3 wheel for 3.10 and later). optional=True: where it
cannot compile (no C compiler, no Python headers) the install still succeeds and dlbridge runs in pure
Python; `dlbridge doctor` says which (its `accelerator:` line).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "dlbridge._accel",
            [
                "dlbridge/_csrc/module.c",
                "dlbridge/_csrc/route.c",
                "dlbridge/_csrc/capsules.c",
                "dlbridge/_csrc/objects.c",
                "dlbridge/_csrc/carrier.c",
                "dlbridge/_csrc/gpu.c",
                "dlbridge/_csrc/steps.c",
                "dlbridge/_csrc/attributes.c",
                "dlbridge/_csrc/errors.c",
                "dlbridge/_csrc/records.c",
                "dlbridge/_csrc/routes.c",
                "dlbridge/_csrc/views.c",
            ],
            depends=["dlbridge/_csrc/accel.h", "dlbridge/_csrc/route.h"],
            py_limited_api=True,
            define_macros=[("Py_LIMITED_API", "0x030A0000")],
            optional=True,
        )
    ],
    options={"bdist_wheel": {"py_limited_api": "cp310"}},
)
