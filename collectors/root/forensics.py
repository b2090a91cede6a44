"""The root's forensics (docs/forensics.md): ask the culprits for a capture, keep what comes back, serve it.

When an event of a kind that names a culprit opens (hang, straggler, collective mismatch) - or when someone
asks (`POST /api/v1/jobs/{job}/forensics`, `telemetry forensics`) - the root sends a CaptureRequest down the
tree for the named ranks only (at most `max_ranks` per event, one capture per rank per event: an event
updated with new ranks asks only for those). Each rank's agent answers with the rank's own capture, or its
fallback's; captures ride up on the ordinary units and are written here, one JSON file per rank, beside a
per-rank flight-recorder dump in the layout PyTorch's `torchfrtrace` reads:

    <db stem>.forensics/job-<job>/<request_id>/request.json     who was asked, when, why
    <db stem>.forensics/job-<job>/<request_id>/rank-<r>.json    one capture
    <db stem>.forensics/job-<job>/<request_id>/fr/rank_<r>      the rank's flight recorder (pickle), if any

At most `max_requests` requests are kept (the oldest directory goes first), at most `max_request_bytes` on
disk per request and `max_job_bytes` per job (a job over its budget loses its oldest requests first; a capture
that does not fit is kept without its stacks and flight recorder, saying why). Only the ranks a request asked
are stored; a capture that cannot be stored whole (malformed flight-recorder JSON) is stored with its error,
never left pending. On-demand requests are admitted by `CaptureLimits` (collectors/root/capture_limits.py:
rate limits per job and per rank, one capture in flight per rank). Everything that touches the
disk or the tree runs on one worker thread: event sinks are called under the detectors' lock, and captures
arrive under the node's lock, so neither may wait for the other's lock or for the disk.
"""

from __future__ import annotations

import json
import logging
import os
import pickle
import queue
import re
import secrets
import shutil
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector
from pyroaring import BitMap

from collectors.common.attempts import scoped, split
from collectors.detectors.events import Event
from collectors.root.capture_limits import CaptureLimits
from telemetry.names import MAX_CAPTURE_BYTES
from telemetry.v1 import forensics_pb2

log = logging.getLogger(__name__)

CAPTURE_KINDS = ("hang", "straggler", "collective_mismatch")
DEFAULT_MAX_RANKS = 8
DEFAULT_MAX_REQUESTS = 1000
DEFAULT_MAX_REQUEST_BYTES = 16 * 1024 * 1024   # on disk, per request (8 ranks of at most ~580 KiB by default)
DEFAULT_MAX_JOB_BYTES = 256 * 1024 * 1024      # on disk, per job (its oldest requests go first)
REQUEST_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def forensics_folder(db: Path) -> Path:
    """Beside the root's database, named apart from its files (root.db, root.db-wal, root.db-shm: what a glob
    of `root.db*` finds must stay the database's): root.db -> root.forensics."""
    return db.with_name(db.stem + ".forensics")


def _dir_name(job: str) -> str:
    """A job's directory: percent-encoded, so no job name ("..", "a/b") can leave the forensics folder."""
    return "job-" + quote(job, safe="")


class ForensicsStore:
    """Captures on disk, one directory per request; the newest `max_requests` kept."""

    def __init__(self, folder: Path, max_requests: int = DEFAULT_MAX_REQUESTS,
                 max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
                 max_job_bytes: int = DEFAULT_MAX_JOB_BYTES) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_requests = max_requests
        self.max_request_bytes = max_request_bytes
        self.max_job_bytes = max_job_bytes
        found = sorted((p for p in self.folder.glob("job-*/*") if p.is_dir()), key=lambda p: p.stat().st_mtime)
        self._requests: OrderedDict[Path, int] = OrderedDict((p, _du(p)) for p in found)  # -> bytes on disk
        self.trimmed = 0  # captures kept without their stacks and flight recorder (over a byte budget)

    def _dir(self, job: str, request_id: str) -> Path:
        if not REQUEST_ID.fullmatch(request_id):
            raise ValueError(f"request id {request_id[:80]!r} must match {REQUEST_ID.pattern}")
        return self.folder / _dir_name(job) / request_id

    def open_request(self, job: str, request_id: str, meta: dict[str, Any]) -> None:
        where = self._dir(job, request_id)
        where.mkdir(parents=True, exist_ok=True)
        _write_json(where / "request.json", meta)
        self._requests[where] = self._requests.get(where, 0)
        self._requests.move_to_end(where)
        while len(self._requests) > self.max_requests:
            oldest, _ = self._requests.popitem(last=False)
            shutil.rmtree(oldest, ignore_errors=True)

    def meta(self, job: str, request_id: str) -> dict[str, Any] | None:
        try:
            return json.loads((self._dir(job, request_id) / "request.json").read_text())
        except (OSError, ValueError):
            return None

    def save(self, capture: dict[str, Any], flight_recorder: dict[str, Any] | None) -> bool:
        """Write one rank's capture (the first one wins: a resent unit brings it again). False when the
        request is unknown here (evicted, or never asked by this root). A capture over the request's or the
        job's byte budget is written without its stacks and flight recorder, saying so."""
        where = self._dir(capture["job"], capture["request_id"])
        if not (where / "request.json").exists():
            return False
        target = where / f"rank-{capture['rank']}.json"
        if target.exists():
            return True
        dump = pickle.dumps(flight_recorder) if flight_recorder is not None else b""
        text = json.dumps(capture, separators=(",", ":"))
        size = len(text) + len(dump)
        if self._requests.get(where, 0) + size > self.max_request_bytes or not self._room(where, size):
            self.trimmed += 1
            capture = {**capture, "stacks": "", "flight_recorder": None,
                       "error": (capture.get("error") or "") + f" [not kept: this capture ({size:,} bytes) is over "
                       f"the request's ({self.max_request_bytes:,}) or the job's ({self.max_job_bytes:,}) byte "
                       "budget on disk]"}
            dump, text = b"", json.dumps(capture, separators=(",", ":"))
            size = len(text)
        if dump:
            (where / "fr").mkdir(exist_ok=True)
            (where / "fr" / f"rank_{capture['rank']}").write_bytes(dump)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(text)
        os.replace(tmp, target)
        self._requests[where] = self._requests.get(where, 0) + size
        return True

    def _room(self, where: Path, size: int) -> bool:
        """Make room for `size` more bytes in the request `where` within its job's budget, evicting the job's
        oldest other requests; False when even that is not enough."""
        mine = [p for p in self._requests if p.parent == where.parent]
        total = sum(self._requests[p] for p in mine)
        for oldest in mine:
            if total + size <= self.max_job_bytes:
                break
            if oldest == where:
                continue
            total -= self._requests.pop(oldest)
            shutil.rmtree(oldest, ignore_errors=True)
        return total + size <= self.max_job_bytes

    def captures(self, job: str, request_id: str) -> list[dict[str, Any]]:
        where = self._dir(job, request_id)
        out = []
        for path in sorted(where.glob("rank-*.json"), key=lambda p: int(p.stem.split("-")[1])):
            try:
                out.append(json.loads(path.read_text()))
            except (OSError, ValueError):
                continue
        return out

    def fr_dir(self, job: str, request_id: str) -> Path:
        return self._dir(job, request_id) / "fr"


def _du(where: Path) -> int:
    return sum(p.stat().st_size for p in where.rglob("*") if p.is_file())


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, separators=(",", ":")))
    os.replace(tmp, path)


class Forensics:
    """Decides what to capture, sends the requests down, stores the answers (on its own worker thread)."""

    def __init__(self, store: ForensicsStore, route: Callable[[list[forensics_pb2.CaptureRequest]], BitMap],
                 max_ranks: int = DEFAULT_MAX_RANKS, max_bytes: int = MAX_CAPTURE_BYTES,
                 kinds: Iterable[str] = CAPTURE_KINDS, clock: Callable[[], float] = time.time,
                 limits: CaptureLimits | None = None) -> None:
        self.store = store
        self.limits = limits or CaptureLimits()
        self.route = route
        self.max_ranks = max_ranks
        self.max_bytes = max_bytes
        self.kinds = frozenset(kinds)
        self.clock = clock
        self._asked: dict[str, BitMap] = {}          # request id -> ranks asked (events: grows with updates)
        self._work: queue.Queue = queue.Queue(maxsize=10_000)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="forensics", daemon=True)
        self.counts = {"requests": 0, "captures": 0, "unknown": 0, "unasked": 0, "malformed": 0, "dropped": 0}
        self.latencies: list[float] = []  # seconds from asking to storing, the latest 1,000

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._put(("stop",))
        self._thread.join(timeout)

    # ----------------------------------------------------------------- inputs (any thread, never block)
    def on_event(self, action: str, event: Event) -> None:
        """EventLog sink: a culprit-naming event opened or named new ranks."""
        if action in ("open", "update") and event.kind in self.kinds and event.ranks and event.id is not None:
            self._put(("event", event.job, event.id, event.kind, list(event.ranks)))

    def on_captures(self, captures: list[forensics_pb2.Capture]) -> None:
        """Captures from the tree (called under the node's lock: only queued here)."""
        for capture in captures:
            self._put(("capture", capture, self.clock()))

    def ask(self, job: str, ranks: Iterable[int], reason: str = "on demand", wait_s: float = 5.0) -> str:
        """An on-demand capture of `ranks` of `job` (its scoped name, collectors/common/attempts.py); returns
        the request id once the request is recorded (so that reading it at once finds it) and sent down.
        Raises ValueError for a bad request, `Busy` (capture_limits.py) when it must wait."""
        request_id = "od-" + secrets.token_hex(6)
        ranks = sorted({int(r) for r in ranks})
        if not ranks or len(ranks) > self.max_ranks:
            raise ValueError(f"name 1 to {self.max_ranks} ranks, got {len(ranks)}")
        self.limits.admit(job, ranks, request_id, time.monotonic())
        recorded = threading.Event()
        self._put(("ask", job, request_id, ranks, reason, None, None, recorded))
        if not recorded.wait(wait_s):
            raise TimeoutError(f"the root's forensics worker did not take the request within {wait_s:g} s")
        return request_id

    def keep(self, job: str, event_id: int, reason: str, captures: list[forensics_pb2.Capture]) -> None:
        """An event's captures taken without asking anyone (a crash's last words): kept as its request's."""
        self._put(("keep", job, event_id, reason, captures))

    def _put(self, item: tuple) -> None:
        try:
            self._work.put_nowait(item)
        except queue.Full:
            self.counts["dropped"] += 1

    # ----------------------------------------------------------------- the worker
    def _run(self) -> None:
        while True:
            item = self._work.get()
            if item[0] == "stop":
                return
            try:
                if item[0] == "event":
                    self._event(*item[1:])
                elif item[0] == "ask":
                    self._ask(*item[1:])
                elif item[0] == "capture":
                    self._capture(*item[1:])
                elif item[0] == "keep":
                    self._keep(*item[1:])
            except Exception:
                log.exception("forensics: %s failed", item[0])

    def _event(self, job: str, event_id: int, kind: str, ranks: list[int]) -> None:
        request_id = f"event-{event_id}"
        asked = self._asked.get(request_id, BitMap())
        room = self.max_ranks - len(asked)
        new = [r for r in ranks if r not in asked][:max(0, room)]
        if new:
            self.limits.asked(job, new, request_id, time.monotonic())
            self._ask(job, request_id, new, kind, event_id, asked)

    def _ask(self, job: str, request_id: str, ranks: list[int], reason: str, event_id: int | None,
             before: BitMap | None, recorded: threading.Event | None = None) -> None:
        name, attempt = split(job)
        asked = BitMap(before or ()) | BitMap(ranks)
        self._asked[request_id] = asked
        while len(self._asked) > self.store.max_requests:
            del self._asked[next(iter(self._asked))]
        meta = self.store.meta(name, request_id) or {"request_id": request_id, "job": name, "attempt": attempt,
                                                    "event_id": event_id, "reason": reason, "asked_at": self.clock(),
                                                    "asks": []}
        meta["ranks"] = list(asked)
        meta["asks"].append({"ranks": ranks, "at": self.clock()})
        self.store.open_request(name, request_id, meta)
        if recorded is not None:
            recorded.set()
        request = forensics_pb2.CaptureRequest(request_id=request_id, job=name, attempt=attempt,
                                               ranks=BitMap(ranks).serialize(), reason=reason,
                                               max_bytes=self.max_bytes)
        routed = self.route([request])
        self.counts["requests"] += 1
        log.info("forensics: asked for a capture of ranks %s of %s (%s)", ranks, job, reason)
        for rank in BitMap(ranks) - routed:  # nobody to ask: said at once, not waited for
            self._capture(forensics_pb2.Capture(
                request_id=request_id, job=name, attempt=attempt, rank=rank, captured_at_ns=time.time_ns(),
                source="none", reason=reason, error="no child of the root covers this rank (not connected, "
                                                    "finished, or not a rank of the job)"), self.clock())

    def _keep(self, job: str, event_id: int, reason: str, captures: list[forensics_pb2.Capture]) -> None:
        name, attempt = split(job)
        request_id = f"event-{event_id}"
        meta = self.store.meta(name, request_id) or {"request_id": request_id, "job": name, "attempt": attempt,
                                                    "event_id": event_id, "reason": reason, "asked_at": self.clock(),
                                                    "asks": []}
        new = [c.rank for c in captures if c.rank not in meta.get("ranks", [])]
        if not new:
            return
        meta["ranks"] = sorted(set(meta.get("ranks", [])) | set(new))
        meta["asks"].append({"ranks": new, "at": self.clock()})
        self.store.open_request(name, request_id, meta)
        for capture in captures:
            if capture.rank in new:
                self._capture(capture, self.clock())

    def _capture(self, capture: forensics_pb2.Capture, received: float) -> None:
        job = capture.job  # directories are by the job's name: request ids are unique across its attempts
        meta = self.store.meta(job, capture.request_id) if REQUEST_ID.fullmatch(capture.request_id) else None
        if meta is None:
            self.counts["unknown"] += 1
            return
        if capture.rank not in meta.get("ranks", ()):  # a rank never asked: nobody's answer, kept nowhere
            self.counts["unasked"] += 1
            log.warning("forensics: refused a capture of rank %d for %s, which did not ask for it", capture.rank,
                        capture.request_id)
            return
        asked_at = next((a["at"] for a in meta.get("asks", ()) if capture.rank in a["ranks"]), meta["asked_at"])
        try:
            record, dump = self._record(capture, received, asked_at)
            stored = self.store.save(record, dump)
        except Exception as exc:  # malformed beyond what _record survives: answered with its error, never pending
            self.counts["malformed"] += 1
            log.warning("forensics: the capture of rank %d for %s could not be stored whole: %s", capture.rank,
                        capture.request_id, exc)
            record = {"request_id": capture.request_id, "job": capture.job, "attempt": capture.attempt,
                      "rank": capture.rank, "host": capture.host, "captured_at": capture.captured_at_ns / 1e9,
                      "stored_at": received, "seconds_to_store": round(received - asked_at, 3),
                      "source": capture.source, "reason": capture.reason, "stacks": "", "flight_recorder": None,
                      "process": None, "bytes": capture.ByteSize(),
                      "error": f"{capture.error} [not stored whole: {type(exc).__name__}: {str(exc)[:200]}]"}
            stored = self.store.save(record, None)
        if stored:
            self.counts["captures"] += 1
            self.latencies = (self.latencies + [received - asked_at])[-1000:]
            self.limits.stored(scoped(job, int(meta.get("attempt") or 0)), capture.rank, capture.request_id)

    def _record(self, capture: forensics_pb2.Capture, received: float,
                asked_at: float) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The capture as stored, and its flight recorder in torchfrtrace's layout when it has one."""
        error = capture.error
        fr = _parse_json(capture.flight_recorder)
        record = {"request_id": capture.request_id, "job": capture.job, "attempt": capture.attempt,
                  "rank": capture.rank, "host": capture.host,
                  "captured_at": capture.captured_at_ns / 1e9, "stored_at": received,
                  "seconds_to_store": round(received - asked_at, 3), "source": capture.source,
                  "reason": capture.reason, "error": error, "stacks": capture.stacks,
                  "flight_recorder": fr, "process": _parse_json(capture.process),
                  "bytes": capture.ByteSize()}
        dump = None
        if isinstance(fr, dict) and isinstance(fr.get("entries"), list):
            config = fr.get("pg_config") or {}
            if all(isinstance(e, dict) for e in fr["entries"]) and isinstance(config, dict) and all(
                    isinstance(value, dict) for value in config.values()):
                dump = {"version": fr.get("version", ""), "pg_config": _pg_config(fr),
                        "pg_status": fr.get("pg_status") or {}, "entries": fr["entries"]}
            else:
                record["error"] = (error + " [flight recorder malformed (its entries or pg_config are not "
                                   "objects): kept as JSON only, not written for torchfrtrace]").strip()
        elif fr is not None and (not isinstance(fr, dict) or list(fr) == ["unparsed"]):
            record["error"] = (error + " [flight recorder malformed: not a JSON object]").strip()
        return record, dump

    # ----------------------------------------------------------------- reading (the API's threads)
    def answer(self, job: str, request_id: str) -> dict[str, Any] | None:
        """Everything kept for one request: who was asked, what came back, who has not answered yet."""
        try:
            meta = self.store.meta(job, request_id)
        except ValueError:
            return None
        if meta is None:
            return None
        captures = self.store.captures(job, request_id)
        answered = {c["rank"] for c in captures}
        return {**meta, "pending": [r for r in meta.get("ranks", []) if r not in answered],
                "fr_dir": str(self.store.fr_dir(job, request_id)) if any(c.get("flight_recorder")
                                                                          for c in captures) else None,
                "captures": captures}


def _pg_config(fr: dict[str, Any]) -> dict[str, Any]:
    """The dump's pg_config, keyed the way its entries name their group, so that torchfrtrace can match them.

    torch 2.13 with gloo writes the default group's config under the key "" (name "", desc "") while its
    entries say process_group ["0", "default_pg"]; the analyzer then fails with KeyError ('0', rank). A lone
    config keyed "" is re-keyed by the name the entries use (the dump as captured stays in the JSON)."""
    config = dict(fr.get("pg_config") or {})
    names = {tuple(e["process_group"][:2]) for e in fr["entries"]
             if isinstance(e, dict) and isinstance(e.get("process_group"), list) and len(e["process_group"]) >= 2
             and all(isinstance(n, str) for n in e["process_group"][:2])}
    if list(config) == [""] and len(names) == 1:
        name, desc = next(iter(names))
        config = {name: {**config[""], "name": name, "desc": desc}}
    return config


def _parse_json(text: str) -> Any:
    if not text:
        return None
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # 100k-deep nesting raises RecursionError, not ValueError
        return {"unparsed": text[:1000]}


class ForensicsMetrics(Collector):
    """A Prometheus collector: what became of the captures that reached the root, and the on-demand requests
    its limits refused (docs/forensics.md)."""

    def __init__(self, forensics: Forensics) -> None:
        self.forensics = forensics

    def collect(self) -> Iterable[CounterMetricFamily]:
        captures = CounterMetricFamily(
            "telemetry_forensics_captures", "Captures that reached the root, by outcome (stored; unknown: no such "
            "request; unasked: a rank the request did not name; malformed: stored with its error only; dropped: "
            "the worker's queue was full).", labels=["outcome"])
        counts = dict(self.forensics.counts)
        for outcome, key in (("stored", "captures"), ("unknown", "unknown"), ("unasked", "unasked"),
                             ("malformed", "malformed"), ("dropped", "dropped")):
            captures.add_metric([outcome], counts[key])
        refused = CounterMetricFamily(
            "telemetry_forensics_refused_requests", "On-demand capture requests refused with 429, by why "
            "(job_rate, rank_rate, in_flight).", labels=["reason"])
        for reason, count in sorted(self.forensics.limits.refused.items()):
            refused.add_metric([reason], count)
        trimmed = CounterMetricFamily("telemetry_forensics_trimmed_captures", "Captures kept without their stacks "
                                      "and flight recorder: over the request's or the job's byte budget on disk.")
        trimmed.add_metric([], self.forensics.store.trimmed)
        return [captures, refused, trimmed]

