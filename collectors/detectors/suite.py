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

from collectors.common.rows import Row
from collectors.detectors.base import Context, Detector, from_mapping
from collectors.detectors.collective_mismatch import CollectiveMismatchConfig, CollectiveMismatchDetector
from collectors.detectors.crash import CrashConfig, CrashDetector, record_of
from collectors.detectors.dataloader_stall import DataloaderStallConfig, DataloaderStallDetector
from collectors.detectors.events import EventLog, SinkConfig
from collectors.detectors.hang import HangConfig, HangDetector
from collectors.detectors.hardware import HardwareConfig, HardwareDetector
from collectors.detectors.loss_spike import LossSpikeConfig, LossSpikeDetector
from collectors.detectors.mfu_drop import MfuDropConfig, MfuDropDetector
from collectors.detectors.nonfinite import NonfiniteConfig, NonfiniteDetector
from collectors.detectors.straggler import StragglerConfig, StragglerDetector

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


class Detectors:
    """Routes finalised rows to the detectors that want them; one lock around all detector state.

    Lock order: the caller of `on_rows` may hold the node's lock (the flush thread does); `check` takes
    the liveness views *before* it is called, so this lock is never held while asking for the node's.
    """

    def __init__(self, events: EventLog, config: DetectorsConfig | None = None,
                 context: Context | None = None) -> None:
        self.config = config or DetectorsConfig()
        self.events = events
        self.context = context or Context()
        self.lock = threading.Lock()
        c, ctx = self.config, self.context
        self.hang = HangDetector(events, ctx, c.hang) if c.hang.enabled else None
        self.mismatch = (CollectiveMismatchDetector(events, ctx, c.collective_mismatch)
                         if c.collective_mismatch.enabled else None)
        self.crash = CrashDetector(events, ctx, c.crash) if c.crash.enabled else None
        candidates: list[Detector | None] = [
            StragglerDetector(events, ctx, c.straggler) if c.straggler.enabled else None,
            LossSpikeDetector(events, ctx, c.loss_spike) if c.loss_spike.enabled else None,
            NonfiniteDetector(events, ctx, c.nonfinite) if c.nonfinite.enabled else None,
            MfuDropDetector(events, ctx, c.mfu_drop) if c.mfu_drop.enabled else None,
            DataloaderStallDetector(events, ctx, c.dataloader_stall) if c.dataloader_stall.enabled else None,
            HardwareDetector(events, ctx, c.hardware) if c.hardware.enabled else None,
            self.hang,
            self.mismatch,
            self.crash,
        ]
        self.detectors: list[Detector] = [d for d in candidates if d is not None]
        self.errors = 0

    def on_rows(self, rows: list[Row]) -> None:
        # One flush may finalise several steps in any order; detectors judge steps in order (a step older
        # than one already judged is skipped by the step detectors, so order within the batch matters).
        ordered = sorted(rows, key=lambda r: (r.key.width_ms, r.key.index))
        with self.lock:
            for row in ordered:
                for detector in self.detectors:
                    if not detector.wants(row):
                        continue
                    try:
                        detector.observe(row)
                    except Exception:
                        self.errors += 1
                        log.exception("detector %s failed on %s", detector.kind, row.key)

    def on_fingerprints(self, job: str, merged: list) -> None:
        """Merged collective fingerprints of `job` (scoped name) that changed at the root: judged at once."""
        if self.mismatch is None or not merged:
            return
        with self.lock:
            try:
                self.mismatch.observe_fingerprints(job, merged)
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
            for detector in self.detectors:
                detector.forget(job)
        self.events.close_job(job)

    def jobs(self) -> list[str]:
        with self.lock:
            jobs = self.hang.jobs() if self.hang is not None else []
            return jobs + [job for job in self.crash.jobs() if job not in jobs] if self.crash is not None else jobs

    def check(self, live: dict[str, dict]) -> None:
        """Periodic checks (hang); `live` maps job -> liveness view, fetched without this lock held."""
        with self.lock:
            try:
                if self.hang is not None:
                    self.hang.check(live)
                if self.mismatch is not None:
                    self.mismatch.check()
                if self.crash is not None:
                    self.crash.check(live)
            except Exception:
                self.errors += 1
                log.exception("periodic detector check failed")
