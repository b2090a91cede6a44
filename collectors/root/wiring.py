"""The root's consumers of what the tree delivers: detectors, the event log, /metrics, restarts, forensics.

    wiring = Wiring(config.detectors, store, finaliser, root, route, ...)  # built by RootServer
    wiring.on_finalised(rows)               # Finaliser.on_finalised: every commit's rows
    wiring.finished(job)                    # RootServer.on_job_finished: a job forgotten by the sweep
    wiring.routes                           # {"/metrics": ..., "/api/v1/events": ...} for root.api.serve(extra=)
    wiring.events_endpoint(job, query)      # GET /api/v1/jobs/{job}/events (RootApi.events)
    wiring.start(); ...; wiring.close()     # the periodic check's thread and the forensics worker

`RootServer` (collectors/root/server.py) builds it and registers its handlers where the root's parts call them
(`Finaliser.on_finalised` and `on_store_trouble`, `CollectorService.on_captures` and `on_fingerprints`,
`RootServer.on_job_finished`). It holds an `EventLog` on the root's database file (table `events`), the
`Detectors` (configured by the `DetectorsConfig` given, from RootConfig), a `RootMetrics`, the `RestartWatch`
and goodput exporter, `Forensics`, and the merged collective fingerprints. `start()` starts a daemon thread that
every `hang.check_interval_s` takes the liveness and rank->host views of every job and runs the periodic hang /
no-progress check, and the forensics worker; `close()` (the root's stop, after its flush loop has finished)
stops both and closes the event log.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections.abc import Callable
from dataclasses import asdict
from functools import partial
from http import HTTPStatus
from pathlib import Path
from typing import Protocol

from pyroaring import BitMap

from collectors.common.attempts import scoped, split
from collectors.common.fingerprints import FingerprintTable
from collectors.common.rows import Row
from collectors.delivery.node import Node, RankView
from collectors.detectors.base import Context
from collectors.detectors.events import Event, EventLog
from collectors.detectors.settings import RuntimeSettings, SettingsError
from collectors.detectors.sinks import make_sinks
from collectors.detectors.suite import BUILDERS, Detectors, DetectorsConfig
from collectors.root.adoption import Adoption, LatestAttempts
from collectors.root.api import MAX_LAST, ApiError
from collectors.root.capture_limits import Busy
from collectors.root.crashes import RankExitMetrics, last_words_capture
from collectors.root.finalise import Finaliser
from collectors.root.forensics import (
    DEFAULT_MAX_RANKS,
    DEFAULT_MAX_REQUESTS,
    Forensics,
    ForensicsMetrics,
    ForensicsStore,
)
from collectors.root.metrics import RootMetrics
from collectors.root.restarts import GoodputMetrics, RestartWatch
from collectors.root.retention import store_bytes
from collectors.root.store import Store
from telemetry.names import FLEET_JOB
from telemetry.v1 import forensics_pb2

log = logging.getLogger(__name__)

Route = Callable[[], tuple[str, bytes]]
MAX_JUDGING = 65_536  # fingerprints and exits waiting for the judging thread; past it they are judged at once
ROOT_JOB = "_root"  # the job name of the root's own events (its store failing); no rank may use it


class LiveTier(Protocol):
    """What the consumers read of the running root, each time they need it (collectors/collector/tier.py)."""

    node: Node

    def jobs(self) -> list[str]: ...

    def live(self, job: str) -> bool: ...

    def liveness(self, job: str) -> dict[str, object]: ...


class Wiring:
    """The root's consumers; see the module docstring."""

    def __init__(self, config: DetectorsConfig, store: Store, finaliser: Finaliser, tier: LiveTier,
                 route: Callable[[list[forensics_pb2.CaptureRequest]], BitMap], forensics_folder: Path,
                 forensics_max_ranks: int = DEFAULT_MAX_RANKS,
                 forensics_max_requests: int = DEFAULT_MAX_REQUESTS) -> None:
        self.config = config
        self.tier = tier
        self.hosts: dict[str, dict[int, str]] = {}   # job -> rank -> host, refreshed by the periodic check
        self.latest: dict[str, int] = {}             # job -> its latest finalised step
        self._hosts_lock = threading.Lock()  # the periodic check must not put back the hosts of a forgotten job
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None
        # Fingerprints and exits from the tree, judged on a thread of their own (_judge), not under the node's lock.
        self._judging: queue.Queue[Callable[[], None] | None] = queue.Queue(MAX_JUDGING)
        self._judge_thread: threading.Thread | None = None
        self.events = EventLog(store.path, make_sinks(config.sinks))
        node = tier.node
        context = Context(hosts_of=lambda job: self.hosts.get(job, {}), latest_step_of=self.latest.get,
                          jobs_known=lambda: list(self.hosts), world_of=node.world_size)
        self.settings = RuntimeSettings(store.path)  # detector settings changed at runtime (table detector_settings)
        self.detectors = Detectors(self.events, config, context, self.settings)
        registered = tier.jobs  # live jobs only: a finished job's series leave /metrics
        self.metrics = RootMetrics(self.events, liveness=tier.liveness, counters=self._counters,
                                   detector_errors=lambda: self.detectors.errors, jobs=registered,
                                   store=lambda: {"writable": int(finaliser.writable),
                                                  "write_failures": finaliser.write_failures,
                                                  "files_lost": finaliser.files_lost,
                                                  "bytes": store_bytes(store.path)})
        self.routes: dict[str, Route] = {"/metrics": self.metrics.render, "/api/v1/events": self.all_events}
        # Which attempt is each job's latest: adopted only with the ranks to be one (adoption.py).
        self.adoption = Adoption(store, lambda job: self._states(job))
        self.restarts = RestartWatch(store, self.events, self.adoption)
        self.metrics.registry.register(GoodputMetrics(store, registered))
        self.metrics.registry.register(LatestAttempts(self.adoption, registered))
        # Forensics: culprit-naming events ask their ranks for a capture; captures from the tree are kept on disk.
        self.forensics = Forensics(ForensicsStore(forensics_folder, forensics_max_requests), route,
                                   max_ranks=forensics_max_ranks)
        self.events.sinks.append(self.forensics.on_event)
        self.metrics.registry.register(ForensicsMetrics(self.forensics))
        self.fingerprints = FingerprintTable()
        # When ranks die (docs/forensics.md): the crash event's capture is its ranks' last words.
        crash = self.detectors.crash
        if crash is not None:
            self.events.sinks.append(self._crash_forensics)
            self.metrics.registry.register(RankExitMetrics(lambda: dict(crash.counts)))

    def _states(self, job: str) -> RankView:
        node = self.tier.node
        with node.lock:
            return node.states(job)

    def _counters(self) -> dict[str, int]:
        node = self.tier.node
        with node.lock:
            return node.subtree_counters()

    # ----------------------------------------------------------------- handlers the root registers
    def on_finalised(self, rows: list[Row]) -> None:
        """Finaliser.on_finalised: the rows of one commit, to the detectors, /metrics and the restart watch."""
        # A window taken in before its job was forgotten may be finalised after: it is stored (history) but
        # must not bring the finished job back into the detectors and /metrics. (Data that arrives after
        # the job was forgotten revives it at intake, and passes here.)
        rows = [row for row in rows if self.tier.live(row.key.job)]
        for row in rows:
            if row.key.is_step and row.key.index > self.latest.get(row.key.job, -1):
                self.latest[row.key.job] = row.key.index
        try:
            self.adoption.consider({row.key.job for row in rows})
        except Exception:
            log.exception("adopting attempts failed")
        for consumer in (self.detectors.on_rows, self.metrics.observe, self.restarts.on_rows):
            try:
                consumer(rows)
            except Exception:
                log.exception("root consumer %s failed", consumer)

    def on_fingerprints(self, found: list[forensics_pb2.JobFingerprints]) -> None:
        """CollectorService.on_fingerprints, under the node's lock: merged here, judged by the collective mismatch
        detector on the judging thread (`_judge`)."""
        for job_fingerprints in found:
            changed = self.fingerprints.merge(job_fingerprints)
            if changed:
                self._to_judge(partial(self.detectors.on_fingerprints,
                                       scoped(job_fingerprints.job, job_fingerprints.attempt), changed))

    def on_exits(self, exits: list[forensics_pb2.RankExit]) -> None:
        """CollectorService.on_exits, under the node's lock: accounts of ranks' ends, to the crash detector on the
        judging thread (`_judge`)."""
        by_job: dict[str, list[forensics_pb2.RankExit]] = {}
        for record in exits:
            by_job.setdefault(scoped(record.job, record.attempt), []).append(record)
        for job, found in by_job.items():
            self._to_judge(partial(self.detectors.on_exits, job, found))

    def _to_judge(self, judge: Callable[[], None]) -> None:
        """Queue a verdict for the judging thread; judged here, as it used to be, before the thread runs, after it
        stopped, or while MAX_JUDGING wait (bounded memory, nothing lost; order kept in all but the last case)."""
        if self._judge_thread is not None and not self.stop.is_set():
            try:
                self._judging.put_nowait(judge)
                return
            except queue.Full:
                pass
        judge()

    def _judge(self) -> None:
        """Judge fingerprints and exits in the order they came, without the node's lock: a verdict may open an
        event, and an event is a SQLite write (EventLog) that the tree's intake used to wait for (issue 27)."""
        while True:
            judge = self._judging.get()
            if judge is None:
                return
            try:
                judge()
            except Exception:
                log.exception("judging fingerprints or exits failed")

    def _crash_forensics(self, action: str, event: Event) -> None:
        """EventLog sink (under the detectors' lock): a crash event's accounts, kept as its forensics."""
        crash = self.detectors.crash
        if event.kind != "crash" or action not in ("open", "update") or event.id is None or crash is None:
            return
        name, attempt = split(event.job)
        request_id = f"event-{event.id}"
        captures = [last_words_capture(record, request_id, name, attempt) for record in crash.take_new(event.job)]
        if captures:
            self.forensics.keep(event.job, event.id, "crash", captures)

    def finished(self, job: str) -> None:
        """RootServer.on_job_finished: the job leaves every consumer (its events still open are closed)."""
        self.detectors.forget(job)
        self.metrics.forget(job)
        with self._hosts_lock:
            self.hosts.pop(job, None)
        self.latest.pop(job, None)
        self.restarts.forget(job)
        self.adoption.forget(job)
        self.fingerprints.forget(*split(job))

    def store_trouble(self, kind: str, message: str) -> None:
        """Finaliser.on_store_trouble: an event of the root itself (job ROOT_JOB), best effort (the event log
        lives on the same disk)."""
        if kind == "recovered":
            self.events.clear("store", ROOT_JOB, detail={"recovered": message})
        else:
            self.events.raise_("store", ROOT_JOB, step=None, detail={"summary": message, "trouble": kind},
                               severity="critical")

    # ----------------------------------------------------------------- threads
    def start(self) -> None:
        """The forensics worker and the periodic check."""
        self.forensics.start()
        self.thread = threading.Thread(target=self._loop, name="detectors", daemon=True)
        self.thread.start()
        self._judge_thread = threading.Thread(target=self._judge, name="judging", daemon=True)
        self._judge_thread.start()

    def _loop(self) -> None:
        interval = max(0.05, self.config.hang.check_interval_s)
        while not self.stop.wait(interval):
            try:
                jobs = self.detectors.jobs()
                live = {job: self.tier.liveness(job) for job in jobs}
                node = self.tier.node
                with node.lock:
                    views = {job: node.hosts(job) for job in jobs}  # cached per hosts_version, not rebuilt
                    if FLEET_JOB in node.jobs():  # the fleet's device names (collectors/common/fleet.py)
                        views[FLEET_JOB] = node.hosts(FLEET_JOB)
                with self._hosts_lock:  # only jobs the detectors still hold: one finished since `jobs` was read is gone
                    known = {*self.detectors.jobs(), FLEET_JOB}
                    self.hosts.update({job: view for job, view in views.items() if job in known})
                self.detectors.check(live)
                self.restarts.check(self.adoption.consider(self.tier.jobs()))
            except Exception:
                log.exception("periodic detector check failed")

    def close(self, timeout: float = 2.0) -> None:
        """Stop the periodic check and the forensics worker, then close the event log (call after the flush loop
        has stopped)."""
        self.stop.set()
        if self._judge_thread is not None:  # what is queued is judged first: its events are in the table
            try:
                self._judging.put(None, timeout=timeout)
            except queue.Full:  # the thread is stuck judging: it is a daemon, and the stop goes on
                log.warning("the judging thread did not take its stop within %.1f s", timeout)
            self._judge_thread.join(timeout)
        if self.thread is not None:
            self.thread.join(timeout)
            self.forensics.close(timeout)
        self.events.close()
        self.settings.close()

    def events_endpoint(self, job: str, query: dict[str, list[str]]) -> dict[str, object]:
        """GET /api/v1/jobs/{job}/events?status=open|closed&kind=K&since_id=N&last=N (oldest first)."""
        def one(name: str) -> str | None:
            values = query.get(name)
            return values[0] if values else None

        try:
            last = int(one("last") or 100)
            since_id = int(one("since_id") or 0)
        except ValueError:
            raise ApiError(HTTPStatus.BAD_REQUEST, "last and since_id must be integers") from None
        if not 1 <= last <= MAX_LAST:
            raise ApiError(HTTPStatus.BAD_REQUEST, f"last must be in [1, {MAX_LAST}]")
        if not 0 <= since_id < 2**63:
            raise ApiError(HTTPStatus.BAD_REQUEST, "since_id must be in [0, 2**63)")
        status = one("status")
        if status not in (None, "open", "closed"):
            raise ApiError(HTTPStatus.BAD_REQUEST, "status must be open or closed")
        events = self.events.query(job, kind=one("kind"), status=status, since_id=since_id, limit=last)
        return {"job": job, "events": [_with_attempt(event) for event in events]}

    def forensics_endpoint(self, job: str, request_id: str) -> dict[str, object]:
        """GET /api/v1/jobs/{job}/events/{id}/forensics and /api/v1/jobs/{job}/forensics/{request_id}."""
        found = self.forensics.answer(job, request_id)
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no capture {request_id!r} of job {job!r} (none was asked for, "
                                                 "or it was evicted)")
        return found

    def ask_forensics(self, job: str, body: object) -> dict[str, object]:
        """POST /api/v1/jobs/{job}/forensics {"ranks": [...], "attempt": N (default: the latest adopted live one)}."""
        if not isinstance(body, dict) or not isinstance(body.get("ranks"), list) or not all(
                type(r) is int and 0 <= r < 2**32 for r in body["ranks"]):
            raise ApiError(HTTPStatus.BAD_REQUEST, 'the body must be JSON {"ranks": [rank, ...]} with ranks as '
                                                   'non-negative integers')
        attempts = sorted(a for name, a in map(split, self.tier.jobs()) if name == job)
        wanted = body.get("attempt")
        if wanted is None:
            if not attempts:
                raise ApiError(HTTPStatus.NOT_FOUND, f"job {job!r} is not live at this root: nothing to ask")
            # The latest adopted attempt that is live (adoption.py); none live: the highest number live.
            adopted = [a for name, a in map(split, self.adoption.adopted(job)) if a in attempts]
            wanted = adopted[-1] if adopted else attempts[-1]
        elif type(wanted) is not int or wanted not in attempts:
            raise ApiError(HTTPStatus.NOT_FOUND, f"attempt {wanted!r} of job {job!r} is not live (live: {attempts})")
        try:
            request_id = self.forensics.ask(scoped(job, wanted), body["ranks"])
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        except TimeoutError as exc:
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, str(exc)) from None
        except Busy as busy:
            raise ApiError(HTTPStatus.TOO_MANY_REQUESTS, str(busy),
                           {"Retry-After": busy.retry_after_header}) from None
        return {"job": job, "attempt": wanted, "request_id": request_id, "ranks": sorted(set(body["ranks"])),
                "url": f"/api/v1/jobs/{job}/forensics/{request_id}"}

    def detector_settings(self, job: str | None, patch: object | None = None) -> dict[str, object]:
        """GET/POST /api/v1/detectors (all jobs) and /api/v1/jobs/{job}/detectors (one job; every attempt of it):
        what the detectors run with, and the overrides; with `patch` (POST, a JSON merge patch), change them
        first (collectors/detectors/settings.py; a refused value is a 400 naming its field)."""
        if patch is not None:
            try:
                self.settings.patch(job, patch, self.config, check=_dry_build)
            except SettingsError as exc:
                raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
            self.detectors.apply_settings()
        effective = self.settings.effective(self.config, job)
        answer: dict[str, object] = {"version": self.settings.version, "all_jobs": self.settings.override(None)}
        if job is None:
            answer["jobs"] = {name: self.settings.override(name) for name in self.settings.jobs()}
        else:
            answer["job"], answer["this_job"] = job, self.settings.override(job)
        answer["effective"] = {section: asdict(getattr(effective, section)) for section in BUILDERS}
        return answer

    def all_events(self) -> tuple[str, bytes]:
        """GET /api/v1/events: the latest 1,000 events of every job."""
        body = json.dumps({"events": [_with_attempt(e) for e in self.events.query(None, limit=1000)]}).encode()
        return "application/json", body


def _dry_build(config: DetectorsConfig) -> None:
    """Build every detector of `config` once, on a throw-away event log: a setting a detector refuses is refused
    before it is applied."""
    events = EventLog(None)
    try:
        Detectors(events, config)
    finally:
        events.close()


def _with_attempt(event: dict) -> dict:
    """An event as the API serves it: the job's name and its attempt apart (events are kept per attempt)."""
    event["job"], event["attempt"] = split(event["job"])
    return event
