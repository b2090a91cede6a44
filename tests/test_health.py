"""Honest health (issue 11 item 4): healthy only while flushes succeed; failures logged rate-limited;
nothing acknowledged durable that the root's store did not commit."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from grpc_health.v1 import health_pb2

from collectors.common.flushloop import FlushLoop
from helpers_tree import RawChild, health_status, make_root, stop_all, wait_for, window
from telemetry.v1 import forward_pb2

SERVING, NOT_SERVING = health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING


def test_a_failing_flush_is_logged_once_per_interval_with_a_count(caplog: pytest.LogCaptureFixture) -> None:
    def boom() -> None:
        raise OSError("disk full")

    loop = FlushLoop("test-flush", boom, interval_s=0.01, stale_after_s=0.5, log_every_s=3600)
    with caplog.at_level(logging.ERROR, logger="collectors.common.flushloop"):
        for _ in range(200):
            assert loop.once() is False
    assert len(caplog.records) == 1 and "disk full" in caplog.text
    assert loop.failures == 200


def test_health_follows_the_last_successful_flush() -> None:
    state = {"fail": False}

    def flush() -> None:
        if state["fail"]:
            raise OSError("store not writable")

    loop = FlushLoop("test-flush", flush, interval_s=0.01, stale_after_s=10.0)
    loop.once()
    assert loop.healthy()
    state["fail"] = True
    loop.once()
    assert loop.healthy(loop.last_ok + 9.9)          # one failure is not yet a verdict
    assert not loop.healthy(loop.last_ok + 10.0)     # ten seconds without a success is
    state["fail"] = False
    assert loop.once() and loop.healthy()


def test_root_whose_store_fails_is_not_serving_and_acknowledges_nothing_durable(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    root.flusher.stale_after_s = 1.0
    try:
        assert wait_for(lambda: health_status(root.address) == SERVING, what="SERVING at start")
        real_save = root.store.save
        failures = []

        def broken(rows, jobs, runs=None):
            failures.append(len(rows))
            raise OSError("database or disk is full")

        root.store.save = broken
        child = RawChild(root.address, "agent-x")
        child.ack(10)  # the hello unit
        seq = child.batch(window("j", "loss", 0, {0: 1.0, 1: 2.0}, expected=2))
        child.ack_for(seq, forward_pb2.Ack.RECEIVED)
        wait_for(lambda: len(failures) >= 3, what="the commit retried")
        assert wait_for(lambda: health_status(root.address) == NOT_SERVING, timeout=10,
                        what="NOT_SERVING while the store fails")
        assert health_status(root.address, "telemetry.v1.Collector") == NOT_SERVING
        assert not root.flusher.healthy()
        with pytest.raises(AssertionError):  # no DURABLE for what was not written
            child.ack_for(seq, forward_pb2.Ack.DURABLE, timeout=1.5)

        root.store.save = real_save
        child.ack_for(seq, forward_pb2.Ack.DURABLE, timeout=10)
        assert wait_for(lambda: health_status(root.address) == SERVING, timeout=10, what="SERVING again")
        with root.store.reader() as db:
            count = db.execute("SELECT count FROM windows WHERE job='j' AND metric='loss'").fetchone()[0]
        assert count == 2
        child.close()
    finally:
        stop_all(root)


def _metric(root, name: str) -> float:
    import urllib.request
    with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    raise AssertionError(f"{name} not exported")


def test_a_full_disk_is_not_serving_raises_an_event_and_resumes_when_space_returns(tmp_path: Path) -> None:
    """SQLite's max_page_count makes the store's disk full without privileges."""
    root = make_root(tmp_path / "root.db")
    root.flusher.stale_after_s = 1.0
    try:
        child = RawChild(root.address, "agent-x")
        child.ack(10)
        seq = child.batch(window("j", "loss", 0, {0: 1.0}, expected=1))
        child.ack_for(seq, forward_pb2.Ack.DURABLE)
        with root.store._lock:
            pages = root.store._db.execute("PRAGMA page_count").fetchone()[0]
            root.store._db.execute(f"PRAGMA max_page_count = {pages}")  # full from now on
        many = [window("j", "loss", step, {0: float(step)}, expected=1) for step in range(1, 301)]
        seq = child.batch(*many)  # more rows than the pages left can hold
        child.ack_for(seq, forward_pb2.Ack.RECEIVED)
        wait_for(lambda: root.finaliser.write_failures >= 2, what="commits failing on the full disk")
        assert _metric(root, "telemetry_store_writable") == 0.0
        assert _metric(root, "telemetry_store_write_failures_total") >= 2
        assert wait_for(lambda: health_status(root.address) == NOT_SERVING, what="NOT_SERVING while full")
        with pytest.raises(AssertionError):
            child.ack_for(seq, forward_pb2.Ack.DURABLE, timeout=1.5)
        with root.store._lock:
            root.store._db.execute("PRAGMA max_page_count = 1073741823")  # space again
        child.ack_for(seq, forward_pb2.Ack.DURABLE, timeout=10)
        assert wait_for(lambda: health_status(root.address) == SERVING, what="SERVING again")
        assert _metric(root, "telemetry_store_writable") == 1.0
        events = root.wiring.events.query("_root")
        assert [e["kind"] for e in events] == ["store"] and events[0]["status"] == "closed"
        with root.store.reader() as db:
            assert db.execute("SELECT count(*) FROM windows WHERE job='j'").fetchone()[0] == 301
        child.close()
    finally:
        stop_all(root)


def test_a_store_file_deleted_under_the_root_is_noticed_and_rewritten(tmp_path: Path) -> None:
    """SQLite would go on committing into the unlinked file (and acknowledging it durable); the root
    notices before the next commit, reopens a fresh file and writes again what it holds in memory."""
    db = tmp_path / "root.db"
    root = make_root(db)
    try:
        child = RawChild(root.address, "agent-x")
        child.ack(10)
        for step in range(3):
            seq = child.batch(window("j", "loss", step, {0: float(step)}, expected=1))
            child.ack_for(seq, forward_pb2.Ack.DURABLE)
        for path in tmp_path.glob("root.db*"):
            path.unlink()
        seq = child.batch(window("j", "loss", 3, {0: 3.0}, expected=1))
        child.ack_for(seq, forward_pb2.Ack.DURABLE)
        assert root.finaliser.files_lost == 1 and _metric(root, "telemetry_store_files_lost_total") == 1
        with root.store.reader() as reader:
            stored = [row[0] for row in reader.execute("SELECT idx FROM windows WHERE job='j' ORDER BY idx")]
        assert stored == [0, 1, 2, 3]  # the earlier steps were still in memory and were written again
        child.close()
    finally:
        stop_all(root)
