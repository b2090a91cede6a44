"""bench/soak.py runs end to end at a tiny size (15 jobs, 4 ranks for 6 s) and writes a well-formed soak.json.

No thresholds on the figures' values (they depend on the machine and its load, and the targets are what
the bench reports, not what this test checks): only that every figure was measured and is plausible.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SERVICES = ("root", "rack", "agent")


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.timeout(300)
def test_tiny_soak_runs_and_writes_json(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "soak.py"), "--jobs", "15", "--sample-every", "5", "--idle-s", "1",
         "--steady-minutes", "0.1", "--steady-ranks", "4", "--ranks-per-process", "2", "--steady-sample-s", "2",
         "--out", str(tmp_path)],
        cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verdict" in done.stdout and "jobs 15/15" in done.stderr
    result = json.loads((tmp_path / "soak.json").read_text())
    assert result["benchmark"] == "soak" and result["complete"] is True and "error" not in result
    assert result["machine"]["cpus"] >= 1

    jobs = result["jobs_phase"]
    assert jobs["baseline_job"] == 7
    assert [(s["job"], s["settled"]) for s in jobs["samples"]] == [
        (0, True), (5, False), (7, False), (7, True), (10, False), (15, False), (15, True)]
    assert len(jobs["jobs"]) == 15 and len({j["job"] for j in jobs["jobs"]}) == 15, "distinct job names"
    steady = result["steady_phase"]
    assert steady["world_size"] == 4 and steady["steps"] == 12 and steady["driver_processes"] == 2
    assert len(steady["samples"]) >= 2
    steps = [s["steps"] for s in steady["samples"]]
    assert steps[0] == 0 and steps[-1] == 12 and steps == sorted(steps)
    assert steady["closed_ok"] == 4 and steady["close_failed"] == 0
    assert steady["completeness"]["steps_at_root"] == 12 and steady["completeness"]["steps_complete"] == 12

    for s in jobs["samples"] + steady["samples"]:
        for name in SERVICES:
            f = s["services"][name]
            assert f["rss_bytes"] > 10 * 2**20 and f["threads"] >= 1 and f["fds"] >= 3, (name, f)
            assert _number(f["cpu_s"]) and f["cpu_s"] >= 0
        m = s["metrics"]
        assert ("error" in m) or (m["bytes"] > 0 and m["job_labels"] >= 0 and m["scrape_s"] >= 0), m
    for name in SERVICES:  # CPU seconds only go up
        cpu = [s["services"][name]["cpu_s"] for s in jobs["samples"] + steady["samples"]]
        assert cpu == sorted(cpu), name

    figures = result["figures"]
    assert figures["jobs"]["jobs_run"] == 15
    assert figures["jobs"]["jobs_completed"] == 15 and figures["jobs"]["jobs_failed"] == 0
    for name in SERVICES:
        assert _number(figures["jobs"]["services"][name]["rss_growth_percent"])
        assert figures["steady"]["services"][name]["rss_mib_end"] > 0
        for when in ("start", "baseline", "last"):
            assert _number(figures["jobs"]["idle_cpu_percent"][when][name]) and \
                figures["jobs"]["idle_cpu_percent"][when][name] >= 0
        assert figures["lifetime"][name]["threads_end"] >= 1 and figures["lifetime"][name]["fds_end"] >= 3
    assert sum(i["steps"] for i in figures["steady"]["intervals"]) == 12
    assert set(result["verdicts"]) == {"rss_growth", "cpu_per_step_flat", "metrics_independent_of_jobs"}
    for verdict in result["verdicts"].values():
        assert isinstance(verdict["missed_by"], list) and _number(verdict["limit"])
    assert set(result["service_exit_status"]) == set(SERVICES)
