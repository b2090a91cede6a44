"""How often the root may ask a job's ranks for a capture (docs/forensics.md, "Limits").

A capture runs inside the training process (its stacks, its flight recorder) or, when the rank does not
answer, py-spy against it from outside: cheap once, not under a flood. Without limits, 1,500 on-demand
requests in 5 s at a live job were all accepted, and every one of them reached the ranks (issue 26). So
the root admits an on-demand request only when

* the job's token bucket has a token (`job_burst` at once, then one per `job_every_s`),
* every named rank's bucket has one (`rank_burst` at once, then one per `rank_every_s`), and
* no named rank already has a capture in flight (asked, not yet stored; at most `in_flight_s`, after
  which the ask is taken as lost),

and otherwise refuses it with how long to wait (`Busy.retry_after_s`: the API's 429 and Retry-After). A
refused request takes no token. Event-driven captures are not refused (an event asks each rank once) but
they count as in flight, so nobody can pile on-demand requests onto a rank being captured.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterable
from dataclasses import dataclass

DEFAULT_JOB_BURST = 10
DEFAULT_JOB_EVERY_S = 6.0
DEFAULT_RANK_BURST = 3
DEFAULT_RANK_EVERY_S = 20.0
DEFAULT_IN_FLIGHT_S = 60.0
MAX_TRACKED = 100_000  # buckets and in-flight entries kept; the least recently used go first


class Busy(Exception):
    """An on-demand capture refused for now: retry after `retry_after_s`."""

    def __init__(self, message: str, retry_after_s: float, reason: str) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.reason = reason  # "job_rate", "rank_rate" or "in_flight" (the refusal counter's label)

    @property
    def retry_after_header(self) -> str:
        return str(max(1, math.ceil(self.retry_after_s)))


class TokenBuckets:
    """One token bucket per key: `burst` tokens at most, one more every `every_s`. Not thread-safe."""

    def __init__(self, burst: int, every_s: float, max_keys: int = MAX_TRACKED) -> None:
        if burst < 1 or every_s <= 0:
            raise ValueError("a bucket holds at least one token and refills at a positive rate")
        self.burst = burst
        self.every_s = every_s
        self.max_keys = max_keys
        self._buckets: OrderedDict[Hashable, tuple[float, float]] = OrderedDict()  # key -> (tokens, at)

    def _level(self, key: Hashable, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + max(0.0, now - at) / self.every_s)

    def wait_s(self, key: Hashable, now: float) -> float:
        """Seconds until `key` has a token (0: it has one now)."""
        return max(0.0, (1.0 - self._level(key, now)) * self.every_s)

    def take(self, key: Hashable, now: float) -> None:
        self._buckets[key] = (self._level(key, now) - 1.0, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self.max_keys:
            self._buckets.popitem(last=False)


@dataclass(frozen=True)
class CaptureLimitsConfig:
    job_burst: int = DEFAULT_JOB_BURST
    job_every_s: float = DEFAULT_JOB_EVERY_S
    rank_burst: int = DEFAULT_RANK_BURST
    rank_every_s: float = DEFAULT_RANK_EVERY_S
    in_flight_s: float = DEFAULT_IN_FLIGHT_S


class CaptureLimits:
    """Admission of capture requests (see the module docstring). Thread-safe: the API's threads admit, the
    forensics worker marks captures stored."""

    def __init__(self, config: CaptureLimitsConfig | None = None) -> None:
        self.config = config = config or CaptureLimitsConfig()
        self._jobs = TokenBuckets(config.job_burst, config.job_every_s)
        self._ranks = TokenBuckets(config.rank_burst, config.rank_every_s)
        self._in_flight: OrderedDict[tuple[str, int], tuple[str, float]] = OrderedDict()  # -> (request, until)
        self._lock = threading.Lock()
        self.refused = {"job_rate": 0, "rank_rate": 0, "in_flight": 0}

    def admit(self, job: str, ranks: Iterable[int], request_id: str, now: float) -> None:
        """Admit an on-demand request of `ranks` of `job` (its scoped name) and mark them in flight, or raise
        Busy (counted) taking nothing."""
        ranks = sorted(set(ranks))
        with self._lock:
            try:
                self._check(job, ranks, now)
            except Busy as busy:
                self.refused[busy.reason] += 1
                raise
            self._jobs.take(job, now)
            for rank in ranks:
                self._ranks.take((job, rank), now)
            self._mark(job, ranks, request_id, now)

    def _check(self, job: str, ranks: list[int], now: float) -> None:
        for rank in ranks:
            found = self._in_flight.get((job, rank))
            if found is not None and found[1] > now:
                raise Busy(f"rank {rank} already has a capture in flight ({found[0]}); ask again once it is "
                           "stored", found[1] - now, "in_flight")
        wait = self._jobs.wait_s(job, now)
        if wait > 0:
            raise Busy(f"at most {self.config.job_burst} captures of a job at once, then one every "
                       f"{self.config.job_every_s:g} s", wait, "job_rate")
        wait = max((self._ranks.wait_s((job, rank), now) for rank in ranks), default=0.0)
        if wait > 0:
            raise Busy(f"at most {self.config.rank_burst} captures of a rank at once, then one every "
                       f"{self.config.rank_every_s:g} s", wait, "rank_rate")

    def asked(self, job: str, ranks: Iterable[int], request_id: str, now: float) -> None:
        """An event's request went down: its ranks are in flight too (events are never refused)."""
        with self._lock:
            self._mark(job, ranks, request_id, now)

    def _mark(self, job: str, ranks: Iterable[int], request_id: str, now: float) -> None:
        for rank in ranks:
            self._in_flight[(job, rank)] = (request_id, now + self.config.in_flight_s)
            self._in_flight.move_to_end((job, rank))
        while len(self._in_flight) > MAX_TRACKED:
            self._in_flight.popitem(last=False)

    def stored(self, job: str, rank: int, request_id: str) -> None:
        """A capture of `rank` for `request_id` was stored (or answered with its error): no longer in flight."""
        with self._lock:
            found = self._in_flight.get((job, rank))
            if found is not None and found[0] == request_id:
                del self._in_flight[(job, rank)]
