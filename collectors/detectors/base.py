"""What every detector shares: the rows it is fed, the context it asks for hosts, a rolling baseline."""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

from collectors.common.rows import Row
from collectors.detectors.events import EventLog
from telemetry.summary import Summary


@dataclass
class Context:
    """What detectors may ask of the root: the host of a rank, the latest finalised step of a job."""

    hosts_of: Callable[[str], dict[int, str]] = lambda job: {}
    latest_step_of: Callable[[str], int | None] = lambda job: None
    jobs_known: Callable[[], Iterable[str]] = lambda: ()
    world_of: Callable[[str], int] = lambda job: 0  # the job's world size as its ranks declared it (0: unknown)

    def hosts(self, job: str, ranks: Iterable[int]) -> list[str]:
        mapping = self.hosts_of(job)
        return sorted({mapping[r] for r in ranks if r in mapping})

    def ranks_on_host(self, host: str) -> dict[str, list[int]]:
        """{job: its ranks on this host} for every job with ranks there."""
        out: dict[str, list[int]] = {}
        for job in self.jobs_known():
            ranks = sorted(r for r, h in self.hosts_of(job).items() if h == host)
            if ranks:
                out[job] = ranks
        return out


class Detector:
    """One detector: `observe(row)` for every finalised window it `wants` (by default: a metric in
    `metrics`, or a name starting with one of `prefixes`)."""

    kind = ""
    metrics: frozenset[str] = frozenset()
    prefixes: tuple[str, ...] = ()

    def __init__(self, events: EventLog, context: Context | None = None) -> None:
        self.events = events
        self.context = context or Context()

    def wants(self, row: Row) -> bool:
        metric = row.key.metric
        return metric in self.metrics or (bool(self.prefixes) and metric.startswith(self.prefixes))

    def observe(self, row: Row) -> None:  # pragma: no cover - every detector overrides it
        raise NotImplementedError

    def forget(self, job: str) -> None:
        """A finished job: drop its state. Every detector keeps per-job state in dict attributes keyed by
        the job or by a tuple starting with it (a new detector that does otherwise must override this)."""
        for value in vars(self).values():
            if isinstance(value, dict):
                for key in [k for k in value if k == job or (isinstance(k, tuple) and k[:1] == (job,))]:
                    del value[key]

    # helpers
    def raise_(self, job: str, *, step: int | None, ranks: Iterable[int], detail: dict, severity: str,
               key: str = "", time: float | None = None) -> None:
        ranks = list(ranks)
        self.events.raise_(self.kind, job, step=step, ranks=ranks, hosts=self.context.hosts(job, ranks),
                           detail=detail, severity=severity, key=key, time=time)

    def clear(self, job: str, key: str = "", step: int | None = None) -> None:
        self.events.clear(self.kind, job, key, step=step)

    def is_open(self, job: str, key: str = "") -> bool:
        return self.events.get_open(self.kind, job, key) is not None


class Baseline:
    """The run's own moving baseline: the last `size` accepted values (values judged abnormal stay out)."""

    def __init__(self, size: int) -> None:
        self.values: deque[float] = deque(maxlen=max(1, size))

    def add(self, value: float) -> None:
        if math.isfinite(value):
            self.values.append(value)

    def __len__(self) -> int:
        return len(self.values)

    def median(self) -> float:
        return statistics.median(self.values) if self.values else math.nan

    def mean(self) -> float:
        return math.fsum(self.values) / len(self.values) if self.values else math.nan

    def max(self) -> float:
        return max(self.values) if self.values else math.nan

    def mad_sigma(self) -> float:
        """The window's spread as a robust sigma: 1.4826 x the median absolute deviation from the median
        (the standard deviation for normal noise; one wild value in the window barely moves it)."""
        return mad_sigma(self.values)

    def robust_line(self, recent: int) -> tuple[float, float]:
        """A line through the last `recent` values that outliers and a falling loss do not bend: Theil-Sen
        (the median of the pairwise slopes, the median intercept). Returns its value one step past the
        end and the robust sigma of the residuals around it."""
        ys = list(self.values)[-max(2, recent):]
        n = len(ys)
        if n < 3:
            return (statistics.median(ys) if ys else math.nan), 0.0
        slope = statistics.median((ys[j] - ys[i]) / (j - i) for i in range(n) for j in range(i + 1, n))
        intercept = statistics.median(y - slope * x for x, y in enumerate(ys))
        residuals = [y - intercept - slope * x for x, y in enumerate(ys)]
        return intercept + slope * n, mad_sigma(residuals)

    def reset(self, values: Iterable[float] = ()) -> None:
        self.values.clear()
        for value in values:
            self.add(value)


def mad_sigma(values: Iterable[float]) -> float:
    """1.4826 x the median absolute deviation from the median: a sigma that outliers do not inflate."""
    values = list(values)
    if len(values) < 2:
        return 0.0
    centre = statistics.median(values)
    return 1.4826 * statistics.median(abs(v - centre) for v in values)


def event_time(row: Row) -> float:
    """When a window happened (the last value's time at its rank), in unix seconds; else its finalising."""
    ns = row.summary.last_time_ns or row.finalised_ns
    return ns / 1e9


def distinct(pairs: Iterable[tuple[float, int]], keep: Callable[[float], bool], limit: int) -> list[int]:
    """Sources of (value, source) pairs whose value passes `keep`, in order, each once, at most `limit`."""
    out: list[int] = []
    for value, source in pairs:
        if keep(value) and source not in out:
            out.append(source)
            if len(out) >= limit:
                break
    return out


def p50(summary: Summary) -> float:
    return summary.quantile(0.5) if summary.count else math.nan


def fnum(value: float, digits: int = 6) -> float | None:
    """A finite float rounded for an event's detail, or None."""
    return round(value, digits) if value is not None and math.isfinite(value) else None


def from_mapping(cls, data: dict | None):
    """Build a config dataclass from a mapping, refusing unknown keys (so typos are loud)."""
    data = dict(data or {})
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValueError(f"{cls.__name__}: unknown option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
    return cls(**data)


__all__ = ["Baseline", "Context", "Detector", "distinct", "event_time", "fnum", "from_mapping", "mad_sigma", "p50"]
