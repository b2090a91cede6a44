"""A running node agent: the rank-facing Unix socket (and optional loopback TCP), sealing, forwarding."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from collectors.agent.captures import DEFAULT_ANSWER_TIMEOUT_S, Captures
from collectors.agent.exits import FaultFiles
from collectors.agent.hardware import DEFAULT_NIC_EXCLUDE, DEFAULT_PROBE_INTERVAL_S, HardwareSampler, offer_exits
from collectors.agent.host_index import HostIndexRegistration
from collectors.agent.peercred import PeerCheck, PeerRelay, default_uids
from collectors.agent.ranks import DEFAULT_STUCK_AFTER_S, RankRegistry
from collectors.agent.service import AgentService
from collectors.common.aioserve import AioServer, StreamSlots
from collectors.common.fingerprints import FingerprintTable
from collectors.common.flushloop import FlushLoop
from collectors.common.gctune import tune_gc
from collectors.common.host_index import read_instance_id, read_machine_id
from collectors.common.memory import FreedMemory
from collectors.common.transport import CannotListen, Security
from collectors.common.validation import DEFAULT_MAX_METRICS_PER_JOB, DEFAULT_MAX_WORLD_SIZE, MetricBudget
from collectors.delivery.lifecycle import DEFAULT_JOB_IDLE_TIMEOUT_S, SWEEP_EVERY_S, JobLifecycle
from collectors.delivery.node import Node, Upstream
from collectors.delivery.outbox import DEFAULT_OUTBOX_BYTES, Outbox
from collectors.delivery.windows import DEFAULT_WINDOW_BUDGET_BYTES, Deadlines, Window
from telemetry.sdk.env import default_socket
from telemetry.v1 import ingest_pb2_grpc

log = logging.getLogger(__name__)
T = TypeVar("T")

DEFAULT_MAX_RANKS = 512


@dataclass
class AgentConfig:
    parents: list[str]
    socket: Path | None = None
    tcp: str | None = None  # e.g. "127.0.0.1:0"
    node_id: str = ""
    parent_security: Security | None = None
    deadline_floor_s: float = 2.0
    deadline_factor: float = 3.0
    flush_interval_s: float = 0.02
    stuck_after_s: float = DEFAULT_STUCK_AFTER_S
    max_metrics_per_job: int = DEFAULT_MAX_METRICS_PER_JOB
    retain_s: float = 120.0
    window_budget_bytes: int = DEFAULT_WINDOW_BUDGET_BYTES  # --window-budget-mb (WindowTable)
    outbox_budget_bytes: int = DEFAULT_OUTBOX_BYTES  # --outbox-budget-mb: units kept for the parent (Outbox)
    max_ranks: int = DEFAULT_MAX_RANKS  # concurrent rank streams; past it a stream is refused (RESOURCE_EXHAUSTED)
    job_idle_timeout_s: float = DEFAULT_JOB_IDLE_TIMEOUT_S  # a job nothing arrived of for this long is forgotten
    max_world_size: int = DEFAULT_MAX_WORLD_SIZE  # a rank declaring a larger world is refused at its hello
    # Uids allowed to send besides this process's own and root's (SO_PEERCRED; collectors/agent/peercred.py).
    allowed_uids: tuple[int, ...] = ()
    # Hardware probes (collectors/agent/hardware.py, docs/hardware.md). Off unless asked for here;
    # `telemetry agent` turns both on by default.
    gpu_probe: bool = False
    nic_probe: bool = False
    probe_interval_s: float = DEFAULT_PROBE_INTERVAL_S
    sysfs_root: str | Path = "/sys"
    nic_exclude: tuple[str, ...] = DEFAULT_NIC_EXCLUDE
    nvlink_every: int = 1
    xid_wait_ms: int = 500
    nvml: Any = None  # replaces the pynvml module (tests: tests/nvml_double.py FakeNvml)
    host_id: str = ""  # the host's pseudo-job is _host:<host_id> [default: the hostname, as the ranks report it]
    # The host's index in the fleet (docs/fleet.md): its readings go to the fleet's windows, not _host:<host_id>.
    host_index: int | None = None
    # Ask the tree for the host's index (`--host-index auto`, docs/fleet.md "Host indexes"); an explicit
    # host_index is registered too, so that the root never hands it to another host.
    host_index_auto: bool = False
    machine_id: str | None = None  # the machine's id the tree keys its index by [default: /etc/machine-id]
    # This installation's id file (`--id-file`, collectors/common/host_index.py read_instance_id): tells two machines
    # of one host name apart where their machine ids cannot (none, or cloned). None: no such id (in-process default;
    # `telemetry agent` gives /var/lib/telemetry/agent-id).
    id_file: str | Path | None = None
    reap_rank_children: bool = False  # waitpid() ranks that are this process's children (see RankRegistry)
    capture_timeout_s: float = DEFAULT_ANSWER_TIMEOUT_S  # a rank's time to answer a capture before py-spy/proc


class AgentServer:
    service: AgentService  # made in __init__ after the node, whose ack_down calls it (declared for mypy)

    def __init__(self, config: AgentConfig) -> None:
        if not config.parents:
            raise ValueError("an agent needs a parent (--parent ADDR)")
        self.config = config
        node_id = config.node_id or f"agent-{socket.gethostname()}-{os.getpid()}"
        self.node = Node(node_id, Deadlines(config.deadline_floor_s, config.deadline_factor),
                         ack_down=lambda *a, **k: self.service.ack_down(*a, **k), retain_s=config.retain_s,
                         window_budget_bytes=config.window_budget_bytes, complete=sealed_at_intake)
        self.upstream = Upstream(self.node, lambda on_ack: Outbox(node_id, config.parents, config.parent_security,
                                                                  on_ack, max_bytes=config.outbox_budget_bytes))
        self.node.sink = self.upstream
        self.registry = RankRegistry(config.stuck_after_s, reap=config.reap_rank_children,
                                     max_world_size=config.max_world_size)
        self.host_id = config.host_id or socket.gethostname()
        self.hardware: HardwareSampler | None = None
        self.registration: HostIndexRegistration | None = None
        self.flusher = FlushLoop("agent-flush", self._flush, config.flush_interval_s)
        slots = StreamSlots(config.max_ranks, "rank", "--max-ranks")
        self.grpc = AioServer("agent", None, ("telemetry.v1.Agent",), self.flusher.healthy)
        self.node.counter_sources["reply_streams_cut"] = lambda: self.grpc.host.answers_cut
        self.lifecycle = JobLifecycle(config.job_idle_timeout_s)
        self._swept_at = 0.0
        self.freed = FreedMemory()
        self.socket_path = config.socket or default_socket()
        claim_socket(self.socket_path)
        # Ranks connect to the relay, which reads each connection's SO_PEERCRED; grpc listens behind it.
        self.relay = PeerRelay(self.socket_path)
        self.captures = Captures(self.registry, self._woken(self.upstream.captures.put), self.node.lock,
                                 answer_timeout_s=config.capture_timeout_s)
        self.upstream.fingerprints = FingerprintTable()
        self.fault_files = FaultFiles()  # where the ranks' faulthandler writes (collectors/agent/exits.py)
        self.service = AgentService(self.node, self.registry, MetricBudget(config.max_metrics_per_job),
                                    self.grpc.host, slots, self.lifecycle,
                                    PeerCheck(self.relay, default_uids(config.allowed_uids)),
                                    captures=self.captures, fingerprints=self.upstream.fingerprints,
                                    fault_files=self.fault_files, on_exit=self.upstream.exits.put,
                                    on_work=self.flusher.wake)
        self.upstream.outbox.on_requests = self.service.request_captures
        self.grpc.add(lambda server: ingest_pb2_grpc.add_AgentServicer_to_server(self.service, server))
        self.grpc.bind(self.relay.grpc_address)
        self.addresses = [f"unix:{self.socket_path}"]
        if config.tcp:
            self.addresses.append(self.grpc.bind(config.tcp))

    def start(self) -> None:
        tune_gc()
        self.grpc.start()
        self.relay.start()
        os.chmod(self.socket_path, 0o660)
        self.upstream.outbox.start()
        self.flusher.start()
        config = self.config
        if config.gpu_probe or config.nic_probe:
            self.hardware = HardwareSampler.open(
                self.node, self.registry, host_id=self.host_id, gpu_probe=config.gpu_probe,
                nic_probe=config.nic_probe, interval_s=config.probe_interval_s, sysfs_root=config.sysfs_root,
                nic_exclude=config.nic_exclude, nvml=config.nvml, nvlink_every=config.nvlink_every,
                xid_wait_ms=config.xid_wait_ms, host_index=config.host_index,
                awaiting_index=config.host_index_auto and config.host_index is None)
            if self.hardware is not None:
                self.hardware.on_sampled = self.flusher.wake
                self.hardware.start()
            if self.hardware is not None and (config.host_index_auto or config.host_index is not None):
                machine_id = config.machine_id if config.machine_id is not None else read_machine_id()
                instance = read_instance_id(config.id_file, needed=not machine_id) if config.id_file else ""
                if not machine_id:
                    log.warning("host %s: this machine has no machine id (/etc/machine-id, --machine-id); %s",
                                self.host_id, f"the tree tells it apart from another machine under --host-id "
                                f"{self.host_id} by its agent id ({config.id_file}: keep that file across restarts)"
                                if instance else "nor an agent id (--id-file): another machine under the same "
                                "--host-id would be merged with it as one host")
                self.registration = HostIndexRegistration(config.parents, config.parent_security, self.host_id,
                                                          machine_id, config.host_index,
                                                          self.hardware.set_host_index, instance=instance)
                self.registration.start()

    def _woken(self, put: Callable[[T], None]) -> Callable[[T], None]:
        """`put`, then wake the flush loop: what was put goes up with the next flush."""
        def put_and_wake(item: T) -> None:
            put(item)
            self.flusher.wake()
        return put_and_wake

    def _flush(self) -> float:
        """One flush; returns when the next is due (FlushLoop) unless something wakes it before: a rank's message
        (AgentService.on_work), a hardware sample (HardwareSampler.on_sampled), a capture taken. An agent with
        no ranks flushes once a second (its liveness unit) and on each sample, not 50 times a second."""
        now = time.monotonic()
        forgot = False
        with self.node.lock:  # which processes to read, if liveness is due: cheap
            pids = self.registry.pids_to_read() if self.service.liveness_due(now) else None
        statuses = self.registry.read_statuses(pids) if pids else None  # /proc, without the lock
        with self.node.lock:
            self.service.seal(now, statuses)
            offer_exits(self.node, self.registry)  # exit statuses seal() just learned of
            if now - self._swept_at >= SWEEP_EVERY_S:
                self._swept_at = now
                forgot = self._sweep(now)
        if forgot:
            self.freed.release(now)
        self.node.flush()
        with self.node.lock:
            due = self.service.next_due(now)
            jobs = bool(self.registry.jobs())
        times = [self.upstream.next_liveness()]
        if due is not None:
            times.append(due)
        if jobs:
            times.append(self._swept_at + SWEEP_EVERY_S)
        return min(times)

    def _sweep(self, now: float) -> bool:
        """Forget the jobs that finished (every local rank closed, or idle); caller holds the node's lock.
        True when some job was forgotten."""
        node, service = self.node, self.service
        finished = self.lifecycle.sweep(
            now, self.registry.jobs(), lambda job: node.all_closed(job) and not service.open_steps(job))
        for job, why in finished:
            service.forget_job(job)
            self.registry.forget_job(job)
            log.info("job %s finished (%s): forgotten", job, why)
        if finished:
            gone = {job for job, _ in finished}
            node.forget_jobs(gone)
            # The views of the jobs left as they were (no /proc read under the lock: the next seal refreshes).
            node.own_ranks = {job: view for job, view in node.own_ranks.items() if job not in gone}
        return bool(finished)

    def healthy(self) -> bool:
        return self.flusher.healthy()

    def stop(self, grace: float = 1.0) -> None:
        if self.registration is not None:
            self.registration.stop()
        if self.hardware is not None:
            self.hardware.stop()
        self.flusher.stop()
        self.upstream.outbox.close()
        self.captures.close()
        self.grpc.stop(grace)
        self.relay.stop()
        self.fault_files.close()


def sealed_at_intake(node: Node) -> Callable[[Window], bool]:
    """The agent's `Completion`: its intake decides when a step is sealed, so a window the node holds is complete."""
    return lambda win: True


def claim_socket(path: Path) -> None:
    """Make the socket's folder and take the path over from a stale socket (a previous agent that was killed);
    CannotListen when the folder cannot be made, or when a live process accepts connections there: a second
    agent on the node (a manual one beside the systemd unit) used to unlink the first one's socket and take its
    ranks' new connections, silently."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CannotListen(f"cannot listen on unix:{path}: cannot make {path.parent}: {exc.strerror} "
                           f"(--socket)") from None
    if not path.exists() and not path.is_symlink():
        return
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:  # nothing accepts there (ECONNREFUSED; not a socket): stale, ours to replace
            try:
                path.unlink()
            except OSError as exc:
                raise CannotListen(f"cannot listen on unix:{path}: a stale file is there and cannot be removed: "
                                   f"{exc.strerror}") from None
            return
    raise CannotListen(f"cannot listen on unix:{path}: another process accepts connections there (another agent? "
                       f"systemctl status telemetry-agent); stop it, or give this one another --socket")
