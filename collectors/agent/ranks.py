"""The ranks registered with this agent, and whether each is alive, stuck or dead.

Liveness comes from ``/proc`` (collectors/probes/process.py) and heartbeats:

* **dead**: the pid is gone, is a zombie, or now belongs to another process
  (its start time in ``/proc/PID/stat`` changed: the pid was reused). With the
  exit status when the kernel shows it: our own child (see ``reap``), or a
  zombie of the same user (or any, as root) before its parent reaps it.
  Dead is final for that registration; a new hello registers afresh.
* **stuck**: the process is alive but sent no heartbeat for ``stuck_after_s``
  (SIGSTOPped, hung in a collective or in the driver: the process state letter
  tells which, e.g. ``T`` stopped, ``D`` uninterruptible, ``S`` sleeping).
* **alive**: otherwise.

The verdicts travel upstream in the RankStates the agent sends with every unit
(``node.own_ranks``); the process state, exit status and transitions are logged
here and kept on each ``RankInfo`` (``RankRegistry.details()``); an exit status,
once known, also goes up as a ``rank.exit_status`` time-bucket value of the job
(see ``drain_exits`` and docs/hardware.md).
"""

from __future__ import annotations

import collections
import logging
import signal
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

from collectors.agent.exits import ExitWatch
from collectors.common.aioserve import Answers
from collectors.common.attempts import scoped
from collectors.common.validation import DEFAULT_MAX_WORLD_SIZE, BadInput, check_job, check_world
from collectors.delivery.node import RankView
from collectors.delivery.runs import process_digest
from collectors.probes.process import ProcessStatus, classify, process_status
from telemetry.names import FLEET_JOB, HOST_JOB_PREFIX
from telemetry.streams import END

log = logging.getLogger(__name__)

DEFAULT_STUCK_AFTER_S = 10.0
MAX_PENDING_EXITS = 4096
MAX_REFUSED_KEPT = 256


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (never reaps; unreadable counts as alive)."""
    return _status(pid, reap=False).alive


def _status(pid: int, reap: bool) -> ProcessStatus:
    try:
        return process_status(pid, reap=reap)
    except OSError:  # e.g. /proc mounted with hidepid and a permission error: assume alive, state unknown
        return ProcessStatus(True, None, None)


def describe_exit(code: int | None) -> str:
    if code is None:
        return "exit status not visible"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"killed by {name}"
    return f"exit code {code}"


@dataclass
class RankInfo:
    job: str  # scoped by the attempt (collectors/common/attempts.py)
    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int
    device: str
    link: Answers | None = None
    last_beat: float = field(default_factory=time.monotonic)
    last_seq: int = 0
    reported_dropped: int = 0
    incarnation: int = 0  # the Run's (RankHello.incarnation): another one from the same pid is a new Run
    current_step: int = 0
    # Liveness detail, refreshed by RankRegistry.views():
    verdict: str = "alive"  # "alive" | "stuck" | "dead"
    state: str | None = None  # the /proc/PID/stat state letter last seen (kept once dead); None: gone/unreadable
    exit_status: int | None = None  # exit code, or -N for signal N; None until visible
    start_ticks: int | None = None  # the process's start time at registration (pid reuse check)
    process: int = 0  # digest of host, pid and start time: who runs this rank, for the tiers above (runs.py)
    verdict_since: float = field(default_factory=time.monotonic)
    exit_reported: bool = False
    closed: bool = False  # the rank said bye (run.close()): finished, its process no longer watched
    # Batches refused upstream, by seq, with why (the latest MAX_REFUSED_KEPT): a resend of one after a
    # reconnect (the REFUSED ack lost with the stream) is refused again, not taken for durable.
    refused: collections.OrderedDict[int, str] = field(default_factory=collections.OrderedDict)
    exits: ExitWatch | None = None  # what tells how it ended (collectors/agent/exits.py), set at its hello

    def remember_refused(self, seq: int, reason: str) -> None:
        self.refused[seq] = reason
        while len(self.refused) > MAX_REFUSED_KEPT:
            self.refused.popitem(last=False)


@dataclass(frozen=True)
class RankLiveness:
    """What the agent knows about one rank's process (RankRegistry.details())."""

    job: str
    rank: int
    pid: int
    host: str
    device: str
    verdict: str
    state: str | None
    exit_status: int | None
    seconds_since_heartbeat: float
    seconds_in_verdict: float
    current_step: int


class RankRegistry:
    """Ranks by (job, rank). Not thread-safe: callers hold the node's lock.

    reap: reap ranks that are this process's own children (``waitpid``) so their exit status is
    known. Off by default: a rank is normally someone else's child (torchrun's, a test's Popen),
    and reaping it here would take the status from its real parent. Zombies of the same user
    show their exit status without reaping.
    """

    def __init__(self, stuck_after_s: float = DEFAULT_STUCK_AFTER_S, reap: bool = False,
                 max_world_size: int = DEFAULT_MAX_WORLD_SIZE) -> None:
        self.stuck_after_s = stuck_after_s
        self.reap = reap
        self.max_world_size = max_world_size
        self.ranks: dict[tuple[str, int], RankInfo] = {}
        self.changed = False  # a rank registered since the last views()
        # Views that are not ranks: the fleet's devices on this host (HardwareSampler), sent up as FLEET_JOB's.
        self.pseudo: dict[str, RankView] = {}
        self._exits: collections.deque[tuple[RankInfo, int]] = collections.deque(maxlen=MAX_PENDING_EXITS)

    def register(self, hello, link: Answers) -> RankInfo:
        check_job(hello.job)
        if hello.job.startswith(HOST_JOB_PREFIX) or hello.job == FLEET_JOB:
            raise BadInput("INVALID_ARGUMENT", f"job names starting with {HOST_JOB_PREFIX!r}, and {FLEET_JOB!r}, "
                                               "are reserved for the agents' host hardware windows")
        if hello.world_size == 0:
            raise BadInput("INVALID_ARGUMENT", "world_size must be >= 1")
        check_world(hello.world_size, self.max_world_size)
        if hello.rank >= hello.world_size:
            raise BadInput("INVALID_ARGUMENT", f"rank {hello.rank} is out of range for world size {hello.world_size}")
        job = scoped(hello.job, hello.attempt)  # the attempt is part of the job's identity
        for (other_job, _), other in self.ranks.items():
            if other_job == job and other.world_size != hello.world_size:
                raise BadInput("INVALID_ARGUMENT", f"job {hello.job!r} attempt {hello.attempt} has world size "
                                                   f"{other.world_size}, rank {hello.rank} says {hello.world_size} "
                                                   "(a resized job is a new attempt: telemetry.init(attempt=...))")
        key = (job, hello.rank)
        existing = self.ranks.get(key)
        if (existing is not None and existing.pid != hello.pid and existing.link is not None
                and self._process_alive(existing)):
            raise BadInput("ALREADY_EXISTS", f"rank {hello.rank} of job {hello.job!r} is already registered "
                                             f"by live pid {existing.pid}")
        if existing is not None and existing.pid != hello.pid and (existing.last_seq or existing.closed):
            # Another process already ran this rank of this attempt and sent data: the tree would take the new
            # run's steps for resends of the old one's and drop them as duplicates (issue 17). Refused, so
            # the new run's close() says so, instead of its values vanishing.
            raise BadInput("FAILED_PRECONDITION",
                           f"rank {hello.rank} of job {hello.job!r} attempt {hello.attempt} already ran in pid "
                           f"{existing.pid}: a new run under the same job name needs a new attempt "
                           "(telemetry.init(attempt=...), or a launcher that sets one; docs/restarts.md)")
        now = time.monotonic()
        if existing is not None and existing.pid == hello.pid:
            existing.link = link
            if hello.incarnation != existing.incarnation:
                # A new Run in the same process (telemetry.init() again): its batches are numbered from 1.
                # Keeping the old Run's last_seq would take them for resends and acknowledge them unstored.
                existing.incarnation, existing.last_seq, existing.reported_dropped = hello.incarnation, 0, 0
                existing.refused.clear()
                existing.closed = False
                self.changed = True
            existing.last_beat = now
            if existing.verdict == "dead":  # the same process talks again: it was not dead after all
                self._set_verdict(existing, "alive", now)
            return existing
        info = RankInfo(job, hello.rank, hello.world_size, hello.local_rank, hello.host, hello.pid,
                        hello.device, link, incarnation=hello.incarnation)
        status = _status(info.pid, self.reap)
        info.start_ticks, info.state = status.start_ticks, status.state
        info.process = process_digest(info.host, info.pid, info.start_ticks)
        self.ranks[key] = info
        self.changed = True
        return info

    def pids_to_read(self) -> list[int]:
        """The processes the next `views()` reads in /proc (the caller holds the node's lock): those of ranks not
        closed, and of dead ones whose exit status is not known yet."""
        return [info.pid for info in self.ranks.values()
                if not info.closed and (info.verdict != "dead" or info.exit_status is None)]

    def read_statuses(self, pids: Iterable[int]) -> dict[int, ProcessStatus]:
        """Each process's /proc status (and exit status, reaped when `reap`), read WITHOUT the node's lock: a
        flush used to read /proc for every rank while holding it, and the ranks' intake waited meanwhile."""
        return {pid: _status(pid, self.reap) for pid in set(pids)}

    def views(self, now: float | None = None,
              statuses: dict[int, ProcessStatus] | None = None) -> dict[str, RankView]:
        """Refresh every rank's liveness from /proc and heartbeats; the ranks of each job by verdict. `statuses`
        (from `read_statuses`, taken just before) spares the /proc reads; a rank it lacks is read here."""
        now = time.monotonic() if now is None else now
        views: dict[str, RankView] = {}
        for info in self.ranks.values():
            view = views.setdefault(info.job, RankView())
            view.world_size = max(view.world_size, info.world_size)
            view.hosts[info.rank] = info.host
            view.processes[info.rank] = info.process
            if info.closed:
                view.closed.add(info.rank)
                continue
            self._refresh(info, now, None if statuses is None else statuses.get(info.pid))
            getattr(view, info.verdict).add(info.rank)
        views.update(self.pseudo)
        return views

    def jobs(self) -> set[str]:
        return {job for job, _ in self.ranks}

    def close(self, info: RankInfo) -> None:
        """The rank closed its run: finished, not dead; its process is not watched any more."""
        info.closed = True
        self.changed = True

    def forget_job(self, job: str) -> None:
        """A finished job: drop its ranks, ending any stream one of them still holds open (a rank that
        wakes up after the job was given up says hello again and is registered afresh)."""
        for key in [key for key in self.ranks if key[0] == job]:
            info = self.ranks.pop(key)
            if info.link is not None:
                info.link.put(END)
                info.link = None
        self.changed = True

    def details(self, job: str | None = None, now: float | None = None) -> list[RankLiveness]:
        """Each rank's liveness as of the last views() (call views() first for a fresh reading)."""
        now = time.monotonic() if now is None else now
        return [RankLiveness(i.job, i.rank, i.pid, i.host, i.device, i.verdict, i.state, i.exit_status,
                             now - i.last_beat, now - i.verdict_since, i.current_step)
                for i in sorted(self.ranks.values(), key=lambda i: (i.job, i.rank))
                if job is None or i.job == job]

    def ending(self, info: RankInfo) -> None:
        """The rank said it is ending (its last words: an uncaught exception, its exit, a signal): dead now."""
        if info.verdict != "dead":
            self._set_verdict(info, "dead", time.monotonic())
            self.changed = True

    def drain_exits(self) -> list[tuple[RankInfo, int]]:
        """(rank, exit status) for each dead rank whose exit status became known since the last call."""
        out = list(self._exits)
        self._exits.clear()
        return out

    def link(self, job: str, rank: int) -> Answers | None:
        info = self.ranks.get((job, rank))
        return None if info is None else info.link

    # ------------------------------------------------------------ liveness
    def _process_alive(self, info: RankInfo) -> bool:
        if info.verdict == "dead":
            return False
        status = _status(info.pid, self.reap)
        return status.alive and not _reused(info, status)

    def _refresh(self, info: RankInfo, now: float, read: ProcessStatus | None = None) -> None:
        if info.verdict == "dead":
            if info.exit_status is None:  # it may still become visible (a zombie not yet reaped)
                status = read or _status(info.pid, self.reap)
                if not status.alive and not _reused(info, status) and status.exit_status is not None:
                    self._exited(info, status.exit_status)
            return
        status = read or _status(info.pid, self.reap)
        if status.alive and _reused(info, status):
            status = ProcessStatus(False, None, None)  # our process is gone; another one has its pid
        info.state = status.state
        verdict = classify(status.alive, now - info.last_beat, self.stuck_after_s)
        if verdict == info.verdict:
            return
        if verdict == "dead" and status.exit_status is not None:
            info.exit_status = status.exit_status
        self._set_verdict(info, verdict, now)
        if info.exit_status is not None:
            self._exited(info, info.exit_status, logged=True)

    def _exited(self, info: RankInfo, code: int, logged: bool = False) -> None:
        info.exit_status = code
        if not info.exit_reported:
            info.exit_reported = True
            self._exits.append((info, code))
            if not logged:
                log.warning("rank %d of job %r (pid %d), dead: %s", info.rank, info.job, info.pid,
                            describe_exit(code))

    def _set_verdict(self, info: RankInfo, verdict: str, now: float) -> None:
        before, info.verdict, info.verdict_since = info.verdict, verdict, now
        who = f"rank {info.rank} of job {info.job!r} (pid {info.pid}, host {info.host or '?'})"
        if verdict == "stuck":
            log.warning("%s is stuck: alive (process state %s) but no heartbeat for %.1f s", who,
                        info.state or "?", now - info.last_beat)
        elif verdict == "dead":
            log.warning("%s is dead (was %s): %s, %s", who, before,
                        "process gone" if info.state is None else f"process state {info.state}",
                        describe_exit(info.exit_status))
        else:
            log.info("%s is alive again (was %s)", who, before)


def _reused(info: RankInfo, status: ProcessStatus) -> bool:
    """The pid now names a different process than the one that registered."""
    return (info.start_ticks is not None and status.start_ticks is not None
            and status.start_ticks != info.start_ticks)
