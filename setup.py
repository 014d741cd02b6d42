"""Only the optional C extension; everything else is in pyproject.toml.

`optional=True`: where no C compiler exists the build skips the extension and the package runs
its pure-Python path (statemachine/_accel.py), the same events, slower.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "streamfold.statemachine._speedups",
            sources=[
                "statemachine/_speedups.c",
                "statemachine/_speedups_sse.c",
                "statemachine/_speedups_rows.c",
            ],
            depends=["statemachine/_speedups.h"],
            optional=True,
        ),
        # The token bitmask on float32 logits (engines/native/bitmask.py has the same in numpy
        # and torch, used where this is not built).
        Extension(
            "streamfold.engines.native._bitmask",
            sources=["engines/native/_bitmask.c"],
            optional=True,
        ),
    ]
)
