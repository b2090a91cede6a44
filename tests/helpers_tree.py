"""Shared pieces for the aggregation-tree tests (issue 3): in-process servers, bounded waits, the root's API.

Not a test module: the tests import it by name (pytest puts tests/ on sys.path).
Every server binds port 0 (or a Unix socket under the test's tmp_path) and is
stopped by the fixture that made it, so nothing outlives a test.
"""

from __future__ import annotations

import json
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import numpy as np
from grpc_health.v1 import health_pb2, health_pb2_grpc
from pyroaring import BitMap

import telemetry
from collectors.agent.server import AgentConfig, AgentServer
from collectors.collector.server import CollectorConfig, CollectorServer
from collectors.common.keys import Key
from collectors.common.validation import DEFAULT_MAX_WORLD_SIZE, BadInput, check_job
from collectors.root.server import RootConfig, RootServer
from telemetry import Summary
from telemetry.v1 import forward_pb2, forward_pb2_grpc

# Short deadlines keep the tests quick; complete windows seal at once anyway.
FAST_AGENT = {"deadline_floor_s": 0.5, "flush_interval_s": 0.01}
FAST_COLLECTOR = {"deadline_floor_s": 0.8, "flush_interval_s": 0.01}


def wait_for(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05, what: str = "") -> Any:
    """Poll until predicate() is truthy; return its value, or fail the test naming `what`."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")
        time.sleep(interval)


def make_root(db: Path, **options: Any) -> RootServer:
    config = RootConfig(db=db, node_id=options.pop("node_id", "root"), **{**FAST_COLLECTOR, **options})
    server = RootServer(config)
    server.start()
    return server


def make_collector(parents: list[str], node_id: str, **options: Any) -> CollectorServer:
    server = CollectorServer(CollectorConfig(parents=parents, node_id=node_id, **{**FAST_COLLECTOR, **options}))
    server.start()
    return server


def make_agent(parents: list[str], sock: Path, node_id: str, **options: Any) -> AgentServer:
    server = AgentServer(AgentConfig(parents=parents, socket=sock, node_id=node_id, **{**FAST_AGENT, **options}))
    server.start()
    return server


def stop_all(*servers: Any) -> None:
    for server in servers:
        if server is None:
            continue
        try:
            server.stop(0.2)
        except Exception:  # a server a test already stopped
            pass


def api_get(api_address: str, path: str) -> tuple[int, Any]:
    """GET from the root's JSON API: (HTTP status, decoded JSON body)."""
    try:
        with urllib.request.urlopen(f"http://{api_address}{path}", timeout=10) as reply:
            return reply.status, json.load(reply)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def steps(api_address: str, job: str, metric: str, last: int = 1000) -> list[dict]:
    status, body = api_get(api_address, f"/api/v1/jobs/{job}/steps?metric={metric}&last={last}")
    assert status == 200, body
    return body["steps"]


def all_steps(api_address: str, job: str, metric: str, count: int, timeout: float = 30.0) -> dict[int, dict]:
    """`metric`'s rows of `job` by step, once the root holds `count` steps of it (a job's last windows reach the
    root a little after the job ends); fails the test naming the metric if they do not within `timeout` s."""
    def complete() -> dict[int, dict] | None:
        rows = {row["step"]: row for row in steps(api_address, job, metric, last=10_000)}
        return rows if len(rows) == count else None
    return wait_for(complete, timeout=timeout, what=f"{metric}: {count} steps of {job} at the root")


def events(api_address: str, job: str, kind: str) -> list[dict]:
    """The root's events of `job` of one kind."""
    status, body = api_get(api_address, f"/api/v1/jobs/{job}/events")
    assert status == 200, body
    return [event for event in body["events"] if event["kind"] == kind]


def hanging_job(agent: AgentServer, job: str = "healthy") -> list:
    """Two real SDK ranks of `job` on `agent`: both log `loss` = step + rank / 4 for steps 1-3, then rank 0 alone
    ends step 4 (rank 1 never reaches it: the root's hang detector names rank 1 at step 4). The caller closes the
    runs it returns."""
    runs = [telemetry.init(job=job, rank=r, world_size=2, agent=f"unix:{agent.socket_path}") for r in range(2)]
    for step in range(1, 4):
        for rank, run in enumerate(runs):
            run.log(step, loss=step + rank / 4)
            run.end_step(step)
    runs[0].log(4, loss=4.0)
    runs[0].end_step(4)
    return runs


def counters(server: CollectorServer | RootServer) -> dict[str, int]:
    with server.node.lock:
        return server.node.subtree_counters()


def health_status(address: str, service: str = "", credentials: grpc.ChannelCredentials | None = None,
                  options: list | None = None) -> int:
    channel = (grpc.secure_channel(address, credentials, options=options or []) if credentials
               else grpc.insecure_channel(address))
    with channel:
        stub = health_pb2_grpc.HealthStub(channel)
        return stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=5).status


SERVING = health_pb2.HealthCheckResponse.SERVING


# ---------------------------------------------------------------- raw gRPC children and parents


def summary_of(values: dict[int, float] | dict[int, list[float]]) -> Summary:
    """A summary of {source: value or [values]}."""
    vals, srcs = [], []
    for source, value in values.items():
        for v in (value if isinstance(value, list) else [value]):
            vals.append(float(v))
            srcs.append(source)
    return Summary.from_arrays(np.array(vals, dtype=np.float64), np.array(srcs, dtype=np.int64))


def window(job: str, metric: str, step: int, values: dict, expected: int = 0,
           late: bool = False) -> forward_pb2.WindowSummary:
    return forward_pb2.WindowSummary(key=Key(job, metric, step).to_proto(), summary=summary_of(values).to_proto(),
                                     expected=expected, late=late)


class RawChild:
    """A hand-driven child on a Forward stream: send SummaryBatches one by one, read the Acks."""

    def __init__(self, address: str, sender_id: str, metadata: tuple = (), channel: grpc.Channel | None = None):
        self.sender_id = sender_id
        # A channel of its own subchannels: gRPC shares one subchannel among every channel to the same address, so a
        # channel to a port a stopped server of an earlier test held (port 0 can hand it out again) would inherit that
        # subchannel's connect backoff and fail its first call at once (UNAVAILABLE): the suspected cause of a
        # stream that ended before its opening's ack in CI once (test_root_skip_received, session 44).
        self.channel = channel or grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        self._requests: queue.Queue = queue.Queue()
        self.acks: queue.Queue = queue.Queue()
        self.error: grpc.RpcError | None = None
        self.seq = 0
        self.covers: dict[tuple[str, int], BitMap] = {}  # (job, attempt) -> the ranks its windows named
        self.worlds: dict[tuple[str, int], int] = {}
        stub = forward_pb2_grpc.CollectorStub(self.channel)
        self.call = stub.Forward(iter(self._requests.get, None), metadata=metadata)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.send(forward_pb2.SummaryBatch(sender_id=sender_id, seq=0))

    def _read(self) -> None:
        try:
            for ack in self.call:
                self.acks.put(ack)
        except grpc.RpcError as exc:
            self.error = exc
        finally:
            self.acks.put(None)

    def send(self, batch: forward_pb2.SummaryBatch) -> None:
        self._requests.put(batch)

    def batch(self, *windows: forward_pb2.WindowSummary, seq: int | None = None) -> int:
        """Send a numbered batch of windows; returns its seq. Like an honest child, it also sends rank states
        naming the ranks its windows speak for (a tier refuses windows about ranks the child does not cover):
        every source of every window it ever sent, as alive, by job and attempt."""
        if seq is None:
            self.seq += 1
            seq = self.seq
        for one in windows:
            try:
                check_job(one.key.job)
                sources = Summary.from_proto(one.summary).sources
            except (ValueError, BadInput):  # a malformed window (a test of refusals): it names no rank
                continue
            if not sources or max(sources) >= DEFAULT_MAX_WORLD_SIZE:
                continue
            job = (one.key.job, one.key.attempt)
            self.covers.setdefault(job, BitMap()).update(sources)
            declared = one.expected if one.expected <= DEFAULT_MAX_WORLD_SIZE else 0  # an absurd one is a test's
            self.worlds[job] = max(self.worlds.get(job, 0), declared, max(sources) + 1)
        states = [forward_pb2.RankStates(job=job, attempt=attempt, alive=ranks.serialize(),
                                         world_size=self.worlds[(job, attempt)])
                  for (job, attempt), ranks in self.covers.items() if ranks]
        self.send(forward_pb2.SummaryBatch(sender_id=self.sender_id, seq=seq, windows=list(windows), ranks=states))
        return seq

    def ack(self, timeout: float = 10.0) -> forward_pb2.Ack | None:
        """The next Ack; None once the stream ended (see .error)."""
        try:
            return self.acks.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no ack within {timeout} s") from None

    def ack_for(self, seq: int, status: int, timeout: float = 10.0) -> forward_pb2.Ack:
        """Skip acks until one for `seq` with `status` arrives."""
        deadline = time.monotonic() + timeout
        while True:
            ack = self.ack(max(0.01, deadline - time.monotonic()))
            if ack is None:
                raise AssertionError(f"stream ended before ack {seq}: {self.error}")
            if ack.seq == seq and ack.status == status:
                return ack

    def close(self) -> None:
        self._requests.put(None)
        self.call.cancel()
        self.channel.close()


class FakeParent(forward_pb2_grpc.CollectorServicer):
    """A parent that records every batch; acks RECEIVED, and DURABLE too when `durable` is set."""

    def __init__(self, durable: bool = True) -> None:
        self.durable = durable
        self.batches: list[forward_pb2.SummaryBatch] = []
        self.lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        forward_pb2_grpc.add_CollectorServicer_to_server(self, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.address = f"127.0.0.1:{port}"
        self.server.start()

    def Forward(self, request_iterator, context):
        for batch in request_iterator:
            with self.lock:
                self.batches.append(batch)
            yield forward_pb2.Ack(seq=batch.seq, status=forward_pb2.Ack.RECEIVED)
            if self.durable and batch.seq:
                yield forward_pb2.Ack(seq=batch.seq, status=forward_pb2.Ack.DURABLE)

    def seqs(self) -> list[int]:
        with self.lock:
            return [b.seq for b in self.batches]

    def stop(self, grace: float = 0.2) -> None:
        self.server.stop(grace).wait(grace + 1)


_HELD: list[socket.socket] = []  # dead_address's sockets, bound for the life of the test process


def dead_address() -> str:
    """A loopback address nobody listens on. Its port stays bound (not listening: a connection is refused) for the
    life of the process, so a later port-0 bind (another test's server) is never handed it, as it could be if the
    port were let go here; SO_REUSEADDR leaves a test free to listen on it itself."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return f"127.0.0.1:{sock.getsockname()[1]}"


def spawn_root(workdir: Path, deadline_floor: float = 0.8):
    """A root in a process of its own (`telemetry collector`), for tests that may wedge it: kill it after."""
    from collectors.sim.procs import Proc, python_module
    proc = Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", "127.0.0.1:0",
                                      "--db", str(workdir / "root.db"), "--api", "127.0.0.1:0",
                                      "--deadline-floor", str(deadline_floor)), workdir)
    return proc.start()
