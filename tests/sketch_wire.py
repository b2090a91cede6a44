"""A Sketch from the wire's centroid arrays, in Python: what the Python decoder did before the native core (issue 29).

Kept for the tests alone: the oracle (tests/summary_oracle.py) decodes with it, and tests/test_sketch.py pins with
it the one assumption the package makes about fastdigest (its binary layout, which the native core writes for
`Sketch.from_digest_bytes`). fastdigest has no public constructor from centroid arrays except `from_dict`, so
these write its binary layout directly.
"""

from __future__ import annotations

import math
import struct
import sys
from collections.abc import Sequence

import numpy as np
from fastdigest import TDigest

from telemetry.summary.sketch import Sketch

MAX_CENTROIDS_BOUND = 100_000  # refuse absurd bounds from the wire (memory)

# fastdigest 0.12 binary layout: magic, u32 version, u64 n_centroids,
# u64 max_centroids, f64 mass, f64 sum, f64 min, f64 max, u64 n_values,
# 12 reserved bytes, then (f64 mean, f64 weight) per centroid.
_MAGIC = b"FASTDIG~"
_HEADER = struct.Struct("<8sIQQddddQ12x")
_VERSION = 1
_SMALL = 32  # sketches of at most this many centroids are parsed without numpy
_NATIVE_LE = sys.byteorder == "little"  # memoryview.cast reads native order; the wire is little-endian


def centroids(sketch: Sketch) -> tuple[np.ndarray, np.ndarray]:
    """(means ascending, weights) of a sketch as float64 arrays."""
    data = sketch.digest_bytes()
    if data is None:
        empty = np.empty(0, dtype=np.float64)
        return empty, empty
    raw = np.frombuffer(data, dtype="<f8", offset=_HEADER.size).reshape(-1, 2)
    return raw[:, 0], raw[:, 1]


def from_wire(max_centroids: int, means: bytes, weights: bytes, count: int, total: float, lo: float,
              hi: float) -> Sketch:
    """Rebuild from the wire's little-endian float64 arrays; raises ValueError on anything malformed.

    Small sketches (a node's few values) are read and checked as Python lists, where numpy's per-call cost would
    dominate; large ones go through `from_centroids`.
    """
    for data, name in ((means, "sketch.means"), (weights, "sketch.weights")):
        if len(data) % 8:
            raise ValueError(f"{name} holds {len(data)} bytes, not a whole number of float64s")
    if len(means) <= 8 * _SMALL and len(weights) <= 8 * _SMALL and _NATIVE_LE:
        if not 2 <= max_centroids <= MAX_CENTROIDS_BOUND:
            raise ValueError(f"sketch max_centroids must be in [2, {MAX_CENTROIDS_BOUND}], got {max_centroids}")
        if len(weights) != len(means):
            raise ValueError(f"sketch has {len(means) // 8} means but {len(weights) // 8} weights")
        if not means:
            if count:
                raise ValueError(f"sketch is empty but the summary counts {count} values")
            return Sketch(max_centroids)
        return _from_lists(max_centroids, memoryview(means).cast("d").tolist(),
                           memoryview(weights).cast("d").tolist(), count, total, lo, hi)
    return from_centroids(max_centroids, np.frombuffer(means, dtype="<f8"), np.frombuffer(weights, dtype="<f8"),
                          count, total, lo, hi)


def _from_lists(max_centroids: int, m: Sequence[float], w: Sequence[float], count: int, total: float,
                lo: float, hi: float) -> Sketch:
    """from_centroids' checks and layout on a few centroids as lists (n >= 1, lengths and bound checked)."""
    n = len(m)
    if n > 2 * max_centroids + 2:
        raise ValueError(f"sketch has {n} centroids, more than its bound {max_centroids} allows")
    # NaN fails every comparison; +-Inf fails the [lo, hi] bound or the mass check.
    if not all(x > 0 for x in w):
        raise ValueError("sketch weights must be positive and finite")
    if n > 1 and not all(a <= b for a, b in zip(m, m[1:])):
        raise ValueError("sketch means must be ascending")
    slack = 1e-9 * max(1.0, abs(lo), abs(hi))
    if not (lo - slack <= m[0] and m[-1] <= hi + slack):
        raise ValueError("sketch means lie outside the summary's [min, max]")
    mass = math.fsum(w)  # weights are counts: whole numbers, summed exactly in any order
    if not abs(mass - count) <= 1e-6 * max(1.0, count):
        raise ValueError(f"sketch weights sum to {mass} but the summary counts {count} values")
    body = [0.0] * (2 * n)
    body[0::2], body[1::2] = m, w
    return Sketch(max_centroids, TDigest.from_bytes(
        _HEADER.pack(_MAGIC, _VERSION, n, max_centroids, mass, total, lo, hi, count)
        + struct.pack(f"<{2 * n}d", *body)))


def from_centroids(max_centroids: int, means: np.ndarray, weights: np.ndarray, count: int,
                   total: float, lo: float, hi: float) -> Sketch:
    """Rebuild from the wire form; raises ValueError on anything malformed.

    count/total/lo/hi are the summary's exact count, sum, min and max, which
    fastdigest keeps beside its centroids (they bound its extreme quantiles).
    """
    if not 2 <= max_centroids <= MAX_CENTROIDS_BOUND:
        raise ValueError(f"sketch max_centroids must be in [2, {MAX_CENTROIDS_BOUND}], got {max_centroids}")
    n = means.shape[0]
    if weights.shape[0] != n:
        raise ValueError(f"sketch has {n} means but {weights.shape[0]} weights")
    if n > 2 * max_centroids + 2:
        raise ValueError(f"sketch has {n} centroids, more than its bound {max_centroids} allows")
    if n == 0:
        if count:
            raise ValueError(f"sketch is empty but the summary counts {count} values")
        return Sketch(max_centroids)
    if n <= _SMALL:
        return _from_lists(max_centroids, means.tolist(), weights.tolist(), count, total, lo, hi)
    # NaN fails every comparison below; +-Inf fails the [lo, hi] bound (or the mass check).
    slack = 1e-9 * max(1.0, abs(lo), abs(hi))  # a centroid's mean is a rounded weighted average
    if not weights.min() > 0:
        raise ValueError("sketch weights must be positive and finite")
    if n > 1 and not (means[1:] >= means[:-1]).all():
        raise ValueError("sketch means must be ascending")
    if not (lo - slack <= means[0] and means[-1] <= hi + slack):
        raise ValueError("sketch means lie outside the summary's [min, max]")
    mass = float(weights.sum())
    if not abs(mass - count) <= 1e-6 * max(1.0, count):
        raise ValueError(f"sketch weights sum to {mass} but the summary counts {count} values")
    header = _HEADER.pack(_MAGIC, _VERSION, n, max_centroids, mass, total, lo, hi, count)
    body = np.empty((n, 2), dtype="<f8")
    body[:, 0] = means
    body[:, 1] = weights
    return Sketch(max_centroids, TDigest.from_bytes(header + body.tobytes()))
