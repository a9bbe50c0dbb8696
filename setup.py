"""Builds the corpus fast path (C extension) with the package; everything else is in pyproject.toml."""

from glob import glob

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "shopdistill_assets.core._corpus_native",
            sources=sorted(glob("native/*.c")),
            depends=sorted(glob("native/*.h")),
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter",
                                "-Wno-missing-field-initializers"],
            optional=True,  # without a compiler the Python reference path runs alone
        )
    ]
)
