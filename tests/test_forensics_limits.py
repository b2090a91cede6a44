"""Forensics that can never hurt training (issue 26 item 3): on-demand captures are rate-limited and one per
rank in flight, the SDK answers on one thread with bounded work, the root stores only what it asked for
within byte budgets, and a capture it cannot store whole is answered with its error, never left pending.
Real root (gRPC and HTTP) with a hand-driven child; the flood at the end runs a real torchrun job."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pyroaring import BitMap

from bench.forensics_flood import post_capture
from collectors.root.forensics import ForensicsStore
from helpers_tree import RawChild, api_get, make_root, stop_all, wait_for
from telemetry.sdk.capture import Responder
from telemetry.v1 import forensics_pb2, forward_pb2

pytestmark = pytest.mark.timeout(120)


def _live(root, job: str, world: int, sender: str = "child-0") -> tuple[RawChild, forward_pb2.RankStates]:
    """A hand-driven child that covers every rank of `job`, registered at the root."""
    child = RawChild(root.address, sender)
    states = forward_pb2.RankStates(job=job, world_size=world, alive=BitMap(range(world)).serialize())
    child.send(forward_pb2.SummaryBatch(sender_id=sender, seq=1, ranks=[states]))
    wait_for(lambda: root.liveness(job)["alive"] == world, 10, what=f"{job} live at the root")
    return child, states


def _requests(child: RawChild, timeout: float = 10.0) -> list[forensics_pb2.CaptureRequest]:
    """The next capture requests sent down to `child`."""
    while True:
        ack = child.ack(timeout)
        assert ack is not None, child.error
        if ack.capture_requests:
            return list(ack.capture_requests)


def _answered(api: str, url: str, timeout: float = 15.0) -> dict:
    def done() -> dict | None:
        status, body = api_get(api, url)
        assert status == 200, body
        return body if not body["pending"] else None
    return wait_for(done, timeout, what=f"every capture of {url}")


def _capture(request: forensics_pb2.CaptureRequest, rank: int, **fields: object) -> forensics_pb2.Capture:
    return forensics_pb2.Capture(request_id=request.request_id, job=request.job, attempt=request.attempt, rank=rank,
                                 source="sdk", captured_at_ns=1, **fields)


DEEP = "[" * 100_000 + "]" * 100_000
MALFORMED = {
    0: json.dumps({"version": "2", "pg_config": [], "pg_status": [], "entries": [[1, 2], "x"]}),  # lists for objects
    1: DEEP,                                                                                      # 100k-deep nesting
    2: json.dumps({"entries": [{"process_group": [[0], ["default_pg"]]}], "pg_config": {"": []}}),
    3: json.dumps([{"entries": []}]),
}


def test_a_capture_whose_flight_recorder_is_malformed_is_answered_with_its_error_never_pending(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    child = None
    try:
        child, states = _live(root, "fx", 4)
        status, headers = post_capture(root.api_address, "fx", [0, 1, 2, 3])
        assert status == 202
        [request] = _requests(child)
        child.send(forward_pb2.SummaryBatch(sender_id="child-0", seq=2, ranks=[states], captures=[
            _capture(request, rank, stacks="Thread 1 ...", flight_recorder=text) for rank, text in MALFORMED.items()]))
        body = _answered(root.api_address, f"/api/v1/jobs/fx/forensics/{request.request_id}")
        assert [c["rank"] for c in body["captures"]] == [0, 1, 2, 3]
        for capture in body["captures"]:
            assert "malformed" in capture["error"] or "not stored whole" in capture["error"], capture
            assert capture["stacks"] in ("Thread 1 ...", ""), capture
        # Nothing was written for torchfrtrace from a malformed recorder.
        assert not list((tmp_path / "root.forensics").rglob("rank_*"))
    finally:
        if child is not None:
            child.close()
        stop_all(root)


def test_captures_of_ranks_never_asked_are_refused_and_a_request_stays_within_its_byte_budget(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    child = None
    try:
        child, states = _live(root, "fx", 512)
        assert post_capture(root.api_address, "fx", [0])[0] == 202
        [request] = _requests(child)
        big = "s" * (250 * 1024)
        forged = [_capture(request, rank, stacks=big) for rank in range(1, 301)]  # 300 x 250 KiB, never asked
        for seq, start in enumerate(range(0, 300, 3), start=2):  # units under the 16 MiB message cap
            child.send(forward_pb2.SummaryBatch(sender_id="child-0", seq=seq, ranks=[states],
                                                captures=forged[start:start + 3]))
        child.send(forward_pb2.SummaryBatch(sender_id="child-0", seq=200, ranks=[states],
                                            captures=[_capture(request, 0, stacks="Thread 1 real")]))
        body = _answered(root.api_address, f"/api/v1/jobs/fx/forensics/{request.request_id}")
        assert [(c["rank"], c["stacks"]) for c in body["captures"]] == [(0, "Thread 1 real")]
        wait_for(lambda: root.wiring.forensics.counts["unasked"] == 300, 15, what="300 unasked captures counted")
        on_disk = sum(p.stat().st_size for p in (tmp_path / "root.forensics").rglob("*") if p.is_file())
        assert on_disk < 64 * 1024, on_disk
        _, metrics = _metrics(root.api_address)
        assert 'telemetry_forensics_captures_total{outcome="unasked"} 300.0' in metrics
    finally:
        if child is not None:
            child.close()
        stop_all(root)


def test_the_store_keeps_each_request_and_each_job_within_its_byte_budget(tmp_path: Path) -> None:
    store = ForensicsStore(tmp_path / "f", max_request_bytes=100_000, max_job_bytes=250_000)
    for i in range(6):
        store.open_request("j", f"r{i}", {"ranks": [0, 1]})
        for rank in (0, 1):
            assert store.save({"job": "j", "request_id": f"r{i}", "rank": rank, "stacks": "s" * 60_000,
                               "error": ""}, None)
    kept = sorted(p.name for p in (tmp_path / "f" / "job-j").iterdir())
    on_disk = sum(p.stat().st_size for p in (tmp_path / "f").rglob("*") if p.is_file())
    assert on_disk <= 250_000 and kept[-1] == "r5" and len(kept) < 6, (kept, on_disk)
    [first, second] = store.captures("j", "r5")
    assert first["stacks"] and not second["stacks"] and "byte budget" in second["error"]  # over the request's


def _metrics(api: str) -> tuple[int, str]:
    with urllib.request.urlopen(f"http://{api}/metrics", timeout=10) as reply:
        return reply.status, reply.read().decode()


def test_on_demand_captures_are_rate_limited_and_one_per_rank_in_flight(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    child = None
    try:
        child, states = _live(root, "fx", 64)
        status, _ = post_capture(root.api_address, "fx", [0])
        assert status == 202
        [request] = _requests(child)
        # Rank 0's capture is in flight: asking again is refused, with when to retry.
        status, headers = post_capture(root.api_address, "fx", [0, 1])
        assert status == 429 and int(headers["Retry-After"]) >= 1, (status, headers)
        child.send(forward_pb2.SummaryBatch(sender_id="child-0", seq=2, ranks=[states],
                                            captures=[_capture(request, 0, stacks="s")]))
        _answered(root.api_address, f"/api/v1/jobs/fx/forensics/{request.request_id}")
        assert post_capture(root.api_address, "fx", [0])[0] == 202  # stored: rank 0 may be asked again
        # A flood: the job's burst is admitted, the rest refused at once (each with Retry-After), none a 5xx.
        answers = [post_capture(root.api_address, "fx", [rank]) for rank in range(2, 62)]
        codes = [code for code, _ in answers]
        assert codes.count(202) <= 10 and codes.count(429) >= 50 and set(codes) <= {202, 429}, codes
        assert all(int(h["Retry-After"]) >= 1 for code, h in answers if code == 429)
        _, metrics = _metrics(root.api_address)
        refused = {line.split('"')[1]: float(line.split()[-1]) for line in metrics.splitlines()
                   if line.startswith("telemetry_forensics_refused_requests_total{")}
        assert refused["in_flight"] == 1 and refused["job_rate"] >= 50, refused
    finally:
        if child is not None:
            child.close()
        stop_all(root)


def test_the_sdk_answers_a_flood_of_requests_on_one_thread_and_drops_the_excess() -> None:
    sent: list[forensics_pb2.RankCapture] = []
    gate = threading.Event()

    def send(capture: forensics_pb2.RankCapture) -> None:
        gate.wait(10)  # the first capture is slow: requests pile up behind it
        sent.append(capture)
    responder = Responder(lambda: None, send)
    before = threading.active_count()
    for i in range(1500):
        responder.request(forensics_pb2.CaptureRequest(request_id=f"od-{i}", job="fx", ranks=BitMap([0]).serialize()))
    assert threading.active_count() <= before + 1  # one thread, however many requests
    gate.set()
    wait_for(lambda: responder.answered == 1 + Responder.MAX_QUEUED, 10, what="the queued captures answered")
    assert responder.dropped == 1500 - 1 - Responder.MAX_QUEUED
    assert [c.request_id for c in sent] == [f"od-{i}" for i in range(1 + Responder.MAX_QUEUED)]


@pytest.mark.timeout(240)
def test_a_capture_flood_at_a_torchrun_job_leaves_its_ranks_bounded_and_its_exit_unchanged(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from bench.forensics_flood import run_job
    from bench.torchrun_jobs import root_and_agent
    with root_and_agent(tmp_path) as tree:
        result = run_job(tree, "flooded", world=3, steps=150, flood_threads=4, timeout=150)
    flood = result["flood"]
    assert result["exit"] == 0 and result["durable_ranks"] == 3, result
    assert result["steps_stored"] == 150, result
    assert flood is not None and set(flood["statuses"]) <= {"202", "429"}, result
    assert flood["statuses"].get("429", 0) > flood["statuses"].get("202", 0), result  # the root refused the flood
    assert result["rank_threads_max"] <= result["rank_threads_at_start"] + 2, result  # no thread per request
    assert all(value.isdigit() and int(value) >= 1 for value in result["retry_after"]), result
