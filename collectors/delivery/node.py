"""One tier's state machine: windows in, sealed windows out, durability acknowledged back down.

Agents, rack/cluster collectors and the root share it; they differ in where
parts come from (rank streams or child units), when a window is complete,
and where sealed windows go (`Upstream`: the parent, through an Outbox;
the root's store). See DESIGN §4 and §5.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, cast

from pyroaring import BitMap

from collectors.common.attempts import split
from collectors.common.fingerprints import FingerprintTable
from collectors.common.fleet import (
    FAMILIES,
    FLEET_JOB,
    SAMPLE_PHASE,
    family_mask,
    family_mask_of,
    family_of,
    host_index_of,
)
from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from collectors.delivery.forensics import CaptureQueue
from collectors.delivery.outbox import Outbox, Unit
from collectors.delivery.runs import Claim, RunLedger
from collectors.delivery.windows import (
    DEFAULT_WINDOW_BUDGET_BYTES,
    Deadlines,
    Durability,
    MergeFailed,
    Origin,
    OutPart,
    Part,
    Refusal,
    Window,
    WindowTable,
)
from telemetry.summary import _native
from telemetry.v1 import forensics_pb2, forward_pb2, summary_pb2

log = logging.getLogger(__name__)

WINDOW_WIRE_BYTES = 96  # a WindowSummary beside its summary: the key (job, metric, index, width), expected, late
COUNTERS_WIRE_BYTES = 128  # a unit's sender id, seq and counters
COUNTER_FIELDS = ("sdk_dropped", "dropped_windows", "rejected_overlaps", "duplicates", "resent", "late", "bad_inputs",
                  "refused_streams", "late_dropped", "probe_skipped", "forensics_dropped", "hardware_events_dropped",
                  "reply_streams_cut", "unheld_releases")


@dataclass
class RankView:
    """The ranks of one job under a node, by liveness."""

    alive: BitMap = field(default_factory=BitMap)
    stuck: BitMap = field(default_factory=BitMap)
    dead: BitMap = field(default_factory=BitMap)
    world_size: int = 0
    hosts: dict[int, str] = field(default_factory=dict)
    closed: BitMap = field(default_factory=BitMap)  # finished their run (run.close()): neither alive nor dead
    # Which process runs each rank (collectors/delivery/runs.py), for the ranks in `hosts`; absent: unknown.
    processes: dict[int, int] = field(default_factory=dict)

    @property
    def covered(self) -> BitMap:
        return self.alive | self.stuck | self.dead

    def to_proto(self, job: str, hosts: dict[int, str] | None = None,
                 processes: dict[int, int] | None = None) -> forward_pb2.RankStates:
        """The wire form; `hosts` (default: all of them) is the rank->host list to send, which may be a delta,
        with each of those ranks' process from `processes` (default: this view's)."""
        for bitmap in (self.alive, self.stuck, self.dead, self.closed):
            bitmap.run_optimize()  # contiguous ranks travel as runs, not 2 bytes per rank
        hosts = self.hosts if hosts is None else hosts
        processes = self.processes if processes is None else processes
        job, attempt = split(job)
        msg = forward_pb2.RankStates(job=job, attempt=attempt, alive=self.alive.serialize(),
                                     stuck=self.stuck.serialize(), dead=self.dead.serialize(),
                                     world_size=self.world_size, host_ranks=list(hosts), hosts=list(hosts.values()),
                                     closed=self.closed.serialize())
        if processes:
            msg.processes.extend(processes.get(rank, 0) for rank in hosts)
        return msg

    @classmethod
    def from_proto(cls, msg: forward_pb2.RankStates) -> RankView:
        def bitmap(data: bytes) -> BitMap:
            return BitMap.deserialize(data) if data else BitMap()
        if len(msg.hosts) != len(msg.host_ranks) or (msg.processes and len(msg.processes) != len(msg.host_ranks)):
            raise ValueError(f"{len(msg.host_ranks)} host_ranks, {len(msg.hosts)} hosts and {len(msg.processes)} "
                             "processes: parallel lists must be as long")
        return cls(bitmap(msg.alive), bitmap(msg.stuck), bitmap(msg.dead), msg.world_size,
                   dict(zip(msg.host_ranks, msg.hosts)), bitmap(msg.closed),
                   {rank: process for rank, process in zip(msg.host_ranks, msg.processes) if process})


def _fleet_kinds(covered: BitMap) -> set[tuple[int, int]]:
    """The device kinds (FAMILIES' slot ranges) that have sources in `covered`."""
    return {slots for slots in FAMILIES.values() if covered.intersect(family_mask_of(slots))}


def _one_host(covered: BitMap) -> bool:
    """Whether every source of `covered` is a device of one host."""
    if not covered:
        return True
    host = host_index_of(covered.min())
    return host_index_of(covered.max()) == host and all(host_index_of(src) == host for src in covered)


class AckDown(Protocol):
    """Tell a sender below about one of its units: durable (or settled with the windows in `refused` never
    to be stored), or window `index` rejected for `overlap`."""

    def __call__(self, origin: Origin, index: int | None = None, overlap: BitMap | None = None,
                 refused: list[Refusal] | None = None) -> None: ...


class Sink(Protocol):
    def ship(self, node: Node, windows: list[Window], now: float) -> Callable[[], None] | None:
        """Take the sealed windows (under the node's lock); may return slow work (a disk commit) that
        `Node.flush` then runs without the lock, so that intake goes on meanwhile."""

    def forget(self, keys: list[Key]) -> None: ...


Completion = Callable[["Node"], Callable[[Window], bool]]
"""When a tier's windows are complete, made for its node: `root_complete` at the root, every window at once at an
agent (its intake seals), `Node.covered_complete` (the default) in a collector."""


class Node:
    """Windows + durability for one tier. Callers hold `node.lock` around intake; flush takes it itself.

    Its collaborators come through the constructor (the pytorch/torchft model): `sink`, where sealed windows go
    (an `Upstream`, the root's `Finaliser`; a sink that needs the node itself, `Upstream`, is given it after),
    `complete` (a `Completion`) and `runs`, the run ledger (the root's is kept in its store). With `native`, the
    windows' parts are held natively (a collector's: WindowTable's `native`, fed by `offer_read`)."""

    def __init__(self, node_id: str, deadlines: Deadlines, ack_down: AckDown,
                 retain_s: float = 300.0, window_budget_bytes: int = DEFAULT_WINDOW_BUDGET_BYTES, *,
                 sink: Sink | None = None, complete: Completion | None = None, runs: RunLedger | None = None,
                 fleet_grace_s: float | None = None, native: bool = False) -> None:
        self.node_id = node_id
        # The fleet's seconds are passed on without waiting for late hosts (covered_complete): this long after the
        # bucket's end (twice as long above a rack); None waits for every host until the deadline.
        self.fleet_grace_s = fleet_grace_s
        self.lock = threading.RLock()
        self.table = WindowTable(deadlines, retain_s, window_budget_bytes, on_drop=self._dropped,
                                 on_evict=self._evicted, native=native)
        self._drop_log = RateLimitedLog(log)
        self._merge_log = RateLimitedLog(log)
        self.ack_down = ack_down
        self.durability = Durability(self._acked)
        self.counters = dict.fromkeys(COUNTER_FIELDS, 0)
        # Counters kept by the parts that own a bound (the outbox's forensics queues, the server's reply streams,
        # the GPU probe), read when the subtree's counters are: each part's drops reach the root with the others.
        self.counter_sources: dict[str, Callable[[], int]] = {
            "unheld_releases": lambda: self.durability.unheld_releases}
        self.child_counters: dict[str, dict[str, int]] = {}
        self.child_ranks: dict[str, dict[str, RankView]] = {}
        self.runs = runs or RunLedger()  # which process runs each rank, per job (the root's remembers: runs.py)
        self._own_ranks: dict[str, RankView] = {}
        self.hosts_version = 0  # bumped whenever any rank->host entry this node knows changes
        self._hosts_cache: dict[str, dict[int, str]] = {}  # hosts(job) as of _hosts_built_at
        self._hosts_built_at = -1
        # The ranks this node covers, per job (None: all closed), and the same parsed for native windows: kept
        # across flushes while the ranks' states are unchanged (`_ranks_version`, bumped by child_states when a
        # child's bitmaps change, forget_child, forget_jobs and own_ranks). A collector flushes after each child's
        # unit, and a rack's units come over the whole step: the union over every child's views was a third of
        # each flush tick's cost (bench/rack_tables.py's harness, docs/scale.md).
        self._covered: dict[str, BitMap | None] = {}
        self._covered_native: dict[str, _native.Sources] = {}
        self._ranks_version = 0
        self._covered_key: tuple[int, int, int] = (-1, 0, 0)
        self._fleet_masks: dict[tuple[int, tuple[int, int] | None], BitMap] = {}
        # During one flush, per device kind: the children that report it, and whether every child is one host
        self._fleet_children: dict[tuple[int, int] | None, tuple[set[str], bool]] | None = None
        self._fleet_views: dict[str, tuple[RankView, set[tuple[int, int]], bool]] = {}  # child: its view judged
        self.sink: Sink | None = sink
        # Replaceable after construction (tests do): `flush` asks a native table's watched windows by the covered rule
        # natively only while this is `covered_complete`.
        self.complete: Callable[[Window], bool] = self.covered_complete if complete is None else complete(self)

    def _acked(self, origin: Origin, refused: list[Refusal]) -> None:
        """An origin's last hold released: nothing here refers to it any more; tell its sender."""
        self.table.forget_origin(origin)
        if refused:
            self.ack_down(origin, refused=refused)
        else:
            self.ack_down(origin)

    @property
    def own_ranks(self) -> dict[str, RankView]:
        """This node's own ranks by job (an agent's); setting it notes whether their hosts changed."""
        return self._own_ranks

    @own_ranks.setter
    def own_ranks(self, views: dict[str, RankView]) -> None:
        old = self._own_ranks
        if views.keys() != old.keys() or any(views[job].hosts != old[job].hosts
                                             or views[job].processes != old[job].processes for job in views):
            self.hosts_version += 1
        for view in views.values():
            _run_optimize(view)
        self._own_ranks = views
        self._ranks_version += 1

    def child_states(self, sender: str, views: dict[str, RankView]) -> None:
        """A child's latest rank states, by job (parsed and checked by the caller, without this node's lock).
        Host lists are deltas (sent when they change, and in full after a (re)connect): the child's hosts are
        kept across units, pruned to the ranks it covers."""
        previous = self.child_ranks.get(sender, {})
        if previous.keys() != views.keys() or any(_states_differ(previous[job], view) for job, view in views.items()):
            self._ranks_version += 1
        for job, view in views.items():
            if view.processes and self.runs.claim(sender, job, {rank: Claim(process, view.hosts.get(rank, ""))
                                                                for rank, process in view.processes.items()}):
                self.hosts_version += 1
            refused = self.runs.refused(sender, job)
            if refused and view.hosts:  # a refused claimant's names must not replace the first one's
                view.hosts = {rank: host for rank, host in view.hosts.items() if rank not in refused}
            before = previous.get(job)
            if before is not None:
                hosts = before.hosts
                if len(hosts) > len(view.alive) + len(view.stuck) + len(view.dead) or (
                        view.hosts and not view.hosts.items() <= hosts.items()):
                    covered = view.covered
                    hosts = {rank: host for rank, host in hosts.items() if rank in covered}
                    hosts.update(view.hosts)
                    self.hosts_version += 1
                view.hosts = hosts
            elif view.hosts:
                self.hosts_version += 1
        if previous.keys() - views.keys():
            self.hosts_version += 1
        for view in views.values():
            _run_optimize(view)
        fleet_before = previous.get(FLEET_JOB)
        if fleet_before is not None:  # sources the child no longer covers: the ledger may forget their claims
            fleet_now = views.get(FLEET_JOB)
            if fleet_now is None or _states_differ(fleet_before, fleet_now):
                gone = fleet_before.covered - fleet_now.covered if fleet_now is not None else fleet_before.covered
                if gone:
                    self.runs.dropped(FLEET_JOB, gone)
        self.child_ranks[sender] = views

    # ----------------------------------------------------------- intake
    def offer(self, part: Part, expected: int, preheld: bool = False) -> tuple[str, BitMap | None]:
        """Accept, absorb or refuse one part; holds its origins until it is durable upstream.

        preheld: the caller already holds each origin once for this part (the agent does, from intake).
        """
        verdict, overlap = self.table.offer(part, expected)
        if verdict == "accepted":
            if not preheld:
                for origin in part.origins:
                    self.durability.hold(origin)
            return verdict, overlap
        if verdict == "duplicate":
            self.counters["duplicates"] += 1
            self.attach_duplicate(self.table.windows[part.key], part.origins)
        else:
            self.counters["rejected_overlaps"] += 1
        if preheld:
            for origin in part.origins:
                self.durability.release(origin)
        return verdict, overlap

    def offer_unit(self, origin: Origin, offers: list[tuple[Part, int]]) -> list[tuple[str, BitMap | None]]:
        """`offer` of each (part, expected) of one unit from below, every part's origins being [origin]: the origin
        is held for all of them at once (one refcount update per unit, not one per window), and the holds of parts
        not accepted are given back after, without an acknowledgement (the caller settles the unit once it has
        answered it). Returns each part's verdict and overlap. The caller holds the lock (the root read any window it
        let go back from its store before: collectors/root/reads.py)."""
        if not offers:
            return []
        self.durability.hold(origin, len(offers))  # before any offer: a window dropped meanwhile releases its parts
        offer, windows, counters = self.table.offer, self.table.windows, self.counters
        unused = 0
        verdicts = []
        for part, expected in offers:
            verdict, overlap = offer(part, expected)
            if verdict != "accepted":
                unused += 1
                if verdict == "duplicate":
                    counters["duplicates"] += 1
                    self.attach_duplicate(windows[part.key], part.origins)
                else:
                    counters["rejected_overlaps"] += 1
            verdicts.append((verdict, overlap))
        if unused:
            self.durability.unhold(origin, unused)
        return verdicts

    def offer_read(self, origin: Origin, unit: _native.Unit) -> list[tuple[int, str, BitMap, int]]:
        """`offer_unit` of a unit read natively (every window read fast and passed its checks), into the native
        table in one call: the origin held once per window, the holds of windows not accepted given back after,
        room made (`WindowTable.fit_read`) between the two.
        Returns the windows not accepted: (position, "duplicate"|"overlap", overlap, how many sources the part has).
        The caller holds the lock."""
        if not len(unit):
            return []
        self.durability.hold(origin, len(unit))  # before any offer: a window dropped meanwhile releases its parts
        refused = self.table.offer_read(origin, unit)
        out = []
        for pos, win, verdict, overlap, sources in refused:
            if verdict == "duplicate":
                self.counters["duplicates"] += 1
                self.attach_duplicate(win, [origin])
            else:
                self.counters["rejected_overlaps"] += 1
            out.append((pos, verdict, overlap, sources))
        # Only now back into the budget: a window dropped here releases the duplicates just attached to it (as
        # refused), and the windows the unit went into are kept, so that it is acknowledged once (below, or by
        # the caller's settle), never while it is still being offered.
        self.table.fit_read(unit, [pos for pos, *_ in refused])
        if refused:
            self.durability.unhold(origin, len(refused))
        return out

    def offer_split(self, part: Part, expected: int, preheld: bool = False,
                    held_too: bool = False) -> tuple[bool, list[tuple[Part, str]]]:
        """Offer `part`; where its window already holds some of its sources, offer it cut per source instead
        (Part.split: an agent's raw values), so that the sources new to the window still go in and one
        source's repeat cannot take the others' values down with it.

        The pieces of sources the window already holds are left out, or with `held_too` offered as well (each
        is then refused as a duplicate, counted, and what it preheld released; the caller reads which from the
        verdicts). Returns whether the part was cut, and each (piece, verdict) offered. The caller holds the
        lock. Used by the agent for its steps, its heartbeat buckets and its hardware windows."""
        win = self.table.windows.get(part.key)
        if win is None or not (win.sources & part.sources):
            return False, [(part, self.offer(part, expected, preheld)[0])]
        pieces = part.split() or [part]
        if not held_too:
            pieces = [p for p in pieces if not (p.sources & win.sources)]
        return True, [(piece, self.offer(piece, expected, preheld)[0]) for piece in pieces]

    def attach_duplicate(self, win: Window, origins: list[Origin]) -> None:
        """A duplicate is durable once everything the window holds now is: wait on what is still open. A duplicate
        of a refused window (`Window.refused`) is refused with it."""
        if win.refused is not None:
            refusal = Refusal(win.key, win.refused)
            for origin in origins:
                self.durability.refuse(origin, refusal)
            return
        waits = win.absorb(origins)
        if waits:
            for origin in origins:
                self.durability.hold(origin, waits)

    def assert_locked(self) -> None:
        """The lock discipline, checked where a docstring says "under the node's lock" (cheap: one C call)."""
        assert cast(Any, self.lock)._is_owned(), "the node's lock must be held here"

    def release_all(self, outs: list[OutPart], refused: str | None = None) -> None:
        """The outs are settled: durable upstream, or (`refused` says why) refused or dropped, never to be
        stored, which every sender that fed them is told instead of DURABLE."""
        if refused is None:  # each origin released once for all its parts (a child's unit fed every window of a step)
            times: dict[Origin, int] = {}
            for out in outs:
                for part in out.constituents:
                    for origin in part.origins:
                        times[origin] = times.get(origin, 0) + 1
                for origin in out.absorbed:
                    times[origin] = times.get(origin, 0) + 1
            batches = [out.batch for out in outs if out.batch is not None]
            if batches:  # parts held natively: counted there, one pass over every window's parts
                for origin, n in self.table.origin_counts(batches):
                    times[origin] = times.get(origin, 0) + n
            release = self.durability.release
            for origin, n in times.items():
                release(origin, times=n)
            return
        for out in outs:
            self.release(out.key, out.constituents, out.absorbed, refused, out.batch)

    def take(self, win: Window, late: bool) -> OutPart | None:
        """`win.take` for a sink (under the lock): None when its parts could not be merged. Then they are released as
        refused (each sender is told, none waits for a window that will never be stored), counted in `bad_inputs`
        and logged (rate-limited), and the flush goes on with the other windows. The window remembers it: a resend of
        what it held is refused too (`attach_duplicate`), and a later part goes up as a late delta (`forwarded`), not
        as the window's first (at the root it is refused: Finaliser.ship)."""
        try:
            return win.take(late)
        except MergeFailed as failed:
            self.counters["bad_inputs"] += 1
            self._merge_log.warn("%s (bad_inputs): refused to their senders", failed)
            win.refused = f"refused at {self.node_id}: its parts could not be merged ({failed.cause})"
            win.forwarded = True  # what follows is a late delta of it, never its first part (Window.forwarded)
            self.release(failed.key, failed.parts, failed.absorbed, win.refused, failed.batch)
            return None

    def release(self, key: Key, parts: list[Part], absorbed: list[Origin], refused: str,
                batch: _native.Batch | None = None) -> None:
        """Release what one refused or dropped window's parts (those held natively: `batch`) and the duplicates
        absorbed into it held, telling every sender why (`refused`); settled windows are released in bulk by
        release_all."""
        release = self.durability.release
        for part in parts:
            one = Refusal(key, refused, part.index)
            for origin in part.origins:
                release(origin, one)
        for origin, index in self.table.refs(batch) if batch is not None else ():
            release(origin, Refusal(key, refused, index))
        refusal = Refusal(key, refused)
        for origin in absorbed:
            release(origin, refusal)

    # ----------------------------------------------------------- sealing
    def ranks(self, job: str) -> RankView:
        """The ranks of a job under this node, with their hosts."""
        view = self.states(job)
        for one in self._views(job):
            view.hosts.update(one.hosts)
        return view

    def states(self, job: str) -> RankView:
        """The ranks of a job under this node by liveness, without hosts (cheaper: bitmap unions only). Its bitmaps
        are read, never changed: where one view holds the job (an agent's own ranks, a tier's one child) they are
        that view's, not copies (a copy of a host's 10 fleet sources, one roaring container each, cost ~4 us, and
        an agent sends its states with every unit). Views are replaced whole, never changed in place, and are
        run-optimised as they come (`_run_optimize`)."""
        views = self._views(job)
        if len(views) == 1:
            one = views[0]
            return RankView(one.alive, one.stuck, one.dead, one.world_size, closed=one.closed)
        return RankView(BitMap.union(BitMap(), *(v.alive for v in views)),
                        BitMap.union(BitMap(), *(v.stuck for v in views)),
                        BitMap.union(BitMap(), *(v.dead for v in views)),
                        max((v.world_size for v in views), default=0),
                        closed=BitMap.union(BitMap(), *(v.closed for v in views)))

    def world_size(self, job: str) -> int:
        """The job's world size as its ranks' views say (what `states(job).world_size` is), without the bitmap
        unions and host maps: the root asks it per commit and per step window under the lock."""
        return max((v.world_size for v in self._views(job)), default=0)

    def all_closed(self, job: str, whole_world: bool = False) -> bool:
        """Every rank this node knows of for `job` closed its run (and, with whole_world, every rank of
        the world: the root's test, which does not trust that every rank ever registered)."""
        view = self.states(job)
        if not view.closed or view.covered - view.closed:
            return False
        return not whole_world or len(view.closed) >= view.world_size

    def forget_jobs(self, jobs: set[str]) -> None:
        """Finished jobs: drop what this node keeps for them, settled windows included (those still pending
        or in flight expire when settled). Dedup does not need them: the root finds a resend of a window it
        no longer holds in its store."""
        for per_job in self.child_ranks.values():
            for job in jobs:
                per_job.pop(job, None)
        self._ranks_version += 1
        for job in jobs:
            self.table.deadlines.forget(job)
            self.runs.forget_job(job)
        gone = self.table.drop_settled(jobs)
        if gone and self.sink is not None:
            self.sink.forget(gone)
        self.hosts_version += 1

    def forget_child(self, child: str) -> None:
        """A child gone longer than the timeout (failed over, or decommissioned): its ranks and counters no
        longer count here."""
        self.child_ranks.pop(child, None)
        self.child_counters.pop(child, None)
        self._ranks_version += 1
        self.runs.forget_child(child)
        self.hosts_version += 1

    def hosts(self, job: str) -> dict[int, str]:
        """The job's rank->host map, shared and not to be modified: built once per `hosts_version` (every change
        of any rank->host entry bumps it), not per call. The root's periodic check asks it for every job every
        check under the lock; rebuilt each time it cost O(ranks) per job (bench/node_lock.py)."""
        if self._hosts_built_at != self.hosts_version:
            self._hosts_cache.clear()
            self._hosts_built_at = self.hosts_version
        hosts = self._hosts_cache.get(job)
        if hosts is None:
            hosts = {}
            for one in self._views(job):
                hosts.update(one.hosts)
            self._hosts_cache[job] = hosts
        return hosts

    def processes(self, job: str) -> dict[int, int]:
        """Which process runs each rank of `job`: the agent's own ranks, and what its ledger accepted from the
        children (never a process it refused: the parent would refuse this node's windows in its place)."""
        processes = self.runs.processes(job)
        if job in self._own_ranks:
            processes.update(self._own_ranks[job].processes)
        return processes

    def _views(self, job: str) -> list[RankView]:
        views = [self._own_ranks[job]] if job in self._own_ranks else []
        views += [per_job[job] for per_job in self.child_ranks.values() if job in per_job]
        return views

    def jobs(self) -> set[str]:
        jobs = set(self.own_ranks)
        for per_job in self.child_ranks.values():
            jobs.update(per_job)
        return jobs

    def covered_complete(self, win: Window) -> bool:
        """Every rank this node covers for the window's job has reported. Each job's covered set is computed
        once while the children's states are unchanged (not once per pending window, nor per flush). When every
        rank here closed its run, a window waits for nobody: each rank sent everything before its bye (a part
        still on its way from another child arrives as a late delta)."""
        job = win.key.job
        covered = self._covered_of(job)
        sources = self.table.sources(win)
        if covered is None:
            return bool(sources)
        if job == FLEET_JOB and covered:
            family = self._fleet_family(covered, win.key.metric)
            if family.issubset(sources):
                return True
            return self.fleet_grace_s is not None and (self.table.urgent(win) or self._fleet_passed(win))
        return bool(covered) and covered.issubset(sources)

    def world_complete(self, win: Window) -> bool:
        """The root's rule (`root_complete`): a step window is complete when every rank of the world reported (its
        expected world, else the job's as the ranks' views say), and none beyond it; a time bucket when every rank
        known did (`covered_complete`). A native table asks it per job natively (WindowTable.due's `world`)."""
        if not win.key.is_step:
            return self.covered_complete(win)
        world = self.table.expected(win) or self.world_size(win.key.job)
        sources = self.table.sources(win)
        return world > 0 and len(sources) >= world and sources.max() < world

    def _covered_of(self, job: str) -> BitMap | None:
        """The ranks this node covers for `job` (None: every rank here closed its run), computed once per job while
        the ranks' states are unchanged (`_ranks_version`; a child added or removed by assigning `child_ranks`
        directly, as tests do, changes its size). Not to be mutated by the caller."""
        key = (self._ranks_version, id(self.child_ranks), len(self.child_ranks))
        cache = self._covered
        if key != self._covered_key:
            cache.clear()
            self._covered_native.clear()
            self._covered_key = key
        elif job in cache:
            return cache[job]
        views = self._views(job)
        covered: BitMap | None = BitMap.union(BitMap(), *(b for v in views for b in (v.alive, v.stuck, v.dead)))
        if not covered and any(v.closed for v in views):
            covered = None
        cache[job] = covered
        return covered

    def _covered_sources(self, job: str) -> _native.Sources | None | Literal[False]:
        """covered_complete's rule for a native window of `job`, as the native table asks it: the sources a complete
        window holds every one of, None when any source will do (every rank here closed), False when no window is
        complete (no rank known). Parsed once per job while the ranks' states are unchanged (with _covered_of)."""
        covered = self._covered_of(job)
        if covered is None:
            return None
        if not covered:
            return False
        held = self._covered_native.get(job)  # cleared with _covered (by _covered_of, just called)
        if held is None:
            held = self._covered_native[job] = _native.Sources(covered.serialize())
        return held

    def _fleet_passed(self, win: Window) -> bool:
        """A fleet second is passed on without its late hosts (issue 28: a link down named within 2 s however many
        hosts): once every child that covers the metric's devices has sent its part (a rack that passed the second
        on without a late host of its own has sent its part), or, whatever is missing, at `_fleet_cutoff_ms`. A part
        that comes after travels up as a late delta and is merged into the stored window exactly (Finaliser.ship)."""
        children, _ = self._fleet_children_of(win.key.metric)
        if children:
            senders = self.table.senders(win)
            if children <= senders:
                return True
        return time.time() * 1000 >= self._fleet_cutoff_ms(win.key)

    def _fleet_cutoff_ms(self, key: Key) -> float:
        """When (wall ms) a fleet second is passed on whatever is missing: `fleet_grace_s` after its hosts sampled it
        (SAMPLE_PHASE into the second: each host's part is due then, not at the second's end) at a tier whose
        children are hosts, twice that above (a rack's part, sent at its own cut-off, still comes in time). Counted
        from the bucket's end instead, a link down written just after a sample waited 0.3 s more at every rack with
        a late host: up to 2.27 s to the root at 2,000 hosts (docs/fleet.md, "Completeness"). One rule for the flush
        (_fleet_passed) and for when it wakes (next_due)."""
        assert self.fleet_grace_s is not None
        _, hosts_below = self._fleet_children_of(key.metric)
        return key.index + SAMPLE_PHASE * key.width_ms + self.fleet_grace_s * (1000 if hosts_below else 2000)

    def _fleet_children_of(self, metric: str) -> tuple[set[str], bool]:
        """The children whose fleet sources include devices of `metric`'s kind, and whether every child is one host
        (a rack's children are agents): once per flush and device kind, each child's view judged once (a child's
        views are replaced by each of its units)."""
        slots = family_of(metric)
        cache = self._fleet_children
        found = cache.get(slots) if cache is not None else None
        if found is None:
            children: set[str] = set()
            hosts_below = True
            judged = self._fleet_views
            for child, per_job in self.child_ranks.items():
                view = per_job.get(FLEET_JOB)
                if view is None:
                    continue
                seen = judged.get(child)
                if seen is None or seen[0] is not view:
                    seen = judged[child] = (view, _fleet_kinds(view.covered), _one_host(view.covered))
                if slots in seen[1]:
                    children.add(child)
                hosts_below = hosts_below and seen[2]
            if len(judged) > len(self.child_ranks):
                for gone in judged.keys() - self.child_ranks.keys():
                    del judged[gone]
            found = (children, hosts_below)
            if cache is not None:
                cache[slots] = found
        return found

    def _fleet_family(self, covered: BitMap, metric: str) -> BitMap:
        """The fleet's sources that report `metric` (its device kind's: collectors/common/fleet.py), kept until
        the hosts this node knows change."""
        slots = family_of(metric)
        key = (self.hosts_version, slots)
        found = self._fleet_masks.get(key)
        if found is None:
            if len(self._fleet_masks) > 8:
                self._fleet_masks.clear()
            found = self._fleet_masks[key] = family_mask(covered, metric)
        return found

    def flush(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self.lock:
            self._fleet_children = {}
            # covered_complete's rule for a native table's watched windows is asked natively, per job (WindowTable.due);
            # any other completion is asked of each window
            covered = self._covered_sources if self.complete in (self.covered_complete, self.world_complete) else None
            world = self.world_size if self.complete == self.world_complete else None
            try:
                due = self.table.due(now, self.complete, covered, world)
            finally:
                self._fleet_children = None
            assert self.sink is not None, "node has no sink"
            after = self.sink.ship(self, due, now)
            gone = self.table.expire(now)
            if gone:
                self.sink.forget([win.key for win in gone])
        if after is not None:
            after()

    def next_due(self, now: float) -> float | None:
        """When (monotonic) a flush next has something to do that no new part announces: a pending window's deadline,
        a fleet second's cut-off (the one Node._fleet_passed applies: a tier above racks waiting for a rack's part
        neither wakes at the rack's grace nor, once that passed, flushes every interval until its own), a sealed
        window's late parts, the sink's liveness unit. None: nothing. What makes a window complete comes with a
        unit, which wakes the tier (CollectorService.on_work)."""
        times = []
        wall_ms = time.time() * 1000
        with self.lock:
            self._fleet_children = {}  # each device kind's children judged once for all pending fleet seconds
            try:
                deadline = self.table.next_deadline()
                if deadline is not None:
                    times.append(deadline)
                for win in self.table.pending_windows():
                    key = win.key
                    if win.sealed:
                        times.append(win.late_at or now)
                        continue
                    times.append(win.deadline)
                    if key.job == FLEET_JOB and self.fleet_grace_s is not None:
                        times.append(now + (self._fleet_cutoff_ms(key) - wall_ms) / 1000)
            finally:
                self._fleet_children = None
            if isinstance(self.sink, Upstream):
                times.append(self.sink.next_liveness())
        return min(times) if times else None

    def subtree_counters(self) -> dict[str, int]:
        total = dict(self.counters)
        for name, read in self.counter_sources.items():
            total[name] += read()
        for child in self.child_counters.values():
            for name in COUNTER_FIELDS:
                total[name] += child.get(name, 0)
        return total

    def _evicted(self, keys: list[Key]) -> None:
        """Settled windows the table forgot early to stay in its budget: durable already, so no loss and not
        counted as one; the sink forgets them too (the root reloads one from its store if a resend comes)."""
        if self.sink is not None:
            self.sink.forget(keys)

    def _dropped(self, win: Window) -> None:
        """The table was over its budget with nothing settled left to forget, and let its oldest window go.
        Only a window that held data not yet handed on (pending parts, absorbed duplicates) is a loss: counted
        (`dropped_windows`), logged (rate-limited: this can repeat thousands of times a second), and what it
        held released as refused, so the senders stop retaining it and their ranks learn it was lost
        (run.close() is not True). Units in flight upstream release their own holds when acknowledged."""
        if self.sink is not None:
            self.sink.forget([win.key])
        if not (win.has_pending or win.absorbed):
            return
        self.counters["dropped_windows"] += 1
        self._drop_log.warn("window table over its budget (%d bytes) with nothing settled to forget: dropped %s "
                            "unstored (dropped_windows)", self.table.max_bytes, win.key)
        pending, absorbed, batch = win.drop_pending()
        self.release(win.key, pending, absorbed,
                     refused=f"dropped at {self.node_id}: its window table was over its budget (dropped_windows)",
                     batch=batch)


def _run_optimize(view: RankView) -> None:
    """A view's bitmaps in their run-optimised form as it becomes the node's, while nothing else holds them: `states`
    hands them out uncopied where one view holds a job, and `RankView.to_proto`'s own run_optimize then finds each
    container in its best form already and changes none (CRoaring's convert_run_optimize returns the container it
    was given), so a bitmap read elsewhere is never changed under its reader."""
    for bitmap in (view.alive, view.stuck, view.dead, view.closed):
        bitmap.run_optimize()


def _states_differ(before: RankView, view: RankView) -> bool:
    """Whether a child's new states for a job change what this node covers (Node._covered_of)."""
    return (before.alive != view.alive or before.stuck != view.stuck or before.dead != view.dead
            or before.closed != view.closed)


class Upstream:
    """Sink for agents and non-root collectors: sealed windows go to the parent as numbered units."""

    def __init__(self, node: Node, outbox_factory: Callable[[Callable[[Unit, forward_pb2.Ack], None]], Outbox],
                 liveness_every_s: float = 1.0) -> None:
        self.node = node
        self.outbox = outbox_factory(self._on_ack)
        self.outbox.on_drop = self._on_drop
        self.outbox.received_acks = False  # _on_ack acts on DURABLE and rejections only: a plain RECEIVED is no news
        self.liveness_every_s = liveness_every_s
        self._last_sent = 0.0
        # Rank->host (and process) lists go up only when they change, and in full on the first unit after each
        # (re)connect: what the parent was last sent per job, as of which node.hosts_version and which outbox
        # connection.
        self._hosts_sent: dict[str, dict[int, tuple[str, int]]] = {}
        self._hosts_version = -1
        self._hosts_connection = -1
        self._refusal_log = RateLimitedLog(log)
        # Forensics riding on the units (docs/forensics.md): captures for the root, and this subtree's merged
        # collective fingerprints (a FingerprintTable, set by the tier that keeps one). Both under the node's lock.
        self.captures: CaptureQueue[forensics_pb2.Capture] = CaptureQueue()
        self.fingerprints: FingerprintTable | None = None
        self.exits: CaptureQueue[forensics_pb2.RankExit] = CaptureQueue(max_pending=4096)  # how ranks ended
        node.counter_sources["forensics_dropped"] = lambda: self.captures.dropped + self.exits.dropped

    def ship(self, node: Node, windows: list[Window], now: float) -> None:
        """Hand the windows to the outbox, which sends them from the process's client loop (clientloop.py): nothing
        slow here. Under the node's lock (Node.flush)."""
        node.assert_locked()
        parts = []
        for win in windows:
            out = node.take(win, late=win.forwarded)
            if out is None:
                continue
            if out.late:
                node.counters["late"] += 1
            parts.append((win, out))
        if parts or self.captures or self.exits or now - self._last_sent >= self.liveness_every_s:
            self._send(node, parts, now)

    def next_liveness(self) -> float:
        """When (monotonic) `ship` sends a unit even with nothing else to send (the parent's sign of life)."""
        return self._last_sent + self.liveness_every_s

    def forget(self, keys: list[Key]) -> None:
        """Nothing to do: units are retained by the outbox until durable."""

    def _on_drop(self, unit: Unit) -> None:
        """The outbox overflowed and let this unit go: count its windows, and stop holding what it held."""
        node = self.node
        with node.lock:
            outs = [out for out in _outs(unit) if out is not None]
            node.counters["dropped_windows"] += len(outs)
            for out in outs:
                node.table.settle(out.key, unit.seq)
            node.release_all(outs, refused=f"dropped at {node.node_id}: its outbox to the parent was full "
                                           "(dropped_windows)")

    def _send(self, node: Node, parts: list[tuple[Window, OutPart]], now: float) -> None:
        message = forward_pb2.SummaryBatch()
        nbytes = 0  # the unit's wire size, for the outbox's byte budget, added up here (ByteSize() serialises)
        for _, out in parts:
            data = out.summary.to_bytes()  # what to_proto() parses: the size comes free
            nbytes += len(data) + WINDOW_WIRE_BYTES
            message.windows.add(key=out.key.to_proto(), summary=summary_pb2.Summary.FromString(data),
                                expected=out.expected, late=out.late)
        jobs = sorted(node.jobs())
        for job, (hosts, processes) in zip(jobs, self._host_deltas(node, jobs)):
            message.ranks.append(node.states(job).to_proto(job, hosts, processes))
        message.captures.extend(self.captures.take())
        message.exits.extend(self.exits.take())
        if self.fingerprints is not None:
            message.fingerprints.extend(self.fingerprints.drain())
        counters = node.subtree_counters()
        counters["resent"] += self.outbox.resent
        for name, value in counters.items():
            setattr(message.counters, name, value)
        for extras in (message.ranks, message.captures, message.exits, message.fingerprints):
            nbytes += sum(item.ByteSize() for item in extras)
        unit = self.outbox.submit(message, [out for _, out in parts], nbytes + COUNTERS_WIRE_BYTES)
        for win, out in parts:
            win.dispatch(unit.seq, out)
        self._last_sent = now

    def _host_deltas(self, node: Node, jobs: list[str]) -> list[tuple[dict[int, str], dict[int, int]]]:
        """Per job, the rank->host entries (with each rank's process) the parent has not been sent on this
        connection."""
        connection = getattr(self.outbox, "connections", 0)
        if connection != self._hosts_connection:
            self._hosts_sent, self._hosts_connection = {}, connection  # a new stream: send every host again
        elif node.hosts_version == self._hosts_version:
            return [({}, {}) for _ in jobs]
        self._hosts_version = node.hosts_version
        deltas = []
        sent_now: dict[str, dict[int, tuple[str, int]]] = {}
        for job in jobs:
            processes = node.processes(job)
            seats = {rank: (host, processes.get(rank, 0)) for rank, host in node.hosts(job).items()}
            sent = self._hosts_sent.get(job, {})
            changed = {rank: seat for rank, seat in seats.items() if sent.get(rank) != seat}
            deltas.append(({rank: seat[0] for rank, seat in changed.items()},
                           {rank: seat[1] for rank, seat in changed.items() if seat[1]}))
            sent_now[job] = seats
        # Only the jobs the node still knows: a forgotten job's entry would stay for the connection's life (the
        # soak's agent grew per job), and the parent forgets a job absent from the states, so one that comes
        # back must be sent in full.
        self._hosts_sent = sent_now
        return deltas

    def _on_ack(self, unit: Unit, ack: forward_pb2.Ack) -> None:
        node = self.node
        with node.lock:
            outs = _outs(unit)
            for rejection in ack.rejections:
                if rejection.overlapping_sources:
                    self._rejected(node, unit, outs, rejection)
                else:
                    self._refused(node, unit, outs, rejection)
            if ack.status == forward_pb2.Ack.DURABLE:
                self.outbox.forget(unit.seq)
                settled = [out for out in outs if out is not None]
                for out in settled:
                    node.table.settle(out.key, unit.seq)
                node.release_all(settled)

    def _rejected(self, node: Node, unit: Unit, outs: list[OutPart | None], rejection: forward_pb2.Rejection) -> None:
        if rejection.index >= len(outs) or outs[rejection.index] is None:
            return
        out = outs[rejection.index]
        assert out is not None
        outs[rejection.index] = None
        win = node.table.settle(out.key, unit.seq)
        held = constituents = node.table.parts_of(out)
        if len(constituents) == 1:
            constituents = constituents[0].split() or constituents  # an agent's raw part splits per rank
        if len(constituents) > 1 and win is not None:
            # Resend each constituent alone: each is wholly new or wholly a duplicate upstream.
            singles = [OutPart(out.key, out.expected, True, part.summary, [part]) for part in constituents]
            singles[0].absorbed = out.absorbed
            self._send(node, [(win, single) for single in singles], time.monotonic())
            return
        # One constituent that still overlaps partly: its own sender must split it.
        overlap = BitMap(rejection.overlapping_sources)
        for part in held:
            if win is not None:
                node.table.remove_sources(win, part.sources)
            for origin in part.origins:
                node.ack_down(origin, part.index, overlap & part.sources)
        node.release_all([out])

    def _refused(self, node: Node, unit: Unit, outs: list[OutPart | None], rejection: forward_pb2.Rejection) -> None:
        """A window the parent (or a tier above it) refused as bad input: it will never be stored. It was
        counted (`bad_inputs`) where it was refused, so not again here; its senders are told it was refused
        (down to the ranks, whose close() is then not True) and stop retaining it.

        The window is found by its index in the unit; a refusal passed down from further up may name only
        its key (a duplicate absorbed into a refused window), and then every window of the unit with that
        key goes.
        """
        found = outs[rejection.index] if rejection.index < len(outs) else None
        if found is not None and (not rejection.HasField("key") or found.key.to_proto() == rejection.key):
            indexes = [rejection.index]
        else:
            indexes = [i for i, out in enumerate(outs) if out is not None and out.key.to_proto() == rejection.key]
        refused = []
        for index in indexes:
            out = outs[index]
            assert out is not None
            outs[index] = None
            win = node.table.settle(out.key, unit.seq)
            if win is not None:
                win.refused = rejection.reason  # a resend of it is refused again (Node.attach_duplicate)
            refused.append(out)
        if refused:
            self._refusal_log.warn("the parent refused %d window(s) of unit %d, e.g. %s: %s", len(refused),
                                   unit.seq, refused[0].key, rejection.reason)
            if rejection.refused_sources:  # held by another host above: refused here from now on (runs.py)
                node.runs.refused_above(refused[0].key.job, list(rejection.refused_sources))
            node.release_all(refused, refused=rejection.reason)


def _outs(unit: Unit) -> list[OutPart | None]:
    """What Upstream.ship gave the outbox as a unit's payload: its OutParts, in the message's order."""
    return cast("list[OutPart | None]", unit.payload)
