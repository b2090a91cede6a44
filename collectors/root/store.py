"""The root's store: finalised windows (scalar figures and sketch bytes) in SQLite, WAL mode.

The root acknowledges DURABLE only after the transaction holding a window
commits, so "durable" means "in this file". Rows are reloaded on restart so
a resend of something already persisted is recognised as a duplicate.
"""

from __future__ import annotations

import itertools
import json
import math
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from pyroaring import BitMap

from collectors.common.keys import Key
from telemetry.summary import Summary

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
CREATE TABLE IF NOT EXISTS jobs (job TEXT PRIMARY KEY, world_size INTEGER NOT NULL, first_seen_ns INTEGER NOT NULL);
"""

MISSING_LISTED = 1024  # at most this many missing ranks are listed per row (the count is always exact)


@dataclass
class Row:
    key: Key
    expected: int
    summary: Summary
    late: int
    finalised_ns: int


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def figures(summary: Summary, expected: int) -> dict[str, object]:
    """The scalar figures served per window (the API's per-step fields)."""
    sources = summary.sources
    missing = BitMap()
    if expected:
        missing.add_range(0, expected)
        missing -= sources
    listed = list(itertools.islice(missing, MISSING_LISTED))
    p50, p90, p99, p999 = summary.quantiles(QUANTILES)
    return {
        "count": summary.count, "sources": len(sources), "missing": listed,
        "mean": _num(summary.mean), "stddev": _num(summary.stddev),
        "min": _num(summary.min), "argmin": summary.argmin, "max": _num(summary.max), "argmax": summary.argmax,
        "top": [[v, s] for v, s in summary.top()],
        "p50": _num(p50), "p90": _num(p90), "p99": _num(p99), "p999": _num(p999),
        "nonfinite_count": summary.nonfinite_count, "nonfinite_sources": list(summary.nonfinite_sources),
    }


class Store:
    """Thread-safe: one writer connection under a lock; readers open their own."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)

    def save(self, rows: list[Row], jobs: dict[str, int]) -> None:
        """Persist rows (replacing earlier versions of the same windows) in one transaction."""
        records = []
        for row in rows:
            fig = figures(row.summary, row.expected)
            records.append((
                row.key.job, row.key.metric, row.key.index, row.key.width_ms, row.expected, fig["count"],
                fig["sources"], json.dumps(fig["missing"]), fig["mean"], fig["stddev"], fig["min"], fig["argmin"],
                fig["max"], fig["argmax"], json.dumps(fig["top"]), fig["p50"], fig["p90"], fig["p99"], fig["p999"],
                fig["nonfinite_count"], json.dumps(fig["nonfinite_sources"]), row.late,
                row.summary.last_time_ns, row.finalised_ns, row.summary.to_bytes()))
        with self._lock:
            self._db.execute("BEGIN")
            try:
                self._db.executemany(
                    "INSERT OR REPLACE INTO windows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", records)
                for job, world in jobs.items():
                    self._db.execute("INSERT INTO jobs VALUES (?,?,strftime('%s','now')*1000000000) "
                                     "ON CONFLICT(job) DO UPDATE SET world_size=max(world_size, excluded.world_size)",
                                     (job, world))
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def load(self, key: Key) -> Row | None:
        with self._lock:
            found = self._db.execute(
                "SELECT expected, summary, late, finalised_ns FROM windows WHERE job=? AND metric=? AND width_ms=? AND idx=?",
                (key.job, key.metric, key.width_ms, key.index)).fetchone()
        if found is None:
            return None
        return Row(key, found[0], Summary.from_bytes(found[1]), found[2], found[3])

    def reader(self) -> sqlite3.Connection:
        db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
        db.row_factory = sqlite3.Row
        return db

    def close(self) -> None:
        with self._lock:
            self._db.close()
