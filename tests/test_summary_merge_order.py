"""The merge's order of its inputs (core.cpp's merge_all: by lowest source, then count of sources, empty summaries
first, stable; Python's _order_key before issue 29). The count is asked only when two inputs share their lowest
source, which disjoint inputs never do: only a window whose pending parts overlap holds such (its sources removed while
a part was pending, Windows.remove_sources, then an overlapping part accepted). There the count must still decide, as
it did when every input's was counted: the merge must not hang on the order the parts came in."""

from __future__ import annotations

import numpy as np
from pyroaring import BitMap

from telemetry import Summary
from telemetry.summary import _native


def _part(values: list[float], sources: list[int]) -> Summary:
    return Summary.from_arrays(np.array(values), np.array(sources, dtype=np.int64), time_ns=7, k=2)


def _merged(parts: list[Summary]) -> bytes:
    """The parts offered to one window in the order given, each one's sources removed from the window after it (so
    that the next, overlapping, is accepted), then merged."""
    table = _native.Windows()
    slot, _ = table.slot("job", 0, "m", 1, 0, 0)
    for i, part in enumerate(parts):
        verdict, *_ = table.offer_core(slot, part._as_core(), 1, i)
        assert verdict == 0  # accepted
        table.remove_sources(slot, BitMap(part.sources).serialize())
    return Summary._wrap(table.take(slot).merged()).to_bytes()


def test_parts_sharing_their_lowest_source_merge_by_their_count_in_any_order() -> None:
    # Centroids of equal means and unequal weights (300 values of 5.0 compress into a few heavy ones): the merged
    # sketch keeps them in the parts' merge order (ties go to the earlier part), so an order by arrival shows in the
    # bytes (this test fails with the count never asked).
    one = _part([5.0], [1])  # lowest source 1, 1 source
    two = _part([5.0] * 300, [1] + [7] * 299)  # lowest source 1, 2 sources
    other = _part([2.0], [0])  # lowest source 0: first either way
    assert _merged([one, two]) == _merged([two, one])
    assert _merged([other, two, one]) == _merged([one, other, two]) == _merged([two, one, other])


def test_disjoint_parts_merge_by_their_lowest_source_in_any_order() -> None:
    parts = [_part([float(i), 3.0 * i], [10 * i, 10 * i + 3]) for i in range(5)]
    empty = Summary(k=2)
    want = Summary.merge_all(parts).to_bytes()
    assert _merged(parts) == want
    assert _merged(parts[::-1]) == want
    assert _merged([parts[2], empty, parts[0], parts[4], parts[1], parts[3]]) == want
