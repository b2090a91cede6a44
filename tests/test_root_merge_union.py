"""A window's merge (`Batch.merged`, table.cpp) holds its sources' union run-optimised, and the root's usual union (one
contiguous range of more than 4,096 sources within one roaring container) is made as the run directly rather than by
run_optimize's count of a bitset's runs. Over the shapes a window's children come in, the merged core's sources are
the very containers pyroaring's union, run-optimised, has (its serialized bytes, byte for byte), and the merge's
bytes are `Summary.merge_all`'s of the same children: contiguous ranges inside one container (from 0, mid-container,
just above and at 4,096, a whole container), children whose ranks interleave, ranges across containers, gaps."""

from __future__ import annotations

import numpy as np
import pytest
from pyroaring import BitMap

from telemetry import Summary
from telemetry.summary import _native


def _ranks_of(shape: str) -> list[np.ndarray]:
    """Each child's ranks for a shape of the window's sources."""
    if shape == "32 x 512 from 0":
        return [np.arange(c * 512, (c + 1) * 512) for c in range(32)]
    if shape == "32 x 512 in the second container":
        return [np.arange(70_000 + c * 512, 70_000 + (c + 1) * 512) for c in range(32)]
    if shape == "4,097 in two children":
        return [np.arange(100, 2100), np.arange(2100, 4197)]
    if shape == "4,096 in two children":
        return [np.arange(100, 2100), np.arange(2100, 4196)]
    if shape == "a whole container":
        return [np.arange(c * 4096, (c + 1) * 4096) for c in range(16)]
    if shape == "interleaved ranks":
        return [np.arange(c, 16_384, 32) for c in range(32)]
    if shape == "across two containers":
        return [np.arange(60_000 + c * 512, 60_000 + (c + 1) * 512) for c in range(32)]
    if shape == "one rank missing":
        return [np.array([r for r in range(c * 512, (c + 1) * 512) if r != 7_000]) for c in range(32)]
    if shape == "a gap between children":
        return [np.arange(c * 600, c * 600 + 512) for c in range(32)]
    if shape == "three ranks":
        return [np.array([5]), np.array([6]), np.array([7])]
    raise AssertionError(shape)


SHAPES = ["32 x 512 from 0", "32 x 512 in the second container", "4,097 in two children", "4,096 in two children",
          "a whole container", "interleaved ranks", "across two containers", "one rank missing",
          "a gap between children", "three ranks"]


@pytest.mark.parametrize("shape", SHAPES)
def test_merged_sources_are_pyroarings_union_run_optimised(shape: str) -> None:
    rng = np.random.default_rng(len(shape))
    table = _native.Windows()
    ranks = _ranks_of(shape)
    slot, _ = table.slot("job", 0, "m", 0, 0, sum(len(r) for r in ranks))
    children = []
    for child, own in enumerate(ranks):
        summary = Summary.from_arrays(rng.lognormal(0, 1, len(own)), own.astype(np.int64), time_ns=1)
        children.append(Summary.from_bytes(summary.to_bytes()))
        table.offer_core(slot, children[-1]._as_core(), child, 0)
    merged = table.take(slot).merged()
    union = BitMap.union(*(BitMap(r.tolist()) for r in ranks))
    union.run_optimize()
    assert merged.sources_bytes() == union.serialize()
    assert merged.encode() == Summary.merge_all(children).to_bytes()
