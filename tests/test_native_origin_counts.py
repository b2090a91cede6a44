"""`_native.origin_counts` (a flush's batches: how many entries each unit has in them, for Upstream's acks) over the
orders a flush's batches hold their entries in: every batch in one order (a rack's usual: each unit offered to every
window), batches in other orders, origins first seen in a later batch, an origin twice in one batch, a batch missing
some origins, empty batches. Each is a Counter over the entries in order of first appearance."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from telemetry import Summary
from telemetry.summary import _native

ORDERS = {
    "one order": [[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 3, 4]],
    "reversed, then as first": [[1, 2, 3, 4], [4, 3, 2, 1], [1, 2, 3, 4]],
    "new origins later": [[5, 6], [5, 6, 7], [8, 5, 6, 7]],
    "an origin twice in a batch": [[1, 1, 2], [2, 1, 1], [1, 2, 1]],
    "some missing": [[1, 2, 3, 4], [1, 3], [2, 4], [4]],
    "empty batches": [[], [3, 1], [], [1, 3]],
    "interleaved": [[1, 2, 3, 4, 5, 6], [2, 1, 4, 3, 6, 5], [1, 3, 5, 2, 4, 6]],
}


def _batches(orders: list[list[int]]) -> list[_native.Batch]:
    table = _native.Windows()
    out = []
    for window, origins in enumerate(orders):
        slot, _ = table.slot("job", 0, f"m{window}", 0, 0, 0)
        for index, origin in enumerate(origins):
            ranks = np.array([100 * index + window], dtype=np.int64)  # disjoint within the window
            core = Summary.from_arrays(np.array([1.0]), ranks, time_ns=1)._as_core()
            table.offer_core(slot, core, origin, index)
        out.append(table.take(slot))
    return out


@pytest.mark.parametrize("shape", sorted(ORDERS))
def test_origin_counts_are_a_counter_in_order_of_first_appearance(shape: str) -> None:
    orders = ORDERS[shape]
    expected = Counter(origin for origins in orders for origin in origins)
    assert _native.origin_counts(_batches(orders)) == list(expected.items())
