"""Remote-write across a crash of the root: the store is the write-ahead log, a watermark says how far it went.

The root's SQLite store already holds every finalised window, summary included. `RemoteWriter` records,
per commit handed to it, how many samples each of its shards had taken; once every shard has resolved those
(sent, or dropped for a reason that is final: queue_full, rejected, retries_exhausted), the commit's latest
`finalised_ns` is the watermark, kept in a small file beside the database. A root that starts again reads it
and hands the writer the windows finalised after it, from the store, before anything new: what a crash (or a
stop that ran out of time with the receiver down) left unsent is sent then. A sample sent twice is harmless:
the store holds the same value at the same time already.

    mark = Watermark(Path("telemetry-root.db-remote-write.json"))
    mark.load()            # None: never written (a first start replays nothing: the history is not re-sent)
    rows, skipped = rows_after(db, mark_ns, limit)

Only step windows and 1 s buckets (hardware) are read back; late deltas are not (as when live).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
from pathlib import Path

from collectors.common.keys import Key
from collectors.common.rows import Row
from telemetry.summary import Summary

log = logging.getLogger(__name__)

WIDTHS = (0, 1000)  # step windows and the 1 s buckets hardware readings go into


class Watermark:
    """The file holding the latest finalised_ns every endpoint resolved: {"finalised_ns": N}."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._failed = False

    def load(self) -> int | None:
        """The watermark; None when there is no file (a first start); 0 when it cannot be read (then the newest
        windows within the queue's bound are sent again, rather than what was unsent lost)."""
        try:
            return int(json.loads(self.path.read_text())["finalised_ns"])
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("remote-write: cannot read %s (%s): the newest windows are sent again", self.path, exc)
            return 0

    def save(self, finalised_ns: int) -> None:
        """Atomically (a rename); a failure is logged once and otherwise ignored (replay is best effort)."""
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"finalised_ns": finalised_ns}))
            os.replace(tmp, self.path)
            self._failed = False
        except OSError as exc:
            if not self._failed:
                log.warning("remote-write: cannot write %s (%s): a restart may not resend what was queued",
                            self.path, exc)
            self._failed = True


def latest(db: sqlite3.Connection) -> int:
    """The latest finalised_ns of any window replay would read (0: none)."""
    found = [db.execute("SELECT max(finalised_ns) FROM windows WHERE width_ms=?", (width,)).fetchone()[0]
             for width in WIDTHS]
    return max((int(f) for f in found if f is not None), default=0)


def rows_after(db: sqlite3.Connection, after_ns: int, limit: int) -> tuple[list[Row], int]:
    """The windows finalised after `after_ns` (not late deltas), oldest first: the newest `limit` of them, and
    how many older ones were left out."""
    rows: list[tuple[int, Row]] = []
    total = 0
    for width in WIDTHS:
        total += int(db.execute("SELECT count(*) FROM windows WHERE width_ms=? AND finalised_ns>? AND late=0",
                                (width, after_ns)).fetchone()[0])
        for job, metric, idx, expected, late, finalised, blob in db.execute(
                "SELECT job, metric, idx, expected, late, finalised_ns, summary FROM windows "
                "WHERE width_ms=? AND finalised_ns>? AND late=0 ORDER BY finalised_ns DESC LIMIT ?",
                (width, after_ns, limit)):
            rows.append((int(finalised), Row(Key(str(job), str(metric), int(idx), width), int(expected),
                                             Summary.from_bytes(bytes(blob)), int(late), int(finalised))))
    rows.sort(key=lambda item: item[0])
    kept = [row for _, row in rows[-limit:]] if limit else []
    return kept, total - len(kept)
