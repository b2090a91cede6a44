"""The windows of one unit share one parse of their sources (telemetry/summary/native/core.hpp, `SharedBitmap`;
docs/scale.md, "One parse of a unit's sources"): a child's unit carries the same sources bytes in every window, so
`read_unit` parses them once and the cores hold that one bitmap. Two things must not change with it: every window is
still checked against its sources (a window whose sources bytes repeat the last one's is refused for the same
reasons as the first), and a core never writes what another reads (the encoder run-optimises a core's sources: on
its own copy).
"""

from __future__ import annotations

import numpy as np
import pytest
from pyroaring import BitMap

from telemetry import Summary
from telemetry.summary.summary import read_unit
from telemetry.v1 import forward_pb2, summary_pb2

RANGE = list(range(8, 16))  # an agent's ranks: a contiguous range (membership asked by its bounds)
SPARSE = [1, 3, 5, 7, 9, 11, 13, 15]  # not a range (membership asked of the bitmap)


def _summary(ranks: list[int], seed: int, sources: bytes | None = None) -> summary_pb2.Summary:
    values = np.random.default_rng(seed).lognormal(0, 1, len(ranks))
    proto = Summary.from_arrays(values, np.array(ranks, dtype=np.int64), time_ns=1).to_proto()
    if sources is not None:
        proto.sources = sources
    return proto


def _break(proto: summary_pb2.Summary, how: str, outside: int) -> None:
    """Make one pair's source (or argmax) a source the summary does not hold."""
    if how == "argmax":
        proto.argmax = outside
    elif how == "top":
        proto.top_sources[-1] = outside
    elif how == "bottom":
        proto.bottom_sources[-1] = outside


def _held_sources(summary: Summary) -> bytes:
    """The sources bytes as the summary's core holds them (not run-optimised, unlike the encoder's)."""
    core = summary._core
    assert core is not None  # read natively
    return core.sources_bytes()


def _unit(protos: list[summary_pb2.Summary]) -> bytes:
    return forward_pb2.SummaryBatch(windows=[
        forward_pb2.WindowSummary(key=summary_pb2.WindowKey(job="job", metric=f"m{i}", step=1), summary=p, expected=16)
        for i, p in enumerate(protos)]).SerializeToString()


@pytest.mark.parametrize("ranks", [RANGE, SPARSE], ids=["range", "sparse"])
@pytest.mark.parametrize("how", ["argmax", "top", "bottom"])
@pytest.mark.parametrize("outside", ["below", "above", "in a gap"])
@pytest.mark.parametrize("first", [True, False], ids=["first of its sources", "after a window of the same sources"])
def test_a_window_whose_pairs_lie_outside_its_shared_sources_is_refused(ranks: list[int], how: str, outside: str,
                                                                       first: bool) -> None:
    """A broken window among good ones of the same sources bytes is refused natively (None: judged in Python) exactly
    when from_bytes refuses it; the good ones around it are read."""
    source = {"below": ranks[0] - 1, "above": ranks[-1] + 1, "in a gap": ranks[0] + 1 if ranks is SPARSE else 100}[outside]
    bad = _summary(ranks, 1)
    _break(bad, how, source)
    with pytest.raises(ValueError, match="malformed summary"):
        Summary.from_bytes(bad.SerializeToString())
    protos = ([] if first else [_summary(ranks, 0)]) + [bad, _summary(ranks, 2)]
    assert all(p.sources == protos[0].sources for p in protos)  # one sources bytes: shared after the first
    read, groups, _ = read_unit(_unit(protos), 2**53, 2**63, 4096)
    assert [w is None for w in read] == [p is bad for p in protos]
    assert len(groups) == 1
    for proto, window in zip(protos, read):
        if window is not None:
            assert window[6].to_bytes() == Summary.from_bytes(proto.SerializeToString()).to_bytes()


def test_encoding_one_window_leaves_the_sources_another_shares_as_they_came() -> None:
    """Sources sent unoptimised (an array container for what is one run): the encoder writes them run-optimised, on
    the encoded core's own copy; the other windows of the unit, which share the parse, still hold them as sent."""
    sent = BitMap(RANGE, optimize=False).serialize()
    assert sent != BitMap(RANGE).serialize()  # the run-optimised form differs
    protos = [_summary(RANGE, seed, sources=sent) for seed in range(3)]
    read, _, _ = read_unit(_unit(protos), 2**53, 2**63, 4096)
    first, second, third = (w[6] for w in read)  # type: ignore[index]  # every window is read
    encoded = first.to_bytes()
    assert summary_pb2.Summary.FromString(encoded).sources == BitMap(RANGE).serialize()
    assert _held_sources(second) == sent and _held_sources(third) == sent
    copy = second.copy()  # a copy shares the bitmap too, until one of them writes it
    copy.add_many(np.array([1.0]), 20, 2)
    assert BitMap.deserialize(_held_sources(copy)) == BitMap(RANGE + [20])
    assert _held_sources(second) == sent
    assert [Summary.from_bytes(p.SerializeToString()).to_bytes() for p in protos[1:]] == [second.to_bytes(),
                                                                                          third.to_bytes()]


@pytest.mark.parametrize("how", ["merge", "merge_all"])
def test_a_decoded_summarys_huge_k_costs_no_more_than_the_pairs_it_holds(how: str) -> None:
    """k comes off the wire as any uint32: the merge's top/bottom walk must size its lists by the pairs the parts
    hold, not by k (a reviewer's fuzz seed 5 asked for 64 GiB here: MemoryError, or ASan's out-of-memory abort)."""
    k = 2**32 - 1
    parts = []
    for source, value in enumerate([1.0, 2.0, 0.5]):
        s = Summary(k=k)
        s.add_many([value], source, time_ns=1)
        parts.append(Summary.from_bytes(s.to_bytes()))
    if how == "merge":
        merged = parts[0]
        for other in parts[1:]:
            merged.merge(other)
    else:
        merged = Summary.merge_all(parts)
    assert merged.count == 3
    assert merged.top(3) == [(2.0, 1), (1.0, 0), (0.5, 2)]
    assert merged.bottom(3) == [(0.5, 2), (1.0, 0), (2.0, 1)]
