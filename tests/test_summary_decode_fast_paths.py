"""The decoder's fast paths (issue 29; docs/scale.md, "Fewer instructions in the rack's decode") give the verdicts the
Python decoder (tests/summary_oracle.py) gives, on the inputs each path takes a shortcut on:

- two-byte varints (sources 128-16,383, tags of fields 16-19, lengths of 128 bytes and more) read without the loop,
  cut at every byte of a packed list, so that a varint's second byte may lie past its sub-message's end;
- the sketch's weights checked in one pass (positive and finite, whole numbers, their sum): each way to break them,
  alone and together with means out of order, refused with the oracle's words (the first failed check's);
- the decode's reused scratch reset field by field: a summary decoded after one that carried every field reads as
  when decoded alone;
- a unit's windows decoded in place (read_unit): a window refused late in its decode is left to the per-window path
  (which refuses it), and its neighbours read as `Summary.from_bytes` reads them;
- the fields read in the encoder's order first (one compare of each tag's bytes), the general loop from the first tag
  out of it: every way out of that order, at every place, in the summary and in its sketch.
"""

from __future__ import annotations

import math
import re
import struct

import numpy as np
import pytest

from native_fuzz import varint
from summary_oracle import OracleSummary
from telemetry import Summary
from telemetry.summary.summary import read_unit
from telemetry.v1 import forward_pb2, summary_pb2


def outcome(cls, data: bytes) -> tuple[str, bytes | str]:
    """('ok', canonical bytes) or ('refused', the error's words); a message that is not well-formed protobuf is
    refused in upb's words by the oracle and in the native reader's by the native path: only the verdict is kept."""
    try:
        return "ok", cls.from_bytes(data).to_bytes()
    except (ValueError, OverflowError) as e:
        return "refused", "not protobuf" if "not a telemetry.v1.Summary message" in str(e) else str(e)


def assert_same(data: bytes) -> None:
    """The same verdict: the same canonical bytes, or both refused."""
    got, want = outcome(Summary, data), outcome(OracleSummary, data)
    assert got[0] == want[0] and (got[0] == "refused" or got == want), (data.hex(), got, want)


def wide(first_source: int = 120, ranks: int = 40, k: int = 8) -> bytes:
    """A valid summary whose sources straddle 128 (one- and two-byte varints in its packed source lists)."""
    rng = np.random.default_rng(first_source)
    sources = np.arange(first_source, first_source + ranks, dtype=np.int64)
    return OracleSummary.from_arrays(rng.normal(0, 1, ranks), sources, time_ns=5, k=k).to_bytes()


def records(data: bytes) -> list[tuple[int, int, bytes, bytes]]:
    """The top-level records of a message: (field, wire type, the record's bytes, a LEN record's payload)."""
    out, at = [], 0
    while at < len(data):
        start = at
        tag, at = _read_varint(data, at)
        field, kind = tag >> 3, tag & 7
        payload = b""
        if kind == 0:
            _, at = _read_varint(data, at)
        elif kind == 1:
            at += 8
        elif kind == 2:
            n, at = _read_varint(data, at)
            payload, at = data[at:at + n], at + n
        else:
            raise AssertionError(f"unexpected wire type {kind}")
        out.append((field, kind, data[start:at], payload))
    return out


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, at


@pytest.mark.parametrize("field", [11, 13])  # top_sources, bottom_sources
@pytest.mark.parametrize("then", ["the next record", "a continuation byte"])
def test_packed_sources_cut_at_every_byte(field: int, then: str) -> None:
    """The list's length shortened byte by byte (the message stays well formed around it): a cut inside a two-byte
    varint must be refused as upb refuses it, and by the varint read, though the byte after the list (a tag < 0x80)
    would read as a varint's second byte."""
    data = wide()
    recs = records(data)
    at = next(i for i, r in enumerate(recs) if r[0] == field)
    payload = recs[at][3]
    assert any(b >= 0x80 for b in payload)  # two-byte varints in it
    for cut in range(len(payload) + 1):
        head = varint(field << 3 | 2) + varint(cut) + payload[:cut]
        rest = b"".join(r[2] for r in recs[at + 1:])
        before = b"".join(r[2] for r in recs[:at])
        data_cut = before + head + rest if then == "the next record" else \
            before + rest + head + varint(9 << 3) + b"\x08"  # the cut list last, then k (8, as it is) again: a tag
        assert_same(data_cut)
        # (k's tag byte 0x48, like the next record's, reads as a varint's second byte if the list's end is not kept)
        if cut and payload[cut - 1] >= 0x80:  # cut inside a varint: refused by the varint read itself, not by the
            assert outcome(Summary, data_cut) == ("refused", "not protobuf"), cut  # lists' counts (never equal here)


def test_two_byte_varints_everywhere_agree() -> None:
    """Sources 0-16,383 (one, two and three bytes), lengths over 127 bytes (k = 20 lists, 300 centroids) and the
    two-byte tags of fields 16-19, each summary cut at every byte."""
    for first, ranks, k in [(0, 200, 20), (16_300, 100, 8), (127, 2, 8)]:
        data = wide(first, ranks, k)
        assert outcome(Summary, data)[0] == "ok"
        for cut in range(len(data)):
            assert_same(data[:cut])


def _doubles(b: bytes) -> list[float]:
    return list(struct.unpack(f"<{len(b) // 8}d", b))


def _packed(v: list[float]) -> bytes:
    return struct.pack(f"<{len(v)}d", *v)


def _with_sketch(data: bytes, means: list[float], weights: list[float]) -> bytes:
    msg = summary_pb2.Summary.FromString(data)
    msg.sketch.means = _packed(means)
    msg.sketch.weights = _packed(weights)
    return msg.SerializeToString()


def _sketch(data: bytes) -> tuple[list[float], list[float]]:
    sketch = summary_pb2.Summary.FromString(data).sketch
    return _doubles(sketch.means), _doubles(sketch.weights)


def _small() -> tuple[bytes, list[float], list[float]]:
    """A valid summary of four values (1, 2, 3, 4) and its centroids."""
    s = OracleSummary(k=2)
    s.add_many([1.0, 2.0, 3.0, 4.0], 1, time_ns=3)
    data = s.to_bytes()
    return (data, *_sketch(data))


def words(outcome_: tuple[str, bytes | str]) -> tuple[str, bytes | str]:
    """An outcome with the numbers in its words left out (the two decoders print floats differently)."""
    kind, what = outcome_
    return kind, re.sub(r"-?(\d[\d.e+-]*|inf|nan)", "#", what) if isinstance(what, str) else what


WEIGHTS = {  # name: (means, weights) or a function of the summary's
    "valid": lambda m, w: (m, w),
    "a zero weight": lambda m, w: (m, [0.0, *w[1:-1], w[-1] + w[0]]),
    "a negative weight": lambda m, w: (m, [-1.0, *w[1:-1], w[-1] + 2.0]),
    "a NaN weight": lambda m, w: (m, [math.nan, *w[1:]]),
    "an infinite weight": lambda m, w: (m, [*w[:-1], math.inf]),
    "fractional weights of the right sum": lambda m, w: (m, [w[0] - 0.5, *w[1:-1], w[-1] + 0.5]),
    "fractional weights of a wrong sum": lambda m, w: (m, [w[0] + 0.25, *w[1:]]),
    "weights of 2**53 and more": lambda m, w: (m, [2.0**53, *w[1:]]),
    "weights whose sum overflows": lambda m, w: (m, [1.7e308, *w[1:-1], 1.7e308]),
    "a zero weight and means out of order": lambda m, w: (m[::-1], [0.0, *w[1:-1], w[-1] + w[0]]),
    "a NaN weight and means out of order": lambda m, w: (m[::-1], [math.nan, *w[1:]]),
    "means out of order alone": lambda m, w: (m[::-1], w),
    "a NaN mean": lambda m, w: ([math.nan, *m[1:]], w),
    "a mean beyond max and a fractional weight": lambda m, w: ([*m[:-1], 9.0], [w[0] - 0.5, *w[1:-1], w[-1] + 0.5]),
}


@pytest.mark.parametrize("name", list(WEIGHTS))
def test_sketch_checks_refuse_with_the_oracles_words(name: str) -> None:
    data, means, weights = _small()
    assert len(means) == 4
    m, w = WEIGHTS[name](means, weights)
    damaged = _with_sketch(data, m, w)
    if name == "weights whose sum overflows":  # the oracle let fsum's OverflowError out: the verdict only
        assert_same(damaged)
    else:
        assert words(outcome(Summary, damaged)) == words(outcome(OracleSummary, damaged)), damaged.hex()
    assert (outcome(Summary, damaged)[0] == "ok") == (name in ("valid", "fractional weights of the right sum"))


def _rich() -> bytes:
    """Every field set: moments, top/bottom, sketch, sources, non-finite count and sources, times."""
    s = OracleSummary(k=3)
    s.add_many([1.0, 2.0, math.nan, 7.0], 200, time_ns=10)
    s.add_many([-4.0, math.inf], 3, time_ns=90)
    return s.to_bytes()


def _from(values: list[float], source: int, k: int = 3, max_centroids: int | None = None) -> bytes:
    s = OracleSummary(k=k) if max_centroids is None else OracleSummary(k=k, max_centroids=max_centroids)
    s.add_many(values, source, time_ns=4)
    return s.to_bytes()


SECOND = {  # each leaves on the wire, at its default, a field the rich summary sets (the reset must clear it)
    "empty": lambda: OracleSummary(k=3).to_bytes(),
    "one value": lambda: _from([2.5], 9),
    "unknown field only": lambda: OracleSummary(k=3).to_bytes() + varint(30 << 3) + b"\x05",
    "refused": lambda: b"\x08\x01",
    "source 0 (argmin, argmax omitted)": lambda: _from([1.0, 5.0], 0),
    "k 0 (omitted)": lambda: _from([1.0, 5.0], 4, k=0),
    "another max_centroids": lambda: _from([1.0, 5.0, 3.0], 6, max_centroids=20),
}


@pytest.mark.parametrize("second", list(SECOND))
def test_a_decode_after_a_rich_one_reads_as_alone(second: str) -> None:
    """The scratch the decodes share is reset field by field: nothing of the summary decoded before shows (the
    seconds leave each of the rich one's fields at its default, which the wire omits)."""
    after = SECOND[second]()
    rich = _rich()
    alone = outcome(Summary, after)
    for _ in range(3):
        assert outcome(Summary, rich) == outcome(OracleSummary, rich)
        assert outcome(Summary, after) == alone == outcome(OracleSummary, after)


def _unit(summaries: list[bytes]) -> bytes:
    return forward_pb2.SummaryBatch(windows=[
        forward_pb2.WindowSummary(key=summary_pb2.WindowKey(job="job", metric=f"m{i}", step=1),
                                  summary=summary_pb2.Summary.FromString(s), expected=1 << 20)
        for i, s in enumerate(summaries)]).SerializeToString()


LATE = {  # a summary refused only by the decode's last checks (its lists and sketch already read)
    "sketch weights": lambda d: _with_sketch(d, *_late_weights(d)),
    "sketch means": lambda d: _with_sketch(d, *_late_means(d)),
}


def _late_weights(d: bytes) -> tuple[list[float], list[float]]:
    means, weights = _sketch(d)
    return means, [w + 1.0 for w in weights]


def _late_means(d: bytes) -> tuple[list[float], list[float]]:
    means, weights = _sketch(d)
    return means[::-1], weights


@pytest.mark.parametrize("where", [0, 1, 2])
@pytest.mark.parametrize("how", list(LATE))
def test_a_window_refused_late_in_its_decode_leaves_its_neighbours_whole(where: int, how: str) -> None:
    good = [wide(8 * i, 8) for i in range(3)]
    bad = LATE[how](good[where])
    assert outcome(Summary, bad)[0] == "refused"
    parts = [*good[:where], bad, *good[where + 1:]]
    read, _, _ = read_unit(_unit(parts), 2**53, 2**63, 1 << 20, k=8)
    for i, (data, window) in enumerate(zip(parts, read, strict=True)):
        if i == where:
            assert window is None  # left to the per-window path, which refuses it
        else:
            assert window is not None
            assert window[6].to_bytes() == Summary.from_bytes(data).to_bytes()


def test_fixture_bytes_are_what_the_tests_assume() -> None:
    """The packed lists of `wide()` hold two-byte varints; `_small()`'s sketch has one centroid per value."""
    data = wide()
    top = next(r for r in records(data) if r[0] == 11)[3]
    assert [b for b in top if b >= 0x80]
    assert _small()[1:] == ([1.0, 2.0, 3.0, 4.0], [1.0, 1.0, 1.0, 1.0])


# The decoder reads the fields in the encoder's order first (one compare of a tag's bytes each; core.cpp's parse) and
# reads on with its general loop from the first tag out of that order. Each way out of the order, at every place in
# the message and in the sketch's sub-message, must read as the oracle (upb) reads it: fields moved, repeated (a
# scalar's last wins, a packed list's parts join, the sketch's parts merge), written unpacked, an unknown field between
# any two, a tag in a longer encoding, a field absent.

def _tag(field: int, kind: int, pad: bool = False) -> bytes:
    """A tag; `pad`: one byte longer than it need be (a varint's last byte 0x00 after a continuation)."""
    t = varint(field << 3 | kind)
    return t[:-1] + bytes([t[-1] | 0x80, 0x00]) if pad else t


def _rebuilt(recs: list[tuple[int, int, bytes, bytes]]) -> bytes:
    return b"".join(r[2] for r in recs)


def _sketch_variants(data: bytes) -> list[bytes]:
    """The summary with its sketch's sub-message rewritten each way out of the encoder's order."""
    recs = records(data)
    at = next((i for i, r in enumerate(recs) if r[0] == 14), None)
    if at is None:
        return []
    inner = records(recs[at][3])
    out = []

    def put(body: bytes) -> None:
        out.append(_rebuilt(recs[:at]) + _tag(14, 2) + varint(len(body)) + body + _rebuilt(recs[at + 1:]))

    put(_rebuilt(inner[::-1]))
    for i in range(len(inner) + 1):
        put(_rebuilt(inner[:i]) + _tag(7, 0) + b"\x01" + _rebuilt(inner[i:]))  # an unknown field
    for i, r in enumerate(inner):
        put(_rebuilt(inner[:i]) + _tag(r[0], r[1], pad=True) + r[2][len(_tag(r[0], r[1])):] + _rebuilt(inner[i + 1:]))
        put(_rebuilt(inner) + r[2])  # repeated, last
        put(_rebuilt(inner[:i] + inner[i + 1:]))  # absent
    first, second = _rebuilt(inner[:1]), _rebuilt(inner[1:])
    out.append(_rebuilt(recs[:at]) + _tag(14, 2) + varint(len(first)) + first + _tag(14, 2) + varint(len(second)) +
               second + _rebuilt(recs[at + 1:]))  # the sketch in two parts, which upb merges
    return out


def _variants(data: bytes) -> list[bytes]:
    """The summary rewritten each way out of the encoder's order, at every place."""
    recs = records(data)
    out = [_rebuilt(recs[::-1])]
    for i in range(len(recs) + 1):
        out.append(_rebuilt(recs[:i]) + _tag(30, 0) + b"\x07" + _rebuilt(recs[i:]))  # an unknown field
        out.append(_rebuilt(recs[:i]) + _tag(31, 2) + b"\x00" + _rebuilt(recs[i:]))
        for field in (32, 34):  # two-byte tags whose first byte is field 16's and 18's (0x80, 0x90)
            out.append(_rebuilt(recs[:i]) + _tag(field, 0) + b"\x03" + _rebuilt(recs[i:]))
        out.append(_rebuilt(recs[:i]) + _tag(33, 2) + b"\x01\x00" + _rebuilt(recs[i:]))  # field 17's (0x8a)
    for i, r in enumerate(recs):
        field, kind = r[0], r[1]
        head = _tag(field, kind)
        rest = _rebuilt(recs[:i]), _rebuilt(recs[i + 1:])
        out.append(rest[0] + _tag(field, kind, pad=True) + r[2][len(head):] + rest[1])  # a longer tag
        out.append(rest[0] + rest[1])  # absent
        out.append(_rebuilt(recs) + r[2])  # repeated at the end
        out.append(rest[0] + r[2] + r[2] + rest[1])  # repeated at once
        if i + 1 < len(recs):
            swapped = recs[:i] + [recs[i + 1], recs[i]] + recs[i + 2:]
            out.append(_rebuilt(swapped))  # two neighbours out of order
        if field in (10, 12) and len(r[3]) >= 16:  # a packed double list in two parts, or its first unpacked
            out.append(rest[0] + head + varint(8) + r[3][:8] + head + varint(len(r[3]) - 8) + r[3][8:] + rest[1])
            out.append(rest[0] + _tag(field, 1) + r[3][:8] + head + varint(len(r[3]) - 8) + r[3][8:] + rest[1])
        if field in (11, 13) and r[3]:  # a packed source list with its first source unpacked
            first, after = _read_varint(r[3], 0)
            out.append(rest[0] + _tag(field, 0) + varint(first) + head + varint(len(r[3]) - after) + r[3][after:] +
                       rest[1])
    return out + _sketch_variants(data)


def _summaries() -> list[bytes]:
    return [wide(), wide(0, 3, 2), _rich(), _small()[0], _from([2.5], 9), OracleSummary(k=3).to_bytes(),
            _from([1.0, 5.0], 0), _from([1.0, 5.0], 4, k=0)]


@pytest.mark.parametrize("which", range(8))
def test_fields_out_of_the_encoders_order_read_as_the_oracle_reads_them(which: int) -> None:
    data = _summaries()[which]
    assert outcome(Summary, data) == outcome(OracleSummary, data)
    variants = _variants(data)
    assert len(variants) > 3 * len(records(data))
    for v in variants:
        assert words(outcome(Summary, v)) == words(outcome(OracleSummary, v)), v.hex()


def test_the_order_variants_include_accepted_ones() -> None:
    """The variants are not all refused: moved, padded-tag, unknown-field and split-list ones decode (and must equal
    the canonical bytes the oracle gives)."""
    data = wide()
    accepted = [v for v in _variants(data) if outcome(Summary, v)[0] == "ok"]
    assert len(accepted) > 40
    assert all(outcome(Summary, v) == outcome(OracleSummary, v) for v in accepted)
