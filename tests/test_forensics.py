"""Forensics without torch (issue 13): the capture path through a real tree (agent -> rack -> root, in
process, real gRPC), the root's on-disk keeping and API, and every piece against hostile input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from pyroaring import BitMap

import telemetry
from collectors.common.validation import BadInput
from collectors.delivery.forensics import CaptureQueue, check_capture, request_ranks
from collectors.demo.view import top_frames
from collectors.root.forensics import ForensicsStore
from helpers_tree import api_get, make_agent, make_collector, make_root, stop_all, wait_for
from telemetry.sdk.capture import TRAINING_MARK, take, thread_stacks
from telemetry.v1 import forensics_pb2

pytestmark = pytest.mark.timeout(60)


def _post(api: str, path: str, body: object) -> tuple[int, dict]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(f"http://{api}{path}", data=data, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def test_an_on_demand_capture_travels_down_three_tiers_and_back(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    rack = agent = None
    runs = []
    blocker = threading.Event()
    worker = threading.Thread(target=lambda: blocker.wait(30), name="data-loader-worker", daemon=True)
    worker.start()
    try:
        rack = make_collector([root.address], "rack-0")
        agent = make_agent([rack.address], tmp_path / "a.sock", "agent-0")
        runs = [telemetry.init(job="fx", rank=r, world_size=2, agent=f"unix:{tmp_path / 'a.sock'}")
                for r in range(2)]
        for run in runs:
            with run.step(0):
                run.log(0, loss=1.0)
        # Both ranks registered and known at the root: a rank no child covers yet is answered "none" at once.
        wait_for(lambda: root.liveness("fx")["alive"] == 2, 15, what="both ranks of the job at the root")
        status, asked = _post(root.api_address, "/api/v1/jobs/fx/forensics", {"ranks": [1]})
        assert status == 202, asked
        assert asked["ranks"] == [1] and asked["request_id"].startswith("od-")

        def answered() -> dict | None:
            code, body = api_get(root.api_address, asked["url"])
            assert code == 200, body
            return body if not body["pending"] else None
        body = wait_for(answered, 20, what="rank 1's capture at the root")
        [capture] = body["captures"]
        assert capture["rank"] == 1 and capture["source"] == "sdk" and capture["error"] == "", (capture["error"], capture["reason"])
        # The SDK took every thread of its process (this test's): the blocked worker is there, in wait.
        assert '"data-loader-worker"' in capture["stacks"] and "in wait" in capture["stacks"]
        assert capture["flight_recorder"] is None  # no torch.distributed here
        assert capture["process"]["alive"] and capture["process"]["pid"] > 0
        assert body["ranks"] == [1] and body["reason"] == "on demand"
        # A rank nobody hosts is answered for at once (source none) instead of being waited for forever.
        status, asked = _post(root.api_address, "/api/v1/jobs/fx/forensics", {"ranks": [0, 7]})
        assert status == 202
        body = wait_for(answered, 20, what="ranks 0 and 7")
        assert [(c["rank"], c["source"]) for c in body["captures"]] == [(0, "sdk"), (7, "none")]
        assert "no child of the root covers" in body["captures"][1]["error"]
        # The CLI asks and prints for a person (and --json for scripts).
        cli = [sys.executable, "-m", "collectors.cli", "forensics", "--root", root.api_address, "fx"]
        shown = subprocess.run([*cli, "--ranks", "1"], capture_output=True, text=True, timeout=60)
        assert shown.returncode == 0, shown.stderr
        assert "rank 1 on" in shown.stdout and "source sdk" in shown.stdout and "data-loader-worker" in shown.stdout
        as_json = subprocess.run([*cli, "--ranks", "1", "--json"], capture_output=True, text=True, timeout=60)
        assert json.loads(as_json.stdout)["captures"][0]["rank"] == 1
        refused = subprocess.run([*cli, "--ranks", "x"], capture_output=True, text=True, timeout=60)
        assert refused.returncode == 2 and "--ranks must be" in refused.stderr
        missing = subprocess.run([*cli, "999"], capture_output=True, text=True, timeout=60)
        assert missing.returncode == 1 and "HTTP 404" in missing.stderr
    finally:
        blocker.set()
        for run in runs:
            run.close(timeout=5)
        stop_all(agent, rack, root)


def test_the_api_refuses_bad_capture_requests(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    try:
        api = root.api_address
        assert _post(api, "/api/v1/jobs/none/forensics", {"ranks": [1]})[0] == 404   # not a live job
        for bad in ({"ranks": "1"}, {"ranks": [-1]}, {"ranks": [True]}, {}, [1, 2], {"ranks": [1.5]}):
            status, body = _post(api, "/api/v1/jobs/x/forensics", bad)
            assert status == 400, (bad, body)
        assert _post(api, "/api/v1/jobs/x/forensics", b"{not json")[0] == 400
        assert _post(api, "/api/v1/jobs/x/forensics", b"x" * (65 * 1024))[0] == 413
        assert _post(api, "/api/v1/jobs/x/steps", {"ranks": [1]})[0] == 404
        assert api_get(api, "/api/v1/jobs/x/events/7/forensics")[0] == 404
        assert api_get(api, "/api/v1/jobs/x/events/abc/forensics")[0] == 400
        assert api_get(api, "/api/v1/jobs/x/forensics/..%2F..%2Fetc")[0] == 404
    finally:
        stop_all(root)


def test_the_store_keeps_hostile_names_inside_its_folder_and_evicts_the_oldest(tmp_path: Path) -> None:
    store = ForensicsStore(tmp_path / "f", max_requests=3)
    for i, job in enumerate(["..", "a/b", "../../x", "ok"]):
        store.open_request(job, f"event-{i}", {"ranks": [0]})
        assert store.save({"job": job, "request_id": f"event-{i}", "rank": 0, "stacks": "s"},
                          {"entries": [], "version": "2", "pg_config": {}})
    inside = sorted(p.relative_to(tmp_path / "f").parts[0] for p in (tmp_path / "f").glob("*/*"))
    assert len(inside) == 3 and all(part.startswith("job-") for part in inside), inside
    assert not (tmp_path / "x").exists()
    assert store.meta("..", "event-0") is None  # evicted (oldest)
    assert [c["rank"] for c in store.captures("ok", "event-3")] == [0]
    assert store.meta("ok", "../event-3") is None
    with pytest.raises(ValueError):
        store.open_request("ok", "../event-3", {})
    assert not store.save({"job": "ok", "request_id": "event-9", "rank": 0}, None)  # never asked


def test_captures_and_requests_with_hostile_fields_are_refused() -> None:
    good = forensics_pb2.Capture(request_id="event-1", job="j", rank=3, source="sdk", stacks="x")
    check_capture(good, 16)
    for field, value in (("source", "gdb"), ("request_id", ""), ("request_id", "x" * 65), ("rank", 16),
                         ("stacks", "x" * (256 * 1024 + 1)), ("job", "a b")):
        bad = forensics_pb2.Capture()
        bad.CopyFrom(good)
        setattr(bad, field, value)
        with pytest.raises(BadInput):
            check_capture(bad, 16)
    request = forensics_pb2.CaptureRequest(request_id="r", job="j", ranks=BitMap(range(65)).serialize())
    with pytest.raises(BadInput, match="at most 64"):
        request_ranks(request, 1024)
    with pytest.raises(BadInput, match="malformed"):
        request_ranks(forensics_pb2.CaptureRequest(request_id="r", job="j", ranks=b"\x01\x02garbage"), 1024)
    # the names a request and its captures share are refused by both, in the same words
    for field, value in (("request_id", ""), ("request_id", "x" * 65), ("job", "a b"), ("attempt", 2**63)):
        asked = forensics_pb2.CaptureRequest(request_id="r", job="j", ranks=BitMap([1]).serialize())
        answer = forensics_pb2.Capture()
        answer.CopyFrom(good)
        setattr(asked, field, value), setattr(answer, field, value)
        with pytest.raises(BadInput) as refused_request:
            request_ranks(asked, 16)
        with pytest.raises(BadInput) as refused_capture:
            check_capture(answer, 16)
        assert str(refused_request.value).replace("capture request attempt", "capture attempt") == \
            str(refused_capture.value), field


def test_the_capture_queue_is_bounded_and_fills_units_by_bytes() -> None:
    queue = CaptureQueue(max_pending=3, unit_bytes=2500)
    for i in range(5):
        queue.put(forensics_pb2.Capture(request_id=f"r{i}", stacks="x" * 1000))
    assert queue.dropped == 2 and len(queue) == 3
    assert [c.request_id for c in queue.take()] == ["r2", "r3"]
    assert [c.request_id for c in queue.take()] == ["r4"]
    big = CaptureQueue(unit_bytes=10)
    big.put(forensics_pb2.Capture(stacks="y" * 100))
    assert len(big.take()) == 1  # one capture always goes, whatever its size


def test_stacks_are_cut_from_the_outside_in_to_fit() -> None:
    """A capture 1,000 bytes short of the process's stacks cuts the longest from the outside in and keeps the
    stuck thread's innermost frame. The budget is counted from the process's threads: they are not only this
    test's (under pytest-xdist a worker keeps the daemon threads of the files it ran before; in a fresh-clone
    two-pass run a fixed 6,000 bytes went to other threads' stacks, each cut to a line, and this one's was left
    out). Hence 80 threads of its own beside it, which a fixed 6,000 bytes cannot hold."""
    stop = threading.Event()

    def deep(n: int) -> None:
        if n == 0:
            stop.wait(10)
            return
        deep(n - 1) if n % 2 else deep(n - 1)

    thread = threading.Thread(target=deep, args=(300,), name="deep-one", daemon=True)
    others = [threading.Thread(target=stop.wait, args=(10,), name=f"other-{i}", daemon=True) for i in range(80)]
    for started in (thread, *others):
        started.start()
    try:
        wait_for(lambda: "stop.wait" in thread_stacks(10**7), 5, what="the thread in its wait")
        budget = len(thread_stacks(10**7)) - 1000
        text = thread_stacks(budget)
        assert len(text) <= budget
        assert "outer frame(s) cut" in text and "stop.wait(10)" in text  # the innermost frame is kept
    finally:
        stop.set()


def test_the_ranks_training_thread_comes_first_and_is_marked(tmp_path) -> None:
    """A process may run several ranks (the simulator: a thread each): a rank's capture must lead with its own
    training thread, not the process's main thread (issue 23: the demo's hang showed the simulator's main)."""
    stop, ready = threading.Event(), threading.Event()
    runs: dict[int, telemetry.Run] = {}

    def rank(r: int) -> None:
        runs[r] = telemetry.init(job="cap", rank=r, world_size=2, agent=f"unix:{tmp_path / 'none.sock'}")
        with runs[r].step(0):
            if len(runs) == 2:
                ready.set()
            stop.wait(10)  # where this rank is "stuck"

    threads = [threading.Thread(target=rank, args=(r,), name=f"rank-{r}", daemon=True) for r in range(2)]
    for thread in threads:
        thread.start()
    try:
        assert ready.wait(5)
        for r, thread in enumerate(threads):
            text = take(forensics_pb2.CaptureRequest(request_id="x"), None, runs[r]._training_thread).stacks
            first = text.splitlines()[0]
            assert first.startswith(f'Thread {thread.ident} "rank-{r}"') and TRAINING_MARK in first, first
            assert text.count(TRAINING_MARK) == 1
            assert any(f.endswith("in rank") for f in top_frames(text, "sdk", 3)), "the live view shows the rank's"
    finally:
        stop.set()
        for run in runs.values():
            run.close(0.1)


def test_top_frames_reads_both_layouts_innermost_first() -> None:
    sdk = ('Thread 1 "MainThread" (most recent call last):\n  File "a.py", line 1, in main\n    main()\n'
           '  File "a.py", line 5, in load_batch\n    wait()\nThread 2 "x" (most recent call last):\n'
           '  File "b.py", line 1, in z\n')
    assert top_frames(sdk, "sdk", 2) == ['File "a.py", line 5, in load_batch', 'File "a.py", line 1, in main']
    pyspy = ('Process 1: python\nPython v3.11.7\n\nThread 1 (idle): "MainThread"\n    wait (threading.py:327)\n'
             '    load_batch (job.py:3)\nThread 2 (idle): "x"\n    y (z.py:1)\n')
    assert top_frames(pyspy, "py-spy", 5) == ["wait (threading.py:327)", "load_batch (job.py:3)"]
    assert top_frames("", "proc") == []
    # A crash's capture: a traceback (outermost first), and faulthandler's stacks (innermost first).
    raised = 'Traceback (most recent call last):\n  File "a.py", line 1, in main\n  File "a.py", line 5, in step\n'
    assert top_frames(raised, "sdk", 1) == ['File "a.py", line 5, in step']
    fatal = ('Fatal Python error: Segmentation fault\n\nCurrent thread 0x1 (most recent call first):\n'
             '  File "a.py", line 9 in read\n  File "a.py", line 1 in main\n')
    assert top_frames(fatal, "proc", 1) == ['File "a.py", line 9 in read']


def test_a_rank_told_not_to_answer_captures_is_dumped_from_outside(tmp_path: Path) -> None:
    """telemetry.init(captures=False) (or TELEMETRY_CAPTURES=0): the rank ignores requests; its agent's
    fallback answers for it after --capture-timeout."""
    root = make_root(tmp_path / "root.db")
    agent = None
    run = None
    try:
        agent = make_agent([root.address], tmp_path / "a.sock", "agent-0", capture_timeout_s=0.5)
        run = telemetry.init(job="quiet", rank=0, world_size=1, agent=f"unix:{tmp_path / 'a.sock'}", captures=False)
        with run.step(0):
            run.log(0, loss=1.0)
        wait_for(lambda: any(j.startswith("quiet") for j in root.jobs()), 15, what="the job at the root")
        job = next(j for j in root.jobs() if j.startswith("quiet")).split("@")[0]
        status, asked = _post(root.api_address, f"/api/v1/jobs/{job}/forensics", {"ranks": [0]})
        assert status == 202, asked
        body = wait_for(lambda: (lambda b: b if b.get("captures") else None)(api_get(root.api_address, asked["url"])[1]),
                        20, what="the fallback capture")
        [capture] = body["captures"]
        assert capture["source"] in ("py-spy", "proc") and "did not answer within 0.5 s" in capture["error"]
        assert run.captures.answered == 0
    finally:
        if run is not None:
            run.close(timeout=5)
        stop_all(agent, root)


def test_the_live_view_shows_where_the_culprits_are() -> None:
    from rich.console import Console

    from collectors.demo.view import render
    from collectors.demo.watch import Snapshot
    stacks = ('Thread 1 "MainThread" (most recent call last):\n  File "job.py", line 60, in main\n'
              '  File "job.py", line 34, in load_batch\n')
    snapshot = Snapshot("fx", culprits=[{"event_id": 3, "kind": "hang", "rank": 2, "host": "node7", "source": "sdk",
                                         "stacks": stacks, "process": {"state": "S", "wchan": "futex_wait_queue"}}])
    console = Console(width=140, record=True)
    console.print(render(snapshot))
    text = console.export_text()
    assert "where the culprits are" in text and "#3 hang: rank 2 on node7 (sdk, state S futex_wait_queue)" in text
    assert text.index("in load_batch") < text.index("in main")  # innermost first
