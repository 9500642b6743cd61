"""The optional C helpers of the per-token path (engine/client/_speedups.c: the reads and their
events; engine/measure/_bins.c: the histograms' counting): built where a C compiler is,
skipped (redline runs the same path in Python) where none is. Everything else about the
package is in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "redline.engine.client._speedups",
            sources=["engine/client/_speedups.c"],
            optional=True,  # no compiler, a failed build: installed without it, never an error
            extra_compile_args=["-O2"],
        ),
        Extension(
            "redline.engine.measure._bins",
            sources=["engine/measure/_bins.c"],
            optional=True,
            extra_compile_args=["-O2"],
        ),
    ]
)
