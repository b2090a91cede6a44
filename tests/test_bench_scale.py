"""bench/scale.py --quick runs end to end (tree and baseline at two small sizes, and the tree at a realistic
fan-in: 64 agents per rack) and writes a well-formed scale.json and scale.png. No timing thresholds: the
figures depend on the machine and its load."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def _finite(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


@pytest.mark.timeout(300)
def test_quick_scale_bench_writes_json_and_png(tmp_path):
    done = subprocess.run([sys.executable, str(REPO / "bench" / "scale.py"), "--quick", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "scale.json").read_text())
    png = (tmp_path / "scale.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"

    assert result["complete"] is True and result["failed"] == []
    sizes = result["config"]["sizes"]
    assert sizes == [256, 1024] and result["config"]["metrics"] == 20
    assert len(result["loadavg_start"]) == 3
    tree = {r["ranks"]: r for r in result["tree"] if not r["wide"]}
    wide = {r["ranks"]: r for r in result["tree"] if r["wide"]}
    gather = {r["ranks"]: r for r in result["gather"]}
    assert set(tree) == set(gather) == set(sizes)
    assert set(wide) == {1024} == set(result["config"]["wide_sizes"])
    assert wide[1024]["plan"]["fanin"]["rack"] == 64 and wide[1024]["plan"]["tiers"] == {"rack": 2}
    for n, r in [*tree.items(), *wide.items()]:
        assert r["design"] == "tree" and r["completed"] and r["windows_complete"], n
        assert r["late_deltas"] == 0
        for key in ("root_bytes_per_step", "root_bytes_per_step_per_metric", "root_cpu_ms_per_step", "steps_per_s"):
            assert _finite(r[key]) and r[key] > 0, (n, key)
        tiers = r["tiers"]
        assert {"root", "rack", "agent"} <= set(tiers)
        for tier in ("root", "rack", "agent"):
            assert _finite(tiers[tier]["cpu_ms_per_step"]) and tiers[tier]["cpu_ms_per_step"] >= 0, (n, tier)
        assert _finite(tiers["rack"]["bytes_per_step"]) and tiers["rack"]["bytes_per_step"] > 0
        assert tiers["root"]["peak_rss_mb"] > 0 and tiers["rack"]["peak_rss_mb"] > 0
        assert tiers["agent"]["peak_rss_mb_per_process"] > 0 and tiers["agent"]["ranks_fed_in_process"] is True
        assert tiers["agent"]["agents"] == n // 8
        assert tiers["agent"]["durable_acks"] == tiers["agent"]["rank_batches"], "every rank batch durable"
        assert tiers["root"]["counters"]["rejected_overlaps"] == 0 and tiers["root"]["counters"]["bad_inputs"] == 0
        assert _finite(r["latency_ms"]["p50"]) and _finite(r["latency_ms"]["p99"]) and r["latency_ms"]["samples"] > 0
        for q in ("p50", "p90", "p99", "p99.9"):
            err = r["rel_err"][q]
            assert _finite(err["max"]) and err["steps"] == r["measured_steps"] + r["warmup_steps"], (n, q)
            assert 0 <= err["rank_err_max"] < 0.02, "the root's quantiles are near the exact ones (loose: a smoke run)"
    for n, r in gather.items():
        assert r["design"] == "gather" and r["completed"], n
        for key in ("root_bytes_per_step", "root_cpu_ms_per_step", "steps_per_s", "peak_rss_mb"):
            assert _finite(r[key]) and r[key] > 0, (n, key)
        assert r["messages_per_step"] == n
        assert r["rel_err"]["p50"]["max"] < 1e-9, "the baseline's quantiles are exact"
    # gathering everything grows with N; the tree's root receives a summary per child per metric
    assert gather[1024]["root_bytes_per_step"] > 3 * gather[256]["root_bytes_per_step"]
    assert set(result["verdicts_wide"]) >= {"root_cpu_ms_per_step", "rack_cpu_ms_per_step"}
    assert set(result["verdicts"]) >= {"root_bytes_growth", "root_cpu_ms_per_step", "rack_cpu_ms_per_step",
                                       "agent_cpu_ms_per_step", "step_time_rel_err_worst"}
    assert set(result["crossover"]) == {"root_bytes_per_step", "root_cpu_ms_per_step"}
