"""What the root's history becomes in a Prometheus-compatible long-term store (remote-write; docs/metrics.md).

The root's /metrics shows the *latest* step of each live job; remote-write sends *every* step, each sample
stamped with the end of its window, so a store keeps the whole run. The families are distinct from the
scraped ones (a Prometheus may both scrape the root and receive its writes):

    telemetry_step_figure{job, attempt, metric, stat}     stat: count, mean, min, max, p50, p90, p99
    telemetry_step_argmax_rank{job, attempt, metric}      the rank of the max (a value, never a label)
    telemetry_step_argmin_rank{job, attempt, metric}
    telemetry_step_index{job, attempt}                    the step number, at its end: joins a time to a step
    telemetry_hardware_figure{job, attempt, metric, stat} 1 s hardware buckets (stat: count, mean, min, max,
                                                          and sum for counters' _delta metrics), any job name
    telemetry_hardware_argmax_rank{job, attempt, metric}
    telemetry_job_events_total{job, attempt, kind}        events opened, at each opening
    telemetry_job_goodput_ratio{job}                      goodput (docs/restarts.md), at the job's latest step end
    telemetry_job_goodput_seconds{job, kind}              kind: productive, lost, restart_downtime
    telemetry_job_restarts{job}

A step window's timestamp is its summary's `last_time_ns` (the latest time any rank logged that metric at
that step); a time bucket's is its end. A store keeps one sample per series and millisecond, oldest first: a
newer window (a later step, bucket, event count) whose time is not after its series' last sample is stamped
1 ms after it (two steps that end in the same millisecond), while an older one keeps its time (the writer
then counts it as out of order: it is not sent). Ranks are values, never labels, so a series' cardinality is bounded
by jobs x metrics (which the root caps per job). Every series carries the external labels given
(`--remote-write-label`), e.g. the cluster, so that several roots can write to one store.
"""

from __future__ import annotations

import math
from collections import OrderedDict

from collectors.common.attempts import split
from collectors.common.rows import Row
from collectors.root.goodput import Goodput
from collectors.root.job_figures import hardware_family
from collectors.root.prompb import Labels

Sample = tuple[Labels, int, float]  # (sorted labels with __name__, timestamp ms, value)

STEP_FIGURE = "telemetry_step_figure"
STEP_ARGMAX = "telemetry_step_argmax_rank"
STEP_ARGMIN = "telemetry_step_argmin_rank"
STEP_INDEX = "telemetry_step_index"
HARDWARE_FIGURE = "telemetry_hardware_figure"
HARDWARE_ARGMAX = "telemetry_hardware_argmax_rank"
EVENTS_TOTAL = "telemetry_job_events_total"
GOODPUT_RATIO = "telemetry_job_goodput_ratio"
GOODPUT_SECONDS = "telemetry_job_goodput_seconds"
RESTARTS = "telemetry_job_restarts"
STEP_STATS = ("count", "mean", "min", "max", "p50", "p90", "p99")
RESERVED_LABELS = frozenset({"__name__", "job", "attempt", "metric", "stat", "kind"})
MAX_JOBS_REMEMBERED = 10_000  # jobs whose latest stamps are kept (the least recently written go first)


def labels(name: str, external: Labels, **pairs: str) -> Labels:
    """The sorted label set of one series (the remote-write spec requires labels sorted by name)."""
    return tuple(sorted((("__name__", name), *external, *pairs.items())))


class SeriesMaker:
    """Turns finalised rows, events and goodput figures into samples. Not thread-safe: one caller at a time
    (the finaliser's commits come one after the other)."""

    def __init__(self, external: Labels = ()) -> None:
        self.external = external
        # scoped job -> (series kind, metric) -> (index of its latest window, its timestamp ms)
        self._stamps: OrderedDict[str, dict[tuple[str, str], tuple[int, int]]] = OrderedDict()

    def _stamp(self, job: str, series: tuple[str, str], index: int, ts: int) -> int:
        """The timestamp for window `index` of a series: `ts`, or 1 ms after the series' last one when this window
        is newer but not later (see the module docstring)."""
        stamps = self._stamps.get(job)
        if stamps is None:
            stamps = self._stamps[job] = {}
            while len(self._stamps) > MAX_JOBS_REMEMBERED:
                self._stamps.popitem(last=False)
        self._stamps.move_to_end(job)
        last = stamps.get(series)
        if last is not None:
            if index <= last[0]:
                return ts  # an older window, or the same one again: as it is
            ts = max(ts, last[1] + 1)
        stamps[series] = (index, ts)
        return ts

    def rows(self, rows: list[Row]) -> list[Sample]:
        """Samples of the rows of one commit: step windows and hardware buckets (late deltas are not rows
        here: the caller skips them, a store cannot amend a sample it holds)."""
        out: list[Sample] = []
        for row in rows:
            if row.key.is_step:
                self._step(row, out)
            elif hardware_family(row.key.metric) is not None:
                self._hardware(row, out)
        return out

    def _step(self, row: Row, out: list[Sample]) -> None:
        job, attempt = split(row.key.job)
        metric, s = row.key.metric, row.summary
        step = row.key.index
        ts = self._stamp(row.key.job, ("step", metric), step, s.last_time_ns // 1_000_000)
        ids = {"job": job, "attempt": str(attempt), "metric": metric}
        if s.count:
            p50, p90, p99 = s.quantiles([0.5, 0.9, 0.99])
            figures = {"count": float(s.count), "mean": s.mean, "min": s.min, "max": s.max,
                       "p50": p50, "p90": p90, "p99": p99}
        else:
            figures = {"count": 0.0}
        for stat, value in figures.items():
            out.append((labels(STEP_FIGURE, self.external, stat=stat, **ids), ts, float(value)))
        for name, rank in ((STEP_ARGMAX, s.argmax if s.count else None), (STEP_ARGMIN, s.argmin if s.count else None)):
            if rank is not None:
                out.append((labels(name, self.external, **ids), ts, float(rank)))
        last = self._stamps[row.key.job].get(("index", ""))
        if last is None or step > last[0]:
            at = self._stamp(row.key.job, ("index", ""), step, ts)
            out.append((labels(STEP_INDEX, self.external, job=job, attempt=str(attempt)), at, float(step)))

    def _hardware(self, row: Row, out: list[Sample]) -> None:
        job, attempt = split(row.key.job)
        metric, s = row.key.metric, row.summary
        ts = self._stamp(row.key.job, ("hardware", metric), row.key.index, row.key.index + row.key.width_ms)
        ids = {"job": job, "attempt": str(attempt), "metric": metric}
        figures = {"count": float(s.count)}
        if s.count:
            figures.update(mean=s.mean, min=s.min, max=s.max)
            if metric.endswith("_delta"):
                figures["sum"] = s.sum
        for stat, value in figures.items():
            out.append((labels(HARDWARE_FIGURE, self.external, stat=stat, **ids), ts, float(value)))
        if s.count and s.argmax is not None:
            out.append((labels(HARDWARE_ARGMAX, self.external, **ids), ts, float(s.argmax)))

    def event_opened(self, scoped_job: str, kind: str, time_s: float, total: int) -> list[Sample]:
        job, attempt = split(scoped_job)
        ts = self._stamp(scoped_job, ("events", kind), total, int(time_s * 1000))
        return [(labels(EVENTS_TOTAL, self.external, job=job, attempt=str(attempt), kind=kind), ts, float(total))]

    def goodput(self, figures: Goodput) -> list[Sample]:
        """The goodput figures of a job (by its name, all attempts), at its latest step's end."""
        attempts = figures["attempts"]
        if not attempts:
            return []
        job = figures["job"]
        ts = self._stamp(job, ("goodput", ""), sum(a["steps"] for a in attempts),
                         max(a["end_ns"] for a in attempts) // 1_000_000)
        out: list[Sample] = []
        if figures["goodput"] is not None and math.isfinite(figures["goodput"]):
            out.append((labels(GOODPUT_RATIO, self.external, job=job), ts, float(figures["goodput"])))
        for kind, value in (("productive", figures["productive_s"]), ("lost", figures["lost_s"]),
                            ("restart_downtime", figures["restart_downtime_s"])):
            out.append((labels(GOODPUT_SECONDS, self.external, job=job, kind=kind), ts, float(value)))
        out.append((labels(RESTARTS, self.external, job=job), ts, float(figures["restarts"])))
        return out

    def forget(self, scoped_job: str) -> None:
        self._stamps.pop(scoped_job, None)
