"""The root's whole /metrics exposition for one representative state, line for line, against the copy recorded in
tests/golden/root_metrics.prom before `RootMetrics.collect` was split into one collector per concern (issue 27
item 6): every family's name, type, help text, label set and value stays as it was. Sample order may differ (each
collector yields its own families), so lines are compared as sorted lists.

After an intended change to the exposition, record it again: `.venv/bin/python tests/test_root_metrics_exposition.py`
(and say in the commit why the exposition changed)."""

from __future__ import annotations

import math
import time
from pathlib import Path

from collectors.common.keys import Key
from collectors.root.metrics import RootMetrics
from collectors.root.store import Row
from test_root_metrics import JOB, fed, row, step_rows

GOLDEN = Path(__file__).parent / "golden" / "root_metrics.prom"


def representative() -> RootMetrics:
    """Every path through the exposition: a 16-rank job with stragglers, progress, hardware and a host's
    counters (`fed`); an attempt logging collective_wait and work_time; a synchronous job read from
    collective_arrival; a registered job without windows; a host pseudo-job registered (never exported as a job);
    late, incomplete and non-finite windows; delivery, detector and store figures; events open and closed."""
    worlds = {f"{JOB}@3": 4, "sync": 4, "early": 8}

    def liveness(job: str) -> dict:
        if job in worlds:
            return {"world_size": worlds[job], "alive": worlds[job], "stuck": 0, "dead": 0}
        return {"world_size": 16, "alive": 14, "stuck": 1, "dead": 1}

    metrics, events = fed(liveness=liveness, jobs=lambda: [JOB, f"{JOB}@3", "early", "_host:node9"],
                          detector_errors=lambda: 2,
                          store=lambda: {"writable": 1, "write_failures": 4, "files_lost": 1, "bytes": 123456})
    waits = {r: (0.05 if r == 3 else 0.25) for r in range(4)}
    for step in (7, 8):
        metrics.observe([Row(Key(f"{JOB}@3", r.key.metric, r.key.index, 0), r.expected, r.summary, 0, time.time_ns())
                         for r in [row("step_time", step, {r: 0.5 for r in range(4)}, 4),
                                   row("collective_wait", step, waits, 4),
                                   row("work_time", step, {r: 0.5 - w for r, w in waits.items()}, 4)]])
    metrics.observe([row("step_time", 4, {r: 0.31 + 0.001 * r for r in range(3)}, 4, job="sync"),  # rank 3 missing
                     row("collective_arrival", 4, {r: (0.3 if r == 2 else 0.1) for r in range(4)}, 4, job="sync"),
                     row("loss", 4, {0: 1.0, 1: math.nan, 2: math.inf, 3: 1.5}, 4, job="sync")])
    metrics.observe([row("loss", 4, {0: 1.0, 1: math.nan, 2: math.inf, 3: 1.5}, 4, late=1, job="sync")])
    metrics.observe(step_rows(16, 3))  # a late-arriving older step of the main job: latest stays at 5
    metrics.observe([row("gpu.nvlink_crc_flit_errors_delta", 5000, {0: 1.0, 1: 2.0}, 16, width_ms=1000),
                     row("gpu.power_watts", 5000, {r: 300.0 + r for r in range(16)}, 16, width_ms=1000)])
    events.raise_("hang", "sync", step=4, ranks=[2], severity="critical")
    events.raise_("straggler", f"{JOB}@3", step=8, ranks=[3], severity="warning")
    return metrics


def exposition() -> list[str]:
    return sorted(representative().render()[1].decode().splitlines())


def test_the_exposition_is_the_recorded_one():
    recorded = GOLDEN.read_text().splitlines()
    now = exposition()
    missing, extra = sorted(set(recorded) - set(now)), sorted(set(now) - set(recorded))
    assert not missing and not extra, f"lines gone: {missing[:20]}\nlines new: {extra[:20]}"
    assert now == recorded, "same lines, different multiplicities"
    assert len(now) > 300, "the representative state covers every family"


def test_each_collector_describes_what_it_collects_without_computing_a_value():
    """prometheus_client's custom collector contract: `describe()` names the families (the registry checks them
    for clashes) and computes nothing; every fixed family it names is collected; the hardware collector's other
    families are named after the probes' readings, so only its aggregates are described."""
    metrics = representative()
    assert len(metrics.collectors) == 8
    for collector in metrics.collectors:
        described = list(collector.describe())
        assert described and all(not family.samples for family in described), collector
        collected = {family.name for family in collector.collect()}
        if type(collector).__name__ == "Hardware":
            assert {family.name for family in described} <= collected
            assert all(name.startswith(("telemetry_gpu_", "telemetry_nic_", "telemetry_ib_", "telemetry_network_"))
                       for name in collected)
        else:
            assert {family.name for family in described} == collected, collector


if __name__ == "__main__":
    GOLDEN.parent.mkdir(exist_ok=True)
    GOLDEN.write_text("\n".join(exposition()) + "\n")
    print(f"wrote {GOLDEN}")
