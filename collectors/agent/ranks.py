"""The ranks registered with this agent, and whether each is alive, stuck or dead."""

from __future__ import annotations

import os
import queue
import time
from dataclasses import dataclass, field

from collectors.common.validation import BadInput, check_job
from collectors.delivery.node import RankView

DEFAULT_STUCK_AFTER_S = 10.0


def pid_alive(pid: int) -> bool:
    """True while the process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
        return state not in (b"Z", b"X")
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except PermissionError:
        return True


@dataclass
class RankInfo:
    job: str
    rank: int
    world_size: int
    local_rank: int
    host: str
    pid: int
    device: str
    link: queue.Queue | None = None
    last_beat: float = field(default_factory=time.monotonic)
    last_seq: int = 0
    reported_dropped: int = 0
    current_step: int = 0


class RankRegistry:
    def __init__(self, stuck_after_s: float = DEFAULT_STUCK_AFTER_S) -> None:
        self.stuck_after_s = stuck_after_s
        self.ranks: dict[tuple[str, int], RankInfo] = {}
        self.changed = False  # a rank registered since the last views()

    def register(self, hello, link: queue.Queue) -> RankInfo:  # type: ignore[no-untyped-def]
        check_job(hello.job)
        if hello.world_size == 0:
            raise BadInput("INVALID_ARGUMENT", "world_size must be >= 1")
        if hello.rank >= hello.world_size:
            raise BadInput("INVALID_ARGUMENT", f"rank {hello.rank} is out of range for world size {hello.world_size}")
        for (job, _), other in self.ranks.items():
            if job == hello.job and other.world_size != hello.world_size:
                raise BadInput("INVALID_ARGUMENT", f"job {job!r} has world size {other.world_size}, "
                                                   f"rank {hello.rank} says {hello.world_size}")
        key = (hello.job, hello.rank)
        existing = self.ranks.get(key)
        if existing is not None and existing.pid != hello.pid and existing.link is not None and pid_alive(existing.pid):
            raise BadInput("ALREADY_EXISTS", f"rank {hello.rank} of job {hello.job!r} is already registered "
                                             f"by live pid {existing.pid}")
        if existing is not None and existing.pid == hello.pid:
            existing.link = link
            existing.last_beat = time.monotonic()
            return existing
        info = RankInfo(hello.job, hello.rank, hello.world_size, hello.local_rank, hello.host, hello.pid,
                        hello.device, link)
        self.ranks[key] = info
        self.changed = True
        return info

    def views(self, now: float | None = None) -> dict[str, RankView]:
        now = time.monotonic() if now is None else now
        views: dict[str, RankView] = {}
        for info in self.ranks.values():
            view = views.setdefault(info.job, RankView())
            view.world_size = max(view.world_size, info.world_size)
            view.hosts[info.rank] = info.host
            if not pid_alive(info.pid):
                view.dead.add(info.rank)
            elif now - info.last_beat > self.stuck_after_s:
                view.stuck.add(info.rank)
            else:
                view.alive.add(info.rank)
        return views

    def link(self, job: str, rank: int) -> queue.Queue | None:
        info = self.ranks.get((job, rank))
        return None if info is None else info.link
