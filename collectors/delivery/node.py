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
from typing import Protocol

from pyroaring import BitMap

from collectors.delivery.outbox import Outbox, Unit
from collectors.delivery.windows import Deadlines, Durability, Origin, OutPart, Part, Window, WindowTable, merge_parts
from telemetry.v1 import forward_pb2

log = logging.getLogger(__name__)

COUNTER_FIELDS = ("sdk_dropped", "dropped_windows", "rejected_overlaps", "duplicates", "resent", "late", "bad_inputs")


@dataclass
class RankView:
    """The ranks of one job under a node, by liveness."""

    alive: BitMap = field(default_factory=BitMap)
    stuck: BitMap = field(default_factory=BitMap)
    dead: BitMap = field(default_factory=BitMap)
    world_size: int = 0
    hosts: dict[int, str] = field(default_factory=dict)

    @property
    def covered(self) -> BitMap:
        return self.alive | self.stuck | self.dead

    def to_proto(self, job: str) -> forward_pb2.RankStates:
        return forward_pb2.RankStates(job=job, alive=self.alive.serialize(), stuck=self.stuck.serialize(),
                                      dead=self.dead.serialize(), world_size=self.world_size,
                                      host_ranks=list(self.hosts), hosts=list(self.hosts.values()))

    @classmethod
    def from_proto(cls, msg: forward_pb2.RankStates) -> RankView:
        def bitmap(data: bytes) -> BitMap:
            return BitMap.deserialize(data) if data else BitMap()
        return cls(bitmap(msg.alive), bitmap(msg.stuck), bitmap(msg.dead), msg.world_size,
                   dict(zip(msg.host_ranks, msg.hosts)))

    def absorb(self, other: RankView) -> None:
        self.alive |= other.alive
        self.stuck |= other.stuck
        self.dead |= other.dead
        self.world_size = max(self.world_size, other.world_size)
        self.hosts.update(other.hosts)


class AckDown(Protocol):
    """Tell a sender below about one of its units: durable, or window `index` rejected for `overlap`."""

    def __call__(self, origin: Origin, index: int | None = None, overlap: BitMap | None = None) -> None: ...


class Sink(Protocol):
    def ship(self, node: Node, windows: list[Window], now: float) -> None: ...

    def forget(self, keys: list) -> None: ...


class Node:
    """Windows + durability for one tier. Callers hold `node.lock` around intake; flush takes it itself."""

    def __init__(self, node_id: str, deadlines: Deadlines, ack_down: AckDown,
                 retain_s: float = 300.0, max_windows: int = 200_000) -> None:
        self.node_id = node_id
        self.lock = threading.RLock()
        self.table = WindowTable(deadlines, retain_s, max_windows, on_drop=self._dropped)
        self.ack_down = ack_down
        self.durability = Durability(lambda origin: ack_down(origin))
        self.counters = dict.fromkeys(COUNTER_FIELDS, 0)
        self.child_counters: dict[str, dict[str, int]] = {}
        self.child_ranks: dict[str, dict[str, RankView]] = {}
        self.own_ranks: dict[str, RankView] = {}
        self.sink: Sink | None = None
        self.complete: Callable[[Window], bool] = self.covered_complete

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

    def attach_duplicate(self, win: Window, origins: list[Origin]) -> None:
        """A duplicate is durable once everything the window holds now is: wait on what is still open."""
        waits = len(win.inflight) + (1 if win.pending else 0)
        if not waits:
            return
        for origin in origins:
            self.durability.hold(origin, waits)
        if win.pending:
            win.absorbed.extend(origins)
        for out in win.inflight.values():
            out.absorbed.extend(origins)

    def release_all(self, outs: list[OutPart]) -> None:
        for out in outs:
            for part in out.constituents:
                for origin in part.origins:
                    self.durability.release(origin)
            for origin in out.absorbed:
                self.durability.release(origin)

    # ----------------------------------------------------------- sealing
    def ranks(self, job: str) -> RankView:
        view = RankView()
        if job in self.own_ranks:
            view.absorb(self.own_ranks[job])
        for per_job in self.child_ranks.values():
            if job in per_job:
                view.absorb(per_job[job])
        return view

    def jobs(self) -> set[str]:
        jobs = set(self.own_ranks)
        for per_job in self.child_ranks.values():
            jobs.update(per_job)
        return jobs

    def covered_complete(self, win: Window) -> bool:
        covered = self.ranks(win.key.job).covered
        return bool(covered) and covered.issubset(win.sources)

    def flush(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        with self.lock:
            due = self.table.due(now, self.complete)
            assert self.sink is not None, "node has no sink"
            self.sink.ship(self, due, now)
            gone = self.table.expire(now)
            if gone:
                self.sink.forget([win.key for win in gone])

    def subtree_counters(self) -> dict[str, int]:
        total = dict(self.counters)
        for child in self.child_counters.values():
            for name in COUNTER_FIELDS:
                total[name] += child.get(name, 0)
        return total

    def _dropped(self, win: Window) -> None:
        self.counters["dropped_windows"] += 1
        log.warning("window table full: dropped %s", win.key)


class Upstream:
    """Sink for agents and non-root collectors: sealed windows go to the parent as numbered units."""

    def __init__(self, node: Node, outbox_factory: Callable[[Callable[[Unit, forward_pb2.Ack], None]], Outbox],
                 liveness_every_s: float = 1.0) -> None:
        self.node = node
        self.outbox = outbox_factory(self._on_ack)
        self.outbox.on_drop = self._on_drop
        self.liveness_every_s = liveness_every_s
        self._last_sent = 0.0

    def ship(self, node: Node, windows: list[Window], now: float) -> None:
        parts = []
        for win in windows:
            out = OutPart(win.key, win.expected, win.forwarded, merge_parts(win.pending), win.pending, win.absorbed)
            win.pending, win.absorbed = [], []
            if out.late:
                node.counters["late"] += 1
            parts.append((win, out))
        if parts or now - self._last_sent >= self.liveness_every_s:
            self._send(node, parts, now)

    def forget(self, keys: list) -> None:
        """Nothing to do: units are retained by the outbox until durable."""

    def _on_drop(self, unit: Unit) -> None:
        """The outbox overflowed and let this unit go: count its windows, and stop holding what it held."""
        node = self.node
        with node.lock:
            outs = [out for out in unit.payload if out is not None]  # type: ignore[attr-defined]
            node.counters["dropped_windows"] += len(outs)
            for out in outs:
                win = node.table.windows.get(out.key)
                if win is not None:
                    win.inflight.pop(unit.seq, None)
            node.release_all(outs)

    def _send(self, node: Node, parts: list[tuple[Window, OutPart]], now: float) -> None:
        message = forward_pb2.SummaryBatch()
        for _, out in parts:
            message.windows.add(key=out.key.to_proto(), summary=out.summary.to_proto(),
                                expected=out.expected, late=out.late)
        for job in sorted(node.jobs()):
            message.ranks.append(node.ranks(job).to_proto(job))
        counters = node.subtree_counters()
        counters["resent"] += self.outbox.resent
        for name, value in counters.items():
            setattr(message.counters, name, value)
        unit = self.outbox.submit(message, [out for _, out in parts])
        for win, out in parts:
            win.inflight[unit.seq] = out
            win.forwarded = True
        self._last_sent = now

    def _on_ack(self, unit: Unit, ack: forward_pb2.Ack) -> None:
        node = self.node
        with node.lock:
            outs: list[OutPart | None] = unit.payload  # type: ignore[assignment]
            for rejection in ack.rejections:
                self._rejected(node, unit, outs, rejection)
            if ack.status == forward_pb2.Ack.DURABLE:
                self.outbox.forget(unit.seq)
                settled = [out for out in outs if out is not None]
                for out in settled:
                    win = node.table.windows.get(out.key)
                    if win is not None:
                        win.inflight.pop(unit.seq, None)
                node.release_all(settled)

    def _rejected(self, node: Node, unit: Unit, outs: list[OutPart | None], rejection: forward_pb2.Rejection) -> None:
        if rejection.index >= len(outs) or outs[rejection.index] is None:
            return
        out = outs[rejection.index]
        assert out is not None
        outs[rejection.index] = None
        win = node.table.windows.get(out.key)
        if win is not None:
            win.inflight.pop(unit.seq, None)
        if not rejection.overlapping_sources:
            node.counters["bad_inputs"] += 1
            log.error("parent refused %s: %s", out.key, rejection.reason)
            node.release_all([out])
            return
        constituents = out.constituents
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
        for part in out.constituents:
            if win is not None:
                win.sources -= part.sources
            for origin in part.origins:
                node.ack_down(origin, part.index, overlap & part.sources)
        node.release_all([out])
