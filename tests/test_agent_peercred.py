"""The agent checks who is on the other end of each rank stream (issue 14 item 5, DESIGN §7).

A hello's pid must be the connecting process's (the kernel's SO_PEERCRED, read by the agent's relay) or a
descendant of it, and the connecting uid must be allowed (the agent's own, root, --allowed-uids); otherwise
PERMISSION_DENIED, counted in bad_inputs, and a healthy rank on the same agent goes on. Real agent on a Unix
socket, raw rank streams from this process and from processes of their own (another uid where the tests
run as root).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import grpc
import pytest

import telemetry
from collectors.common.attempts import split
from helpers_tree import make_agent, make_root, steps, stop_all
from telemetry.v1 import ingest_pb2, ingest_pb2_grpc

NOBODY = 65534


def _hello(pid: int, job: str = "peer", rank: int = 0) -> ingest_pb2.RankMessage:
    return ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job=job, rank=rank, world_size=4, host="h", pid=pid))


def _first_answer(address: str, pid: int, rank: int = 0) -> ingest_pb2.RankAck | grpc.RpcError:
    """The agent's answer to a hello claiming `pid`: the REGISTERED ack, or the error ending the stream."""
    with grpc.insecure_channel(address) as channel:
        call = ingest_pb2_grpc.AgentStub(channel).Stream(iter([_hello(pid, rank=rank)]), timeout=10)
        try:
            return next(call)
        except grpc.RpcError as error:
            return error
        finally:
            call.cancel()


@pytest.fixture
def tree(tmp_path):
    root = make_root(tmp_path / "root.db")
    sockdir = Path(tempfile.mkdtemp(prefix="peercred-"))  # short, and reachable by another uid (0755)
    sockdir.chmod(0o755)
    agent = make_agent([root.address], sockdir / "a.sock", "agent0", tcp="127.0.0.1:0")
    yield root, agent
    stop_all(agent, root)
    sockdir.rmdir()


def test_a_hello_for_a_pid_that_is_not_the_peer_nor_its_descendant_is_refused(tree):
    root, agent = tree
    address = f"unix:{agent.socket_path}"
    run = telemetry.init(job="healthy", rank=0, world_size=1, agent=address)
    try:
        assert run.wait_connected(10)
        error = _first_answer(address, os.getppid())  # alive, but this process's parent: not its descendant
        assert isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f"claims pid {os.getppid()}, but the connection is pid {os.getpid()}'s" in error.details()
        assert agent.node.counters["bad_inputs"] == 1
        assert {split(job)[0] for job in agent.registry.jobs()} == {"healthy"}, \
            "nothing of the refused hello was registered"
        for step in (1, 2):
            run.log(step, loss=float(step))
            run.end_step(step)
        assert run.close(10) is True
        assert [r["count"] for r in steps(root.api_address, "healthy", "loss")] == [1, 1]
    finally:
        run.close(0.1)


def test_a_hello_for_the_peers_own_pid_or_a_child_of_it_is_registered(tree):
    _, agent = tree
    child = subprocess.Popen(["sleep", "60"])
    try:
        for rank, pid in enumerate((os.getpid(), child.pid)):
            answer = _first_answer(f"unix:{agent.socket_path}", pid, rank=rank)
            assert isinstance(answer, ingest_pb2.RankAck), answer
            assert answer.status == ingest_pb2.RankAck.REGISTERED
    finally:
        child.kill()
        child.wait(5)


def test_a_connection_that_bypasses_the_relay_has_no_credentials_and_is_refused(tree):
    """grpc's own socket sits in a 0700 directory; a process that still reaches it (root here) is refused."""
    _, agent = tree
    error = _first_answer(agent.relay.grpc_address, os.getpid())
    assert isinstance(error, grpc.RpcError) and error.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "no peer credentials" in error.details()
    assert oct(os.stat(agent.relay.inner.parent).st_mode & 0o777) == "0o700"


def test_the_loopback_tcp_listener_carries_no_credentials_and_is_not_checked(tree):
    """--tcp is an explicit opt-in: TCP has no SO_PEERCRED, so its hellos are taken as claimed (documented)."""
    _, agent = tree
    answer = _first_answer(agent.addresses[1], os.getppid())
    assert isinstance(answer, ingest_pb2.RankAck) and answer.status == ingest_pb2.RankAck.REGISTERED


_OTHER_UID_RANK = """
import os, sys, grpc
from telemetry.v1 import ingest_pb2, ingest_pb2_grpc
os.setgroups([])  # everything imported as root (the interpreter is not readable by nobody), then drop to nobody
os.setgid(int(sys.argv[2]))
os.setuid(int(sys.argv[2]))
hello = ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job="peer", rank=3, world_size=4, host="h", pid=os.getpid()))
channel = grpc.insecure_channel(sys.argv[1])
call = ingest_pb2_grpc.AgentStub(channel).Stream(iter([hello]), timeout=10)
try:
    print("REGISTERED" if next(call).status == ingest_pb2.RankAck.REGISTERED else "OTHER", flush=True)
except grpc.RpcError as error:
    print(error.code().name, error.details(), flush=True)
# The answer is all the test needs. grpc's teardown of a bidirectional stream (cancel, channel close, its threads
# at interpreter exit) once hung for 30 s after the answer on a loaded CI machine: the process ends here instead,
# as a rank killed mid-stream would (the agent sees its stream end).
os._exit(0)
"""


def _as_nobody(address: str) -> str:
    proc = subprocess.run([sys.executable, "-c", _OTHER_UID_RANK, address, str(NOBODY)], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a rank as another uid")
@pytest.mark.parametrize("allowed", [False, True], ids=["uid_not_allowed", "uid_allowed"])
def test_a_rank_of_another_uid_is_refused_unless_allowed(tmp_path, allowed):
    root = make_root(tmp_path / "root.db")
    sockdir = Path(tempfile.mkdtemp(prefix="peercred-"))
    sockdir.chmod(0o755)
    agent = make_agent([root.address], sockdir / "a.sock", "agent0", allowed_uids=(NOBODY,) if allowed else ())
    try:
        agent.socket_path.chmod(0o666)  # the file mode lets it connect: the uid check is what decides
        said = _as_nobody(f"unix:{agent.socket_path}")
        if allowed:
            assert said == "REGISTERED"
        else:
            assert said.startswith("PERMISSION_DENIED"), said
            assert f"runs as uid {NOBODY}, which may not send to this agent" in said
            assert agent.node.counters["bad_inputs"] == 1
    finally:
        stop_all(agent, root)
        sockdir.rmdir()
