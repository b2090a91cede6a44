"""The root's Prometheus exposition (issue 4, item 2): names, units, labels and values from finalised
windows; bounded cardinality (never a label per rank: 1,024 ranks give the same series as 16);
`promtool check metrics` clean; a fresh registry per root; and the wiring in a real in-process root
(/metrics, the events endpoints, detectors fed by the real finaliser)."""

from __future__ import annotations

import math
import re
import time

import numpy as np
import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from collectors.common.keys import Key
from collectors.detectors import EventLog
from collectors.root.job_figures import hardware_family
from collectors.root.metrics import RootMetrics
from collectors.root.store import Row
from helpers_tree import RawChild, api_get, make_root, stop_all, wait_for
from prometheus_support import promtool_check
from telemetry.summary import Summary
from telemetry.v1 import forward_pb2

JOB = "train"


def summary(values: dict[int, float]) -> Summary:
    return Summary.from_arrays(np.array(list(values.values()), dtype=np.float64),
                               np.array(list(values), dtype=np.int64))


def row(metric: str, index: int, values: dict[int, float], expected: int = 16, late: int = 0, width_ms: int = 0,
        job: str = JOB) -> Row:
    return Row(Key(job, metric, index, width_ms), expected, summary(values), late, time.time_ns())


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def with_attempt(labels: dict[str, str]) -> dict[str, str]:
    """A job's series carry its attempt apart (attempt="0": a job without attempts)."""
    return {"attempt": "0", **labels} if "job" in labels else labels


def value(text: str, name: str, **labels: str) -> float:
    return samples(text)[(name, tuple(sorted(with_attempt(labels).items())))]


def step_rows(world: int, step: int, slow_rank: int | None = None) -> list[Row]:
    rng = np.random.default_rng(step)
    step_time = {r: 0.1 + 0.001 * rng.random() for r in range(world)}
    if slow_rank is not None:
        step_time[slow_rank] = 0.5
    return [
        row("step_time", step, step_time, world),
        row("loss", step, {r: 2.0 + 0.01 * r for r in range(world)}, world),
        row("grad_norm", step, {r: 1.0 for r in range(world)}, world),
        row("mfu", step, {r: 0.4 + 0.001 * (r % 10) for r in range(world)}, world),
        row("dataloader_wait", step, {r: 0.002 for r in range(world)}, world),
        row("tokens_per_s", step, {r: 1000.0 for r in range(world)}, world),
    ]


def fed(world: int = 16, steps: int = 5, **collaborators) -> tuple[RootMetrics, EventLog]:
    """A 16-rank job fed 5 steps with a straggler, progress and hardware, a host's counters, events; the
    root's collaborators (RootMetrics' arguments) as given, else a fixed liveness and delivery counters."""
    events = EventLog(None)
    live = {"world_size": world, "alive": world - 2, "stuck": 1, "dead": 1}
    metrics = RootMetrics(events, **{"liveness": lambda job: live, "detector_errors": lambda: 0,
                                     "counters": lambda: {"sdk_dropped": 3, "late": 2, "duplicates": 1},
                                     **collaborators})
    for step in range(1, steps + 1):
        metrics.observe(step_rows(world, step, slow_rank=world - 1))
    metrics.observe([row("progress.current_step", 5000, {r: 5.0 for r in range(world - 1)}, world, width_ms=1000)])
    metrics.observe([row("gpu.temperature_celsius", 5000, {r: 60.0 + r % 30 for r in range(world)}, world,
                         width_ms=1000)])
    for second in (5000, 6000):
        metrics.observe([row("gpu.xid_errors_delta", second, {r: float(r == 2) for r in range(world)}, world,
                             width_ms=1000)])
    metrics.observe([row("nic.rx_errors_delta", 5000, {4: 3.0, 7: 1.0}, 0, width_ms=1000, job="_host:node0"),
                     row("ib.symbol_error_delta", 5000, {1: 2.0}, 0, width_ms=1000, job="_host:node0"),
                     row("nic.rx_errors_total", 5000, {4: 90.0}, 0, width_ms=1000, job="_host:node0")])
    events.raise_("straggler", JOB, step=3, ranks=[world - 1], severity="warning")
    events.raise_("nonfinite", JOB, step=2, ranks=[1], severity="critical")
    events.clear("nonfinite", JOB)
    return metrics, events


def test_panel_figures_with_units_and_stats():
    metrics, _ = fed()
    content_type, body = metrics.render()
    text = body.decode()
    assert content_type.startswith("text/plain; version=0.0.4")
    assert value(text, "telemetry_step_time_seconds", job=JOB, stat="max") == 0.5
    assert 0.1 <= value(text, "telemetry_step_time_seconds", job=JOB, stat="p50") <= 0.102
    for stat in ("p50", "p90", "p99", "max", "min", "mean"):
        for name in ("telemetry_step_time_seconds", "telemetry_loss", "telemetry_grad_norm", "telemetry_mfu_ratio",
                     "telemetry_dataloader_wait_seconds"):
            assert (name, (("attempt", "0"), ("job", JOB), ("stat", stat))) in samples(text), (name, stat)
    assert value(text, "telemetry_loss", job=JOB, stat="min") == 2.0
    assert value(text, "telemetry_step_time_slowest_rank", job=JOB) == 15
    assert value(text, "telemetry_step_time_top_rank", job=JOB, position="1") == 15
    assert value(text, "telemetry_step_time_top_seconds", job=JOB, position="1") == 0.5
    assert {k[1] for k in samples(text) if k[0] == "telemetry_step_time_top_rank"} == {
        (("attempt", "0"), ("job", JOB), ("position", str(p))) for p in range(1, 6)}
    wait = value(text, "telemetry_step_collective_wait_seconds", job=JOB)
    assert wait == pytest.approx(0.4, abs=0.002)
    assert value(text, "telemetry_collective_wait_seconds_total", job=JOB) == pytest.approx(5 * wait, rel=0.01)
    assert value(text, "telemetry_collective_wait_rank_seconds_total", job=JOB) == pytest.approx(
        5 * (16 * 0.5 - sum(0.1 for _ in range(15)) - 0.5), rel=0.05)
    assert value(text, "telemetry_steps_total", job=JOB) == 5 and value(text, "telemetry_last_step", job=JOB) == 5
    assert value(text, "telemetry_world_size", job=JOB) == 16
    assert value(text, "telemetry_ranks_reporting", job=JOB) == 15
    assert value(text, "telemetry_ranks", job=JOB, state="dead") == 1
    assert value(text, "telemetry_metric", job=JOB, metric="tokens_per_s", stat="mean") == 1000.0
    assert value(text, "telemetry_events_active", job=JOB, kind="straggler") == 1
    assert value(text, "telemetry_events_active", job=JOB, kind="nonfinite") == 0
    assert value(text, "telemetry_events_total", job=JOB, kind="nonfinite") == 1
    assert value(text, "telemetry_events_total", job=JOB, kind="hang") == 0, "every kind, so queries have data"
    assert value(text, "telemetry_delivery_sdk_dropped_total") == 3
    assert value(text, "telemetry_delivery_bad_inputs_total") == 0
    # hardware: gauges by stat, counters summed from the per-sample deltas, aggregates, _host jobs
    assert value(text, "telemetry_gpu_temperature_celsius", job=JOB, stat="max") == 75.0
    assert value(text, "telemetry_gpu_xid_errors_total", job=JOB) == 2.0
    assert value(text, "telemetry_nic_rx_errors_total", job="_host:node0") == 4.0
    assert value(text, "telemetry_network_errors_total", job="_host:node0") == 6.0
    assert not any(k[0].startswith("telemetry_nic_rx_errors_total_total") for k in samples(text))


def test_names_types_and_help_follow_prometheus_conventions():
    metrics, _ = fed()
    text = metrics.render()[1].decode()
    families = list(text_string_to_metric_families(text))
    names = [f.name for f in families]
    assert len(names) == len(set(names)), "one family per name"
    for family in families:
        assert family.name.startswith("telemetry_") and family.documentation, family.name
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", family.name), family.name
        if family.type == "counter":
            assert all(s.name.endswith("_total") for s in family.samples), family.name
    assert "# TYPE telemetry_step_collective_wait_seconds gauge" in text
    assert "# TYPE telemetry_collective_wait_seconds_total counter" in text
    assert hardware_family("gpu.temperature_celsius") == ("telemetry_gpu_temperature_celsius", False)
    assert hardware_family("gpu.ecc_uncorrected_delta") == ("telemetry_gpu_ecc_uncorrected", True)
    assert hardware_family("gpu.ecc_uncorrected_total") is None and hardware_family("loss") is None


def test_promtool_check_metrics_is_clean():
    metrics, _ = fed()
    checked = promtool_check(metrics.render()[1].decode())
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert checked.stdout.strip() == "", f"promtool lint findings:\n{checked.stdout}"
    empty = RootMetrics()  # before any job: HELP/TYPE only, still valid
    checked = promtool_check(empty.render()[1].decode())
    assert checked.returncode == 0 and checked.stdout.strip() == "", checked.stdout + checked.stderr


def test_cardinality_does_not_grow_with_ranks_and_no_label_names_a_rank():
    small = samples(fed(world=16)[0].render()[1].decode())
    large = samples(fed(world=1024)[0].render()[1].decode())
    assert set(small) == set(large), set(small) ^ set(large)
    labels = {name for key in small for name, _ in key[1]}
    assert labels <= {"job", "attempt", "stat", "position", "kind", "state", "metric"}, labels
    assert value_of(large, "telemetry_step_time_slowest_rank", job=JOB) == 1023


def value_of(parsed: dict, name: str, **labels: str) -> float:
    return parsed[(name, tuple(sorted(with_attempt(labels).items())))]


def test_a_registered_job_is_exported_before_its_first_window():
    """Ranks registered (the tree's liveness knows the job): world size, liveness and event counters at 0
    exist at once, so an event raised early is seen going 0 -> 1 (increase() needs that)."""
    events = EventLog(None)
    metrics = RootMetrics(events, liveness=lambda job: {"world_size": 8, "alive": 8, "stuck": 0, "dead": 0},
                          jobs=lambda: ["early", "_host:node3"])
    text = metrics.render()[1].decode()
    assert value(text, "telemetry_world_size", job="early") == 8
    assert value(text, "telemetry_events_total", job="early", kind="straggler") == 0
    assert value(text, "telemetry_ranks", job="early", state="alive") == 8
    assert 'job="_host:node3"' not in text, "a host's pseudo-job is no training job"
    assert "telemetry_step_time_seconds{" not in text


def test_each_root_has_its_own_registry_and_late_nonfinite_counts_once():
    a, b = RootMetrics(), RootMetrics()
    assert a.registry is not b.registry and a.registry is not REGISTRY
    a.observe([row("loss", 1, {0: 1.0, 1: math.nan})])
    a.observe([row("loss", 1, {0: 1.0, 1: math.nan, 2: math.inf}, late=1)])  # the late delta adds rank 2's Inf
    a.observe([row("loss", 1, {0: 1.0, 1: math.nan, 2: math.inf}, late=2)])  # a resend: nothing new
    text = a.render()[1].decode()
    assert value(text, "telemetry_nonfinite_values_total", job=JOB, metric="loss") == 2
    assert value(text, "telemetry_windows_late_total", job=JOB) == 2
    assert "telemetry_loss{" in text and "telemetry_loss{" not in b.render()[1].decode()


# ------------------------------------------------------------------ wired into a real root
def test_real_root_serves_metrics_and_events(tmp_path):
    root = make_root(tmp_path / "root.db")
    child = None
    try:
        assert root.wiring is not None and root.wiring.thread.is_alive()
        child = RawChild(root.address, "rack0")
        for step in range(1, 11):  # the detector's first 5 steps are its warm-up
            values = {r: (0.5 if r == 3 and step >= 7 else 0.1 + 0.001 * r) for r in range(4)}
            windows = [forward_pb2.WindowSummary(key=Key(JOB, "step_time", step).to_proto(),
                                                 summary=summary(values).to_proto(), expected=4)]
            child.batch(*windows)
        status, body = wait_for(lambda: (lambda r: r if r[1]["events"] else None)(
            api_get(root.api_address, f"/api/v1/jobs/{JOB}/events")), what="a straggler event")
        assert status == 200
        (event,) = body["events"]
        assert event["kind"] == "straggler" and event["ranks"] == [3] and event["step"] == 7
        assert api_get(root.api_address, f"/api/v1/jobs/{JOB}/events?status=closed")[1]["events"] == []
        assert api_get(root.api_address, f"/api/v1/jobs/{JOB}/events?kind=straggler&since_id={event['id']}"
                       )[1]["events"] == []
        assert api_get(root.api_address, f"/api/v1/jobs/{JOB}/events?last=0")[0] == 400
        assert api_get(root.api_address, f"/api/v1/jobs/{JOB}/events?status=maybe")[0] == 400
        assert api_get(root.api_address, "/api/v1/events")[1]["events"][0]["id"] == event["id"]
        text = _get_text(root.api_address, "/metrics")
        assert value(text, "telemetry_step_time_slowest_rank", job=JOB) == 3
        assert value(text, "telemetry_events_active", job=JOB, kind="straggler") == 1
        assert value(text, "telemetry_detector_errors_total") == 0
        assert value(text, "telemetry_delivery_unheld_releases_total") == 0  # issue 27: every tier's bounds
        assert value(text, "telemetry_delivery_reply_streams_cut_total") == 0
        checked = promtool_check(text)
        assert checked.returncode == 0 and checked.stdout.strip() == "", checked.stdout + checked.stderr
        # stored in the root's own database file, in an `events` table
        import sqlite3
        with sqlite3.connect(tmp_path / "root.db") as db:
            assert db.execute("SELECT kind, status FROM events").fetchall() == [("straggler", "open")]
    finally:
        if child is not None:
            child.close()
        stop_all(root)
    wait_for(lambda: not root.wiring.thread.is_alive(), what="the detectors' thread to stop with the server")


def _get_text(address: str, path: str) -> str:
    import urllib.request
    with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as reply:
        return reply.read().decode()


def test_the_slowest_rank_of_a_synchronous_job_comes_from_collective_arrival():
    """Under synchronous collectives every rank's step_time is the slowest one's (its argmax is noise): the
    slowest-rank, top and wait figures follow collective_arrival once the job logs it."""
    m = RootMetrics()
    walls = {r: 0.31 + 0.001 * ((r * 7) % 4) for r in range(4)}    # all ~equal; argmax rank 1 by noise
    arrivals = {r: (0.3 if r == 2 else 0.1) for r in range(4)}      # rank 2 is the one the others wait for
    m.observe([row("step_time", 5, walls), row("collective_arrival", 5, arrivals)])
    text = m.render()[1].decode()
    assert value(text, "telemetry_step_time_slowest_rank", job=JOB) == 2
    assert value(text, "telemetry_step_time_top_rank", job=JOB, position="1") == 2
    assert value(text, "telemetry_step_collective_wait_seconds", job=JOB) == pytest.approx(0.2)
    assert value(text, "telemetry_collective_wait_rank_seconds_total", job=JOB) == pytest.approx(0.6)
    other = RootMetrics()  # without arrivals, step_time is all there is
    other.observe([row("step_time", 5, walls)])
    assert value(other.render()[1].decode(), "telemetry_step_time_slowest_rank", job=JOB) == 1


def test_the_slowest_rank_of_a_job_logging_waits_is_the_one_that_waits_least():
    """Issue 24: a job that logs collective_wait (every real torch.distributed job through the SDK) is read from
    that, whatever else it logs: the rank that waits least is the one the others wait for, even where every rank
    reaches the step's last collective together (its collective_arrival names nobody); the top ranks are those
    that worked longest (work_time); the waits are p50 - min per step and sum - count x min across ranks."""
    m = RootMetrics()
    walls = {r: 0.5 for r in range(4)}
    arrivals = {r: 0.4 + 0.001 * ((r * 7) % 4) for r in range(4)}  # equal: argmax rank 1 by noise
    waits = {r: (0.05 if r == 3 else 0.25) for r in range(4)}       # rank 3 is the one the others wait for
    work = {r: 0.5 - w for r, w in waits.items()}
    for step in (5, 6):
        m.observe([row("step_time", step, walls), row("collective_arrival", step, arrivals),
                   row("collective_wait", step, waits), row("work_time", step, work)])
    text = m.render()[1].decode()
    assert value(text, "telemetry_step_time_slowest_rank", job=JOB) == 3
    assert value(text, "telemetry_step_time_top_rank", job=JOB, position="1") == 3
    assert value(text, "telemetry_step_time_top_seconds", job=JOB, position="1") == pytest.approx(0.45)
    assert value(text, "telemetry_step_collective_wait_seconds", job=JOB) == pytest.approx(0.2)
    assert value(text, "telemetry_collective_wait_seconds_total", job=JOB) == pytest.approx(0.4)
    assert value(text, "telemetry_collective_wait_rank_seconds_total", job=JOB) == pytest.approx(1.2)


def test_a_jobs_attempt_is_a_label_of_its_own_and_a_forgotten_attempt_leaves():
    """Issue 17: attempt N of job J (the tree's J@N) is job="J",attempt="N" on every per-job family; an attempt
    forgotten like a finished job (all its ranks closed, or idle) takes its series with it, so attempts
    never accumulate."""
    events = EventLog(None)
    worlds = {JOB: 4, f"{JOB}@7": 2}  # the tree's liveness is asked by the scoped name
    metrics = RootMetrics(events, liveness=lambda job: {"world_size": worlds[job], "alive": worlds[job], "stuck": 0,
                                                        "dead": 0})
    metrics.observe(step_rows(4, 5))
    metrics.observe([Row(Key(f"{JOB}@7", r.key.metric, r.key.index, 0), r.expected, r.summary, 0, time.time_ns())
                     for r in step_rows(2, 3)])
    events.raise_("straggler", f"{JOB}@7", step=3, ranks=[1], severity="warning")
    text = metrics.render()[1].decode()
    assert value(text, "telemetry_last_step", job=JOB, attempt="7") == 3
    assert value(text, "telemetry_world_size", job=JOB, attempt="7") == 2
    assert value(text, "telemetry_last_step", job=JOB, attempt="0") == 5  # a job without attempts: "0"
    assert value(text, "telemetry_events_active", job=JOB, attempt="7", kind="straggler") == 1
    assert value(text, "telemetry_events_active", job=JOB, attempt="0", kind="straggler") == 0
    assert "@" not in text, "no label value carries the old job@attempt form"
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if "job" in sample.labels:
                assert "attempt" in sample.labels, sample
    events.close_job(f"{JOB}@7")  # as the root's detectors do when they forget a finished attempt
    metrics.forget(f"{JOB}@7")
    text = metrics.render()[1].decode()
    assert 'attempt="7"' not in text and value(text, "telemetry_last_step", job=JOB, attempt="0") == 5
