"""A running collector (rack/cluster tier) or root: gRPC server, flush loop, and for the root, store and API."""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path

from collectors.collector.service import CollectorService
from collectors.common.aioserve import AioServer, StreamSlots
from collectors.common.attempts import split
from collectors.common.fingerprints import FingerprintTable
from collectors.common.flushloop import FlushLoop
from collectors.common.gctune import tune_gc
from collectors.common.memory import FreedMemory
from collectors.common.transport import Security
from collectors.common.validation import DEFAULT_MAX_METRICS_PER_JOB, DEFAULT_MAX_WORLD_SIZE, MetricBudget
from collectors.delivery.lifecycle import DEFAULT_JOB_IDLE_TIMEOUT_S, SWEEP_EVERY_S, ChildLifecycle, JobLifecycle
from collectors.delivery.node import Node, Upstream
from collectors.delivery.outbox import Outbox
from collectors.delivery.runs import RunLedger
from collectors.delivery.windows import Deadlines
from collectors.root.api import RootApi, serve
from collectors.root.finalise import Finaliser, root_complete
from collectors.root.store import Store
from telemetry.v1 import forward_pb2_grpc

log = logging.getLogger(__name__)

DEFAULT_MAX_CHILDREN = 4096


@dataclass
class CollectorConfig:
    listen: str = "127.0.0.1:0"
    parents: list[str] = field(default_factory=list)  # empty: this is the root
    node_id: str = ""
    security: Security | None = None
    parent_security: Security | None = None
    db: Path | None = None  # root only
    api: str | None = "127.0.0.1:0"  # root only; None disables
    api_token: str | None = None  # root only: the bearer token the HTTP API requires (all but /healthz)
    deadline_floor_s: float = 3.0
    deadline_factor: float = 4.0
    flush_interval_s: float = 0.02
    max_metrics_per_job: int = DEFAULT_MAX_METRICS_PER_JOB
    retain_s: float = 300.0
    max_children: int = DEFAULT_MAX_CHILDREN  # concurrent child streams; past it refused (RESOURCE_EXHAUSTED)
    job_idle_timeout_s: float = DEFAULT_JOB_IDLE_TIMEOUT_S  # jobs idle and children gone this long are forgotten
    max_world_size: int = DEFAULT_MAX_WORLD_SIZE  # windows or rank states beyond it are refused
    durability: str = "process"  # root only: what DURABLE promises ("process" or "power"; collectors/root/store.py)

    @property
    def is_root(self) -> bool:
        return not self.parents


class CollectorServer:
    def __init__(self, config: CollectorConfig) -> None:
        self.config = config
        node_id = config.node_id or f"{'root' if config.is_root else 'collector'}-{socket.gethostname()}"
        self.service: CollectorService
        self.node = Node(node_id, Deadlines(config.deadline_floor_s, config.deadline_factor),
                         ack_down=lambda *a, **k: self.service.ack_down(*a, **k), retain_s=config.retain_s)
        self.store: Store | None = None
        self.finaliser: Finaliser | None = None
        self.api_server = None
        if config.is_root:
            self.store = Store(config.db or Path("telemetry-root.db"), config.durability)
            self.finaliser = Finaliser(self.store)
            self.node.runs = RunLedger(recall=self.store.load_runs, record=self.store.save_runs)
            self.node.sink = self.finaliser
            self.node.complete = root_complete(self.node)
            before = lambda key: self.finaliser.reload(self.node, key)  # noqa: E731
        else:
            self.upstream = Upstream(self.node, lambda on_ack: Outbox(node_id, config.parents, config.parent_security,
                                                                      on_ack))
            self.node.sink = self.upstream
            before = None
        self.flusher = FlushLoop("flush", self._flush, config.flush_interval_s)
        self.lifecycle = JobLifecycle(config.job_idle_timeout_s)
        self.children = ChildLifecycle(config.job_idle_timeout_s)
        self.on_job_finished: list[Callable[[str], None]] = []  # run without the node's lock (the root's wiring)
        self._swept_at = 0.0
        self.freed = FreedMemory()
        self.grpc = AioServer("root" if config.is_root else "collector", config.security,
                              ("telemetry.v1.Collector",), self.flusher.healthy)
        self.service = CollectorService(self.node, self.grpc.host,
                                        StreamSlots(config.max_children, "child", "--max-children"),
                                        MetricBudget(config.max_metrics_per_job), before, self.lifecycle,
                                        self.children, config.max_world_size)
        if not config.is_root:
            # Forensics pass through: captures up with this collector's units, requests down to its children.
            self.service.on_captures = self._captures_up
            self.upstream.outbox.on_requests = self.service.route_requests
            self.upstream.fingerprints = FingerprintTable()
            self.service.on_fingerprints = self._fingerprints_up
        self.grpc.add(lambda server: forward_pb2_grpc.add_CollectorServicer_to_server(self.service, server))
        self.address = self.grpc.bind(config.listen, config.security)
        self.api_address: str | None = None
        self.wiring = None  # the root's detectors, events and /metrics, attached by start()

    def _captures_up(self, captures: list) -> None:
        for capture in captures:
            self.upstream.captures.put(capture)

    def _fingerprints_up(self, found: list) -> None:
        for job_fingerprints in found:
            self.upstream.fingerprints.merge(job_fingerprints)

    def start(self) -> None:
        tune_gc()
        self.grpc.start()
        if not self.config.is_root:
            self.upstream.outbox.start()
        else:
            from collectors.root.wiring import attach
            self.wiring = attach(self)  # detectors, events table, /metrics (config: $TELEMETRY_DETECTORS)
            if self.config.api is not None:
                host, port = self.config.api.rsplit(":", 1)
                api = RootApi(self.store, self.liveness)  # type: ignore[arg-type]
                api.events = self.wiring.events_endpoint  # GET /api/v1/jobs/{job}/events
                api.forensics = self.wiring.forensics_endpoint  # GET .../events/{id}/forensics, .../forensics/{rid}
                api.ask_forensics = self.wiring.ask_forensics  # POST /api/v1/jobs/{job}/forensics
                self.api_server = serve(api, host, int(port), extra=self.wiring.routes, token=self.config.api_token)
                self.api_address = f"{host}:{self.api_server.server_address[1]}"
        self.flusher.start()

    def healthy(self) -> bool:
        return self.flusher.healthy()

    def _flush(self) -> None:
        now = time.monotonic()
        if now - self._swept_at >= SWEEP_EVERY_S:
            self._swept_at = now
            if self._sweep(now):
                self.freed.release(now)
        self.node.flush(now)

    def _sweep(self, now: float) -> bool:
        """Forget children gone past the timeout, then jobs that finished (all ranks closed, or idle); True
        when some job was forgotten."""
        node, is_root = self.node, self.config.is_root
        with node.lock:
            for child in self.children.sweep(now):
                node.forget_child(child)
                log.warning("child %s has been gone for %.0f s: forgotten (its ranks no longer count here)",
                            child, self.children.timeout_s)
            finished = self.lifecycle.sweep(now, node.jobs(), lambda job: node.all_closed(job, whole_world=is_root))
            for job, why in finished:
                self.service.forget_job(job)
                if not is_root:
                    name, attempt = split(job)
                    if self.upstream.fingerprints.attempt(name) == attempt:
                        self.upstream.fingerprints.forget(name)
                log.info("job %s finished (%s): forgotten", job, why)
            if finished:
                node.forget_jobs({job for job, _ in finished})
        for job, _ in finished:
            for callback in self.on_job_finished:
                callback(job)
        return bool(finished)

    def jobs(self) -> list[str]:
        """The jobs live here (known from rank states or windows, and not finished)."""
        with self.node.lock:
            return sorted(job for job in self.node.jobs() | set(self.lifecycle.live_jobs())
                          if self.lifecycle.live(job))

    def liveness(self, job: str) -> dict[str, object]:
        with self.node.lock:
            view = self.node.states(job)  # no hosts: the liveness figures need only the bitmaps
            counters = self.node.subtree_counters()
        return {"world_size": view.world_size, "alive": len(view.alive), "stuck": len(view.stuck),
                "dead": len(view.dead), "stuck_ranks": list(islice(view.stuck, 1024)),
                "dead_ranks": list(islice(view.dead, 1024)),
                "counters": counters}

    def stop(self, grace: float = 1.0) -> None:
        self.flusher.stop()
        if not self.config.is_root:
            self.upstream.outbox.close()
        self.grpc.stop(grace)
        if self.api_server is not None:
            self.api_server.shutdown()
        if self.wiring is not None:
            self.wiring.close()
        if self.store is not None:
            self.store.close()
