"""Helpers shared by the Summary tests: data, a direct (reference) computation, merge trees, rank error (the data
and the rank error are bench/distributions.py's, shared with bench/sketch.py).

Not a test module: the tests import it by name (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.distributions import DISTRIBUTIONS, draw, rank_error  # noqa: F401  (re-exported for the tests)
from telemetry import Summary

# The accuracy stated in telemetry/summary/sketch.py (max_centroids=200, after
# a 3-tier merge tree with a bytes round trip at every hop).
STATED_RANK_ERROR = 1e-3          # bimodal, every quantile
STATED_REL_ERROR = {0.5: 5e-3, 0.9: 5e-3, 0.99: 5e-3, 0.999: 1e-2}   # lognormal

# Quantiles checked by the accuracy tests (rank error).
CHECK_QS = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999)


@dataclass
class Expected:
    """Every exact field of a summary, computed directly from the raw (value, source) pairs."""

    count: int
    sum: float
    abs_sum: float
    min: float
    argmin: int | None
    max: float
    argmax: int | None
    top: list[tuple[float, int]]
    bottom: list[tuple[float, int]]
    sources: set[int]
    nonfinite_count: int
    nonfinite_sources: set[int]
    finite: np.ndarray          # sorted finite values


def expected(pieces: Sequence[tuple[int, Sequence[float] | np.ndarray]], k: int) -> Expected:
    """Reference computation over (source, values) pieces."""
    pairs: list[tuple[float, int]] = []
    sources: set[int] = set()
    nonfinite_sources: set[int] = set()
    nonfinite = 0
    for source, values in pieces:
        values = np.asarray(values, dtype=np.float64).ravel()
        if values.size == 0:
            continue
        sources.add(source)
        mask = np.isfinite(values)
        if not mask.all():
            nonfinite += int((~mask).sum())
            nonfinite_sources.add(source)
        pairs.extend((float(v), source) for v in values[mask])
    finite = np.sort(np.array([v for v, _ in pairs], dtype=np.float64))
    by_desc = sorted(pairs, key=lambda p: (-p[0], p[1]))
    by_asc = sorted(pairs)
    return Expected(
        count=len(pairs),
        sum=math.fsum(v for v, _ in pairs),
        abs_sum=math.fsum(abs(v) for v, _ in pairs),
        min=by_asc[0][0] if pairs else math.nan,
        argmin=by_asc[0][1] if pairs else None,
        max=by_desc[0][0] if pairs else math.nan,
        argmax=by_desc[0][1] if pairs else None,
        top=by_desc[:k],
        bottom=by_asc[:k],
        sources=sources,
        nonfinite_count=nonfinite,
        nonfinite_sources=nonfinite_sources,
        finite=finite,
    )


def assert_exact_fields(summary: Summary, want: Expected, k: int) -> None:
    """The exact fields of `summary` equal the direct computation (sum to float tolerance)."""
    assert summary.count == want.count
    assert math.isclose(summary.sum, want.sum, rel_tol=0.0, abs_tol=1e-12 * want.abs_sum + 1e-300), (
        summary.sum, want.sum)
    if want.count:
        assert summary.min == want.min and summary.argmin == want.argmin, (summary.min, summary.argmin, want)
        assert summary.max == want.max and summary.argmax == want.argmax, (summary.max, summary.argmax, want)
        assert math.isclose(summary.mean, want.sum / want.count, rel_tol=1e-9,
                            abs_tol=1e-12 * want.abs_sum / want.count + 1e-300)
    else:
        assert math.isnan(summary.min) and math.isnan(summary.max)
        assert summary.argmin is None and summary.argmax is None
        assert math.isnan(summary.mean) and math.isnan(summary.stddev)
    assert summary.top(k) == want.top
    assert summary.bottom(k) == want.bottom
    assert summary.top() == want.top and summary.bottom() == want.bottom
    assert set(summary.sources) == want.sources
    assert summary.nonfinite_count == want.nonfinite_count
    assert set(summary.nonfinite_sources) == want.nonfinite_sources


def round_trip(summary: Summary) -> Summary:
    return Summary.from_bytes(summary.to_bytes())


def merge_group(group: Sequence[Summary], how: str, rt: bool) -> Summary:
    """Merge one group of summaries into a new one, either with merge_all or by folding with merge."""
    if rt:
        group = [round_trip(s) for s in group]
    if how == "merge_all":
        return Summary.merge_all(group)
    if how == "fold":
        first = group[0]
        acc = Summary(first.k, first.max_centroids)
        for s in group:
            acc.merge(s)
        return acc
    raise ValueError(how)


def random_tree(leaves: Sequence[Summary], rng: np.random.Generator, *, rt: bool,
                node: str = "mixed", max_fanout: int = 16) -> Summary:
    """Merge leaves up a random tree: each level shuffles, cuts into random groups of 1..max_fanout.

    node: "merge_all", "fold" (in-place merge one by one) or "mixed" (a coin per node).
    rt: every summary entering a merge is serialised and parsed first.
    """
    level = list(leaves)
    if not level:
        return Summary()
    while True:
        order = rng.permutation(len(level))
        level = [level[i] for i in order]
        nxt = []
        i = 0
        while i < len(level):
            size = int(rng.integers(1, max_fanout + 1))
            how = node if node != "mixed" else ("merge_all" if rng.random() < 0.5 else "fold")
            nxt.append(merge_group(level[i:i + size], how, rt))
            i += size
        level = nxt
        if len(level) == 1:
            return round_trip(level[0]) if rt else level[0]


def fixed_tree(leaves: Sequence[Summary], fanouts: Sequence[int], *, rt: bool, node: str = "merge_all") -> Summary:
    """Merge leaves in consecutive groups of the given fan-outs, tier by tier (the collector hierarchy)."""
    level = list(leaves)
    for fanout in fanouts:
        level = [merge_group(level[i:i + fanout], node, rt) for i in range(0, len(level), fanout)]
    assert len(level) == 1, f"fan-outs {fanouts} leave {len(level)} summaries"
    return round_trip(level[0]) if rt else level[0]


def leaves_from_split(values: np.ndarray, n_leaves: int, rng: np.random.Generator,
                      k: int = 8, max_centroids: int = 200) -> list[Summary]:
    """Split values at random cut points into n_leaves contiguous pieces, one source per leaf (source = index)."""
    n = values.size
    n_leaves = max(1, min(n_leaves, n))
    cuts = np.sort(rng.choice(np.arange(1, n), size=n_leaves - 1, replace=False)) if n_leaves > 1 else []
    leaves = []
    for source, piece in enumerate(np.split(values, cuts)):
        s = Summary(k, max_centroids)
        s.add_many(piece, source)
        leaves.append(s)
    return leaves
