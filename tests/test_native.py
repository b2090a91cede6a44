"""The native summary path (telemetry/summary/_native) against the Python implementation it replaced.

The oracle is tests/summary_oracle.py: the Python Summary as it was before issue 29. Same inputs to both, and:
- decode: the same verdict (refused, or accepted) on arbitrary messages, wire-level variants (unknown fields,
  unpacked or repeated fields, groups, wrong wire types), every truncation and bit flip of valid summaries, and
  random bytes; accepted ones re-encode to the same bytes, byte for byte;
- encode, merge_all and merge (fold): the same bytes after ingest, merges of many children and folds past
  the sketch's fold batch. The t-digest centroids come out bit for bit as fastdigest's (the oracle merges with
  fastdigest itself).
The rest of the Summary suite (tests/test_summary*.py, tests/test_sketch.py) runs against the native path: it
is the only one `telemetry.Summary` has.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from native_fuzz import varint
from summary_oracle import OracleSummary
from telemetry import Summary
from telemetry.summary import _native
from telemetry.summary.summary import OverlapError
from telemetry.v1 import summary_pb2
from test_summary_wire import arbitrary_messages

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAN = math.nan


def verdict(cls, data: bytes) -> bytes | None:
    """The canonical bytes of what `cls` parses from data, or None when it refuses them."""
    try:
        parsed = cls.from_bytes(data)
    except (ValueError, OverflowError):
        return None
    return parsed.to_bytes()


def assert_same_verdict(data: bytes) -> None:
    want = verdict(OracleSummary, data)
    got = verdict(Summary, data)
    assert got == want, (data.hex(), want is None, got is None)


def pair(cls, groups, k: int = 3):
    out = cls(k=k)
    for source, values in groups:
        out.add_many(values, source, time_ns=1000 + source)
    return out


def shapes() -> list[tuple[str, list]]:
    rng = np.random.default_rng(7)
    return [
        ("empty", []),
        ("nan only", [(4, [NAN])]),
        ("one value", [(0, [2.5])]),
        ("mixed", [(1, list(np.arange(1.0, 9.0))), (2, [50.0, NAN]), (3, [0.5]), (9, [-math.inf, 1.0])]),
        ("wide", [(s, list(rng.lognormal(0, 1, 40))) for s in range(0, 300, 3)]),
    ]


# ----------------------------------------------------------------------------- decode

@SETTINGS
@given(msg=arbitrary_messages())
def test_decode_agrees_on_arbitrary_messages(msg) -> None:
    assert_same_verdict(msg.SerializeToString())


@pytest.mark.parametrize("name,groups", shapes(), ids=[n for n, _ in shapes()])
def test_decode_agrees_on_every_truncation_and_bit_flip(name, groups) -> None:
    data = pair(OracleSummary, groups).to_bytes()
    assert pair(Summary, groups).to_bytes() == data
    step = max(1, len(data) // 400)  # the wide shape: every 1 in `step` positions (each still flips all 8 bits)
    for cut in range(0, len(data), step):
        assert_same_verdict(data[:cut])
    for i in range(0, len(data), step):
        for bit in range(8):
            damaged = bytearray(data)
            damaged[i] ^= 1 << bit
            assert_same_verdict(bytes(damaged))


@SETTINGS
@given(data=st.binary(max_size=200))
def test_decode_agrees_on_random_bytes(data: bytes) -> None:
    assert_same_verdict(data)


@st.composite
def wire_records(draw_):
    """One raw field: any number (Summary's, Sketch's, unknown), any wire type, a plausible or odd payload."""
    field = draw_(st.one_of(st.integers(1, 20), st.integers(21, 2**29 - 1)))
    kind = draw_(st.sampled_from(["varint", "fixed64", "len", "fixed32", "group", "badtype"]))
    if kind == "varint":
        return varint(field << 3) + varint(draw_(st.integers(0, 2**64 - 1)))
    if kind == "fixed64":
        return varint(field << 3 | 1) + struct.pack("<d", draw_(st.floats()))
    if kind == "fixed32":
        return varint(field << 3 | 5) + draw_(st.binary(min_size=4, max_size=4))
    if kind == "len":
        payload = draw_(st.one_of(st.binary(max_size=40),
                                  st.lists(st.floats(), max_size=4).map(lambda v: struct.pack(f"<{len(v)}d", *v)),
                                  st.lists(st.integers(0, 2**35), max_size=4).map(
                                      lambda v: b"".join(varint(x) for x in v))))
        return varint(field << 3 | 2) + varint(len(payload)) + payload
    if kind == "group":
        inner = varint(5 << 3) + varint(draw_(st.integers(0, 300)))
        end = field if draw_(st.booleans()) else field + 1
        return varint(field << 3 | 3) + inner + varint(end << 3 | 4)
    return varint(field << 3 | draw_(st.sampled_from([4, 6, 7])))


@SETTINGS
@given(base=st.sampled_from([n for n, _ in shapes()][:4]), records=st.lists(wire_records(), max_size=4),
       where=st.integers(0, 3), repeat_sketch=st.booleans())
def test_decode_agrees_on_wire_level_variants(base, records, where, repeat_sketch) -> None:
    """Unknown fields, known fields with other wire types, repeated scalars, groups, invalid tags."""
    data = pair(OracleSummary, dict(shapes())[base]).to_bytes()
    extra = b"".join(records)
    if repeat_sketch:  # a second Sketch sub-message merges into the first (its fields override)
        extra += summary_pb2.Summary(sketch=summary_pb2.Sketch(max_centroids=200)).SerializeToString()
    assert_same_verdict(extra + data if where == 0 else data + extra)


def test_unpacked_repeated_fields_are_read_as_packed_ones() -> None:
    s = pair(OracleSummary, dict(shapes())["mixed"])
    msg = s.to_proto()
    data = msg.SerializeToString()
    # top_values (10) and top_sources (11) again, unpacked, one element each: protobuf appends them
    extra = b"".join(varint(10 << 3 | 1) + struct.pack("<d", v) for v in msg.top_values)
    extra += b"".join(varint(11 << 3) + varint(x) for x in msg.top_sources)
    assert_same_verdict(data + extra)


# ----------------------------------------------------------------------------- encode and merge

value_lists = st.lists(st.one_of(st.floats(-1e6, 1e6), st.sampled_from([0.0, -0.0, 1.0, NAN, math.inf])),
                       min_size=1, max_size=12)


@st.composite
def disjoint(draw_, min_groups=1, max_groups=8):
    ids = draw_(st.lists(st.integers(0, 2**32 - 1), min_size=min_groups, max_size=max_groups * 3, unique=True))
    n = draw_(st.integers(min_groups, max(min_groups, min(max_groups, len(ids)))))
    groups = []
    for g in range(n):
        mine = ids[g::n]
        groups.append([(source, draw_(value_lists)) for source in mine])
    return groups


@SETTINGS
@given(groups=disjoint(), k=st.sampled_from([0, 1, 3, 8]), rt=st.booleans())
def test_encode_and_merge_all_give_the_oracles_bytes(groups, k, rt) -> None:
    ours = [pair(Summary, g, k) for g in groups]
    theirs = [pair(OracleSummary, g, k) for g in groups]
    assert [s.to_bytes() for s in ours] == [s.to_bytes() for s in theirs]
    if rt:
        ours = [Summary.from_bytes(s.to_bytes()) for s in ours]
        theirs = [OracleSummary.from_bytes(s.to_bytes()) for s in theirs]
    assert Summary.merge_all(ours).to_bytes() == OracleSummary.merge_all(theirs).to_bytes()


@SETTINGS
@given(groups=disjoint(min_groups=2), rt=st.booleans(), data=st.data())
def test_fold_merges_give_the_oracles_bytes(groups, rt, data) -> None:
    order = data.draw(st.permutations(range(len(groups))))
    ours, theirs = Summary(3), OracleSummary(3)
    for i in order:
        a, b = pair(Summary, groups[i]), pair(OracleSummary, groups[i])
        if rt:
            a, b = Summary.from_bytes(a.to_bytes()), OracleSummary.from_bytes(b.to_bytes())
        ours.merge(a)
        theirs.merge(b)
    assert ours.to_bytes() == theirs.to_bytes()
    assert ours.quantiles([0.1, 0.5, 0.9]) == theirs.quantiles([0.1, 0.5, 0.9]) or ours.count == 0


def test_many_children_and_long_folds_are_fastdigest_bit_for_bit() -> None:
    """1,000 children of 64 lognormal values: merge_all at once, and folded one by one (past the fold batch of
    256), then a second tier; every byte, sketch centroids included, as the oracle (fastdigest) gives them."""
    rng = np.random.default_rng(11)
    values = rng.lognormal(0.0, 1.0, (1000, 64))
    ours = [Summary.from_arrays(v, np.full(64, i), time_ns=5) for i, v in enumerate(values)]
    theirs = [OracleSummary.from_arrays(v, np.full(64, i), time_ns=5) for i, v in enumerate(values)]
    assert Summary.merge_all(ours).to_bytes() == OracleSummary.merge_all(theirs).to_bytes()
    fold_ours, fold_theirs = Summary(), OracleSummary()
    for a, b in zip(ours, theirs):
        fold_ours.merge(Summary.from_bytes(a.to_bytes()))
        fold_theirs.merge(OracleSummary.from_bytes(b.to_bytes()))
    assert fold_ours.to_bytes() == fold_theirs.to_bytes()
    tier = [Summary.merge_all(ours[i:i + 100]) for i in range(0, 1000, 100)]
    tier_theirs = [OracleSummary.merge_all(theirs[i:i + 100]) for i in range(0, 1000, 100)]
    root = Summary.merge_all([Summary.from_bytes(t.to_bytes()) for t in tier])
    root_theirs = OracleSummary.merge_all([OracleSummary.from_bytes(t.to_bytes()) for t in tier_theirs])
    assert root.to_bytes() == root_theirs.to_bytes()
    assert root.quantiles([0.5, 0.99]) == root_theirs.quantiles([0.5, 0.99])


@pytest.mark.parametrize("children", [2, 3, 7, 32, 33])
@pytest.mark.parametrize("distinct", [4, 1000])
def test_merges_of_merged_children_with_tied_centroids_are_fastdigest_bit_for_bit(children: int, distinct: int) -> None:
    """The root's merge: children that are merges themselves (up to max_centroids centroids each, runs of every
    length in the pairwise merge), centroid means tied within and across children (values drawn from `distinct`
    numbers: the merge's tie rule decides their order, and so the sums), an empty child among them; every byte as
    the oracle (fastdigest) gives it."""
    rng = np.random.default_rng([13, children, distinct])
    ours, theirs = [], []
    for child in range(children):
        agents = 1 + int(rng.integers(0, 12))
        values = rng.integers(0, distinct, (agents, 64)) * 0.25
        first = child * 100
        leaves = [(Summary.from_arrays(v, np.full(64, first + a), time_ns=5),
                   OracleSummary.from_arrays(v, np.full(64, first + a), time_ns=5)) for a, v in enumerate(values)]
        ours.append(Summary.from_bytes(Summary.merge_all([mine for mine, _ in leaves]).to_bytes()))
        theirs.append(OracleSummary.from_bytes(OracleSummary.merge_all([other for _, other in leaves]).to_bytes()))
    ours.append(Summary())
    theirs.append(OracleSummary())
    assert Summary.merge_all(ours).to_bytes() == OracleSummary.merge_all(theirs).to_bytes()


def test_overlap_and_incompatibility_are_refused_natively() -> None:
    a, b = pair(Summary, [(3, [1.0]), (7, [2.0])]), pair(Summary, [(3, [5.0]), (7, [NAN]), (8, [1.0])])
    with pytest.raises(OverlapError) as info:
        Summary.merge_all([a, b])
    assert info.value.sources == [3, 7]
    before = a.to_bytes()
    with pytest.raises(OverlapError):
        a.merge(b)
    assert a.to_bytes() == before
    with pytest.raises(ValueError, match="k=3 and k=8"):
        Summary.merge_all([a, Summary(8)])
    assert isinstance(_native.merge_all([a._as_core(), b._as_core()]), list)


@SETTINGS
@given(groups=disjoint(min_groups=2, max_groups=5), rt=st.booleans())
def test_merge_over_time_gives_the_oracles_bytes(groups, rt) -> None:
    """Windows over time share sources (collectors/root/retention.py): merged in the order given, no overlap check,
    as the Python fold (`_absorb` with the union) did."""
    ours = [pair(Summary, groups[0] + g) for g in groups]  # every window repeats the first window's sources
    theirs = [pair(OracleSummary, groups[0] + g) for g in groups]
    if rt:
        ours = [Summary.from_bytes(s.to_bytes()) for s in ours]
        theirs = [OracleSummary.from_bytes(s.to_bytes()) for s in theirs]
    merged = OracleSummary(3)
    merged._absorb(theirs, BitMap.union(*(s.sources for s in theirs)))
    assert Summary.merge_over_time(ours).to_bytes() == merged.to_bytes()


def test_copy_and_pickle_keep_the_bytes() -> None:
    import copy
    import pickle

    s = pair(Summary, dict(shapes())["mixed"])
    for other in (s.copy(), copy.copy(s), copy.deepcopy(s), pickle.loads(pickle.dumps(s))):
        assert other.to_bytes() == s.to_bytes() and other is not s
    c = s.copy()
    c.add(7.0, 99, time_ns=5)  # the copy is independent
    assert c.to_bytes() != s.to_bytes() and Summary.from_bytes(s.to_bytes()).to_bytes() == s.to_bytes()


@SETTINGS
@given(groups=disjoint(min_groups=2, max_groups=3), query=st.booleans())
def test_ingest_after_parse_or_merge_gives_the_oracles_bytes(groups, query) -> None:
    """A parsed or merged summary that then ingests (its Python fields materialised from the native core, the
    fastdigest digest rebuilt from it) ends where the Python implementation ends."""
    ours = Summary.merge_all([Summary.from_bytes(pair(Summary, g).to_bytes()) for g in groups[:-1]])
    theirs = OracleSummary.merge_all([OracleSummary.from_bytes(pair(OracleSummary, g).to_bytes()) for g in groups[:-1]])
    if query:
        assert ours.quantiles([0.5]) == theirs.quantiles([0.5]) or ours.count == 0
    for source, values in groups[-1]:
        ours.add_many(values, source, time_ns=7)
        theirs.add_many(values, source, time_ns=7)
        ours.add(values[0], source, time_ns=8)
        theirs.add(values[0], source, time_ns=8)
    assert ours.to_bytes() == theirs.to_bytes()
