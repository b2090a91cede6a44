"""Builds telemetry.summary._native, the summary's hot path in C++ (pybind11); everything else is in pyproject.toml.

CRoaring (vendored: telemetry/summary/native/croaring, the amalgamation pyroaring 1.2.0 ships) is C, compiled
with C flags and linked in. TELEMETRY_NATIVE_SANITIZE=address builds with AddressSanitizer (tests/test_native_asan.py).

The sources compile in parallel, C and C++ in one pool (TELEMETRY_BUILD_JOBS workers, default: the CPUs this
process may use): serially they cost ~37 s of compiler CPU, module.cpp alone ~16 s and roaring.c ~11 s, so on CI's
two cores the build should wait ~19 s instead of ~37 s (an estimate from the per-file CPU, not measured on an idle
2-core machine; docs/development.md). pybind11's ParallelCompile is not used: it
parallelises one compile call, one flag set, and the C file (the second longest) would then compile alone.
"""

from __future__ import annotations

import os
from multiprocessing.pool import ThreadPool

from pybind11.setup_helpers import Pybind11Extension, build_ext
from setuptools import setup

NATIVE = "telemetry/summary/native"
SANITIZE = os.environ.get("TELEMETRY_NATIVE_SANITIZE", "")
# -g1 under ASan: line tables, so its reports still name file:line (and inlined frames), at ~70 % of -g's compile
# CPU; -g0 otherwise (pybind11 gives the C++ files -g0; the C file took Python's -g).
OPT = ["-O1", "-g1", "-fno-omit-frame-pointer", f"-fsanitize={SANITIZE}"] if SANITIZE else ["-O2", "-g0"]
# The longest compiles first, so that none starts last and runs on alone (pool order is this order).
SOURCES = [f"{NATIVE}/module.cpp", f"{NATIVE}/croaring/roaring.c", f"{NATIVE}/core.cpp", f"{NATIVE}/table.cpp",
           f"{NATIVE}/ingest.cpp", f"{NATIVE}/unit.cpp"]


def build_jobs() -> int:
    """How many compilers run at once: TELEMETRY_BUILD_JOBS, else the CPUs this process may run on."""
    given = os.environ.get("TELEMETRY_BUILD_JOBS", "")
    if given:
        try:
            return max(1, int(given))
        except ValueError:
            raise SystemExit(f"TELEMETRY_BUILD_JOBS must be a whole number of compilers, not {given!r}") from None
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


class BuildNative(build_ext):
    """pybind11's build_ext, with every source compiled in one pool of `build_jobs()` compilers: the C library under
    C flags (not -std=c++17), the rest under the extension's C++ flags."""

    def build_extension(self, ext: Pybind11Extension) -> None:
        compile_one = self.compiler.compile
        order = {source: rank for rank, source in enumerate(SOURCES)}

        def compile_all(sources: list[str], **options: object) -> list[str]:
            """build_ext's one compile call for all the sources, as a pool of one call per source."""
            jobs = [(s, {**options, "extra_postargs": [*OPT, "-std=c11", "-fPIC"]} if s.endswith(".c") else options)
                    for s in sorted(sources, key=lambda s: order.get(s, len(order)))]
            with ThreadPool(build_jobs()) as pool:  # threads: each waits on its compiler process
                built = pool.map(lambda job: compile_one([job[0]], **job[1]), jobs)
            return [obj for objects in built for obj in objects]

        self.compiler.compile = compile_all  # this build's compiler instance only
        try:
            super().build_extension(ext)
        finally:
            del self.compiler.compile  # the class's method again

native = Pybind11Extension(
    "telemetry.summary._native",
    sources=SOURCES,
    include_dirs=[NATIVE],
    depends=[f"{NATIVE}/{h}"
             for h in ("block.hpp", "core.hpp", "fsum.hpp", "ingest.hpp", "table.hpp", "tdigest.hpp", "unit.hpp",
                       "wire.hpp", "croaring/roaring.h")],
    cxx_std=17,
    # a copy: pybind11 adds its C++ flags to it. Under a sanitizer the C++ asserts too (-UNDEBUG: Python's flags
    # define NDEBUG), so the ASan test's fuzz checks their debug assertions (tdigest.hpp's Scratch rule).
    extra_compile_args=[*OPT, "-UNDEBUG"] if SANITIZE else list(OPT),
    extra_link_args=[f"-fsanitize={SANITIZE}"] if SANITIZE else [],
)

setup(ext_modules=[native], cmdclass={"build_ext": BuildNative})
