"""The root's store: finalised windows (scalar figures and sketch bytes) in SQLite, WAL mode.

The root acknowledges DURABLE only after the transaction holding a window
commits, so "durable" means "in this file". Rows are reloaded on restart so
a resend of something already persisted is recognised as a duplicate.

What DURABLE promises depends on `sync` (`--durability`): "process" (SQLite synchronous=NORMAL, the
default) survives a crash of the root process but the last transactions may be lost to a power failure
or kernel crash; "power" (synchronous=FULL) fsyncs every commit and survives those too, at the cost
measured in bench/store_sync.py. A file deleted or replaced under the running root is noticed before
each commit (`StoreLost`): the store reopens a fresh file at the path and the root writes again what
it still holds in memory.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.common.rows import CACHE_KIB, Row
from collectors.delivery.runs import Claim
from telemetry.summary import Summary, _native

QUANTILES = (0.5, 0.9, 0.99, 0.999)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS windows (
    job TEXT NOT NULL, metric TEXT NOT NULL, idx INTEGER NOT NULL, width_ms INTEGER NOT NULL,
    expected INTEGER NOT NULL, count INTEGER NOT NULL, sources INTEGER NOT NULL, missing TEXT NOT NULL,
    mean REAL, stddev REAL, min REAL, argmin INTEGER, max REAL, argmax INTEGER, top TEXT NOT NULL,
    p50 REAL, p90 REAL, p99 REAL, p999 REAL,
    nonfinite_count INTEGER NOT NULL, nonfinite_sources TEXT NOT NULL,
    late INTEGER NOT NULL, last_time_ns INTEGER NOT NULL, finalised_ns INTEGER NOT NULL,
    summary BLOB NOT NULL,
    PRIMARY KEY (job, metric, width_ms, idx)
);
CREATE INDEX IF NOT EXISTS windows_by_age ON windows (width_ms, idx);
CREATE INDEX IF NOT EXISTS windows_by_finalised ON windows (width_ms, finalised_ns);
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value INTEGER NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, world_size INTEGER NOT NULL, first_seen_ns INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS late_rollups (
    job TEXT NOT NULL, metric TEXT NOT NULL, idx INTEGER NOT NULL, width_ms INTEGER NOT NULL,
    PRIMARY KEY (job, metric, width_ms, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS runs (
    job TEXT NOT NULL, rank INTEGER NOT NULL, process INTEGER NOT NULL, host TEXT NOT NULL,
    PRIMARY KEY (job, rank)
) WITHOUT ROWID;
-- each step's end (the latest last_time_ns over its metrics), whether a window of it held every rank and when the
-- root finalised it (its clock: what retention ages it by, as the blocks), kept when its raw step windows roll into
-- blocks, for goodput (collectors/root/goodput.py, retention.py `_roll_steps`)
CREATE TABLE IF NOT EXISTS step_ends (
    job TEXT NOT NULL, idx INTEGER NOT NULL, end_ns INTEGER NOT NULL, complete INTEGER NOT NULL,
    finalised_ns INTEGER NOT NULL,
    PRIMARY KEY (job, idx)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS step_ends_by_age ON step_ends (finalised_ns);
-- jobs with run claims but no window and no jobs row, since when (collectors/root/retention.py `_forget_unstored`)
CREATE TABLE IF NOT EXISTS unstored_claims (job TEXT PRIMARY KEY, since_ns INTEGER NOT NULL) WITHOUT ROWID;
-- the attempts adopted as their job's latest, in the order they were (collectors/root/adoption.py)
CREATE TABLE IF NOT EXISTS adopted (job TEXT PRIMARY KEY, adopted_ns INTEGER NOT NULL);
"""

SYNC_MODES = {"process": "NORMAL", "power": "FULL"}
SECOND_MS, MINUTE_MS = 1000, 60_000


def rolled_mark(width_ms: int) -> str:
    """The meta row holding how far windows are rolled up into `width_ms` ones (collectors/root/retention.py)."""
    return f"rolled:{width_ms}"
WAL_LIMIT_BYTES = 64 << 20  # the write-ahead log is truncated back to this after a checkpoint
# `Row` and the page cache bound `CACHE_KIB` are in collectors/common/rows.py: the detectors and the event log use
# them too, and import nothing of the root.


class StoreLost(OSError):
    """The store's file was deleted or replaced under it."""


MISSING_LISTED = 1024  # at most this many missing ranks are listed per row (the count is always exact)


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _pairs_json(pairs: list[tuple[float, int]]) -> str:
    """json.dumps(pairs), the same text, written natively: Python's float repr was ~7,000 instructions a value, the
    `top` column's JSON ~80,000 a window on the root's flush thread (docs/scale.md)."""
    if not pairs:
        return "[]"
    text = _native.pairs_json(pairs)
    return json.dumps(pairs) if text is None else text


def _record(row: Row) -> tuple:
    """One window's row as stored: its key, the scalar figures served per window (the API's per-step fields), its
    summary's bytes. Once per window and commit on the root's flush thread, so the cheap forms are taken where the
    figure is the same: a window whose sources hold all of [0, expected) misses none (counted, not a bitmap of the
    range built and subtracted), and an empty list is stored as "[]" without the JSON encoder."""
    key, summary, expected = row.key, row.summary, row.expected
    sources = summary.sources
    missing = "[]"
    if expected and sources.range_cardinality(0, expected) != expected:
        gaps = BitMap()
        gaps.add_range(0, expected)
        gaps -= sources
        missing = json.dumps(list(itertools.islice(gaps, MISSING_LISTED)))
    top = summary.top()
    nonfinite = summary.nonfinite_sources
    p50, p90, p99, p999 = summary.quantiles(QUANTILES)
    return (key.job, key.metric, key.index, key.width_ms, expected, summary.count, len(sources), missing,
            _num(summary.mean), _num(summary.stddev), _num(summary.min), summary.argmin, _num(summary.max),
            summary.argmax, _pairs_json(top), _num(p50), _num(p90), _num(p99), _num(p999),
            summary.nonfinite_count, json.dumps(list(nonfinite)) if nonfinite else "[]", row.late,
            summary.last_time_ns, row.finalised_ns, summary.to_bytes())


INSERT_WINDOW = "INSERT OR REPLACE INTO windows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"


def _records(rows: list[Row]) -> list[tuple]:
    return [_record(row) for row in rows]


class Store:
    """Thread-safe: one writer connection under a lock; readers open their own.

    The intake's reads (`load_many`, `load_runs`, `highest_index`: windows to reload, run claims to recall) go
    through one more connection of the store's own, `_reads` under `_reads_lock`: in WAL mode a reader does not
    wait for the writer, so a read asked during a slow commit (`--durability power` on a slow disk) is answered
    from the last committed state at once instead of queueing behind the commit on the writer's lock
    (docs/delivery.md, "Store reads off the node's lock").
    """

    def __init__(self, path: Path, sync: str = "process") -> None:
        if sync not in SYNC_MODES:
            raise ValueError(f"durability must be one of {sorted(SYNC_MODES)}, got {sync!r}")
        self.path = Path(path)
        self.sync = sync
        self._lock = threading.Lock()
        self._reads_lock = threading.Lock()
        self._open()

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        # A new file gives freed pages back to the file system (Store.reclaim); an old one reuses them.
        self._db.execute("PRAGMA auto_vacuum=INCREMENTAL")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(f"PRAGMA journal_size_limit={WAL_LIMIT_BYTES}")
        self._db.execute(f"PRAGMA synchronous={SYNC_MODES[self.sync]}")
        self._db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        self._db.executescript(_SCHEMA)
        self._inode = os.stat(self.path).st_ino
        with self._reads_lock:
            self._reads = self.reader()

    def check_file(self) -> None:
        """Raise StoreLost if the file this store writes is no longer the one at its path (deleted or
        replaced while open: SQLite would go on writing into an unlinked inode, and lose it all)."""
        try:
            inode = os.stat(self.path).st_ino
        except FileNotFoundError:
            raise StoreLost(f"{self.path} was deleted while the root was writing it") from None
        if inode != self._inode:
            raise StoreLost(f"{self.path} was replaced while the root was writing it")

    def reopen(self) -> None:
        """After StoreLost: a fresh file at the path (what was only in the lost file is gone)."""
        with self._lock:
            with self._reads_lock:  # a read under way finishes first (the reader then reads the fresh file)
                for db in (self._reads, self._db):  # the writer last (see close)
                    try:
                        db.close()
                    except sqlite3.Error:
                        pass
            self._open()

    def save(self, rows: list[Row], jobs: dict[str, int], runs: dict[str, dict[int, Claim]] | None = None) -> None:
        """Persist rows (replacing earlier versions of the same windows) in one transaction. A 1 s window of a
        minute already rolled up (late data: a part after its deadline, an outbox delivered after a long
        partition) marks that minute to be rolled up again (collectors/root/retention.py). `runs`: run claims
        (`save_runs`) written in the same transaction, so a claim is in the file before any window it let in is
        acknowledged durable."""
        records = _records(rows)
        seconds = [row.key for row in rows if row.key.width_ms == SECOND_MS]
        with self._lock:
            self.check_file()
            with self._committed() as db:
                db.executemany(INSERT_WINDOW, records)
                if seconds:
                    found = db.execute("SELECT value FROM meta WHERE name=?", (rolled_mark(MINUTE_MS),)).fetchone()
                    if found is not None:
                        db.executemany(
                            "INSERT OR IGNORE INTO late_rollups VALUES (?,?,?,?)",
                            [(k.job, k.metric, k.index - k.index % MINUTE_MS, MINUTE_MS) for k in seconds
                             if k.index < found[0]])
                for job, world in jobs.items():
                    db.execute("INSERT INTO jobs VALUES (?,?,strftime('%s','now')*1000000000) "
                               "ON CONFLICT(job) DO UPDATE SET world_size=max(world_size, excluded.world_size)",
                               (job, world))
                for job, claims in (runs or {}).items():
                    db.executemany("INSERT OR IGNORE INTO runs VALUES (?,?,?,?)", _claim_records(job, claims))

    # ------------------------------------------------------------ lifecycle (collectors/root/retention.py)
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """The writer connection in one transaction, under the store's lock (keep it short: intake waits)."""
        with self._lock, self._committed() as db:
            yield db

    @contextmanager
    def _committed(self) -> Iterator[sqlite3.Connection]:
        """The writer connection in one transaction: committed at the end, rolled back on any exception (a failed
        COMMIT included) and the exception raised on. The caller holds the store's lock."""
        self._db.execute("BEGIN")
        try:
            yield self._db
            self._db.execute("COMMIT")
        except BaseException:
            self._db.execute("ROLLBACK")
            raise

    @staticmethod
    def save_in(db: sqlite3.Connection, rows: list[Row]) -> None:
        """Rows written inside a `transaction`."""
        db.executemany(INSERT_WINDOW, _records(rows))

    def meta(self, name: str) -> int | None:
        with self._lock:
            found = self._db.execute("SELECT value FROM meta WHERE name=?", (name,)).fetchone()
        return None if found is None else int(found[0])

    @staticmethod
    def set_meta(db: sqlite3.Connection, name: str, value: int) -> None:
        db.execute("INSERT OR REPLACE INTO meta VALUES (?,?)", (name, value))

    def has_table(self, name: str) -> bool:
        with self._lock:
            return self._db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name=?",
                                    (name,)).fetchone() is not None

    def reclaim(self, pages: int = 2048) -> None:
        """Give up to `pages` free pages back to the file system (a file made with incremental auto-vacuum), a
        bounded step: what is left goes at the next call."""
        with self._lock:
            self._db.execute(f"PRAGMA incremental_vacuum({int(pages)})").fetchall()

    def save_runs(self, job: str, claims: dict[int, Claim]) -> None:
        """Which process first ran each of these ranks of `job` (RunLedger's record): kept as long as the job has
        a window in the file (collectors/root/retention.py forgets them with its last one), so that a later run
        reusing the job's name and attempt is refused even after every tier forgot the job.
        Digests are unsigned 64-bit; SQLite's integers are signed, so they are stored shifted by 2**63."""
        with self._lock:
            self._db.executemany("INSERT OR IGNORE INTO runs VALUES (?,?,?,?)", _claim_records(job, claims))

    def load_runs(self, job: str) -> dict[int, Claim]:
        """The processes recorded for `job` (RunLedger's recall), read on the reader connection."""
        with self._reads_lock:
            found = self._reads.execute("SELECT rank, process, host FROM runs WHERE job=?", (job,)).fetchall()
        return {rank: Claim(process + 2**63, host) for rank, process, host in found}

    def save_adopted(self, job: str, adopted_ns: int) -> None:
        """Attempt `job` (a scoped name) became its job's latest (collectors/root/adoption.py); kept as long as the
        file, so that the API's default views stay the same after a restart."""
        with self._lock:
            self._db.execute("INSERT OR IGNORE INTO adopted VALUES (?,?)", (job, adopted_ns))

    def load(self, key: Key) -> Row | None:
        return self.load_many([key]).get(key)

    def load_many(self, keys: list[Key]) -> dict[Key, Row]:
        """The stored rows of these windows (those the store holds), read on the reader connection: the last
        committed state, without waiting for a commit under way. The summaries are decoded after the read."""
        found = []
        with self._reads_lock:
            for key in keys:
                row = self._reads.execute(
                    "SELECT expected, summary, late, finalised_ns FROM windows"
                    " WHERE job=? AND metric=? AND width_ms=? AND idx=?",
                    (key.job, key.metric, key.width_ms, key.index)).fetchone()
                if row is not None:
                    found.append((key, row))
        return {key: Row(key, row[0], Summary.from_bytes(row[1]), row[2], row[3]) for key, row in found}

    def highest_index(self, job: str, metric: str, width_ms: int) -> int | None:
        """The highest window index stored for one series, or None (one index lookup on the reader connection)."""
        with self._reads_lock:
            found = self._reads.execute("SELECT max(idx) FROM windows WHERE job=? AND metric=? AND width_ms=?",
                                        (job, metric, width_ms)).fetchone()
        return None if found is None or found[0] is None else int(found[0])

    def reader(self) -> sqlite3.Connection:
        """A read-only connection (rows as sqlite3.Row, by index or name; SELECTs open no transaction): the caller's
        own to close, or the store's `_reads`."""
        # as_uri() quotes the path: a file named with '#', '?' or '%' is this file, not another one
        db = sqlite3.connect(f"{Path(self.path).resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        db.row_factory = sqlite3.Row
        db.execute(f"PRAGMA cache_size=-{CACHE_KIB}")
        return db

    def close(self) -> None:
        """The reader first: the last connection to close checkpoints the write-ahead log into the file (a copy of
        the file alone then holds everything), and a read-only one cannot."""
        with self._lock, self._reads_lock:
            self._reads.close()
            self._db.close()


def _claim_records(job: str, claims: dict[int, Claim]) -> list[tuple[str, int, int, str]]:
    """Digests are unsigned 64-bit; SQLite's integers are signed, so they are stored shifted by 2**63."""
    return [(job, rank, claim.process - 2**63, claim.host) for rank, claim in claims.items()]
