"""The rows the root's store writes per window (`store._records`) against the figures as they were computed before
the commit's cheap forms (`_oracle_record`, kept here as the oracle): byte for byte the same records over the shapes
a window comes in (complete; missing a few ranks, more than MISSING_LISTED, or every one; sources beyond the expected
world; no expected world; non-finite values; nothing finite; ties in the top; late rewrites)."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.root import store
from telemetry.summary import Summary


def _num(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _oracle_record(row: Row) -> tuple:
    """store._records' row before it took cheap forms: every figure computed as the API's per-step fields were."""
    summary, expected = row.summary, row.expected
    sources = summary.sources
    missing = BitMap()
    if expected:
        missing.add_range(0, expected)
        missing -= sources
    listed = list(itertools.islice(missing, store.MISSING_LISTED))
    p50, p90, p99, p999 = summary.quantiles(store.QUANTILES)
    return (row.key.job, row.key.metric, row.key.index, row.key.width_ms, row.expected, summary.count, len(sources),
            json.dumps(listed), _num(summary.mean), _num(summary.stddev), _num(summary.min), summary.argmin,
            _num(summary.max), summary.argmax, json.dumps([[v, s] for v, s in summary.top()]), _num(p50), _num(p90),
            _num(p99), _num(p999), summary.nonfinite_count, json.dumps(list(summary.nonfinite_sources)), row.late,
            summary.last_time_ns, row.finalised_ns, summary.to_bytes())


def _summary(rng: np.random.Generator, sources: list[int], nonfinite: int = 0, ties: bool = False) -> Summary:
    values = rng.lognormal(0.0, 1.0, len(sources))
    if ties:
        values[:] = np.round(values)
    values[:nonfinite] = [math.nan, math.inf, -math.inf][:nonfinite]
    return Summary.from_arrays(values, np.array(sources, dtype=np.int64), time_ns=7)


CASES = {
    "complete": (list(range(512)), 512, {}),
    "complete, of 32 children merged": (None, 16384, {}),
    "a few missing": ([r for r in range(512) if r % 97], 512, {}),
    "more missing than listed": (list(range(0, 6000, 3)), 6000, {}),
    "none of the world": ([], 64, {}),
    "sources beyond the world": (list(range(10, 700)), 512, {}),
    "as many sources as the world, some beyond it": (list(range(1, 513)), 512, {}),
    "no expected world": (list(range(100)), 0, {}),
    "non-finite values": (list(range(300)), 300, {"nonfinite": 3}),
    "nothing finite": (list(range(3)), 3, {"nonfinite": 3}),
    "ties in the top": (list(range(200)), 256, {"ties": True}),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("late", [0, 2])
def test_records_are_the_figures_as_computed_before(case: str, late: int) -> None:
    rng = np.random.default_rng(abs(hash((case, late))) % 2**32)
    sources, expected, options = CASES[case]
    if sources is None:
        summary = Summary.merge_all([_summary(rng, list(range(c * 512, (c + 1) * 512))) for c in range(32)])
    elif not sources:
        summary = Summary()
    else:
        summary = _summary(rng, sources, **options)
    rows = [Row(Key("job", "metric", 3), expected, summary, late, 11),
            Row(Key("job", "metric", 1_000, 1_000), expected, Summary.from_bytes(summary.to_bytes()), late, 12)]
    assert store._records(rows) == [_oracle_record(row) for row in rows]
