"""`Summary.add_many` in native code (issue 29: `add_many` in telemetry/summary/native/ingest.cpp, fastdigest's
batch_update as `merge_sorted` in tdigest.hpp) against the Python ingest it replaced (tests/summary_oracle.py).

The same calls to both, and the same bytes out, byte for byte (t-digest centroids included): many calls from one
source and from many, onto fresh summaries, ingested ones, parsed and merged ones; NaN/+-Inf, -0.0 beside 0.0 (the
case numpy's partition orders: taken by the Python path), ties across sources, values near the +-1e100 bound, every
length around numpy's pairwise-sum blocks and past the sketch's bound (so batch_update compresses onto centroids
already held, and fastdigest's count crosses its recompute threshold)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from summary_oracle import OracleSummary
from telemetry import Summary

values_of = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e6, 1e6),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, 2.0, math.nan, math.inf, -math.inf, 1e100, -1e100, 1e101, 5e-324]),
)
calls_of = st.lists(st.tuples(st.lists(values_of, max_size=300), st.integers(0, 40), st.integers(1, 10**6)),
                    min_size=1, max_size=6)


def fed(summary: Summary | OracleSummary, calls: list[tuple[list[float], int, int]]) -> None:
    for values, source, stamp in calls:
        summary.add_many(np.array(values, dtype=np.float64), source, time_ns=stamp)
        if isinstance(summary, Summary) and values and not _python_way(values, summary.k):
            assert summary._core is not None, "the native path ran (the Python one lets the core go)"


def _python_way(values: list[float], k: int) -> bool:
    """Whether the core leaves these values to the Python ingest: both zeros, more finite values than k slots."""
    finite = [v for v in values if abs(v) <= 1e100]
    zeros = {math.copysign(1, v) for v in finite if v == 0}
    return bool(k) and k < len(finite) and len(zeros) == 2


def same(ours: Summary, theirs: OracleSummary) -> None:
    assert ours.to_bytes() == theirs.to_bytes()
    qs = [0.0, 0.01, 0.5, 0.99, 1.0]
    assert list(map(repr, ours.quantiles(qs))) == list(map(repr, theirs.quantiles(qs)))  # NaN as NaN
    assert (ours.count, ours.top(), ours.bottom(), ours.argmin, ours.argmax) == (
        theirs.count, theirs.top(), theirs.bottom(), theirs.argmin, theirs.argmax)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(calls=calls_of, k=st.sampled_from([0, 1, 3, 8]), max_centroids=st.sampled_from([2, 5, 200]))
def test_add_many_gives_the_oracles_bytes(calls, k, max_centroids) -> None:
    ours, theirs = Summary(k=k, max_centroids=max_centroids), OracleSummary(k=k, max_centroids=max_centroids)
    fed(ours, calls)
    fed(theirs, calls)
    same(ours, theirs)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(first=calls_of, then=calls_of, how=st.sampled_from(["ingested", "parsed", "merged", "queried"]))
def test_add_many_onto_a_summary_that_holds_values_gives_the_oracles_bytes(first, then, how) -> None:
    """Onto a summary built natively (from_arrays), read from bytes, merged, or queried between calls (fields
    materialised from the core, then stale once the core takes more)."""
    values = np.array([v for call in first for v in call[0]] or [1.0], dtype=np.float64)
    sources = np.array([call[1] for call in first for _ in call[0]] or [41], dtype=np.int64)
    ours: Summary = Summary.from_arrays(values, sources, time_ns=5)
    theirs: OracleSummary = OracleSummary.from_arrays(values, sources, time_ns=5)
    if how == "parsed":
        ours, theirs = Summary.from_bytes(ours.to_bytes()), OracleSummary.from_bytes(theirs.to_bytes())
    elif how == "merged":
        extra = np.array([3.0, -0.0, 7.5]), np.array([50, 51, 52], dtype=np.int64)
        ours = Summary.merge_all([ours, Summary.from_arrays(*extra, time_ns=9)])
        theirs = OracleSummary.merge_all([theirs, OracleSummary.from_arrays(*extra, time_ns=9)])
    for values_, source, stamp in then:
        if how == "queried":
            assert ours.count == theirs.count and ours.top() == theirs.top()
        ours.add_many(np.array(values_), source + 60, time_ns=stamp)
        theirs.add_many(np.array(values_), source + 60, time_ns=stamp)
    same(ours, theirs)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 127, 128, 129, 401, 4097, 20_000])
@pytest.mark.parametrize("calls", [1, 3])
def test_every_length_around_numpys_blocks_and_the_sketch_bound(n: int, calls: int) -> None:
    rng = np.random.default_rng(n)
    ours, theirs = Summary(), OracleSummary()
    for i in range(calls):
        values = rng.lognormal(0, 2, n)
        ours.add_many(values, i, time_ns=10 + i)
        theirs.add_many(values, i, time_ns=10 + i)
    same(ours, theirs)


def test_fastdigests_recompute_threshold_is_crossed_as_there() -> None:
    """fastdigest re-adds its weights when its count crosses a multiple of 10**7: once here, onto a digest that holds
    centroids already."""
    rng = np.random.default_rng(3)
    ours, theirs = Summary(), OracleSummary()
    for source, n in enumerate([9_999_000, 2_000]):
        values = rng.normal(0, 1, n)
        ours.add_many(values, source, time_ns=1)
        theirs.add_many(values, source, time_ns=1)
    same(ours, theirs)


def test_zeros_of_both_signs_past_the_kept_slots_go_the_python_way() -> None:
    """-0.0 and 0.0 among more values than the top/bottom slots: numpy's partition decides which zero is kept, so
    the core declines (changing nothing) and the Python ingest runs; the same bytes either way."""
    values = np.array([-0.0, 0.0] * 6 + [-1.0], dtype=np.float64)
    summary = Summary(k=3)
    assert not summary._as_core().add_many(values, 1, 7)
    ours, theirs = Summary(k=3), OracleSummary(k=3)
    ours.add_many(values, 1, time_ns=7)
    theirs.add_many(values, 1, time_ns=7)
    same(ours, theirs)
    assert [math.copysign(1, v) for v, _ in ours.top()] == [math.copysign(1, v) for v, _ in theirs.top()]


def test_bad_input_is_refused_as_before() -> None:
    summary = Summary()
    with pytest.raises(ValueError):
        summary.add_many([1.0], -1)
    with pytest.raises(ValueError):
        summary.add_many([1.0], 2**32)
    summary.add_many([], 3)
    assert summary.count == 0 and not summary.sources
