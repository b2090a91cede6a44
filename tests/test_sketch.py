"""The quantile sketch (telemetry/summary/sketch.py).

The first tests pin the one assumption sketch.py makes about fastdigest:
the native core hands digests over in fastdigest's own binary layout;
tests/sketch_wire.py's `from_centroids` writes that layout, and the digest it
builds must be exactly the digest fastdigest itself would hold (same
centroids, mass, sum, min, max, count; same bytes; same answers). If a
fastdigest upgrade changes the layout, these fail before anything else does.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fastdigest import TDigest
from fastdigest import merge_all as fd_merge_all
from hypothesis import given, settings
from hypothesis import strategies as st

from sketch_wire import centroids, from_centroids, from_wire
from summary_support import DISTRIBUTIONS, draw
from telemetry.summary.sketch import DEFAULT_MAX_CENTROIDS, Sketch

QS = [0.0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.999, 1.0]


def rebuild(digest: TDigest, max_centroids: int) -> Sketch:
    d = digest.to_dict()
    means = np.array([c["m"] for c in d["centroids"]], dtype=np.float64)
    weights = np.array([c["c"] for c in d["centroids"]], dtype=np.float64)
    return from_centroids(max_centroids, means, weights, d["n_values"], d["sum"], d["min"], d["max"])


def assert_same_digest(sketch: Sketch, digest: TDigest) -> None:
    mine = sketch._get()
    assert mine is not None
    assert mine.to_dict() == digest.to_dict()              # centroids, mass, sum, min, max, n_values, bound
    assert mine.to_bytes() == digest.to_bytes()            # byte for byte: the layout assumption
    assert mine.quantile_vec(QS) == digest.quantile_vec(QS)
    xs = np.linspace(digest.min(), digest.max(), 7).tolist()
    assert [mine.cdf(x) for x in xs] == [digest.cdf(x) for x in xs]
    means, weights = centroids(sketch)
    theirs = digest.to_dict()["centroids"]
    assert means.tolist() == [c["m"] for c in theirs]
    assert weights.tolist() == [c["c"] for c in theirs]
    assert sketch.weight == digest.mass()


@pytest.mark.parametrize("dist", DISTRIBUTIONS)
@pytest.mark.parametrize("n", [1, 2, 150, 10_000])
@pytest.mark.parametrize("max_centroids", [2, 50, DEFAULT_MAX_CENTROIDS])
def test_from_centroids_reproduces_a_fastdigest_digest(dist: str, n: int, max_centroids: int) -> None:
    values = draw(dist, np.random.default_rng(n), n)
    digest = TDigest.from_values(values, max_centroids=max_centroids)
    assert_same_digest(rebuild(digest, max_centroids), digest)


def test_from_centroids_reproduces_merged_and_updated_digests() -> None:
    rng = np.random.default_rng(1)
    parts = [TDigest.from_values(rng.lognormal(size=int(rng.integers(1, 500))), max_centroids=200) for _ in range(40)]
    merged = fd_merge_all(parts, max_centroids=200)
    assert_same_digest(rebuild(merged, 200), merged)
    updated = parts[0].copy()
    updated.batch_update(rng.normal(size=1000))
    updated.merge_inplace(parts[1])
    assert_same_digest(rebuild(updated, 200), updated)


@settings(max_examples=60, deadline=None)
@given(values=st.lists(st.floats(-1e12, 1e12, allow_nan=False, allow_infinity=False), min_size=1, max_size=400),
       max_centroids=st.integers(2, 300))
def test_from_centroids_reproduces_any_digest(values, max_centroids) -> None:
    digest = TDigest.from_values(values, max_centroids=max_centroids)
    assert_same_digest(rebuild(digest, max_centroids), digest)


def test_sketch_centroids_round_trip_exactly() -> None:
    s = Sketch(200)
    values = np.random.default_rng(2).pareto(1.5, 20_000)
    s.add_many(values)
    for v in values[:100]:
        s.add(float(v))
    means, weights = centroids(s)
    back = from_centroids(200, means, weights, 20_100, float(values.sum() + values[:100].sum()),
                          float(values.min()), float(values.max()))
    m2, w2 = centroids(back)
    assert m2.tolist() == means.tolist() and w2.tolist() == weights.tolist()
    assert back.quantiles(QS[1:-1]) == s.quantiles(QS[1:-1])


# ----------------------------------------------------------------------------- behaviour

def test_empty_sketch() -> None:
    s = Sketch()
    assert s.weight == 0.0
    assert all(math.isnan(v) for v in s.quantiles([0.1, 0.5]))
    assert math.isnan(s.cdf(0.0))
    means, weights = centroids(s)
    assert means.size == weights.size == 0
    assert from_centroids(200, means, weights, 0, 0.0, math.inf, -math.inf).weight == 0.0
    assert Sketch.merge_all([]).weight == 0.0


def test_merge_leaves_argument_unchanged_and_adds_weight() -> None:
    rng = np.random.default_rng(3)
    a, b = Sketch(), Sketch()
    a.add_many(rng.normal(size=5_000))
    b.add_many(rng.normal(5.0, 1.0, size=3_000))
    b_centroids = [x.tolist() for x in centroids(b)]
    a.merge(b)
    assert [x.tolist() for x in centroids(b)] == b_centroids
    assert a.weight == 8_000
    a.add_many(rng.normal(size=10))
    assert [x.tolist() for x in centroids(b)] == b_centroids
    merged = Sketch.merge_all([a, b])
    assert merged.weight == 11_010 and a.weight == 8_010 and b.weight == 3_000


def test_merge_all_is_deterministic_for_the_same_order() -> None:
    rng = np.random.default_rng(4)
    parts = []
    for _ in range(20):
        s = Sketch()
        s.add_many(rng.lognormal(size=300))
        parts.append(s)
    one = [x.tolist() for x in centroids(Sketch.merge_all(parts))]
    two = [x.tolist() for x in centroids(Sketch.merge_all(parts))]
    assert one == two


def test_incompatible_bounds_and_bad_queries() -> None:
    a, b = Sketch(200), Sketch(100)
    a.add(1.0)
    b.add(2.0)
    with pytest.raises(ValueError):
        a.merge(b)
    with pytest.raises(ValueError):
        Sketch.merge_all([a, b])
    with pytest.raises(ValueError):
        Sketch(1)
    for q in (-0.01, 1.01):
        with pytest.raises(ValueError):
            a.quantiles([q])


def _good():
    means = np.array([1.0, 2.0, 3.0])
    weights = np.array([1.0, 2.0, 1.0])
    return dict(max_centroids=200, means=means, weights=weights, count=4, total=8.0, lo=1.0, hi=3.0)


BAD_CENTROIDS = {
    "max_centroids < 2": {"max_centroids": 1},
    "lengths differ": {"weights": np.array([1.0, 3.0])},
    "too many centroids": {"max_centroids": 2, "means": np.arange(1.0, 8.0), "weights": np.ones(7) * 4 / 7, "hi": 7.0},
    "empty with count": {"means": np.array([]), "weights": np.array([])},
    "NaN mean": {"means": np.array([1.0, math.nan, 3.0])},
    "inf mean": {"means": np.array([1.0, 2.0, math.inf])},
    "NaN weight": {"weights": np.array([1.0, math.nan, 1.0])},
    "inf weight": {"weights": np.array([1.0, math.inf, 1.0])},
    "zero weight": {"weights": np.array([1.0, 0.0, 3.0])},
    "negative weight": {"weights": np.array([2.0, -1.0, 3.0])},
    "means descending": {"means": np.array([1.0, 3.0, 2.0])},
    "weights do not sum to count": {"count": 5},
    "mean below min": {"lo": 1.5},
    "mean above max": {"hi": 2.5},
}


def test_good_centroids_are_accepted() -> None:
    assert from_centroids(**_good()).weight == 4.0


@pytest.mark.parametrize("name", list(BAD_CENTROIDS))
def test_bad_centroids_raise_value_error(name: str) -> None:
    kwargs = _good() | BAD_CENTROIDS[name]
    with pytest.raises(ValueError):
        from_centroids(**kwargs)


# ------------------------------------------------------------------ the wire's small sketches, without numpy
def _wire(digest: TDigest) -> tuple[bytes, bytes, dict]:
    d = digest.to_dict()
    means = np.array([c["m"] for c in d["centroids"]], dtype="<f8")
    weights = np.array([c["c"] for c in d["centroids"]], dtype="<f8")
    return means.tobytes(), weights.tobytes(), d


def test_from_wire_rebuilds_small_and_large_digests_byte_for_byte():
    rng = np.random.default_rng(1)
    for n in (1, 2, 8, 31, 32, 33, 200, 5000):
        digest = TDigest.from_values(rng.lognormal(0, 1, n), max_centroids=200)
        means, weights, d = _wire(digest)
        sketch = from_wire(200, means, weights, d["n_values"], d["sum"], d["min"], d["max"])
        assert sketch._get().to_bytes() == digest.to_bytes(), n


BAD_WIRE = {
    "odd bytes": {"means": b"\0" * 7},
    "lengths differ": {"weights": np.array([1.0, 3.0]).tobytes()},
    "NaN weight": {"weights": np.array([1.0, np.nan, 1.0]).tobytes()},
    "inf weight": {"weights": np.array([1.0, np.inf, 1.0]).tobytes()},
    "zero weight": {"weights": np.array([1.0, 0.0, 3.0]).tobytes()},
    "means descending": {"means": np.array([1.0, 3.0, 2.0]).tobytes()},
    "NaN mean": {"means": np.array([1.0, np.nan, 3.0]).tobytes()},
    "mean below min": {"lo": 1.5},
    "weights do not sum to count": {"count": 5},
    "max_centroids < 2": {"max_centroids": 1},
    "too many centroids": {"max_centroids": 2, "means": np.arange(1.0, 8.0).tobytes(),
                           "weights": (np.ones(7) * 4 / 7).tobytes(), "hi": 7.0},
    "empty with count": {"means": b"", "weights": b""},
}


def test_from_wire_refuses_what_from_centroids_refuses():
    good = {"max_centroids": 100, "means": np.array([1.0, 2.0, 3.0]).tobytes(),
            "weights": np.array([1.0, 2.0, 1.0]).tobytes(), "count": 4, "total": 8.0, "lo": 1.0, "hi": 3.0}
    assert from_wire(**good).weight == 4.0
    for name, change in BAD_WIRE.items():
        with pytest.raises(ValueError):
            from_wire(**(good | change))
            raise AssertionError(name)
