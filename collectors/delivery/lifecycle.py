"""When a job ends at a node, and when a child that left is given up (DESIGN §8).

Why: an agent lives for months and sees thousands of jobs. Every per-job map (open steps, metric
names, deadlines, detector baselines, /metrics series) that is never pruned turns into memory,
idle CPU and scrape size proportional to every job ever run. A job is finished here when every rank
under this node closed its run (after `grace_s`, for late data), or when nothing of it arrived for
`idle_timeout_s`; then the node's owner forgets it everywhere. A forgotten job is remembered as
finished for `idle_timeout_s`, so that a child still reporting its rank states for a moment does not
bring it back; new data (a window, a rank's message) does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

DEFAULT_JOB_IDLE_TIMEOUT_S = 600.0
DEFAULT_GRACE_S = 10.0  # after the last rank closed: late data still finds the job's state
SWEEP_EVERY_S = 1.0


class JobLifecycle:
    """Not thread-safe: the node's lock guards it (intake touches, the flush loop sweeps)."""

    def __init__(self, idle_timeout_s: float = DEFAULT_JOB_IDLE_TIMEOUT_S, grace_s: float = DEFAULT_GRACE_S) -> None:
        if idle_timeout_s <= 0:
            raise ValueError(f"--job-idle-timeout must be positive, got {idle_timeout_s}")
        self.idle_timeout_s = idle_timeout_s
        self.grace_s = min(grace_s, idle_timeout_s)
        self._last: dict[str, float] = {}          # live jobs: when something of them last arrived
        self._closed_since: dict[str, float] = {}  # live jobs whose ranks have all closed: since when
        self._finished: dict[str, float] = {}      # forgotten jobs: when

    def touch(self, job: str, now: float) -> None:
        """Something of `job` arrived (a rank's message, a window)."""
        self._last[job] = now
        self._finished.pop(job, None)

    def live(self, job: str) -> bool:
        return job not in self._finished

    def live_jobs(self) -> list[str]:
        return list(self._last)

    def sweep(self, now: float, known: Iterable[str], all_closed: Callable[[str], bool]) -> list[tuple[str, str]]:
        """The jobs to forget now, each with why ("closed" or "idle"); they are marked finished."""
        known = set(known)
        for job in known:
            if job not in self._finished:
                self._last.setdefault(job, now)
        gone = []
        for job, last in list(self._last.items()):
            # A job seen all closed that then vanished from the children's rank states stays closed: the
            # tier below forgot it first (its grace began earlier), which is no reason to wait for idleness.
            if all_closed(job) or (job in self._closed_since and job not in known):
                since = self._closed_since.setdefault(job, now)
                if now - since >= self.grace_s:
                    gone.append((job, "closed"))
                continue
            self._closed_since.pop(job, None)
            if now - last >= self.idle_timeout_s:
                gone.append((job, "idle"))
        for job, _ in gone:
            del self._last[job]
            self._closed_since.pop(job, None)
            self._finished[job] = now
        for job, when in list(self._finished.items()):
            if now - when >= self.idle_timeout_s:
                del self._finished[job]
        return gone


class ChildLifecycle:
    """Children (agents, collectors) by connection: one gone longer than the timeout is given up."""

    def __init__(self, timeout_s: float = DEFAULT_JOB_IDLE_TIMEOUT_S) -> None:
        self.timeout_s = timeout_s
        self._streams: dict[str, int] = {}          # open streams per child (a reconnect may overlap the old)
        self._gone_since: dict[str, float] = {}

    def connected(self, child: str) -> None:
        self._streams[child] = self._streams.get(child, 0) + 1
        self._gone_since.pop(child, None)

    def disconnected(self, child: str, now: float) -> None:
        left = self._streams.get(child, 0) - 1
        if left > 0:
            self._streams[child] = left
            return
        self._streams.pop(child, None)
        self._gone_since[child] = now

    def sweep(self, now: float) -> list[str]:
        """Children disconnected for longer than the timeout: forget them now."""
        gone = [child for child, since in self._gone_since.items() if now - since >= self.timeout_s]
        for child in gone:
            del self._gone_since[child]
        return gone
