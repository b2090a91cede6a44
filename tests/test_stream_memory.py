"""Issue 26: a refused stream leaves nothing of its messages behind.

A child stream refused for a 10 MB sender_id used to keep ~20 MB of the root for good (30 such streams: RSS
74 -> 669 MB, bench/sender_id_memory.py): the refusal's traceback held the handler's frame (the message and
the id), `context.abort` kept that exception, and gRPC's request iterator, an async generator in a reference
cycle with its receiver, stayed suspended holding the last message until a full collection, which the
services' GC thresholds make rare (collectors/common/gctune.py). Here, with the collector off so that only
reference counting frees anything: after refused streams (a huge sender_id, a bad first message on the agent)
no request message is alive.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers_tree import make_agent, make_root, stop_all, wait_for

pytestmark = pytest.mark.timeout(60)

REPO = Path(__file__).resolve().parents[1]


def _refused_messages() -> int:
    """The clients' messages alive in this process (those of the tree's own streams do not count)."""
    return sum(1 for o in gc.get_objects()
               if (type(o).__name__ == "SummaryBatch" and len(o.sender_id) > 1000)
               or (type(o).__name__ == "RankMessage" and o.hello.job.startswith("bad job")))


CLIENTS = textwrap.dedent("""
    import os, sys, grpc
    from telemetry.v1 import forward_pb2, forward_pb2_grpc, ingest_pb2, ingest_pb2_grpc

    def refused(call, message):
        try:
            for _ in call(iter([message]), timeout=20):
                pass
        except grpc.RpcError as exc:
            return exc.code().name
        return "not refused"

    big = [("grpc.max_send_message_length", 2**30)]
    with grpc.insecure_channel(sys.argv[1], options=big) as root, grpc.insecure_channel(sys.argv[2]) as agent:
        for _ in range(3):
            print(refused(forward_pb2_grpc.CollectorStub(root).Forward,
                          forward_pb2.SummaryBatch(sender_id="x" * 1_000_000, seq=0)))
            print(refused(ingest_pb2_grpc.AgentStub(agent).Stream, ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(
                job="bad job " + "x" * 100_000, rank=0, world_size=1, pid=os.getpid()))))
""")


def test_refused_streams_keep_none_of_their_messages(tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    gc.collect()
    gc.disable()
    try:
        # The clients in a process of their own: their side keeps its messages in cycles of its own.
        clients = subprocess.run([sys.executable, "-c", CLIENTS, root.address, f"unix:{agent.socket_path}"],
                                 capture_output=True, text=True, timeout=60, cwd=REPO)
        assert clients.stdout.split() == ["INVALID_ARGUMENT"] * 6, clients.stderr
        # The streams' ends run on the servers' threads, just after the client sees the status.
        wait_for(lambda: _refused_messages() == 0, 5, what="the refused streams' messages freed without a collection")
    finally:
        gc.enable()
        stop_all(agent, root)
