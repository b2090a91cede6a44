"""A window's merge (`Batch.merged`, table.cpp's merge_batch) reuses the sources' union of the window merged just before
it on the same thread when its children hold the very same sources bitmaps, in the same order (a rack's 300 windows
of a step, from the same 64 children's units, each unit's windows sharing one parse of its sources). Over sequences of
merges on one thread whose children change between windows, every merge is `Summary.merge_all`'s of the same
children, byte for byte, and that is the Python oracle's (tests/summary_oracle.py): the same children throughout; a child missing from one window; a child whose window carries
other sources; the same children in another order; the same children's units read again (a new parse of equal bytes);
a child's window refused as an overlap; everything let go and other children read (bitmaps that may be allocated
where the last ones were); a late delta; and a window whose sources were removed (remove_sources) before its merge."""

from __future__ import annotations

import gc

import numpy as np
from pyroaring import BitMap

from collectors.common.keys import Key
from summary_oracle import OracleSummary
from telemetry import Summary
from telemetry.summary import _native
from telemetry.summary.summary import read_native_unit, unit_windows
from telemetry.v1 import forward_pb2

MAX = 2**31  # read_native_unit's limits: none binding here


def _window(metric: str, step: int, ranks: list[int], seed: tuple[int, ...], late: bool = False
            ) -> tuple[forward_pb2.WindowSummary, bytes]:
    values = np.random.default_rng(list(seed)).lognormal(0, 1, len(ranks))
    summary = Summary.from_arrays(values, np.array(ranks, dtype=np.int64), time_ns=step + 1)
    proto = forward_pb2.WindowSummary(key=Key("job", metric, step).to_proto(), summary=summary.to_proto(),
                                      expected=4096, late=late)
    return proto, summary.to_bytes()


def _unit(child: int, step: int, windows: list[forward_pb2.WindowSummary]) -> bytes:
    return forward_pb2.SummaryBatch(sender_id=f"c{child}", seq=step + 1, windows=windows).SerializeToString()


class Step:
    """Children's units of one step offered to a native table, and each metric's window bytes per child (the oracle's
    inputs: what the child sent)."""

    def __init__(self, table: _native.Windows) -> None:
        self.table = table
        self.sent: dict[str, list[bytes]] = {}  # metric -> the accepted windows' summary bytes, in offer order
        self.units: list[object] = []

    def offer(self, child: int, step: int, metrics: dict[str, tuple[list[int], bool]], origin: int) -> None:
        """Child `child`'s unit: per metric (ranks, late)."""
        protos, raw = [], []
        for metric, (ranks, late) in metrics.items():
            proto, data = _window(metric, step, ranks, (child, step, len(metric), ranks[0]), late)
            protos.append(proto)
            raw.append((metric, data))
        unit = read_native_unit(_unit(child, step, protos), MAX, MAX, MAX)
        assert unit.all_fast
        _, _, refused, _, _, _ = self.table.offer_unit(unit, origin)
        refused_pos = {pos for pos, *_ in refused}
        for pos, (metric, data) in enumerate(raw):
            if pos not in refused_pos:
                self.sent.setdefault(metric, []).append(data)
        self.units.append(unit)

    def merge_all_and_check(self, step: int, order: list[str]) -> int:
        """Every metric's window taken and merged, in `order`, each against Summary.merge_all; how many merged."""
        merged = 0
        for metric in order:
            slot, created = self.table.slot("job", 0, metric, step, 0, 0)
            assert not created
            batch = self.table.take(slot)
            expected = Summary.merge_all([Summary.from_bytes(b) for b in self.sent[metric]]).to_bytes()
            assert batch.merged().encode() == expected, metric
            oracle = OracleSummary.merge_all([OracleSummary.from_bytes(b) for b in self.sent[metric]]).to_bytes()
            assert expected == oracle, f"{metric}: the native merge_all differs from the Python oracle's"
            merged += 1
        return merged


def _ranks(child: int) -> list[int]:
    return list(range(child * 8, child * 8 + 8))


def test_merges_of_changing_children_are_merge_alls_byte_for_byte() -> None:
    table = _native.Windows()
    metrics = [f"m{i}" for i in range(8)]
    step = Step(table)
    for child in range(16):
        per_metric: dict[str, tuple[list[int], bool]] = {m: (_ranks(child), False) for m in metrics}
        if child == 3:
            del per_metric["m2"]  # child 3 sent no m2: m2's children are one fewer
        if child == 5:
            per_metric["m4"] = (_ranks(child)[:4], False)  # another parse: m4 has another bitmap for child 5
        if child == 7:
            per_metric["m6"] = (_ranks(child), True)  # a late delta (the same sources)
        step.offer(child, 0, per_metric, origin=child)
    # a resend of child 9's m1 with other values but overlapping sources: refused, the window's children unchanged
    step.offer(9, 0, {"m1": (_ranks(9)[2:6], False)}, origin=100)
    assert step.merge_all_and_check(0, metrics) == len(metrics)
    # the same metrics merged in another order: each union still its own window's
    step2 = Step(table)
    for child in range(16):
        step2.offer(child, 1, {m: (_ranks(child), False) for m in metrics}, origin=200 + child)
    assert step2.merge_all_and_check(1, list(reversed(metrics))) == len(metrics)


def test_the_same_children_in_another_order_and_read_again() -> None:
    table = _native.Windows()
    step = Step(table)
    for child in range(12):
        step.offer(child, 0, {"a": (_ranks(child), False), "b": (_ranks(child), False)}, origin=child)
    for child in reversed(range(12)):  # the same sources, offered in the other order, in other units (a new parse)
        step.offer(child, 0, {"c": (_ranks(child), False)}, origin=100 + child)
    assert step.merge_all_and_check(0, ["a", "b", "c"]) == 3


def test_cores_sharing_their_sources_merged_in_another_order() -> None:
    """The same bitmaps (each child's one parse, shared by its windows' cores) in windows holding them in other orders
    and subsets: a window's union is only ever one made of its own children."""
    table = _native.Windows()
    cores, sent = [], []
    for child in range(10):
        windows = [_window(m, 0, _ranks(child), (child, i)) for i, m in enumerate("uvw")]
        unit = read_native_unit(_unit(child, 0, [proto for proto, _ in windows]), MAX, MAX, MAX)
        summaries = [found[6] for found in unit_windows(unit)]
        cores.append([s._as_core() for s in summaries])
        sent.append([data for _, data in windows])
    orders = {"u": list(range(10)), "v": list(reversed(range(10))), "w": list(range(10))[1:]}
    for i, metric in enumerate("uvw"):
        slot, _ = table.slot("job", 0, metric, 0, 0, 0)
        for child in orders[metric]:
            table.offer_core(slot, cores[child][i], child, i)
    for i, metric in enumerate("uvw"):
        slot, _ = table.slot("job", 0, metric, 0, 0, 0)
        expected = Summary.merge_all([Summary.from_bytes(sent[child][i]) for child in orders[metric]])
        assert table.take(slot).merged().encode() == expected.to_bytes(), metric


def test_bitmaps_let_go_and_made_again_where_they_were_do_not_take_the_last_union() -> None:
    """Units of other children read after everything of the last step is gone: their sources may be allocated at the
    very addresses of the last ones (same sizes), which must not make the last union theirs."""
    for round_ in range(6):
        table = _native.Windows()
        step = Step(table)
        base = 16 * round_  # each round's children cover other ranks
        for child in range(base, base + 16):
            step.offer(child, 0, {"x": (_ranks(child), False), "y": (_ranks(child), False)}, origin=child)
        assert step.merge_all_and_check(0, ["x", "y"]) == 2
        del step, table
        gc.collect()


def test_a_window_whose_sources_were_removed_merges_as_its_entries() -> None:
    table = _native.Windows()
    step = Step(table)
    for child in range(8):
        step.offer(child, 0, {"p": (_ranks(child), False), "q": (_ranks(child), False)}, origin=child)
    slot, _ = table.slot("job", 0, "q", 0, 0, 0)
    table.remove_sources(slot, BitMap(_ranks(2)).serialize())  # the table's record only: the entries merge as held
    assert step.merge_all_and_check(0, ["p", "q"]) == 2
