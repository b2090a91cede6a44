"""The agent's native ingest (`Summary.from_arrays` -> telemetry/summary/native/ingest.cpp) against the Python
ingest it replaced (tests/summary_oracle.py: numpy's reductions, lexsort's tie order, fastdigest's from_values).

Same values and sources to both, and the same bytes out, byte for byte (t-digest centroids included), over the
shapes an agent sees: one rank or thousands, repeated sources, NaN/+-Inf, -0.0 beside 0.0, ties across ranks,
magnitudes whose sums overflow, every length around numpy's pairwise-sum blocks (8, 128) and the sketch's bound;
then the same through merges and a bytes round trip. Bad input is refused as the Python ingest refused it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from summary_oracle import OracleSummary
from telemetry import Summary
from telemetry.summary.summary import MAX_MAGNITUDE
from telemetry.v1 import summary_pb2

NAN = math.nan

values_of = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(-1e6, 1e6),
    st.sampled_from([0.0, -0.0, 1.0, -1.0, NAN, math.inf, -math.inf, 1e308, -1e308, 5e-324]),
)


@st.composite
def arrays(draw_, max_size=300):
    n = draw_(st.integers(0, max_size))
    values = draw_(st.lists(values_of, min_size=n, max_size=n))
    pool = draw_(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=12, unique=True))
    sources = draw_(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    return np.array(values, dtype=np.float64), np.array(sources, dtype=np.int64)


def both(values, sources, **kw) -> tuple[Summary, OracleSummary]:
    return Summary.from_arrays(values, sources, **kw), OracleSummary.from_arrays(values, sources, **kw)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])  # the oracle's ingest is slow
@given(data=arrays(), k=st.sampled_from([0, 1, 3, 8]), max_centroids=st.sampled_from([2, 5, 200]),
       first=st.one_of(st.none(), st.integers(0, 2000)))
def test_from_arrays_gives_the_oracles_bytes(data, k, max_centroids, first) -> None:
    values, sources = data
    ours, theirs = both(values, sources, time_ns=1000, k=k, max_centroids=max_centroids, first_time_ns=first)
    assert ours.to_bytes() == theirs.to_bytes()
    qs = [0.0, 0.01, 0.5, 0.99, 1.0]
    assert list(map(repr, ours.quantiles(qs))) == list(map(repr, theirs.quantiles(qs)))  # NaN as NaN
    assert (ours.top(), ours.bottom(), ours.argmin, ours.argmax) == (theirs.top(), theirs.bottom(), theirs.argmin,
                                                                    theirs.argmax)


@pytest.mark.parametrize("n", [1, 7, 8, 9, 15, 16, 127, 128, 129, 255, 256, 257, 401, 402, 403, 1000, 4096, 4097,
                               20_000])
@pytest.mark.parametrize("shape", ["lognormal", "one rank", "ties", "signed"])
def test_every_length_around_numpys_blocks_and_the_sketch_bound(n, shape) -> None:
    rng = np.random.default_rng(n)
    sources = np.arange(n, dtype=np.int64)
    if shape == "lognormal":
        values = rng.lognormal(0.0, 2.0, n)
    elif shape == "one rank":
        values, sources = rng.normal(0.0, 1.0, n), np.full(n, 7, dtype=np.int64)
    elif shape == "ties":  # few distinct values over many ranks: ties broken by source, then position
        values = rng.integers(0, 3, n).astype(np.float64)
        sources = rng.integers(0, max(1, n // 3), n)
    else:
        values = rng.normal(0.0, 1e300, n) * rng.choice([1.0, -1.0, 0.0, -0.0], n)
    ours, theirs = both(values, sources, time_ns=9)
    assert ours.to_bytes() == theirs.to_bytes()
    merged = Summary.merge_all([ours, Summary.from_arrays(np.array([1.0, NAN]), np.array([2**32 - 1] * 2), 3)])
    merged_theirs = OracleSummary.merge_all([theirs, OracleSummary.from_arrays(np.array([1.0, NAN]),
                                                                               np.array([2**32 - 1] * 2), 3)])
    assert merged.to_bytes() == merged_theirs.to_bytes()


def test_agent_windows_merge_and_round_trip_as_the_oracles() -> None:
    """64 agents' windows of 8 ranks each (what a rack merges), natively ingested, through a tier and the wire."""
    rng = np.random.default_rng(3)
    windows = [(rng.lognormal(0.0, 1.0, 8 * 5), np.repeat(np.arange(8 * a, 8 * a + 8), 5)) for a in range(64)]
    ours = [Summary.from_arrays(v, s, 100, first_time_ns=50) for v, s in windows]
    theirs = [OracleSummary.from_arrays(v, s, 100, first_time_ns=50) for v, s in windows]
    assert [s.to_bytes() for s in ours] == [s.to_bytes() for s in theirs]
    root = Summary.merge_all([Summary.from_bytes(s.to_bytes()) for s in ours])
    root_theirs = OracleSummary.merge_all([OracleSummary.from_bytes(s.to_bytes()) for s in theirs])
    assert root.to_bytes() == root_theirs.to_bytes()


def test_inputs_of_any_layout_and_dtype_are_read_as_the_oracle_reads_them() -> None:
    rng = np.random.default_rng(5)
    grid = rng.normal(0.0, 1.0, (6, 10))
    cases = [
        (grid[:, ::2], np.arange(30).reshape(6, 5)),                   # strided, 2-d
        (grid.T, np.arange(60, dtype=np.uint32).reshape(10, 6)),        # Fortran order, unsigned sources
        (grid[0].astype(np.float32), np.arange(10, dtype=np.int16)),    # narrow types
        ([1.0, 2.0, NAN], [4, 4, 5]),                                   # lists
        (np.float64(3.0), np.int64(1)),                                 # scalars
    ]
    for values, sources in cases:
        ours, theirs = both(values, sources, time_ns=1)
        assert ours.to_bytes() == theirs.to_bytes()
    arr_v, arr_s = np.arange(5.0), np.arange(5)
    Summary.from_arrays(arr_v, arr_s, 1)
    assert arr_v.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0] and arr_s.tolist() == [0, 1, 2, 3, 4]  # inputs untouched


@pytest.mark.parametrize("values,sources,kw", [
    ([1.0, 2.0], [1], {}),
    ([1.0], [-1], {}),
    ([1.0], [2**32], {}),
    ([1.0, NAN], [3, 2**40], {}),
    ([1.0], [1], {"k": -1}),
    ([1.0], [1], {"max_centroids": 1}),
])
def test_bad_input_is_refused_as_the_oracle_refuses_it(values, sources, kw) -> None:
    with pytest.raises(ValueError) as theirs:
        OracleSummary.from_arrays(np.array(values), np.array(sources), 1, **kw)
    with pytest.raises(ValueError) as ours:
        Summary.from_arrays(np.array(values), np.array(sources), 1, **kw)
    assert str(ours.value) == str(theirs.value)


def test_values_beyond_the_bound_count_as_nonfinite_so_no_merge_overflows() -> None:
    """A diverging float64 metric (1e308 on two ranks) once made every decoder refuse a window whose sum overflowed,
    and `merge_all` of two windows that each decoded raise OverflowError in a tier's flush. Finite values beyond
    +-1e100 now count as non-finite, in every ingest, natively and in Python."""
    assert MAX_MAGNITUDE == 1e100
    above = math.nextafter(1e100, math.inf)
    a = Summary.from_arrays(np.array([1e308, 5.0, 1e100, -above]), np.array([1, 2, 3, 4]), 1)
    assert (a.count, a.max, a.nonfinite_count, list(a.nonfinite_sources)) == (2, 1e100, 2, [1, 4])
    b = Summary()
    b.add(1e308, 7, time_ns=1)
    b.add_many([-1e308, 2.0, above], 8, time_ns=1)
    assert (b.count, b.nonfinite_count, list(b.nonfinite_sources)) == (1, 3, [7, 8])
    c = Summary.from_arrays(np.array([-1e308, 1e100, 1e100]), np.array([9, 10, 11]), 1)
    merged = Summary.merge_all([Summary.from_bytes(s.to_bytes()) for s in (a, b, c)])
    assert Summary.from_bytes(merged.to_bytes()).to_bytes() == merged.to_bytes()
    assert merged.count == 5 and math.isclose(merged.sum, 3e100) and merged.nonfinite_count == 6
    theirs = OracleSummary.from_arrays(np.array([1e308, 5.0, 1e100, -above]), np.array([1, 2, 3, 4]), 1)
    assert theirs.to_bytes() == a.to_bytes()


@pytest.mark.parametrize("field,value,why", [
    ("max", 2e100, "beyond"), ("min", -2e100, "beyond"), ("sum", 1e308, "sum"), ("sum", -20.5, "sum")])
def test_summaries_beyond_the_bound_or_with_impossible_sums_are_refused(field, value, why) -> None:
    """A hostile child's summary that decodes must merge without overflow: min/max within +-1e100, and a sum no
    larger than twice count x the larger of |min|, |max|."""
    good = Summary.from_arrays(np.array([1.0, 5.0]), np.array([1, 2]), 1)
    msg = summary_pb2.Summary.FromString(good.to_bytes())
    setattr(msg, field, value)
    data = msg.SerializeToString()
    for cls in (Summary, OracleSummary):
        with pytest.raises(ValueError, match=why):
            cls.from_bytes(data)


def test_an_ingested_summary_takes_further_values_as_the_oracle() -> None:
    ours, theirs = both(np.array([3.0, 1.0, NAN]), np.array([1, 2, 3]), time_ns=5)
    for s in (ours, theirs):
        s.add_many([0.5, 7.0], 9, time_ns=6)
        s.add(-1.0, 10, time_ns=4)
    assert ours.to_bytes() == theirs.to_bytes()
    assert ours.first_time_ns == 4 and ours.last_time_ns == 6
