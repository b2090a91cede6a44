"""The root's HTTP JSON API (issue 3 §5): jobs, per-step figures, progress with liveness, errors.

One tree for the module: a root, an agent, and job "api" of world size 6 where
ranks 0-3 are real SDK ranks (rank 1 logs a NaN at step 2, rank 3 stops after
step 2 but stays alive), rank 4 registers and goes silent (stuck), rank 5
registers from a process that then exits (dead).
"""

from __future__ import annotations

import math
import subprocess
import time

import grpc
import numpy as np
import pytest

import telemetry
from helpers_tree import api_get, make_agent, make_root, stop_all, wait_for
from telemetry.v1 import ingest_pb2, ingest_pb2_grpc

JOB = "api"
WORLD = 6
FIELDS = {"step", "count", "expected", "missing", "mean", "stddev", "min", "argmin", "max", "argmax", "top",
          "p50", "p90", "p99", "p999", "nonfinite_count", "nonfinite_sources", "late"}


def loss(step: int, rank: int) -> float:
    return step + rank * 0.5


def logged(step: int) -> dict[int, float]:
    """What the ranks logged for `loss` at `step` (rank 1's step 2 is NaN)."""
    ranks = range(4) if step <= 2 else range(3)
    return {r: (math.nan if (r, step) == (1, 2) else loss(step, r)) for r in ranks}


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("api")
    root = make_root(tmp / "root.db")
    agent = make_agent([root.address], tmp / "a.sock", "agent0", stuck_after_s=1.0)
    sleepers = [subprocess.Popen(["sleep", "120"]) for _ in range(2)]
    runs: list[telemetry.Run] = []
    try:
        stub = ingest_pb2_grpc.AgentStub(grpc.insecure_channel(f"unix:{agent.socket_path}"))
        for rank, sleeper in ((4, sleepers[0]), (5, sleepers[1])):
            hello = ingest_pb2.RankHello(job=JOB, rank=rank, world_size=WORLD, host="other", pid=sleeper.pid)
            replies = list(stub.Stream(iter([ingest_pb2.RankMessage(hello=hello)]), timeout=10))
            assert replies[0].status == ingest_pb2.RankAck.REGISTERED
        sleepers[1].kill()
        sleepers[1].wait(5)
        runs = [telemetry.init(job=JOB, rank=r, world_size=WORLD, agent=f"unix:{agent.socket_path}")
                for r in range(4)]
        for step in range(1, 6):
            for rank, value in logged(step).items():
                runs[rank].log(step, loss=value)
                runs[rank].end_step(step)
        wait_for(lambda: len(api_get(root.api_address, f"/api/v1/jobs/{JOB}/steps?metric=loss")[1]["steps"]) == 5,
                 15, what="five finalised steps")
        yield root
    finally:
        for run in runs:
            run.close(0.1)
        for sleeper in sleepers:
            sleeper.kill()
            sleeper.wait(5)
        stop_all(agent, root)


def get(tree, path: str):
    return api_get(tree.api_address, path)


def test_jobs(tree):
    status, body = get(tree, "/api/v1/jobs")
    assert status == 200
    assert body == {"jobs": [{"job": JOB, "world_size": WORLD, "last_step": 5, "attempt": 0, "attempts": 1}],
                    "hosts": "/api/v1/hosts"}


def test_steps_have_every_field_and_exact_figures(tree):
    status, body = get(tree, f"/api/v1/jobs/{JOB}/steps?metric=loss&last=100")
    assert status == 200 and body["job"] == JOB and body["metric"] == "loss"
    rows = body["steps"]
    assert [r["step"] for r in rows] == [1, 2, 3, 4, 5]
    for row in rows:
        assert FIELDS <= set(row), FIELDS - set(row)
        values = logged(row["step"])
        finite = {r: v for r, v in values.items() if math.isfinite(v)}
        array = np.array(list(finite.values()))
        assert row["expected"] == WORLD
        assert row["count"] == len(finite)
        assert row["missing"] == [r for r in range(WORLD) if r not in values]
        assert row["min"] == array.min() and row["argmin"] == min(finite, key=finite.get)
        assert row["max"] == array.max() and row["argmax"] == max(finite, key=finite.get)
        assert row["top"] == [[v, r] for r, v in sorted(finite.items(), key=lambda p: (-p[1], p[0]))]
        assert row["mean"] == pytest.approx(array.mean(), rel=1e-12)
        assert row["stddev"] == pytest.approx(array.std(), rel=1e-9, abs=1e-12)
        assert row["min"] <= row["p50"] <= row["p90"] <= row["p99"] <= row["p999"] <= row["max"]
        nonfinite = sorted(r for r, v in values.items() if not math.isfinite(v))
        assert row["nonfinite_count"] == len(nonfinite) and row["nonfinite_sources"] == nonfinite
        assert row["late"] == 0
    assert rows[1]["nonfinite_sources"] == [1] and rows[1]["count"] == 3
    assert rows[2]["missing"] == [3, 4, 5]


def test_steps_last_and_metric(tree):
    status, body = get(tree, f"/api/v1/jobs/{JOB}/steps?metric=loss&last=2")
    assert status == 200 and [r["step"] for r in body["steps"]] == [4, 5]
    status, body = get(tree, f"/api/v1/jobs/{JOB}/steps?metric=no.such.metric&last=5")
    assert status == 200 and body["steps"] == []
    status, body = get(tree, "/api/v1/jobs/nobody/steps?metric=loss")
    assert status == 200 and body["steps"] == []


@pytest.mark.parametrize("last", ["abc", "0", "-1", "10001", "1.5", "1e3"])
def test_bad_last_is_400(tree, last):
    status, body = get(tree, f"/api/v1/jobs/{JOB}/steps?metric=loss&last={last}")
    assert status == 400
    assert "last" in body["error"]


@pytest.mark.parametrize("path", ["/", "/api/v1", "/api/v2/jobs", "/api/v1/nope", f"/api/v1/jobs/{JOB}",
                                  f"/api/v1/jobs/{JOB}/unknown", f"/api/v1/jobs/{JOB}/steps/extra", "/metricsz"])
def test_unknown_path_is_404(tree, path):
    status, body = get(tree, path)
    assert status == 404
    assert "no such endpoint" in body["error"]


def test_healthz(tree):
    assert get(tree, "/healthz") == (200, {"ok": True})


def test_progress(tree):
    def current():
        status, body = get(tree, f"/api/v1/jobs/{JOB}/progress")
        assert status == 200
        ok = (body.get("min_step") == 2 and body.get("ranks_at_min") == [3] and body.get("max_step") == 5
              and body.get("stuck_ranks") == [4] and body.get("dead_ranks") == [5])
        return body if ok else None

    body = wait_for(current, 15, interval=0.2, what="progress: min step 2 at rank 3, max 5, rank 4 stuck, 5 dead")
    assert (body["alive"], body["stuck"], body["dead"]) == (4, 1, 1)
    assert body["world_size"] == WORLD and body["job"] == JOB
    assert body["last_finalised_step"] == 5
    assert body["ranks_reporting"] >= 1
    assert set(body["counters"]) >= {"sdk_dropped", "dropped_windows", "rejected_overlaps", "duplicates", "resent",
                                     "late", "bad_inputs"}
    assert time.time() * 1000 - body["time_ms"] < 30_000


def test_progress_of_an_unknown_job(tree):
    status, body = get(tree, "/api/v1/jobs/nobody/progress")
    assert status == 200
    assert body["last_finalised_step"] is None and (body["alive"], body["stuck"], body["dead"]) == (0, 0, 0)
