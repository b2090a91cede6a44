"""bench/scale.py's load generator: a process hosting many node agents (the real agent classes, each with its own
Outbox and Forward stream to its rack), which on command feeds one step of its ranks in-process (a pre-serialised
RankMessage per rank, handed to AgentService._batch as the stream reader does) and ticks each agent once."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import threading
import time
from typing import Any

from bench.scale_child import commands, emit
from bench.scale_workload import JOB, MAX_METRICS_PER_JOB, RANKS_PER_NODE, rank_messages
from collectors.agent.server import AgentServer


def _die_with_parent() -> None:  # preexec_fn of the rank stand-in; its parent has no threads yet
    import ctypes
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


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


class SimAgent(AgentServer):
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

        # the agent's defaults (deadlines, retention), the metric budget raised to the run's metrics
        config = AgentConfig(parents=[parent], max_metrics_per_job=MAX_METRICS_PER_JOB)
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


def share_channels() -> None:
    """One gRPC channel per rack address for all the agents a process hosts, instead of one each (each with its
    own keepalive pings every 10 s and grpcio's per-channel machinery): every agent still has its own Outbox and
    Forward stream (a coroutine on the process's one client loop). Still needed with the aio servers, for the simulation's sake only (a real agent is
    one process with one channel): at 4,096 ranks (2 hosting processes) it changes no per-step figure (agent
    3.32-3.41 ms/step with a channel each, 3.39-3.43 shared; idle 40 against 8 ms/s), but at 16,384 ranks (8
    processes of 256 agents on 2 cores) a channel each made an agent cost 13.1 instead of 5.9 ms/step (own code
    4.6 / 4.1), the hosting processes idle at 188 instead of 42 ms/s, and the run 0.04 instead of 0.08 steps/s.
    --no-share-channels gives each agent its own."""
    import collectors.delivery.outbox as outbox_module
    make_channel = outbox_module.make_aio_channel  # the outboxes' (grpc.aio, on the process's one client loop)
    shared: dict[str, Any] = {}

    class Shared:
        def __init__(self, channel: Any) -> None:
            self._channel = channel

        def __getattr__(self, name: str) -> Any:
            return getattr(self._channel, name)

        async def close(self) -> None:  # the other agents still use it
            return None

    def shared_channel(address: str, security: Any = None) -> Any:
        if address not in shared:
            shared[address] = make_channel(address, security)
        return Shared(shared[address])

    outbox_module.make_aio_channel = shared_channel  # type: ignore[assignment]  # the simulation's shared channel


def child_agents(cfg: dict) -> None:
    """Hosts many agents; on command, feeds one step of their ranks in-process and ticks each agent."""
    from collectors.common.aioserve import Host
    from collectors.common.gctune import tune_gc
    from collectors.common.validation import check_size
    from telemetry.v1 import ingest_pb2

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
    for agent in agents:  # the parent's acks of units carrying windows, on the client loop
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
