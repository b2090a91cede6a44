"""Issue 13 item 5: forensics on real torchrun jobs (gloo, CPU, 3 ranks), using only the README's lines.

Each job's rank 2 misbehaves at one step (tests/forensics_job.py); the root must raise an event naming
rank 2 and, for the hang cases, keep a capture of rank 2 that shows where it is: from the rank itself
when it can answer, from outside (py-spy or /proc) when it cannot.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.demo.train import kill_job
from collectors.probes.snapshot import pyspy_path
from helpers_tree import api_get, wait_for
from torchrun_tree import root_and_agent, torchrun

pytest.importorskip("torch")
import torch.distributed as dist

pytestmark = [
    pytest.mark.timeout(240),
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

JOB_SCRIPT = Path(__file__).with_name("forensics_job.py")
# A hang is judged after 4 s without progress (default 60 s), so the tests take seconds, not minutes.
FAULT_TO_EVENT_S = 30  # from a fault to its event at the root, at most
DETECTORS = json.dumps({"hang": {"no_progress_floor_s": 4.0, "check_interval_s": 0.25}})


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """One root and agent for the file's jobs (each job has its own name, so its own events and captures)."""
    with root_and_agent(tmp_path_factory.mktemp("forensics"), root_args=("--detectors", DETECTORS),
                        agent_args=("--stuck-after", "3", "--capture-timeout", "2")) as found:
        yield found


def _run_until(tree: dict, job: str, fault: str, found, timeout: float = 90.0,
               then=None):
    """Run the job until `found()` holds; then `then(result)` while the job still runs; then kill it."""
    log = tree["tmp"] / f"{job}.log"
    proc = torchrun(3, JOB_SCRIPT, ["--job", job, "--fault", fault, "--fault-rank", "2", "--fault-step", "10"],
                    tree["agent"], log)
    try:
        result = wait_for(lambda: found(), timeout, interval=0.25, what=f"{fault}: the event and its capture "
                          f"(job log: {log})")
        return then(result) if then is not None else result
    finally:
        kill_job(proc, job)


def _post(api: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(f"http://{api}{path}", data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.load(reply)


def _event(tree: dict, job: str, kind: str) -> dict | None:
    status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events?kind={kind}")
    assert status == 200, body
    return body["events"][0] if body["events"] else None


def _captured(tree: dict, job: str, kind: str, rank: int) -> tuple[dict, dict] | None:
    event = _event(tree, job, kind)
    if event is None or rank not in event["ranks"]:
        return None
    status, body = api_get(tree["api"], f"/api/v1/jobs/{job}/events/{event['id']}/forensics")
    if status != 200:
        return None
    capture = next((c for c in body["captures"] if c["rank"] == rank), None)
    return (event, body) if capture is not None else None


def test_a_rank_blocked_in_data_loading_is_named_and_its_capture_shows_the_loader(tree: dict) -> None:
    job = "fx-block"

    def every_rank(found: tuple[dict, dict]) -> tuple[dict, dict, dict]:
        """While the job hangs, every rank's capture on demand: what torch's own analyzer needs."""
        asked = _post(tree["api"], f"/api/v1/jobs/{job}/forensics", {"ranks": [0, 1, 2]})
        everyone = wait_for(lambda: (lambda b: b if not b["pending"] else None)(api_get(tree["api"], asked["url"])[1]),
                            30, what="every rank's capture")
        return (*found, everyone)
    event, body, everyone = _run_until(tree, job, "block", lambda: _captured(tree, job, "hang", 2), then=every_rank)
    assert event["ranks"] == [2], event   # every rank is in step 10; only rank 2 never reached its collective
    [capture] = [c for c in body["captures"] if c["rank"] == 2]
    assert capture["source"] == "sdk", capture
    assert "in load_batch" in capture["stacks"] and "threading.Event().wait()" in capture["stacks"], capture["stacks"]
    fr = capture["flight_recorder"]
    assert fr is not None and fr["entries"], fr
    assert all(e["profiling_name"].endswith("all_reduce") for e in fr["entries"])
    assert capture["process"]["alive"] and capture["process"]["threads"] >= 1
    assert 0 <= capture["seconds_to_store"] < 10, capture["seconds_to_store"]
    # The flight recorder is also written where torchfrtrace reads it: <dir>/rank_<r>.
    assert body["fr_dir"] and (Path(body["fr_dir"]) / "rank_2").exists()
    assert body["pending"] == []
    # torch's analyzer, over every rank's dump as the root wrote them, names the same rank.
    assert sorted(p.name for p in Path(everyone["fr_dir"]).iterdir()) == ["rank_0", "rank_1", "rank_2"]
    analysis = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace",
                               "--allow-incomplete-ranks", everyone["fr_dir"]], capture_output=True, text=True,
                              timeout=60)
    assert "missing ranks: {2}" in analysis.stdout + analysis.stderr, analysis.stdout + analysis.stderr


def test_a_sigstopped_rank_is_captured_from_outside_and_says_so(tree: dict) -> None:
    job = "fx-stop"
    event, body = _run_until(tree, job, "stop", lambda: _captured(tree, job, "hang", 2))
    assert 2 in event["ranks"], event
    [capture] = [c for c in body["captures"] if c["rank"] == 2]
    assert capture["source"] in ("py-spy", "proc"), capture
    assert "did not answer" in capture["error"], capture["error"]
    assert capture["process"]["state"] == "T", capture["process"]  # stopped
    if pyspy_path() is not None and os.geteuid() == 0:
        assert capture["source"] == "py-spy", capture["error"]
        assert "load_batch" in capture["stacks"], capture["stacks"]


def _mismatch(tree: dict, job: str) -> dict | None:
    event = _event(tree, job, "collective_mismatch")
    return event if event is not None and 2 in event["ranks"] else None


def test_a_rank_all_reducing_a_longer_tensor_is_named_by_the_fingerprints(tree: dict) -> None:
    job = "fx-longer"
    event, seen = _run_until(tree, job, "longer", lambda: _mismatch(tree, job), then=lambda e: (e, time.time()))
    assert event["ranks"] == [2], event
    detail = event["detail"]
    sides = {detail["min"]["what"], detail["max"]["what"]}
    assert any("[5]" in what for what in sides) and any("[4]" in what for what in sides), detail
    # Named promptly after the fault (by the fingerprints, not a timeout): timed from rank 2's fault line to the
    # test seeing the event, neither torchrun's start nor kill_job's teardown (both grow with the machine's load).
    [fault] = [json.loads(line) for line in (tree["tmp"] / f"{job}.log").read_text().splitlines()
               if line.startswith('{"event": "fault"')]
    print(f"named {seen - fault['time']:.1f} s after the fault")
    assert 0 <= seen - fault["time"] < FAULT_TO_EVENT_S, (seen - fault["time"], fault)


def test_a_rank_that_skips_a_collective_is_named(tree: dict) -> None:
    job = "fx-skip"
    event = _run_until(tree, job, "skip", lambda: _mismatch(tree, job))
    assert event["ranks"] == [2], event  # its int32 all-reduce met the others' float32 one at the same seq
    detail = event["detail"]
    assert {"Int" in detail["min"]["what"], "Int" in detail["max"]["what"]} == {True, False}, detail
