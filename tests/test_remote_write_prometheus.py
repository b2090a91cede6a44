"""Remote-write from a real root to a real Prometheus (Debian's package, --web.enable-remote-write-receiver).

One job of 70 steps (two ranks, loss and step_time) goes to a root process (`telemetry collector
--remote-write URL`) through a hand-driven child:

1. steps 0-9, then the root is killed (SIGKILL) before its writer sent them, and started again on the same
   database: it reads back from its store what was finalised after its watermark and sends it;
2. steps 10-19 with Prometheus up; then Prometheus is stopped and steps 20-59 are sent while it is down,
   more samples than the root's queue holds (--remote-write-queue 300); then Prometheus is started again
   on the same storage, and the root catches up;
3. steps 60-69.

Then PromQL over the written series returns, for every step outside the outage and for the outage's newest
steps, exactly the root's figures (count, mean, min, max, p50, p90, p99, argmax/argmin ranks, the step index)
at the step's end; what is missing is only from the outage, is no more than the root counted as dropped
(queue_full), and everything the second root counted as sent is in Prometheus (nothing lost within the bound).
"""

from __future__ import annotations

import re
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from collectors.common.keys import Key
from collectors.sim.procs import Proc, free_port, python_module
from helpers_tree import RawChild, steps, wait_for
from prometheus_support import Prometheus, require, running_prometheus
from telemetry import Summary
from telemetry.v1 import forward_pb2

pytestmark = pytest.mark.timeout(180)

JOB, WORLD = "rw", 2
QUEUE, BATCH = 300, 50
PER_STEP = 2 * 9 + 1  # 7 figures and 2 ranks of each metric, and the step index
STATS = {"count": "count", "mean": "mean", "min": "min", "max": "max", "p50": "p50", "p90": "p90", "p99": "p99"}


def values(metric: str, step: int) -> np.ndarray:
    if metric == "loss":
        return np.array([2.0 / (step + 1) + 0.01 * rank for rank in range(WORLD)])
    return np.array([0.1 + 0.002 * ((step * 7 + rank * 3) % 5) for rank in range(WORLD)])


def batch(child: RawChild, base_ms: int, step: int) -> int:
    end_ns = (base_ms + step * 1000) * 1_000_000
    windows = [forward_pb2.WindowSummary(
        key=Key(JOB, metric, step).to_proto(), expected=WORLD,
        summary=Summary.from_arrays(values(metric, step), np.arange(WORLD), time_ns=end_ns).to_proto())
        for metric in ("loss", "step_time")]
    return child.batch(*windows)


def send(address: str, sender: str, base_ms: int, first: int, last: int) -> None:
    child = RawChild(address, sender)
    try:
        for step in range(first, last + 1):
            batch(child, base_ms, step)
        child.ack_for(child.seq, forward_pb2.Ack.DURABLE, timeout=30)
    finally:
        child.close()


def counters(api: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{api}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        found = re.match(r'^(telemetry_remote_write_\w+)(\{[^}]*\})? (\S+)$', line)
        if found:
            name, label_text, value = found.groups()
            reason = re.search(r'(?:reason|kind)="(\w+)"', label_text or "")
            out[f"{name}:{reason.group(1)}" if reason else name] = float(value)
    return out


def start_root(workdir: Path, port: int, api_port: int, url: str, batch: int = BATCH) -> Proc:
    argv = python_module("collectors.cli", "collector", "--id", "root", "--listen", f"127.0.0.1:{port}",
                         "--db", str(workdir / "root.db"), "--api", f"127.0.0.1:{api_port}", "--deadline-floor",
                         "0.5", "--remote-write", url, "--remote-write-label", "cluster=test",
                         "--remote-write-shards", "1", "--remote-write-batch", str(batch),
                         "--remote-write-queue", str(QUEUE))
    return Proc("root", argv, workdir).start()


def drained(api: str, steps_sent: int) -> dict[str, float] | None:
    """The root's counters once it queued the samples of `steps_sent` steps (at least; and of the steps it read
    back from the store at start) and sent them all."""
    found = counters(api)
    replayed_steps = found.get("telemetry_remote_write_replayed_rows:resent", 0) // 2  # loss and step_time
    if found.get("telemetry_remote_write_samples_total", 0) < (steps_sent + replayed_steps) * PER_STEP:
        return None
    return found if found.get("telemetry_remote_write_pending_samples") == 0 else None


def total_samples(prom: Prometheus) -> int:
    result = prom.api("query", query='{__name__=~"telemetry_.+"}[1h]', time=f"{time.time() + 1:.3f}")
    return sum(len(series["values"]) for series in result["data"]["result"])


def test_every_step_reaches_prometheus_across_a_root_restart_and_an_outage(tmp_path: Path) -> None:
    require("prometheus")
    prom_port, port, api_port = free_port(), free_port(), free_port()
    url = f"http://127.0.0.1:{prom_port}/api/v1/write"
    address, api = f"127.0.0.1:{port}", f"127.0.0.1:{api_port}"
    base_ms = int(time.time() * 1000) - 120_000  # step s ended at base + s seconds
    storage = tmp_path / "prometheus"

    with running_prometheus(storage, prom_port, [], receiver=True) as prom:
        # the first root takes steps 0-9 and is killed (SIGKILL) before its writer's first request (it waits
        # 1 s for a batch of 5,000): the steps are in its store, and the store is the writer's log
        root = start_root(tmp_path, port, api_port, url, batch=5000)
        try:
            send(address, "child-a", base_ms, 0, 9)
        finally:
            root.kill()
        before_restart = total_samples(prom)
        root = start_root(tmp_path, port, api_port, url)
        send(address, "child-b", base_ms, 10, 19)
        wait_for(lambda: drained(api, 10), timeout=30, what="steps 0-19 sent")
        replayed = counters(api)["telemetry_remote_write_replayed_rows:resent"]
        if before_restart < 10 * PER_STEP:  # the crash left some unsent: the second root read them back
            assert replayed >= 2 * (10 - before_restart // PER_STEP), (replayed, before_restart)
    try:
        send(address, "child-b2", base_ms, 20, 59)  # Prometheus is down
        wait_for(lambda: counters(api).get("telemetry_remote_write_dropped_samples_total:queue_full", 0) > 0,
                 timeout=30, what="the queue overflowing while the receiver is down")
        assert counters(api)["telemetry_remote_write_retries_total"] > 0
        with running_prometheus(storage, prom_port, [], receiver=True) as prom:
            wait_for(lambda: drained(api, 50), timeout=40, what="the root catching up")
            send(address, "child-c", base_ms, 60, 69)
            final = wait_for(lambda: drained(api, 60), timeout=30, what="steps 60-69 sent")
            held = total_samples(prom)
            written = prom.api("query", query=f'{{__name__=~"telemetry_step_.+", job="{JOB}"}}[1h]',
                               time=f"{time.time() + 1:.3f}")["data"]["result"]
        rows = {metric: steps(api, JOB, metric) for metric in ("loss", "step_time")}
    finally:
        root.stop()

    # the second root's accounts balance, and Prometheus holds exactly what it counted as sent
    dropped = {reason: final[f"telemetry_remote_write_dropped_samples_total:{reason}"]
               for reason in ("queue_full", "retries_exhausted", "rejected", "shutdown")}
    assert final["telemetry_remote_write_samples_total"] == final["telemetry_remote_write_sent_samples_total"] + sum(
        dropped.values())
    assert dropped["queue_full"] > 0 and dropped["retries_exhausted"] == dropped["rejected"] == 0
    # (a step the first root sent before the crash and the second one read back is the same sample twice:
    # Prometheus keeps one)
    sent = final["telemetry_remote_write_sent_samples_total"]
    assert sent - replayed // 2 * PER_STEP <= held - before_restart <= sent

    # what Prometheus holds, by (family, metric, stat) and step
    got: dict[tuple[str, str, str], dict[int, float]] = {}
    for series in written:
        labels = series["metric"]
        assert labels["cluster"] == "test" and labels["attempt"] == "0"
        name = (labels["__name__"], labels.get("metric", ""), labels.get("stat", ""))
        for ts, value in series["values"]:
            offset = round(float(ts) * 1000) - base_ms
            assert offset % 1000 == 0, (name, ts)  # stamped at the step's end
            got.setdefault(name, {})[offset // 1000] = float(value)
    missing: set[tuple[int, tuple[str, str, str]]] = set()
    for metric in ("loss", "step_time"):
        assert [row["step"] for row in rows[metric]] == list(range(70))
        for row in rows[metric]:
            step = row["step"]
            expected = {("telemetry_step_figure", metric, stat): float(row[column]) for stat, column in STATS.items()}
            expected[("telemetry_step_argmax_rank", metric, "")] = float(row["argmax"])
            expected[("telemetry_step_argmin_rank", metric, "")] = float(row["argmin"])
            expected[("telemetry_step_index", "", "")] = float(step)
            for name, value in expected.items():
                if step in got.get(name, {}):
                    assert got[name][step] == pytest.approx(value, rel=1e-12), (name, step)
                else:
                    missing.add((step, name))
    missing_steps = {step for step, _ in missing}
    assert missing_steps <= set(range(20, 60)), sorted(missing_steps)  # only from the outage
    # every sample missing was counted as dropped; all that was dropped is missing, but for the goodput and
    # event samples (not step samples) that may have been queued during the outage too
    others = final["telemetry_remote_write_samples_total"] - (60 + replayed // 2) * PER_STEP
    assert dropped["queue_full"] - others <= len(missing) <= dropped["queue_full"]
    newest = set(range(60 - (QUEUE // 19) + 1, 70))  # the newest queue-full of the outage, and everything after
    assert not missing_steps & newest, sorted(missing_steps & newest)



def test_a_sample_prometheus_refuses_costs_only_its_own_series(tmp_path: Path) -> None:
    """Prometheus rolls back a whole request for one sample it refuses (a second value at a timestamp it holds):
    the writer splits the request until only that series' sample is lost, counted as rejected."""
    from collectors.root.remote_series import labels
    from collectors.root.remote_write import RemoteWriteConfig, RemoteWriter
    require("prometheus")
    port = free_port()
    now = int(time.time() * 1000)
    clash = labels("telemetry_test_clash", ())
    with running_prometheus(tmp_path / "prometheus", port, [], receiver=True) as prom:
        writer = RemoteWriter(RemoteWriteConfig(urls=(f"http://127.0.0.1:{port}/api/v1/write",), shards=1,
                                                flush_interval_s=0.1))
        writer.start()
        try:
            (endpoint,) = writer.endpoints
            endpoint.put([(clash, now, 1.0)])
            assert writer.flush(10)
            # the same timestamp with another value (what a second root could send), among 12 good series
            endpoint.put([(clash, now, 2.0), *[(labels("telemetry_test_good", (), s=str(k)), now, float(k))
                                               for k in range(12)]])
            assert writer.flush(20)
        finally:
            writer.close(2)
        c = endpoint.counters
        assert (c.sent, c.dropped["rejected"]) == (13, 1)
        good = prom.api("query", query="telemetry_test_good", time=f"{now / 1000 + 1:.3f}")["data"]["result"]
        assert sorted(float(s["value"][1]) for s in good) == [float(k) for k in range(12)]
        held = prom.api("query", query="telemetry_test_clash", time=f"{now / 1000 + 1:.3f}")["data"]["result"]
        assert [float(s["value"][1]) for s in held] == [1.0]
