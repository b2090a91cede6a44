"""Time a from-scratch build of the native extension (telemetry.summary._native): wall and compiler CPU.

Why: the build runs in bootstrap, in tests/test_wheel.py (the wheel) and in tests/test_native_asan.py (with
AddressSanitizer), each on CI's two cores; setup.py compiles its sources in parallel. Builds with the setup.py of
the current directory (so that bench/ab.py can run this file by its absolute path in another revision's tree),
into a fresh temporary folder each time: nothing reused.

    .venv/bin/python bench/native_build.py                    # plain and ASan, once each
    .venv/bin/python bench/ab.py --base main --rounds 3 -- $PWD/bench/native_build.py --out {out}

Writes native_build.json to --out (default bench/results/): per variant the wall seconds, the compiler processes'
CPU seconds (user + system), their ratio (how many compilers ran at once, on average) and the 1-minute load
average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import machine_facts

VARIANTS = {"plain": {}, "asan": {"TELEMETRY_NATIVE_SANITIZE": "address"}}


def load() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def build(tree: Path, env: dict[str, str]) -> dict[str, Any]:
    """One build of `tree`'s setup.py into a fresh folder: wall s, children's CPU s, load before and after."""
    with tempfile.TemporaryDirectory(prefix="native-build-") as scratch:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        load_before, start = load(), time.monotonic()
        done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", f"{scratch}/lib",
                               "--build-temp", f"{scratch}/tmp"], cwd=tree, env={**os.environ, **env},
                              capture_output=True, text=True, timeout=1800)
        wall = time.monotonic() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "cpu_per_wall": round(cpu / wall, 2),
            "load_before": load_before, "load_after": load()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", default="plain,asan", help="comma-separated: plain, asan (default both)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    args = parser.parse_args()
    tree = Path.cwd()
    results = {name: build(tree, VARIANTS[name]) for name in args.variants.split(",")}
    for name, figures in results.items():
        print(f"{name}: {figures['wall_s']:.1f} s wall, {figures['cpu_s']:.1f} s compiler CPU "
              f"({figures['cpu_per_wall']:.2f} at once), load {figures['load_before']} -> {figures['load_after']}")
    args.out.mkdir(parents=True, exist_ok=True)
    document = {"tree": str(tree), "jobs": os.environ.get("TELEMETRY_BUILD_JOBS", "default"), "builds": results,
                "machine": machine_facts()}
    (args.out / "native_build.json").write_text(json.dumps(document, indent=2) + "\n")


if __name__ == "__main__":
    main()
