"""A tier merges a window's children natively (issue 29 item 2): no Python fields per child.

A collector parses each child's summary (`Summary.from_proto`, as CollectorService._parse does), reads only its
sources, k and max_centroids to check and place it (`Part`), and merges a window's parts (`merge_parts`, as
WindowTable's windows do when sealed) into the summary it forwards (`to_proto`). Each child stays a native core
behind a thin `Summary`: its count, moments, top-k, sketch and the rest are never turned into Python objects, and
neither is the merged result on its way up. The merged bytes are the Python implementation's
(tests/summary_oracle.py).
"""

from __future__ import annotations

import numpy as np

from collectors.common.keys import Key
from collectors.delivery.windows import Part, merge_parts
from summary_oracle import OracleSummary
from telemetry import Summary
from telemetry.summary.summary import _FIELDS, _has
from telemetry.v1 import summary_pb2

PYTHON_ONLY = [f for f in _FIELDS if f not in ("k", "_sources")]  # what a collector never needs per child


def test_a_window_of_children_is_merged_without_python_fields() -> None:
    rng = np.random.default_rng(5)
    key = Key("job", "loss", 7, 0)
    children, oracle = [], []
    for child in range(64):  # a rack's 64 agents, 8 ranks each
        values, sources = rng.lognormal(0, 1, 8 * 4), np.repeat(np.arange(child * 8, child * 8 + 8), 4)
        msg = summary_pb2.Summary.FromString(Summary.from_arrays(values, sources, time_ns=9).to_bytes())
        children.append(Summary.from_proto(msg))
        oracle.append(OracleSummary.from_proto(msg))
    parts = []
    for i, s in enumerate(children):
        assert (s.k, s.max_centroids) == (8, 200) and s._sources.max() < 512  # CollectorService._parse's reads
        parts.append(Part(key, [("child", i)], s._sources, index=i, built=s))
    merged = merge_parts(parts)
    up = merged.to_proto()  # Upstream's unit for the parent
    assert up.SerializeToString() == OracleSummary.merge_all(oracle).to_bytes()
    for s in [*children, merged]:
        assert not [f for f in PYTHON_ONLY if _has(s, f)], "a child or the merge materialised Python fields"
    assert merged.count == 64 * 32 and _has(merged, "_count")  # a query materialises them (the root's finaliser)
