"""The root's per-job /metrics families, one small collector per concern (the prometheus_client model: `describe()`
names the families without computing a value, `collect()` builds them from a `JobFigures` snapshot).

`StepFigures` (the panels' per-step figures), `Stragglers` (who the others wait for, and how long), `Ranks`
(world size, liveness, progress), `Hardware` (GPU/NIC/InfiniBand readings and counters), `Events` (open and
opened events per kind) and, fed by callables, `TreeDelivery`, `DetectorErrors` and `StoreStatus`.
`RootMetrics` (collectors/root/metrics.py) registers them on the root's registry. Families that `describe()`
names are exposed (HELP and TYPE) even before any job; `Hardware`'s names come from the probes' metric names, so
it describes only its two fixed aggregates.

Labels are bounded: `job`, `attempt`, `stat` (p50|p90|p99|max|min|mean), `position` (1..5 of the top-k), `kind`
(the event kinds), `state` (alive|stuck|dead), `metric` (metric names, which the root already caps per job);
never a label per rank: ranks are *values* (`..._rank` gauges). Every name and its meaning: docs/metrics.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from collectors.common.attempts import split
from collectors.delivery.node import COUNTER_FIELDS
from collectors.detectors.events import KINDS as EVENT_KINDS
from collectors.detectors.events import EventLog
from collectors.root.job_figures import AGGREGATES, JobFigures, Snapshot, hardware_family, waited
from telemetry.names import WAIT_METRIC, WORK_METRIC
from telemetry.summary import Summary

Family = GaugeMetricFamily | CounterMetricFamily
STATS = ("p50", "p90", "p99", "max", "min", "mean")
TOP_POSITIONS = 5
JA = ("job", "attempt")  # a job's labels: its name and its attempt (docs/restarts.md), never job@attempt
# step metric -> (family name, help); others are exported as telemetry_metric{job,metric,stat}
STEP_METRICS = {
    "step_time": ("telemetry_step_time_seconds", "Step time across ranks, latest finalised step"),
    "loss": ("telemetry_loss", "Training loss across ranks, latest finalised step"),
    "grad_norm": ("telemetry_grad_norm", "Gradient norm across ranks, latest finalised step"),
    "mfu": ("telemetry_mfu_ratio", "Model FLOPs utilisation (0..1) across ranks, latest finalised step"),
    "dataloader_wait": ("telemetry_dataloader_wait_seconds",
                        "Time ranks waited for their data loader, latest finalised step"),
}
DELIVERY_HELP = {
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
    "forensics_dropped": "Captures and rank exits dropped because a tier's forensics queue was full (whole tree).",
    "hardware_events_dropped": "Hardware events (XIDs, lost GPUs) dropped because an agent's GPU probe's event "
                               "buffer was full (whole tree).",
    "reply_streams_cut": "Streams cut because the peer read none of its last acknowledgements; it reconnects and "
                         "resends what is not durable (whole tree).",
    "unheld_releases": "Durability releases of a unit not held (a double release: a bookkeeping error, logged; "
                       "never acknowledged a second time; whole tree).",
    "probe_skipped": "Hardware probe values skipped as forged or corrupt (sysfs counters negative, past 2^62 or not "
                     "decimal digits such as +5 or 1_000; a port state or rate that does not parse or is absurd; an "
                     "operstate outside the kernel's seven), by the agents' NIC probes (whole tree).",
}


@dataclass(frozen=True)
class Spec:
    """One family as `describe()` names it: a counter is exposed with `_total`."""
    name: str
    help: str
    labels: tuple[str, ...] = JA
    counter: bool = False

    def family(self) -> Family:
        kind = CounterMetricFamily if self.counter else GaugeMetricFamily
        return kind(self.name, self.help, labels=list(self.labels))


def ids(scoped: str) -> list[str]:
    """The `job` and `attempt` label values of a job as the tree names it (job@attempt; attempt "0": none)."""
    job, attempt = split(scoped)
    return [job, str(attempt)]


def add(family: Family, labels: list[str], value: float | int | None) -> None:
    """A sample, unless there is no value (None or NaN: Prometheus would keep NaN as a value)."""
    if value is None:
        return
    value = float(value)
    if math.isnan(value):
        return
    family.add_metric(labels, value)


def stats(summary: Summary) -> dict[str, float]:
    p50, p90, p99 = summary.quantiles([0.5, 0.9, 0.99])
    return {"p50": p50, "p90": p90, "p99": p99, "max": summary.max, "min": summary.min, "mean": summary.mean}


class Declared(Collector):
    """A collector of fixed families (`SPECS`): `describe()` returns them empty; `collect()` has `fill` add the
    samples to fresh ones, keyed by name."""

    SPECS: tuple[Spec, ...] = ()

    def describe(self) -> Iterable[Family]:
        return [spec.family() for spec in self.SPECS]

    def collect(self) -> Iterable[Family]:
        families = {spec.name: spec.family() for spec in self.SPECS}
        self.fill(families)
        return list(families.values())

    def fill(self, families: dict[str, Family]) -> None:
        raise NotImplementedError


class StepFigures(Declared):
    """The panels' figures of each job's latest finalised step (per stat), its step counters and its late,
    incomplete and non-finite windows."""

    SPECS = (*(Spec(name, doc + " (stat: p50, p90, p99, max, min, mean).", (*JA, "stat"))
               for name, doc in STEP_METRICS.values()),
             Spec("telemetry_last_step", "Latest finalised step."),
             Spec("telemetry_steps", "Step windows of step_time finalised.", counter=True),
             Spec("telemetry_step_ranks_missing", "Ranks missing from the latest finalised step_time window."),
             Spec("telemetry_windows_incomplete", "Step windows finalised with ranks missing (deadline passed).",
                  counter=True),
             Spec("telemetry_windows_late", "Late deltas merged into step windows after finalising.", counter=True),
             Spec("telemetry_nonfinite_values", "NaN/Inf values logged, per metric.", (*JA, "metric"), counter=True),
             Spec("telemetry_metric", "Other step metrics across ranks, latest finalised step.",
                  (*JA, "metric", "stat")))

    def __init__(self, figures: JobFigures) -> None:
        self.figures = figures

    def fill(self, families: dict[str, Family]) -> None:
        for name, job in self.figures.snapshot().jobs:
            labels = ids(name)
            for metric, entry in job.latest.items():
                if not entry.summary.count:
                    continue
                values = stats(entry.summary)
                if metric in STEP_METRICS:
                    for stat in STATS:
                        add(families[STEP_METRICS[metric][0]], [*labels, stat], values[stat])
                else:
                    for stat in STATS:
                        add(families["telemetry_metric"], [*labels, metric, stat], values[stat])
            step_time = job.latest.get("step_time")
            if step_time is not None and step_time.summary.count:
                missing = max(0, step_time.expected - len(step_time.summary.sources))
                add(families["telemetry_step_ranks_missing"], labels, missing)
            if job.training:
                add(families["telemetry_steps"], labels, job.steps_total)
                add(families["telemetry_windows_incomplete"], labels, job.incomplete_total)
                add(families["telemetry_windows_late"], labels, job.late_total)
                for metric in sorted(set(job.nonfinite) | {"loss", "grad_norm"}):
                    add(families["telemetry_nonfinite_values"], [*labels, metric], job.nonfinite.get(metric, 0))
            if job.last_step >= 0:
                add(families["telemetry_last_step"], labels, job.last_step)


class Stragglers(Declared):
    """Who the others wait for in each job's latest finalised step (read from the job's wait signal:
    collective_wait, else collective_arrival, else step_time; job_figures.WAIT_SIGNALS), the slowest five, and
    the waiting it cost, per step and summed."""

    SPECS = (
        Spec("telemetry_step_time_slowest_rank", "Rank the others wait for in the latest finalised step: the least "
             "collective_wait when the job logs it, else the largest collective_arrival, else the largest step "
             "time."),
        Spec("telemetry_step_time_top_seconds", "The 5 largest work_time (when the job logs collective_wait), else "
             "collective_arrival, else step time values of the latest finalised step (position 1 = slowest).",
             (*JA, "position")),
        Spec("telemetry_step_time_top_rank", "Rank at each position of telemetry_step_time_top_seconds.",
             (*JA, "position")),
        Spec("telemetry_step_collective_wait_seconds", "Seconds the median rank waits for the slowest in the latest "
             "finalised step: p50 minus min of collective_wait, else max minus p50 of collective_arrival (else "
             "step_time)."),
        Spec("telemetry_collective_wait_seconds", "Sum over finalised steps of the median rank's wait for the "
             "slowest (as telemetry_step_collective_wait_seconds).", counter=True),
        Spec("telemetry_collective_wait_rank_seconds", "Sum over finalised steps of every rank's waiting for the "
             "slowest, added up: sum - count x min of collective_wait, else count x max - sum of collective_arrival "
             "(else step_time).", counter=True))

    def __init__(self, figures: JobFigures) -> None:
        self.figures = figures

    def fill(self, families: dict[str, Family]) -> None:
        for name, job in self.figures.snapshot().jobs:
            labels = ids(name)
            signal = job.latest.get(job.signal)
            if signal is not None and signal.summary.count:
                s = signal.summary
                waits = job.signal == WAIT_METRIC  # the slowest waits least; its work_time is the largest
                add(families["telemetry_step_time_slowest_rank"], labels, s.argmin if waits else s.argmax)
                ranked = job.latest.get(WORK_METRIC) if waits else signal
                top = ranked.summary.top(min(TOP_POSITIONS, ranked.summary.k)) if ranked is not None else []
                for position, (value, rank) in enumerate(top, start=1):
                    add(families["telemetry_step_time_top_seconds"], [*labels, str(position)], value)
                    add(families["telemetry_step_time_top_rank"], [*labels, str(position)], rank)
                add(families["telemetry_step_collective_wait_seconds"], labels, waited(job.signal, s)[0])
            if job.training:
                add(families["telemetry_collective_wait_seconds"], labels, job.wait_total)
                add(families["telemetry_collective_wait_rank_seconds"], labels, job.wait_rank_total)


class Ranks(Declared):
    """Each job's world size, its ranks by liveness as the agents see them (`liveness(job)`: world_size, alive,
    stuck, dead), and how far its ranks are (the progress heartbeats)."""

    SPECS = (Spec("telemetry_world_size", "Ranks in the job."),
             Spec("telemetry_ranks_reporting", "Ranks whose heartbeat reached the root in the latest finalised "
                  "second (progress bucket)."),
             Spec("telemetry_ranks", "Ranks by liveness as the agents see them.", (*JA, "state")),
             Spec("telemetry_progress_min_step", "Lowest current step any rank reported in the latest second."),
             Spec("telemetry_progress_max_step", "Highest current step any rank reported in the latest second."))

    def __init__(self, figures: JobFigures, liveness: Callable[[str], dict] | None) -> None:
        self.figures = figures
        self.liveness = liveness

    def fill(self, families: dict[str, Family]) -> None:
        snapshot = self.figures.snapshot()
        registered = set(snapshot.registered)
        for name, job in snapshot.jobs:
            labels = ids(name)
            world = job.expected
            live = self._live(name) if job.training or job.progress is not None or name in registered else {}
            if live:
                world = max(world, int(live.get("world_size") or 0))
                for state in ("alive", "stuck", "dead"):
                    add(families["telemetry_ranks"], [*labels, state], live.get(state, 0))
            if world:
                add(families["telemetry_world_size"], labels, world)
            step_time = job.latest.get("step_time")
            if job.progress is not None and job.progress.summary.count:
                p = job.progress.summary
                add(families["telemetry_ranks_reporting"], labels, len(p.sources))
                add(families["telemetry_progress_min_step"], labels, p.min)
                add(families["telemetry_progress_max_step"], labels, p.max)
            elif step_time is not None:
                add(families["telemetry_ranks_reporting"], labels, len(step_time.summary.sources))

    def _live(self, job: str) -> dict:
        if self.liveness is None:
            return {}
        try:
            return self.liveness(job) or {}
        except Exception:
            return {}


class Hardware(Collector):
    """GPU, NIC and InfiniBand readings (gauges by stat: max, mean, min, latest second) and counters (the probes'
    deltas summed since the root started, plus the `AGGREGATES` over several counters), per job and per host's
    pseudo-job. A family exists once a source reports it: its name is the reading's (`hardware_family`)."""

    def __init__(self, figures: JobFigures) -> None:
        self.figures = figures

    def describe(self) -> Iterable[Family]:
        return [CounterMetricFamily(name, doc, labels=list(JA)) for name, (doc, _) in AGGREGATES.items()]

    def collect(self) -> Iterable[Family]:
        families: dict[str, Family] = {}  # a counter is keyed by its exposed name (_total), apart from a gauge

        def family(name: str, doc: str, counter: bool, labels: tuple[str, ...]) -> Family:
            key = name + "_total" if counter else name
            if key not in families:
                families[key] = Spec(name, doc, labels, counter).family()
            return families[key]

        for name, job in self.figures.snapshot().jobs:
            labels = ids(name)
            for metric, entry in sorted(job.hw_latest.items()):
                found = hardware_family(metric)
                s = entry.summary
                if found is None or not s.count:
                    continue
                gauge = family(found[0], f"Hardware reading {metric} across its sources (ranks), latest second "
                                         "(stat: max, mean, min).", False, (*JA, "stat"))
                for stat, value in (("max", s.max), ("mean", s.mean), ("min", s.min)):
                    add(gauge, [*labels, stat], value)
            for metric, total in sorted(job.hw_totals.items()):
                if metric in AGGREGATES:
                    add(family(metric, AGGREGATES[metric][0], True, JA), labels, total)
                    continue
                found = hardware_family(metric)
                if found is None:
                    continue
                add(family(found[0], f"Increase of the hardware counter {metric[:-len('_delta')]} summed over its "
                                     "sources (ranks, or a host's devices) since the root started.", True, JA),
                    labels, total)
        return list(families.values())


class Events(Declared):
    """Events open now and opened so far, per job and kind (every kind, at 0 too, so increase() sees 0 -> 1), for
    the live jobs only and any with an event still open: a finished job's series go with it, so the exposition does
    not grow with the number of jobs ever run (their history is in the API)."""

    SPECS = (Spec("telemetry_events_active", "Events open now.", (*JA, "kind")),
             Spec("telemetry_events", "Events opened.", (*JA, "kind"), counter=True))

    def __init__(self, figures: JobFigures, events: EventLog | None) -> None:
        self.figures = figures
        self.events = events  # None: the families stay empty

    def fill(self, families: dict[str, Family]) -> None:
        if self.events is None:
            return
        snapshot: Snapshot = self.figures.snapshot()
        active = self.events.active_counts()
        totals = self.events.totals()
        training = {name for name, job in snapshot.jobs if job.training or job.progress is not None}
        for name in sorted(training | set(snapshot.registered) | {job for job, _ in active}):
            labels = ids(name)
            for kind in EVENT_KINDS:
                add(families["telemetry_events_active"], [*labels, kind], active.get((name, kind), 0))
                add(families["telemetry_events"], [*labels, kind], totals.get((name, kind), 0))


class TreeDelivery(Declared):
    """The whole tree's delivery counters (`Node.subtree_counters`), one family each (telemetry_delivery_*)."""

    SPECS = tuple(Spec(f"telemetry_delivery_{name}", DELIVERY_HELP[name], (), counter=True) for name in COUNTER_FIELDS)

    def __init__(self, counters: Callable[[], dict[str, int]]) -> None:
        self.counters = counters

    def fill(self, families: dict[str, Family]) -> None:
        values = self.counters()
        for name in COUNTER_FIELDS:
            add(families[f"telemetry_delivery_{name}"], [], values.get(name, 0))


class DetectorErrors(Declared):
    SPECS = (Spec("telemetry_detector_errors", "Exceptions raised inside detectors (logged).", (), counter=True),)

    def __init__(self, errors: Callable[[], int]) -> None:
        self.errors = errors

    def fill(self, families: dict[str, Family]) -> None:
        add(families["telemetry_detector_errors"], [], self.errors())


class StoreStatus(Declared):
    """The root's SQLite store: writable, failed commits, files lost, bytes on disk (`store()` -> writable,
    write_failures, files_lost and, where known, bytes)."""

    SPECS = (Spec("telemetry_store_writable", "1 while the root's last commit to its SQLite store succeeded; 0 while "
                  "commits fail (nothing is acknowledged durable meanwhile).", ()),
             Spec("telemetry_store_write_failures", "Commits to the root's store that failed (each is retried at the "
                  "next flush).", (), counter=True),
             Spec("telemetry_store_files_lost", "Times the root found its store's file deleted or replaced and "
                  "reopened it.", (), counter=True),
             Spec("telemetry_store_bytes", "Bytes of the root's SQLite store on disk (file, write-ahead log and "
                  "index), bounded by its retention (--retention).", ()))
    FIELDS = ("writable", "write_failures", "files_lost", "bytes")

    def __init__(self, store: Callable[[], dict[str, int]]) -> None:
        self.store = store

    def collect(self) -> Iterable[Family]:
        status = self.store()
        families = []
        for spec, field in zip(self.SPECS, self.FIELDS):
            if field == "bytes" and field not in status:  # a store that cannot say: no family rather than 0
                continue
            family = spec.family()
            add(family, [], status[field])
            families.append(family)
        return families
