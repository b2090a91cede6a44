"""Smoke test of bench/sdk_overhead.py: `--quick` runs end to end and writes well-formed JSON.

No timing thresholds: the figures of a quick run on a shared machine mean nothing. What is
checked is that the run finishes, that every figure that must be a positive finite number is
one, that overheads are finite, and that the targets carry verdicts.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "bench" / "sdk_overhead.py"
WORLD = 2  # fewer ranks than the real bench's 4: the smoke test has to fit in its timeout on 2 cores

# The quick run is ~25 s of CPU, most of it torch starting in 10 processes (the bench, the three torchrun launchers
# and their 2 ranks each): ~20-30 s on a quiet 2-core machine, 80-90 s at load 15-30. The bounds below only catch
# a hang: they are sized for a machine at load ~50 (each process a 25th of a core), where 120 s was not enough.
RUN_TIMEOUT_S = 150  # one example run (the bench retries a failed run once)
BENCH_TIMEOUT_S = 480

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(BENCH_TIMEOUT_S + 30)


def positive(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0


def finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def test_quick_run_writes_well_formed_json(tmp_path: Path) -> None:
    out = tmp_path / "sdk_overhead.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--quick", "--no-progress", "--world", str(WORLD),
                           "--run-timeout", str(RUN_TIMEOUT_S), "--json", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "run.log() on the training thread" in proc.stdout and "targets" in proc.stdout
    data = json.loads(out.read_text())  # allow_nan=False on the writing side: no NaN/Infinity in it

    assert data["benchmark"] == "sdk_overhead" and data["quick"] is True
    params = data["parameters"]
    assert params["world"] == WORLD and params["rounds"] >= 1 and params["steps"] > params["warmup"]
    assert params["idle_s"] > 0

    machine = data["machine"]
    assert positive(machine["cpus"]) and machine["torch"] and machine["python"]
    for key in ("load_avg_before", "load_avg_after"):
        assert len(machine[key]) == 3 and all(finite(x) and x >= 0 for x in machine[key]), machine[key]

    # 1. log(): every shape timed, all times positive and finite.
    summary = data["summary"]
    for case in ("1 float", "10 floats", "10 CPU tensors", "floor: empty function, 10 kwargs"):
        assert positive(summary["log_us"][case]), (case, summary["log_us"])
        assert positive(summary["log_caller_cpu_us"][case]), (case, summary["log_caller_cpu_us"])
        res = data["log"][case]
        assert len(res["wall_samples_us"]) == params["repeats"] == res["timings"]
        assert all(positive(x) for x in res["wall_samples_us"])
        for field in ("wall_us", "caller_cpu_us"):
            assert all(positive(res[field][k]) for k in ("median", "min", "max")), (case, field, res[field])
            assert res[field]["min"] <= res[field]["median"] <= res[field]["max"]
    assert data["log"]["durable_at_root"] is True
    assert data["log"]["sdk_stats"]["dropped_values"] == 0

    # 2. step time: three configurations, one run each per round, positive step times.
    steps = data["steps"]
    assert steps["world_size"] == WORLD and steps["rounds"] == params["rounds"]
    assert sorted(r["config"] for r in steps["runs"]) == sorted(["none", "sdk", "allgather"] * params["rounds"])
    for run in steps["runs"]:
        for field in ("per_step_s", "thread_cpu_per_step_s", "process_cpu_per_step_s", "median_step_s"):
            assert positive(run[field]), (run["config"], field, run[field])
        assert run["steps_timed"] == params["steps"] - params["warmup"]
    assert set(summary["step_ms"]) == {"none", "sdk", "allgather"}
    assert all(positive(v) for v in summary["step_ms"].values()), summary["step_ms"]
    for measure in ("wall", "thread_cpu", "process_cpu"):
        s = summary["step"][measure]
        assert all(positive(v) for v in s["per_step_ms"].values()), (measure, s)
        assert finite(s["sdk_overhead_percent"]) and finite(s["allgather_overhead_percent"]), (measure, s)
        assert isinstance(s["sdk_within_noise"], bool)
        ratio = s["allgather_over_sdk_overhead"]
        assert ratio is None or finite(ratio)
        if ratio is None:
            assert s["sdk_within_noise"]  # a ratio is only left out when the SDK's overhead is noise
        assert len(steps["per_round"]) == params["rounds"]

    # Targets: all five judged, with a value or (for a ratio over noise) none.
    targets = summary["targets"]
    assert set(targets) == {"log_1_float_us", "log_10_floats_us", "log_10_cpu_tensors_us",
                            "sdk_step_overhead_percent", "allgather_over_sdk_overhead",
                            "readers_step_overhead_percent"}
    readers = data["readers"]  # the flight-recorder readers, on vs off
    assert readers["close_durable"] == {"on": True, "off": True}
    assert all(finite(v) and v > 0 for v in readers["status_read_us"].values())
    assert finite(readers["overhead_percent"]["median"]) and readers["polls_per_step"] >= 0  # a figure, not a floor
    for key, v in targets.items():
        assert positive(v["target"]) and v["met"] in (True, False, None) and isinstance(v["text"], str), (key, v)
        assert v["value"] is None or finite(v["value"]), (key, v)
    for key in ("log_1_float_us", "log_10_floats_us", "log_10_cpu_tensors_us"):
        assert positive(targets[key]["value"]) and targets[key]["met"] in (True, False)


def test_help_lists_the_flags() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--help"], cwd=REPO, capture_output=True, text=True,
                          timeout=30)
    assert proc.returncode == 0
    for flag in ("--json", "--quick", "--rounds", "--steps", "--world", "--wait-load", "--idle-s"):
        assert flag in proc.stdout
