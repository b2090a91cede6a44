"""The `top` column's JSON written natively (`_native.pairs_json`, collectors/root/store.py `_pairs_json`) against
json.dumps, the text the store wrote before: the same string for every finite double (Python's repr: the shortest
digits that read back, positional or d.ddde+XX by where the decimal point falls), any source, and None for a value
json.dumps would write as NaN or Infinity (the store then writes json.dumps' text)."""

from __future__ import annotations

import json
import math
import random
import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.root import store
from telemetry.summary import _native

# Where repr switches between its positional and exponent forms (decimal point at -4 and 16), and the extremes.
EDGES = [0.0, -0.0, 1.0, -1.0, 0.1, 1e-4, 1e-5, 9.999999999999999e-05, 0.00012345, 1e15, 1e16, 1e17,
         1234567890123456.0, 12345678901234567.0, 9007199254740993.0, 123.0, 5e-324, 2.2250738585072014e-308,
         1.7976931348623157e308, -1.7976931348623157e308, 26.85449912051427, 1 / 3, 2 / 3, 100.0, 1e22, 1e-7,
         -2.5e-07, 3.14159e100, 1e-100]


def _same(pairs: list[tuple[float, int]]) -> None:
    assert _native.pairs_json(pairs) == json.dumps(pairs)


def test_edges_each_and_together() -> None:
    for value in EDGES:
        _same([(value, 3)])
        _same([(-value, 0)])
    _same([(value, source) for source, value in enumerate(EDGES)])


def test_random_bit_patterns() -> None:
    rng = random.Random(29)
    for _ in range(200_000):
        value = struct.unpack("<d", struct.pack("<Q", rng.getrandbits(64)))[0]
        if math.isfinite(value):
            _same([(value, rng.getrandbits(32))])


@settings(max_examples=2_000, deadline=None)
@given(st.lists(st.tuples(st.floats(allow_nan=False, allow_infinity=False), st.integers(0, 2**32 - 1)),
                max_size=16))
def test_any_finite_pairs(pairs: list[tuple[float, int]]) -> None:
    _same(pairs)


def test_non_finite_is_left_to_json() -> None:
    for bad in (math.nan, math.inf, -math.inf):
        assert _native.pairs_json([(1.0, 1), (bad, 2)]) is None
        assert store._pairs_json([(1.0, 1), (bad, 2)]) == json.dumps([(1.0, 1), (bad, 2)])


def test_store_text() -> None:
    assert store._pairs_json([]) == "[]"
    assert store._pairs_json([(2.5, 7), (1e-05, 3)]) == "[[2.5, 7], [1e-05, 3]]"
