"""Summary wire form: exact round trips, and malformed input raises ValueError (never another exception, never a hang).

A truncated or bit-flipped message can still parse as a *different, valid*
summary; that is accepted, provided the parsed summary is itself usable (it
serialises and parses back to the same bytes, and can be queried and merged).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from telemetry import Summary
from telemetry.v1 import summary_pb2

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAN, INF = math.nan, math.inf


def base_summary() -> Summary:
    """count 10, k 3, four sources, two of which sent NaN (source 4 nothing else)."""
    s = Summary(k=3)
    s.add_many(np.arange(1.0, 9.0), 1, time_ns=100)
    s.add_many([50.0, NAN], 2, time_ns=200)
    s.add(0.5, 3, time_ns=150)
    s.add(NAN, 4, time_ns=120)
    return s


def nan_only_summary() -> Summary:
    s = Summary(k=3)
    s.add(NAN, 4, time_ns=120)
    return s


def check_usable_or_value_error(data: bytes) -> None:
    """from_bytes raises ValueError, or returns a summary that round-trips and answers queries."""
    try:
        parsed = Summary.from_bytes(data)
    except ValueError:
        return
    again = parsed.to_bytes()
    assert Summary.from_bytes(again).to_bytes() == again
    parsed.quantiles([0.0, 0.5, 0.99, 1.0])
    parsed.cdf(1.0)
    parsed.top()
    parsed.bottom()
    _ = parsed.mean, parsed.stddev, parsed.sources, parsed.nonfinite_sources
    # it merges with an ordinary summary, and the result is itself valid on the wire:
    # a collector must not turn an accepted input into output the next tier refuses
    fresh = max(parsed.sources) + 1 if parsed.sources and max(parsed.sources) < 2**32 - 1 else 0
    if fresh not in parsed.sources:
        good = Summary(parsed.k, parsed.max_centroids)
        good.add_many([1.0, 2.0, 3.0], fresh, time_ns=1)
        merged = Summary.merge_all([parsed, good])
        assert Summary.from_bytes(merged.to_bytes()).to_bytes() == merged.to_bytes()


# ----------------------------------------------------------------------------- round trips

@st.composite
def summaries(draw_):
    k = draw_(st.sampled_from([0, 1, 3, 8]))
    max_centroids = draw_(st.sampled_from([4, 50, 200]))
    s = Summary(k, max_centroids)
    values = st.one_of(st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False),
                       st.sampled_from([NAN, INF, -INF, 0.0, -0.0]))
    for source in draw_(st.lists(st.integers(0, 2**32 - 1), max_size=12, unique=True)):
        s.add_many(draw_(st.lists(values, min_size=1, max_size=30)), source,
                   time_ns=draw_(st.integers(1, 2**62)))
    return s


@SETTINGS
@given(s=summaries())
def test_round_trip_preserves_everything(s: Summary) -> None:
    data = s.to_bytes()
    back = Summary.from_bytes(data)
    assert back.to_bytes() == data
    assert Summary.from_proto(s.to_proto()).to_bytes() == data
    assert back == s
    assert (back.k, back.max_centroids) == (s.k, s.max_centroids)
    assert back.count == s.count and back.sum == s.sum and back.nonfinite_count == s.nonfinite_count
    assert (back.argmin, back.argmax) == (s.argmin, s.argmax)
    assert back.top() == s.top() and back.bottom() == s.bottom()
    assert back.sources == s.sources and back.nonfinite_sources == s.nonfinite_sources
    assert (back.first_time_ns, back.last_time_ns) == (s.first_time_ns, s.last_time_ns)
    qs = [0.0, 0.01, 0.25, 0.5, 0.75, 0.99, 1.0]
    same = [(a == b) or (math.isnan(a) and math.isnan(b)) for a, b in zip(back.quantiles(qs), s.quantiles(qs))]
    assert all(same)
    for attr in ("mean", "stddev", "min", "max"):
        a, b = getattr(back, attr), getattr(s, attr)
        assert a == b or (math.isnan(a) and math.isnan(b)), attr
    check_usable_or_value_error(data)


def test_from_bytes_accepts_bytes_like_and_rejects_other_types() -> None:
    data = base_summary().to_bytes()
    assert Summary.from_bytes(bytearray(data)).to_bytes() == data
    assert Summary.from_bytes(memoryview(data)).to_bytes() == data
    with pytest.raises(TypeError):
        Summary.from_bytes("not bytes")


# ----------------------------------------------------------------------------- random and damaged bytes

@settings(max_examples=300, deadline=None)
@given(data=st.binary(max_size=600))
def test_random_bytes_raise_value_error_or_parse(data: bytes) -> None:
    check_usable_or_value_error(data)


@pytest.mark.parametrize("make", [base_summary, nan_only_summary, Summary], ids=["base", "nan-only", "empty"])
def test_every_truncation(make: Callable[[], Summary]) -> None:
    data = make().to_bytes()
    for n in range(len(data)):
        check_usable_or_value_error(data[:n])


@pytest.mark.parametrize("make", [base_summary, nan_only_summary], ids=["base", "nan-only"])
def test_every_single_bit_flip(make: Callable[[], Summary]) -> None:
    data = make().to_bytes()
    for i in range(len(data) * 8):
        flipped = bytearray(data)
        flipped[i // 8] ^= 1 << (i % 8)
        check_usable_or_value_error(bytes(flipped))


@SETTINGS
@given(data=st.data())
def test_random_byte_damage(data) -> None:
    raw = bytearray(base_summary().to_bytes())
    for _ in range(data.draw(st.integers(1, 6))):
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] = data.draw(st.integers(0, 255))
    check_usable_or_value_error(bytes(raw))


@st.composite
def arbitrary_messages(draw_):
    """Protobuf messages with every field drawn independently (mostly nonsense, sometimes valid)."""
    doubles = st.one_of(st.floats(), st.sampled_from([0.0, 1.0, 2.0, 0.5]))
    ids = st.integers(0, 6)
    bitmap = st.one_of(st.sets(ids, max_size=5).map(lambda s: BitMap(s).serialize()), st.binary(max_size=24))
    n_top = draw_(st.integers(0, 4))
    n_bottom = draw_(st.integers(0, 4))
    n_centroids = draw_(st.integers(0, 6))
    msg = summary_pb2.Summary(
        count=draw_(st.sampled_from([0, 1, 2, 3, 5, 2**64 - 1])),
        sum=draw_(doubles), mean=draw_(doubles), m2=draw_(doubles),
        min=draw_(doubles), argmin=draw_(ids), max=draw_(doubles), argmax=draw_(ids),
        k=draw_(st.sampled_from([0, 1, 3, 2**32 - 1])),
        top_values=draw_(st.lists(doubles, min_size=n_top, max_size=n_top)),
        top_sources=draw_(st.lists(ids, min_size=n_top, max_size=n_top + 1)),
        bottom_values=draw_(st.lists(doubles, min_size=n_bottom, max_size=n_bottom)),
        bottom_sources=draw_(st.lists(ids, min_size=n_bottom, max_size=n_bottom)),
        sources=draw_(bitmap), nonfinite_count=draw_(st.sampled_from([0, 1, 2])),
        nonfinite_sources=draw_(bitmap),
        first_time_ns=draw_(st.integers(0, 10)), last_time_ns=draw_(st.integers(0, 10)),
    )
    msg.sketch.max_centroids = draw_(st.sampled_from([0, 1, 2, 200]))
    msg.sketch.means = np.array(draw_(st.lists(doubles, min_size=n_centroids, max_size=n_centroids)),
                                dtype="<f8").tobytes()
    msg.sketch.weights = np.array(draw_(st.lists(st.one_of(doubles, st.just(1.0)), min_size=n_centroids,
                                                 max_size=n_centroids)), dtype="<f8").tobytes()
    return msg


@settings(max_examples=300, deadline=None)
@given(msg=arbitrary_messages())
def test_arbitrary_messages_raise_value_error_or_parse(msg) -> None:
    check_usable_or_value_error(msg.SerializeToString())


# ----------------------------------------------------------------------------- semantically bad messages

def _doubles(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<f8").copy()


def _set_centroids(msg, means=None, weights=None) -> None:
    if means is not None:
        msg.sketch.means = np.asarray(means, dtype="<f8").tobytes()
    if weights is not None:
        msg.sketch.weights = np.asarray(weights, dtype="<f8").tobytes()


def _argmax_not_in_sources(m):
    m.argmax = 99
    m.top_sources[0] = 99


def _argmin_not_in_sources(m):
    m.argmin = 99
    m.bottom_sources[0] = 99


def _swap(seq, i, j):
    seq[i], seq[j] = seq[j], seq[i]


def _scale_weights(m, factor):
    w = _doubles(m.sketch.weights)
    w[0] *= factor
    _set_centroids(m, weights=w)


def _means_not_ascending(m):
    means = _doubles(m.sketch.means)
    _swap(means, 0, 1)
    _set_centroids(m, means=means)


def _set_mean0(m, value):
    means = _doubles(m.sketch.means)
    means[0] = value
    _set_centroids(m, means=means)


def _weights_off(m):
    w = _doubles(m.sketch.weights)
    w[0] += 1.0
    _set_centroids(m, weights=w)


SEMANTIC = {
    # -- extremes and their sources
    "argmax not in sources": _argmax_not_in_sources,
    "argmin not in sources": _argmin_not_in_sources,
    "NaN min": lambda m: setattr(m, "min", NAN),
    "inf max": lambda m: setattr(m, "max", INF),
    "min > max": lambda m: (setattr(m, "min", 60.0)),
    # -- moments
    "NaN sum": lambda m: setattr(m, "sum", NAN),
    "inf mean": lambda m: setattr(m, "mean", INF),
    "negative m2": lambda m: setattr(m, "m2", -1.0),
    "mean outside [min, max]": lambda m: setattr(m, "mean", 1e300),
    "m2 larger than (max - min)^2 * count allows": lambda m: setattr(m, "m2", 1e300),
    "NaN m2": lambda m: setattr(m, "m2", NAN),
    # -- top / bottom
    "unsorted top": lambda m: (_swap(m.top_values, 1, 2), _swap(m.top_sources, 1, 2)),
    "unsorted bottom": lambda m: (_swap(m.bottom_values, 1, 2), _swap(m.bottom_sources, 1, 2)),
    "top values/sources length mismatch": lambda m: m.top_sources.append(1),
    "more top pairs than k": lambda m: (m.top_values.append(1.0), m.top_sources.append(1)),
    "fewer bottom pairs than min(k, count)": lambda m: (m.bottom_values.pop(), m.bottom_sources.pop()),
    "k disagrees with top/bottom": lambda m: setattr(m, "k", 2),
    "top[0] is not max": lambda m: m.top_values.__setitem__(0, 9.0),
    "NaN in top": lambda m: m.top_values.__setitem__(2, NAN),
    "top source not among sources": lambda m: m.top_sources.__setitem__(1, 99),
    "bottom source not among sources": lambda m: m.bottom_sources.__setitem__(2, 99),
    "top value below min": lambda m: m.top_values.__setitem__(2, 0.25),
    "bottom value above max": lambda m: m.bottom_values.__setitem__(2, 60.0),
    "top pairs on an empty summary": lambda m: (setattr(m, "count", 0), setattr(m, "k", 3)),
    # -- sketch
    "negative weight": lambda m: _scale_weights(m, -1.0),
    "zero weight": lambda m: _scale_weights(m, 0.0),
    "NaN weight": lambda m: _scale_weights(m, NAN),
    "means not ascending": _means_not_ascending,
    "NaN centroid mean": lambda m: _set_mean0(m, NAN),
    "centroid mean below min": lambda m: _set_mean0(m, 0.25),
    "weights do not sum to count": _weights_off,
    "means not whole float64s": lambda m: setattr(m.sketch, "means", m.sketch.means + b"\0"),
    "means and weights of different lengths": lambda m: setattr(m.sketch, "weights", m.sketch.weights[:-8]),
    "empty sketch with count": lambda m: (setattr(m.sketch, "means", b""), setattr(m.sketch, "weights", b"")),
    "more centroids than max_centroids allows": lambda m: setattr(m.sketch, "max_centroids", 3),
    "max_centroids 1": lambda m: setattr(m.sketch, "max_centroids", 1),
    "max_centroids 0": lambda m: setattr(m.sketch, "max_centroids", 0),
    "absurd max_centroids": lambda m: setattr(m.sketch, "max_centroids", 2**32 - 1),
    # -- bitmaps and non-finite bookkeeping
    "sources not roaring": lambda m: setattr(m, "sources", b"\x01\x02\x03garbage"),
    "nonfinite_sources not roaring": lambda m: setattr(m, "nonfinite_sources", b"\xff" * 9),
    "values without sources": lambda m: setattr(m, "sources", b""),
    "nonfinite count without sources": lambda m: setattr(m, "nonfinite_sources", b""),
    "nonfinite sources without count": lambda m: setattr(m, "nonfinite_count", 0),
    "nonfinite sources not among sources": lambda m: setattr(m, "nonfinite_sources",
                                                             BitMap([2, 4, 77]).serialize()),
    "fewer nonfinite values than nonfinite sources": lambda m: setattr(m, "nonfinite_count", 1),
    # -- time
    "first time after last time": lambda m: (setattr(m, "first_time_ns", 300), setattr(m, "last_time_ns", 100)),
}


def test_base_message_is_valid() -> None:
    msg = base_summary().to_proto()
    assert Summary.from_proto(msg).to_bytes() == msg.SerializeToString()
    assert len(msg.top_values) == 3 and msg.count == 10 and msg.argmax == 2


@pytest.mark.parametrize("name", list(SEMANTIC))
def test_semantically_bad_message_raises_value_error(name: str) -> None:
    msg = base_summary().to_proto()
    SEMANTIC[name](msg)
    with pytest.raises(ValueError, match="malformed summary"):
        Summary.from_proto(msg)
    with pytest.raises(ValueError, match="malformed summary"):
        Summary.from_bytes(msg.SerializeToString())


EMPTY_GARBAGE = {
    "NaN sum": {"sum": NAN},
    "inf mean": {"mean": INF},
    "NaN m2": {"m2": NAN},
    "nonzero sum": {"sum": 5.0},
}


@pytest.mark.parametrize("name", list(EMPTY_GARBAGE))
def test_summary_without_finite_values_cannot_carry_moments(name: str) -> None:
    """count == 0 (here: one source that sent only NaN) with a non-zero or non-finite sum/mean/m2 must be
    refused (or cleaned): accepted as is, it poisons every summary it is merged into."""
    msg = nan_only_summary().to_proto()
    for field, value in EMPTY_GARBAGE[name].items():
        setattr(msg, field, value)
    try:
        parsed = Summary.from_bytes(msg.SerializeToString())
    except ValueError:
        return
    good = Summary(k=3)
    good.add_many([1.0, 2.0, 3.0], 1)
    merged = Summary.merge_all([good, parsed])
    assert (merged.sum, merged.mean, merged.stddev) == (good.sum, good.mean, good.stddev)
    assert parsed.sum == 0.0
