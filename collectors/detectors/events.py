"""Events the detectors raise, their lifecycle, their table in the root's SQLite file, and where they go.

An event is `{kind, job, step, time, ranks, hosts, detail, severity}` plus its lifecycle: it is *opened*
the first time a detector raises it, *updated* (same row, same id) while the condition holds, and
*closed* when the condition clears. Identity is (job, kind, key): `key` separates independent events
of one kind in one job (a hardware rule name, for instance); most detectors use "". So a straggler
that lasts 500 steps is one event, updated 500 times, not 500 events.

Every change is written to the `events` table of the root's database (its own connection; the file
is already in WAL mode) and handed to the sinks: callables `sink(action, event)` with action one of
"open", "update", "close" (the sinks themselves, webhook and Grafana, are collectors/detectors/sinks.py).
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from collectors.common.attempts import like_prefix
from collectors.common.rows import CACHE_KIB

log = logging.getLogger(__name__)

SEVERITIES = ("info", "warning", "critical")
KINDS = ("straggler", "loss_spike", "nonfinite", "hang", "mfu_drop", "dataloader_stall", "hardware", "restart",
         "collective_mismatch", "crash", "cpu_starved")
MAX_LISTED_RANKS = 64  # ranks named on one event (the detail may say how many there were in all)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    status TEXT NOT NULL,              -- open | closed
    severity TEXT NOT NULL,
    step INTEGER, last_step INTEGER,   -- where it started; the latest step it was updated at
    time REAL NOT NULL,                -- unix seconds the condition started
    updated REAL NOT NULL, closed REAL,
    updates INTEGER NOT NULL,
    ranks TEXT NOT NULL, hosts TEXT NOT NULL, detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_job ON events (job, id);
CREATE INDEX IF NOT EXISTS events_open ON events (status) WHERE status = 'open';
"""


@dataclass
class Event:
    kind: str
    job: str
    step: int | None
    time: float
    ranks: list[int]
    hosts: list[str]
    detail: dict[str, Any]
    severity: str
    key: str = ""
    id: int | None = None
    status: str = "open"
    last_step: int | None = None
    updated: float = 0.0
    closed: float | None = None
    updates: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


Sink = Callable[[str, Event], None]


@runtime_checkable
class CountingSink(Protocol):
    """A sink that counts what became of the events handed to it (collectors/detectors/sinks.py QueuedSink)."""

    sent: int
    failed: int
    dropped: int


def _json_default(value: Any) -> object:
    try:
        return float(value)  # numpy scalars and the like
    except (TypeError, ValueError):
        return str(value)


def dumps(value: object) -> str:
    """An event's field (or a sink's body) as compact JSON; numpy numbers as Python's, NaN refused."""
    return json.dumps(value, default=_json_default, allow_nan=False, separators=(",", ":"))


def clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf become None (SQLite and strict JSON readers refuse them)."""
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


class EventLog:
    """Opens, updates and closes events; persists every change; feeds the sinks. Thread-safe."""

    def __init__(self, db_path: Path | str | None = None, sinks: Iterable[Sink] = (),
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.sinks: list[Sink] = list(sinks)
        self._lock = threading.RLock()
        target = str(db_path) if db_path is not None else ":memory:"
        self._db = sqlite3.connect(target, check_same_thread=False, isolation_level=None, timeout=10.0)
        self._db.row_factory = sqlite3.Row
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")  # bounded like the store's (collectors/common/rows.py)
        if db_path is not None:
            self._db.execute("PRAGMA journal_mode=WAL")  # already on for the root's file; harmless
            self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._open: dict[tuple[str, str, str], Event] = {}
        # Events ever opened per (job, kind), for the jobs this root knows now: a job's entries go when it
        # finishes (close_job), and a job not seen since a restart is counted from the table when it is (so
        # memory does not grow with the number of jobs ever run, and a count survives a restart exactly).
        self._totals: dict[tuple[str, str], int] = {}
        self._closed = False
        for row in self._db.execute("SELECT * FROM events WHERE status='open'"):
            event = _from_row(row)
            self._open[(event.job, event.kind, event.key)] = event
        for job in {job for job, _, _ in self._open}:
            self._load_totals(job)

    # ------------------------------------------------------------------ lifecycle
    def raise_(self, kind: str, job: str, *, step: int | None, ranks: Iterable[int] = (),
               hosts: Iterable[str] = (), detail: dict[str, Any] | None = None, severity: str = "warning",
               key: str = "", time: float | None = None) -> tuple[Event, bool]:
        """Open the event (job, kind, key), or update it if it is open. Returns (event, opened)."""
        if severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {severity!r}")
        now = self.clock()
        ranks = sorted({int(r) for r in ranks})[:MAX_LISTED_RANKS]
        hosts = sorted({str(h) for h in hosts if h})
        detail = clean(dict(detail or {}))
        with self._lock:
            current = self._open.get((job, kind, key))
            if current is None:
                event = Event(kind, job, step, now if time is None else time, ranks, hosts, detail, severity, key,
                              last_step=step, updated=now)
                self._insert(event)
                self._open[(job, kind, key)] = event
                if (job, kind) not in self._totals:
                    self._load_totals(job)  # this one included: it is in the table now
                else:
                    self._totals[(job, kind)] += 1
                action = "open"
            else:
                event = current
                changed = (ranks != event.ranks or hosts != event.hosts or detail != event.detail
                           or severity != event.severity or (step is not None and step != event.last_step))
                if not changed:
                    return event, False
                event.ranks, event.hosts, event.detail = ranks, hosts, detail
                event.severity = _worse(event.severity, severity)
                if step is not None:
                    event.last_step = step if event.last_step is None else max(event.last_step, step)
                event.updated = now
                event.updates += 1
                self._write(event)
                action = "update"
        self._emit(action, event)
        return event, action == "open"

    def clear(self, kind: str, job: str, key: str = "", *, step: int | None = None,
              detail: dict[str, Any] | None = None) -> Event | None:
        """Close the event (job, kind, key) if it is open; returns it, or None."""
        with self._lock:
            event = self._open.pop((job, kind, key), None)
            if event is None:
                return None
            now = self.clock()
            event.status, event.closed, event.updated = "closed", now, now
            if step is not None:
                event.detail = {**event.detail, "cleared_at_step": step}
            if detail:
                event.detail = {**event.detail, **clean(detail)}
            self._write(event)
        self._emit("close", event)
        return event

    def close_job(self, job: str) -> None:
        """The job finished: close whatever of it is still open (its history stays in the table), and forget
        its counts (read back from the table should the job come back)."""
        for event in self.open_events(job):
            self.clear(event.kind, job, event.key, detail={"closed_because": "job finished"})
        with self._lock:
            for key in [key for key in self._totals if key[0] == job]:
                del self._totals[key]

    def _load_totals(self, job: str) -> None:
        """The job's counts per kind, from the table (the caller holds the lock)."""
        for kind, n in self._db.execute("SELECT kind, count(*) FROM events WHERE job = ? GROUP BY kind", (job,)):
            self._totals[(job, kind)] = n

    def get_open(self, kind: str, job: str, key: str = "") -> Event | None:
        with self._lock:
            return self._open.get((job, kind, key))

    def open_events(self, job: str | None = None, kind: str | None = None) -> list[Event]:
        with self._lock:
            return [e for (j, k, _), e in self._open.items() if (job is None or j == job)
                    and (kind is None or k == kind)]

    def active_counts(self) -> dict[tuple[str, str], int]:
        counts: dict[tuple[str, str], int] = {}
        with self._lock:
            for (job, kind, _), _event in self._open.items():
                counts[(job, kind)] = counts.get((job, kind), 0) + 1
        return counts

    def totals(self) -> dict[tuple[str, str], int]:
        """Events ever opened, per (job, kind), since the database was created: for the jobs with an event
        open or raised since the root started, until they finish."""
        with self._lock:
            return dict(self._totals)

    def jobs(self) -> set[str]:
        with self._lock:
            return {job for job, _ in self._totals}

    def query(self, job: str | None = None, *, kind: str | None = None, status: str | None = None,
              since_id: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        """Stored events, oldest first (the newest `limit` of those matching)."""
        clauses: list[str] = ["id > ?"]
        args: list[int | str] = [since_id]
        if job is not None:  # the job under any of its attempts (scoped names: collectors/common/attempts.py)
            clauses.append("(job = ? OR substr(job, 1, ?) = ?)")
            args += [job, len(like_prefix(job)), like_prefix(job)]
        for column, value in (("kind", kind), ("status", status)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        sql = f"SELECT * FROM events WHERE {' AND '.join(clauses)} ORDER BY id DESC LIMIT ?"
        with self._lock:
            rows = self._db.execute(sql, (*args, limit)).fetchall()
        return [_from_row(row).to_dict() for row in reversed(rows)]

    def close(self, timeout: float = 2.0) -> None:
        """Stop: the sinks deliver what they have queued (within `timeout` in all; what cannot go in time is
        counted as dropped), then the table is closed."""
        deadline = time.monotonic() + timeout
        for sink in list(self.sinks):
            shutdown = getattr(sink, "shutdown", None)
            if shutdown is not None:
                try:
                    shutdown(max(0.0, deadline - time.monotonic()))
                except Exception:
                    log.exception("event sink %r failed to shut down", sink)
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def sink_counts(self) -> list[tuple[str, int, int, int]]:
        """(sink, sent, failed, dropped) of each queued sink, for /metrics; `sink` is its class and position."""
        counted: list[tuple[str, int, int, int]] = []
        for index, sink in enumerate(self.sinks):
            if isinstance(sink, CountingSink):
                counted.append((f"{type(sink).__name__}:{index}", sink.sent, sink.failed, sink.dropped))
        return counted

    # ------------------------------------------------------------------ storage
    def _insert(self, event: Event) -> None:
        cursor = self._db.execute(
            "INSERT INTO events (job, kind, key, status, severity, step, last_step, time, updated, closed, updates, "
            "ranks, hosts, detail) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (event.job, event.kind, event.key, event.status, event.severity, event.step, event.last_step,
             event.time, event.updated, event.closed, event.updates, dumps(event.ranks), dumps(event.hosts),
             dumps(event.detail)))
        event.id = cursor.lastrowid

    def _write(self, event: Event) -> None:
        self._db.execute(
            "UPDATE events SET status=?, severity=?, last_step=?, updated=?, closed=?, updates=?, ranks=?, hosts=?, "
            "detail=? WHERE id=?",
            (event.status, event.severity, event.last_step, event.updated, event.closed, event.updates,
             dumps(event.ranks), dumps(event.hosts), dumps(event.detail), event.id))

    def _emit(self, action: str, event: Event) -> None:
        for sink in self.sinks:
            try:
                sink(action, event)
            except Exception:
                log.exception("event sink %r failed", sink)


def _worse(a: str, b: str) -> str:
    return a if SEVERITIES.index(a) >= SEVERITIES.index(b) else b


def _from_row(row: sqlite3.Row) -> Event:
    return Event(kind=row["kind"], job=row["job"], step=row["step"], time=row["time"],
                 ranks=json.loads(row["ranks"]), hosts=json.loads(row["hosts"]), detail=json.loads(row["detail"]),
                 severity=row["severity"], key=row["key"], id=row["id"], status=row["status"],
                 last_step=row["last_step"], updated=row["updated"], closed=row["closed"], updates=row["updates"])
