"""What the root's /metrics remembers of each job between scrapes, fed by finalised rows (`JobFigures.observe`).

The latest finalised window per step metric, progress bucket and hardware reading, and the running totals
(steps, waits, incomplete, late and non-finite windows, hardware counters) that counters need: no database read
per scrape. The families built from these are in `collectors/root/exposition.py`, one collector per concern;
`collectors/root/metrics.py` (`RootMetrics`) ties the two together on one registry.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from collectors.common.rows import Row
from telemetry.names import ARRIVAL_METRIC, HOST_JOB_PREFIX, PROGRESS_METRIC, WAIT_METRIC
from telemetry.summary import Summary

# Who the others wait for, the first signal a job logs: collective_wait (seconds each rank had a collective
# outstanding, logged by the SDK under torch.distributed, telemetry.torch.waits: the rank the others wait for waits
# least, whatever the step's collectives; its work_time is the largest), collective_arrival (each rank's own work
# between two synchronisations: the slowest arrives last), else step_time (under synchronous collectives every
# rank's step_time is the slowest rank's, so it names nobody).
WAIT_SIGNALS = (WAIT_METRIC, ARRIVAL_METRIC, "step_time")
HARDWARE_PREFIXES = ("gpu.", "nic.", "ib.")
# counters summed into one family each, so a panel needs no regex over names (which PromQL cannot add up
# after increase() drops __name__)
AGGREGATES = {
    "telemetry_network_errors": (
        "NIC and InfiniBand error counters (rx/tx errors, carrier changes, symbol errors, link downs and "
        "recoveries, receive errors, transmit discards) summed over devices since the root started.",
        frozenset({"nic.rx_errors_delta", "nic.tx_errors_delta", "nic.carrier_changes_delta",
                   "ib.symbol_error_delta", "ib.link_downed_delta", "ib.link_error_recovery_delta",
                   "ib.port_rcv_errors_delta", "ib.port_xmit_discards_delta"})),
    "telemetry_gpu_nvlink_errors": (
        "NVLink CRC flit/data, replay and recovery error counters summed over links and GPUs since the root "
        "started.",
        frozenset({"gpu.nvlink_crc_flit_errors_delta", "gpu.nvlink_crc_data_errors_delta",
                   "gpu.nvlink_replay_errors_delta", "gpu.nvlink_recovery_errors_delta"})),
}
MAX_STEPS_REMEMBERED = 512  # per (job, metric), for counting late non-finite values once


def waited(signal: str, s: Summary) -> tuple[float, float]:
    """One step's waiting for the slowest rank on `signal`: (the median rank's, every rank's added up). On
    collective_wait the slowest waits least: p50 - min and sum - count x min; on the others it comes last: max -
    p50 and count x max - sum. (0, 0) when the figures are not finite."""
    p50 = s.quantile(0.5)
    edge = s.min if signal == WAIT_METRIC else s.max
    if not (math.isfinite(p50) and math.isfinite(edge)):
        return 0.0, 0.0
    if signal == WAIT_METRIC:
        return max(0.0, p50 - edge), max(0.0, s.sum - s.count * edge)
    return max(0.0, edge - p50), max(0.0, s.count * edge - s.sum)


def hardware_family(metric: str) -> tuple[str, bool] | None:
    """'gpu.temperature_celsius' -> ('telemetry_gpu_temperature_celsius', False) (a gauge);
    'gpu.xid_errors_delta' -> ('telemetry_gpu_xid_errors', True) (a counter, exposed with _total);
    the probes' own running totals ('..._total') -> None (the deltas are summed instead)."""
    if not metric.startswith(HARDWARE_PREFIXES) or metric.endswith("_total"):
        return None
    name = "telemetry_" + metric.replace(".", "_")
    if metric.endswith("_delta"):
        return name[: -len("_delta")], True
    return name, False


@dataclass
class Latest:
    index: int
    summary: Summary
    expected: int


@dataclass
class Job:
    latest: dict[str, Latest] = field(default_factory=dict)  # step metrics
    steps_total: int = 0
    last_step: int = -1
    wait_total: float = 0.0
    wait_rank_total: float = 0.0
    signal: str = "step_time"  # the first of WAIT_SIGNALS the job logs: its waits are read from that only
    incomplete_total: int = 0
    late_total: int = 0
    expected: int = 0
    nonfinite: dict[str, int] = field(default_factory=dict)
    nonfinite_seen: dict[str, OrderedDict] = field(default_factory=dict)
    progress: Latest | None = None
    hw_latest: dict[str, Latest] = field(default_factory=dict)
    hw_totals: dict[str, float] = field(default_factory=dict)

    @property
    def training(self) -> bool:
        """A job with step windows (not a host's pseudo-job)."""
        return self.last_step >= 0 or bool(self.latest)

    def copy(self) -> Job:
        """What a scrape reads, taken under the lock: the dicts the intake edits are copied, the remembered
        non-finite steps (never read by a scrape) are not."""
        return Job(latest=dict(self.latest), steps_total=self.steps_total, last_step=self.last_step,
                   wait_total=self.wait_total, wait_rank_total=self.wait_rank_total, signal=self.signal,
                   incomplete_total=self.incomplete_total, late_total=self.late_total, expected=self.expected,
                   nonfinite=dict(self.nonfinite), progress=self.progress, hw_latest=dict(self.hw_latest),
                   hw_totals=dict(self.hw_totals))


@dataclass
class Snapshot:
    """One collector's view of every job at a scrape: `jobs` sorted by the tree's name (job@attempt); `registered`
    the jobs whose ranks registered (exported from then on, before their first window), host pseudo-jobs left out."""
    jobs: list[tuple[str, Job]]
    registered: list[str]


class JobFigures:
    """Feed it finalised rows (`observe`), read it per scrape (`snapshot`, or one `scrape()` shared by every
    collector of an exposition). Thread-safe."""

    def __init__(self, jobs: Callable[[], Iterable[str]] | None = None) -> None:
        self.known_jobs = jobs  # jobs whose ranks registered (the tree's liveness), before any window
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._scrape = threading.local()  # the snapshot this thread's exposition reads, while one is rendered

    @contextmanager
    def scrape(self) -> Iterator[None]:
        """One snapshot for a whole exposition: every collector's `snapshot()` on this thread returns it, so the
        families agree with each other and the tree's lock (`known_jobs`) is taken once per scrape, not per
        collector."""
        self._scrape.snapshot = self.snapshot()
        try:
            yield
        finally:
            self._scrape.snapshot = None

    def observe(self, rows: Iterable[Row]) -> None:
        rows = list(rows)
        with self._lock:
            for row in rows:  # a job's first waits come in the same flush as its step_time: flag them first
                if row.key.metric in WAIT_SIGNALS:
                    job = self._jobs.setdefault(row.key.job, Job())
                    if WAIT_SIGNALS.index(row.key.metric) < WAIT_SIGNALS.index(job.signal):
                        job.signal = row.key.metric
            for row in rows:
                job = self._jobs.setdefault(row.key.job, Job())
                if row.key.is_step:
                    self._observe_step(job, row)
                elif row.key.metric == PROGRESS_METRIC:
                    if job.progress is None or row.key.index >= job.progress.index:
                        job.progress = Latest(row.key.index, row.summary, row.expected)
                elif row.key.metric.startswith(HARDWARE_PREFIXES):
                    self._observe_hardware(job, row)

    def _observe_step(self, job: Job, row: Row) -> None:
        metric, step, s = row.key.metric, row.key.index, row.summary
        job.expected = max(job.expected, row.expected)
        seen = job.nonfinite_seen.setdefault(metric, OrderedDict())
        before = seen.get(step, 0)
        if s.nonfinite_count > before:
            job.nonfinite[metric] = job.nonfinite.get(metric, 0) + s.nonfinite_count - before
        seen[step] = s.nonfinite_count
        while len(seen) > MAX_STEPS_REMEMBERED:
            seen.popitem(last=False)
        if row.late:
            job.late_total += 1
        current = job.latest.get(metric)
        if current is None or step >= current.index:
            job.latest[metric] = Latest(step, s, row.expected)
        if row.late:
            return
        if row.expected and len(s.sources) < row.expected:
            job.incomplete_total += 1
        if metric == "step_time":
            job.steps_total += 1
        if metric == job.signal and s.count:
            wait, wait_rank = waited(metric, s)
            job.wait_total += wait
            job.wait_rank_total += wait_rank
        job.last_step = max(job.last_step, step)

    def _observe_hardware(self, job: Job, row: Row) -> None:
        metric = row.key.metric
        family = hardware_family(metric)
        if family is None:
            return
        _, is_counter = family
        if is_counter:
            if row.late:
                return
            added = row.summary.sum if row.summary.count else 0.0
            job.hw_totals[metric] = job.hw_totals.get(metric, 0.0) + added
            for name, (_, members) in AGGREGATES.items():
                if metric in members:
                    job.hw_totals[name] = job.hw_totals.get(name, 0.0) + added
            return
        current = job.hw_latest.get(metric)
        if current is None or row.key.index >= current.index:
            job.hw_latest[metric] = Latest(row.key.index, row.summary, row.expected)

    def forget(self, job: str) -> None:
        """A finished job: its series leave the exposition."""
        with self._lock:
            self._jobs.pop(job, None)

    def snapshot(self) -> Snapshot:
        """Every job as of now; a registered job without windows is taken in (empty), so it is exported from its
        ranks' registration on, not its first window."""
        pinned = getattr(self._scrape, "snapshot", None)
        if pinned is not None:
            return pinned
        registered = [j for j in (self.known_jobs() if self.known_jobs is not None else ())
                      if not j.startswith(HOST_JOB_PREFIX)]
        with self._lock:
            for name in registered:
                self._jobs.setdefault(name, Job())
            return Snapshot([(name, job.copy()) for name, job in sorted(self._jobs.items())], registered)
