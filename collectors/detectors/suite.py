"""All detectors together: their configuration, and the dispatcher the root feeds finalised rows to.

    config = DetectorsConfig.from_mapping({"straggler": {"factor": 2.0}, "hang": {"grace_s": 1.0}})
    suite = Detectors(EventLog(db_path), config, context)
    suite.on_rows(rows)        # Finaliser.on_finalised: every finalised window (flush thread)
    suite.check(live)          # periodically, with {job: RootServer.liveness(job)} (hang, no progress)

Configuration is a `DetectorsConfig` object, built from a mapping (`from_mapping`) or from a .toml/.json file or
inline JSON (`load`: what `telemetry collector --detectors` reads); every key is optional and unknown keys are
refused. The root is given it in its `RootConfig.detectors` (root/server.py).
"""

from __future__ import annotations

import json
import logging
import threading
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from collectors.common.attempts import split
from collectors.common.rows import Row
from collectors.detectors.base import Context, Detector, from_mapping
from collectors.detectors.collective_mismatch import CollectiveMismatchConfig, CollectiveMismatchDetector
from collectors.detectors.cpu_starved import CpuStarvedConfig, CpuStarvedDetector
from collectors.detectors.crash import CrashConfig, CrashDetector, record_of
from collectors.detectors.dataloader_stall import DataloaderStallConfig, DataloaderStallDetector
from collectors.detectors.events import EventLog
from collectors.detectors.hang import HangConfig, HangDetector
from collectors.detectors.hardware import HardwareConfig, HardwareDetector
from collectors.detectors.loss_spike import LossSpikeConfig, LossSpikeDetector
from collectors.detectors.mfu_drop import MfuDropConfig, MfuDropDetector
from collectors.detectors.nonfinite import NonfiniteConfig, NonfiniteDetector
from collectors.detectors.settings import RuntimeSettings
from collectors.detectors.sinks import SinkConfig
from collectors.detectors.straggler import StragglerConfig, StragglerDetector
from telemetry.names import ONCPU_METRIC, RUNQUEUE_METRIC

STEP_TIME_METRIC = "step_time"

# A step's rows other rows of it are judged with, in this order: its step_time (the length the straggler rule reads
# the step's waits and run-queue waits against), its on-CPU times, its run-queue waits.
_FIRST = {STEP_TIME_METRIC: 0, ONCPU_METRIC: 1, RUNQUEUE_METRIC: 2}

log = logging.getLogger(__name__)

@dataclass
class DetectorsConfig:
    straggler: StragglerConfig = field(default_factory=StragglerConfig)
    loss_spike: LossSpikeConfig = field(default_factory=LossSpikeConfig)
    nonfinite: NonfiniteConfig = field(default_factory=NonfiniteConfig)
    hang: HangConfig = field(default_factory=HangConfig)
    mfu_drop: MfuDropConfig = field(default_factory=MfuDropConfig)
    dataloader_stall: DataloaderStallConfig = field(default_factory=DataloaderStallConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    collective_mismatch: CollectiveMismatchConfig = field(default_factory=CollectiveMismatchConfig)
    crash: CrashConfig = field(default_factory=CrashConfig)
    cpu_starved: CpuStarvedConfig = field(default_factory=CpuStarvedConfig)
    sinks: SinkConfig = field(default_factory=SinkConfig)

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> DetectorsConfig:
        data = dict(data or {})
        sections = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(sections))
        if unknown:
            raise ValueError(f"detectors config: unknown section(s) {', '.join(unknown)}; "
                             f"known: {', '.join(sections)}")
        defaults = cls()  # each section's class, from its default (the annotations are strings here)
        built = {name: from_mapping(type(getattr(defaults, name)), data.get(name)) for name in sections}
        return cls(**built)

    @classmethod
    def load(cls, source: str | Path) -> DetectorsConfig:
        """From a .toml or .json file, or inline JSON text."""
        text = str(source).strip()
        if text.startswith("{"):
            return cls.from_mapping(json.loads(text))
        path = Path(text)
        raw = path.read_text()
        data = tomllib.loads(raw) if path.suffix == ".toml" else json.loads(raw)
        return cls.from_mapping(data)


# Every detector by its section's name, in the order a row is offered to them.
BUILDERS: dict[str, Any] = {
    "straggler": StragglerDetector, "loss_spike": LossSpikeDetector, "nonfinite": NonfiniteDetector,
    "mfu_drop": MfuDropDetector, "dataloader_stall": DataloaderStallDetector, "hardware": HardwareDetector,
    "hang": HangDetector, "collective_mismatch": CollectiveMismatchDetector, "crash": CrashDetector,
    "cpu_starved": CpuStarvedDetector,
}


class NotedEvents:
    """The event log as one detector instance sees it: every event it raises records the runtime overrides the
    instance runs under (`detail.settings`, settings.py); everything else is the log's."""

    def __init__(self, events: EventLog, note: dict[str, Any]) -> None:
        self._events = events
        self._note = note

    def raise_(self, kind: str, job: str, **kwargs: Any) -> Any:
        kwargs["detail"] = {**(kwargs.get("detail") or {}), "settings": self._note}
        return self._events.raise_(kind, job, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._events, name)


class Detectors:
    """Routes finalised rows to the detectors that want them; one lock around all detector state.

    Settings (docs/detectors.md, settings.py): every job runs with the start-up `config` and the all-jobs
    override, through one shared instance of each detector; a job with an override of its own that changes a
    detector's section gets its own instance of that detector (the others stay shared). `apply_settings()`
    after a change rebuilds only the instances whose section changed (the rest keep their state); a job moved
    to another instance starts that detector's state afresh, and a detector switched off closes the job's open
    events of its kind.

    Lock order: the caller of `on_rows` may hold the node's lock (the flush thread does); `check` takes
    the liveness views *before* it is called, so this lock is never held while asking for the node's.
    """

    def __init__(self, events: EventLog, config: DetectorsConfig | None = None,
                 context: Context | None = None, settings: RuntimeSettings | None = None) -> None:
        self.base = config or DetectorsConfig()  # the start-up configuration
        self.settings = settings or RuntimeSettings(None)
        self.events = events
        self.context = context or Context()
        self.lock = threading.Lock()
        self.errors = 0
        self.config = self.base  # the all-jobs configuration in force (start-up + all-jobs override)
        self.shared: dict[str, Detector | None] = {}
        self.own: dict[str, dict[str, Detector | None]] = {}   # job name -> section -> its own instance
        self.own_config: dict[str, DetectorsConfig] = {}
        self.seen: set[str] = set()  # the jobs (scoped names) rows were routed for
        # What each finalised row is dispatched to, built by _rebuild (not per row): the shared instances
        # switched on, and for each job with an override of its own, its instances
        self.detectors: list[Detector] = []
        self._dispatch: dict[str, list[Detector]] = {}
        with self.lock:
            self._rebuild()

    # ----------------------------------------------------------------- instances
    @property
    def crash(self) -> CrashDetector | None:
        return self.shared.get("crash")  # type: ignore[return-value]  # never overridden (settings.py)

    def _build(self, section: str, config: Any, job: str | None) -> Detector | None:
        if not config.enabled:
            return None
        note = self.settings.note(section, job)
        events: Any = NotedEvents(self.events, note) if note else self.events
        detector: Detector = BUILDERS[section](events, self.context, config)
        return detector

    def instance(self, job: str, section: str) -> Detector | None:
        """The instance judging `section` for `job` (a scoped name: job@attempt), None when it is switched off."""
        own = self.own.get(split(job)[0])
        return own[section] if own is not None and section in own else self.shared[section]

    def _instances(self, job: str) -> list[Detector]:
        """The instances switched on for `job` (scoped name), in dispatch order (lists built by _rebuild)."""
        return self._dispatch.get(split(job)[0], self.detectors)

    def _distinct(self, section: str) -> list[Any]:
        found = [self.shared[section], *(own[section] for own in self.own.values() if section in own)]
        return [d for d in found if d is not None]

    def apply_settings(self) -> None:
        """After RuntimeSettings changed: rebuild what changed (see the class docstring)."""
        with self.lock:
            self._rebuild()

    def _rebuild(self) -> None:
        before = {(job, s): self.instance(job, s) for job in self.seen for s in BUILDERS} if self.shared else {}
        config = self.settings.effective(self.base)
        shared: dict[str, Detector | None] = {}
        for section in BUILDERS:
            wanted = getattr(config, section)
            if section in self.shared and getattr(self.config, section) == wanted:
                shared[section] = self.shared[section]
            else:
                shared[section] = self._build(section, wanted, None)
        own: dict[str, dict[str, Detector | None]] = {}
        own_config: dict[str, DetectorsConfig] = {}
        for job in self.settings.jobs():
            mine = self.settings.effective(self.base, job)
            own_config[job] = mine
            own[job] = {}
            for section in BUILDERS:
                wanted = getattr(mine, section)
                if wanted == getattr(config, section):
                    continue  # as every job: the shared instance
                old = self.own.get(job, {})
                if section in old and getattr(self.own_config[job], section) == wanted:
                    own[job][section] = old[section]
                else:
                    own[job][section] = self._build(section, wanted, job)
        self.config, self.shared, self.own, self.own_config = config, shared, own, own_config
        self.detectors = [d for d in shared.values() if d is not None]
        self._dispatch = {job: [d for d in (mine[s] if s in mine else shared[s] for s in BUILDERS) if d is not None]
                          for job, mine in own.items()}
        for (job, section), old_instance in before.items():
            new_instance = self.instance(job, section)
            if new_instance is old_instance:
                continue
            if old_instance is not None:
                old_instance.forget(job)  # its state of this job is the new instance's no more
            if new_instance is None:
                for event in self.events.open_events(job, section):
                    self.events.clear(section, job, event.key, detail={"closed_because": "detector switched off"})

    # ----------------------------------------------------------------- feeding
    def on_rows(self, rows: list[Row]) -> None:
        # One flush may finalise several steps in any order; detectors judge steps in order (a step older
        # than one already judged is skipped by the step detectors, so order within the batch matters). Within
        # a step, its step_time comes first, then the on-CPU times, then the run-queue waits: the straggler rule reads
        # them when it judges the step's waits (and cpu_starved the on-CPU times with the run-queue waits). The root
        # hands a flush's windows in no set order (a set of keys): a step's waits judged before its step_time were
        # read against the previous step's length, which at an onset that lengthens the steps made the rank's running
        # time look short and the run-queue discount take most of its lead.
        ordered = sorted(rows, key=lambda r: (r.key.width_ms, r.key.index, _FIRST.get(r.key.metric, len(_FIRST))))
        with self.lock:
            for row in ordered:
                job = row.key.job
                self.seen.add(job)
                for detector in self._instances(job):
                    if not detector.wants(row):
                        continue
                    try:
                        detector.observe(row)
                    except Exception:
                        self.errors += 1
                        log.exception("detector %s failed on %s", detector.kind, row.key)

    def on_fingerprints(self, job: str, merged: list) -> None:
        """Merged collective fingerprints of `job` (scoped name) that changed at the root: judged at once."""
        if not merged:
            return
        with self.lock:
            mismatch: Any = self.instance(job, "collective_mismatch")
            if mismatch is None:
                return
            self.seen.add(job)
            try:
                mismatch.observe_fingerprints(job, merged)
            except Exception:
                self.errors += 1
                log.exception("collective mismatch detector failed on %s", job)

    def on_exits(self, job: str, exits: list) -> None:
        """Accounts of ranks' exits (RankExit) of `job` (scoped name), from the tree: judged at once."""
        if self.crash is None or not exits:
            return
        with self.lock:
            try:
                self.crash.observe_exits(job, [record_of(e) for e in exits])
            except Exception:
                self.errors += 1
                log.exception("crash detector failed on %s", job)

    def forget(self, job: str) -> None:
        """A finished job leaves every detector; its events still open are closed."""
        with self.lock:
            for section in BUILDERS:
                for detector in self._distinct(section):
                    detector.forget(job)
            self.seen.discard(job)
        self.events.close_job(job)

    def jobs(self) -> list[str]:
        with self.lock:
            jobs: list[str] = []
            for detector in [*self._distinct("hang"), *self._distinct("crash")]:
                jobs += [job for job in detector.jobs() if job not in jobs]
            return jobs

    def check(self, live: dict[str, dict]) -> None:
        """Periodic checks (hang); `live` maps job -> liveness view, fetched without this lock held."""
        with self.lock:
            try:
                for hang in self._distinct("hang"):
                    hang.check(live)
                for mismatch in self._distinct("collective_mismatch"):
                    mismatch.check()
                if self.crash is not None:
                    self.crash.check(live)
            except Exception:
                self.errors += 1
                log.exception("periodic detector check failed")
