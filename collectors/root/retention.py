"""The root store's lifecycle (DESIGN §12, issue 28 item 3, docs/fleet.md "Retention"): retention per kind, and
rollups that merge summaries over time as the tree merges them over ranks and hosts.

* 1 s windows (hardware, heartbeats) roll up into 1 min windows (`width_ms` 60,000), and those into 1 h windows
  (3,600,000): the same table, the same columns, keys `(job, metric, start ms, width)`.
* Step windows older than `raw_steps_s` roll up into blocks of `step_block` steps (`width_ms` = -step_block,
  `idx` = the block's first step), merged into the block as they age out, then deleted. What goodput needs of
  each step (its end, whether a window of it held every rank: collectors/root/goodput.py) is kept first, one
  small row per step (`step_ends`), deleted by the blocks' rule (`step-blocks`, by the root's finalised time).
* Each kind is then deleted past its retention: raw seconds, minutes, hours, step blocks, closed events.
* A job none of whose windows is left any more (every kind holding it went past its retention) is forgotten: its
  run claims (the `runs` table: one row per rank, collectors/delivery/runs.py) and its `jobs` row. Until then the
  claims stay, so a stale second run of a finished attempt is refused while any of its windows could take its
  parts; after, such a run has no stored window to merge into (the root's ledger recalls no claim for it and takes
  it as a new run). The fleet's claims are not a job's: they go with their host index
  (collectors/root/host_indexes.py). Claims of a job that never had a window stored (its ranks claimed, then it
  ended before any window was finalised: no `jobs` row either) go once they were seen so for UNSTORED_CLAIMS_S
  (7 days), checked once an hour.

A rollup is `merge_over_time` of its members: count, sum, min/argmin, max/argmax, top-k/bottom-k (value,
source) and the sources bitmap stay exact (the k largest readings of the hour with their host and port; a
source may appear more than once, once per reading); quantiles keep the sketch's stated error. A second is
rolled up once it ended `settle_s` ago (past the root's `retain_s`), each rolled level only from a level already
complete.

Late data: a 1 s window written after its minute was rolled up (a part that came after the root forgot the window,
merged into its stored row; an outbox delivered after a partition longer than `settle_s`) is marked by the store
(`late_rollups`); the next sweep rolls that minute up again from its raw seconds, and the hour holding it from its
minutes, exactly as if the data had been on time. Raw windows are deleted in whole periods, so a period is either
entirely kept or entirely gone: data later than the raw retention of its kind (`seconds`, 1 h by default; the
minutes' `minutes` for an hour) cannot be merged exactly any more (a rollup cannot take a part out again, and the
root may still merge a later part into the same window) and is dropped: deleted, counted (`SweepStats.late_dropped`)
and logged (rate-limited).

All work runs on its own thread, in short transactions, each taking the store's lock only for itself: the intake's
commit waits for one of them at most, never for a whole sweep. Deletes (windows, events, run claims) and the
rolling of raw steps into blocks take at most `batch` rows a transaction; a late re-roll at most `batch` periods;
a rollup one whole period: every window of every series in that minute (or every minute in that hour) is read,
merged and written in one transaction, so its size grows with the number of series (fleet metrics and jobs' 1 s
metrics), not with hosts (a fleet window holds every host). Measured at 2,000 hosts' fleet layout (25 metrics, a
minute of 1 s windows rolled up; the review's script): the longest transaction held the lock 0.11 s; part 3 of
bench/fleet.py reports it for its week (`longest_lock_hold_s`). Deleted pages are reused
(and given back to the file system where the file was created with incremental auto-vacuum), so the file's
size is bounded by retention, not by uptime.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from collectors.common.rows import Row
from collectors.root.store import MINUTE_MS, SECOND_MS, Store, rolled_mark
from telemetry.names import FLEET_JOB
from telemetry.summary import Summary

log = logging.getLogger(__name__)

HOUR_MS = 3_600_000
__all__ = ["SECOND_MS", "MINUTE_MS", "HOUR_MS", "DAY_S", "RetentionConfig", "Retention", "SweepStats",
           "merge_over_time", "parse_duration", "store_bytes"]
DAY_S = 86_400.0
UNSTORED_CLAIMS_NS = 7 * 86_400 * 10**9  # claims of a job never stored go once noted this long ago
UNSTORED_CHECK_NS = 3600 * 10**9  # how often the sweep looks for them (a scan of the runs table's jobs)
MAX_DURATION_S = 36_500 * DAY_S  # 100 years: in nanoseconds well inside an int64 (and SQLite INTEGER)


@dataclass
class RetentionConfig:
    """How long each kind is kept, in seconds (`telemetry collector --retention KIND=DURATION`)."""

    seconds_s: float = 3600.0  # raw 1 s windows (hardware, heartbeats)
    minutes_s: float = 7 * DAY_S  # their 1 min rollups
    hours_s: float = 400 * DAY_S  # their 1 h rollups
    raw_steps_s: float = 7 * DAY_S  # step windows, raw
    step_blocks_s: float = 400 * DAY_S  # blocks of step_block steps
    events_s: float = 90 * DAY_S  # closed events (open ones are kept)
    step_block: int = 100
    settle_s: float = 600.0
    batch: int = 500
    every_s: float = 10.0
    enabled: bool = True

    KINDS = {"seconds": "seconds_s", "minutes": "minutes_s", "hours": "hours_s", "steps": "raw_steps_s",
             "step-blocks": "step_blocks_s", "events": "events_s"}

    def fleet_kept_s(self) -> float:
        """How long the store keeps any fleet window (raw seconds and their rollups): a host index unseen this long
        is held by no stored window (collectors/root/host_indexes.py); 0 when some kind is kept forever."""
        kept = (self.seconds_s, self.minutes_s, self.hours_s)
        return 0.0 if not self.enabled or not all(kept) else max(kept)

    def set(self, spec: str) -> None:
        """`KIND=DURATION`, e.g. `seconds=6h`, `steps=30d` (units s, m, h, d; `off` or 0: kept forever)."""
        kind, sep, value = spec.partition("=")
        if not sep or kind not in self.KINDS:
            raise ValueError(f"{spec!r}: expected KIND=DURATION with KIND one of {', '.join(self.KINDS)}")
        setattr(self, self.KINDS[kind], parse_duration(value))


def parse_duration(text: str) -> float:
    """Seconds in `text` (90s, 30m, 6h, 14d, 2w; a bare number is seconds); 0 for off/forever. Finite and at most
    MAX_DURATION_S: every duration becomes nanoseconds somewhere (a cutoff, a reuse horizon)."""
    text = text.strip().lower()
    if text in ("off", "forever", "0"):
        return 0.0
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": DAY_S, "w": 7 * DAY_S}
    scale = units.get(text[-1:], None)
    number = text[:-1] if scale is not None else text
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 30m, 6h, 14d)") from None
    if not value > 0:
        raise ValueError(f"{text!r}: a duration must be > 0 (or 'off')")
    if not value <= MAX_DURATION_S:  # inf, or past what a nanosecond clock (and SQLite's INTEGER) can hold
        raise ValueError(f"{text!r}: a duration must be at most {MAX_DURATION_S // DAY_S:.0f}d (keep forever: 'off')")
    return value


def merge_over_time(summaries: Sequence[Summary]) -> Summary:
    """One summary of several windows of the same metric over time (the same sources may recur, unlike a merge
    over ranks, where a shared source is an error). Merged in time order, so the result is deterministic."""
    if len(summaries) == 1:
        return summaries[0].copy()
    ordered = sorted(summaries, key=lambda s: (s.first_time_ns, s.last_time_ns, s.count))
    return Summary.merge_over_time(ordered)


@dataclass
class SweepStats:
    rolled: int = 0  # rollup rows written
    deleted: int = 0  # rows deleted (windows and events)
    sweeps: int = 0
    late_rerolled: int = 0  # rollups made again because late data reached their members
    late_dropped: int = 0  # raw windows that came later than their kind's retention: deleted, not rolled up
    seconds: float = 0.0  # wall time of the last sweep
    longest_hold_s: float = 0.0  # the longest one transaction held the store's lock (what intake may wait)
    jobs_forgotten: int = 0  # jobs with no window (left, or ever) whose run claims (and `jobs` row) were deleted


class Retention:
    """Runs `sweep` every `every_s` on a daemon thread."""

    def __init__(self, store: Store, config: RetentionConfig | None = None) -> None:
        self.store = store
        self.config = config or RetentionConfig()
        self.stats = SweepStats()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._late_log = RateLimitedLog(log)

    def start(self) -> None:
        if not self.config.enabled or self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="retention", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        while not self._stop.wait(self.config.every_s):
            try:
                self.sweep()
            except Exception:  # the store's own trouble is reported by the intake's commits; try again later
                log.exception("store retention sweep failed")

    # ------------------------------------------------------------------ one sweep
    def sweep(self, now_ns: int | None = None, max_batches: int = 200) -> SweepStats:
        """Roll up and delete what is due at `now_ns`, at most `max_batches` transactions (the rest next time)."""
        started = time.monotonic()
        now_ns = time.time_ns() if now_ns is None else now_ns
        now_ms = now_ns // 1_000_000
        c = self.config
        budget = [max_batches]
        settled_ms = now_ms - int(c.settle_s * 1000)
        self._roll_late(budget, now_ns)
        self._roll_time(SECOND_MS, MINUTE_MS, settled_ms, budget, now_ns)
        self._roll_time(MINUTE_MS, HOUR_MS, self._mark(rolled_mark(MINUTE_MS)) or 0, budget, now_ns)
        if c.raw_steps_s:
            self._roll_steps(now_ns - int(c.raw_steps_s * 1e9), budget, now_ns)
        for width, keep_s, rolled in ((SECOND_MS, c.seconds_s, MINUTE_MS), (MINUTE_MS, c.minutes_s, HOUR_MS),
                                      (HOUR_MS, c.hours_s, None)):
            if keep_s:
                cutoff = now_ms - int(keep_s * 1000)
                if rolled is not None:  # never delete what is not rolled up yet, and whole periods only
                    cutoff = min(cutoff, self._mark(rolled_mark(rolled)) or 0)
                    cutoff -= cutoff % rolled
                    if cutoff > (self._mark(f"deleted:{width}") or 0):
                        with self._transaction() as db:  # a late window below this can no longer be re-rolled
                            self.store.set_meta(db, f"deleted:{width}", cutoff)
                self._delete("DELETE FROM windows WHERE rowid IN (SELECT rowid FROM windows WHERE width_ms=? "
                             "AND idx<? LIMIT ?)", (width, cutoff), budget)
        if c.step_blocks_s:
            self._delete("DELETE FROM windows WHERE rowid IN (SELECT rowid FROM windows WHERE width_ms<0 "
                         "AND finalised_ns<? LIMIT ?)", (now_ns - int(c.step_blocks_s * 1e9),), budget)
            self._delete("DELETE FROM step_ends WHERE (job, idx) IN (SELECT job, idx FROM step_ends WHERE "
                         "finalised_ns<? LIMIT ?)", (now_ns - int(c.step_blocks_s * 1e9),), budget)
        if c.events_s and self.store.has_table("events"):  # the event log's table, in the same file
            self._delete("DELETE FROM events WHERE id IN (SELECT id FROM events WHERE status='closed' AND "
                         "updated<? LIMIT ?)", (now_ns / 1e9 - c.events_s,), budget)
        self._forget_jobs(budget)
        self._forget_unstored(budget, now_ns)
        self.store.reclaim()
        self.stats.sweeps += 1
        self.stats.seconds = time.monotonic() - started
        return self.stats

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        with self.store.transaction() as db:
            started = time.monotonic()
            yield db
            self.stats.longest_hold_s = max(self.stats.longest_hold_s, time.monotonic() - started)

    def _mark(self, name: str) -> int | None:
        return self.store.meta(name)

    def _roll_time(self, width: int, into: int, upto_ms: int, budget: list[int], now_ns: int) -> None:
        """Roll `width` windows into `into` windows, one `into` period a transaction, up to `upto_ms`."""
        mark = rolled_mark(into)
        start = self._mark(mark)
        while budget[0] > 0:
            with self._transaction() as db:
                if start is None:
                    first = db.execute("SELECT min(idx) FROM windows WHERE width_ms=?", (width,)).fetchone()[0]
                    if first is None:
                        return
                    start = first - first % into
                if start + into > upto_ms:
                    return
                found = db.execute("SELECT job, metric, expected, summary FROM windows WHERE width_ms=? AND idx>=? "
                                   "AND idx<?", (width, start, start + into)).fetchall()
                groups: dict[tuple[str, str], tuple[int, list[Summary]]] = {}
                for job, metric, expected, blob in found:
                    most, summaries = groups.get((job, metric), (0, []))
                    summaries.append(Summary.from_bytes(blob))
                    groups[(job, metric)] = (max(most, expected), summaries)
                rows = [Row(Key(job, metric, start, into), expected, merge_over_time(summaries), False, now_ns)
                        for (job, metric), (expected, summaries) in groups.items()]
                self.store.save_in(db, rows)
                nxt = start + into
                if not found:  # a gap: on to the next period holding anything, or to the settled edge
                    after = db.execute("SELECT min(idx) FROM windows WHERE width_ms=? AND idx>=?",
                                       (width, nxt)).fetchone()[0]
                    edge = upto_ms - upto_ms % into
                    nxt = max(nxt, min(edge, after - after % into) if after is not None else edge)
                start = nxt
                self.store.set_meta(db, mark, start)
            self.stats.rolled += len(rows)
            budget[0] -= 1

    def _roll_late(self, budget: list[int], now_ns: int) -> None:
        """Periods whose members changed after they were rolled up (the store's `late_rollups`): rolled up again
        from their members while these are all kept, else the late members are dropped and counted."""
        while budget[0] > 0:
            rerolled = dropped = 0
            with self._transaction() as db:
                found = db.execute("SELECT job, metric, idx, width_ms FROM late_rollups LIMIT ?",
                                   (self.config.batch,)).fetchall()
                if not found:
                    return
                hours = db.execute("SELECT value FROM meta WHERE name=?", (rolled_mark(HOUR_MS),)).fetchone()
                for job, metric, start, into in found:
                    width = SECOND_MS if into == MINUTE_MS else MINUTE_MS
                    members = ("FROM windows WHERE job=? AND metric=? AND width_ms=? AND idx>=? AND idx<?",
                               (job, metric, width, start, start + into))
                    gone = db.execute("SELECT value FROM meta WHERE name=?", (f"deleted:{width}",)).fetchone()
                    if gone is not None and start < gone[0]:
                        lost = db.execute("DELETE " + members[0], members[1]).rowcount
                        dropped += lost
                        self._late_log.warn("dropped %d late %d ms window(s) of %s %s from %d: they came after "
                                            "their period's raw windows were deleted (--retention)", lost, width,
                                            job, metric, start)
                    else:
                        rows = db.execute("SELECT expected, summary " + members[0], members[1]).fetchall()
                        if rows:
                            summary = merge_over_time([Summary.from_bytes(blob) for _, blob in rows])
                            expected = max(most for most, _ in rows)
                            self.store.save_in(db, [Row(Key(job, metric, start, into), expected, summary, False,
                                                        now_ns)])
                            rerolled += 1
                        if into == MINUTE_MS and hours is not None and start < hours[0]:
                            db.execute("INSERT OR IGNORE INTO late_rollups VALUES (?,?,?,?)",
                                       (job, metric, start - start % HOUR_MS, HOUR_MS))
                    db.execute("DELETE FROM late_rollups WHERE job=? AND metric=? AND width_ms=? AND idx=?",
                               (job, metric, into, start))
            self.stats.late_rerolled += rerolled
            self.stats.late_dropped += dropped
            budget[0] -= 1

    def _roll_steps(self, before_ns: int, budget: list[int], now_ns: int) -> None:
        """Step windows finalised before `before_ns` are merged into their blocks, then deleted."""
        block = self.config.step_block
        while budget[0] > 0:
            with self._transaction() as db:
                found = db.execute("SELECT rowid, job, metric, idx, expected, finalised_ns, summary FROM windows "
                                   "WHERE width_ms=0 AND finalised_ns<? LIMIT ?",
                                   (before_ns, self.config.batch)).fetchall()
                if not found:
                    return
                groups: dict[tuple[str, str, int], tuple[int, int, list[Summary]]] = {}
                for _, job, metric, idx, expected, final, blob in found:
                    key = (job, metric, idx - idx % block)
                    most, latest, summaries = groups.get(key, (0, 0, []))
                    summaries.append(Summary.from_bytes(blob))
                    groups[key] = (max(most, expected), max(latest, final), summaries)
                db.executemany(
                    "INSERT INTO step_ends VALUES (?,?,?,?,?) ON CONFLICT(job, idx) DO UPDATE SET "
                    "end_ns=max(end_ns, excluded.end_ns), complete=max(complete, excluded.complete), "
                    "finalised_ns=max(finalised_ns, excluded.finalised_ns)",
                    [(job, idx, last, int(sources >= expected), final) for job, idx, last, sources, expected, final in
                     db.execute("SELECT job, idx, last_time_ns, sources, expected, finalised_ns FROM windows WHERE "
                                f"rowid IN ({','.join('?' * len(found))})", [r[0] for r in found]).fetchall()])
                rows = []
                for (job, metric, first), (expected, latest, summaries) in groups.items():
                    block_key = Key(job, metric, first, -block)
                    old = db.execute("SELECT expected, summary, finalised_ns FROM windows WHERE job=? AND metric=? "
                                     "AND width_ms=? AND idx=?", (job, metric, -block, first)).fetchone()
                    if old is not None:
                        summaries.append(Summary.from_bytes(old[1]))
                        expected, latest = max(expected, old[0]), max(latest, old[2])
                    rows.append(Row(block_key, expected, merge_over_time(summaries), False, latest))
                self.store.save_in(db, rows)
                db.executemany("DELETE FROM windows WHERE rowid=?", [(r[0],) for r in found])
            self.stats.rolled += len(rows)
            self.stats.deleted += len(found)
            budget[0] -= 1

    def _forget_jobs(self, budget: list[int]) -> None:
        """The run claims and `jobs` row of each job that has no window left, `batch` claims a transaction, checked in
        that transaction (a window saved meanwhile keeps them). The `jobs` row goes with the last claims: a job
        listed there once had windows (the root writes it with them), so one listed with none lost them all to
        retention, never a job whose first windows are still to come."""
        self._forget_claims(budget, "SELECT job FROM jobs WHERE job<>? AND NOT EXISTS (SELECT 1 FROM windows w WHERE "
                            "w.job=jobs.job) LIMIT 1", (FLEET_JOB,), "DELETE FROM jobs WHERE job=?")

    def _forget_unstored(self, budget: list[int], now_ns: int) -> None:
        """Claims of jobs that have no window and no `jobs` row: noted (table `unstored_claims`) once an hour, at
        most; deleted, `batch` a transaction, once noted UNSTORED_CLAIMS_S ago and still without either (a job whose
        first window is still to come is one whose claims reached the file a moment before it, never for days;
        and while the job is live the root's ledger holds its claims in memory anyway)."""
        if budget[0] <= 0:
            return
        due = self._mark("unstored_checked")
        if due is None or now_ns >= due:
            budget[0] -= 1
            with self._transaction() as db:
                db.execute("DELETE FROM unstored_claims WHERE job IN (SELECT job FROM jobs) OR EXISTS "
                           "(SELECT 1 FROM windows w WHERE w.job=unstored_claims.job)")
                db.execute("INSERT OR IGNORE INTO unstored_claims SELECT job, ? FROM (SELECT DISTINCT job FROM runs "
                           "WHERE job<>?) r WHERE NOT EXISTS (SELECT 1 FROM jobs j WHERE j.job=r.job) AND NOT EXISTS "
                           "(SELECT 1 FROM windows w WHERE w.job=r.job)", (now_ns, FLEET_JOB))
                self.store.set_meta(db, "unstored_checked", now_ns + UNSTORED_CHECK_NS)
        self._forget_claims(budget, "SELECT job FROM unstored_claims u WHERE since_ns<? AND NOT EXISTS (SELECT 1 FROM "
                            "jobs j WHERE j.job=u.job) AND NOT EXISTS (SELECT 1 FROM windows w WHERE w.job=u.job) "
                            "LIMIT 1", (now_ns - UNSTORED_CLAIMS_NS,), "DELETE FROM unstored_claims WHERE job=?")

    def _forget_claims(self, budget: list[int], find: str, args: tuple, forgotten: str) -> None:
        """The run claims of each job `find` picks, `batch` a transaction, the pick made in that transaction (a window
        saved meanwhile keeps them); once the last claims go, `forgotten` deletes the job's row that listed it."""
        batch = self.config.batch
        while budget[0] > 0:
            with self._transaction() as db:
                found = db.execute(find, args).fetchone()
                if found is None:
                    return
                job = found[0]
                gone = db.execute("DELETE FROM runs WHERE job=? AND rank IN (SELECT rank FROM runs WHERE job=? "
                                  "LIMIT ?)", (job, job, batch)).rowcount
                if gone < batch:
                    db.execute(forgotten, (job,))
                    self.stats.jobs_forgotten += 1
            budget[0] -= 1
            self.stats.deleted += max(0, gone)

    def _delete(self, sql: str, args: tuple, budget: list[int]) -> None:
        while budget[0] > 0:
            with self._transaction() as db:
                gone = db.execute(sql, (*args, self.config.batch)).rowcount
            budget[0] -= 1
            self.stats.deleted += max(0, gone)
            if gone < self.config.batch:
                return


def store_bytes(path: os.PathLike[str] | str) -> int:
    """The store's size on disk: the file, its write-ahead log and shared-memory index."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += os.path.getsize(f"{os.fspath(path)}{suffix}")
        except OSError:
            pass
    return total
