"""The root's sink: a sealed window is finalised, persisted, and only then acknowledged durable."""

from __future__ import annotations

import time
from collections.abc import Callable

from collectors.common.keys import Key
from collectors.delivery.node import Node
from collectors.delivery.windows import OutPart, Window, merge_parts
from collectors.root.store import Row, Store
from telemetry.summary import Summary


PERSISTING = -1  # the in-flight slot of a window whose commit to the store is under way (seqs start at 1)


class Finaliser:
    """Keeps each window's final summary; late deltas are merged into it and the row rewritten."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.final: dict[Key, Row] = {}
        self.on_finalised: list = []  # callables(rows) run after each commit (detectors, exporters)

    def ship(self, node: Node, windows: list[Window], now: float) -> Callable[[], None] | None:
        """Under the node's lock: merge each window's parts; the commit runs after, without the lock.

        Until it commits, each window holds its OutPart in flight under PERSISTING, so a duplicate that
        arrives meanwhile waits for the commit before it is acknowledged durable (Node.attach_duplicate).
        If the commit fails, the parts go back to the windows and the next flush tries again: nothing is
        acknowledged durable that is not in the file.
        """
        if not windows:
            return None
        rows, outs = [], []
        stamp = time.time_ns()
        for win in windows:
            merged = merge_parts(win.pending)
            previous = self.final.get(win.key)
            if previous is None:
                row = Row(win.key, win.expected, merged, 0, stamp)
            else:
                row = Row(win.key, max(win.expected, previous.expected),
                          Summary.merge_all([previous.summary, merged]), previous.late + 1, previous.finalised_ns)
            rows.append(row)
            out = OutPart(win.key, win.expected, previous is not None, merged, win.pending, win.absorbed)
            outs.append(out)
            win.pending, win.absorbed = [], []
            win.inflight[PERSISTING] = out
        jobs = {job: node.ranks(job).world_size for job in {w.key.job for w in windows}}
        jobs = {j: w for j, w in jobs.items() if w}
        return lambda: self._commit(node, windows, rows, outs, jobs)

    def _commit(self, node: Node, windows: list[Window], rows: list[Row], outs: list[OutPart],
                jobs: dict[str, int]) -> None:
        try:
            self.store.save(rows, jobs)
        except BaseException:
            with node.lock:
                for win, out in zip(windows, outs):
                    win.inflight.pop(PERSISTING, None)
                    win.pending = out.constituents + win.pending
                    win.absorbed = out.absorbed + win.absorbed
                    node.table.mark_pending(win)
            raise
        with node.lock:
            for win, row, out in zip(windows, rows, outs):
                win.inflight.pop(PERSISTING, None)
                win.forwarded = True
                if out.late:
                    node.counters["late"] += 1
                self.final[row.key] = row
            node.release_all(outs)
        for callback in self.on_finalised:
            callback(rows)

    def reload(self, node: Node, key: Key) -> None:
        """Before offering a part of a window the root no longer holds in memory, bring it back from disk."""
        if key in node.table.windows:
            return
        row = self.store.load(key)
        if row is None:
            return
        win = node.table.window(key, row.expected)
        win.sources = row.summary.sources
        win.sealed, win.forwarded, win.sealed_at = True, True, time.monotonic()
        self.final[key] = row

    def forget(self, keys: list[Key]) -> None:
        for key in keys:
            self.final.pop(key, None)


def root_complete(node: Node):  # type: ignore[no-untyped-def]
    """Step windows are complete when every rank of the world reported; time buckets when every rank known did."""
    def complete(win: Window) -> bool:
        if win.key.is_step:
            world = win.expected or node.ranks(win.key.job).world_size
            return world > 0 and len(win.sources) >= world and win.sources.max() < world
        return node.covered_complete(win)
    return complete
