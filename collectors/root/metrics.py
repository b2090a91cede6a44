"""The root's Prometheus exposition (`/metrics`): the panels' figures per job, events, delivery, hardware.

One `CollectorRegistry` per root (never the process-global one), holding one custom collector whose
`collect()` builds every family from the latest finalised windows kept in memory (no database read
per scrape). Labels are bounded: `job`, `stat` (p50|p90|p99|max|min|mean), `position` (1..5 of the
top-k), `kind` (the event kinds), `state` (alive|stuck|dead), `metric` (metric names, which the root
already caps per job); never a label per rank: ranks are *values* (`..._rank` gauges).

Every name and its meaning: docs/metrics.md. Prometheus must scrape this with `honor_labels: true`,
or its own `job` target label renames ours to `exported_job` (docs/metrics.md).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from collectors.common.attempts import split
from collectors.common.rows import Row
from collectors.delivery.node import COUNTER_FIELDS
from collectors.detectors.events import KINDS as EVENT_KINDS
from telemetry.names import ARRIVAL_METRIC, HOST_JOB_PREFIX, PROGRESS_METRIC, WAIT_METRIC, WORK_METRIC
from telemetry.summary import Summary

STATS = ("p50", "p90", "p99", "max", "min", "mean")
TOP_POSITIONS = 5

# Who the others wait for, the first signal a job logs: collective_wait (seconds each rank had a collective
# outstanding, logged by the SDK under torch.distributed, telemetry.torch.waits: the rank the others wait for waits
# least, whatever the step's collectives; its work_time is the largest), collective_arrival (each rank's own work
# between two synchronisations: the slowest arrives last), else step_time (under synchronous collectives every
# rank's step_time is the slowest rank's, so it names nobody).
WAIT_SIGNALS = (WAIT_METRIC, ARRIVAL_METRIC, "step_time")
# step metric -> (family name, help); others are exported as telemetry_metric{job,metric,stat}
STEP_METRICS = {
    "step_time": ("telemetry_step_time_seconds", "Step time across ranks, latest finalised step"),
    "loss": ("telemetry_loss", "Training loss across ranks, latest finalised step"),
    "grad_norm": ("telemetry_grad_norm", "Gradient norm across ranks, latest finalised step"),
    "mfu": ("telemetry_mfu_ratio", "Model FLOPs utilisation (0..1) across ranks, latest finalised step"),
    "dataloader_wait": ("telemetry_dataloader_wait_seconds",
                        "Time ranks waited for their data loader, latest finalised step"),
}
HARDWARE_PREFIXES = ("gpu.", "nic.", "ib.")
HW_STATS = ("max", "mean", "min")
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
JA = ["job", "attempt"]  # a job's labels: its name and its attempt (docs/restarts.md), never job@attempt
MAX_STEPS_REMEMBERED = 512  # per (job, metric), for counting late non-finite values once


def _stats(summary: Summary) -> dict[str, float]:
    p50, p90, p99 = summary.quantiles([0.5, 0.9, 0.99])
    return {"p50": p50, "p90": p90, "p99": p99, "max": summary.max, "min": summary.min, "mean": summary.mean}


def _waited(signal: str, s: Summary) -> tuple[float, float]:
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
class _Latest:
    index: int
    summary: Summary
    expected: int


@dataclass
class _Job:
    latest: dict[str, _Latest] = field(default_factory=dict)  # step metrics
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
    progress: _Latest | None = None
    hw_latest: dict[str, _Latest] = field(default_factory=dict)
    hw_totals: dict[str, float] = field(default_factory=dict)
    hw_seen: set = field(default_factory=set)


class RootMetrics:
    """Feed it finalised rows (`observe`), scrape it (`render`). Thread-safe."""

    def __init__(self, events=None, liveness: Callable[[str], dict] | None = None,
                 counters: Callable[[], dict[str, int]] | None = None,
                 detector_errors: Callable[[], int] | None = None,
                 store: Callable[[], dict[str, int]] | None = None,
                 jobs: Callable[[], Iterable[str]] | None = None) -> None:
        self.events = events
        self.liveness = liveness
        self.known_jobs = jobs  # jobs whose ranks registered (the tree's liveness), before any window
        self.counters = counters
        self.detector_errors = detector_errors
        self.store = store
        self._lock = threading.Lock()
        self._jobs: dict[str, _Job] = {}
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)

    # ------------------------------------------------------------------ intake
    def observe(self, rows: Iterable[Row]) -> None:
        rows = list(rows)
        with self._lock:
            for row in rows:  # a job's first waits come in the same flush as its step_time: flag them first
                if row.key.metric in WAIT_SIGNALS:
                    job = self._jobs.setdefault(row.key.job, _Job())
                    if WAIT_SIGNALS.index(row.key.metric) < WAIT_SIGNALS.index(job.signal):
                        job.signal = row.key.metric
            for row in rows:
                job = self._jobs.setdefault(row.key.job, _Job())
                if row.key.is_step:
                    self._observe_step(job, row)
                elif row.key.metric == PROGRESS_METRIC:
                    if job.progress is None or row.key.index >= job.progress.index:
                        job.progress = _Latest(row.key.index, row.summary, row.expected)
                elif row.key.metric.startswith(HARDWARE_PREFIXES):
                    self._observe_hardware(job, row)

    def _observe_step(self, job: _Job, row: Row) -> None:
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
            job.latest[metric] = _Latest(step, s, row.expected)
        if row.late:
            return
        if row.expected and len(s.sources) < row.expected:
            job.incomplete_total += 1
        if metric == "step_time":
            job.steps_total += 1
        if metric == job.signal and s.count:
            wait, wait_rank = _waited(metric, s)
            job.wait_total += wait
            job.wait_rank_total += wait_rank
        job.last_step = max(job.last_step, step)

    def _observe_hardware(self, job: _Job, row: Row) -> None:
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
            job.hw_latest[metric] = _Latest(row.key.index, row.summary, row.expected)

    def forget(self, job: str) -> None:
        """A finished job: its series leave the exposition."""
        with self._lock:
            self._jobs.pop(job, None)

    # ------------------------------------------------------------------ exposition
    def render(self) -> tuple[str, bytes]:
        """(content type, body) for GET /metrics: the classic text format 0.0.4, which every Prometheus
        reads (our names never need the 1.0.0 format's escaping)."""
        return CONTENT_TYPE_PLAIN_0_0_4, generate_latest(self.registry)

    def collect(self) -> Iterable[Metric]:
        registered = [j for j in (self.known_jobs() if self.known_jobs is not None else ())
                      if not j.startswith(HOST_JOB_PREFIX)]
        with self._lock:
            for name in registered:  # a job is exported from its ranks' registration on, not its first window
                self._jobs.setdefault(name, _Job())
            jobs = {name: job for name, job in self._jobs.items()}
            snapshot = [(name, job, dict(job.latest), job.progress, dict(job.hw_latest), dict(job.hw_totals),
                         dict(job.nonfinite)) for name, job in sorted(jobs.items())]
        families: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}

        def gauge(name: str, doc: str, labels: list[str]) -> GaugeMetricFamily:
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, doc, labels=labels)
            assert isinstance(family, GaugeMetricFamily)
            return family

        def counter(name: str, doc: str, labels: list[str]) -> CounterMetricFamily:
            key = name + "_total"  # exposed with _total; kept apart from a gauge of the bare name
            family = families.get(key)
            if family is None:
                family = families[key] = CounterMetricFamily(name, doc, labels=labels)
            assert isinstance(family, CounterMetricFamily)
            return family

        # declared up front so the families exist (with HELP/TYPE) even before any job
        for name, doc in STEP_METRICS.values():
            gauge(name, doc + " (stat: p50, p90, p99, max, min, mean).", [*JA, "stat"])
        gauge("telemetry_step_time_slowest_rank", "Rank the others wait for in the latest finalised step: the "
              "least collective_wait when the job logs it, else the largest collective_arrival, else the largest "
              "step time.", JA)
        gauge("telemetry_step_time_top_seconds", "The 5 largest work_time (when the job logs collective_wait), "
              "else collective_arrival, else step time values of the latest finalised step (position 1 = slowest).",
              [*JA, "position"])
        gauge("telemetry_step_time_top_rank", "Rank at each position of telemetry_step_time_top_seconds.",
              [*JA, "position"])
        gauge("telemetry_step_collective_wait_seconds", "Seconds the median rank waits for the slowest in the "
              "latest finalised step: p50 minus min of collective_wait, else max minus p50 of collective_arrival "
              "(else step_time).", JA)
        counter("telemetry_collective_wait_seconds", "Sum over finalised steps of the median rank's wait for the "
                "slowest (as telemetry_step_collective_wait_seconds).", JA)
        counter("telemetry_collective_wait_rank_seconds", "Sum over finalised steps of every rank's waiting for "
                "the slowest, added up: sum - count x min of collective_wait, else count x max - sum of "
                "collective_arrival (else step_time).", JA)
        gauge("telemetry_last_step", "Latest finalised step.", JA)
        counter("telemetry_steps", "Step windows of step_time finalised.", JA)
        gauge("telemetry_world_size", "Ranks in the job.", JA)
        gauge("telemetry_ranks_reporting", "Ranks whose heartbeat reached the root in the latest finalised "
              "second (progress bucket).", JA)
        gauge("telemetry_step_ranks_missing", "Ranks missing from the latest finalised step_time window.", JA)
        gauge("telemetry_ranks", "Ranks by liveness as the agents see them.", [*JA, "state"])
        gauge("telemetry_progress_min_step", "Lowest current step any rank reported in the latest second.", JA)
        gauge("telemetry_progress_max_step", "Highest current step any rank reported in the latest second.",
              JA)
        counter("telemetry_windows_incomplete", "Step windows finalised with ranks missing (deadline passed).",
                JA)
        counter("telemetry_windows_late", "Late deltas merged into step windows after finalising.", JA)
        counter("telemetry_nonfinite_values", "NaN/Inf values logged, per metric.", [*JA, "metric"])
        gauge("telemetry_metric", "Other step metrics across ranks, latest finalised step.", [*JA, "metric", "stat"])
        gauge("telemetry_events_active", "Events open now.", [*JA, "kind"])
        counter("telemetry_events", "Events opened.", [*JA, "kind"])

        for job_name, job, latest, progress, hw_latest, hw_totals, nonfinite in snapshot:
            ids = _ids(job_name)
            for metric, entry in latest.items():
                s = entry.summary
                if not s.count:
                    continue
                stats = _stats(s)
                if metric in STEP_METRICS:
                    family = gauge(STEP_METRICS[metric][0], "", [*JA, "stat"])
                    for stat in STATS:
                        _add(family, [*ids, stat], stats[stat])
                else:
                    family = gauge("telemetry_metric", "", [*JA, "metric", "stat"])
                    for stat in STATS:
                        _add(family, [*ids, metric, stat], stats[stat])
            step_time = latest.get("step_time")
            signal = latest.get(job.signal)  # who the others wait for (see WAIT_SIGNALS)
            if signal is not None and signal.summary.count:
                s = signal.summary
                waits = job.signal == WAIT_METRIC  # the slowest waits least; its work_time is the largest
                _add(gauge("telemetry_step_time_slowest_rank", "", JA), ids, s.argmin if waits else s.argmax)
                ranked = latest.get(WORK_METRIC) if waits else signal
                for position, (value, rank) in enumerate(ranked.summary.top(min(TOP_POSITIONS, ranked.summary.k))
                                                         if ranked is not None else [], start=1):
                    _add(gauge("telemetry_step_time_top_seconds", "", [*JA, "position"]), [*ids, str(position)],
                         value)
                    _add(gauge("telemetry_step_time_top_rank", "", [*JA, "position"]), [*ids, str(position)],
                         rank)
                _add(gauge("telemetry_step_collective_wait_seconds", "", JA), ids, _waited(job.signal, s)[0])
            if step_time is not None and step_time.summary.count:
                missing = max(0, step_time.expected - len(step_time.summary.sources))
                _add(gauge("telemetry_step_ranks_missing", "", JA), ids, missing)
            training = job.last_step >= 0 or bool(latest)  # a job with step windows (not a host's pseudo-job)
            if training:
                _add(counter("telemetry_collective_wait_seconds", "", JA), ids, job.wait_total)
                _add(counter("telemetry_collective_wait_rank_seconds", "", JA), ids, job.wait_rank_total)
                _add(counter("telemetry_steps", "", JA), ids, job.steps_total)
                _add(counter("telemetry_windows_incomplete", "", JA), ids, job.incomplete_total)
                _add(counter("telemetry_windows_late", "", JA), ids, job.late_total)
                for metric in sorted(set(nonfinite) | {"loss", "grad_norm"}):
                    _add(counter("telemetry_nonfinite_values", "", [*JA, "metric"]), [*ids, metric],
                         nonfinite.get(metric, 0))
            if job.last_step >= 0:
                _add(gauge("telemetry_last_step", "", JA), ids, job.last_step)
            world = job.expected
            live = self._live(job_name) if training or progress is not None or job_name in registered else {}
            if live:
                world = max(world, int(live.get("world_size") or 0))
                for state in ("alive", "stuck", "dead"):
                    _add(gauge("telemetry_ranks", "", [*JA, "state"]), [*ids, state], live.get(state, 0))
            if world:
                _add(gauge("telemetry_world_size", "", JA), ids, world)
            if progress is not None and progress.summary.count:
                p = progress.summary
                _add(gauge("telemetry_ranks_reporting", "", JA), ids, len(p.sources))
                _add(gauge("telemetry_progress_min_step", "", JA), ids, p.min)
                _add(gauge("telemetry_progress_max_step", "", JA), ids, p.max)
            elif step_time is not None:
                _add(gauge("telemetry_ranks_reporting", "", JA), ids, len(step_time.summary.sources))
            for metric, entry in sorted(hw_latest.items()):
                found = hardware_family(metric)
                s = entry.summary
                if found is None or not s.count:
                    continue
                name = found[0]
                family = gauge(name, f"Hardware reading {metric} across its sources (ranks), latest second "
                                     "(stat: max, mean, min).", [*JA, "stat"])
                for stat, value in (("max", s.max), ("mean", s.mean), ("min", s.min)):
                    _add(family, [*ids, stat], value)
            for metric, total in sorted(hw_totals.items()):
                if metric in AGGREGATES:
                    _add(counter(metric, AGGREGATES[metric][0], JA), ids, total)
                    continue
                found = hardware_family(metric)
                if found is None:
                    continue
                _add(counter(found[0], f"Increase of the hardware counter {metric[:-len('_delta')]} summed over "
                                   "its sources (ranks, or a host's devices) since the root started.", JA),
                     ids, total)

        if self.events is not None:
            active = self.events.active_counts()
            totals = self.events.totals()
            training_jobs = {name for name, job in jobs.items()
                             if job.last_step >= 0 or job.latest or job.progress is not None} | set(registered)
            # Live jobs only (and any with an event still open): a finished job's series go with it, so the
            # exposition does not grow with the number of jobs ever run (their history is in the API).
            live_events = {job for job, _ in active}
            for job_name in sorted(training_jobs | live_events):
                ids = _ids(job_name)
                for kind in EVENT_KINDS:
                    _add(gauge("telemetry_events_active", "", [*JA, "kind"]), [*ids, kind],
                         active.get((job_name, kind), 0))
                    _add(counter("telemetry_events", "", [*JA, "kind"]), [*ids, kind],
                         totals.get((job_name, kind), 0))
        if self.counters is not None:
            values = self.counters()
            for name in COUNTER_FIELDS:
                _add(counter(f"telemetry_delivery_{name}", _DELIVERY_HELP[name], []), [], values.get(name, 0))
        if self.detector_errors is not None:
            _add(counter("telemetry_detector_errors", "Exceptions raised inside detectors (logged).", []), [],
                 self.detector_errors())
        if self.store is not None:
            status = self.store()
            _add(gauge("telemetry_store_writable", "1 while the root's last commit to its SQLite store succeeded; "
                       "0 while commits fail (nothing is acknowledged durable meanwhile).", []), [],
                 status["writable"])
            _add(counter("telemetry_store_write_failures", "Commits to the root's store that failed (each is "
                         "retried at the next flush).", []), [], status["write_failures"])
            _add(counter("telemetry_store_files_lost", "Times the root found its store's file deleted or replaced "
                         "and reopened it.", []), [], status["files_lost"])
            if "bytes" in status:
                _add(gauge("telemetry_store_bytes", "Bytes of the root's SQLite store on disk (file, write-ahead "
                           "log and index), bounded by its retention (--retention).", []), [], status["bytes"])
        yield from families.values()

    def _live(self, job: str) -> dict:
        if self.liveness is None:
            return {}
        try:
            return self.liveness(job) or {}
        except Exception:
            return {}


_DELIVERY_HELP = {
    "sdk_dropped": "Values SDKs dropped because their backlog was full (whole tree).",
    "dropped_windows": "Windows dropped because a window table or outbox was full (whole tree).",
    "rejected_overlaps": "Parts refused because their sources overlapped partly (whole tree).",
    "duplicates": "Duplicate deliveries absorbed (resends after a crash or reconnect; whole tree).",
    "resent": "Units resent after a reconnect or restart (whole tree).",
    "late": "Late deltas forwarded or merged after a window was sealed (whole tree).",
    "bad_inputs": "Inputs refused as malformed or out of range (whole tree).",
    "refused_streams": "Streams refused because a server's cap (--max-ranks, --max-children) was reached "
                       "(whole tree).",
    "late_dropped": "Values ranks logged into a step after closing it, dropped by their agents (whole tree).",
}


def _ids(scoped: str) -> list[str]:
    """The `job` and `attempt` label values of a job as the tree names it (job@attempt; attempt "0": none)."""
    job, attempt = split(scoped)
    return [job, str(attempt)]


def _add(family: GaugeMetricFamily | CounterMetricFamily, labels: list[str], value: float | int | None) -> None:
    if value is None:
        return
    value = float(value)
    if math.isnan(value):
        return
    family.add_metric(labels, value)
