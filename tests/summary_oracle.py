"""The Python Summary as it was before issue 29 (telemetry/summary/summary.py at 1a32472), kept as the oracle.

tests/test_native.py feeds the same inputs to this and to the native path (decode, encode, merge_all, merge)
and requires the same verdicts and the same bytes. Not imported by the package: only tests use it.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Sequence

import numpy as np
from google.protobuf.message import DecodeError
from pyroaring import BitMap

from sketch_wire import centroids, from_wire
from telemetry.summary.sketch import DEFAULT_MAX_CENTROIDS, Sketch
from telemetry.v1 import summary_pb2

DEFAULT_K = 8
MAX_SOURCE = 2**32 - 1
MAX_MAGNITUDE = 1e100  # as telemetry.summary.summary: the one rule added to the oracle since issue 29


class OverlapError(ValueError):
    """Two summaries of one window share sources: merging them would count a source twice."""

    def __init__(self, sources: Iterable[int]) -> None:
        self.sources: list[int] = sorted(sources)
        shown = ", ".join(map(str, self.sources[:16])) + (" ..." if len(self.sources) > 16 else "")
        super().__init__(f"sources already present in this window: {shown} ({len(self.sources)} overlapping)")


class OracleSummary:
    """count/sum/moments/min/max/top-k/bottom-k/t-digest/sources of one metric over one window."""

    __slots__ = (
        "k", "_count", "_sum", "_mean", "_m2", "_min", "_argmin", "_max", "_argmax",
        "_top", "_bottom", "_sketch", "_sources", "_nonfinite_count", "_nonfinite_sources",
        "_first_ns", "_last_ns",
    )

    def __init__(self, k: int = DEFAULT_K, max_centroids: int = DEFAULT_MAX_CENTROIDS) -> None:
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        self.k = k
        self._count = 0
        self._sum = 0.0
        self._mean = 0.0
        self._m2 = 0.0
        self._min = math.inf
        self._argmin = 0
        self._max = -math.inf
        self._argmax = 0
        self._top: list[tuple[float, int]] = []      # value desc, source asc
        self._bottom: list[tuple[float, int]] = []   # value asc, source asc
        self._sketch = Sketch(max_centroids)
        self._sources = BitMap()
        self._nonfinite_count = 0
        self._nonfinite_sources = BitMap()
        self._first_ns = 0
        self._last_ns = 0

    # ------------------------------------------------------------------ ingest
    def add(self, value: float, source: int, time_ns: int | None = None) -> None:
        """Record one value from one source."""
        _check_source(source)
        value = float(value)
        self._sources.add(source)
        self._touch(time.time_ns() if time_ns is None else time_ns)
        if not abs(value) <= MAX_MAGNITUDE:  # NaN, +-Inf, or too large to sum safely (issue 29)
            self._nonfinite_count += 1
            self._nonfinite_sources.add(source)
            return
        self._count += 1
        self._sum += value
        delta = value - self._mean
        self._mean += delta / self._count
        self._m2 = max(0.0, self._m2 + delta * (value - self._mean))
        if value < self._min or (value == self._min and source < self._argmin):
            self._min, self._argmin = value, source
        if value > self._max or (value == self._max and source < self._argmax):
            self._max, self._argmax = value, source
        if self.k:
            self._top = _keep_top(self._top, [(value, source)], self.k)
            self._bottom = _keep_bottom(self._bottom, [(value, source)], self.k)
        self._sketch.add(value)

    def add_many(self, values: np.ndarray | Sequence[float], source: int, time_ns: int | None = None) -> None:
        """Record many values from one source (the fast path)."""
        _check_source(source)
        array = np.asarray(values, dtype=np.float64).ravel()
        if array.size == 0:
            return
        self._sources.add(source)
        self._touch(time.time_ns() if time_ns is None else time_ns)
        finite_mask = np.abs(array) <= MAX_MAGNITUDE
        finite = array if finite_mask.all() else array[finite_mask]
        bad = array.size - finite.size
        if bad:
            self._nonfinite_count += bad
            self._nonfinite_sources.add(source)
        if finite.size == 0:
            return
        n = finite.size
        mean = float(finite.mean())
        m2 = float(np.square(finite - mean).sum())
        self._combine_moments(n, math.fsum((self._sum, float(finite.sum()))), mean, m2)
        lo_i, hi_i = int(finite.argmin()), int(finite.argmax())
        if finite[lo_i] < self._min or (finite[lo_i] == self._min and source < self._argmin):
            self._min, self._argmin = float(finite[lo_i]), source
        if finite[hi_i] > self._max or (finite[hi_i] == self._max and source < self._argmax):
            self._max, self._argmax = float(finite[hi_i]), source
        if self.k:
            k = min(self.k, n)
            top = np.partition(finite, n - k)[n - k:] if k < n else finite
            bottom = np.partition(finite, k - 1)[:k] if k < n else finite
            self._top = _keep_top(self._top, [(float(v), source) for v in top], self.k)
            self._bottom = _keep_bottom(self._bottom, [(float(v), source) for v in bottom], self.k)
        self._sketch.add_many(finite)

    @classmethod
    def from_arrays(cls, values: np.ndarray, sources: np.ndarray, time_ns: int | None = None,
                    k: int = DEFAULT_K, max_centroids: int = DEFAULT_MAX_CENTROIDS,
                    first_time_ns: int | None = None) -> OracleSummary:
        """A summary of values[i] from sources[i], built in one vectorised pass (the agent's hot path).

        time_ns is the latest time of the values (default: now); first_time_ns the earliest (default: time_ns).
        """
        values = np.asarray(values, dtype=np.float64).ravel()
        sources = np.asarray(sources, dtype=np.int64).ravel()
        if values.shape != sources.shape:
            raise ValueError(f"{values.size} values but {sources.size} sources")
        out = cls(k, max_centroids)
        if values.size == 0:
            return out
        if sources.min() < 0 or sources.max() > MAX_SOURCE:
            raise ValueError("sources must be integers in [0, 2**32)")
        stamp = time.time_ns() if time_ns is None else time_ns
        out._last_ns = stamp
        out._first_ns = stamp if first_time_ns is None else min(first_time_ns, stamp)
        out._sources = BitMap(sources.tolist())
        finite_mask = np.abs(values) <= MAX_MAGNITUDE
        if not finite_mask.all():
            out._nonfinite_count = int(values.size - finite_mask.sum())
            out._nonfinite_sources = BitMap(sources[~finite_mask].tolist())
            values, sources = values[finite_mask], sources[finite_mask]
        n = values.size
        if n == 0:
            return out
        mean = float(values.mean())
        out._count, out._sum, out._mean = n, float(values.sum()), mean
        out._m2 = float(np.square(values - mean).sum())
        descending = np.lexsort((sources, -values))
        ascending = np.lexsort((sources, values))
        hi, lo = descending[0], ascending[0]
        out._max, out._argmax = float(values[hi]), int(sources[hi])
        out._min, out._argmin = float(values[lo]), int(sources[lo])
        if k:
            top, bottom = descending[:k], ascending[:k]
            out._top = list(zip(values[top].tolist(), sources[top].tolist()))
            out._bottom = list(zip(values[bottom].tolist(), sources[bottom].tolist()))
        out._sketch.add_many(values)
        return out

    def _combine_moments(self, n: int, new_sum: float, mean: float, m2: float) -> None:
        total = self._count + n
        delta = mean - self._mean
        self._m2 = max(0.0, self._m2 + m2 + delta * delta * self._count * n / total)
        self._mean = self._mean + delta * n / total
        self._count = total
        self._sum = new_sum

    def _touch(self, time_ns: int) -> None:
        if self._first_ns == 0 or time_ns < self._first_ns:
            self._first_ns = time_ns
        if time_ns > self._last_ns:
            self._last_ns = time_ns

    # ------------------------------------------------------------------- merge
    def merge(self, other: OracleSummary) -> None:
        """Fold `other` into self; `other` is never mutated. Raises OverlapError, changing nothing."""
        self._check_compatible(other)
        overlap = self._sources & other._sources
        if overlap:
            raise OverlapError(overlap)
        self._absorb([other])

    @classmethod
    def merge_all(cls, summaries: Sequence[OracleSummary]) -> OracleSummary:
        """A new summary of all inputs (none mutated), merged in order of lowest source id."""
        if not summaries:
            return cls()
        first = summaries[0]
        for other in summaries[1:]:
            first._check_compatible(other)
        union = BitMap.union(*(s._sources for s in summaries))
        if len(union) != sum(len(s._sources) for s in summaries):
            raise OverlapError(_overlapping(summaries))
        if len(summaries) == 1:
            return first.copy()
        ordered = sorted(summaries, key=_order_key)
        merged = cls(first.k, first._sketch.max_centroids)
        merged._absorb(ordered, union)
        return merged

    def _absorb(self, others: Sequence[OracleSummary], union: BitMap | None = None) -> None:
        """Fold compatible, source-disjoint summaries into self."""
        parts = [self, *others] if self._count or self._nonfinite_count or self._sources else list(others)
        valued = [s for s in parts if s._count]
        total = sum(s._count for s in valued)
        if len(valued) == 1:
            only = valued[0]
            mean, m2, sum_ = only._mean, only._m2, only._sum
        elif total:
            # Chan et al.: combine (count, mean, M2) without the cancellation of sum-of-squares.
            # Plain Python: a merge combines tens of parts, where numpy's per-call cost dominates.
            mean = math.fsum(s._count * s._mean for s in valued) / total
            m2 = math.fsum(s._m2 + s._count * (s._mean - mean) * (s._mean - mean) for s in valued)
            sum_ = math.fsum(s._sum for s in valued)
        else:
            mean, m2, sum_ = 0.0, 0.0, 0.0
        lo, lo_src, hi, hi_src = self._min, self._argmin, self._max, self._argmax
        for s in others:
            if s._count:
                if s._min < lo or (s._min == lo and s._argmin < lo_src):
                    lo, lo_src = s._min, s._argmin
                if s._max > hi or (s._max == hi and s._argmax < hi_src):
                    hi, hi_src = s._max, s._argmax
        if self.k:
            # (-value, source) orders as "value descending, source ascending" with no key function.
            top = heapq.nsmallest(self.k, [(-v, src) for s in parts for v, src in s._top])
            self._top = [(-v, src) for v, src in top]
            self._bottom = heapq.nsmallest(self.k, [p for s in parts for p in s._bottom])
        if parts and parts[0] is self:
            for other in others:  # folds are deferred and compressed together (see Sketch.merge)
                self._sketch.merge(other._sketch)
        else:
            self._sketch = Sketch.merge_all([s._sketch for s in parts], self._sketch.max_centroids)
        self._count = total
        self._sum, self._mean, self._m2 = sum_, mean, m2
        self._min, self._argmin, self._max, self._argmax = lo, lo_src, hi, hi_src
        self._sources = union if union is not None else BitMap.union(self._sources, *(s._sources for s in others))
        self._nonfinite_count += sum(s._nonfinite_count for s in others)
        if any(s._nonfinite_count for s in others):
            self._nonfinite_sources = BitMap.union(self._nonfinite_sources, *(s._nonfinite_sources for s in others))
        firsts = [s._first_ns for s in parts if s._first_ns]
        self._first_ns = min(firsts) if firsts else 0
        self._last_ns = max(s._last_ns for s in parts)

    def _check_compatible(self, other: OracleSummary) -> None:
        if not isinstance(other, OracleSummary):
            raise TypeError(f"cannot merge OracleSummary with {type(other).__name__}")
        if other.k != self.k:
            raise ValueError(f"cannot merge summaries with k={self.k} and k={other.k}")
        if other._sketch.max_centroids != self._sketch.max_centroids:
            raise ValueError(
                f"cannot merge summaries with max_centroids={self._sketch.max_centroids} "
                f"and {other._sketch.max_centroids}")

    def copy(self) -> OracleSummary:
        """An independent summary with identical fields (and identical bytes)."""
        out = OracleSummary.__new__(OracleSummary)
        for name in OracleSummary.__slots__:
            setattr(out, name, getattr(self, name))
        out._top, out._bottom = list(self._top), list(self._bottom)
        out._sketch = self._sketch.copy()
        out._sources, out._nonfinite_sources = BitMap(self._sources), BitMap(self._nonfinite_sources)
        return out

    # ----------------------------------------------------------------- queries
    @property
    def count(self) -> int:
        """Number of finite values."""
        return self._count

    @property
    def sum(self) -> float:
        return self._sum

    @property
    def mean(self) -> float:
        return self._mean if self._count else math.nan

    @property
    def variance(self) -> float:
        """Population variance of the finite values."""
        return self._m2 / self._count if self._count else math.nan

    @property
    def stddev(self) -> float:
        return math.sqrt(max(self.variance, 0.0)) if self._count else math.nan

    @property
    def min(self) -> float:
        return self._min if self._count else math.nan

    @property
    def argmin(self) -> int | None:
        """Source of the smallest value (lowest source id on ties); None when empty."""
        return self._argmin if self._count else None

    @property
    def max(self) -> float:
        return self._max if self._count else math.nan

    @property
    def argmax(self) -> int | None:
        return self._argmax if self._count else None

    def top(self, k: int | None = None) -> list[tuple[float, int]]:
        """The k largest (value, source) pairs, value descending then source ascending (k <= self.k)."""
        return list(self._top[: self._limit(k)])

    def bottom(self, k: int | None = None) -> list[tuple[float, int]]:
        """The k smallest (value, source) pairs, value ascending then source ascending (k <= self.k)."""
        return list(self._bottom[: self._limit(k)])

    def _limit(self, k: int | None) -> int:
        if k is None:
            return self.k
        if not 0 <= k <= self.k:
            raise ValueError(f"this summary keeps {self.k} pairs; asked for {k}")
        return k

    @property
    def sources(self) -> BitMap:
        """Every source that contributed (finite or not): a read-only copy, set-like."""
        return BitMap(self._sources)

    @property
    def nonfinite_count(self) -> int:
        return self._nonfinite_count

    @property
    def nonfinite_sources(self) -> BitMap:
        return BitMap(self._nonfinite_sources)

    @property
    def first_time_ns(self) -> int:
        return self._first_ns

    @property
    def last_time_ns(self) -> int:
        return self._last_ns

    @property
    def max_centroids(self) -> int:
        return self._sketch.max_centroids

    def quantile(self, q: float) -> float:
        """Estimated value at cumulative probability q in [0, 1]; exact min/max at 0 and 1; NaN when empty."""
        return self.quantiles([q])[0]

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        values = self._sketch.quantiles(qs)
        if self._count:
            # The sketch interpolates; clamp to the exact extremes we hold.
            values = [self._min if q == 0.0 else self._max if q == 1.0 else min(max(v, self._min), self._max)
                      for q, v in zip(qs, values)]
        return values

    def cdf(self, x: float) -> float:
        """Estimated fraction of finite values <= x; NaN when empty."""
        if not self._count:
            return math.nan
        if x < self._min:
            return 0.0
        if x >= self._max:
            return 1.0
        return self._sketch.cdf(x)

    def __repr__(self) -> str:
        return (f"Summary(count={self._count}, mean={self.mean:.6g}, min={self.min:.6g}@{self.argmin}, "
                f"max={self.max:.6g}@{self.argmax}, sources={len(self._sources)}, nonfinite={self._nonfinite_count})")

    # --------------------------------------------------------------- wire form
    def to_proto(self) -> summary_pb2.Summary:
        # Contiguous sources travel as run containers: a multi-way union, or sources added one by one,
        # leave array containers (2 bytes per source) until optimised. Same set, so exact fields are unchanged.
        self._sources.run_optimize()
        if self._nonfinite_count:
            self._nonfinite_sources.run_optimize()
        means, weights = centroids(self._sketch)
        msg = summary_pb2.Summary(
            count=self._count, sum=self._sum, mean=self._mean, m2=self._m2, k=self.k,
            first_time_ns=self._first_ns, last_time_ns=self._last_ns,
            sources=self._sources.serialize(), nonfinite_count=self._nonfinite_count,
        )
        if self._count:
            msg.min, msg.argmin, msg.max, msg.argmax = self._min, self._argmin, self._max, self._argmax
            msg.top_values.extend([v for v, _ in self._top])
            msg.top_sources.extend([s for _, s in self._top])
            msg.bottom_values.extend([v for v, _ in self._bottom])
            msg.bottom_sources.extend([s for _, s in self._bottom])
        if self._nonfinite_count:
            msg.nonfinite_sources = self._nonfinite_sources.serialize()
        sketch = msg.sketch
        sketch.max_centroids = self._sketch.max_centroids
        sketch.means = means.astype("<f8", copy=False).tobytes()
        sketch.weights = weights.astype("<f8", copy=False).tobytes()
        return msg

    def to_bytes(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def from_bytes(cls, data: bytes) -> OracleSummary:
        """Parse bytes from `to_bytes`; raises ValueError on anything malformed."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"expected bytes, got {type(data).__name__}")
        try:
            msg = summary_pb2.Summary.FromString(bytes(data))
        except DecodeError as exc:
            raise ValueError(f"malformed summary: not a telemetry.v1.Summary message ({exc})") from None
        return cls.from_proto(msg)

    @classmethod
    def from_proto(cls, msg: summary_pb2.Summary) -> OracleSummary:
        """Build from the wire message; raises ValueError on anything inconsistent."""
        try:
            return cls._from_proto(msg)
        except ValueError as exc:
            raise ValueError(f"malformed summary: {exc}") from None

    @classmethod
    def _from_proto(cls, msg: summary_pb2.Summary) -> OracleSummary:
        out = cls.__new__(cls)
        out.k = msg.k
        count = msg.count
        out._count = count
        out._sum, out._mean, out._m2 = msg.sum, msg.mean, msg.m2
        out._sources = _bitmap(msg.sources, "sources")
        out._nonfinite_count = msg.nonfinite_count
        out._nonfinite_sources = _bitmap(msg.nonfinite_sources, "nonfinite_sources")
        out._first_ns, out._last_ns = msg.first_time_ns, msg.last_time_ns
        if count:
            out._min, out._argmin, out._max, out._argmax = msg.min, msg.argmin, msg.max, msg.argmax
            lo, hi = out._min, out._max
            if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
                raise ValueError(f"min {lo} / max {hi} are not finite and ordered")
            if not (math.isfinite(out._sum) and math.isfinite(out._mean) and math.isfinite(out._m2)):
                raise ValueError("sum, mean and m2 must be finite")
            slack = 1e-9 * max(1.0, abs(lo), abs(hi))
            if not lo - slack <= out._mean <= hi + slack:
                raise ValueError(f"mean {out._mean} lies outside [min, max] = [{lo}, {hi}]")
            span = hi - lo  # float arithmetic: overflows to inf, never raises
            if not -slack * slack <= out._m2 <= span * span * count * (1 + 1e-9) + slack * slack * count:
                raise ValueError(f"m2 {out._m2} is impossible for {count} values in [{lo}, {hi}]")
            if not (abs(lo) <= MAX_MAGNITUDE and abs(hi) <= MAX_MAGNITUDE):
                raise ValueError(f"min {lo} / max {hi} lie beyond +-1e100 (such values count as non-finite)")
            if not abs(out._sum) <= 2 * count * max(abs(lo), abs(hi)):  # twice: rounding never comes near it
                raise ValueError(f"sum {out._sum} is impossible for {count} values in [{lo}, {hi}]")
            if out._argmin not in out._sources or out._argmax not in out._sources:
                raise ValueError("argmin/argmax must be among the sources")
        else:
            out._min, out._argmin, out._max, out._argmax = math.inf, 0, -math.inf, 0
            if msg.top_values or msg.bottom_values:
                raise ValueError("an empty summary cannot have top/bottom values")
            if out._sum != 0.0 or out._mean != 0.0 or out._m2 != 0.0:
                raise ValueError("a summary without finite values must have sum, mean and m2 of 0")
        top = out._top = _pairs(msg.top_values, msg.top_sources, "top")
        bottom = out._bottom = _pairs(msg.bottom_values, msg.bottom_sources, "bottom")
        expected = min(out.k, count)
        if len(top) != expected or len(bottom) != expected:
            raise ValueError(f"top/bottom must hold min(k, count) = {expected} pairs")
        # A collector parses every child's summary: plain comparisons of a few tuples, no per-pair calls.
        if expected > 1:
            descending = [(-v, src) for v, src in top]
            if descending != sorted(descending) or bottom != sorted(bottom):
                raise ValueError("top/bottom pairs are not in order")
        if expected:
            if top[0] != (out._max, out._argmax) or bottom[0] != (out._min, out._argmin):
                raise ValueError("top/bottom disagree with max/min")
            if top[-1][0] < out._min or bottom[-1][0] > out._max:
                raise ValueError("top/bottom values lie outside [min, max]")
            sources = out._sources
            for _, src in top + bottom:
                if src not in sources:
                    raise ValueError("top/bottom sources must be among the sources")
        if len(out._sources) == 0 and (count or out._nonfinite_count):
            raise ValueError("values without sources")
        if (out._nonfinite_count == 0) != (len(out._nonfinite_sources) == 0):
            raise ValueError("nonfinite_count and nonfinite_sources disagree")
        if out._nonfinite_count < len(out._nonfinite_sources):
            raise ValueError("fewer non-finite values than sources that sent them")
        if not out._nonfinite_sources.issubset(out._sources):
            raise ValueError("nonfinite_sources must be among the sources")
        if out._first_ns > out._last_ns:
            raise ValueError("first_time_ns is after last_time_ns")
        sketch = msg.sketch
        out._sketch = from_wire(
            sketch.max_centroids, sketch.means, sketch.weights,
            count, out._sum, out._min, out._max)
        return out

    def __eq__(self, other: object) -> bool:
        """Same fields, same sketch centroids (used by tests; summaries are not hashable)."""
        if not isinstance(other, OracleSummary):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # unhashable on purpose: equal by content, and mutable


def _check_source(source: int) -> None:
    if not isinstance(source, (int, np.integer)) or isinstance(source, bool) or not 0 <= source <= MAX_SOURCE:
        raise ValueError(f"source must be an integer in [0, 2**32), got {source!r}")


def _desc_key(pair: tuple[float, int]) -> tuple[float, int]:
    return (-pair[0], pair[1])


def _keep_top(current: list[tuple[float, int]], new: list[tuple[float, int]], k: int) -> list[tuple[float, int]]:
    return heapq.nsmallest(k, current + new, key=_desc_key)


def _keep_bottom(current: list[tuple[float, int]], new: list[tuple[float, int]], k: int) -> list[tuple[float, int]]:
    return heapq.nsmallest(k, current + new)


def _order_key(summary: OracleSummary) -> tuple[int, int]:
    """Merge order: by lowest source id; empty summaries first."""
    sources = summary._sources
    return (sources.min(), len(sources)) if sources else (-1, 0)


def _overlapping(summaries: Sequence[OracleSummary]) -> BitMap:
    seen, overlap = BitMap(), BitMap()
    for s in summaries:
        overlap |= seen & s._sources
        seen |= s._sources
    return overlap


def _bitmap(data: bytes, name: str) -> BitMap:
    if not data:
        return BitMap()
    try:
        return BitMap.deserialize(data)
    except Exception as exc:  # pyroaring raises ValueError or its own errors on corrupt input
        raise ValueError(f"{name} is not a portable roaring bitmap ({exc})") from None


def _pairs(values: Sequence[float], sources: Sequence[int], name: str) -> list[tuple[float, int]]:
    if len(values) != len(sources):
        raise ValueError(f"{name} has {len(values)} values but {len(sources)} sources")
    if not all(map(math.isfinite, values)):
        raise ValueError(f"{name} values must be finite")
    return list(zip(values, sources))
