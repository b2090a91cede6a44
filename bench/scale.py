#!/usr/bin/env python
"""Scale: the aggregation tree from 1,024 to 16,384 ranks, against gathering everything (issue 5).

    python bench/scale.py --out bench/results [--sizes 1024,2048,4096,8192,16384] [--steps 10] [--quick]

Per size N: 20 metrics per rank per step, 8 ranks per node agent, 32 agents per rack (--agents-per-rack).

The tree: every collector (racks; a cluster tier when there are more racks than the root's fan-in of 4,
--root-fanin, each collector taking at most 16 children, --racks-per-collector; the root with its SQLite store,
API and detectors) is a real `CollectorServer` process (grpc.aio) speaking gRPC on loopback. The sizes in --wide
(default 16,384) are also run, tree only, at realistic fan-ins (--wide-shape 64x32: 64 agents per rack, up to 32
racks per collector, so 16,384 ranks are 2,048 agents in 32 racks of 64 under the root). The node agents are
the real agent classes wired as `AgentServer.__init__` wires them, each with its own Outbox and Forward stream to its rack, hosted up to 256 to
a process. At every size, rank input is fed to the agents in-process (a pre-serialised `RankMessage` per rank
per step, parsed and handed to `AgentService._batch` as the stream reader does; no SDK stream), and each agent
is then ticked once with `AgentServer`'s flush body.

The baseline: one process receives every rank's every value over the same gRPC stack and, once all N ranks
sent a step, computes exact figures per metric with numpy and commits them to SQLite.

Each run: start, warm-up steps, an idle period (each process's background CPU per second), then the measured
steps, closed loop. Per step figures are process CPU (every thread) net of the idle background; bytes are
counted by the receiving process; peak RSS is VmHWM. See docs/scale.md.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import queue
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from machine import cpu_model, git_head, memory_bytes  # noqa: E402  (bench/machine.py)

JOB = "scale"
METRICS = ["step_time"] + [f"metric_{i:02d}" for i in range(1, 20)]
RANKS_PER_NODE = 8
AGENTS_PER_HOST = 256
RANKS_PER_SENDER = 2048
RANKS_PER_CHANNEL = 64
RANKS_PER_STREAM = 16  # baseline: two nodes' ranks share a stream (grpcio's limit on concurrent streams, below)
QS = (0.5, 0.9, 0.99, 0.999)
QNAMES = ("p50", "p90", "p99", "p99.9")
DEFAULT_SIZES = (1024, 2048, 4096, 8192, 16384)
CLK_TCK = os.sysconf("SC_CLK_TCK")

METHOD = {
    "per_step": "net of the idle background: (delta - idle rate x wall) / measured steps; gross in the JSON too",
    "cpu": "time.process_time() of the whole process, asked in-process (every thread); /proc/PID/stat "
           "utime+stime recorded beside it as a cross-check",
    "peak_rss": "VmHWM from /proc/PID/status at the end of the run",
    "bytes": "tree: ByteSize() of every SummaryBatch a collector's service is handed (in the receiving "
             "process); gather: length of every message the server receives; protobuf payload bytes, "
             "without gRPC/HTTP2 framing",
    "agent": "CPU of the agent-hosting processes / agents hosted; rank input fed in-process (no SDK, "
             "no rank-facing gRPC) at every size",
    "latency": "finalised_ns - last_time_ns of every metric window of the measured steps (root API rows; "
               "the gather server's rows)",
    "steps_per_s": "measured steps / (last finalised - first fed), closed loop: a step is fed once the previous "
                   "one is finalised at the root",
    "rel_err": "|root estimate / numpy.quantile(all N fed values) - 1| per step (warm-up and measured); "
               "rank_err: |fraction of the N values <= estimate - q|",
    "own_code": "beside process CPU: thread CPU of the tier's own code on the steps' data (collectors: handling "
                "units with windows, flush ticks with windows pending, shipping them, the parent's acks of them; "
                "agents: feeding and ticking, the parent's acks); no gRPC threads, no background",
}

TARGETS = {
    "root_bytes_per_step_per_metric_growth_1k_to_16k": "<= 1.2x (baseline ~16x)",
    "root_cpu_ms_per_step": "<= 20, and <= 1.2x from 1,024 to 16,384",
    "rack_cpu_ms_per_step": "<= 20",
    "agent_cpu_ms_per_step": "<= 2 (one agent, 8 ranks)",
    "step_time_rel_err": "p50/p90/p99 <= 0.5 %, p99.9 <= 1 %",
}


# ---------------------------------------------------------------------------- shared
def step_values(seed: int, step: int, world: int) -> np.ndarray:
    """Every rank's value of every metric at one step: shape (20, world). Row 0 is step_time.

    Lognormal (sigma 1, median 0.5): the distribution the summary's error is stated for, and far
    wider than real step times, so a hard case for the sketch.
    """
    rng = np.random.default_rng([seed, step])
    return 0.5 * rng.lognormal(0.0, 1.0, size=(len(METRICS), world))


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def commands(handle) -> None:  # type: ignore[no-untyped-def]
    """Child side: read JSON commands on stdin, answer each with {"id": ..., **handle(cmd)}; EOF stops."""
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            # CPU of the whole process (every thread, live or exited), nanosecond clock
            reply = {"cpu": time.process_time()} if cmd.get("cmd") == "cpu" else (handle(cmd) or {})
        except Exception as exc:  # reported to the parent, which fails the run
            reply = {"error": repr(exc)}
        emit({"id": cmd.get("id"), **reply})
        if cmd.get("cmd") == "stop":
            break


def cpu_seconds(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process from /proc/PID/stat (10 ms resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def vm_hwm_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


# ---------------------------------------------------------------------------- children
def child_collector(cfg: dict) -> None:
    """A real CollectorServer; counts the bytes of every SummaryBatch it is handed (the receiving side)."""
    from collectors.collector.server import CollectorConfig, CollectorServer

    root = not cfg["parents"]
    server = CollectorServer(CollectorConfig(
        listen="127.0.0.1:0", parents=cfg["parents"], node_id=cfg["id"],
        db=Path(cfg["db"]) if root else None, api="127.0.0.1:0" if root else None,
        deadline_floor_s=cfg["deadline_floor"]))
    stats = {"batches": 0, "windows": 0, "bytes": 0, "bytes_with_windows": 0, "rank_state_bytes": 0,
             "hosts_listed": 0, "step_work_s": 0.0}
    # Beside the process CPU: the thread CPU of the tier's own code on a step's data (units carrying windows,
    # flush ticks with windows pending, shipping them, the parent's acks of them). It leaves out gRPC's threads
    # and the background, and does not depend on how long a step of the simulation takes.
    lock = threading.Lock()

    def timed(fn: Any, is_step: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args)
            finally:
                if is_step(*args):
                    with lock:
                        stats["step_work_s"] += time.thread_time() - t0
        return wrapper

    handle = server.service._handle

    def counted(sender, batch, responses):  # type: ignore[no-untyped-def]
        size = batch.ByteSize()
        stats["batches"] += 1
        stats["bytes"] += size
        if batch.windows:
            stats["bytes_with_windows"] += size
            stats["windows"] += len(batch.windows)
        for states in batch.ranks:
            stats["rank_state_bytes"] += states.ByteSize()
            stats["hosts_listed"] += len(states.hosts)
        return handle(sender, batch, responses)

    server.service._handle = timed(counted, lambda sender, batch, responses: bool(batch.windows))  # type: ignore
    table = server.node.table
    table.due = timed(table.due, lambda now, complete: bool(table._pending))  # type: ignore[method-assign]
    sink = server.node.sink
    ship = sink.ship

    def ship_timed(node: Any, windows: Any, now: float) -> Any:
        # The root's Finaliser returns its SQLite commit, which Node.flush runs after releasing the node's lock:
        # time that too (a tier's Upstream returns None).
        after = ship(node, windows, now)
        return None if after is None else timed(after, lambda: True)

    sink.ship = timed(ship_timed, lambda node, windows, now: bool(windows))  # type: ignore[union-attr]
    if not root:
        outbox = server.upstream.outbox
        outbox._on_ack = timed(outbox._on_ack, lambda unit, ack: bool(unit.message.windows))
    server.start()
    emit({"ready": True, "address": server.address, "api": server.api_address, "pid": os.getpid()})

    def on(cmd: dict) -> dict:
        if cmd["cmd"] == "stats":
            with server.node.lock:
                counters = server.node.subtree_counters()
            with lock:
                return {"stats": dict(stats), "counters": counters}
        return {}

    commands(on)
    os._exit(0)


def _die_with_parent() -> None:  # preexec_fn of the rank stand-in; its parent has no threads yet
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def quiet_grpc_waits(seconds: float | None) -> None:
    """grpcio's synchronous client wakes every thread blocked reading a stream 10 times a second (grpc._common.wait
    polls with MAXIMUM_WAIT_TIMEOUT = 0.1 s so that signal handlers run). A real agent pays that for its one Outbox
    stream (~0.25 ms of CPU a second, measured below); a process hosting 256 simulated agents pays it 2,560 times a second. Only the
    agent-hosting processes lengthen it (--grpc-wait-s; an event still wakes the waiting thread at once), measured
    at 4,096 ranks (512 agents in 2 processes, 2 runs each): idle CPU of the 2 processes 8 ms/s with 5 s, 130-156
    ms/s with grpcio's 0.1 s; per agent per step 3.39-3.43 ms against 3.67-3.68; 0.53-0.55 steps/s against 0.44.
    Collectors are grpc.aio servers whose only synchronous stream is their one Outbox: lengthening it there changed
    nothing measurable (idle CPU of 21 collectors 153-166 ms/s either way), nor in the baseline's senders (idle
    3.8 / 4.0 ms/s); they keep grpcio's own. None: leave grpcio's 0.1 s."""
    if seconds is None:
        return
    import grpc._common
    grpc._common.MAXIMUM_WAIT_TIMEOUT = seconds


class _Link:
    """Stands in for a rank stream's answer queue: counts the acks the agent sends the rank."""

    __slots__ = ("received", "durable", "other")

    def __init__(self) -> None:
        self.received = self.durable = self.other = 0

    def put(self, ack: Any) -> None:
        status = getattr(ack, "status", None)
        if status == 2:
            self.received += 1
        elif status == 3:
            self.durable += 1
        else:
            self.other += 1


def _agent_server_class() -> type:
    from collectors.agent.server import AgentServer
    return AgentServer


class SimAgent(_agent_server_class()):  # type: ignore[misc]
    """One node agent, wired like AgentServer.__init__ minus the rank-facing gRPC server (whose __init__ is not
    called); its flush body (`_flush`, and whatever it calls) is AgentServer's own."""

    def __init__(self, index: int, parent: str, world: int, first_rank: int, nranks: int, rank_pid: int,
                 host: Any) -> None:
        import inspect

        from collectors.agent.ranks import RankRegistry
        from collectors.agent.server import AgentConfig
        from collectors.agent.service import AgentService
        from collectors.common.aioserve import StreamSlots
        from collectors.common.validation import MetricBudget
        from collectors.delivery.node import Node, Upstream
        from collectors.delivery.outbox import Outbox
        from collectors.delivery.windows import Deadlines
        from telemetry.v1 import ingest_pb2

        config = AgentConfig(parents=[parent])  # the agent's defaults (deadlines, retention, metric budget)
        node_id = f"agent{index}"
        self.node = Node(node_id, Deadlines(config.deadline_floor_s, config.deadline_factor),
                         ack_down=lambda *a, **k: self.service.ack_down(*a, **k), retain_s=config.retain_s)
        self.node.complete = lambda win: True
        # connect_timeout_s: 30 s instead of the Outbox's 2 s, so that 2,048 agents connecting at once on a
        # loaded 2-core machine do not churn through timeouts and reconnects before the run begins.
        self.upstream = Upstream(self.node, lambda on_ack: Outbox(
            node_id, config.parents, config.parent_security, on_ack, connect_timeout_s=30.0))
        self.node.sink = self.upstream
        self.registry = RankRegistry(config.stuck_after_s)
        # `host` (one aioserve.Host per hosting process) would run a rank-facing server's streams; there is none
        # here: ranks are fed in-process, so neither it nor the slots are used.
        extra = {}
        if "lifecycle" in inspect.signature(AgentService).parameters:  # job lifecycle (after bd1a11c)
            from collectors.delivery.lifecycle import JobLifecycle
            self.lifecycle = extra["lifecycle"] = JobLifecycle(config.job_idle_timeout_s)
            self._swept_at = 0.0
        self.config = config
        self.service = AgentService(self.node, self.registry, MetricBudget(config.max_metrics_per_job), host,
                                    StreamSlots(config.max_ranks, "rank", "--max-ranks"), **extra)
        self.ranks = list(range(first_rank, first_rank + nranks))
        self.links = {r: _Link() for r in self.ranks}
        self.infos = {}
        for r in self.ranks:
            hello = ingest_pb2.RankHello(job=JOB, rank=r, world_size=world, local_rank=r - first_rank,
                                         host=f"node{index:05d}", pid=rank_pid)
            with self.node.lock:
                self.infos[r] = self.service._hello(hello, self.links[r])

    def tick(self) -> None:
        """AgentServer._flush: the body of its flush loop."""
        self._flush()


def rank_messages(seed: int, step: int, world: int, ranks: list[int]) -> list[bytes]:
    """Each rank's step as the SDK sends it: a RankMessage of 20 metrics of one value. end_time_ns is left 0, so
    the agent stamps the values with their arrival time."""
    from telemetry.v1 import ingest_pb2
    values = step_values(seed, step, world)
    return [ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job=JOB, rank=r, seq=step, steps=[
        ingest_pb2.RankStepBatch(step=step, closed=True, metrics=[
            ingest_pb2.MetricValues(metric=m, values=[float(values[i, r])]) for i, m in enumerate(METRICS)])]))
        .SerializeToString() for r in ranks]


def share_channels() -> None:
    """One gRPC channel per rack address for all the agents a process hosts, instead of one each (each with its
    own keepalive pings every 10 s and grpcio's per-channel machinery): every agent still has its own Outbox,
    thread and Forward stream. Still needed with the aio servers, for the simulation's sake only (a real agent is
    one process with one channel): at 4,096 ranks (2 hosting processes) it changes no per-step figure (agent
    3.32-3.41 ms/step with a channel each, 3.39-3.43 shared; idle 40 against 8 ms/s), but at 16,384 ranks (8
    processes of 256 agents on 2 cores) a channel each made an agent cost 13.1 instead of 5.9 ms/step (own code
    4.6 / 4.1), the hosting processes idle at 188 instead of 42 ms/s, and the run 0.04 instead of 0.08 steps/s.
    --no-share-channels gives each agent its own."""
    import collectors.delivery.outbox as outbox_module
    make_channel = outbox_module.make_channel
    shared: dict[str, Any] = {}

    class Shared:
        def __init__(self, channel: Any) -> None:
            self._channel = channel

        def __getattr__(self, name: str) -> Any:
            return getattr(self._channel, name)

        def close(self) -> None:  # the other agents still use it
            return None

    def shared_channel(address: str, security: Any = None) -> Any:
        if address not in shared:
            shared[address] = make_channel(address, security)
        return Shared(shared[address])

    outbox_module.make_channel = shared_channel


def child_agents(cfg: dict) -> None:
    """Hosts many agents; on command, feeds one step of their ranks in-process and ticks each agent."""
    from collectors.common.aioserve import Host
    from collectors.common.gctune import tune_gc
    from collectors.common.validation import check_size
    from telemetry.v1 import ingest_pb2

    quiet_grpc_waits(cfg.get("grpc_wait_s"))
    if cfg.get("share_channels"):
        share_channels()
    tune_gc()  # as AgentServer.start does
    world, first, count, seed = cfg["world"], cfg["first_agent"], cfg["agents"], cfg["seed"]
    host = Host("sim-agents")
    # The ranks' process, whose /proc/PID/stat the agents read for liveness: a single-threaded stand-in. Reading
    # the stat of this hosting process (hundreds of threads) costs the kernel O(threads) per read.
    rank_process = subprocess.Popen(["sleep", "infinity"], preexec_fn=_die_with_parent)
    agents = [SimAgent(a, cfg["racks"][a // cfg["agents_per_rack"]], world, a * RANKS_PER_NODE,
                       min(RANKS_PER_NODE, world - a * RANKS_PER_NODE), rank_process.pid, host)
              for a in range(first, first + count)]
    for agent in agents:
        agent.upstream.outbox.start()
    deadline = time.monotonic() + 60
    while any(a.upstream.outbox.connected_to is None for a in agents) and time.monotonic() < deadline:
        time.sleep(0.05)
    messages = {step: [rank_messages(seed, step, world, agent.ranks) for agent in agents]
                for step in range(1, cfg["steps"] + 1)}

    # What a production agent pays per idle 20 ms tick, and per liveness refresh (8 ranks' /proc reads).
    probe = agents[0]
    probe.tick()
    t0 = time.thread_time()
    for _ in range(500):
        probe.tick()
    idle_tick_us = (time.thread_time() - t0) / 500 * 1e6
    t0 = time.thread_time()
    for _ in range(100):
        probe.registry.views()
    views_us = (time.thread_time() - t0) / 100 * 1e6
    for agent in agents:  # each agent's first flush: a liveness unit, so its rack knows its ranks before step 1
        agent.tick()
    # A cyclic GC pass would walk every hosted agent and pre-built message: freeze what setup built, so a
    # collection costs about what it costs one agent's own process.
    gc.collect()
    gc.freeze()
    emit({"ready": True, "pid": os.getpid(), "agents": len(agents), "idle_tick_us": idle_tick_us,
          "views_us": views_us, "connected": sum(a.upstream.outbox.connected_to is not None for a in agents)})

    work = {"step_work_s": 0.0}
    work_lock = threading.Lock()
    for agent in agents:  # the parent's acks of units carrying windows, on each agent's outbox thread
        outbox = agent.upstream.outbox

        def acked(unit: Any, ack: Any, on_ack: Any = outbox._on_ack) -> None:
            t0 = time.thread_time()
            on_ack(unit, ack)
            if unit.message.windows:
                with work_lock:
                    work["step_work_s"] += time.thread_time() - t0
        outbox._on_ack = acked

    def feed(step: int) -> dict:
        t0 = time.thread_time()
        for agent, raws in zip(agents, messages[step]):
            node, service = agent.node, agent.service
            for rank, raw in zip(agent.ranks, raws):
                message = ingest_pb2.RankMessage.FromString(raw)  # as the agent's stream reader does
                check_size(message)
                with node.lock:
                    service._batch(agent.infos[rank], message.batch, agent.links[rank])
            agent.tick()  # the agent's next flush tick, right after its last rank's batch
        with work_lock:
            work["step_work_s"] += time.thread_time() - t0
        return {"fed": step}

    def on(cmd: dict) -> dict:
        if cmd["cmd"] == "feed":
            return feed(cmd["step"])
        if cmd["cmd"] == "stats":
            links = [link for a in agents for link in a.links.values()]
            return {"received": sum(x.received for x in links), "durable": sum(x.durable for x in links),
                    "other": sum(x.other for x in links), "ranks": len(links),
                    "min_durable": min(x.durable for x in links),
                    "outbox_pending": sum(a.upstream.outbox.pending() for a in agents),
                    "resent": sum(a.upstream.outbox.resent for a in agents),
                    "bad_inputs": sum(a.node.counters["bad_inputs"] for a in agents),
                    "step_work_s": work["step_work_s"]}
        return {}

    commands(on)
    os._exit(0)


GATHER_SERVICE = "bench.Gather"


def _grpc_options() -> list[tuple[str, int]]:
    # The tree's server/channel options (collectors.common.transport): 4x the 16 MiB message limit.
    from collectors.common.validation import DEFAULT_MAX_MESSAGE_BYTES
    return [("grpc.max_receive_message_length", 4 * DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)]


def child_gather(cfg: dict) -> None:
    """The baseline: one process receives every rank's every value, keeps them, finalises exactly."""
    import asyncio

    import grpc

    from telemetry.v1 import ingest_pb2

    world = cfg["world"]
    index = {m: i for i, m in enumerate(METRICS)}
    stats = {"messages": 0, "bytes": 0, "finalised": 0, "values": 0}
    steps: dict[int, dict[str, Any]] = {}  # step -> {"values": (20, world) array, "count", "last_ns"}
    db = sqlite3.connect(cfg["db"], isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS windows (metric TEXT, idx INTEGER, count INTEGER, mean REAL, "
               "stddev REAL, min REAL, argmin INTEGER, max REAL, argmax INTEGER, top TEXT, p50 REAL, p90 REAL, "
               "p99 REAL, p999 REAL, last_time_ns INTEGER, finalised_ns INTEGER, PRIMARY KEY (metric, idx))")

    def finalise(step: int, rec: dict[str, Any]) -> None:
        stamp = time.time_ns()
        rows = []
        for i, metric in enumerate(METRICS):
            v = rec["values"][i]
            top = np.argsort(-v, kind="stable")[:8]
            p = np.quantile(v, QS)
            rows.append((metric, step, int(v.size), float(v.mean()), float(v.std()), float(v.min()),
                         int(v.argmin()), float(v.max()), int(v.argmax()),
                         json.dumps([[float(v[j]), int(j)] for j in top]), *map(float, p), rec["last_ns"], stamp))
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO windows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.execute("COMMIT")
        stats["finalised"] += 1

    def take(raw: bytes) -> None:
        stats["messages"] += 1
        stats["bytes"] += len(raw)
        batch = ingest_pb2.RankBatch.FromString(raw)
        for sb in batch.steps:
            rec = steps.get(sb.step)
            if rec is None:
                rec = steps[sb.step] = {"values": np.full((len(METRICS), world), np.nan), "count": 0, "last_ns": 0}
            values = rec["values"]
            for mv in sb.metrics:
                values[index[mv.metric], batch.rank] = mv.values[0]
                stats["values"] += len(mv.values)
            rec["count"] += 1
            if sb.end_time_ns > rec["last_ns"]:
                rec["last_ns"] = sb.end_time_ns
            if rec["count"] == world:
                finalise(sb.step, rec)

    async def push_stream(requests, context):  # type: ignore[no-untyped-def]
        async for raw in requests:
            take(raw)
        return b""

    async def main() -> None:
        server = grpc.aio.server(options=_grpc_options())
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            GATHER_SERVICE, {"PushStream": grpc.stream_unary_rpc_method_handler(push_stream)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        emit({"ready": True, "address": f"127.0.0.1:{port}", "pid": os.getpid()})
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def on(cmd: dict) -> dict:
            if cmd["cmd"] == "stats":
                return {"stats": dict(stats), "steps_held": len(steps)}
            if cmd["cmd"] == "stop":
                loop.call_soon_threadsafe(done.set)
            return {}

        threading.Thread(target=commands, args=(on,), daemon=True).start()
        await done.wait()

    asyncio.run(main())
    os._exit(0)


def child_senders(cfg: dict) -> None:
    """Baseline ranks: each sends its RankBatch of 20 values per step to the gather server.

    A stream per RANKS_PER_STREAM ranks (their messages multiplexed on it), from grpcio's synchronous client (a
    thread per stream): grpcio's asyncio server stalls with ~2,000 concurrent streams or more (measured here), so
    16,384 ranks use 1,024 streams.
    """
    import grpc

    from telemetry.v1 import ingest_pb2

    world, lo, hi = cfg["world"], cfg["first_rank"], cfg["first_rank"] + cfg["ranks"]
    batches = {step: [ingest_pb2.RankMessage.FromString(raw).batch
                      for raw in rank_messages(cfg["seed"], step, world, list(range(lo, hi)))]
               for step in range(1, cfg["steps"] + 1)}
    channels = [grpc.insecure_channel(cfg["gather"], options=_grpc_options() + [
        ("grpc.use_local_subchannel_pool", 1)]) for _ in range(0, hi - lo, RANKS_PER_CHANNEL)]
    for channel in channels:
        grpc.channel_ready_future(channel).result(timeout=60)
    queues: list[queue.Queue] = [queue.Queue() for _ in range(lo, hi, RANKS_PER_STREAM)]
    calls = [channels[i * RANKS_PER_STREAM // RANKS_PER_CHANNEL].stream_unary(f"/{GATHER_SERVICE}/PushStream")
             .future(iter(q.get, None)) for i, q in enumerate(queues)]
    emit({"ready": True, "pid": os.getpid(), "ranks": hi - lo, "streams": len(calls)})

    def on(cmd: dict) -> dict:
        if cmd["cmd"] == "feed":
            for i, batch in enumerate(batches[cmd["step"]]):
                batch.steps[0].end_time_ns = time.time_ns()
                queues[i // RANKS_PER_STREAM].put(batch.SerializeToString())
            return {"fed": cmd["step"]}
        return {}

    commands(on)
    os._exit(0)


# ---------------------------------------------------------------------------- parent side
class Child:
    """A child process of this script (`_child ROLE CONFIG`): a JSON ready line, then JSON commands."""

    def __init__(self, name: str, role: str, config: dict, logs: Path) -> None:
        from collectors.common.lifetime import PARENT_ENV
        self.name = name
        env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
        log = open(logs / f"{name}.log", "ab")
        self.popen = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "_child", role,
                                       json.dumps(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=log, env=env, cwd=REPO, text=True, bufsize=1)
        log.close()
        self.log_path = logs / f"{name}.log"
        self.pid = self.popen.pid
        self.ready: dict = {}
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._first: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("ready"):
                self._first.put(msg)
                continue
            with self._cond:
                self._replies[msg.get("id")] = msg
                self._cond.notify_all()
        self._first.put(None)
        with self._cond:
            self._cond.notify_all()

    def wait_ready(self, timeout: float = 600.0) -> dict:
        try:
            msg = self._first.get(timeout=timeout)
        except queue.Empty:
            msg = None
        if msg is None:
            raise RuntimeError(f"{self.name} did not start: {self.tail()}")
        self.ready = msg
        return msg

    def send(self, cmd: dict) -> int:
        self._next += 1
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"id": self._next, **cmd}) + "\n")
        self.popen.stdin.flush()
        return self._next

    def wait(self, ident: int, timeout: float = 120.0) -> dict:
        end = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = end - time.monotonic()
                if left <= 0 or self.popen.poll() is not None:
                    raise RuntimeError(f"{self.name}: no answer to command {ident}: {self.tail()}")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def ask(self, cmd: dict, timeout: float = 120.0) -> dict:
        return self.wait(self.send(cmd), timeout)

    def cpu_jiffies(self) -> float:
        return cpu_seconds(self.pid)

    def hwm_mb(self) -> float:
        return vm_hwm_kb(self.pid) / 1024

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass


def cpu_of(children: dict[str, Child]) -> dict[str, tuple[float, float]]:
    """Each child's process CPU seconds: (time.process_time() asked in-process, /proc/PID/stat utime+stime)."""
    idents = {n: c.send({"cmd": "cpu"}) for n, c in children.items()}
    return {n: (c.wait(idents[n])["cpu"], c.cpu_jiffies()) for n, c in children.items()}


def start_all(children: list[Child], timeout: float = 600.0) -> None:
    for child in children:
        child.wait_ready(timeout)


def kill_all(children: list[Child]) -> None:
    for child in children:
        if child.popen.poll() is None:
            child.popen.kill()
    for child in children:
        child.kill()


def plan_tree(world: int, shape: dict[str, int]) -> dict[str, Any]:
    """Agents, racks of `agents_per_rack`, and collector tiers above the racks (each collector taking at most
    `max_fanin` children) until the root has at most `root_fanin` children."""
    per_rack, max_fanin, root_fanin = shape["agents_per_rack"], shape["max_fanin"], shape["root_fanin"]
    agents = math.ceil(world / RANKS_PER_NODE)
    racks = math.ceil(agents / per_rack)
    tiers = [racks]
    while tiers[-1] > root_fanin:
        tiers.append(max(root_fanin if root_fanin < max_fanin else 1, math.ceil(tiers[-1] / max_fanin)))
    names = ["rack"] + ["cluster" if i == 1 else f"tier{i + 1}" for i in range(1, len(tiers))]
    return {"agents": agents, "tiers": dict(zip(names, tiers)), "root_fanin": tiers[-1], "shape": shape_name(shape),
            "path": "agent -> " + " -> ".join(names) + " -> root",
            "fanin": {"rack": min(per_rack, agents),
                      **{names[i]: math.ceil(tiers[i - 1] / tiers[i]) for i in range(1, len(tiers))}}}


def shape_name(shape: dict[str, int]) -> str:
    return f"{shape['agents_per_rack']} agents/rack, root fan-in <= {shape['root_fanin']}" + (
        f", <= {shape['max_fanin']} per collector" if shape["max_fanin"] != shape["root_fanin"] else "")


class RootDb:
    """Reads a root's (or the baseline's) SQLite store read-only: the parent polls it, the root is not asked."""

    def __init__(self, path: Path, baseline: bool) -> None:
        self.path, self.baseline = path, baseline
        self.db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection | None:
        if self.db is None and self.path.exists():
            try:
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            except sqlite3.Error:
                return None
        return self.db

    def complete(self, world: int, lo: int, hi: int, metric: str | None = "step_time") -> set[int]:
        """Steps in [lo, hi] whose window(s) are finalised with every rank counted."""
        db = self._conn()
        if db is None:
            return set()
        where = "metric=? AND" if metric else ""
        args: tuple = (metric,) if metric else ()
        extra = "" if self.baseline else " AND job='scale' AND width_ms=0"
        try:
            rows = db.execute(f"SELECT idx, count(*) FROM windows WHERE {where} idx BETWEEN ? AND ? AND count=?"
                              f"{extra} GROUP BY idx", (*args, lo, hi, world)).fetchall()
        except sqlite3.Error:
            return set()
        need = 1 if metric else len(METRICS)
        return {idx for idx, n in rows if n >= need}

    def rows(self, lo: int, hi: int) -> list[dict]:
        db = self._conn()
        assert db is not None
        db.row_factory = sqlite3.Row
        extra = "" if self.baseline else " AND job='scale' AND width_ms=0"
        out = [dict(r) for r in db.execute(
            f"SELECT metric, idx, count, p50, p90, p99, p999, last_time_ns, finalised_ns FROM windows "
            f"WHERE idx BETWEEN ? AND ?{extra}", (lo, hi))]
        db.row_factory = None
        return out

    def late(self, lo: int, hi: int) -> int:
        """Late deltas the root merged into the steps' windows (0 when every window sealed complete)."""
        db = self._conn()
        assert db is not None
        row = db.execute("SELECT sum(late) FROM windows WHERE idx BETWEEN ? AND ? AND job='scale' AND width_ms=0",
                         (lo, hi)).fetchone()
        return int(row[0] or 0)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


def api_steps(api: str, metric: str, last: int) -> list[dict]:
    with urllib.request.urlopen(f"http://{api}/api/v1/jobs/{JOB}/steps?metric={metric}&last={last}",
                                timeout=30) as resp:
        return json.load(resp)["steps"]


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


class Runner:
    def __init__(self, args: argparse.Namespace, workdir: Path, progress: Any, task: Any) -> None:
        self.args, self.workdir, self.progress, self.task = args, workdir, progress, task
        self.t0 = time.monotonic()

    def patches(self, role: str) -> dict[str, Any]:
        """What a child of `role` changes in grpcio's client: only agent-hosting processes (quiet_grpc_waits)."""
        a = self.args
        return {"grpc_wait_s": a.grpc_wait_s if role == "agents" and a.grpc_wait_s != 0.1 else None,
                "share_channels": role == "agents" and a.share_channels}

    def clean_up(self, children: list[Child], work: Path) -> None:
        """After a run, whatever happened: its processes killed, its work directory removed (unless --keep)."""
        kill_all(children)
        if not self.args.keep:
            shutil.rmtree(work, ignore_errors=True)

    def say(self, text: str) -> None:
        self.progress.update(self.task, description=text)
        if self.args.verbose:
            self.progress.console.print(f"[{time.monotonic() - self.t0:8.1f} s] {text}")

    # ----------------------------------------------------------------- one run
    def drive(self, label: str, world: int, feeders: list[Child], db: RootDb, stats_of: dict[str, Child],
              durable_check: Any, step_timeout: float) -> dict[str, Any]:
        """Warm-up, idle, measured steps (closed loop: a step is fed once the previous one is finalised);
        returns per-process CPU deltas, the receivers' stats before and after, and timings."""
        a = self.args
        warm, measured = a.warmup, a.steps
        procs = {c.name: c for c in feeders} | stats_of

        def feed_steps(lo: int, hi: int) -> tuple[dict[int, float], dict[int, float]]:
            fed_at: dict[int, float] = {}
            done_at: dict[int, float] = {}
            for step in range(lo, hi + 1):
                for f in feeders:
                    f.send({"cmd": "feed", "step": step})
                fed_at[step] = time.monotonic()
                end = fed_at[step] + step_timeout
                while step not in db.complete(world, step, step):
                    if time.monotonic() > end:
                        raise TimeoutError(f"step {step} not finalised within {step_timeout:.0f} s")
                    for child in procs.values():
                        if not child.alive():
                            raise RuntimeError(f"{child.name} died: {child.tail()}")
                    time.sleep(0.02)
                done_at[step] = time.monotonic()
                self.progress.advance(self.task)
                self.say(f"{label}: step {step - lo + 1}/{hi - lo + 1} {'measured' if lo > warm else 'warm-up'}")
            end = time.monotonic() + step_timeout
            while len(db.complete(world, lo, hi, metric=None)) < hi - lo + 1:  # every metric's window
                if time.monotonic() > end:
                    raise TimeoutError("not every metric window finalised")
                time.sleep(0.02)
            return fed_at, done_at

        self.say(f"{label}: warm-up")
        feed_steps(1, warm)
        durable_check(warm, step_timeout)
        time.sleep(0.5)
        self.say(f"{label}: idle {a.idle_s:.0f} s")
        cpu0 = cpu_of(procs)
        t0 = time.monotonic()
        time.sleep(a.idle_s)
        cpu1 = cpu_of(procs)
        idle_wall = time.monotonic() - t0
        idle_cpu = {n: (cpu1[n][0] - cpu0[n][0]) / idle_wall for n in procs}
        lo, hi = warm + 1, warm + measured
        stats0 = {n: c.ask({"cmd": "stats"}) for n, c in procs.items()}
        cpu0 = cpu_of(procs)
        t0 = time.monotonic()
        fed_at, done_at = feed_steps(lo, hi)
        durable_check(hi, step_timeout)
        cpu1 = cpu_of(procs)
        wall = time.monotonic() - t0
        stats1 = {n: c.ask({"cmd": "stats"}) for n, c in procs.items()}
        return {
            "wall_s": wall, "idle_wall_s": idle_wall, "stats0": stats0, "stats1": stats1,
            "steps_per_s": measured / (done_at[hi] - fed_at[lo]),
            "cpu": {n: {"gross_s": cpu1[n][0] - cpu0[n][0], "idle_s_per_s": idle_cpu[n],
                        "net_s": max(0.0, cpu1[n][0] - cpu0[n][0] - idle_cpu[n] * wall),
                        "gross_s_proc_stat": sum(cpu1[n][1]) - sum(cpu0[n][1])} for n in procs},
        }

    def per_step(self, run: dict, name: str, key: str = "net_s") -> float:
        return run["cpu"][name][key] / self.args.steps * 1e3

    def received(self, run: dict, name: str) -> dict[str, float]:
        """Bytes a collector was handed per measured step: units carrying windows (the step's data and the rank
        states they carry), and the liveness-only units' rate (background, not per step)."""
        s0, s1, m = run["stats0"][name], run["stats1"][name], self.args.steps
        d = {k: s1["stats"][k] - s0["stats"][k] for k in s0["stats"]}
        return {"bytes_per_step": d["bytes_with_windows"] / m, "own_code_ms_per_step": d["step_work_s"] / m * 1e3,
                "liveness_bytes_per_s": (d["bytes"] - d["bytes_with_windows"]) / run["wall_s"],
                "rank_state_bytes_per_step": d["rank_state_bytes"] / m, "hosts_listed_per_step": d["hosts_listed"] / m,
                "batches_per_step": d["batches"] / m, "windows_per_step": d["windows"] / m,
                "counters": s1.get("counters", {})}

    # ----------------------------------------------------------------- the tree
    def tree(self, world: int, shape: dict[str, int]) -> dict[str, Any]:
        a = self.args
        plan = plan_tree(world, shape)
        label = f"tree {world:,} ({shape['agents_per_rack']}/rack, root fan-in {plan['root_fanin']})"
        work = self.workdir / f"tree-{world}-{shape['agents_per_rack']}-{shape['root_fanin']}"
        work.mkdir(parents=True, exist_ok=True)
        children: list[Child] = []
        try:
            self.say(f"{label}: starting root and {sum(plan['tiers'].values())} collectors")
            floor = a.collector_deadline_floor
            root = Child("root", "collector", {"parents": [], "id": "root", "db": str(work / "root.db"),
                                               "deadline_floor": floor, **self.patches("collector")}, work)
            children.append(root)
            root.wait_ready()
            levels: list[list[Child]] = []
            parents = [root.ready["address"]]
            for name in reversed(list(plan["tiers"])):  # top tier first: children need their parents' addresses
                count = plan["tiers"][name]
                level = [Child(f"{name}{i}", "collector", {"parents": [parents[i * len(parents) // count]],
                                                           "id": f"{name}{i}", "deadline_floor": floor,
                                                           **self.patches("collector")}, work)
                         for i in range(count)]
                children += level
                start_all(level)
                parents = [c.ready["address"] for c in level]
                levels.insert(0, level)
            racks = [c.ready["address"] for c in levels[0]]
            agents = plan["agents"]
            per_host = min(AGENTS_PER_HOST, max(1, math.ceil(agents / 2)))
            self.say(f"{label}: starting {agents:,} agents in {math.ceil(agents / per_host)} processes")
            hosts = [Child(f"agents{h}", "agents", {"world": world, "first_agent": first, "seed": a.seed,
                                                    "agents": min(per_host, agents - first), "racks": racks,
                                                    "agents_per_rack": shape["agents_per_rack"],
                                                    **self.patches("agents"),
                                                    "steps": a.warmup + a.steps}, work)
                     for h, first in enumerate(range(0, agents, per_host))]
            children += hosts
            start_all(hosts, timeout=600)
            time.sleep(2.0)  # the racks' liveness units (every second) tell the tiers above every rank
            db = RootDb(work / "root.db", baseline=False)
            collectors = {c.name: c for c in children if c not in hosts}

            def durable_check(upto: int, timeout_s: float) -> None:
                end = time.monotonic() + timeout_s
                while not all(h.ask({"cmd": "stats"})["min_durable"] >= upto for h in hosts):
                    if time.monotonic() > end:
                        raise TimeoutError(f"rank batches of step {upto} not durable after {timeout_s} s")
                    time.sleep(0.05)

            run = self.drive(label, world, hosts, db, collectors, durable_check, a.step_timeout)
            self.say(f"{label}: collecting")
            lo, hi = a.warmup + 1, a.warmup + a.steps
            host_stats = [h.ask({"cmd": "stats"}) for h in hosts]
            late = db.late(1, hi)
            complete = db.complete(world, 1, hi, metric=None) == set(range(1, hi + 1))
            api_rows = {m: api_steps(root.ready["api"], m, hi) for m in METRICS}
            hwm = {c.name: c.hwm_mb() for c in children}
            db.close()
        finally:
            self.clean_up(children, work)

        m = a.steps
        tiers: dict[str, Any] = {"root": {"processes": 1, "fanin": plan["root_fanin"],
                                          "cpu_ms_per_step": self.per_step(run, "root"),
                                          "gross_cpu_ms_per_step": self.per_step(run, "root", "gross_s"),
                                          "idle_cpu_ms_per_s": run["cpu"]["root"]["idle_s_per_s"] * 1e3,
                                          "peak_rss_mb": hwm["root"], **self.received(run, "root")}}
        for name, level in zip(plan["tiers"], levels):
            names = [c.name for c in level]
            tiers[name] = {"processes": len(level), "fanin": plan["fanin"][name],
                           "cpu_ms_per_step": self.per_step(run, names[0]),
                           "gross_cpu_ms_per_step": self.per_step(run, names[0], "gross_s"),
                           "idle_cpu_ms_per_s": run["cpu"][names[0]]["idle_s_per_s"] * 1e3,
                           "cpu_ms_per_step_mean": float(np.mean([self.per_step(run, n) for n in names])),
                           "cpu_ms_per_step_max": max(self.per_step(run, n) for n in names),
                           "peak_rss_mb": hwm[names[0]], "peak_rss_mb_max": max(hwm[n] for n in names),
                           **self.received(run, names[0])}
        n_agents = sum(h.ready["agents"] for h in hosts)
        host_names = [h.name for h in hosts]
        idle_tick_us = float(np.mean([h.ready["idle_tick_us"] for h in hosts]))
        views_us = float(np.mean([h.ready["views_us"] for h in hosts]))
        agent_work = sum(run["stats1"][n]["step_work_s"] - run["stats0"][n]["step_work_s"] for n in host_names)
        tiers["agent"] = {
            "own_code_ms_per_step": agent_work / n_agents / m * 1e3,
            "processes": len(hosts), "agents": n_agents, "agents_per_process": [h.ready["agents"] for h in hosts],
            "cpu_ms_per_step": sum(run["cpu"][n]["net_s"] for n in host_names) / n_agents / m * 1e3,
            "gross_cpu_ms_per_step": sum(run["cpu"][n]["gross_s"] for n in host_names) / n_agents / m * 1e3,
            "idle_tick_us": idle_tick_us, "views_us": views_us,
            # a production agent ticks every 20 ms and refreshes liveness every LIVENESS_EVERY_S (0.5 s)
            "idle_cpu_ms_per_s_production": (50 * idle_tick_us + 2 * views_us) / 1e3,
            "peak_rss_mb_per_process": max(hwm[n] for n in host_names),
            "ranks_fed_in_process": True, "sdk_streams": False,
            "durable_acks": sum(s["durable"] for s in host_stats), "rank_batches": world * hi,
            "bad_inputs": sum(s["bad_inputs"] for s in host_stats), "resent": sum(s["resent"] for s in host_stats),
        }
        lat = [(r["finalised_ns"] - r["last_time_ns"]) / 1e6 for rs in api_rows.values() for r in rs
               if lo <= r["step"] <= hi]
        return {
            "design": "tree", "ranks": world, "plan": plan, "measured_steps": m, "warmup_steps": lo - 1,
            "tiers": tiers,
            "root_bytes_per_step": tiers["root"]["bytes_per_step"],
            "root_bytes_per_step_per_metric": tiers["root"]["bytes_per_step"] / len(METRICS),
            "root_cpu_ms_per_step": tiers["root"]["cpu_ms_per_step"],
            "latency_ms": latency(lat), "steps_per_s": run["steps_per_s"], "wall_s": run["wall_s"],
            "rel_err": quantile_errors(a.seed, world, api_rows["step_time"]),
            "windows_complete": complete, "late_deltas": late, "cpu_raw": run["cpu"], "completed": True,
        }

    # ----------------------------------------------------------------- the baseline
    def baseline(self, world: int) -> dict[str, Any]:
        a = self.args
        label = f"gather {world:,}"
        work = self.workdir / f"gather-{world}"
        work.mkdir(parents=True, exist_ok=True)
        children: list[Child] = []
        try:
            self.say(f"{label}: starting")
            gather = Child("gather", "gather", {"world": world, "db": str(work / "gather.db")}, work)
            children.append(gather)
            gather.wait_ready()
            senders = [Child(f"senders{i}", "senders", {
                "world": world, "first_rank": lo, "ranks": min(RANKS_PER_SENDER, world - lo),
                "gather": gather.ready["address"], "seed": a.seed, "steps": a.warmup + a.steps,
                **self.patches("senders")}, work)
                for i, lo in enumerate(range(0, world, RANKS_PER_SENDER))]
            children += senders
            start_all(senders, timeout=300)
            db = RootDb(work / "gather.db", baseline=True)
            run = self.drive(label, world, senders, db, {"gather": gather}, lambda upto, timeout_s: None,
                             min(a.step_timeout, a.baseline_timeout))
            lo, hi = a.warmup + 1, a.warmup + a.steps
            rows = db.rows(1, hi)
            hwm = gather.hwm_mb()
            db.close()
        finally:
            self.clean_up(children, work)
        m = a.steps
        s0, s1 = run["stats0"]["gather"]["stats"], run["stats1"]["gather"]["stats"]
        lat = [(r["finalised_ns"] - r["last_time_ns"]) / 1e6 for r in rows if lo <= r["idx"] <= hi]
        st_rows = [{"step": r["idx"], **{k: r[k] for k in ("p50", "p90", "p99", "p999")}}
                   for r in rows if r["metric"] == "step_time"]
        return {
            "design": "gather", "ranks": world, "measured_steps": m, "warmup_steps": lo - 1,
            "sender_processes": len(senders),
            "root_bytes_per_step": (s1["bytes"] - s0["bytes"]) / m,
            "root_bytes_per_step_per_metric": (s1["bytes"] - s0["bytes"]) / m / len(METRICS),
            "messages_per_step": (s1["messages"] - s0["messages"]) / m,
            "root_cpu_ms_per_step": self.per_step(run, "gather"),
            "gross_cpu_ms_per_step": self.per_step(run, "gather", "gross_s"),
            "idle_cpu_ms_per_s": run["cpu"]["gather"]["idle_s_per_s"] * 1e3, "peak_rss_mb": hwm,
            "latency_ms": latency(lat), "steps_per_s": run["steps_per_s"], "wall_s": run["wall_s"],
            "rel_err": quantile_errors(a.seed, world, st_rows), "cpu_raw": run["cpu"], "completed": True,
        }


def latency(values: list[float]) -> dict[str, Any]:
    return {"p50": pct(values, 50), "p99": pct(values, 99), "max": max(values) if values else None,
            "samples": len(values)}


def quantile_errors(seed: int, world: int, rows: list[dict]) -> dict[str, Any]:
    """Per quantile, over every step: relative error against numpy.quantile (linear interpolation) of the N
    values fed, and rank error |fraction of the N values <= the estimate - q| (one rank is 1/N)."""
    rel: dict[str, list[float]] = {q: [] for q in QNAMES}
    rank: dict[str, list[float]] = {q: [] for q in QNAMES}
    for r in rows:
        values = np.sort(step_values(seed, r["step"], world)[0])
        for qn, q, key, truth in zip(QNAMES, QS, ("p50", "p90", "p99", "p999"), np.quantile(values, QS)):
            rel[qn].append(abs(r[key] / truth - 1.0))
            rank[qn].append(abs(np.searchsorted(values, r[key], side="right") / values.size - q))
    return {qn: {"max": float(max(v)), "median": float(np.median(v)), "steps": len(v),
                 "rank_err_max": float(max(rank[qn]))} if v else None for qn, v in rel.items()}


# ---------------------------------------------------------------------------- report
def crossover(tree: list[dict], base: list[dict], key: str) -> dict[str, Any] | None:
    """Where the baseline's root figure meets the tree's, on a log-log interpolation of the measured points.

    If the baseline is already above the tree at the smallest common size, the baseline's figure is
    extrapolated down as proportional to N (its fit through the origin) against the tree's figure there,
    and the result is marked extrapolated.
    """
    t = {r["ranks"]: r[key] for r in tree}
    b = {r["ranks"]: r[key] for r in base}
    common = sorted(set(t) & set(b))
    if not common:
        return None
    for n0, n1 in zip(common, common[1:]):
        d0, d1 = b[n0] - t[n0], b[n1] - t[n1]
        if d0 <= 0 < d1:
            f = d0 / (d0 - d1)
            return {"ranks": math.exp(math.log(n0) + f * (math.log(n1) - math.log(n0))), "extrapolated": False}
    if b[common[0]] > t[common[0]]:
        per_rank = float(np.mean([b[n] / n for n in common]))
        return {"ranks": t[common[0]] / per_rank, "extrapolated": True,
                "how": f"baseline fit {per_rank:.4g} x N against the tree's figure at {common[0]:,} ranks"}
    return {"ranks": None, "extrapolated": False, "how": "the baseline stays below the tree at every measured size"}


def plot(path: Path, tree: list[dict], base: list[dict], cross: dict[str, Any], wide: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    panels = (("root_bytes_per_step", "root: bytes received per step", 1 / 1024, "KiB / step"),
              ("root_cpu_ms_per_step", "root: process CPU per step (net of idle background)", 1.0, "CPU ms / step"))
    for ax, (key, title, scale, unit) in zip(axes, panels):
        for rows, label, style, color in ((tree, "aggregation tree", "o-", "C0"),
                                          (base, "gather everything", "s--", "C3")):
            pts = [(r["ranks"], r[key] * scale) for r in rows if r.get(key)]
            if pts:
                ax.plot(*zip(*pts), style, color=color, label=label)
        pts = [(r["ranks"], r[key] * scale) for r in wide]
        if pts:
            shape = wide[0]["plan"]
            ax.plot(*zip(*pts), "D", color="C2", label=f"tree, {shape['fanin']['rack']} agents/rack, "
                                                        f"{shape['root_fanin']} racks/root")
        if key == "root_cpu_ms_per_step":
            pts = [(r["ranks"], r["tiers"]["root"]["own_code_ms_per_step"]) for r in tree]
            if pts:
                ax.plot(*zip(*pts), "o:", color="C0", alpha=0.6, markersize=4, label="tree root, own code only")
            for tier, style, color in (("rack", "^:", "C1"), ("agent", "v:", "C4")):
                pts = [(r["ranks"], r["tiers"][tier]["cpu_ms_per_step"]) for r in tree
                       if r["tiers"][tier]["cpu_ms_per_step"] > 0]
                if pts:
                    ax.plot(*zip(*pts), style, color=color, alpha=0.6, markersize=4, label=f"tree, one {tier}")
            ax.axhline(20, color="grey", linewidth=0.8, linestyle="--")
            ax.annotate("target: root, rack <= 20 ms", xy=(1.0, 20), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=7, color="grey")
        c = cross.get(key)
        if c and c.get("ranks"):
            ax.axvline(c["ranks"], color="k", linestyle=":", linewidth=1)
            ax.annotate(f"crossover ≈ {c['ranks']:,.0f} ranks" + (" (extrapolated)" if c["extrapolated"] else ""),
                        xy=(c["ranks"], 0.03), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        ha="right", va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (N)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("aggregation tree vs gather-everything: 20 metrics per rank per step, loopback gRPC, 2 cores",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def machine() -> dict[str, Any]:
    import grpc
    memory = memory_bytes()
    return {"nproc": os.cpu_count(), "cpu": cpu_model(), "mem_mb": memory // 2**20 if memory else 0,
            "python": platform.python_version(),
            "grpcio": grpc.__version__, "numpy": np.__version__, "kernel": platform.release(),
            "git_head": git_head() or ""}


def fmt(v: float | None, spec: str = ",.1f") -> str:
    return "–" if v is None else format(v, spec)


def own(r: dict, tiers: dict, tier: str, spec: str = ",.1f") -> str:
    return f"{fmt(tiers[tier]['cpu_ms_per_step'], spec)} ({fmt(tiers[tier]['own_code_ms_per_step'], spec)})"


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """One row per size and design."""
    head = ["ranks", "design", "root KiB/step", "root B/step/metric", "root CPU ms/step (own code)",
            "rack CPU ms/step (own code)", "agent CPU ms/step (own code)", "peak RSS MiB root / rack / agents proc",
            "rack KiB/step in",
            "latency p50 / p99 ms", "steps/s",
            "step_time rel. err. % p50 / p99 / p99.9, worst step (rank err. in ranks)"]
    rows = []
    runs = sorted(result["tree"] + result["gather"],
                  key=lambda r: (bool(r.get("wide")), r["ranks"], r["design"] != "tree"))
    for r in runs:
        if not r.get("completed"):
            rows.append([f"{r['ranks']:,}", design(r), "stopped: " + r.get("reason", "")[:60]] + ["–"] * 9)
            continue
        tree = r["design"] == "tree"
        t = r.get("tiers", {})
        err = r["rel_err"]
        rows.append([
            f"{r['ranks']:,}", design(r), fmt(r["root_bytes_per_step"] / 1024),
            fmt(r["root_bytes_per_step_per_metric"], ",.0f"),
            own(r, t, "root") if tree else fmt(r["root_cpu_ms_per_step"]),
            own(r, t, "rack") if tree else "–", own(r, t, "agent", ".2f") if tree else "–",
            (f"{t['root']['peak_rss_mb']:.0f} / {t['rack']['peak_rss_mb_max']:.0f} / "
             f"{t['agent']['peak_rss_mb_per_process']:.0f} ({t['agent']['agents_per_process'][0]} agents)")
            if tree else f"{r['peak_rss_mb']:.0f}",
            fmt(t["rack"]["bytes_per_step"] / 1024) if tree else "–",
            f"{fmt(r['latency_ms']['p50'], ',.0f')} / {fmt(r['latency_ms']['p99'], ',.0f')}",
            f"{r['steps_per_s']:.2f}",
            " / ".join(f"{err[q]['max'] * 100:.2f}" if err.get(q) else "–" for q in ("p50", "p99", "p99.9"))
            + f" ({max(err[q]['rank_err_max'] for q in QNAMES if err.get(q)) * r['ranks']:.2f})"])
    return head, rows


def design(r: dict) -> str:
    if not r.get("wide"):
        return r["design"]
    plan = r["plan"]
    return f"tree, {plan['fanin']['rack']} agents/rack, {plan['root_fanin']} racks/root"


def markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def verdicts(tree: list[dict], base: list[dict]) -> dict[str, Any]:
    by = {r["ranks"]: r for r in tree}
    gb = {r["ranks"]: r for r in base if r.get("completed")}
    out: dict[str, Any] = {}
    if not by:
        return out
    lo, hi = min(by), max(by)
    if lo != hi:
        g = by[hi]["root_bytes_per_step_per_metric"] / by[lo]["root_bytes_per_step_per_metric"]
        out["root_bytes_growth"] = {"value": g, "from": lo, "to": hi, "met": g <= 1.2}
        if lo in gb and hi in gb:
            out["gather_bytes_growth"] = {"value": gb[hi]["root_bytes_per_step"] / gb[lo]["root_bytes_per_step"],
                                          "ideal": hi / lo}
        c = by[hi]["root_cpu_ms_per_step"] / by[lo]["root_cpu_ms_per_step"]
        out["root_cpu_growth"] = {"value": c, "from": lo, "to": hi, "met": c <= 1.2}
    for tier, target in (("root", 20.0), ("rack", 20.0), ("agent", 2.0)):
        worst = max(r["tiers"][tier]["cpu_ms_per_step"] for r in tree)
        out[f"{tier}_cpu_ms_per_step"] = {"max": worst, "target": target, "met": worst <= target}
    worst_err = {q: max(r["rel_err"][q]["max"] for r in tree if r["rel_err"].get(q)) for q in QNAMES}
    out["step_time_rel_err_worst"] = {"value": worst_err, "met": all(
        worst_err[q] <= (0.01 if q == "p99.9" else 0.005) for q in QNAMES)}
    return out


# ---------------------------------------------------------------------------- main
def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "_child":
        from collectors.common.lifetime import die_with_parent
        die_with_parent()
        role, cfg = sys.argv[2], json.loads(sys.argv[3])
        {"collector": child_collector, "agents": child_agents, "gather": child_gather,
         "senders": child_senders}[role](cfg)
        return 0

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results",
                        help="directory for scale.json and scale.png")
    parser.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated rank counts")
    parser.add_argument("--steps", type=int, default=10, help="measured steps per size and design")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps (not measured)")
    parser.add_argument("--idle-s", type=float, default=5.0, help="seconds of idle background measured per run")
    parser.add_argument("--collector-deadline-floor", type=float, default=60.0,
                        help="collectors' and root's deadline floor: the simulated cluster is slower than real "
                             "time, windows should seal on completeness")
    parser.add_argument("--step-timeout", type=float, default=120.0, help="give up a run after a step takes this long")
    parser.add_argument("--baseline-timeout", type=float, default=60.0,
                        help="the baseline is stopped (and larger sizes skipped) when a step takes longer than this")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--agents-per-rack", type=int, default=32, help="node agents (of 8 ranks) per rack collector")
    parser.add_argument("--racks-per-collector", type=int, default=16,
                        help="most children of a collector above the racks (cluster tier)")
    parser.add_argument("--root-fanin", type=int, default=4,
                        help="cluster tiers are added until the root has at most this many children")
    parser.add_argument("--wide", default="16384",
                        help="sizes also run (tree only) at realistic fan-ins, --wide-shape; '' for none")
    parser.add_argument("--wide-shape", default="64x32",
                        help="AxR: A agents per rack, R racks per collector (and at most R children of the root)")
    parser.add_argument("--grpc-wait-s", type=float, default=5.0,
                        help="grpc._common.MAXIMUM_WAIT_TIMEOUT in the agent-hosting processes (0.1: grpcio's own)")
    parser.add_argument("--share-channels", action=argparse.BooleanOptionalAction, default=True,
                        help="one gRPC channel per rack address for all the agents a process hosts (each agent "
                             "keeps its own Outbox, thread and stream)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke run: 256 and 1,024 ranks, 2 measured steps")
    parser.add_argument("-v", "--verbose", action="store_true", help="print each phase with its time")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (logs, databases)")
    args = parser.parse_args()
    if args.quick:
        args.sizes, args.steps, args.warmup, args.idle_s = "256,1024", 2, 1, 1.0
        if args.wide == parser.get_default("wide"):
            args.wide = "1024"
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    wide_sizes = [int(s) for s in args.wide.split(",") if s.strip()]
    shape = {"agents_per_rack": args.agents_per_rack, "max_fanin": args.racks_per_collector,
             "root_fanin": args.root_fanin}
    apr, rpc = (int(x) for x in args.wide_shape.lower().split("x"))
    wide_shape = {"agents_per_rack": apr, "max_fanin": rpc, "root_fanin": rpc}

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(width=None if sys.stdout.isatty() else 200)
    workdir = Path(tempfile.mkdtemp(prefix="telemetry-scale-"))
    started = time.monotonic()
    load0 = os.getloadavg()
    tree: list[dict] = []
    base: list[dict] = []
    failed: list[dict] = []

    def save(final: bool) -> dict:
        done_base = [r for r in base if r.get("completed")]
        done_tree = [r for r in tree if r.get("completed") and not r.get("wide")]
        done_wide = [r for r in tree if r.get("completed") and r.get("wide")]
        cross = {k: crossover(done_tree, done_base, k) for k in ("root_bytes_per_step", "root_cpu_ms_per_step")}
        result = {
            "benchmark": "scale", "issue": 5, "complete": final, "machine": machine(), "loadavg_start": load0,
            "loadavg_end": os.getloadavg(),
            "config": {"sizes": sizes, "measured_steps": args.steps, "warmup_steps": args.warmup,
                       "idle_s": args.idle_s, "metrics": len(METRICS), "ranks_per_node": RANKS_PER_NODE,
                       "nodes_per_rack": shape["agents_per_rack"], "root_fanin": shape["root_fanin"],
                       "max_fanin": shape["max_fanin"], "wide_sizes": wide_sizes, "wide_shape": wide_shape,
                       "agents_per_process": AGENTS_PER_HOST, "ranks_per_sender_process": RANKS_PER_SENDER,
                       "ranks_per_gather_stream": RANKS_PER_STREAM,
                       "collector_deadline_floor_s": args.collector_deadline_floor, "seed": args.seed,
                       "ranks_fed_in_process": sizes + wide_sizes,
                       "grpc_max_wait_s_agent_processes": args.grpc_wait_s,
                       "shared_channels": args.share_channels,
                       "values": "0.5 x lognormal(0, 1) per rank, metric and step (seeded)"},
            "method": METHOD, "targets": TARGETS, "tree": tree, "gather": base, "failed": failed,
            "crossover": cross, "verdicts": verdicts(done_tree, done_base),
            "verdicts_wide": verdicts(done_wide, []), "run_time_s": time.monotonic() - started,
        }
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale.json").write_text(json.dumps(result, indent=1))
        if final and (done_tree or done_base):
            plot(args.out / "scale.png", done_tree, done_base, cross, done_wide)
        return result

    stopped = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        per_run = args.warmup + args.steps
        task = progress.add_task("starting", total=(len(sizes) * (1 if args.no_baseline else 2) + len(wide_sizes))
                                 * per_run)
        runner = Runner(args, workdir, progress, task)
        for world, wide in [(w, False) for w in sizes] + [(w, True) for w in wide_sizes]:
            try:
                r = runner.tree(world, wide_shape if wide else shape)
                r["wide"] = wide
                tree.append(r)
                progress.console.print(
                    f"tree   {world:>6,} ({r['plan']['fanin']['rack']}/rack, root fan-in {r['plan']['root_fanin']}): root {r['root_bytes_per_step'] / 1024:,.1f} KiB/step, root "
                    f"{r['root_cpu_ms_per_step']:.1f} ms/step, rack {r['tiers']['rack']['cpu_ms_per_step']:.1f} "
                    f"ms/step, agent {r['tiers']['agent']['cpu_ms_per_step']:.2f} ms/step, "
                    f"{r['steps_per_s']:.2f} steps/s")
            except (TimeoutError, RuntimeError) as exc:
                failed.append({"design": "tree", "ranks": world, "wide": wide, "reason": str(exc)[:2000]})
                progress.console.print(f"tree {world:,}: FAILED: {exc}")
            save(False)
            if args.no_baseline or wide:
                continue
            if stopped:
                progress.advance(task, per_run)
                continue
            try:
                r = runner.baseline(world)
                base.append(r)
                progress.console.print(
                    f"gather {world:>6,}: root {r['root_bytes_per_step'] / 1024:,.1f} KiB/step, root "
                    f"{r['root_cpu_ms_per_step']:.1f} ms/step, {r['steps_per_s']:.2f} steps/s")
            except (TimeoutError, RuntimeError) as exc:
                stopped = True
                base.append({"design": "gather", "ranks": world, "completed": False, "reason": str(exc)[:500]})
                progress.console.print(f"gather {world:,}: stopped, larger sizes skipped: {exc}")
            save(False)
        progress.update(task, description="done")
    result = save(True)
    head, rows = table(result)
    print(markdown(head, rows), flush=True)
    console.print_json(json.dumps({"verdicts": result["verdicts"], "verdicts_wide": result["verdicts_wide"],
                                   "crossover": result["crossover"],
                                   "failed": failed}))
    console.print(f"wrote {args.out / 'scale.json'} and {args.out / 'scale.png'} in {result['run_time_s']:.0f} s")
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
