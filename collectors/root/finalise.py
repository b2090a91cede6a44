"""The root's sink: a sealed window is finalised, persisted, and only then acknowledged durable."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from collectors.common.rows import Row
from collectors.delivery.node import Node
from collectors.delivery.runs import Claim
from collectors.delivery.windows import OutPart, Window
from collectors.root.store import SECOND_MS, Store, StoreLost
from telemetry.summary import Summary

log = logging.getLogger(__name__)

PERSISTING = -1  # the in-flight slot of a window whose commit to the store is under way (seqs start at 1)
# The widths whose windows only the finaliser writes (Retention writes the rollups' other widths): for their series
# the root knows the highest index the store may hold, so a window above it is new without a read.
TRACKED_WIDTHS = (0, SECOND_MS)
Series = tuple[str, str, int]  # (job, metric, width_ms)


def series_of(key: Key) -> Series:
    return key.job, key.metric, key.width_ms


class Finaliser:
    """Keeps each window's final summary; late deltas are merged into it and the row rewritten."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.final: dict[Key, Row] = {}
        self.on_finalised: list = []  # callables(rows) run after each commit (detectors, exporters)
        self.on_store_trouble: list = []  # callables(kind, message): "failing", "lost", "recovered"
        self.write_failures = 0   # commits that failed (each retried at the next flush)
        self.files_lost = 0       # times the store's file was found deleted or replaced
        self.writable = True      # the last commit succeeded
        # Under the node's lock (collectors/root/reads.py reads them): the keys whose commit is under way, the highest
        # index the store may hold per tracked series (known once read; raised by each commit), the highest index
        # committed per series whose top is being read meanwhile, and run claims to write with the next commit.
        self.persisting: dict[Key, int] = {}
        self.tops: dict[Series, int] = {}
        self.reading_tops: dict[Series, int] = {}
        self._claims: dict[str, dict[int, Claim]] = {}
        self._merge_log = RateLimitedLog(log)  # as Node.take's: a sender of bad parts can repeat them every flush
        self._orphan_log = RateLimitedLog(log)  # late parts of windows with no row here: a rack may send many a flush

    def ship(self, node: Node, windows: list[Window], now: float) -> Callable[[], None] | None:
        """Under the node's lock: merge each window's parts; the commit runs after, without the lock.

        Until it commits, each window holds its OutPart in flight under PERSISTING, so a duplicate that
        arrives meanwhile waits for the commit before it is acknowledged durable (Node.attach_duplicate).
        If the commit fails, the parts go back to the windows and the next flush tries again: nothing is
        acknowledged durable that is not in the file.
        """
        node.assert_locked()
        if not windows and not self._claims:
            return None
        rows, outs, taken = [], [], []
        stamp = time.time_ns()
        for win in windows:
            previous = self.final.get(win.key)
            if previous is None and (win.refused is not None or win.only_late):
                # A later part of a window refused here (its parts did not merge: Node.take), or only late deltas of
                # a window no row holds (a tier below refused its first parts, or they were dropped on the way):
                # storing it as the first row would finalise a partial window as a whole step; it is refused,
                # counted.
                refused = win.refused
                if refused is None:
                    refused = (f"refused at {node.node_id}: a late part of a window whose first parts never reached "
                               "the root (refused or dropped below)")
                out = node.take(win, late=True)
                if out is not None:
                    node.counters["bad_inputs"] += 1
                    if win.refused is None:
                        # Nothing of it is stored: its sources leave the window, so a resend (the stream broke before
                        # the ack) is judged and refused again, not absorbed as a duplicate and acknowledged durable.
                        # win.refused stays unset: a first part that comes later is still stored.
                        node.table.remove_sources(win, out.summary.sources)
                    self._orphan_log.warn("a late part of %s, of which the root holds no row, was refused "
                                          "(bad_inputs): %s", win.key, refused)
                    node.release(out.key, out.constituents, out.absorbed, refused, out.batch)
                continue
            out = node.take(win, late=previous is not None)
            if out is None:  # its parts did not merge: refused to their senders (Node.take)
                continue
            if previous is None:
                row = Row(win.key, win.expected, out.summary, 0, stamp)
            else:
                try:
                    merged = Summary.merge_all([previous.summary, out.summary])
                except (ValueError, ArithmeticError) as exc:  # as Node.take: refused to its senders, counted
                    node.counters["bad_inputs"] += 1
                    self._merge_log.warn("a late part of %s could not be merged into the stored window (bad_inputs): "
                                         "%s", win.key, exc)
                    node.release(out.key, out.constituents, out.absorbed,
                                 f"refused at {node.node_id}: it could not be merged into the stored window ({exc})",
                                 out.batch)
                    continue
                row = Row(win.key, max(win.expected, previous.expected), merged, previous.late + 1,
                          previous.finalised_ns)
            taken.append(win)
            rows.append(row)
            outs.append(out)
            win.dispatch(PERSISTING, out)
            self.persisting[win.key] = self.persisting.get(win.key, 0) + 1
        windows = taken
        jobs = {job: node.world_size(job) for job in {w.key.job for w in windows}}
        jobs = {j: w for j, w in jobs.items() if w}
        claims, self._claims = self._claims, {}
        return lambda: self._commit(node, windows, rows, outs, jobs, claims)

    def record_claims(self, job: str, claims: dict[int, Claim]) -> None:
        """RunLedger's `record` at the root, under the node's lock: the claims are written with the next commit
        (in its transaction), not here, so a claim never waits for the store under the lock."""
        self._claims.setdefault(job, {}).update(claims)

    def _persisted(self, rows: list[Row], committed: bool) -> None:
        """Under the node's lock, once a commit ended: its keys are no longer under way, and (committed) each
        tracked series' top is raised to what the store may now hold."""
        for row in rows:
            key = row.key
            left = self.persisting.get(key, 0) - 1
            if left > 0:
                self.persisting[key] = left
            else:
                self.persisting.pop(key, None)
            if not committed or key.width_ms not in TRACKED_WIDTHS:
                continue
            series = series_of(key)
            for tops in (self.tops, self.reading_tops):
                if series in tops and tops[series] < key.index:
                    tops[series] = key.index

    def _commit(self, node: Node, windows: list[Window], rows: list[Row], outs: list[OutPart],
                jobs: dict[str, int], claims: dict[str, dict[int, Claim]]) -> None:
        try:
            self._save(node, rows, jobs, claims)
        except BaseException as exc:
            self.write_failures += 1
            if self.writable:
                self.writable = False
                self._trouble("failing", f"the root cannot write {self.store.path}: {exc}")
            with node.lock:
                self._persisted(rows, committed=False)
                for job, mine in claims.items():  # written with the next commit (the ledger kept them meanwhile)
                    self._claims[job] = {**mine, **self._claims.get(job, {})}
                lost = []
                for win, out in zip(windows, outs):
                    win.settle(PERSISTING)
                    if node.table.windows.get(win.key) is not win:
                        # The table let the window go meanwhile (its budget): parts put back into it would never
                        # ship again, and their holds would never be released (ranks' close() never True).
                        lost.append(out)
                        continue
                    win.restore(out)
                    node.table.mark_pending(win)
                if lost:
                    node.counters["dropped_windows"] += len(lost)
                    log.error("%d window(s) whose commit failed were dropped from the window table meanwhile "
                              "(its budget), e.g. %s: refused to their senders (dropped_windows)", len(lost),
                              lost[0].key)
                    node.release_all(lost, refused=f"dropped at {node.node_id}: its commit failed and its window "
                                                   "table was over its budget (dropped_windows)")
            raise
        if not self.writable:
            self.writable = True
            self._trouble("recovered", f"the root writes {self.store.path} again")
        with node.lock:
            self._persisted(rows, committed=True)
            for win, row, out in zip(windows, rows, outs):
                win.settle(PERSISTING)
                if out.late:
                    node.counters["late"] += 1
                if node.table.windows.get(row.key) is win:  # not if the table let it go meanwhile (its budget)
                    self.final[row.key] = row
            node.release_all(outs)
        if rows:
            for callback in self.on_finalised:
                callback(rows)

    def _save(self, node: Node, rows: list[Row], jobs: dict[str, int], claims: dict[str, dict[int, Claim]]) -> None:
        """Runs without the node's lock (intake goes on and inserts into `final`): reads `final` under it."""
        try:
            self.store.save(rows, jobs, runs=claims)
        except StoreLost as exc:
            # What was acknowledged into the lost file is gone with it; what this root still holds in
            # memory (the windows of the last retain_s) is written again into a fresh file.
            self.files_lost += 1
            with node.lock:
                held = list(self.final.values())
            self._trouble("lost", f"{exc}; reopened it and wrote again the {len(held)} windows held in memory")
            self.store.reopen()
            again = {row.key: row for row in held}
            again.update({row.key: row for row in rows})
            self.store.save(list(again.values()), jobs, runs=claims)

    def _trouble(self, kind: str, message: str) -> None:
        (log.info if kind == "recovered" else log.error)("store %s: %s", kind, message)
        for callback in self.on_store_trouble:
            try:
                callback(kind, message)
            except Exception:  # an event log on the same failing disk must not stop the retry
                log.exception("reporting store trouble failed")

    def install(self, node: Node, row: Row) -> None:
        """Under the node's lock: a window the root no longer held in memory, read back from the store (off the
        lock: collectors/root/reads.py), before a part of it is offered: settled, with its sources, so that a
        resend is absorbed as a duplicate and new sources merge into the stored row as a late delta."""
        node.assert_locked()
        key = row.key
        if key in node.table.windows:
            return
        node.table.install(key, row.expected, row.summary.sources)
        self.final[key] = row

    def forget(self, keys: list[Key]) -> None:
        for key in keys:
            self.final.pop(key, None)


def root_complete(node: Node) -> Callable[[Window], bool]:
    """Step windows are complete when every rank of the world reported; time buckets when every rank known did
    (`Node.world_complete`: asked natively per job for a native table's windows)."""
    return node.world_complete
