"""The crash detector on synthetic accounts (collectors/detectors/crash.py): who was first, the cascade, the
consequences told apart, a mismatch's culprit, dead ranks without an account, and the settle wait."""

from __future__ import annotations

import pytest

from collectors.detectors.base import Context
from collectors.detectors.crash import CrashConfig, CrashDetector, consequence_of, mismatch
from collectors.detectors.events import EventLog

JOB = "job@1"
RESET = "RuntimeError: [gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:9094"


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def rec(rank: int, cause: str, at: float | None, why: str = "", message: str = "", fingerprints=(), **more):
    return {"rank": rank, "host": f"h{rank // 4}", "cause": cause, "why": why or cause, "died_at": at,
            "exc_type": "RuntimeError" if cause == "exception" else "", "message": message, "step": 12,
            "last_enqueued": 24, "fingerprints": list(fingerprints), **more}


def setup(**config):
    clock = Clock()
    log = EventLog(None)
    det = CrashDetector(log, Context(hosts_of=lambda job: {r: f"h{r // 4}" for r in range(16)}),
                        CrashConfig(**config), clock=clock)
    return clock, log, det


def test_the_primary_death_is_first_and_connection_resets_are_its_cascade():
    clock, log, det = setup()
    # The resets arrive first (their agent was quicker), and die earlier by the clock than no one: still cascade.
    det.observe_exits(JOB, [rec(0, "exception", 10.40, message=RESET), rec(2, "terminated", 10.45)])
    assert log.query(JOB) == [], "only consequences: waits settle_s for the rank that caused them"
    det.observe_exits(JOB, [rec(1, "exception", 10.0, why="RuntimeError: CUDA out of memory", message="CUDA oom")])
    (event,) = log.query(JOB)
    d = event["detail"]
    assert event["kind"] == "crash" and event["ranks"] == [1] and event["step"] == 12
    assert [f["rank"] for f in d["first"]] == [1]
    assert [(c["rank"], c["after_s"]) for c in d["cascade"]] == [(0, 0.4), (2, 0.45)]
    assert all(c["consequence"] for c in d["cascade"])
    assert d["summary"].startswith("rank 1 died first at step 12 in collective #24: RuntimeError: CUDA out of memory")
    assert det.counts == {(JOB, "exception"): 2, (JOB, "terminated"): 1}


def test_only_consequences_open_after_settle_naming_the_earliest():
    clock, log, det = setup(settle_s=1.0)
    det.observe_exits(JOB, [rec(2, "exception", 5.2, message=RESET), rec(0, "exception", 5.1, message=RESET)])
    assert log.query(JOB) == []
    clock.t += 1.5
    det.check({JOB: {"alive": 1, "dead": 2, "dead_ranks": [0, 2]}})
    (event,) = log.query(JOB)
    assert [f["rank"] for f in event["detail"]["first"]] == [0]


def test_ranks_dying_together_are_all_first_and_a_resend_changes_nothing():
    clock, log, det = setup(simultaneous_s=0.05)
    det.observe_exits(JOB, [rec(3, "fatal_signal", 7.00), rec(5, "killed", 7.03), rec(6, "killed", 9.0)])
    det.observe_exits(JOB, [rec(3, "fatal_signal", 7.00)])
    (event,) = log.query(JOB)
    assert [f["rank"] for f in event["detail"]["first"]] == [3, 5] and event["updates"] == 0


def test_dead_ranks_without_an_account_are_listed_after_settle_and_all_dead_is_said():
    clock, log, det = setup(settle_s=1.0)
    det.observe_exits(JOB, [rec(1, "killed", 3.0)])
    det.check({JOB: {"alive": 0, "stuck": 0, "dead": 3, "dead_ranks": [0, 1, 2]}})
    clock.t += 2
    det.check({JOB: {"alive": 0, "stuck": 0, "dead": 3, "dead_ranks": [0, 1, 2]}})
    (event,) = log.query(JOB)
    d = event["detail"]
    assert [f["rank"] for f in d["first"]] == [1] and d["all_dead"] is True and d["ranks_dead"] == 3
    assert sorted((c["rank"], c["cause"]) for c in d["cascade"]) == [(0, "unknown"), (2, "unknown")]


def test_a_job_all_dead_with_no_account_at_all_is_a_crash_of_unknown_cause():
    clock, log, det = setup(settle_s=1.0)
    view = {"alive": 0, "stuck": 0, "dead": 2, "dead_ranks": [0, 1]}
    det.check({JOB: view})
    clock.t += 2
    det.check({JOB: view})
    (event,) = log.query(JOB)
    assert event["kind"] == "crash" and {f["cause"] for f in event["detail"]["first"]} == {"unknown"}


def test_clean_exits_are_not_a_crash():
    clock, log, det = setup()
    det.observe_exits(JOB, [rec(0, "exited", 1.0), rec(1, "exited", 1.1)])
    clock.t += 5
    det.check({JOB: {"alive": 0, "dead": 2, "dead_ranks": []}})
    assert log.query(JOB) == []


@pytest.mark.parametrize("sides, culprits, rule", [
    # seq 25: rank 1 alone issued the 1000-element all-reduce; 0 and 2 the usual one
    ({0: "F4", 1: "F1000", 2: "F4"}, [1], "minority"),
    # one on each side (the aborted rank said nothing): the collective seen at no other seq is the odd one out
    ({1: "F1000", 2: "F4"}, [1], "tie broken: the only collective seen at no other seq"),
])
def test_a_mismatch_names_the_rank_whose_collective_differed(sides, culprits, rule):
    history = [(24, hash("F4"), "all_reduce Float[4]")]
    records = {r: {"fingerprints": history + [(25, hash(what), what)]} for r, what in sides.items()}
    found = mismatch(records)
    assert found is not None and found["seq"] == 25 and found["ranks"] == culprits and found["rule"] == rule


def test_consequences_are_told_by_their_words_not_by_guessing():
    assert consequence_of({"cause": "exception", "exc_type": "RuntimeError", "message": RESET})
    assert consequence_of({"cause": "exception", "exc_type": "DistBackendError",
                           "message": "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=24)"})
    assert consequence_of({"cause": "terminated"})
    assert consequence_of({"cause": "exception", "exc_type": "RuntimeError", "message": "CUDA out of memory"}) is None
    assert consequence_of({"cause": "exception", "exc_type": "ValueError",
                           "message": "Aborting: the loss is NaN"}) is None
    assert consequence_of({"cause": "fatal_signal"}) is None


@pytest.mark.parametrize("worker_signal, consequence", [("Terminated", True), ("Killed", False)])
def test_a_dataloader_worker_stopped_by_sigterm_is_the_launcher_s_stop_and_one_killed_is_the_rank_s_own(
        worker_signal, consequence):
    """torchrun's SIGTERM reaches a rank's DataLoader worker too; the rank may raise the DataLoader's error first,
    its signal only in the traceback's chained cause. A worker SIGKILLed (the OOM killer) is the rank's failure."""
    traceback = (f"RuntimeError: DataLoader worker (pid 14482) is killed by signal: {worker_signal}. \n\nThe above "
                 "exception was the direct cause of the following exception:\n\nTraceback (most recent call last):\n"
                 "RuntimeError: DataLoader worker (pid(s) 14482) exited unexpectedly\n")
    record = {"cause": "exception", "exc_type": "RuntimeError",
              "message": "DataLoader worker (pid(s) 14482) exited unexpectedly", "traceback": traceback}
    assert (consequence_of(record) is not None) is consequence


def test_a_16384_rank_cascade_names_the_first_and_lists_a_bounded_cascade():
    """Every rank of a 16,384-rank job dies (rank 5 first, the others of it), their accounts in units of 100:
    the event names rank 5, counts every death, lists 64 of the cascade, and keeps full stacks for 256 only."""
    clock, log, det = setup()
    world = 16384
    for start in range(0, world, 100):
        det.observe_exits(JOB, [rec(r, "exception" if r == 5 else "terminated", 10.0 + (0 if r == 5 else 1 + r * 1e-5),
                                    message="CUDA oom" if r == 5 else "", traceback="t" * 1000,
                                    fingerprints=[(s, s, "all_reduce") for s in range(8)])
                                for r in range(start, min(world, start + 100))])
        clock.t += 0.01
    det.check({JOB: {"alive": 0, "stuck": 0, "dead": world, "dead_ranks": list(range(1024))}})
    (event,) = log.query(JOB)
    d = event["detail"]
    assert [f["rank"] for f in d["first"]] == [5] and d["ranks_dead"] == world and d["all_dead"] is True
    assert len(d["cascade"]) == 64 and d["cascade"][0]["rank"] == 0
    full = [r for r in det.records(JOB).values() if r["traceback"]]
    assert len(full) == 256 and len(det.take_new(JOB)) == 256 and det.take_new(JOB) == []
