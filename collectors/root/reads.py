"""The root's store reads, off its intake path: window reloads and run-ledger recalls, batched on their own thread.

Why: a unit from a child may name a window the root no longer holds in memory (a resend after a restart, a
window forgotten for the budget) or a job whose run claims are in the store (issue 17, collectors/delivery/runs.py).
Both must be read before the unit is judged: a resend is a duplicate only if the stored window's sources are
known, a claim is refused only if the first process is known. Read under the node's lock (as before), each
read stopped every child's intake, and waited behind the commit that runs off the lock (a slow disk: 200 ms).

So the intake (`CollectorService._handle`, under the node's lock) asks `needs` what a unit is missing; when
nothing is, the unit goes in at once (the common case: a brand-new window is known new without a read, from
the highest index the store may hold per series, `Finaliser.tops`). Otherwise the unit is parked (`park`) with
what it needs: its stream stops reading (aioserve `Parked`: no pool thread held, the stream's order kept) and
the other streams go on. This thread takes the parked units in batches, reads what they need on the store's
reader connection (WAL: it does not wait for a commit under way), then, under the node's lock and in one hold,
installs what it read (`Finaliser.install`, `RunLedger.recalled`, `Finaliser.tops`) and lets each unit in, in
the order they parked.

The ordering rules (docs/delivery.md, "Store reads off the node's lock"):

* While a window is being read, every other part of it waits too: a part is offered at once only into a window
  the table holds, or one known new; every other one parks, and so cannot create the window before the read is
  installed (which would then be lost: the stored row replaced by the new part alone).
* A window whose commit is under way (`Finaliser.persisting`) and that the table let go meanwhile is read only
  after the commit ended (the reader would see the state before it).
* A series' top read while a commit raises it keeps the higher of the two (`Finaliser.reading_tops`).
* A run's claims are recalled before any claim about the job is judged: two children claiming the same rank
  while the recall is in flight are judged after it, in the order they arrived.
* A failed read (the store's trouble, `StoreLost` reopening the file) leaves the units parked and is retried
  with backoff; no unit goes in without what it needs (nothing is acknowledged that would lose a stored row).
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from collectors.common.rows import Row
from collectors.delivery.node import Node
from collectors.delivery.runs import Claim
from collectors.root.finalise import TRACKED_WIDTHS, Finaliser, Series, series_of
from collectors.root.store import Store

log = logging.getLogger(__name__)

BATCH_KEYS = 2048  # windows read per batch, at most (more parked units wait for the next one): the units of a batch
# go in under one hold of the node's lock, so this bounds that hold too
RETRY_S = (0.05, 2.0)  # a failed read is retried after this, doubling up to the second


@dataclass
class Needs:
    """What a unit waits for: windows to read, series whose top is unknown, jobs whose claims to recall."""

    keys: set[Key] = field(default_factory=set)
    series: set[Series] = field(default_factory=set)
    jobs: set[str] = field(default_factory=set)

    def __bool__(self) -> bool:
        return bool(self.keys or self.series or self.jobs)


@dataclass
class _Waiter:
    needs: Needs
    resume: Callable[[], None]  # the unit's intake, run under the node's lock once its needs are installed
    ready: concurrent.futures.Future[None] = field(default_factory=concurrent.futures.Future)


class StoreReads:
    """Reads for parked units, batched, on one thread; counters for /metrics and the benches."""

    def __init__(self, store: Store, finaliser: Finaliser, node: Node) -> None:
        self.store = store
        self.finaliser = finaliser
        self.node = node
        self._queue: list[_Waiter] = []
        self._wake = threading.Condition()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._log = RateLimitedLog(log)
        self.parked = 0          # units parked, in all
        self.batches = 0         # batches read
        self.windows_read = 0    # window rows asked for
        self.read_failures = 0   # batches whose read failed (retried)

    # ------------------------------------------------------------ intake side, under the node's lock
    def needs(self, keys: Iterable[Key], jobs: Iterable[str]) -> Needs:
        """What a unit naming these windows and these jobs (its rank states) must have read first."""
        node, fin = self.node, self.finaliser
        node.assert_locked()
        needs = Needs()
        for job in jobs:
            if node.runs.needs_recall(job):
                needs.jobs.add(job)
        for key in keys:
            if key in node.table.windows:
                continue
            if key in fin.persisting or key.width_ms not in TRACKED_WIDTHS:
                needs.keys.add(key)
                continue
            series = series_of(key)
            top = fin.tops.get(series)
            if top is None:
                needs.series.add(series)
                needs.keys.add(key)
            elif key.index <= top:
                needs.keys.add(key)
        return needs

    def hold(self, keys: Iterable[Key], jobs: Iterable[str],
             resume: Callable[[], None]) -> concurrent.futures.Future[None] | None:
        """The intake's question (CollectorService._handle, under the node's lock): None when the unit needs
        nothing read (it goes in now), else it is parked (`park`)."""
        needs = self.needs(keys, jobs)
        return self.park(needs, resume) if needs else None

    def park(self, needs: Needs, resume: Callable[[], None]) -> concurrent.futures.Future[None]:
        """Queue a unit until its needs are read; `resume` then runs on this thread under the node's lock. The
        future completes after it (with its exception, if it raised; cancelled: the unit is dropped unjudged)."""
        waiter = _Waiter(needs, resume)
        with self._wake:
            self._queue.append(waiter)
            self.parked += 1
            self._wake.notify()
        return waiter.ready

    def waiting(self) -> int:
        """Units parked now (for /metrics: collectors/root/reads_metrics.py)."""
        with self._wake:
            return len(self._queue)

    # ------------------------------------------------------------ the thread
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="root-reads", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._wake:
            left, self._queue = self._queue, []
        for waiter in left:
            waiter.ready.cancel()

    def _run(self) -> None:
        backoff = RETRY_S[0]
        while True:
            with self._wake:
                while not self._queue and not self._stopping:
                    self._wake.wait()
                if self._stopping:
                    return
            try:
                delay = self.step()
            except Exception as exc:  # the store's trouble: the units stay parked, retried
                self.read_failures += 1
                self._log.warn("reading the store for %d parked unit(s) failed (retried in %.2f s): %s",
                               len(self._queue), backoff, exc)
                delay, backoff = backoff, min(backoff * 2, RETRY_S[1])
            else:
                backoff = RETRY_S[0]
            if delay:
                with self._wake:
                    self._wake.wait_for(lambda: self._stopping, delay)

    def step(self) -> float:
        """One batch: take parked units, read what they need without the node's lock, install it and let the
        units in under it. Returns how long to wait before the next (units deferred behind a commit), or 0."""
        node, fin = self.node, self.finaliser
        with node.lock, self._wake:
            batch: list[_Waiter] = []
            deferred: list[_Waiter] = []
            count = 0
            for waiter in self._queue:
                if count >= BATCH_KEYS and batch:
                    deferred.append(waiter)
                elif any(key in fin.persisting for key in waiter.needs.keys):
                    deferred.append(waiter)  # its window's commit is under way: read after it
                else:
                    batch.append(waiter)
                    count += len(waiter.needs.keys)
            self._queue = deferred
            keys = {key for w in batch for key in w.needs.keys if key not in node.table.windows}
            series = {s for w in batch for s in w.needs.series if s not in fin.tops}
            jobs = {job for w in batch for job in w.needs.jobs if node.runs.needs_recall(job)}
            for one in series:
                fin.reading_tops.setdefault(one, -1)
        try:
            rows, tops, claims = self._read(keys, series, jobs)
        except BaseException:
            with node.lock, self._wake:
                for one in series:
                    fin.reading_tops.pop(one, None)
                self._queue[:0] = batch
            raise
        results: list[tuple[_Waiter, BaseException | None]] = []
        with node.lock:
            failed: BaseException | None = None
            try:
                for one in series:
                    fin.tops[one] = max(tops[one], fin.reading_tops.pop(one, -1))
                for job, found in claims.items():
                    node.runs.recalled(job, found)
                for row in rows.values():
                    fin.install(node, row)
            except Exception as exc:  # a bug: the batch's units end their streams (logged there; the children resend)
                failed = exc
            for waiter in batch:
                if not waiter.ready.set_running_or_notify_cancel():
                    continue  # its stream went away: the child resends it
                if failed is not None:
                    results.append((waiter, failed))
                    continue
                try:
                    waiter.resume()
                except BaseException as exc:  # handed to the stream (logged there, the stream ended)
                    results.append((waiter, exc))
                    continue
                results.append((waiter, None))
        for waiter, error in results:
            if error is None:
                waiter.ready.set_result(None)
            else:
                waiter.ready.set_exception(error)
        return RETRY_S[0] if deferred and not batch else 0.0

    def _read(self, keys: set[Key], series: set[Series], jobs: set[str]
              ) -> tuple[dict[Key, Row], dict[Series, int], dict[str, dict[int, Claim]]]:
        """Without the node's lock, on the store's reader connection."""
        self.batches += 1
        self.windows_read += len(keys)
        tops = {}
        for one in series:
            top = self.store.highest_index(*one)
            tops[one] = -1 if top is None else top
        claims = {job: self.store.load_runs(job) for job in jobs}
        rows = self.store.load_many(sorted(keys, key=lambda k: (k.job, k.metric, k.width_ms, k.index))) if keys else {}
        return rows, tops, claims

    def forget_job(self, job: str) -> None:
        """A finished job (under the node's lock): its series' tops go (read again if it comes back)."""
        tops = self.finaliser.tops
        for one in [one for one in tops if one[0] == job]:
            del tops[one]

