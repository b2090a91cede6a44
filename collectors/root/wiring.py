"""Wires the detectors, the event log and the Prometheus exposition into a running root.

    wiring = attach(server)                 # server: a root CollectorServer, before its flush loop starts
    wiring.routes                           # {"/metrics": ..., "/api/v1/events": ...} for root.api.serve(extra=)
    wiring.events_endpoint(job, query)      # GET /api/v1/jobs/{job}/events (RootApi.events)

What `attach` does: opens an `EventLog` on the root's database file (table `events`), builds the
detectors (`DetectorsConfig`: given, else from $TELEMETRY_DETECTORS, else defaults) and a
`RootMetrics`, registers one `Finaliser.on_finalised` callback feeding both, and starts a daemon
thread that every `hang.check_interval_s` takes the liveness and rank->host views of every job
and runs the periodic hang / no-progress check. `Wiring.close()` (the server's stop, after its
flush loop has finished) stops the thread and closes the event log.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import TYPE_CHECKING

from collectors.common.attempts import scoped, split
from collectors.common.fingerprints import FingerprintTable
from collectors.common.rows import Row
from collectors.detectors.base import Context
from collectors.detectors.events import EventLog, make_sinks
from collectors.detectors.suite import Detectors, DetectorsConfig
from collectors.root.api import MAX_LAST, ApiError
from collectors.root.forensics import Forensics, ForensicsStore, forensics_folder
from collectors.root.metrics import RootMetrics
from collectors.root.restarts import GoodputMetrics, RestartWatch

if TYPE_CHECKING:
    from collectors.collector.server import CollectorServer

log = logging.getLogger(__name__)

Route = Callable[[], tuple[str, bytes]]
ROOT_JOB = "_root"  # the job name of the root's own events (its store failing); no rank may use it


@dataclass
class Wiring:
    detectors: Detectors
    events: EventLog
    metrics: RootMetrics
    routes: dict[str, Route] = field(default_factory=dict)
    thread: threading.Thread | None = None
    hosts: dict[str, dict[int, str]] = field(default_factory=dict)
    stop: threading.Event = field(default_factory=threading.Event)
    forensics: Forensics | None = None
    live_jobs: Callable[[], list[str]] = lambda: []  # the root's live jobs, scoped names

    def close(self, timeout: float = 2.0) -> None:
        """Stop the periodic check, then close the event log (call after the flush loop has stopped)."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout)
        if self.forensics is not None:
            self.forensics.close(timeout)
        self.events.close()

    def on_finalised(self, rows: list[Row]) -> None:
        for consumer in (self.detectors.on_rows, self.metrics.observe):
            try:
                consumer(rows)
            except Exception:
                log.exception("root consumer %s failed", consumer)

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
        found = self.forensics.answer(job, request_id) if self.forensics is not None else None
        if found is None:
            raise ApiError(HTTPStatus.NOT_FOUND, f"no capture {request_id!r} of job {job!r} (none was asked for, "
                                                 "or it was evicted)")
        return found

    def ask_forensics(self, job: str, body: object) -> dict[str, object]:
        """POST /api/v1/jobs/{job}/forensics {"ranks": [...], "attempt": N (default: the latest live one)}."""
        if self.forensics is None:
            raise ApiError(HTTPStatus.NOT_FOUND, "forensics are off on this root")
        if not isinstance(body, dict) or not isinstance(body.get("ranks"), list) or not all(
                type(r) is int and 0 <= r < 2**32 for r in body["ranks"]):
            raise ApiError(HTTPStatus.BAD_REQUEST, 'the body must be JSON {"ranks": [rank, ...]} with ranks as '
                                                   'non-negative integers')
        attempts = sorted(a for name, a in map(split, self.live_jobs()) if name == job)
        wanted = body.get("attempt")
        if wanted is None:
            if not attempts:
                raise ApiError(HTTPStatus.NOT_FOUND, f"job {job!r} is not live at this root: nothing to ask")
            wanted = attempts[-1]
        elif type(wanted) is not int or wanted not in attempts:
            raise ApiError(HTTPStatus.NOT_FOUND, f"attempt {wanted!r} of job {job!r} is not live (live: {attempts})")
        try:
            request_id = self.forensics.ask(scoped(job, wanted), body["ranks"])
        except ValueError as exc:
            raise ApiError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        except TimeoutError as exc:
            raise ApiError(HTTPStatus.SERVICE_UNAVAILABLE, str(exc)) from None
        return {"job": job, "attempt": wanted, "request_id": request_id, "ranks": sorted(set(body["ranks"])),
                "url": f"/api/v1/jobs/{job}/forensics/{request_id}"}

    def all_events(self) -> tuple[str, bytes]:
        """GET /api/v1/events: the latest 1,000 events of every job."""
        body = json.dumps({"events": [_with_attempt(e) for e in self.events.query(None, limit=1000)]}).encode()
        return "application/json", body


def _with_attempt(event: dict) -> dict:
    """An event as the API serves it: the job's name and its attempt apart (events are kept per attempt)."""
    event["job"], event["attempt"] = split(event["job"])
    return event


def attach(server: CollectorServer, config: DetectorsConfig | None = None) -> Wiring:
    """Detectors, events and /metrics for a root; call from the root branch of CollectorServer.start()."""
    if server.store is None or server.finaliser is None:
        raise ValueError("attach() needs a root (a collector with no parent)")
    config = config if config is not None else DetectorsConfig.from_env()
    events = EventLog(server.store.path, make_sinks(config.sinks))
    hosts: dict[str, dict[int, str]] = {}
    latest: dict[str, int] = {}
    context = Context(hosts_of=lambda job: hosts.get(job, {}), latest_step_of=lambda job: latest.get(job),
                      jobs_known=lambda: list(hosts), world_of=lambda job: server.node.states(job).world_size)
    detectors = Detectors(events, config, context)

    def counters() -> dict[str, int]:
        with server.node.lock:
            return server.node.subtree_counters()

    registered = server.jobs  # live jobs only: a finished job's series leave /metrics

    finaliser = server.finaliser
    metrics = RootMetrics(events, liveness=server.liveness, counters=counters,
                          detector_errors=lambda: detectors.errors, jobs=registered,
                          store=lambda: {"writable": int(finaliser.writable),
                                         "write_failures": finaliser.write_failures,
                                         "files_lost": finaliser.files_lost})
    wiring = Wiring(detectors, events, metrics, hosts=hosts)
    wiring.routes = {"/metrics": metrics.render, "/api/v1/events": wiring.all_events}
    restarts = RestartWatch(server.store, events)
    metrics.registry.register(GoodputMetrics(server.store, registered))

    def on_finalised(rows: list[Row]) -> None:
        # A window taken in before its job was forgotten may be finalised after: it is stored (history) but
        # must not bring the finished job back into the detectors and /metrics. (Data that arrives after
        # the job was forgotten revives it at intake, and passes here.)
        rows = [row for row in rows if server.lifecycle.live(row.key.job)]
        for row in rows:
            if row.key.is_step and row.key.index > latest.get(row.key.job, -1):
                latest[row.key.job] = row.key.index
        wiring.on_finalised(rows)
        try:
            restarts.on_rows(rows)
        except Exception:
            log.exception("restart watch failed")

    server.finaliser.on_finalised.append(on_finalised)

    # Forensics: culprit-naming events ask their ranks for a capture; captures from the tree are kept on disk.
    forensics = Forensics(ForensicsStore(forensics_folder(server.store.path)),
                          server.service.route_requests)
    events.sinks.append(forensics.on_event)
    server.service.on_captures = forensics.on_captures
    fingerprints = FingerprintTable()

    def on_fingerprints(found: list) -> None:
        # Under the node's lock (the detectors' lock may be taken inside it: the flush thread's order).
        for job_fingerprints in found:
            changed = fingerprints.merge(job_fingerprints)
            detectors.on_fingerprints(scoped(job_fingerprints.job, job_fingerprints.attempt), changed)

    server.service.on_fingerprints = on_fingerprints
    forensics.start()
    wiring.forensics = forensics
    wiring.live_jobs = server.jobs

    hosts_lock = threading.Lock()  # the periodic check must not put back the hosts of a job forgotten meanwhile

    def finished(job: str) -> None:
        detectors.forget(job)
        metrics.forget(job)
        with hosts_lock:
            hosts.pop(job, None)
        latest.pop(job, None)
        restarts.forget(job)
        name, attempt = split(job)
        if fingerprints.attempt(name) == attempt:
            fingerprints.forget(name)

    server.on_job_finished.append(finished)

    def store_trouble(kind: str, message: str) -> None:
        """An event of the root itself (job ROOT_JOB), best effort: the event log lives on the same disk."""
        if kind == "recovered":
            events.clear("store", ROOT_JOB, detail={"recovered": message})
        else:
            events.raise_("store", ROOT_JOB, step=None, detail={"summary": message, "trouble": kind},
                          severity="critical")

    finaliser.on_store_trouble.append(store_trouble)
    interval = max(0.05, config.hang.check_interval_s)

    def loop() -> None:
        while not wiring.stop.wait(interval):
            try:
                jobs = detectors.jobs()
                live = {job: server.liveness(job) for job in jobs}
                with server.node.lock:
                    views = {job: dict(server.node.ranks(job).hosts) for job in jobs}
                with hosts_lock:  # only jobs the detectors still hold: one finished since `jobs` was read is gone
                    known = set(detectors.jobs())
                    hosts.update({job: view for job, view in views.items() if job in known})
                detectors.check(live)
            except Exception:
                log.exception("periodic detector check failed")

    wiring.thread = threading.Thread(target=loop, name="detectors", daemon=True)
    wiring.thread.start()
    return wiring
