"""Issue 25: a rank's last words at its agent, on real processes and a real agent and root (no torch).

The words are bound to the stream's registration and its connection's peer credentials (a forged one for another
rank or pid is refused); SIGTERM while the main thread is blocked in a C call still gets its words (the wakeup
pipe); an exception in another thread is context; a forked child (a DataLoader worker) that gets SIGTERM does not
take the rank with it; the agent's fault file is the agent's (0600 in a 0711 directory).
"""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import grpc
import pytest

from helpers_tree import (
    RawChild,
    api_get,
    counters,
    events,
    make_agent,
    make_collector,
    make_root,
    stop_all,
    wait_for,
)
from telemetry.v1 import forensics_pb2, forward_pb2, ingest_pb2, ingest_pb2_grpc

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def tree(tmp_path):
    root = make_root(tmp_path / "root.db", api="127.0.0.1:0")
    sockdir = Path(tempfile.mkdtemp(prefix="crash-"))
    agent = make_agent([root.address], sockdir / "a.sock", "agent0")
    yield root, agent
    stop_all(agent, root)


def _hello(job: str, rank: int, pid: int) -> ingest_pb2.RankMessage:
    return ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job=job, rank=rank, world_size=2, host="h", pid=pid))


def _words(rank: int, pid: int, message: str = "boom") -> ingest_pb2.RankMessage:
    return ingest_pb2.RankMessage(last_words=forensics_pb2.LastWords(
        kind="exception", exc_type="RuntimeError", message=message, rank=rank, pid=pid, time_ns=1))


def _answers(address: str, messages: list) -> tuple[list[ingest_pb2.RankAck], grpc.RpcError | None]:
    """Every ack to `messages` on one stream, and the error that ended it (None: it ended cleanly)."""
    with grpc.insecure_channel(address) as channel:
        call = ingest_pb2_grpc.AgentStub(channel).Stream(iter(messages), timeout=10)
        acks: list[ingest_pb2.RankAck] = []
        try:
            for ack in call:
                acks.append(ack)
                if ack.status == ingest_pb2.RankAck.NOTED:
                    call.cancel()
                    return acks, None
        except grpc.RpcError as error:
            return acks, error
        return acks, None


def test_last_words_for_another_rank_or_pid_are_refused_and_the_fault_file_is_the_agents(tree):
    root, agent = tree
    address = f"unix:{agent.socket_path}"
    me = os.getpid()
    acks, error = _answers(address, [_hello("forge", 0, me), _words(1, me, "rank 1 says rank 0 did it")])
    assert acks[0].status == ingest_pb2.RankAck.REGISTERED and acks[0].fault_file, acks
    assert isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.PERMISSION_DENIED, error
    assert "last words for rank 1" in error.details()
    fault = Path(acks[0].fault_file)
    assert stat.S_IMODE(fault.stat().st_mode) == 0o600 and stat.S_IMODE(fault.parent.stat().st_mode) == 0o711
    acks, error = _answers(address, [_hello("forge", 0, me), _words(0, os.getppid())])
    assert isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.PERMISSION_DENIED, error
    assert agent.node.counters["bad_inputs"] == 2
    assert events(root.api_address, "forge", "crash") == [], "nothing of the forged words reached the root"
    # Its own words on its own stream are noted: the rank is ending, and its account goes up.
    acks, error = _answers(address, [_hello("forge", 0, me), _words(0, me, "honest")])
    assert error is None and acks[-1].status == ingest_pb2.RankAck.NOTED, (acks, error)
    event = wait_for(lambda: events(root.api_address, "forge", "crash"), 10, what="the crash event")[0]
    assert event["ranks"] == [0] and event["detail"]["first"][0]["why"] == "RuntimeError: honest", event


def _child(agent, code: str, job: str) -> subprocess.Popen:
    script = textwrap.dedent(f"""
        import os, signal, sys, threading, time
        import telemetry
        run = telemetry.init(job={job!r}, rank=0, world_size=1, agent={"unix:" + str(agent.socket_path)!r})
        assert run.wait_connected(20)
        run.log(1, loss=1.0)
        run.end_step(1)
        print("ready", flush=True)
    """) + textwrap.dedent(code)
    path = Path(tempfile.mkdtemp(prefix="crash-child-")) / f"{job}_child.py"
    path.write_text(script)  # a file, so that tracebacks show its lines
    return subprocess.Popen([sys.executable, str(path)], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _crash(root, job: str) -> dict:
    def settled():
        found = events(root.api_address, job, "crash")
        return found[0] if found else None
    return wait_for(settled, 20, what=f"the crash event of {job}")


def test_sigterm_while_blocked_in_a_c_call_says_where_and_dies_of_sigterm(tree):
    root, agent = tree
    child = _child(agent, "time.sleep(60)  # a collective that never returns\n", "term")
    assert child.stdout.readline().strip() == "ready"
    # SIGTERM once its main thread is inside the sleep (a C call: the nanosleep system call), not before it.
    wait_for(lambda: Path(f"/proc/{child.pid}/syscall").read_text().split()[0] in ("35", "230"), 10, interval=0.02,
             what="the child's main thread asleep in nanosleep")
    child.send_signal(signal.SIGTERM)
    assert child.wait(20) == -signal.SIGTERM, child.stderr.read()
    event = _crash(root, "term")
    first = event["detail"]["first"][0]
    assert (first["cause"], first["signal"], first["died_at_source"]) == ("terminated", "SIGTERM", "last_words")
    status, body = _forensics(root, "term", event["id"])
    assert "time.sleep(60)" in body["captures"][0]["stacks"], body["captures"][0]["stacks"]


def _forensics(root, job: str, event_id: int) -> tuple[int, dict]:
    return wait_for(lambda: (lambda r: r if r[0] == 200 and r[1]["captures"] else None)(
        api_get(root.api_address, f"/api/v1/jobs/{job}/events/{event_id}/forensics")), 10, what="the capture")


def test_an_exception_ends_the_rank_with_a_thread_s_exception_as_context(tree):
    root, agent = tree
    child = _child(agent, """
        def worker():
            raise ValueError("pin-memory thread lost its queue")
        t = threading.Thread(target=worker, name="pin-memory")
        t.start(); t.join()
        raise KeyError("batch 7")
    """, "exc")
    assert child.wait(20) == 1
    event = _crash(root, "exc")
    first = event["detail"]["first"][0]
    assert first["cause"] == "exception" and first["why"] == "KeyError: 'batch 7'", first
    assert "pin-memory: ValueError: pin-memory thread lost its queue" in first["thread_exception"], first


def test_sys_exit_3_is_an_exit_code_and_a_forked_child_s_sigterm_is_not_the_rank_s(tree):
    root, agent = tree
    child = _child(agent, """
        pid = os.fork()
        if pid == 0:  # a DataLoader worker: inherits the parent's handlers and wakeup pipe
            time.sleep(30)
            os._exit(0)
        time.sleep(0.2)
        os.kill(pid, signal.SIGTERM)
        _, status = os.waitpid(pid, 0)
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
        time.sleep(0.5)  # the parent is still here: its SIGTERM watch did not take the child's for its own
        print("parent alive", flush=True)
        sys.exit(3)
    """, "exit3")
    assert child.wait(20) == 3, child.stderr.read()
    assert "parent alive" in child.stdout.read()
    event = _crash(root, "exit3")
    first = event["detail"]["first"][0]
    assert (first["cause"], first["exit_code"]) == ("exit_code", 3), first


def test_an_account_crosses_a_collector_tier(tmp_path):
    """root <- collector <- agent: the account rides the collector's own units up (CollectorServer._exits_up)."""
    root = make_root(tmp_path / "root.db", api="127.0.0.1:0")
    rack = make_collector([root.address], "rack0")
    agent = make_agent([rack.address], Path(tempfile.mkdtemp(prefix="crash-")) / "a.sock", "agent0")
    try:
        child = _child(agent, 'raise RuntimeError("through the rack")\n', "tiers")
        assert child.wait(20) == 1
        event = _crash(root, "tiers")
        assert event["detail"]["first"][0]["why"] == "RuntimeError: through the rack", event
    finally:
        stop_all(agent, rack, root)


def test_a_child_that_does_not_cover_a_rank_cannot_report_its_death(tree):
    """A rogue tier says rank 0 of a live job died of a segfault: refused (it does not cover the rank), counted,
    and no crash event names the healthy rank."""
    import telemetry
    root, agent = tree
    run = telemetry.init(job="healthy", rank=0, world_size=1, agent=f"unix:{agent.socket_path}")
    rogue = None
    try:
        run.log(0, loss=1.0)
        run.end_step(0)
        from collectors.common.attempts import scoped
        wait_for(lambda: root.liveness(scoped("healthy", run.attempt))["alive"] == 1, 15, what="the rank at the root")
        rogue = RawChild(root.address, "rogue")
        rogue.ack()
        before = counters(root)["bad_inputs"]
        rogue.send(forward_pb2.SummaryBatch(sender_id="rogue", seq=1, exits=[forensics_pb2.RankExit(
            job="healthy", attempt=run.attempt, rank=0, cause="fatal_signal", why="SIGSEGV (forged)")]))
        rogue.ack_for(1, forward_pb2.Ack.RECEIVED)
        assert counters(root)["bad_inputs"] - before == 1
        assert events(root.api_address, "healthy", "crash") == []
        assert run.close(10)
    finally:
        run.close(0.1)
        if rogue is not None:
            rogue.close()
