"""Builds telemetry.summary._native, the summary's hot path in C++ (pybind11); everything else is in pyproject.toml.

CRoaring (vendored: telemetry/summary/native/croaring, the amalgamation pyroaring 1.2.0 ships) is C, compiled
with C flags and linked in. TELEMETRY_NATIVE_SANITIZE=address builds with AddressSanitizer (tests/test_native_asan.py).
"""

from __future__ import annotations

import os

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

NATIVE = "telemetry/summary/native"
SANITIZE = os.environ.get("TELEMETRY_NATIVE_SANITIZE", "")
OPT = ["-O1", "-g", "-fno-omit-frame-pointer", f"-fsanitize={SANITIZE}"] if SANITIZE else ["-O2"]


class BuildNative(build_ext):
    """pybind11's build_ext, with the C library compiled first under C flags (not -std=c++17)."""

    def build_extension(self, ext: Pybind11Extension) -> None:
        c_sources = [s for s in ext.sources if s.endswith(".c")]
        ext.sources = [s for s in ext.sources if not s.endswith(".c")]
        if c_sources:
            objects = self.compiler.compile(c_sources, output_dir=self.build_temp, include_dirs=[NATIVE],
                                            extra_postargs=[*OPT, "-std=c11", "-fPIC"], depends=ext.depends)
            ext.extra_objects = [*ext.extra_objects, *objects]
        super().build_extension(ext)


native = Pybind11Extension(
    "telemetry.summary._native",
    sources=[f"{NATIVE}/module.cpp", f"{NATIVE}/core.cpp", f"{NATIVE}/ingest.cpp", f"{NATIVE}/unit.cpp",
             f"{NATIVE}/table.cpp", f"{NATIVE}/croaring/roaring.c"],
    include_dirs=[NATIVE],
    depends=[f"{NATIVE}/{h}"
             for h in ("core.hpp", "fsum.hpp", "ingest.hpp", "table.hpp", "tdigest.hpp", "unit.hpp", "wire.hpp",
                       "croaring/roaring.h")],
    cxx_std=17,
    extra_compile_args=list(OPT),  # a copy: pybind11 appends its C++ flags to it
    extra_link_args=[f"-fsanitize={SANITIZE}"] if SANITIZE else [],
)

setup(ext_modules=[native], cmdclass={"build_ext": BuildNative})
