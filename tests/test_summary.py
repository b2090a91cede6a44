"""telemetry.Summary semantics: merge order, overlap, non-mutation, compatibility, non-finite values, moments, API."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from summary_support import assert_exact_fields, expected, round_trip
from telemetry import OverlapError, Summary

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAN, INF = math.nan, math.inf

finite_st = st.one_of(st.sampled_from([0.0, 1.0, 2.0, -1.0]),
                      st.floats(-1e9, 1e9, allow_nan=False, allow_infinity=False))
value_st = st.one_of(finite_st, st.sampled_from([NAN, INF, -INF]))
FRESH = 2**32 - 1   # a source id the strategies below never use


def summary_of(pieces, k: int = 8, max_centroids: int = 200) -> Summary:
    s = Summary(k, max_centroids)
    for source, values in pieces:
        s.add_many(np.asarray(values, dtype=np.float64), source, time_ns=1_000 + source)
    return s


@st.composite
def disjoint_groups(draw_, min_groups: int = 1, max_groups: int = 10):
    """Several groups of (source, values) pieces, sources disjoint across groups."""
    sources = draw_(st.lists(st.integers(0, FRESH - 1), min_size=min_groups, max_size=30, unique=True))
    n_groups = draw_(st.integers(min_groups, max(min_groups, min(max_groups, len(sources)))))
    groups: list[list[tuple[int, list[float]]]] = [[] for _ in range(n_groups)]
    for i, source in enumerate(sources):
        g = i if i < n_groups else draw_(st.integers(0, n_groups - 1))
        groups[g].append((source, draw_(st.lists(value_st, min_size=1, max_size=10))))
    return groups


# ----------------------------------------------------------------------------- from_arrays

@SETTINGS
@given(pairs=st.lists(st.tuples(st.integers(0, 12), value_st), min_size=0, max_size=60),
       k=st.sampled_from([0, 1, 3, 8]))
def test_from_arrays_matches_a_direct_computation(pairs, k) -> None:
    sources = np.array([s for s, _ in pairs], dtype=np.int64)
    values = np.array([v for _, v in pairs], dtype=np.float64)
    built = Summary.from_arrays(values, sources, time_ns=50, k=k)
    by_source: dict[int, list[float]] = {}
    for s, v in pairs:
        by_source.setdefault(s, []).append(v)
    want = expected(list(by_source.items()), k)
    for s in (built, round_trip(built)):
        assert_exact_fields(s, want, k)
    if want.count:
        assert math.isclose(built.stddev, float(np.std(want.finite)), rel_tol=1e-9,
                            abs_tol=1e-9 * float(np.max(np.abs(want.finite))))
        assert built.quantiles([0.0, 1.0]) == [want.min, want.max]


def test_from_arrays_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        Summary.from_arrays(np.ones(3), np.array([0, 1]))
    with pytest.raises(ValueError):
        Summary.from_arrays(np.ones(2), np.array([0, -1]))
    with pytest.raises(ValueError):
        Summary.from_arrays(np.ones(2), np.array([0, 2**32]))
    assert Summary.from_arrays(np.array([]), np.array([], dtype=np.int64)).count == 0


# ----------------------------------------------------------------------------- merge order

@pytest.mark.parametrize("rt", [False, True], ids=["in-memory", "round-trip"])
@SETTINGS
@given(groups=disjoint_groups(), empties=st.integers(0, 2), data=st.data())
def test_merge_all_gives_identical_bytes_in_any_input_order(rt: bool, groups, empties: int, data) -> None:
    summaries = [summary_of(g) for g in groups] + [Summary() for _ in range(empties)]
    if rt:
        summaries = [round_trip(s) for s in summaries]
    reference = Summary.merge_all(summaries).to_bytes()
    for _ in range(3):
        shuffled = data.draw(st.permutations(summaries))
        assert Summary.merge_all(shuffled).to_bytes() == reference


@SETTINGS
@given(groups=disjoint_groups())
def test_merge_all_of_round_tripped_inputs_gives_the_same_bytes(groups) -> None:
    summaries = [summary_of(g) for g in groups]
    assert (Summary.merge_all([round_trip(s) for s in summaries]).to_bytes()
            == Summary.merge_all(summaries).to_bytes())


@SETTINGS
@given(groups=disjoint_groups(min_groups=2), data=st.data())
def test_merge_is_commutative_and_associative_on_exact_fields(groups, data) -> None:
    k = 3
    summaries = [summary_of(g, k=k) for g in groups]
    want = expected([p for g in groups for p in g], k)
    for _ in range(2):
        acc = Summary(k)
        for s in data.draw(st.permutations(summaries)):
            acc.merge(s)
        assert_exact_fields(acc, want, k)


# ----------------------------------------------------------------------------- overlap

@st.composite
def overlapping_summaries(draw_):
    """2..5 summaries whose source sets intersect somewhere."""
    n = draw_(st.integers(2, 5))
    pool = draw_(st.lists(st.integers(0, 2**32 - 1), min_size=2, max_size=12, unique=True))
    sets = [draw_(st.sets(st.sampled_from(pool), min_size=1)) for _ in range(n)]
    shared = draw_(st.sampled_from(pool))
    i, j = draw_(st.lists(st.integers(0, n - 1), min_size=2, max_size=2, unique=True))
    sets[i].add(shared)
    sets[j].add(shared)
    nan_only = draw_(st.booleans())   # a source that only ever sent NaN overlaps just the same
    summaries = []
    for ids in sets:
        s = Summary()
        for source in sorted(ids):
            s.add_many([NAN] if nan_only and source == shared else draw_(st.lists(value_st, min_size=1, max_size=4)),
                       source)
        summaries.append(s)
    return sets, summaries


@SETTINGS
@given(case=overlapping_summaries())
def test_merge_all_overlap_names_exactly_the_overlapping_sources(case) -> None:
    sets, summaries = case
    counts: dict[int, int] = {}
    for ids in sets:
        for source in ids:
            counts[source] = counts.get(source, 0) + 1
    overlap = sorted(s for s, c in counts.items() if c > 1)
    before = [s.to_bytes() for s in summaries]
    with pytest.raises(OverlapError) as info:
        Summary.merge_all(summaries)
    assert list(info.value.sources) == overlap
    assert isinstance(info.value, ValueError)
    assert [s.to_bytes() for s in summaries] == before


@SETTINGS
@given(case=overlapping_summaries())
def test_merge_overlap_raises_and_changes_neither_operand(case) -> None:
    sets, summaries = case
    for a_i in range(len(summaries)):
        for b_i in range(len(summaries)):
            if a_i == b_i or not sets[a_i] & sets[b_i]:
                continue
            a, b = summaries[a_i], summaries[b_i]
            a_bytes, b_bytes = a.to_bytes(), b.to_bytes()
            with pytest.raises(OverlapError) as info:
                a.merge(b)
            assert list(info.value.sources) == sorted(sets[a_i] & sets[b_i])
            assert a.to_bytes() == a_bytes and b.to_bytes() == b_bytes


def test_overlap_error_message_and_sources() -> None:
    a, b = Summary(), Summary()
    a.add_many([1.0, 2.0], 3)
    a.add(1.0, 7)
    b.add(5.0, 7)
    b.add(6.0, 3)
    b.add(6.0, 4)
    with pytest.raises(OverlapError, match="3, 7") as info:
        a.merge(b)
    assert info.value.sources == [3, 7]


# ----------------------------------------------------------------------------- no mutation, no aliasing

@SETTINGS
@given(groups=disjoint_groups(min_groups=3, max_groups=3), extra=st.lists(finite_st, min_size=1, max_size=5))
def test_merge_never_mutates_its_argument_nor_shares_state(groups, extra) -> None:
    a, b, c = (summary_of(g) for g in groups)
    b_bytes, c_bytes = b.to_bytes(), c.to_bytes()
    a.merge(b)
    assert b.to_bytes() == b_bytes
    # later changes to the target do not reach the argument ...
    a.merge(c)
    a.add_many(np.array(extra), FRESH)
    a.add(NAN, FRESH)
    assert b.to_bytes() == b_bytes and c.to_bytes() == c_bytes
    # ... and later changes to the argument do not reach the target
    a_bytes = a.to_bytes()
    b.add_many(np.array(extra), next(iter(b.sources)))   # b grows; a must not see it
    b.add(NAN, next(iter(b.sources)))
    assert a.to_bytes() == a_bytes


@SETTINGS
@given(groups=disjoint_groups(min_groups=1, max_groups=4), extra=st.lists(finite_st, min_size=1, max_size=5))
def test_merge_all_shares_no_state_with_its_inputs(groups, extra) -> None:
    inputs = [summary_of(g) for g in groups]
    before = [s.to_bytes() for s in inputs]
    merged = Summary.merge_all(inputs)
    merged_bytes = merged.to_bytes()
    assert [s.to_bytes() for s in inputs] == before
    merged.add_many(np.array(extra), FRESH)
    merged.add(NAN, FRESH)
    assert [s.to_bytes() for s in inputs] == before
    merged = Summary.merge_all(inputs)
    for s in inputs:
        s.add_many(np.array(extra), next(iter(s.sources)))
    assert merged.to_bytes() == merged_bytes


def test_sources_properties_are_copies() -> None:
    s = Summary()
    s.add(NAN, 1)
    s.sources.add(99)
    s.nonfinite_sources.add(99)
    assert set(s.sources) == {1} and set(s.nonfinite_sources) == {1}


# ----------------------------------------------------------------------------- copies and identity

@SETTINGS
@given(groups=disjoint_groups(min_groups=1, max_groups=1))
def test_copy_is_identical(groups) -> None:
    s = summary_of(groups[0])
    assert s.copy().to_bytes() == s.to_bytes()


@SETTINGS
@given(groups=disjoint_groups(min_groups=1, max_groups=1))
def test_merging_an_empty_summary_changes_nothing(groups) -> None:
    s = summary_of(groups[0])
    before = s.to_bytes()
    s.merge(Summary())
    assert s.to_bytes() == before
    assert Summary.merge_all([s, Summary()]).to_bytes() == before


# ----------------------------------------------------------------------------- compatibility

@pytest.mark.parametrize("kw", [{"k": 3}, {"max_centroids": 100}])
def test_incompatible_summaries_refuse_to_merge(kw) -> None:
    a, b = Summary(), Summary(**kw)
    a.add(1.0, 1)
    b.add(2.0, 2)
    a_bytes, b_bytes = a.to_bytes(), b.to_bytes()
    with pytest.raises(ValueError):
        a.merge(b)
    with pytest.raises(ValueError):
        b.merge(a)
    with pytest.raises(ValueError):
        Summary.merge_all([a, b])
    with pytest.raises(ValueError):
        Summary.merge_all([b, a])
    assert a.to_bytes() == a_bytes and b.to_bytes() == b_bytes
    with pytest.raises(TypeError):
        a.merge(object())


def test_merge_all_keeps_k_and_max_centroids() -> None:
    a, b = Summary(3, 50), Summary(3, 50)
    a.add(1.0, 1)
    b.add(2.0, 2)
    m = Summary.merge_all([a, b])
    assert (m.k, m.max_centroids) == (3, 50)
    assert Summary.merge_all([]).count == 0


# ----------------------------------------------------------------------------- non-finite values

def test_nonfinite_values_are_counted_but_never_enter_the_statistics() -> None:
    s = Summary(k=4)
    s.add_many([1.0, NAN, 3.0, INF], source=1)
    s.add(-INF, 2)
    s.add(NAN, 3)                       # source 3 only ever sent NaN
    s.add_many(np.array([NAN, NAN]), 4)  # so did 4, via the fast path
    s.add(2.0, 5)
    assert s.count == 3 and s.sum == 6.0 and s.mean == 2.0
    assert s.nonfinite_count == 6
    assert set(s.sources) == {1, 2, 3, 4, 5}
    assert set(s.nonfinite_sources) == {1, 2, 3, 4}
    assert (s.min, s.argmin, s.max, s.argmax) == (1.0, 1, 3.0, 1)
    assert s.top() == [(3.0, 1), (2.0, 5), (1.0, 1)]
    assert s.bottom() == [(1.0, 1), (2.0, 5), (3.0, 1)]
    assert math.isclose(s.stddev, float(np.std([1.0, 3.0, 2.0])))
    assert s.quantiles([0.0, 0.5, 1.0]) == [1.0, 2.0, 3.0]
    msg = s.to_proto()
    weights, means = np.frombuffer(msg.sketch.weights, "<f8"), np.frombuffer(msg.sketch.means, "<f8")
    assert weights.sum() == 3 and np.isfinite(means).all() and means.tolist() == [1.0, 2.0, 3.0]
    back = round_trip(s)
    assert back.to_bytes() == s.to_bytes() and set(back.nonfinite_sources) == {1, 2, 3, 4}


def test_source_that_only_sent_nonfinite_values() -> None:
    s = Summary()
    s.add(NAN, 9)
    s.add_many([INF, -INF], 10)
    for t in (s, round_trip(s), Summary.merge_all([s])):
        assert t.count == 0 and t.nonfinite_count == 3
        assert set(t.sources) == {9, 10} and set(t.nonfinite_sources) == {9, 10}
        assert math.isnan(t.min) and math.isnan(t.max) and t.argmin is None and t.argmax is None
        assert t.top() == [] and t.bottom() == []
        assert math.isnan(t.quantile(0.5)) and math.isnan(t.cdf(0.0)) and math.isnan(t.mean)
        assert t.sum == 0.0


# ----------------------------------------------------------------------------- moments

@pytest.mark.parametrize("rt", [False, True], ids=["in-memory", "round-trip"])
def test_stddev_has_no_catastrophic_cancellation(rt: bool) -> None:
    """1e9 + N(0, 1) noise split over 512 summaries of random sizes, merged up a tree."""
    rng = np.random.default_rng(42)
    values = 1e9 + rng.normal(0.0, 1.0, 100_000)
    cuts = np.sort(rng.choice(np.arange(1, values.size), size=511, replace=False))
    leaves = []
    for source, piece in enumerate(np.split(values, cuts)):
        s = Summary()
        if source % 7 == 0:
            for v in piece:
                s.add(float(v), source)      # the one-value path (Welford)
        else:
            s.add_many(piece, source)
        leaves.append(s)
    level = leaves
    while len(level) > 1:
        level = [Summary.merge_all([round_trip(s) if rt else s for s in level[i:i + 8]])
                 for i in range(0, len(level), 8)]
    root = level[0]
    want = float(np.std(values))
    assert abs(root.stddev - want) <= 1e-6 * want, (root.stddev, want)
    assert abs(root.mean - float(np.mean(values))) <= 1e-5
    # the check has teeth: the textbook sum-of-squares formula is far off on these values
    naive = math.sqrt(max(float(np.mean(values * values)) - float(np.mean(values)) ** 2, 0.0))
    assert abs(naive - want) > 1e-2 * want


def test_stddev_pairwise_merge_matches_numpy() -> None:
    rng = np.random.default_rng(3)
    acc = Summary()
    chunks = []
    for source in range(200):
        chunk = 1e9 + rng.normal(0.0, 1e-2, int(rng.integers(1, 50)))
        chunks.append(chunk)
        s = Summary()
        s.add_many(chunk, source)
        acc.merge(s)
    values = np.concatenate(chunks)
    want = float(np.std(values))
    assert abs(acc.stddev - want) <= 1e-6 * want


# ----------------------------------------------------------------------------- API basics

def test_empty_summary() -> None:
    s = Summary()
    assert s.count == 0 and s.sum == 0.0 and s.nonfinite_count == 0
    for value in (s.mean, s.stddev, s.variance, s.min, s.max, s.quantile(0.5), s.cdf(1.0)):
        assert math.isnan(value)
    assert s.argmin is None and s.argmax is None and s.top() == [] and s.bottom() == []
    assert len(s.sources) == 0
    assert round_trip(s).to_bytes() == s.to_bytes()


def test_add_and_add_many_agree() -> None:
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    a, b = Summary(k=3), Summary(k=3)
    for v in values:
        a.add(v, 1, time_ns=5)
    b.add_many(values, 1, time_ns=5)
    assert a.count == b.count and a.sum == b.sum and a.top() == b.top() == [(9.0, 1), (6.0, 1), (5.0, 1)]
    assert a.bottom() == b.bottom() == [(1.0, 1), (1.0, 1), (2.0, 1)]
    assert a.quantiles([0.1, 0.5, 0.9]) == b.quantiles([0.1, 0.5, 0.9])
    assert math.isclose(a.stddev, b.stddev) and math.isclose(a.mean, b.mean)


def test_ties_are_broken_by_lowest_source() -> None:
    s = Summary(k=3)
    for source in (7, 3, 5):
        s.add(1.0, source)
    assert (s.min, s.argmin, s.max, s.argmax) == (1.0, 3, 1.0, 3)
    assert s.top() == s.bottom() == [(1.0, 3), (1.0, 5), (1.0, 7)]
    parts = []
    for source in (7, 3, 5):
        p = Summary(k=3)
        p.add(1.0, source)
        parts.append(p)
    acc = Summary(k=3)
    for p in parts:
        acc.merge(p)
    assert acc.top() == s.top() and (acc.argmin, acc.argmax) == (3, 3)


@pytest.mark.parametrize("source", [-1, 2**32, 1.5, True, "3", None])
def test_bad_sources_are_rejected(source) -> None:
    s = Summary()
    with pytest.raises(ValueError):
        s.add(1.0, source)
    with pytest.raises(ValueError):
        s.add_many([1.0], source)
    assert s.count == 0 and len(s.sources) == 0


def test_queries_validate_arguments() -> None:
    s = Summary(k=2)
    s.add_many([1.0, 2.0, 3.0], 0)
    for q in (-0.1, 1.1, NAN):
        with pytest.raises(ValueError):
            s.quantile(q)
    with pytest.raises(ValueError):
        s.top(3)
    with pytest.raises(ValueError):
        Summary(k=-1)
    with pytest.raises(ValueError):
        Summary(max_centroids=1)
    assert s.top(0) == [] and s.top(1) == [(3.0, 0)]


def test_cdf_is_clamped_and_monotone() -> None:
    s = Summary()
    s.add_many(np.random.default_rng(0).lognormal(size=5_000), 0)
    assert s.cdf(s.min - 1) == 0.0 and s.cdf(s.max) == 1.0
    xs = np.linspace(s.min, s.max, 200)
    cdf = [s.cdf(float(x)) for x in xs]
    assert all(0.0 <= c <= 1.0 for c in cdf) and cdf == sorted(cdf)
    assert abs(s.cdf(s.quantile(0.5)) - 0.5) < 5e-3


def test_timestamps_merge_as_min_and_max() -> None:
    a, b = Summary(), Summary()
    a.add(1.0, 1, time_ns=200)
    a.add(1.0, 1, time_ns=300)
    b.add(1.0, 2, time_ns=100)
    b.add(1.0, 2, time_ns=250)
    m = Summary.merge_all([a, b])
    assert (m.first_time_ns, m.last_time_ns) == (100, 300)
    a.merge(b)
    assert (a.first_time_ns, a.last_time_ns) == (100, 300)
    assert (round_trip(a).first_time_ns, round_trip(a).last_time_ns) == (100, 300)
