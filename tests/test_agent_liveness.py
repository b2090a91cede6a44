"""Rank liveness detail (issue 7 item 3): alive / stuck / dead with the process state and exit status.

Real processes throughout: `sleep` children for the registry on its own, and a real SDK rank in a
process of its own for the end-to-end case (SIGSTOP: stuck; SIGKILL: dead, killed by signal 9).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from contextlib import closing
from pathlib import Path
from types import SimpleNamespace

import pytest

from collectors.agent.ranks import RankRegistry, describe_exit, pid_alive
from helpers_tree import api_get, make_agent, make_root, stop_all, wait_for
from telemetry import Summary

REPO = Path(__file__).resolve().parent.parent
WAIT = 30.0  # bounded waits; generous because a loaded CI machine is slow, while a passing run takes ~1 s each


def hello(rank: int, pid: int, job: str = "j", world: int = 4) -> SimpleNamespace:
    return SimpleNamespace(job=job, rank=rank, world_size=world, local_rank=rank, host="h", pid=pid, device="",
                           incarnation=1, attempt=0)


def verdict_of(registry: RankRegistry, rank: int, job: str = "j"):
    registry.views()
    (detail,) = [d for d in registry.details(job) if d.rank == rank]
    return detail


@pytest.fixture
def sleepers():
    procs: list[subprocess.Popen] = []

    def spawn() -> subprocess.Popen:
        proc = subprocess.Popen(["sleep", "60"])
        procs.append(proc)
        return proc
    yield spawn
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)


def test_alive_hung_stopped_killed(sleepers):
    registry = RankRegistry(stuck_after_s=1.0)
    hung, stopped = sleepers(), sleepers()
    registry.register(hello(0, hung.pid), None)
    info1 = registry.register(hello(1, stopped.pid), None)
    d = wait_for(lambda: (lambda d: d if d.state == "S" else None)(verdict_of(registry, 0)), WAIT,
                 what="sleep(1) sleeping")  # a fresh child may still be running (exec) at first
    assert (d.verdict, d.exit_status) == ("alive", None)

    # Alive but silent for longer than stuck_after: stuck, and /proc says it is sleeping (a hang).
    registry.ranks[("j", 0)].last_beat -= 5
    d = verdict_of(registry, 0)
    assert (d.verdict, d.state) == ("stuck", "S") and d.seconds_since_heartbeat > 1.0
    registry.ranks[("j", 0)].last_beat = time.monotonic()  # a heartbeat again: alive again
    assert verdict_of(registry, 0).verdict == "alive"

    # SIGSTOP: silent and stopped (state T).
    os.kill(stopped.pid, signal.SIGSTOP)
    info1.last_beat -= 5
    d = wait_for(lambda: (lambda d: d if d.state == "T" else None)(verdict_of(registry, 1)), WAIT,
                 what="state T after SIGSTOP")
    assert d.verdict == "stuck"

    # SIGKILL: a zombie until its parent (this test's Popen) reaps it; dead, killed by signal 9.
    os.kill(stopped.pid, signal.SIGKILL)
    d = wait_for(lambda: (lambda d: d if d.verdict == "dead" else None)(verdict_of(registry, 1)), WAIT,
                 what="dead after SIGKILL")
    assert (d.state, d.exit_status) == ("Z", -9)
    assert [(i.rank, code) for i, code in registry.drain_exits()] == [(1, -9)]
    assert registry.drain_exits() == []
    # The agent did not reap it: its real parent still gets the status.
    assert stopped.wait(5) == -9
    d = verdict_of(registry, 1)
    assert (d.verdict, d.state, d.exit_status) == ("dead", "Z", -9), "dead is final; state and status are kept"
    views = registry.views()
    assert list(views["j"].alive) == [0] and list(views["j"].dead) == [1] and not views["j"].stuck


def test_pid_gone_before_anything_was_seen_and_pid_reuse(sleepers):
    registry = RankRegistry()
    gone = sleepers()
    gone.kill()
    gone.wait(5)  # reaped by its parent before the agent looked: dead, no status visible
    registry.register(hello(0, gone.pid), None)
    d = verdict_of(registry, 0)
    assert (d.verdict, d.state, d.exit_status) == ("dead", None, None)
    assert describe_exit(None) == "exit status not visible" and describe_exit(-15) == "killed by SIGTERM"
    assert describe_exit(3) == "exit code 3"

    # The pid now belongs to another process (its start time differs): the rank's process is dead.
    live = sleepers()
    info = registry.register(hello(1, live.pid), None)
    assert verdict_of(registry, 1).verdict == "alive"
    info.start_ticks = (info.start_ticks or 0) + 1
    assert verdict_of(registry, 1).verdict == "dead"
    assert pid_alive(live.pid) and not pid_alive(gone.pid)


def test_reap_own_children_when_asked():
    pid = os.posix_spawnp("sleep", ["sleep", "60"], os.environ)
    try:
        registry = RankRegistry(reap=True)
        registry.register(hello(0, pid), None)
        os.kill(pid, signal.SIGTERM)
        d = wait_for(lambda: (lambda d: d if d.verdict == "dead" else None)(verdict_of(registry, 0)), WAIT,
                     what="dead after SIGTERM")
        assert d.exit_status == -15
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # the registry reaped it
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass


RANK = textwrap.dedent("""
    import sys, time, telemetry
    run = telemetry.Run("live", 0, 1, agent=sys.argv[1], heartbeat_interval_s=0.2)
    step = 0
    while True:
        step += 1
        with run.step(step):
            run.log(step, loss=1.0)
            time.sleep(0.05)
""")


def test_sdk_rank_stopped_then_killed_end_to_end(tmp_path, caplog):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0", stuck_after_s=1.0)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", RANK, f"unix:{agent.socket_path}"], cwd=REPO, env=env)
    try:
        def progress() -> dict:
            return api_get(root.api_address, "/api/v1/jobs/live/progress")[1]

        def detail():
            with agent.node.lock:
                found = agent.registry.details("live")
            return found[0] if found else None

        wait_for(lambda: progress().get("alive") == 1, WAIT, what="the rank alive at the root")
        with caplog.at_level(logging.INFO, logger="collectors.agent.ranks"):
            os.kill(proc.pid, signal.SIGSTOP)
            wait_for(lambda: progress().get("stuck_ranks") == [0], WAIT, what="rank 0 stuck at the root")
            wait_for(lambda: (detail().verdict, detail().state) == ("stuck", "T"), WAIT, what="stuck, state T")
            os.kill(proc.pid, signal.SIGKILL)
            wait_for(lambda: progress().get("dead_ranks") == [0], WAIT, what="rank 0 dead at the root")
            d = detail()
            assert (d.verdict, d.state, d.exit_status) == ("dead", "Z", -9)

            # The exit status travels too: a rank.exit_status value of the job, source = the rank.
            def exit_windows():
                with closing(root.store.reader()) as db:
                    rows = db.execute("SELECT summary FROM windows WHERE job='live' AND metric='rank.exit_status'"
                                      ).fetchall()
                return [Summary.from_bytes(r[0]) for r in rows]
            (summary,) = wait_for(exit_windows, WAIT, what="a rank.exit_status window at the root")
            assert (summary.count, summary.max, list(summary.sources)) == (1, -9.0, [0])
        messages = [r.getMessage() for r in caplog.records]
        assert any("is stuck" in m and "process state T" in m for m in messages), messages
        assert any("is dead" in m and "killed by SIGKILL" in m for m in messages), messages
        assert proc.wait(5) == -9, "the agent must not reap a rank it did not start"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        stop_all(agent, root)
