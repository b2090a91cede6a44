"""The native summary decoder built once with AddressSanitizer, under the wire fuzz (issue 29 item 4).

Builds telemetry.summary._native with TELEMETRY_NATIVE_SANITIZE=address (setup.py: -fsanitize=address, -O1,
CRoaring included) into a temporary folder, then runs tests/native_fuzz.py with that module in place of the
installed one: truncations, bit flips, byte damage, spliced raw records and random bytes, each decoded, and the
accepted ones re-encoded, queried and merged. Any out-of-bounds read or write, use after free or double free
aborts the run with ASan's report. Python itself is not instrumented, so libasan (and libstdc++, whose
__cxa_throw ASan intercepts) are preloaded. Leak detection is off: CPython frees little at exit by design;
bench/fuzz.py --native watches RSS over 100,000+ cases instead.

Bounded for CI: one build (about 40 s of compiler CPU, two compilers at once: setup.py) and 4,000 seeded cases (a few s).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bounded_run import run

REPO = Path(__file__).resolve().parents[1]
CASES = 4000

pytestmark = pytest.mark.timeout(900)


def _runtime(name: str) -> str:
    out = subprocess.run(["gcc", f"-print-file-name={name}"], capture_output=True, text=True, check=True).stdout.strip()
    if not os.path.isabs(out):
        pytest.fail(f"gcc does not know where {name} is (is libasan installed with gcc?)")
    return out


def test_wire_fuzz_under_address_sanitizer(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.fail("gcc is needed to build the extension (CI has it)")
    env = {**os.environ, "TELEMETRY_NATIVE_SANITIZE": "address"}
    built = run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", tmp_path / "lib",
                 "--build-temp", tmp_path / "tmp"], 800, cwd=REPO, env=env)  # a time-out kills its compilers too
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (module,) = (tmp_path / "lib" / "telemetry" / "summary").glob("_native*.so")
    run_env = {**os.environ, "LD_PRELOAD": f"{_runtime('libasan.so')} {_runtime('libstdc++.so')}",
               "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:halt_on_error=1"}
    fuzz = subprocess.run(
        [sys.executable, str(REPO / "tests" / "native_fuzz.py"), "--module", str(module), "--cases", str(CASES)],
        cwd=tmp_path, env=run_env, capture_output=True, text=True, timeout=300)
    report = fuzz.stdout[-2000:] + fuzz.stderr[-6000:]
    assert fuzz.returncode == 0, report
    assert "AddressSanitizer" not in fuzz.stderr, report
    assert f"{CASES} cases" in fuzz.stdout and str(module) in fuzz.stdout, report  # the sanitized module ran
