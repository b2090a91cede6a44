"""The mergeable summary of one metric over one window (DESIGN §3).

Guarantees, whatever the merge order or tree shape:
- exact: count, min/argmin, max/argmax, top-k and bottom-k (value, source)
  pairs, the sources bitmap, the non-finite count and sources. Ties are broken
  by the lowest source id, so these come out identical in every order.
- sum to float rounding (partial sums are combined with `math.fsum`);
  mean and stddev by the Chan et al. parallel update, which does not cancel
  catastrophically the way sum-of-squares does.
- quantiles within the error stated in `telemetry.summary.sketch`.
- NaN and +-Inf are counted and their sources recorded; they never reach the
  sketch, min/max, top/bottom or the moments. So are finite values beyond
  +-1e100 (`MAX_MAGNITUDE`): larger ones could overflow a sum or a merge
  (no training metric is that large unless it diverged).

A source contributes to a window once: merging two summaries whose sources
intersect raises `OverlapError` naming the overlap, and changes nothing.
`merge` never mutates its argument. `merge_all` merges in a fixed order (by
lowest source id) so the same inputs always give the same bytes.

Where the work is done: the agent's ingest (`from_arrays`), decoding, merging and encoding are native
(`telemetry.summary._native`, C++: telemetry/summary/native/): such a summary holds a `Core` and materialises
Python fields only when a query or a further `add`/`add_many` reads them. `add` and `add_many` (the SDK-side and
test-side ingest of one source at a time) hold their fields in Python (values arrive through numpy and
fastdigest) until the summary is merged or encoded. The t-digest merge there is fastdigest's
algorithm, centroid for centroid; the bitmaps are CRoaring's, as pyroaring's.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Iterable, Sequence
from itertools import repeat
from typing import Any, cast

import numpy as np
from pyroaring import BitMap

from telemetry.summary import _native
from telemetry.summary.sketch import DEFAULT_MAX_CENTROIDS, Sketch
from telemetry.v1 import summary_pb2

DEFAULT_K = 8
_decode = _native.decode
_build = _native.build
_from_arrays = _native.from_arrays
_read_unit = _native.read_unit
MAX_SOURCE = 2**32 - 1
# Finite values beyond +-MAX_MAGNITUDE count as non-finite, and summaries whose min or max lie beyond it are refused
# (telemetry/summary/native/core.hpp): then no sum, squared deviation or merge of up to 2**64 values overflows.
MAX_MAGNITUDE = 1e100


class OverlapError(ValueError):
    """Two summaries of one window share sources: merging them would count a source twice."""

    def __init__(self, sources: Iterable[int]) -> None:
        self.sources: list[int] = sorted(sources)
        shown = ", ".join(map(str, self.sources[:16])) + (" ..." if len(self.sources) > 16 else "")
        super().__init__(f"sources already present in this window: {shown} ({len(self.sources)} overlapping)")


# The Python-side fields: set by ingest, or materialised from the native core on first read (`__getattr__`).
_FIELDS = (
    "k", "_count", "_sum", "_mean", "_m2", "_min", "_argmin", "_max", "_argmax",
    "_top", "_bottom", "_sketch", "_sources", "_nonfinite_count", "_nonfinite_sources",
    "_first_ns", "_last_ns",
)


class Summary:
    """count/sum/moments/min/max/top-k/bottom-k/t-digest/sources of one metric over one window."""

    __slots__ = (*_FIELDS, "_core")

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
        self._core: _native.Core | None = None

    # ------------------------------------------------------------ native state
    @classmethod
    def _wrap(cls, core: _native.Core) -> Summary:
        out = cls.__new__(cls)
        out._core = core
        return out

    def __getattr__(self, name: str) -> Any:
        """A field not materialised yet: read it from the native core (bitmaps and k alone, the rest together)."""
        if name == "_core" or name not in _FIELDS:
            raise AttributeError(name)
        core = self._core
        if core is None:
            raise AttributeError(name)
        if name == "k":
            self.k = core.k
        elif name == "_sources":
            self._sources = BitMap.deserialize(core.sources_bytes())
        else:
            self._materialise(core)
        return object.__getattribute__(self, name)

    def _materialise(self, core: _native.Core) -> None:
        (self.k, self._count, self._sum, self._mean, self._m2, self._min, self._argmin, self._max, self._argmax,
         self._top, self._bottom, sources, self._nonfinite_count, nonfinite, self._first_ns,
         self._last_ns) = core.fields()
        self._sources = BitMap.deserialize(sources)
        self._nonfinite_sources = BitMap.deserialize(nonfinite)
        self._sketch = Sketch.from_digest_bytes(core.max_centroids, core.digest_bytes())

    def _forget_fields(self) -> None:
        """The core changed (native ingest): the fields materialised from it before are stale; read them again."""
        for name in _FIELDS:
            try:
                object.__delattr__(self, name)
            except AttributeError:
                pass

    def _own(self) -> None:
        """Before ingest changes Python fields: materialise them, and let the (now stale) core go."""
        core = self._core
        if core is not None:
            if not _has(self, "_sketch"):  # fields not materialised yet (else they equal the core's)
                self._materialise(core)
            self._core = None

    def _as_core(self) -> _native.Core:
        """The native form of this summary (built once from the Python fields after ingest)."""
        core = self._core
        if core is None:
            nonfinite = self._nonfinite_count
            sketch = self._sketch
            core = self._core = _build(
                self.k, self._count, self._sum, self._mean, self._m2, self._min, self._argmin, self._max,
                self._argmax, self._top, self._bottom, self._sources.serialize(), nonfinite,
                self._nonfinite_sources.serialize() if nonfinite else None, self._first_ns, self._last_ns,
                sketch.max_centroids, sketch.digest_bytes())
        return core

    # ------------------------------------------------------------------ ingest
    def add(self, value: float, source: int, time_ns: int | None = None) -> None:
        """Record one value from one source."""
        _check_source(source)
        self._own()
        value = float(value)
        self._sources.add(source)
        self._touch(time.time_ns() if time_ns is None else time_ns)
        if not abs(value) <= MAX_MAGNITUDE:  # NaN, +-Inf, or too large to sum safely
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
        """Record many values from one source (the fast path: in native code, on the summary's core)."""
        _check_source(source)
        array = np.ascontiguousarray(values, dtype=np.float64).ravel()
        if array.size == 0:
            return
        stamp = time.time_ns() if time_ns is None else time_ns
        if self._as_core().add_many(array, source, stamp):
            self._forget_fields()
            return
        # The one case the core leaves to Python: top/bottom ties between -0.0 and 0.0 (np.partition's order)
        self._own()
        self._sources.add(source)
        self._touch(stamp)
        finite_mask = np.abs(array) <= MAX_MAGNITUDE  # NaN fails it too
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
            # tolist(): Python floats in one C call, no numpy scalar per kept value
            self._top = _keep_top(self._top, list(zip(top.tolist(), repeat(source))), self.k)
            self._bottom = _keep_bottom(self._bottom, list(zip(bottom.tolist(), repeat(source))), self.k)
        self._sketch.add_many(finite)

    @classmethod
    def from_arrays(cls, values: np.ndarray, sources: np.ndarray, time_ns: int | None = None,
                    k: int = DEFAULT_K, max_centroids: int = DEFAULT_MAX_CENTROIDS,
                    first_time_ns: int | None = None) -> Summary:
        """A summary of values[i] from sources[i], built natively in one pass (the agent's hot path: one call per
        metric and window, no Python object per value or per field; the core goes on to merge and encode as is).

        time_ns is the latest time of the values (default: now); first_time_ns the earliest (default: time_ns).
        """
        if k < 0:
            raise ValueError(f"k must be >= 0, got {k}")
        values = np.asarray(values, dtype=np.float64).ravel()
        sources = np.asarray(sources, dtype=np.int64).ravel()
        stamp = time.time_ns() if time_ns is None else time_ns
        first = stamp if first_time_ns is None else min(first_time_ns, stamp)
        return cls._wrap(_from_arrays(values, sources, first, stamp, k, max_centroids))

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
    def merge(self, other: Summary) -> None:
        """Fold `other` into self; `other` is never mutated. Raises OverlapError, changing nothing."""
        if not isinstance(other, Summary):
            raise TypeError(f"cannot merge Summary with {type(other).__name__}")
        core = self._as_core()
        overlap = core.absorb(other._as_core())
        if overlap is not None:
            raise OverlapError(overlap)
        self._forget_fields()

    @classmethod
    def merge_all(cls, summaries: Sequence[Summary]) -> Summary:
        """A new summary of all inputs (none mutated), merged in order of lowest source id."""
        if not summaries:
            return cls()
        try:
            cores = [s._as_core() for s in summaries]  # a tier's window merges 64 children: one pass
        except AttributeError:
            wrong = next((s for s in summaries if not isinstance(s, Summary)), None)
            if wrong is None:
                raise
            raise TypeError(f"cannot merge Summary with {type(wrong).__name__}") from None
        merged = _native.merge_all(cores)
        if isinstance(merged, list):
            raise OverlapError(merged)
        return cls._wrap(merged)

    @classmethod
    def merge_over_time(cls, summaries: Sequence[Summary]) -> Summary:
        """A new summary of several windows of one metric over time, merged in the order given (the caller's
        time order). A source may recur across windows (a merge over ranks refuses that: `merge_all`); its
        values then count once per window, and the sources bitmap is the union."""
        if not summaries:
            return cls()
        return cls._wrap(_native.merge_over_time([s._as_core() for s in summaries]))

    def copy(self) -> Summary:
        """An independent summary with identical fields (and identical bytes)."""
        return Summary._wrap(self._as_core().clone())

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
        core = self._core
        return core.max_centroids if core is not None else self._sketch.max_centroids

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
        return summary_pb2.Summary.FromString(self.to_bytes())

    def to_bytes(self) -> bytes:
        """The canonical bytes: contiguous sources as run containers, fields in number order (native encoder)."""
        return self._as_core().encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> Summary:
        """Parse bytes from `to_bytes`; raises ValueError ("malformed summary: ...") on anything malformed.

        Every check is made natively before anything is kept: wire syntax as protobuf's own parser, bitmaps as
        pyroaring's, then the summary's invariants (ordered top/bottom among the sources, moments possible for
        [min, max], sketch ascending, positive, within [min, max] and weighing `count`).
        """
        if type(data) is not bytes and not isinstance(data, (bytearray, memoryview)):
            raise TypeError(f"expected bytes, got {type(data).__name__}")
        out = object.__new__(cls)  # every parsed child of a collector comes through here: no further calls
        out._core = _decode(data)
        return out

    @classmethod
    def from_proto(cls, msg: summary_pb2.Summary) -> Summary:
        """Build from the wire message; raises ValueError on anything inconsistent."""
        return cls.from_bytes(msg.SerializeToString())

    def __eq__(self, other: object) -> bool:
        """Same fields, same sketch centroids (used by tests; summaries are not hashable)."""
        if not isinstance(other, Summary):
            return NotImplemented
        return self.to_bytes() == other.to_bytes()

    __hash__ = None  # type: ignore[assignment]  # unhashable on purpose: equal by content, and mutable

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        """Pickled as its wire bytes (the native core itself does not pickle)."""
        return (Summary.from_bytes, (self.to_bytes(),))


UnitWindow = tuple[str, int, str, int, int, int, Summary, int, bool]
"""A window read by `read_unit`: (job, attempt, metric, index, width_ms, expected, summary, sources group, late)."""


def read_unit(data: bytes, max_index: int, max_attempt: int, max_world: int, k: int = DEFAULT_K,
              max_centroids: int = DEFAULT_MAX_CENTROIDS) -> tuple[list[UnitWindow | None], list[bytes], bytes]:
    """A tier's intake of a whole unit (the bytes of a telemetry.v1.SummaryBatch) in one native call: per
    WindowSummary, its key's fields, its expected world size and its summary (decoded with every check of
    `from_bytes`), and the index of its sources' group; per group, the sources as portable bytes (the windows of one
    child's unit mostly share them: one bitmap per group, not per window); and the message's other fields' bytes (a
    SummaryBatch without its windows, for protobuf to parse).

    A window is None unless it is plain and valid: a job name [A-Za-z0-9_.:-]{1,128}, an ASCII metric, a step or a
    bucket of width > 0, index <= max_index, attempt < max_attempt, expected <= max_world, a summary that decodes,
    of shape (k, max_centroids), each field once, `late` 0 or 1 (a late delta is read as any window, its flag the
    tuple's last field, which the caller carries into its Part). The caller judges a None window with its own
    per-window checks, so a bad window is refused in the same words as without this path. ValueError if the message
    itself is not well formed.
    """
    unit = read_native_unit(data, max_index, max_attempt, max_world, k, max_centroids)
    return unit_windows(unit), unit.groups(), unit.rest()


def read_native_unit(data: bytes, max_index: int, max_attempt: int, max_world: int, k: int = DEFAULT_K,
                     max_centroids: int = DEFAULT_MAX_CENTROIDS) -> _native.Unit:
    """`read_unit`, its windows left in native form (`_native.Unit`): a collector's table takes their cores as they
    are (collectors/delivery/windows.py), with no Python object per window; `unit_windows` makes them what
    `read_unit` returns. ValueError if the message itself is not well formed."""
    return _read_unit(data, k, max_centroids, max_index, max_attempt, max_world)


def unit_windows(unit: _native.Unit) -> list[UnitWindow | None]:
    """A native unit's windows as `read_unit` returns them (taking their cores: once per unit)."""
    return cast("list[UnitWindow | None]", unit.windows(Summary))


def _has(summary: Summary, name: str) -> bool:
    """Whether a field is set, without materialising it."""
    try:
        object.__getattribute__(summary, name)
    except AttributeError:
        return False
    return True


def _check_source(source: int) -> None:
    if not isinstance(source, (int, np.integer)) or isinstance(source, bool) or not 0 <= source <= MAX_SOURCE:
        raise ValueError(f"source must be an integer in [0, 2**32), got {source!r}")


def _desc_key(pair: tuple[float, int]) -> tuple[float, int]:
    return (-pair[0], pair[1])


def _keep_top(current: list[tuple[float, int]], new: list[tuple[float, int]], k: int) -> list[tuple[float, int]]:
    return heapq.nsmallest(k, current + new, key=_desc_key)


def _keep_bottom(current: list[tuple[float, int]], new: list[tuple[float, int]], k: int) -> list[tuple[float, int]]:
    return heapq.nsmallest(k, current + new)
