"""What running a collector tier takes, wherever its sealed windows go: the base of CollectorServer and RootServer.

A tier is a delivery `Node` behind the `Collector.Forward` gRPC service (`CollectorService`), a flush loop
(`FlushLoop`: the health the watchdog and gRPC health report) and the lifecycle sweep that forgets children
gone past the timeout and jobs that finished. A subclass gives the node its sink (`Node.sink`: an `Upstream`
to the parent, or the root's `Finaliser`) and its other tier-specific parts, and starts and stops them with
the shared ones. Nothing here knows what is above the tier.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any

from collectors.collector.service import CollectorService, UnitReads
from collectors.common.aioserve import AioServer, StreamSlots
from collectors.common.fleet import DEFAULT_FLEET_GRACE_S
from collectors.common.flushloop import FlushLoop
from collectors.common.memory import FreedMemory
from collectors.common.transport import Security
from collectors.common.validation import DEFAULT_MAX_METRICS_PER_JOB, DEFAULT_MAX_WORLD_SIZE, MetricBudget
from collectors.delivery.lifecycle import DEFAULT_JOB_IDLE_TIMEOUT_S, SWEEP_EVERY_S, ChildLifecycle, JobLifecycle
from collectors.delivery.node import Completion, Node, Sink
from collectors.delivery.runs import RunLedger
from collectors.delivery.windows import DEFAULT_WINDOW_BUDGET_BYTES, Deadlines

log = logging.getLogger(__name__)

DEFAULT_MAX_CHILDREN = 4096


@dataclass
class TierConfig:
    """The settings every collector tier has, the root's included."""

    listen: str = "127.0.0.1:0"
    node_id: str = ""  # "" : ROLE-HOSTNAME
    security: Security | None = None  # TLS / mTLS / token required from children
    deadline_floor_s: float = 3.0
    deadline_factor: float = 4.0
    flush_interval_s: float = 0.02
    max_metrics_per_job: int = DEFAULT_MAX_METRICS_PER_JOB
    retain_s: float = 300.0
    window_budget_bytes: int = DEFAULT_WINDOW_BUDGET_BYTES  # --window-budget-mb (WindowTable)
    max_children: int = DEFAULT_MAX_CHILDREN  # concurrent child streams; past it refused (RESOURCE_EXHAUSTED)
    job_idle_timeout_s: float = DEFAULT_JOB_IDLE_TIMEOUT_S  # jobs idle and children gone this long are forgotten
    max_world_size: int = DEFAULT_MAX_WORLD_SIZE  # windows or rank states beyond it are refused
    # A fleet second is passed on this long after it ended without the hosts not in yet (Node._fleet_passed; twice
    # as long above a rack); None: it waits for every host until its deadline (--fleet-grace)
    fleet_grace_s: float | None = DEFAULT_FLEET_GRACE_S


class Tier:
    """The shared parts of a running tier. `role` names its threads and its default node id; with
    `whole_world`, a job counts as finished only once every rank of its world closed (the root's test)."""

    def __init__(self, config: TierConfig, role: str, whole_world: bool = False, *, sink: Sink | None = None,
                 complete: Completion | None = None, runs: RunLedger | None = None,
                 reads: Callable[[Node], UnitReads] | None = None, native: bool = False) -> None:
        """`sink`, `complete`, `runs` and `native` are the node's (Node's constructor); `reads` makes the service's
        store reads for the node (the root's StoreReads; none in a collector)."""
        self.whole_world = whole_world
        node_id = config.node_id or f"{role}-{socket.gethostname()}"
        self.node = Node(node_id, Deadlines(config.deadline_floor_s, config.deadline_factor),
                         ack_down=self._ack_down, retain_s=config.retain_s,
                         window_budget_bytes=config.window_budget_bytes, sink=sink, complete=complete, runs=runs,
                         fleet_grace_s=config.fleet_grace_s, native=native)
        self.flusher = FlushLoop("flush", self._flush, config.flush_interval_s)
        self.lifecycle = JobLifecycle(config.job_idle_timeout_s)
        self.children = ChildLifecycle(config.job_idle_timeout_s)
        self.on_job_finished: list[Callable[[str], None]] = []  # run after a sweep, without the node's lock
        self._swept_at = 0.0
        self.freed = FreedMemory()
        self.grpc = AioServer(role, config.security, ("telemetry.v1.Collector",), self.flusher.healthy)
        self.node.counter_sources["reply_streams_cut"] = lambda: self.grpc.host.answers_cut
        self.service = CollectorService(self.node, self.grpc.host,
                                        StreamSlots(config.max_children, "child", "--max-children"),
                                        MetricBudget(config.max_metrics_per_job),
                                        None if reads is None else reads(self.node), self.lifecycle,
                                        self.children, config.max_world_size)
        self.service.on_work = self.flusher.wake
        self.grpc.add(self.service.add_to_server)  # units deserialised by the service (CollectorService._receive)
        self.address = self.grpc.bind(config.listen, config.security)

    def _ack_down(self, *args: Any, **kwargs: Any) -> None:
        """The node's AckDown (delivery/node.py), passed on as called to the service's, looked up at each call
        (the service is made after the node; tests replace its ack_down)."""
        self.service.ack_down(*args, **kwargs)

    def healthy(self) -> bool:
        return self.flusher.healthy()

    def _flush(self) -> float:
        """One flush; returns when the next is due (FlushLoop) unless a unit wakes it before (CollectorService.on_work):
        a window's deadline or fleet cut-off, late parts to send on, the liveness unit, the sweep."""
        now = time.monotonic()
        if now - self._swept_at >= SWEEP_EVERY_S:
            self._swept_at = now
            if self._sweep(now):
                self.freed.release(now)
        self.node.flush(now)
        due = self.node.next_due(now)
        sweep = self._swept_at + SWEEP_EVERY_S
        return sweep if due is None else min(due, sweep)

    def _sweep(self, now: float) -> bool:
        """Forget children gone past the timeout, then jobs that finished (all ranks closed, or idle); True
        when some job was forgotten."""
        node = self.node
        with node.lock:
            for child in self.children.sweep(now):
                node.forget_child(child)
                log.warning("child %s has been gone for %.0f s: forgotten (its ranks no longer count here)",
                            child, self.children.timeout_s)
            finished = self.lifecycle.sweep(now, node.jobs(),
                                            lambda job: node.all_closed(job, whole_world=self.whole_world))
            for job, why in finished:
                self.service.forget_job(job)
                self.job_forgotten(job)
                log.info("job %s finished (%s): forgotten", job, why)
            if finished:
                node.forget_jobs({job for job, _ in finished})
        for job, _ in finished:
            for callback in self.on_job_finished:
                callback(job)
        return bool(finished)

    def job_forgotten(self, job: str) -> None:
        """A finished job is being forgotten (under the node's lock): what the tier keeps of it beside the node
        and the service goes. Nothing here."""

    def jobs(self) -> list[str]:
        """The jobs live here (known from rank states or windows, and not finished)."""
        with self.node.lock:
            return sorted(job for job in self.node.jobs() | set(self.lifecycle.live_jobs())
                          if self.lifecycle.live(job))

    def live(self, job: str) -> bool:
        """`job` (a scoped name) is live here: not finished and forgotten since."""
        return self.lifecycle.live(job)

    def liveness(self, job: str) -> dict[str, object]:
        with self.node.lock:
            view = self.node.states(job)  # no hosts: the liveness figures need only the bitmaps
            counters = self.node.subtree_counters()
        return {"world_size": view.world_size, "alive": len(view.alive), "stuck": len(view.stuck),
                "dead": len(view.dead), "stuck_ranks": list(islice(view.stuck, 1024)),
                "dead_ranks": list(islice(view.dead, 1024)), "closed_ranks": list(islice(view.closed, 1024)),
                "counters": counters}
