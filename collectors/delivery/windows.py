"""A node's windows: accept parts, refuse overlaps, absorb duplicates, decide when to seal (DESIGN §4, §5).

Every tier holds, per window, the union of sources it has ever accepted.
A part whose sources are disjoint from it is merged; a part whose sources
are all already held is a duplicate delivery (a resend after a crash or
reconnect): it is absorbed, never counted twice, and acknowledged durable
once the data it duplicates is; a part that overlaps only partly is
rejected naming the overlap, and its sender splits it into its own
constituents, each of which is then wholly new or wholly a duplicate.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Container, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pyroaring import BitMap

from collectors.common.attempts import scoped, split
from collectors.common.fleet import URGENT_METRICS
from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from telemetry.names import FLEET_JOB
from telemetry.summary import Summary, _native

log = logging.getLogger(__name__)

Origin = tuple[str, int]
"""A unit received from below: (sender id, sequence number)."""


@dataclass(slots=True)
class Part:
    """One accepted piece of a window, kept until durable upstream so it can be resent or split.

    Collectors' parts are child summaries. An agent's part holds its ranks'
    raw values for one window (`raw`): summarised in one vectorised pass, and
    split into one part per rank only if the parent refuses it as a partial
    overlap (which needs a crash upstream).
    """

    key: Key
    origins: list[Origin]
    sources: BitMap
    index: int = 0  # position of this window in the sender's unit, for rejecting it back down
    built: Summary | None = None
    raw: RawValues | None = None
    late: bool = False  # a child's late delta (WindowSummary.late): it sent up, or refused, the window's first parts

    @property
    def summary(self) -> Summary:
        if self.built is None:
            assert self.raw is not None
            raw = self.raw
            self.built = Summary.from_arrays(raw.values, raw.sources, raw.last_ns, first_time_ns=raw.first_ns)
        return self.built

    def split(self) -> list[Part]:
        """One part per source, when this part can be split here (an agent's raw values); else []."""
        if self.raw is None or len(self.sources) < 2:
            return []
        raw = self.raw
        out = []
        for source in self.sources:
            mask = raw.sources == source
            values = raw.values[mask]
            origins = raw.origins_by_source.get(source, [])
            out.append(Part(self.key, origins, BitMap([source]), self.index,
                            raw=RawValues(values, raw.sources[mask], raw.first_ns, raw.last_ns,
                                          {source: origins})))
        return out


@dataclass
class RawValues:
    values: np.ndarray
    sources: np.ndarray
    first_ns: int
    last_ns: int
    origins_by_source: dict[int, list[Origin]]


@dataclass
class OutPart:
    """One window of a forwarded unit: the merge of its constituents."""

    key: Key
    expected: int
    late: bool
    summary: Summary
    constituents: list[Part]
    absorbed: list[Origin] = field(default_factory=list)
    batch: _native.Batch | None = None  # a collector's: the children's parts held natively (NativeWindows)
    late_parts: int = 0  # of `batch`'s parts, the late deltas (Window.late_parts: given back by Window.restore)


class MergeFailed(Exception):
    """A window's pending parts could not be merged (`Window.take`: parts the intake's checks let through that do not
    merge, e.g. a merged count past 64 bits). They were taken from the window: the caller releases them as refused
    (`Node.take`), so that no sender waits forever for a window that will never be stored."""

    def __init__(self, key: Key, parts: list[Part], absorbed: list[Origin], batch: _native.Batch | None,
                 cause: Exception) -> None:
        super().__init__(f"the parts of {key} could not be merged: {cause}")
        self.key, self.parts, self.absorbed, self.batch, self.cause = key, parts, absorbed, batch, cause


@dataclass
class Window:
    """One window's lifecycle, changed only through its transitions (the sinks and the node never edit its
    fields): parts arrive pending (WindowTable.offer); `take` hands them to the sink, which `dispatch`es the
    OutPart in flight under a slot (a unit's seq upstream, PERSISTING at the root); each slot `settle`s once
    (durable, refused, dropped, or rejected for a resend), or a failed commit `restore`s it to pending. A
    duplicate `absorb`s into whatever is still open. Settled: sealed with nothing pending, in flight or absorbed.
    Callers hold the node's lock."""

    key: Key
    expected: int
    first_seen: float
    deadline: float
    sources: BitMap = field(default_factory=BitMap)
    pending: list[Part] = field(default_factory=list)
    absorbed: list[Origin] = field(default_factory=list)
    inflight: dict[int, OutPart] = field(default_factory=dict)
    sealed: bool = False
    sealed_at: float = 0.0
    # A first part sent up already (or the window refused: MergeFailed): what follows is a late delta. A dispatch
    # that was late only because its parts were (`only_late`) does not set it.
    forwarded: bool = False
    # Why the window was refused (its parts did not merge: Node.take; the parent refused it: Upstream._refused): a
    # resend of what it held is refused again (Node.attach_duplicate), never absorbed and acknowledged DURABLE.
    refused: str | None = None
    late_at: float = 0.0  # a fleet window's late parts go on at this time, together (WindowTable.due)
    fault_sent: bool = False  # a fleet window passed on with a fault in it: later faults wait with the late parts
    cost: int = 0  # bytes this window is charged against its table's budget (WindowTable.charge)
    # A collector's window is held natively (NativeWindows): its parts, sources and expected world live in slot
    # `slot` of `native`, `pending` stays empty, and `sources` is a copy read when asked (WindowTable.sources).
    native: _native.Windows | None = None
    slot: int = -1
    sources_version: int = -1  # the native sources' version `sources` was read at
    # A native window of a job (not the fleet's) is watched until it seals or its deadline passes: its table asks
    # the completeness of a job's watched windows in one native call per flush (WindowTable.due), and it is not in
    # the table's `_pending` set meanwhile.
    watched: bool = False
    dropped: _native.Batch | None = None  # what a native window held pending when its table let it go
    late_parts: int = 0  # of a native window's pending parts, the late deltas (counted as offered: WindowTable)

    @property
    def has_pending(self) -> bool:
        """Parts accepted and not yet taken."""
        if self.native is not None:
            return self.native.pending(self.slot) > 0 or bool(self.pending)
        return bool(self.pending) or self.dropped is not None

    @property
    def only_late(self) -> bool:
        """Every part pending is a child's late delta: the window's first parts never came here (the child sent them
        up before, or refused them), so what it holds goes up as a late delta too, never as the window's first part,
        and the root does not store it as a first row (Finaliser.ship)."""
        if self.native is not None:
            return self.late_parts > 0 and self.late_parts >= self.native.pending(self.slot) + len(self.pending)
        return bool(self.pending) and all(part.late for part in self.pending)

    @property
    def settled(self) -> bool:
        """Sealed, and nothing pending, in flight or waiting on durability: forgetting it loses nothing."""
        return self.sealed and not (self.has_pending or self.inflight or self.absorbed)

    def take(self, late: bool) -> OutPart:
        """What the window holds pending, merged into one OutPart for its sink (the parent's outbox, or the
        root's store), with the parts and absorbed duplicates it is to release once settled; the window holds
        nothing pending after. The caller `dispatch`es it under the sink's id for it. MergeFailed (with what was
        pending) when the parts do not merge: the window holds nothing pending after that either. `late`: the window
        sent up a first part already; the OutPart is late then, or when every part pending is late (`only_late`)."""
        late = late or self.only_late
        try:
            if self.native is not None:
                self.expected = self.native.expected(self.slot)
                batch = self.native.take(self.slot)
                try:
                    out = OutPart(self.key, self.expected, late, Summary._wrap(batch.merged()), [], self.absorbed,
                                  batch, self.late_parts)
                except (ValueError, ArithmeticError) as exc:
                    raise MergeFailed(self.key, [], self.absorbed, batch, exc) from exc
            else:
                try:
                    out = OutPart(self.key, self.expected, late, merge_parts(self.pending), self.pending, self.absorbed)
                except (ValueError, ArithmeticError) as exc:
                    raise MergeFailed(self.key, self.pending, self.absorbed, None, exc) from exc
        finally:
            self.pending, self.absorbed, self.late_parts = [], [], 0
        return out

    def dispatch(self, slot: int, out: OutPart) -> None:
        """`out` (from `take`) is in flight under `slot` until it settles; what follows it is a late delta (unless
        `out` was only late parts: a first part that comes after is still the window's first)."""
        self.inflight[slot] = out
        if not out.late:
            self.forwarded = True

    def settle(self, slot: int) -> OutPart | None:
        """What was in flight under `slot` is done with (durable, refused, dropped, or rejected to be resent):
        the window waits on it no more. None if nothing was (settled already)."""
        return self.inflight.pop(slot, None)

    def restore(self, out: OutPart) -> None:
        """A dispatch that failed before it settled anything (the root's commit): its parts and duplicates are
        pending again, ahead of what arrived since (a native window's parts back into its slot, `out.batch` empty
        after). The caller marks the window pending (WindowTable.mark_pending)."""
        if out.batch is not None:
            assert self.native is not None, "a batch of natively held parts goes back into its native window"
            self.native.restore(self.slot, out.batch)
            self.late_parts += out.late_parts
        self.pending = out.constituents + self.pending
        self.absorbed = out.absorbed + self.absorbed

    def absorb(self, origins: list[Origin]) -> int:
        """A duplicate of what the window holds: it is durable once everything open now is. Attaches `origins`
        to each open thing (pending, each dispatch in flight) and returns how many that is (the holds the
        caller takes for each origin)."""
        pending = self.has_pending
        if pending:
            self.absorbed.extend(origins)
        for out in self.inflight.values():
            out.absorbed.extend(origins)
        return len(self.inflight) + (1 if pending else 0)

    def drop_pending(self) -> tuple[list[Part], list[Origin], _native.Batch | None]:
        """Let go of what is pending (the table dropped the window): the parts, duplicates and natively held parts
        to release."""
        pending, absorbed = self.pending, self.absorbed
        batch = self.native.take(self.slot) if self.native is not None else self.dropped
        self.pending, self.absorbed, self.dropped, self.late_parts = [], [], None, 0
        return pending, absorbed, batch


@dataclass
class Deadlines:
    """Seal deadlines: max(floor, factor x the job's median step interval); time buckets: end + floor."""

    floor_s: float = 2.0
    factor: float = 3.0
    history: int = 32
    _starts: dict[str, deque[tuple[int, float]]] = field(default_factory=dict)
    _medians: dict[str, float] = field(default_factory=dict)

    def for_window(self, key: Key, now: float, now_wall_ns: int) -> float:
        if key.width_ms:
            end_ns = (key.index + key.width_ms) * 1_000_000
            return now + max(0.0, (end_ns - now_wall_ns) / 1e9) + self.floor_s
        starts = self._starts.get(key.job)
        if starts is None:
            starts = self._starts[key.job] = deque(maxlen=self.history)
        if not starts or key.index > starts[-1][0]:
            starts.append((key.index, now))
            self._medians[key.job] = self._median(starts)
        return now + max(self.floor_s, self.factor * self._medians.get(key.job, 0.0))

    def forget(self, job: str) -> None:
        self._starts.pop(job, None)
        self._medians.pop(job, None)

    def median_step_s(self, job: str) -> float:
        return self._medians.get(job, 0.0)

    @staticmethod
    def _median(starts: deque[tuple[int, float]]) -> float:
        if len(starts) < 3:
            return 0.0
        steps = list(starts)
        intervals = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(steps, steps[1:]) if s1 > s0]
        return statistics.median(intervals) if intervals else 0.0


ACCEPTED, DUPLICATE = 0, 1  # _native.Windows' verdicts (2: an overlap)

WINDOW_BYTES = 3072
"""What one window costs a tier, roughly, before its sources: the Window and its dict entry, and at the root the
finalised Row with its sketch (Finaliser.final). Measured: 60 hosts' hardware held 450,000 windows in ~1.5 GB
of root RSS (issue 28), ~3.4 KB each."""
LATE_BATCH_S = 0.25  # a fleet window's late parts are sent on together, this long after the first of them came
SOURCE_BYTES = 4  # a source in the window's bitmap (2 in an array container, more in a sparse one): an estimate
DEFAULT_WINDOW_BUDGET_BYTES = 512 << 20
_NOTHING = BitMap().serialize()  # held by every window


class WindowTable:
    """The windows one node holds; not thread-safe (the node's lock guards it).

    Memory is bounded by a byte budget (`max_bytes`, each window charged `WINDOW_BYTES` plus `SOURCE_BYTES` per
    source), not by a count. Past it, room is made down to 90% of the budget: settled windows first, oldest
    sealed first (`on_evict`: what they held is durable, so forgetting them early loses nothing and is not a
    drop); only when no settled window is left does the oldest unsettled window go, and only one that held data
    not yet handed on (pending parts or absorbed duplicates) is a loss (`on_drop`). A window whose data is in
    flight (in the outbox, or being committed) releases its holds when that settles, as an expired one does.

    With `native` (a collector's table) each window's parts, sources and expected world are held natively
    (`_native.Windows`, telemetry/summary/native/table.hpp): a child's unit read natively is placed in one call
    (`offer_read`), with no Python object per child window; the Window keeps its lifecycle. Parts are made only
    where one is needed by itself (a rejection from above: `parts_of`); there, units are named by an id.
    """

    def __init__(self, deadlines: Deadlines, retain_s: float = 300.0,
                 max_bytes: int = DEFAULT_WINDOW_BUDGET_BYTES, on_drop: Callable[[Window], None] | None = None,
                 on_evict: Callable[[list[Key]], None] | None = None, native: bool = False) -> None:
        if max_bytes < WINDOW_BYTES:
            raise ValueError(f"a window budget of {max_bytes} bytes holds no window (one costs ~{WINDOW_BYTES})")
        self.deadlines = deadlines
        self.retain_s = retain_s
        self.max_bytes = max_bytes
        self.bytes = 0  # what the windows held are charged (WINDOW_BYTES + SOURCE_BYTES per source each)
        self.evicted = 0  # settled windows forgotten before retain_s to stay in budget (no data lost)
        self.windows: dict[Key, Window] = {}
        self._on_drop = on_drop
        self._on_evict = on_evict
        self._pending: set[Key] = set()  # windows with parts not yet shipped
        self._settling: deque[Key] = deque()  # sealed windows, oldest first, for expiry
        self.native = _native.Windows() if native else None
        self._by_slot: dict[int, Window] = {}  # native windows by slot
        # Units with parts held natively, by the id the native table knows them by (forgotten once acknowledged).
        self._origin_ids: dict[Origin, int] = {}
        self._origins: dict[int, Origin] = {}
        self._next_origin = 0
        # The deadlines of watched windows (each once, in a heap: (deadline, order, key, slot)); stale entries (a window
        # sealed or removed since) are skipped when they come up. By key and slot, not the Window: a removed window is
        # not kept alive until its deadline.
        self._deadlines: list[tuple[float, int, Key, int]] = []
        self._order = itertools.count()

    def window(self, key: Key, expected: int, now: float | None = None) -> Window:
        win = self.windows.get(key)
        if win is None:
            now = time.monotonic() if now is None else now
            win = Window(key, expected, now, self.deadlines.for_window(key, now, time.time_ns()))
            if self.native is not None:
                job, attempt = split(key.job)
                win.native = self.native
                win.slot, _ = self.native.slot(job, attempt, key.metric, key.index, key.width_ms, expected)
                self._by_slot[win.slot] = win
                self._watch(win)
            self.windows[key] = win
            self.charge(win, WINDOW_BYTES)
        elif win.native is not None:
            win.native.expect(win.slot, expected)
        elif expected > win.expected:
            win.expected = expected
        return win

    def install(self, key: Key, expected: int, sources: BitMap) -> Window:
        """A window read back from the root's store (Finaliser.install): settled and sealed, holding `sources`, so
        that a resend is absorbed as a duplicate and new sources go in as late parts. Not watched (it is sealed)."""
        win = self.window(key, expected)
        if win.native is not None:
            self._unwatch(win)
            win.native.add_sources(win.slot, sources.serialize())
        else:
            win.sources = sources
        win.sealed, win.forwarded, win.sealed_at = True, True, time.monotonic()
        return win

    def expected(self, win: Window) -> int:
        """The window's expected world as offered so far (a native window's is raised natively by each part)."""
        return win.native.expected(win.slot) if win.native is not None else win.expected

    def missing(self, unit: _native.Unit) -> list[Key]:
        """The keys of a natively read unit's windows that the table does not hold (one native pass; a Key made only
        for those): what the root's store reads ask about (collectors/root/reads.py)."""
        native = self.native
        assert native is not None, "missing needs a native table"
        keys = []
        for pos in native.missing(unit):
            job, attempt, metric, index, width_ms, _ = unit.key(pos)
            keys.append(Key(scoped(job, attempt), metric, index, width_ms))
        return keys

    def charge(self, win: Window, nbytes: int) -> None:
        """Charge `win` for nbytes more; past the budget, make room (never by removing `win` itself)."""
        win.cost += nbytes
        self.bytes += nbytes
        if self.bytes > self.max_bytes:
            self._make_room((win.key,))

    def offer(self, part: Part, expected: int) -> tuple[str, BitMap | None]:
        """Accept, absorb or reject one part: returns ("accepted"|"duplicate"|"overlap", overlap)."""
        win = self.window(part.key, expected)
        if win.native is not None:
            return self._offer_native(win, part)
        if not win.sources.intersect(part.sources):  # the usual case, without building the (empty) overlap
            win.sources |= part.sources
            win.pending.append(part)
            self._pending.add(part.key)
            self.charge(win, SOURCE_BYTES * len(part.sources))
            return "accepted", None
        overlap = win.sources & part.sources
        if len(overlap) == len(part.sources):
            return "duplicate", overlap
        return "overlap", overlap

    def _offer_native(self, win: Window, part: Part) -> tuple[str, BitMap | None]:
        """`offer` into a native window: the part's summary is copied there (a part read by the per-window path)."""
        assert win.native is not None and len(part.origins) == 1, "a collector's part comes from one unit"
        origin, new_id = self._origin_id(part.origins[0])
        verdict, overlap, became_pending, added = win.native.offer_core(win.slot, part.summary._as_core(), origin,
                                                                        part.index)
        if verdict == ACCEPTED:
            if part.late:
                win.late_parts += 1
            if became_pending and not win.watched:
                self._pending.add(win.key)
            self.bytes += SOURCE_BYTES * added  # charged to the window natively (`_remove` gives it back)
            if self.bytes > self.max_bytes:
                self._make_room((win.key,))
            return "accepted", None
        if new_id:
            self.forget_origin(part.origins[0])
        return ("duplicate" if verdict == DUPLICATE else "overlap"), BitMap(overlap)

    def offer_read(self, origin: Origin, unit: _native.Unit) -> list[tuple[int, Window, str, BitMap, int]]:
        """Every window of a unit read natively (each read fast, each passed its checks) offered in one native call.
        Returns the windows not accepted: (position, window, "duplicate"|"overlap", overlap, how many sources the
        part has). The table may be over its budget after: the caller attaches the duplicates to their windows
        first, then calls `fit_read` (a window let go before its duplicates were attached would leave them
        acknowledged DURABLE for data that was dropped)."""
        native = self.native
        assert native is not None, "offer_read needs a native table"
        origin_id, new_id = self._origin_id(origin)
        created, became_pending, refused, accepted, added, late = native.offer_unit(unit, origin_id)
        if not accepted and new_id:
            self.forget_origin(origin)
        nbytes = SOURCE_BYTES * added
        if created:
            now, wall_ns = time.monotonic(), time.time_ns()
            for pos, slot in created:
                job, attempt, metric, index, width_ms, expected = unit.key(pos)
                key = Key(scoped(job, attempt), metric, index, width_ms)
                win = Window(key, expected, now, self.deadlines.for_window(key, now, wall_ns), native=native,
                             slot=slot, cost=WINDOW_BYTES)
                self.windows[key] = win
                self._by_slot[slot] = win
                self._watch(win)
                nbytes += WINDOW_BYTES
        by_slot = self._by_slot
        for slot in late:  # a child's late deltas accepted (Window.only_late), after the windows new to the table
            by_slot[slot].late_parts += 1
        self._pending.update(win.key for win in map(by_slot.__getitem__, became_pending) if not win.watched)
        out = [(pos, by_slot[slot], "duplicate" if verdict == DUPLICATE else "overlap", BitMap(overlap), n)
               for pos, slot, verdict, overlap, n in refused]
        self.bytes += nbytes
        return out

    def fit_read(self, unit: _native.Unit, refused: Iterable[int]) -> None:
        """After `offer_read`: back into the budget, keeping the windows the unit was accepted into (all but the
        `refused` positions), as `charge` keeps the window just charged. Dropping those would release the unit's
        last holds while it is still being offered: it would be acknowledged (as refused) and then once more by
        its caller's `Durability.settle`."""
        skip = set(refused)
        if self.bytes <= self.max_bytes or len(skip) == len(unit):  # refused whole: it charged nothing (as `offer`)
            return
        keep = set()
        for pos in range(len(unit)):
            if pos not in skip:
                job, attempt, metric, index, width_ms, _ = unit.key(pos)
                keep.add(Key(scoped(job, attempt), metric, index, width_ms))
        self._make_room(keep)

    def sources(self, win: Window) -> BitMap:
        """The sources a window holds (a native window's read from its table when they changed since last asked)."""
        if win.native is not None:
            version = win.native.version(win.slot)
            if version != win.sources_version:
                win.sources = BitMap.deserialize(win.native.sources(win.slot))
                win.sources_version = version
        return win.sources

    def remove_sources(self, win: Window, sources: BitMap) -> None:
        """The window no longer holds these sources (a part its own sender is to split and resend)."""
        if win.native is not None:
            win.native.remove_sources(win.slot, sources.serialize())
        else:
            win.sources -= sources

    def _origin_id(self, origin: Origin) -> tuple[int, bool]:
        """The id the native table knows a unit by, and whether it is new."""
        found = self._origin_ids.get(origin)
        if found is not None:
            return found, False
        found = self._origin_ids[origin] = self._next_origin
        self._origins[found] = origin
        self._next_origin += 1
        return found, True

    def forget_origin(self, origin: Origin) -> None:
        """A unit acknowledged (or none of it accepted): nothing held here refers to it any more."""
        found = self._origin_ids.pop(origin, None)
        if found is not None:
            del self._origins[found]

    def senders(self, win: Window) -> set[str]:
        """Who sent the parts a window holds pending."""
        senders = {origin[0] for part in win.pending for origin in part.origins}
        if win.native is not None:
            origins = self._origins
            senders.update(origins[ref][0] for ref in win.native.pending_origins(win.slot))
        return senders

    def refs(self, batch: _native.Batch) -> list[tuple[Origin, int]]:
        """(origin, index in its unit) of each part of a native batch."""
        origins = self._origins
        return [(origins[ref], index) for ref, index in batch.refs()]

    def origin_counts(self, batches: list[_native.Batch]) -> list[tuple[Origin, int]]:
        """How many parts of these native batches each origin has."""
        origins = self._origins
        return [(origins[ref], n) for ref, n in _native.origin_counts(batches)]

    def parts_of(self, out: OutPart) -> list[Part]:
        """An OutPart's constituents as Parts (a native batch's made one by one: a rejection from above)."""
        if out.batch is None:
            return out.constituents
        origins, parts = self._origins, []
        for ref, index, core in out.batch.entries():
            summary = Summary._wrap(core)
            parts.append(Part(out.key, [origins[ref]], summary._sources, index, built=summary))
        return parts

    def _watch(self, win: Window) -> None:
        """A new native window (not the fleet's, whose seconds pass on by their own rule): its completeness is asked
        natively with its job's others, and its deadline kept in the heap, until it seals or its deadline passes."""
        if win.key.job == FLEET_JOB:
            return
        assert win.native is not None
        win.native.watch(win.slot, True)
        win.watched = True
        heapq.heappush(self._deadlines, (win.deadline, next(self._order), win.key, win.slot))

    def _unwatch(self, win: Window) -> None:
        """The window is asked in Python from now on (`_pending`), as a window of the Python table is."""
        if win.watched:
            win.watched = False
            if win.native is not None:
                win.native.watch(win.slot, False)
            if win.has_pending:
                self._pending.add(win.key)

    def due(self, now: float, complete: Callable[[Window], bool],
            covered: Callable[[str], _native.Sources | None | Literal[False]] | None = None,
            world: Callable[[str], int] | None = None) -> list[Window]:
        """Windows with pending parts that must go now: newly complete, past deadline, or already sealed (late).

        A native table's watched windows (a collector's unsealed windows before their deadline) are asked in one
        native call per job: with `covered` (the node's `covered_complete` rule for native windows: per job, the
        sources a complete window holds, None when any source will do, False when none is complete), natively;
        without it, `complete` on each watched window with parts pending. With `world` too (the root's rule,
        `Node.world_complete`), step windows are complete when they hold every rank of their expected world (else of
        `world(job)`), and the other widths by `covered`."""
        if self.native is not None:
            self._past_deadline(now)
        out = []
        for key in list(self._pending):
            win = self.windows.get(key)
            if win is None or not win.has_pending:
                self._pending.discard(key)
                continue
            if win.sealed and key.job == FLEET_JOB:
                # Late hosts' parts of a fleet second are sent on together, LATE_BATCH_S after the first came, not
                # one delta per host and flush: a tier that passed the second on without its late hosts
                # (Node._fleet_passed) would otherwise send the root a delta for each of them. The second's first
                # fault (`urgent`: it was passed on without one) goes at once; faults after it wait with the rest,
                # so that K faulty hosts in a second cost a tier about 2 units of it, not K + 1.
                hold = win.fault_sent or not self.urgent(win)
                if hold and not win.late_at:
                    win.late_at = now + LATE_BATCH_S
                if hold and now < win.late_at:
                    continue
                win.fault_sent = win.fault_sent or not hold
                win.late_at = 0.0
            if win.sealed or now >= win.deadline or complete(win):
                if not win.sealed:
                    win.sealed, win.sealed_at = True, now
                    self._settling.append(key)
                    win.fault_sent = self.urgent(win)  # urgent() is of the fleet's job only
                self._pending.discard(key)
                out.append(win)
        if self.native is not None:
            out += self._due_watched(now, complete, covered, world)
        return out

    def _past_deadline(self, now: float) -> None:
        """Watched windows whose deadline passed are asked in Python from now on (due at once when pending)."""
        heap = self._deadlines
        while heap and heap[0][0] <= now:
            win = self._watched(heapq.heappop(heap))
            if win is not None:
                self._unwatch(win)

    def _watched(self, entry: tuple[float, int, Key, int]) -> Window | None:
        """The window a deadline entry is for, while it is still watched (not sealed or removed since, nor a window
        of the same key made after it)."""
        deadline, _, key, slot = entry
        win = self.windows.get(key)
        return win if win is not None and win.watched and win.slot == slot and win.deadline == deadline else None

    def _due_watched(self, now: float, complete: Callable[[Window], bool],
                     covered: Callable[[str], _native.Sources | None | Literal[False]] | None,
                     world: Callable[[str], int] | None) -> list[Window]:
        native = self.native
        assert native is not None
        out = []
        by_slot = self._by_slot
        for job, attempt in native.watched_jobs():
            if covered is None:
                every = native.complete(job, attempt, _native.Sources(_NOTHING))  # every watched one pending
                ready = [win for win in map(by_slot.__getitem__, every) if complete(win)]
            else:
                name = scoped(job, attempt)
                held = covered(name)
                steps = -1 if world is None else world(name)
                if held is False and steps < 0:
                    continue
                ready = [by_slot[slot] for slot in native.complete(job, attempt, None if held is False else held,
                                                                   steps, held is not False)]
            for win in ready:
                self._unwatch(win)
                win.sealed, win.sealed_at = True, now
                self._settling.append(win.key)
                self._pending.discard(win.key)
                out.append(win)
        return out

    def urgent(self, win: Window) -> bool:
        """A fleet window of an URGENT_METRICS metric whose pending parts hold a value above 0 (a fault): it is passed
        on at once (Node.covered_complete), and so are its late parts (`due`), rather than at the second's cut-off
        or LATE_BATCH_S later: a link down is named within the sample period plus the hops, whatever host is late."""
        if win.key.metric not in URGENT_METRICS or win.key.job != FLEET_JOB:
            return False
        if win.native is not None and win.native.pending_max(win.slot) > 0:
            return True
        return any(part.summary.count and part.summary.max > 0 for part in win.pending)

    def pending_windows(self) -> Iterator[Window]:
        """The windows with parts not yet shipped that `due` asks in Python (a native table's watched windows are
        asked natively: `next_deadline` is the earliest of their deadlines)."""
        for key in self._pending:
            win = self.windows.get(key)
            if win is not None and win.has_pending:
                yield win

    def next_deadline(self) -> float | None:
        """The earliest deadline of a watched window (maybe of one sealed or gone since: an early wake at most)."""
        heap = self._deadlines
        while heap and self._watched(heap[0]) is None:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def settle(self, key: Key, slot: int) -> Window | None:
        """`Window.settle` of the window `key` if the table still holds it; the window, or None."""
        win = self.windows.get(key)
        if win is not None:
            win.settle(slot)
        return win

    def mark_pending(self, win: Window) -> None:
        """Parts were put back into a window (a resend); ship it at the next flush."""
        if win.has_pending and not win.watched:
            self._pending.add(win.key)

    def expire(self, now: float) -> list[Window]:
        """Forget settled windows sealed more than retain_s ago (nothing pending or in flight)."""
        gone = []
        for _ in range(len(self._settling)):
            key = self._settling[0]
            win = self.windows.get(key)
            if win is None:
                self._settling.popleft()
                continue
            if now - win.sealed_at <= self.retain_s:
                break
            self._settling.popleft()
            if win.has_pending or win.inflight or win.absorbed:
                self._settling.append(key)  # not settled yet: look again later
                continue
            gone.append(self._remove(key))
        return gone

    def drop_settled(self, jobs: set[str]) -> list[Key]:
        """Forget the settled windows of these jobs (nothing pending, in flight or waiting on durability)."""
        if not jobs:
            return []
        gone = [key for key, win in self.windows.items() if key.job in jobs and win.settled]
        for key in gone:
            self._remove(key)
        return gone

    def _remove(self, key: Key) -> Window:
        """Forget a window (a native one's parts were taken first: it is settled, or dropped by the caller)."""
        win = self.windows.pop(key)
        self.bytes -= win.cost
        self._pending.discard(key)
        if win.native is not None:
            self.bytes -= SOURCE_BYTES * win.native.charged(win.slot)
            del self._by_slot[win.slot]
            win.watched = False  # the native table forgets it with the slot
            if win.has_pending:  # the table drops it (`_make_room`): on_drop releases what it held
                win.dropped = win.native.take(win.slot)
            win.native.remove(win.slot)
            win.native = None
        return win

    def _make_room(self, keep: Container[Key]) -> None:
        """Down to 90% of the budget (so that the work is paid once per many windows, not once per window):
        settled windows first, oldest sealed first; then, only if that is not enough, the oldest others; never
        the windows in `keep`."""
        target = self.max_bytes * 9 // 10
        evicted: list[Key] = []
        for _ in range(len(self._settling)):
            if self.bytes <= target:
                break
            key = self._settling.popleft()
            win = self.windows.get(key)
            if win is None:
                continue
            if not win.settled or key in keep:
                self._settling.append(key)  # still owed something: kept, looked at again later
                continue
            self._remove(key)
            evicted.append(key)
        if evicted:
            self.evicted += len(evicted)
            if self._on_evict:
                self._on_evict(evicted)
        while self.bytes > target:
            oldest = next((w for w in self.windows.values() if w.key not in keep), None)  # insertion order: oldest
            if oldest is None:
                return
            self._remove(oldest.key)
            if self._on_drop:
                self._on_drop(oldest)


def merge_parts(parts: list[Part]) -> Summary:
    if len(parts) == 1:
        return parts[0].summary
    return Summary.merge_all([p.summary if p.built is None else p.built for p in parts])


@dataclass(frozen=True)
class Refusal:
    """A window a tier refused or dropped (bad input above, a full buffer): it will never be stored, so every
    sender whose unit fed it is told, down to the ranks, instead of being told DURABLE (issue 14: a refused
    part must never be acknowledged as if it were stored)."""

    key: Key
    reason: str
    index: int | None = None  # the window's position in the sender's unit, where known


class Durability:
    """Refcounts of units received from below: acked when every unit holding them is settled upstream.

    The ack says DURABLE, or names the windows refused on the way (`release(origin, refusal)`): a unit
    with any refused window is never reported as wholly durable.

    Invariant: an origin is acknowledged exactly once, when its count goes from 1 to 0 (or by `settle`
    when it was never held). A release of an origin not held breaks the bookkeeping somewhere (a double
    release): it is an error, logged (rate-limited) and counted in `unheld_releases`, and never a second
    acknowledgement (which a sender would read as a second DURABLE, or a REFUSED after DURABLE).
    """

    def __init__(self, ack: Callable[[Origin, list[Refusal]], None]) -> None:
        self._refs: dict[Origin, int] = {}
        self._refused: dict[Origin, list[Refusal]] = {}
        self._ack = ack
        self.unheld_releases = 0
        self._unheld_log = RateLimitedLog(log)

    def hold(self, origin: Origin, times: int = 1) -> None:
        self._refs[origin] = self._refs.get(origin, 0) + times

    def release(self, origin: Origin, refusal: Refusal | None = None, times: int = 1) -> None:
        """Release `origin` once (or `times` times, as many releases in a row: one refusal noted at most)."""
        held = self._refs.get(origin, 0)
        if held < times:
            self.unheld_releases += times - max(held, 0)
            self._unheld_log.warn("durability error: release of %s, which is not held (a double release; "
                                   "%d so far): not acknowledged again", origin, self.unheld_releases)
            if held <= 0:
                return
        if refusal is not None:
            self._refused.setdefault(origin, []).append(refusal)
        if held > times:
            self._refs[origin] = held - times
            return
        del self._refs[origin]
        self._ack(origin, self._refused.pop(origin, []))

    def unhold(self, origin: Origin, times: int) -> None:
        """Give back holds taken in advance that nothing used (Node.offer_unit): no acknowledgement when the count
        reaches zero: the caller's `settle` gives it, with the refusals noted meanwhile (a window dropped while the
        unit was offered, a duplicate of a refused window: `refuse`), once."""
        held = self._refs.get(origin, 0)
        if held > times:
            self._refs[origin] = held - times
        else:
            self._refs.pop(origin, None)

    def refuse(self, origin: Origin, refusal: Refusal) -> None:
        """Note a refusal for `origin` without a hold of it (a duplicate of a refused window): told with its
        acknowledgement, by the release of its last hold or by `settle`."""
        self._refused.setdefault(origin, []).append(refusal)

    def settle(self, origin: Origin) -> None:
        """A unit that holds nothing (all duplicates of durable data, or empty): durable now, but for the
        refusals noted for it."""
        if origin not in self._refs:
            self._ack(origin, self._refused.pop(origin, []))

    def outstanding(self) -> int:
        return len(self._refs)
