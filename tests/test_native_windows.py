"""A collector's windows held natively (issue 29: `_native.Windows`, WindowTable(native=True), Node.offer_read) against
the same tier with its windows in Python, driven through the same events: children's units (new, resent, partly
overlapping, with bad windows), flushes, and the parent's answers (durable, an overlap to split, a refusal, a unit
dropped by the outbox), with a window budget small enough to drop windows. Both must answer every child alike (the
same acks, rejections and refusals: exactly once each), send the same windows up and count the same."""

from __future__ import annotations

import gc
import os
import time
import weakref
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

import collectors.collector.service as service_module
import collectors.delivery.windows as windows_module
from collectors.collector.service import CollectorService, _ChildStream, _Unit
from collectors.common.validation import MetricBudget
from collectors.delivery.node import Node, Upstream
from collectors.delivery.windows import WINDOW_BYTES, Deadlines
from stub_outbox import StubOutbox
from telemetry import Summary
from telemetry.summary import _native
from telemetry.v1 import forward_pb2, summary_pb2

CHILDREN, METRICS, STEPS = 3, 3, 3
HALVES = [range(0, 8), range(0, 4), range(4, 8), range(2, 6)]  # a child's sources in a window: all, or a part


class _Answers:
    def __init__(self) -> None:
        self.acks: list[bytes] = []

    def put(self, ack: forward_pb2.Ack) -> None:
        self.acks.append(ack.SerializeToString())


def _by_index(data: bytes) -> bytes:
    """An ack with its rejections in the order of the child's windows they name."""
    ack = forward_pb2.Ack.FromString(data)
    rejections = sorted((r.index, r.SerializeToString()) for r in ack.rejections)
    del ack.rejections[:]
    for _, rejection in rejections:
        ack.rejections.add().MergeFromString(rejection)
    return ack.SerializeToString()


class Rack:
    """A rack's service, node and Upstream, driven by hand; its parent is a stub outbox."""

    def __init__(self, native: bool, budget_windows: int, per_window: bool = False) -> None:
        self.per_window = per_window  # every unit parsed whole by protobuf and judged window by window
        self.node = Node("rack", Deadlines(600.0), ack_down=lambda *a, **k: self.service.ack_down(*a, **k),
                         window_budget_bytes=budget_windows * WINDOW_BYTES, native=native)
        self.outbox = StubOutbox()
        self.upstream = Upstream(self.node, lambda on_ack: self.outbox)  # type: ignore[arg-type,return-value]  # a stub outbox
        self.node.sink = self.upstream
        self.service = CollectorService(self.node, None, None, MetricBudget(64))  # type: ignore[arg-type]  # no host or stream slots here
        self.service.budget.admit_all("job", [f"m{m}" for m in range(METRICS)])  # else each first unit goes one by one
        self.sent: list[list[bytes]] = []  # each unit sent up: its windows, by key
        self.streams = {}
        for c in range(CHILDREN):
            stream = _ChildStream(_Answers(), None)  # type: ignore[arg-type]  # only put() is called
            self.service._links[f"c{c}"] = stream.answers
            stream.sender = f"c{c}"
            self.streams[c] = stream

    def receive(self, child: int, data: bytes) -> None:
        self.service._one(self.streams[child], _received(self.service, data, self.per_window))

    def flush(self, late: bool) -> None:
        before = len(self.outbox.units)
        self.node.flush(time.monotonic() + (10_000.0 if late else 0.0))
        for unit in self.outbox.units[before:]:
            self.sent.append(sorted(w.SerializeToString() for w in unit.message.windows))

    def answer(self, kind: int, pick: int) -> None:
        """The parent's answer to its oldest unit: durable; an overlap to split (of the window `pick` in key order:
        the unit durable at a later answer); a refusal of that window, and the rest durable; or the outbox dropping
        the unit."""
        if not self.outbox.units:
            return
        unit = self.outbox.units[0]
        windows = list(unit.message.windows)
        ack = forward_pb2.Ack(seq=unit.seq, status=forward_pb2.Ack.DURABLE)
        if windows and kind in (1, 2):
            index = sorted(range(len(windows)), key=lambda i: windows[i].key.SerializeToString())[pick % len(windows)]
            sources = BitMap.deserialize(windows[index].summary.sources)
            if kind == 1:
                ack.status = forward_pb2.Ack.REJECTED_OVERLAP
                ack.rejections.add(index=index, overlapping_sources=[sources.min()], reason="held above")
            else:
                ack.rejections.add(index=index, key=windows[index].key, reason="refused above")
        if kind == 3:
            self.outbox.forget(unit.seq)
            self.upstream._on_drop(unit)
            return
        self.upstream._on_ack(unit, ack)  # after an overlap the unit stays held: the parent says DURABLE later
        self.sent.append([])

    def state(self) -> tuple[object, ...]:
        node = self.node
        # Each child's acks by seq (a stable sort: one unit's answers in the order sent; between units, the order in
        # which a settle releases them is no contract), each ack's rejections by the child's window index: they follow
        # the order of the windows in the unit sent up, which is no contract either (`sent` compares them by key)
        acks = {c: sorted(map(_by_index, s.answers.acks), key=lambda a: forward_pb2.Ack.FromString(a).seq)
                for c, s in self.streams.items()}
        return (acks, node.subtree_counters(),
                node.durability.outstanding(), self.sent,
                sorted((key, list(node.table.sources(win))) for key, win in node.table.windows.items()))


def _unreadable(*args: object) -> object:
    raise ValueError("refused by the test")


def _received(service: CollectorService, data: bytes, per_window: bool) -> _Unit:
    """A unit as the stream's deserialiser hands it over: read natively (the batch path where every window read
    takes), or, `per_window`, as when the native read refuses it (parsed whole, every window judged alone)."""
    if not per_window:
        return service._receive(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(service_module, "read_native_unit", _unreadable)
        unit = service._receive(data)
    assert unit.read is None and set(unit.windows) <= {None}
    return unit


def unit_bytes(child: int, seq: int, step: int, metrics: list[tuple[int, int]], bad: bool, late: bool = False) -> bytes:
    """Child `child`'s unit `seq`: per (metric, half), that metric's window of `step` from those of its ranks (each a
    late delta with `late`)."""
    windows = []
    for metric, half in metrics:
        ranks = np.array([child * 8 + r for r in HALVES[half]], dtype=np.int64)
        values = np.random.default_rng([child, step, metric]).lognormal(0, 1, 8)[list(HALVES[half])]
        summary = Summary.from_arrays(values, ranks, time_ns=step + 1)
        key = summary_pb2.WindowKey(job="job", metric=f"m{metric}", step=step)
        windows.append(forward_pb2.WindowSummary(key=key, summary=summary.to_proto(), expected=CHILDREN * 8,
                                                 late=late))
    if bad and windows:
        windows[-1].summary.mean = 1e9  # outside [min, max]: refused alone, by index
    states = forward_pb2.RankStates(job="job", alive=BitMap(range(child * 8, child * 8 + 8)).serialize(),
                                    world_size=CHILDREN * 8)
    return forward_pb2.SummaryBatch(sender_id=f"c{child}", seq=seq, windows=windows, ranks=[states]).SerializeToString()


def _durable(rack: Rack, child: int) -> list[tuple[int, list[str]]]:
    """The DURABLE acknowledgements a child was sent, in order: (seq, the reasons of its refused windows)."""
    acks = [forward_pb2.Ack.FromString(a) for a in rack.streams[child].answers.acks]
    return [(a.seq, [r.reason for r in a.rejections]) for a in acks if a.status == forward_pb2.Ack.DURABLE]


@pytest.mark.parametrize("native", [True, False])
def test_a_unit_whose_windows_pass_the_budget_is_acknowledged_once(native: bool) -> None:
    """A unit accepted into the table's only window, which it takes past its budget: the table makes room, but
    never by letting go of the windows the unit is being offered into (then it would be acknowledged as dropped,
    and once more as durable when its offer ends). Both children's units are acknowledged once, at the flush."""
    rack = Rack(native=native, budget_windows=1)
    rack.node.table.max_bytes = WINDOW_BYTES + 40  # the window with one child's 8 sources fits; with 16 it does not
    for c in range(2):
        rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    rack.receive(1, unit_bytes(1, 1, 0, [(0, 0)], False))
    assert [_durable(rack, c) for c in range(2)] == [[], []], "acknowledged while its window is still pending"
    rack.flush(True)
    rack.answer(0, 0)
    assert [_durable(rack, c) for c in range(2)] == [[(1, [])], [(1, [])]]
    assert rack.node.counters["dropped_windows"] == 0
    assert rack.node.durability.unheld_releases == 0
    assert rack.node.durability.outstanding() == 0


@pytest.mark.parametrize("native", [True, False])
def test_a_duplicate_of_a_window_dropped_for_room_is_refused_with_it(native: bool) -> None:
    """A unit repeating a pending window (m0) beside a new one (m1) that takes the table past its budget: the
    table lets m0 go to make room, and the repeat it absorbed goes with it, refused as dropped, never DURABLE
    as if m0 had been stored (the duplicate attached to a window already let go)."""
    rack = Rack(native=native, budget_windows=2)
    rack.node.table.max_bytes = 6150  # m0 and m1 with 8 sources each are past it
    rack.receive(0, forward_pb2.SummaryBatch(sender_id="c0", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    rack.receive(0, unit_bytes(0, 2, 0, [(0, 0), (1, 0)], False))
    assert rack.node.counters["dropped_windows"] == 1
    rack.flush(True)
    while rack.outbox.units:
        rack.answer(0, 0)
        rack.flush(True)
    durable = _durable(rack, 0)
    assert [seq for seq, _ in durable] == [1, 2], durable
    assert all(len(reasons) == 1 and "over its budget" in reasons[0] for _, reasons in durable), durable
    assert rack.node.durability.unheld_releases == 0
    assert rack.node.durability.outstanding() == 0


def _broken(merge: Callable[..., object], failed: list[str]) -> Callable[..., object]:
    """The merge, failing the first time it is called (the first window of the flush)."""
    def merged(*args: object) -> object:
        if not failed:
            failed.append("once")
            raise ValueError("cannot merge summaries with k=3 and k=5")
        return merge(*args)
    return merged


def _break_merge(native: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next merge of a window's parts (native or Python) fails, once."""
    failed: list[str] = []
    if native:
        monkeypatch.setattr(_native.Batch, "merged", _broken(_native.Batch.merged, failed))
    else:
        monkeypatch.setattr(windows_module, "merge_parts", _broken(windows_module.merge_parts, failed))


@pytest.mark.parametrize("native", [True, False])
def test_a_window_whose_parts_do_not_merge_is_refused_to_its_senders(native: bool,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A window whose parts fail to merge at the flush (Window.take: the native merge, or Python's, raising): its
    parts are refused to every sender that fed it, with the reason, and counted (bad_inputs); the flush goes on
    with the other windows, and nothing is left held (before: the parts were taken and lost, every other window
    of that flush too, and their senders never acknowledged)."""
    rack = Rack(native=native, budget_windows=1000)
    for c in range(2):
        rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
        rack.receive(c, unit_bytes(c, 1, 0, [(0, 0), (1, 0)], False))
    _break_merge(native, monkeypatch)
    rack.flush(True)
    assert [len(unit) for unit in rack.sent] == [1], "the other window is sent up"
    rack.answer(0, 0)
    durable = [_durable(rack, c) for c in range(2)]
    assert all(len(found) == 1 and found[0][0] == 1 for found in durable), durable
    reasons = [found[0][1] for found in durable]
    assert all(len(r) == 1 and "could not be merged (cannot merge summaries with k=3" in r[0] for r in reasons), reasons
    assert rack.node.counters["bad_inputs"] == 1
    assert rack.node.durability.outstanding() == 0
    assert rack.node.durability.unheld_releases == 0


def _answers(rack: Rack, child: int) -> list[tuple[int, str, list[str]]]:
    """Every acknowledgement a child was sent: (seq, status, the reasons of its rejections)."""
    acks = [forward_pb2.Ack.FromString(a) for a in rack.streams[child].answers.acks]
    return [(a.seq, forward_pb2.Ack.Status.Name(a.status), [r.reason for r in a.rejections]) for a in acks]


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("refusal", ["merge", "parent"])
def test_a_resend_of_a_refused_window_is_refused_again(native: bool, refusal: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A unit whose window was refused (its parts did not merge here; the parent refused it), resent (the child
    reconnected before it saw the answer): the window remembers its refusal and the resend gets it back, never a
    clean DURABLE as a duplicate of data that was stored (before: the window stayed sealed with the refused
    sources, and the resend was absorbed and acknowledged DURABLE with no rejection)."""
    rack = Rack(native=native, budget_windows=1000)
    rack.receive(0, forward_pb2.SummaryBatch(sender_id="c0", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    if refusal == "merge":
        _break_merge(native, monkeypatch)
    rack.flush(True)
    rack.answer(2 if refusal == "parent" else 0, 0)
    first = _answers(rack, 0)
    refused = [(seq, reasons) for seq, status, reasons in first if status == "DURABLE"]
    assert [(seq, len(reasons)) for seq, reasons in refused] == [(1, 1)], first
    reason = refused[0][1][0]
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    rack.flush(True)
    while rack.outbox.units:
        rack.answer(0, 0)
        rack.flush(True)
    resent = _answers(rack, 0)[len(first):]
    assert [(seq, status, reasons) for seq, status, reasons in resent if status == "DURABLE"] == [
        (1, "DURABLE", [reason])], resent
    assert rack.node.durability.outstanding() == 0
    assert rack.node.durability.unheld_releases == 0


@pytest.mark.parametrize("native", [True, False])
def test_a_later_part_of_a_window_whose_parts_did_not_merge_goes_up_late(native: bool,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A part that comes after its window was refused (its parts did not merge) is a late delta: the parent must not
    take it for the window's first part, a whole step holding only its ranks (before: `forwarded` stayed False and
    it went up with late=False)."""
    rack = Rack(native=native, budget_windows=1000)
    for c in range(2):
        rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    _break_merge(native, monkeypatch)
    rack.flush(True)
    assert rack.node.counters["bad_inputs"] == 1 and not any(rack.sent), "the refused window is not sent"
    rack.receive(1, unit_bytes(1, 1, 0, [(0, 0)], False))
    rack.flush(False)
    assert [[forward_pb2.WindowSummary.FromString(w).late for w in unit] for unit in rack.sent if unit] == [[True]]
    assert rack.node.counters["late"] == 1


def _sent_late(rack: Rack) -> list[list[bool]]:
    """The `late` flag of each window of each unit the rack sent up."""
    return [[forward_pb2.WindowSummary.FromString(w).late for w in unit] for unit in rack.sent if unit]


@pytest.mark.parametrize("native", [True, False])
@pytest.mark.parametrize("per_window", [False, True])
def test_a_window_of_only_late_parts_goes_up_late_and_a_first_part_after_it_does_not(native: bool,
                                                                                   per_window: bool) -> None:
    """A child's late delta (its window's first parts went up before, or it refused them) into a window this tier
    holds nothing of goes up late: the tier above must not take it for the window's first part (before: the flag
    was dropped, by the native reader and by the per-window path, and it went up with late=False). A first part
    of that window from another child after it goes up as a first part (late=False), and one from a child in the
    same flush as a late delta makes the whole window a first part. Alike whether the units are taken as read
    natively (late deltas on the batch path: `read_unit` carries the flag) or judged window by window."""
    rack = Rack(native=native, budget_windows=1000, per_window=per_window)
    for c in range(CHILDREN):
        rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False, late=True))
    rack.flush(True)
    assert _sent_late(rack) == [[True]]
    rack.receive(1, unit_bytes(1, 1, 0, [(0, 0)], False))
    rack.flush(True)
    assert _sent_late(rack) == [[True], [False]], "a first part after a late-only dispatch is still the first"
    rack.receive(2, unit_bytes(2, 1, 0, [(0, 0)], False))
    rack.flush(True)
    assert _sent_late(rack)[-1] == [True], "after a first part, a part is late"
    rack.receive(0, unit_bytes(0, 2, 1, [(0, 0)], False, late=True))
    rack.receive(1, unit_bytes(1, 2, 1, [(0, 0)], False))
    rack.flush(True)
    assert _sent_late(rack)[-1] == [False], "a late part and a first part together make a first part"
    assert rack.node.counters["late"] == 2
    for _ in rack.outbox.units[:]:
        rack.answer(0, 0)
    assert [len(_durable(rack, c)) for c in range(CHILDREN)] == [2, 2, 1]
    assert rack.node.durability.outstanding() == 0


class Root:
    """A root's service and node over a real Finaliser and SQLite store (its windows in Python), driven by hand."""

    def __init__(self, path: str) -> None:
        from collectors.root.finalise import Finaliser
        from collectors.root.store import Store

        self.node = Node("root", Deadlines(600.0), ack_down=lambda *a, **k: self.service.ack_down(*a, **k))
        self.finaliser = Finaliser(Store(path))
        self.node.sink = self.finaliser
        self.node.complete = lambda win: True  # each window goes at the next flush
        self.service = CollectorService(self.node, None, None, MetricBudget(64))  # type: ignore[arg-type]  # no host or stream slots here
        self.stream = _ChildStream(_Answers(), None)  # type: ignore[arg-type]  # only put() is called
        self.service._links["rack"] = self.stream.answers
        self.stream.sender = "rack"

    def receive(self, unit: forward_pb2.SummaryBatch, seq: int, per_window: bool = False) -> None:
        unit.sender_id, unit.seq = "rack", seq  # the outbox numbers the units it sends
        self.service._one(self.stream, _received(self.service, unit.SerializeToString(), per_window))

    def flush(self) -> None:
        self.node.flush()

    def durable(self) -> list[tuple[int, list[str]]]:
        acks = [forward_pb2.Ack.FromString(a) for a in self.stream.answers.acks]
        return [(a.seq, [r.reason for r in a.rejections]) for a in acks if a.status == forward_pb2.Ack.DURABLE]


@pytest.mark.parametrize("native", [True, False])
def test_a_later_part_of_a_window_a_rack_refused_is_refused_at_the_root(native: bool, tmp_path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """A rack refuses a window (its parts did not merge) and sends a later part of it up late: the root, which holds
    no row of it, refuses it with a reason and counts it (bad_inputs), never storing it as the window's first row
    (late=0) holding only the late host's ranks, which detectors would read as the whole step (before: the late flag
    was dropped on the way in, and it was stored). The rack's next window goes up and is stored as ever."""
    rack = Rack(native=native, budget_windows=1000)
    root = Root(str(tmp_path / "root.db"))
    root.receive(forward_pb2.SummaryBatch(), 0)
    for c in range(2):
        rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    _break_merge(native, monkeypatch)
    rack.flush(True)
    monkeypatch.undo()
    rack.receive(1, unit_bytes(1, 1, 0, [(0, 0)], False))  # the late host
    rack.receive(0, unit_bytes(0, 2, 1, [(0, 0)], False))  # the next step
    rack.flush(True)
    assert _sent_late(rack) == [[True, False]] or _sent_late(rack) == [[False, True]]
    root.receive(rack.outbox.units[-1].message, 1)
    root.flush()
    stored = sorted(root.finaliser.final)
    assert [key.index for key in stored] == [1], f"a late part stored as the refused window's first row: {stored}"
    assert root.node.counters["bad_inputs"] == 1
    assert [len(reasons) for _, reasons in root.durable()] == [1], root.durable()
    assert "never reached the root" in root.durable()[0][1][0]
    row = root.finaliser.store.load(stored[0])
    assert row is not None and row.late == 0 and list(row.summary.sources) == list(range(8))
    assert root.node.durability.outstanding() == 0 and root.node.durability.unheld_releases == 0


@pytest.mark.parametrize("per_window", [False, True])
def test_a_resend_of_a_late_part_the_root_refused_is_refused_again(tmp_path, per_window: bool) -> None:
    """A late part of a window the root holds no row of is refused; the rack resends it (its stream broke before the
    ack came): the resend is refused again, never absorbed as a duplicate and acknowledged durable for data that
    was never stored (before: the refused part's sources stayed in the window). A first part of that window coming
    after it is still stored."""
    root = Root(str(tmp_path / "root.db"))
    root.receive(forward_pb2.SummaryBatch(), 0)
    for seq in (1, 2):  # the unit, then its resend
        root.receive(forward_pb2.SummaryBatch.FromString(unit_bytes(1, 1, 0, [(0, 0)], False, late=True)), seq,
                     per_window)
        root.flush()
        assert not root.finaliser.final
        durable = root.durable()
        assert len(durable) == seq and len(durable[-1][1]) == 1, durable
        assert "never reached the root" in durable[-1][1][0]
    assert root.node.counters["bad_inputs"] == 2
    root.receive(forward_pb2.SummaryBatch.FromString(unit_bytes(0, 1, 0, [(0, 0)], False)), 3)  # a first part
    root.flush()
    assert [key.index for key in root.finaliser.final] == [0]
    assert root.durable()[-1] == (3, []), root.durable()
    assert root.node.durability.outstanding() == 0 and root.node.durability.unheld_releases == 0


def test_late_parts_the_root_refuses_for_want_of_a_row_are_logged_rate_limited(tmp_path, caplog) -> None:
    """The root's refusal of late parts of windows it holds no row of is logged (before: only counted), at most once
    per interval: a rack whose tier below lost many windows' first parts sends such parts every flush."""
    root = Root(str(tmp_path / "root.db"))
    root.receive(forward_pb2.SummaryBatch(), 0)
    for step in (0, 1, 2):
        root.receive(forward_pb2.SummaryBatch.FromString(unit_bytes(1, 1, step, [(0, 0)], False, late=True)), step + 1)
        root.flush()
    assert root.node.counters["bad_inputs"] == 3 and not root.finaliser.final
    lines = [r.getMessage() for r in caplog.records if "of which the root holds no row" in r.getMessage()]
    assert len(lines) == 1 and "never reached the root" in lines[0], lines


def _earliest_open_deadline(node: Node) -> float | None:
    """The earliest deadline of a window with parts pending and not yet sealed (what a flush waits for at most)."""
    return min((win.deadline for win in node.table.windows.values() if win.has_pending and not win.sealed),
               default=None)


@pytest.mark.parametrize("native", [True, False])
def test_windows_go_when_complete_past_their_deadline_and_late(native: bool) -> None:
    """A collector's windows of one job (a native table asks their completeness in one call per job, Python
    each window): every window complete at a flush goes at it, together; one still partial waits for its deadline
    (and the flush's next wake is that deadline), then goes; a part after it sealed goes as a late delta; a new
    step waits for every child that reported ranks."""
    rack = Rack(native=native, budget_windows=1000)
    node = rack.node
    rack.upstream.liveness_every_s = 3600.0  # the flush's next wake is a window's deadline, not a sign of life
    for c in range(CHILDREN):
        rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 1), (1, 1), (2, 0)], False))  # m0, m1: ranks 0-3 of c0's 0-7
    rack.flush(False)
    assert [len(unit) for unit in rack.sent] == [1], "m2 is complete (all of c0's ranks, the only ones reported)"
    now = time.monotonic()
    assert node.next_due(now) == _earliest_open_deadline(node) is not None
    rack.receive(0, unit_bytes(0, 2, 0, [(0, 2)], False))
    rack.receive(0, unit_bytes(0, 3, 0, [(1, 1)], False))  # a duplicate of m1's part: still partial
    rack.flush(False)
    assert [len(unit) for unit in rack.sent] == [1, 1], "m0 complete, m1 not"
    rack.flush(True)  # m1's deadline passed
    assert [len(unit) for unit in rack.sent] == [1, 1, 1]
    assert _earliest_open_deadline(node) is None
    assert node.next_due(now) == rack.upstream.next_liveness(), "nothing left to wake for but a sign of life"
    rack.receive(0, unit_bytes(0, 4, 0, [(1, 2)], False))  # the rest of m1, after it sealed: a late delta
    rack.flush(False)
    late = [forward_pb2.WindowSummary.FromString(w).late for w in rack.sent[-1]]
    assert late == [True]
    rack.receive(1, unit_bytes(1, 1, 1, [(m, 0) for m in range(METRICS)], False))  # step 1: c1 reports its ranks
    rack.flush(False)
    assert len(rack.sent) == 4, "step 1's windows wait for c0 (which reported ranks) too"
    rack.receive(0, unit_bytes(0, 5, 1, [(m, 0) for m in range(METRICS)], False))
    rack.flush(False)
    assert [len(unit) for unit in rack.sent] == [1, 1, 1, 1, METRICS], "every complete window at once"
    assert node.counters["late"] == 1


def test_a_watched_window_let_go_is_not_kept_by_the_deadline_heap() -> None:
    """A native table's watched window dropped for room (before its deadline) is gone with it: the heap of watched
    deadlines keeps (deadline, order, key, slot), not the Window (before: every removed window's Window, with what
    it held, stayed alive until its deadline passed, up to 600 s here), and its entry no longer counts as a deadline."""
    rack = Rack(native=True, budget_windows=2)
    table = rack.node.table
    table.max_bytes = 6150  # m0 and m1 with 8 sources each are past it
    rack.receive(0, forward_pb2.SummaryBatch(sender_id="c0", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False))
    (first,) = table.windows.values()
    gone = weakref.ref(first)
    deadline = first.deadline
    del first
    rack.receive(0, unit_bytes(0, 2, 1, [(1, 0)], False))
    assert rack.node.counters["dropped_windows"] == 1
    gc.collect()
    assert gone() is None, "the dropped window is still referenced"
    (second,) = table.windows.values()
    assert table.next_deadline() == second.deadline > deadline


def test_a_native_table_under_another_completion_asks_it_of_each_watched_window() -> None:
    """A node whose completion is not covered_complete (Node's `complete`, replaced after construction): its native
    table's watched windows are each asked by it (not by the covered ranks), and go when it says so (before: the rule
    was fixed when the node was made, and a completion set after it was ignored for the watched windows)."""
    rack = Rack(native=True, budget_windows=1000)
    wanted = {"m1"}
    rack.node.complete = lambda win: win.key.metric in wanted
    rack.receive(0, forward_pb2.SummaryBatch(sender_id="c0", seq=0).SerializeToString())
    rack.receive(0, unit_bytes(0, 1, 0, [(0, 1), (1, 1), (2, 1)], False))  # none complete by the covered ranks
    rack.flush(False)
    assert [[forward_pb2.WindowSummary.FromString(w).key.metric for w in unit] for unit in rack.sent] == [["m1"]]
    wanted.add("m2")
    rack.flush(False)
    assert [len(unit) for unit in rack.sent] == [1, 1]


EVENT = st.one_of(
    st.tuples(st.just("unit"), st.integers(0, CHILDREN - 1), st.integers(0, STEPS - 1),
              st.lists(st.tuples(st.integers(0, METRICS - 1), st.integers(0, 3)), min_size=1, max_size=4),
              st.booleans(), st.booleans()),  # a bad window; late deltas (Window.only_late, in both tables)
    st.tuples(st.just("resend"), st.integers(0, CHILDREN - 1), st.integers(0, 10)),
    st.tuples(st.just("flush"), st.booleans()),
    st.tuples(st.just("answer"), st.integers(0, 3), st.integers(0, 10)),
)


@settings(max_examples=int(os.environ.get("NATIVE_WINDOWS_EXAMPLES", "300")), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(EVENT, min_size=1, max_size=30), st.sampled_from([1, 2, 4, 1000, 1000, 1000]))  # half the cases compared event by event
def test_a_native_table_answers_as_the_python_table(events: list[tuple], budget_windows: int) -> None:
    racks = [Rack(native=True, budget_windows=budget_windows), Rack(native=False, budget_windows=budget_windows)]
    sent: dict[int, list[bytes]] = {c: [] for c in range(CHILDREN)}
    deliveries: dict[int, list[int]] = {c: [] for c in range(CHILDREN)}  # the seq of each unit each child sent
    for rack in racks:
        for c in range(CHILDREN):
            rack.receive(c, forward_pb2.SummaryBatch(sender_id=f"c{c}", seq=0).SerializeToString())
    # Per rack and child: how many of its acks were looked at, and the seqs delivered since their last DURABLE
    read = {id(rack): dict.fromkeys(range(CHILDREN), 0) for rack in racks}
    unanswered: dict[int, dict[int, set[int]]] = {id(rack): {c: set() for c in range(CHILDREN)} for rack in racks}

    def open_deliveries(rack: Rack, event: tuple) -> None:
        """A unit is acknowledged DURABLE once per delivery at most (a resend absorbed while the first is still
        held shares its one acknowledgement): never a second time, after a clean one or one carrying refusals,
        until it is delivered again."""
        if event[0] in ("unit", "resend"):
            unanswered[id(rack)][event[1]].add(forward_pb2.SummaryBatch.FromString(data).seq)
        for c, stream in rack.streams.items():
            acks = stream.answers.acks
            for ack in map(forward_pb2.Ack.FromString, acks[read[id(rack)][c]:]):
                if ack.status == forward_pb2.Ack.DURABLE:
                    assert ack.seq in unanswered[id(rack)][c], (
                        f"child {c}'s unit {ack.seq} acknowledged again, after its DURABLE"
                        f" ({'native' if rack.node.table.native is not None else 'python'} table)")
                    unanswered[id(rack)][c].discard(ack.seq)
            read[id(rack)][c] = len(acks)

    for event in events:
        if event[0] == "unit":
            _, child, step, metrics, bad, late = event
            sent[child].append(unit_bytes(child, len(sent[child]) + 1, step, metrics, bad, late))
            data = sent[child][-1]
        elif event[0] == "resend":
            _, child, pick = event
            if not sent[child]:
                continue
            data = sent[child][pick % len(sent[child])]
        if event[0] in ("unit", "resend"):
            deliveries[child].append(forward_pb2.SummaryBatch.FromString(data).seq)
        for rack in racks:
            if event[0] in ("unit", "resend"):
                rack.receive(child, data)
            elif event[0] == "flush":
                rack.flush(event[1])
            else:
                rack.answer(event[1], event[2])
            open_deliveries(rack, event)
        if budget_windows > 100:  # under a tight budget the tables drop other windows (one charges per unit)
            assert racks[0].state() == racks[1].state(), event
    for rack in racks:  # the parent answers everything: every unit of every child is acknowledged, exactly once
        rack.flush(True)
        for _ in range(200):
            if not rack.outbox.units:
                break
            rack.answer(0, 0)
            rack.flush(True)
            open_deliveries(rack, ("answer",))
    if budget_windows > 100:
        assert racks[0].state() == racks[1].state()
    for rack in racks:
        assert rack.node.durability.outstanding() == 0
        assert rack.node.durability.unheld_releases == 0
        for c, stream in rack.streams.items():
            # Every unit is acknowledged durable, at most once per delivery (a resend absorbed while the first is
            # still held shares its one acknowledgement)
            durable = [forward_pb2.Ack.FromString(a).seq for a in stream.answers.acks
                       if forward_pb2.Ack.FromString(a).status == forward_pb2.Ack.DURABLE]
            assert set(durable) == set(deliveries[c]), "a unit never acknowledged"
            assert all(durable.count(seq) <= deliveries[c].count(seq) for seq in set(durable)), "acknowledged twice"


def _vm_size_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmSize in /proc/self/status")


def test_one_window_of_many_parts_does_not_make_every_later_window_reserve_as_many() -> None:
    """A window's first part reserves room for as many parts as the last window taken held, capped: one hostile
    child's window of 4,096 disjoint one-rank parts, taken, then 600 ordinary windows of one part each. Uncapped,
    each of the 600 reserved 4,096 entries (~700 MB of address space, outside the window byte budget); capped, a
    few MB."""
    from telemetry.summary.summary import read_native_unit

    def unit(windows: list[tuple[str, int, list[int]]]) -> bytes:
        batch = forward_pb2.SummaryBatch(sender_id="child", seq=1)
        for metric, step, ranks in windows:
            summary = Summary.from_arrays(np.ones(len(ranks)), np.array(ranks, dtype=np.int64), time_ns=1)
            batch.windows.add(key=summary_pb2.WindowKey(job="job", metric=metric, step=step),
                              summary=summary.to_proto(), expected=0)
        return batch.SerializeToString()

    table = _native.Windows()
    hostile = read_native_unit(unit([("m0", 0, [rank]) for rank in range(4096)]), 2**53, 2**63, 1 << 20)
    created, _, refused, accepted, _, _ = table.offer_unit(hostile, 1)
    assert accepted == 4096 and not refused
    del hostile
    table.take(created[0][1])  # the window sent up (its batch freed): the table's hint is now 4,096 parts
    before = _vm_size_mb()
    for step in (1, 2):
        ordinary = read_native_unit(unit([(f"m{m}", step, list(range(64))) for m in range(300)]), 2**53, 2**63, 1 << 20)
        table.offer_unit(ordinary, 2 + step)
    assert _vm_size_mb() - before < 150
