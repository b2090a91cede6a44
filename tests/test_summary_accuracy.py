"""Summaries merged up random trees agree with a direct computation of the same values.

Every test runs twice (`rt`): with summaries merged in memory, and with a bytes
round trip (`to_bytes` / `from_bytes`) of every summary entering a merge, at
every hop of the tree.

- Exact fields (count, sum to float rounding, min/argmin, max/argmax, top-k,
  bottom-k, sources, non-finite count and sources) must be identical to the
  direct computation whatever the split across sources, the tree shape, the
  merge order, and whether nodes use `merge_all` or fold with `merge`.
- Quantiles are checked by rank error: |q - fraction of exact values <=
  estimate|. With at most max_centroids values the t-digest keeps every value
  as its own centroid, so the estimate is off by at most one value (1/N). At
  scale the stated bound (telemetry/summary/sketch.py) is 1e-3 after a 3-tier
  tree; a t-digest centroid always holds whole values, so for a sample of N
  values we add 10 / N (10 values of discreteness).
- The stated claim itself (lognormal relative error p50/p90/p99 <= 0.5 %,
  p99.9 <= 1 %; rank error <= 1e-3) is checked on the benchmark's 3-tier tree:
  8,192 leaves of 64 values -> 1,024 -> 32 -> 1, and on a 3-tier tree whose
  nodes fold with `merge` instead of calling `merge_all`.
- Random deep trees (up to about six levels of re-compression, more than the
  claim's three tiers) get 1.5x the stated rank error: 1.5e-3 + 10 / N. With
  merge_all nodes the worst we measured was 1.35e-3 over 160 seeded runs of
  40,000 values; the t-digest (fastdigest's k2-like scale function, 200
  centroids) holds up to ~1 % of the mass in one centroid near the median, and
  every re-compression re-bins it.
- Quantile tests draw no subnormal floats: interpolating between two tied
  subnormal centroids rounds to 0 (e.g. 5e-324 -> 0.0), an ulp-level artefact.
"""

from __future__ import annotations

import functools
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from summary_support import (
    CHECK_QS,
    DISTRIBUTIONS,
    STATED_RANK_ERROR,
    STATED_REL_ERROR,
    assert_exact_fields,
    draw,
    expected,
    fixed_tree,
    leaves_from_split,
    random_tree,
    rank_error,
)
from telemetry import Summary

RT = pytest.mark.parametrize("rt", [False, True], ids=["in-memory", "round-trip"])
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAN, INF = math.nan, math.inf

# Values: a small pool (ties, signed zeros, non-finite) mixed with arbitrary finite floats.
values_st = st.one_of(
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 1e-300, NAN, INF, -INF]),
    st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False),
)
source_id_st = st.one_of(st.integers(0, 64), st.integers(0, 2**32 - 1))


@st.composite
def scenarios(draw_):
    """Raw (source, values) pieces, their assignment to leaf summaries, and how each leaf ingests them."""
    k = draw_(st.sampled_from([0, 1, 3, 8]))
    max_centroids = draw_(st.sampled_from([8, 200]))   # a tiny digest forces compression; exact fields must not care
    sources = draw_(st.lists(source_id_st, min_size=1, max_size=24, unique=True))
    pieces = [(s, draw_(st.lists(values_st, max_size=12))) for s in sources]
    n_leaves = draw_(st.integers(1, len(sources) + 2))          # some leaves may stay empty
    owner = [draw_(st.integers(0, n_leaves - 1)) for _ in sources]
    ingest = [draw_(st.sampled_from(["add_many", "add", "chunks"])) for _ in sources]
    node = draw_(st.sampled_from(["merge_all", "fold", "mixed"]))
    seed = draw_(st.integers(0, 2**32 - 1))
    return k, max_centroids, pieces, n_leaves, owner, ingest, node, seed


def build_leaves(k, max_centroids, pieces, n_leaves, owner, ingest) -> list[Summary]:
    leaves = [Summary(k, max_centroids) for _ in range(n_leaves)]
    for (source, values), leaf, how in zip(pieces, owner, ingest):
        summary = leaves[leaf]
        if how == "add_many":
            summary.add_many(np.array(values, dtype=np.float64), source)
        elif how == "add":
            for v in values:
                summary.add(v, source)
        else:
            half = len(values) // 2
            summary.add_many(values[:half], source)
            summary.add_many(np.array(values[half:]), source)
    return leaves


@RT
@SETTINGS
@given(scenario=scenarios())
def test_exact_fields_survive_any_split_order_and_tree(rt: bool, scenario) -> None:
    k, max_centroids, pieces, n_leaves, owner, ingest, node, seed = scenario
    leaves = build_leaves(k, max_centroids, pieces, n_leaves, owner, ingest)
    root = random_tree(leaves, np.random.default_rng(seed), rt=rt, node=node, max_fanout=5)
    want = expected(pieces, k)
    assert_exact_fields(root, want, k)
    assert root.k == k and root.max_centroids == max_centroids
    if want.count:
        scale = float(np.max(np.abs(want.finite)))
        assert math.isclose(root.stddev, float(np.std(want.finite)), rel_tol=1e-6, abs_tol=1e-7 * scale)
        # the sketch holds exactly the finite values: q=0/1 are the exact extremes
        assert root.quantiles([0.0, 1.0]) == [want.min, want.max]
        assert want.min <= root.quantile(0.5) <= want.max


@RT
@SETTINGS
@given(
    values=st.lists(st.one_of(st.sampled_from([0.0, 1.0, 2.0, 3.0]),
                              st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False,
                                        allow_subnormal=False)),
                    min_size=1, max_size=200),
    n_leaves=st.integers(1, 40),
    node=st.sampled_from(["merge_all", "fold", "mixed"]),
    seed=st.integers(0, 2**32 - 1),
)
def test_quantiles_near_exact_up_to_max_centroids_values(rt: bool, values, n_leaves, node, seed) -> None:
    """<= max_centroids (200) values in all: every value stays a centroid, so rank error <= 1/N."""
    rng = np.random.default_rng(seed)
    array = np.array(values, dtype=np.float64)
    leaves = leaves_from_split(array, n_leaves, rng)
    root = random_tree(leaves, rng, rt=rt, node=node, max_fanout=6)
    exact = np.sort(array)
    n = exact.size
    qs = [*CHECK_QS, *rng.random(5).tolist()]
    for q, estimate in zip(qs, root.quantiles(qs)):
        assert rank_error(exact, estimate, q) <= 1.0 / n + 1e-12, (q, estimate, n)
    assert root.quantile(0.0) == exact[0] and root.quantile(1.0) == exact[-1]


RANDOM_TREE_N = 40_000


@RT
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_quantiles_within_stated_error_after_random_tree(rt: bool, dist: str, seed: int) -> None:
    """N values split into 1..600 leaves at random cut points, merged up a random tree (fan-out 1..16,
    shuffled at every level, each node either merge_all or a fold with merge)."""
    rng = np.random.default_rng([seed, DISTRIBUTIONS.index(dist)])
    values = draw(dist, rng, RANDOM_TREE_N)
    leaves = leaves_from_split(values, int(rng.integers(1, 601)), rng)
    root = random_tree(leaves, rng, rt=rt, node="mixed")
    exact = np.sort(values)
    assert root.count == values.size and root.min == exact[0] and root.max == exact[-1]
    tol = 1.5 * STATED_RANK_ERROR + 10.0 / values.size
    errors = {q: rank_error(exact, e, q) for q, e in zip(CHECK_QS, root.quantiles(CHECK_QS))}
    assert max(errors.values()) <= tol, {q: f"{e:.2e}" for q, e in errors.items() if e > tol}


# --- the stated claim, on the benchmark's tree ------------------------------------------------

BENCH_LEAVES, BENCH_PER_LEAF, BENCH_FANOUTS = 8192, 64, (8, 32, 32)


@functools.cache
def bench_data(dist: str, seed: int) -> tuple[np.ndarray, tuple[Summary, ...]]:
    values = draw(dist, np.random.default_rng(seed), BENCH_LEAVES * BENCH_PER_LEAF)
    leaves = []
    for source in range(BENCH_LEAVES):
        s = Summary()
        s.add_many(values[source * BENCH_PER_LEAF:(source + 1) * BENCH_PER_LEAF], source)
        leaves.append(s)
    return values, tuple(leaves)


@RT
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
def test_stated_error_after_three_tier_tree(rt: bool, dist: str) -> None:
    """8,192 x 64 values -> 1,024 -> 32 -> 1 with merge_all: rank error <= 1e-3 at every checked
    quantile (stated for bimodal; checked for all four), lognormal relative error as stated.

    One seed (0, the benchmark's). Not a guarantee for every sample: over seeds 0-29 of this tree
    the lognormal p99.9 relative error exceeded 1 % once (seed 8: 1.3 %, a rank error of only
    ~3e-5), while p50/p90/p99 stayed under 0.35 %; over seeds 0-9 every rank error (lognormal and
    bimodal, p50-p99.9) stayed under 3e-4."""
    values, leaves = bench_data(dist, 0)
    root = fixed_tree(leaves, BENCH_FANOUTS, rt=rt)
    exact = np.sort(values)
    assert root.count == values.size and root.min == exact[0] and root.max == exact[-1]
    errors = {q: rank_error(exact, e, q) for q, e in zip(CHECK_QS, root.quantiles(CHECK_QS))}
    assert max(errors.values()) <= STATED_RANK_ERROR, errors
    if dist == "lognormal":
        qs = list(STATED_REL_ERROR)
        rel = {q: abs(e / float(np.quantile(values, q)) - 1.0) for q, e in zip(qs, root.quantiles(qs))}
        assert all(rel[q] <= STATED_REL_ERROR[q] for q in qs), rel


FOLD_LEAVES, FOLD_FANOUTS = 2048, (8, 16, 16)


@RT
@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("seed", [0, 1])
def test_folding_with_merge_keeps_stated_error(rt: bool, dist: str, seed: int) -> None:
    """A collector that folds arrivals one at a time with `merge` must be as accurate as one that
    calls merge_all: 2,048 x 64 values -> 256 -> 16 -> 1, every node a fold.

    (The same tree with merge_all nodes stays under 5e-4 on these inputs.)"""
    rng = np.random.default_rng([seed, DISTRIBUTIONS.index(dist)])
    values = draw(dist, rng, FOLD_LEAVES * 64)
    leaves = []
    for source in range(FOLD_LEAVES):
        s = Summary()
        s.add_many(values[source * 64:(source + 1) * 64], source)
        leaves.append(s)
    root = fixed_tree(leaves, FOLD_FANOUTS, rt=rt, node="fold")
    exact = np.sort(values)
    tol = STATED_RANK_ERROR + 10.0 / values.size
    errors = {q: rank_error(exact, e, q) for q, e in zip(CHECK_QS, root.quantiles(CHECK_QS))}
    assert max(errors.values()) <= tol, {q: f"{e:.2e}" for q, e in errors.items() if e > tol}
