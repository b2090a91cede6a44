"""Detector settings changed while the root runs (issue 24 item 4): validated overrides, for all jobs or one job,
kept in the root's database so that a restarted root applies them again.

    settings = RuntimeSettings(db_path)              # table detector_settings of the root's file (None: memory)
    settings.patch(None, {"mfu_drop": {"noise_k": 3}}, base)       # all jobs; a JSON merge patch (RFC 7386)
    settings.patch("llama", {"hang": {"grace_s": 30}}, base)       # one job (every attempt of it)
    settings.effective(base, "llama")                # the DetectorsConfig that job's detectors run with

What a job's detectors run with is the root's start-up configuration (`--detectors`, RootConfig.detectors), then
the all-jobs override, then the job's own. An override is {section: {option: value}}; a patch sets the options it
names and removes those it gives as null (a section given as null is removed whole). Every value is checked
against the option's kind before anything changes (`SettingsError` names the field: the API's 400): booleans are
booleans, counts integers >= 0, figures finite numbers >= 0 (thresholds and caps > 0), severities one of
info/warning/critical, lanes [[drift, threshold], ...]; then the whole configuration is built into detectors once,
so a combination a detector refuses is refused too. Sections that cannot change while the root runs are refused:
`sinks` (where events are sent is the operator's, at start: a webhook URL set over the API would send every event
to whoever set it) and `crash` (its counters feed /metrics for the root's lifetime), and `hang.check_interval_s`
(the periodic check's pace is set once).

Each change increments `version` (kept across restarts); an event raised by a detector whose settings differ from
the start-up ones carries `detail.settings` = {"version", "all_jobs", "this_job"}: the overrides it ran under.
"""

from __future__ import annotations

import json
import math
import re
import sqlite3
import threading
import time
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

from collectors.detectors.cusum import parse_lanes
from collectors.detectors.events import SEVERITIES

ALL_JOBS = "*"  # the scope of the all-jobs override in the table
FIXED_SECTIONS = {
    "sinks": "where events are sent is set at the root's start (--detectors): not over the API",
    "crash": "set at the root's start (--detectors): its counters run for the root's lifetime",
}
FIXED_OPTIONS = {("hang", "check_interval_s"): "the periodic check's pace is set at the root's start"}
MAX_NAME = 256  # a job name or a metric name

_SCHEMA = """
CREATE TABLE IF NOT EXISTS detector_settings (
    scope TEXT PRIMARY KEY, settings TEXT NOT NULL, version INTEGER NOT NULL, updated REAL NOT NULL
) WITHOUT ROWID;
"""


class SettingsError(ValueError):
    """A refused override; `field` is what was wrong (section, or section.option)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_value(section: str, option: str, value: Any, default: Any) -> Any:
    """`value` for section.option, normalised (ints as floats where the option is a float), or SettingsError."""
    field = f"{section}.{option}"
    if (section, option) in FIXED_OPTIONS:
        raise SettingsError(field, FIXED_OPTIONS[(section, option)])
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise SettingsError(field, f"must be true or false, got {value!r}")
        return value
    if isinstance(default, int):
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**31:
            raise SettingsError(field, f"must be an integer from 0 to {2**31 - 1}, got {value!r}")
        return value
    if isinstance(default, float):
        if not _number(value) or not math.isfinite(value) or value < 0 or value > 1e12:
            raise SettingsError(field, f"must be a finite number >= 0, got {value!r}")
        if (option.endswith("threshold") or option.endswith("cap")) and value <= 0:
            raise SettingsError(field, f"must be > 0, got {value!r}")
        return float(value)
    if option == "severity":
        if value not in SEVERITIES:
            raise SettingsError(field, f"must be one of {', '.join(SEVERITIES)}, got {value!r}")
        return value
    if isinstance(default, str):
        if not isinstance(value, str) or not 0 < len(value) <= MAX_NAME:
            raise SettingsError(field, f"must be a non-empty string of at most {MAX_NAME} characters, got {value!r}")
        return value
    if option == "lanes":
        try:
            return [list(lane) for lane in parse_lanes(value, field)]
        except ValueError as exc:
            raise SettingsError(field, str(exc).split(": ", 1)[-1]) from None
    if isinstance(default, list):  # a list of names (nonfinite.metrics)
        if not isinstance(value, list) or not value or not all(
                isinstance(v, str) and 0 < len(v) <= MAX_NAME for v in value):
            raise SettingsError(field, f"must be a non-empty list of names, got {value!r}")
        return value
    if isinstance(default, dict) or default is None:  # hardware.overrides / rules: built below, checked there
        if not isinstance(value, (dict, list)):
            raise SettingsError(field, f"must be a JSON object or list, got {value!r}")
        return value
    raise SettingsError(field, "cannot be changed at runtime")  # pragma: no cover - every option's kind is above


def _refused(exc: Exception, base: Any) -> SettingsError:
    """A detector's refusal as the API's 400: naming section.option where the detector's message begins with
    one ("straggler: oncpu_steps must be ..."), as the checks of check_value do; else the settings as a whole."""
    match = re.match(r"(\w+): (\w+) (must .*)", str(exc), re.S)
    if match and match[1] in {f.name for f in fields(base)} \
            and match[2] in {f.name for f in fields(getattr(base, match[1]))}:
        return SettingsError(f"{match[1]}.{match[2]}", match[3])
    return SettingsError("settings", f"refused by the detectors: {exc}")


def overlay(base: Any, *overrides: dict[str, dict[str, Any]]) -> Any:
    """`base` (a DetectorsConfig) with the overrides applied in order, as a new DetectorsConfig."""
    data = {f.name: asdict(getattr(base, f.name)) for f in fields(base)}
    for override in overrides:
        for section, options in override.items():
            data[section] = {**data[section], **options}
    return type(base).from_mapping(data)


class RuntimeSettings:
    """The all-jobs override, the per-job ones and the version, kept in the root's file; see the module docstring.
    Thread-safe (the API's threads patch; the detectors' thread reads)."""

    def __init__(self, db_path: Path | str | None = None) -> None:
        self._lock = threading.Lock()
        self._patching = threading.Lock()  # one patch at a time: two POSTs to one scope must not lose one
        self._db = sqlite3.connect(str(db_path) if db_path is not None else ":memory:", check_same_thread=False,
                                   isolation_level=None, timeout=10.0)
        self._db.executescript(_SCHEMA)
        self.overrides: dict[str, dict[str, dict[str, Any]]] = {}  # scope (ALL_JOBS or a job) -> override
        self.version = 0
        for scope, text, version in self._db.execute("SELECT scope, settings, version FROM detector_settings"):
            self.overrides[scope] = json.loads(text)
            self.version = max(self.version, version)

    def close(self) -> None:
        self._db.close()

    def override(self, job: str | None) -> dict[str, dict[str, Any]]:
        with self._lock:
            return json.loads(json.dumps(self.overrides.get(job or ALL_JOBS, {})))

    def jobs(self) -> list[str]:
        """Jobs with an override of their own."""
        with self._lock:
            return sorted(scope for scope, found in self.overrides.items() if scope != ALL_JOBS and found)

    def effective(self, base: Any, job: str | None = None) -> Any:
        with self._lock:
            layers = [self.overrides.get(ALL_JOBS, {})] + ([self.overrides.get(job, {})] if job else [])
        return overlay(base, *layers)

    def note(self, kind: str, job: str | None) -> dict[str, Any] | None:
        """What an event of `kind` raised for `job` (None: a job using the all-jobs settings) records of the
        overrides it ran under; None when none touches `kind`."""
        with self._lock:
            all_jobs = self.overrides.get(ALL_JOBS, {}).get(kind)
            this_job = self.overrides.get(job, {}).get(kind) if job else None
            if not all_jobs and not this_job:
                return None
            return {"version": self.version, "all_jobs": dict(all_jobs or {}), "this_job": dict(this_job or {})}

    def patch(self, job: str | None, patch: Any, base: Any, check: Any = None) -> dict[str, dict[str, Any]]:
        """Apply a merge patch to the all-jobs override (`job` None) or the job's; returns the new override.
        Validates everything first (SettingsError), then `check(effective config)` (a dry build of the
        detectors), then persists and bumps the version."""
        with self._patching:
            return self._patch(job, patch, base, check)

    def _patch(self, job: str | None, patch: Any, base: Any, check: Any) -> dict[str, dict[str, Any]]:
        scope = job or ALL_JOBS
        if job is not None and not (isinstance(job, str) and 0 < len(job) <= MAX_NAME):
            raise SettingsError("job", f"a job name of 1 to {MAX_NAME} characters, got {job!r}")
        if not isinstance(patch, dict):
            raise SettingsError("body", 'must be a JSON object {"section": {"option": value}}')
        sections = {f.name: getattr(base, f.name) for f in fields(base)}
        with self._lock:
            current = json.loads(json.dumps(self.overrides.get(scope, {})))
        for section, options in patch.items():
            if section not in sections:
                raise SettingsError(str(section), f"unknown section; known: {', '.join(sorted(sections))}")
            if section in FIXED_SECTIONS:
                raise SettingsError(section, FIXED_SECTIONS[section])
            if options is None:
                current.pop(section, None)
                continue
            if not isinstance(options, dict):
                raise SettingsError(section, f'must be a JSON object {{"option": value}} or null, got {options!r}')
            defaults = {f.name: getattr(sections[section], f.name) for f in fields(sections[section])}
            merged = dict(current.get(section, {}))
            for option, value in options.items():
                if option not in defaults:
                    raise SettingsError(f"{section}.{option}",
                                        f"unknown option; known: {', '.join(sorted(defaults))}")
                if value is None:
                    merged.pop(option, None)
                else:
                    merged[option] = check_value(section, option, value, defaults[option])
            if merged:
                current[section] = merged
            else:
                current.pop(section, None)
        with self._lock:
            layers = [] if scope == ALL_JOBS else [self.overrides.get(ALL_JOBS, {})]
            others = {s: o for s, o in self.overrides.items() if s != scope}
        try:
            effective = overlay(base, *layers, current)
            if check is not None:
                check(effective)
                if scope == ALL_JOBS:  # every job with its own override runs on top of this one
                    for own in others.values():
                        check(overlay(base, current, own))
        except (ValueError, TypeError) as exc:
            raise _refused(exc, base) from None
        with self._lock:
            self.version += 1
            self.overrides[scope] = current
            self._db.execute("INSERT OR REPLACE INTO detector_settings VALUES (?, ?, ?, ?)",
                             (scope, json.dumps(current, sort_keys=True), self.version, time.time()))
        return current
