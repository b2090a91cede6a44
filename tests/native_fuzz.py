"""The wire fuzz of the native summary decoder, shared by tests/test_native_asan.py and bench/fuzz.py --native.

Cases: valid summaries of several shapes, truncated, bit-flipped, byte-damaged, spliced with raw protobuf
records (unknown fields, groups, wrong wire types, repeated fields), and arbitrary messages. Each goes to
`Summary.from_bytes`; an accepted one must re-encode to bytes that parse back to the same bytes, answer its
queries, and merge with an ordinary summary. Anything but ValueError is a failure.

A quarter of the cases go to the native ingest instead (`ingest`): random lengths, NaN/+-Inf, huge and tiny
values, sources in and out of [0, 2**32), and buffers of the wrong type, shape or layout handed to
`_native.from_arrays` directly; the same invariant. A fifth of the rest go to a tier's native read of a whole unit
(`unit`: `read_unit` of a damaged SummaryBatch of damaged summaries).

Run as a script (what the AddressSanitizer test does), it loads the extension given by --module in place of
the installed one, then runs --cases seeded cases:

    python tests/native_fuzz.py --module build/asan/telemetry/summary/_native....so --cases 3000
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def load_module(path: Path) -> None:
    """Use the extension at `path` as telemetry.summary._native (before telemetry is imported)."""
    spec = importlib.util.spec_from_file_location("telemetry.summary._native", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["telemetry.summary._native"] = module
    spec.loader.exec_module(module)


def seeds() -> list[bytes]:
    """Valid summaries of different shapes (empty, NaN only, one value, mixed, wide and run-container sources)."""
    import numpy as np

    from telemetry import Summary

    rng = np.random.default_rng(3)
    shapes = [[], [(4, [math.nan])], [(0, [2.5])],
              [(1, list(np.arange(1.0, 9.0))), (2, [50.0, math.nan]), (3, [0.5]), (9, [-math.inf, 1.0])],
              [(s, list(rng.lognormal(0, 1, 8))) for s in range(0, 120, 3)],
              [(s, [float(s)]) for s in range(5000)]]
    out = []
    for groups in shapes:
        s = Summary(k=3)
        for source, values in groups:
            s.add_many(values, source, time_ns=100 + source)
        out.append(s.to_bytes())
    # top/bottom lists of 4-64 KiB (k = 300, 1,000 and 4,000 pairs): larger than the chunk a unit's block cuts next
    # (telemetry/summary/native/block.hpp; a k = 300 unit overran the heap before the chunk was sized to the list)
    for k in (300, 1000, 4000):
        wide = Summary(k=k)
        wide.add_many(rng.lognormal(0, 1, k + 7), 0, time_ns=100)
        for source in range(1, k + 7):
            wide.add_many([float(source)], source, time_ns=100 + source)
        out.append(wide.to_bytes())
    return out


def varint(n: int) -> bytes:
    """`n` as a protobuf base-128 varint (also tests/test_native.py's raw records)."""
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)


def mutate(rng: random.Random, base: bytes) -> bytes:
    """One damaged variant of base."""
    data = bytearray(base)
    kind = rng.randrange(6)
    if kind == 0 and data:
        return bytes(data[:rng.randrange(len(data))])
    if kind == 1 and data:
        for _ in range(rng.randint(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        return bytes(data)
    if kind == 2 and data:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if kind == 3:  # a raw record: any field number, any wire type, a random payload
        field = rng.choice([rng.randint(1, 20), rng.randint(1, 2**29 - 1)])
        wire = rng.randrange(8)
        payload = bytes(rng.randrange(256) for _ in range(rng.randrange(24)))
        record = varint(field << 3 | wire) + (varint(len(payload)) if wire == 2 else b"") + payload
        at = rng.randrange(len(data) + 1)
        return bytes(data[:at]) + record + bytes(data[at:])
    if kind == 4:  # a slice of the message moved elsewhere
        if len(data) < 2:
            return bytes(data)
        i, j = sorted(rng.sample(range(len(data)), 2))
        piece = data[i:j]
        del data[i:j]
        at = rng.randrange(len(data) + 1)
        return bytes(data[:at]) + bytes(piece) + bytes(data[at:])
    return bytes(rng.randrange(256) for _ in range(rng.randrange(64)))


def check(data: bytes) -> bool:
    """One case: refused with ValueError, or usable. Returns whether it was accepted."""
    from telemetry import Summary

    try:
        parsed = Summary.from_bytes(data)
    except ValueError:
        return False
    again = parsed.to_bytes()
    assert Summary.from_bytes(again).to_bytes() == again
    parsed.quantiles([0.0, 0.5, 1.0])
    _ = parsed.mean, parsed.top(), parsed.sources
    sources = parsed.sources
    fresh = sources.max() + 1 if sources and sources.max() < 2**32 - 1 else 0
    if fresh not in sources:
        other = Summary(parsed.k, parsed.max_centroids)
        other.add_many([1.0, 2.0], fresh, time_ns=1)
        merged = Summary.merge_all([parsed, other])
        assert Summary.from_bytes(merged.to_bytes()).to_bytes() == merged.to_bytes()
    return True


def ingest(rng: random.Random) -> bool:
    """One native-ingest case: refused with ValueError, or a usable summary (as `check`). Returns whether accepted."""
    import numpy as np

    from telemetry import Summary
    from telemetry.summary import _native

    n = rng.choice([0, 1, 7, 8, 9, 127, 129, rng.randrange(2000)])
    # Every magnitude: values beyond +-1e100 count as non-finite, so no window's sums, nor any merge, overflow.
    pool = [0.0, -0.0, 1.0, math.nan, math.inf, -math.inf, 1e100, -1e100, 1.0000000000000002e100, 1e308, -1e308,
            5e-324]
    values = [rng.choice(pool) if rng.random() < 0.3 else rng.gauss(0.0, 10.0 ** rng.randint(-300, 307))
              for _ in range(n)]
    high = rng.choice([8, 2**16, 2**32])
    sources = [rng.randrange(high) for _ in range(n)]
    if n and rng.random() < 0.1:
        sources[rng.randrange(n)] = rng.choice([-1, 2**32, 2**63 - 1, -(2**63)])
    v, s = np.array(values, dtype=np.float64), np.array(sources, dtype=np.int64)
    kind = rng.randrange(6)
    try:
        if kind == 0:  # the native entry point with buffers of the wrong type, shape or layout
            with np.errstate(over="ignore"):  # float32 cannot hold every value: the point is its wrong type
                narrow = v.astype(np.float32)
            bad_v = rng.choice([narrow, v[::2], np.stack([v, v]), b"\0" * 24, v])
            bad_s = rng.choice([s.astype(np.int32), s[::2], np.stack([s, s]), s])
            core = _native.from_arrays(bad_v, bad_s, 1, 2, rng.randrange(10), rng.choice([1, 2, 200]))
            parsed = Summary.from_bytes(core.encode())
        else:
            cut = rng.randrange(n + 1) if kind == 1 else n  # lengths that disagree
            parsed = Summary.from_arrays(v, s[:cut], time_ns=5, k=rng.choice([0, 1, 8, 1000]),
                                         max_centroids=rng.choice([1, 2, 5, 200]))
    except (ValueError, TypeError, BufferError):
        return False
    return check(parsed.to_bytes())


def _field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def unit(rng: random.Random, bases: list[bytes]) -> bool:
    """One case of a tier's unit read natively (`read_unit`, CollectorService._receive): a SummaryBatch of a few
    windows (keys of steps and buckets, (damaged) summaries, expected sizes) and other fields, then damaged as a
    whole. Refused with ValueError, or every window it takes is usable (as `check`). Returns whether any was taken."""
    from telemetry.summary.summary import read_unit

    windows, plain = [], []  # plain: the same windows with their summaries undamaged (for the table)
    for _ in range(rng.randint(0, 4)):
        key = _field(1, b"job") + _field(2, rng.choice([b"loss", b"m.1", b"\xff"]))
        key += (varint(3 << 3) + varint(rng.choice([0, 7, 2**53, 2**64 - 1])) if rng.random() < 0.7 else
                _field(4, varint(1 << 3) + varint(rng.randrange(2**40)) + varint(2 << 3) + varint(1000)))
        summary = base = rng.choice(bases)
        if rng.random() < 0.5:
            summary = mutate(rng, summary)
        expected = varint(3 << 3) + varint(rng.randrange(9000))
        if rng.random() < 0.3:  # a late delta (1), a late written as no bool is (2), or an explicit 0
            expected += varint(4 << 3) + varint(rng.choice([0, 1, 1, 2]))
        windows.append(_field(3, _field(1, key) + _field(2, summary) + expected))
        plain.append(_field(3, _field(1, key) + _field(2, base) + expected))
    data = _field(1, b"child") + varint(2 << 3) + varint(5) + b"".join(windows) + _field(4, b"\x0a\x03job")
    table(rng, b"".join(plain))
    for _ in range(rng.randint(0, 2)):
        data = mutate(rng, data)
    try:
        read, groups, rest = read_unit(data, 2**53, 2**63, 4096, k=3)
    except ValueError:
        return False
    assert isinstance(rest, bytes) and all(isinstance(group, bytes) for group in groups)
    taken = [found for found in read if found is not None]
    for found in taken:
        assert 0 <= found[7] < len(groups) and isinstance(found[8], bool)
        check(found[6].to_bytes())
    kept = [found[6] for found in taken[::2]]
    del read, taken  # the others go (their lists' block stays while one kept holds it: native/block.hpp)
    for summary in kept:  # merged into: its lists rewritten after its block was sealed
        sources = summary.sources
        fresh = sources.max() + 1 if sources and sources.max() < 2**32 - 1 else 0
        if fresh not in sources:
            other = type(summary)(summary.k, summary.max_centroids)
            other.add_many([3.0, -1.0], fresh, time_ns=2)
            summary.merge(other)
            check(summary.to_bytes())
    table(rng, data)
    return bool(kept)


def many(rng: random.Random) -> bool:
    """A merge of many children at once (merge_digests' pairwise passes over 3-40 runs, merged two pairs at a time
    from both ends): children of 0 to 600 values drawn from a few numbers (centroid means tied within and across
    children) or spread wide, an empty child among them at random; the merge must round-trip, and give the same
    bytes as the Python oracle's (tests/summary_oracle.py: fastdigest's merge) of the same children, so that a
    wrong merge order or tie rule fails here, not only a crash (review: a flipped tie rule passed the round trip)."""
    from summary_oracle import OracleSummary
    from telemetry import Summary

    max_centroids = rng.choice([2, 5, 50, 200])  # one shape per merge (different shapes are refused)
    children, oracles = [], []
    for child in range(rng.randint(3, 40)):
        summary, oracle = Summary(3, max_centroids), OracleSummary(3, max_centroids)
        n = rng.choice([0, 1, 2, rng.randrange(600)])
        if n:
            tied = rng.random() < 0.5
            values = [float(rng.randrange(4)) if tied else rng.lognormvariate(0.0, 2.0) for _ in range(n)]
            summary.add_many(values, child, time_ns=1 + child)
            oracle.add_many(values, child, time_ns=1 + child)
        children.append(summary)
        oracles.append(oracle)
    merged = Summary.merge_all(children)
    again = merged.to_bytes()
    assert Summary.from_bytes(again).to_bytes() == again
    assert again == OracleSummary.merge_all(oracles).to_bytes(), "the native merge differs from the oracle's"
    return True


_TABLE: list[object] = []  # one collector's native window table, kept across the cases of a run


def table(rng: random.Random, data: bytes) -> None:
    """The same unit placed in a collector's native window table (`_native.Windows`, held across cases: windows
    accumulate, repeat, overlap), then some windows taken, merged or restored (the root's failed commit), given sources
    (the root's window read back from its store), put back, emptied and forgotten at random."""
    from pyroaring import BitMap

    from telemetry.summary import _native
    from telemetry.summary.summary import read_native_unit

    if not _TABLE:
        _TABLE.append(_native.Windows())
    windows = _TABLE[0]
    assert isinstance(windows, _native.Windows)
    native = read_native_unit(data, 2**53, 2**63, 4096, k=3)
    if not native.all_fast:
        return
    missing = windows.missing(native)  # the windows not held yet: each created by its first window in the unit
    created, became, refused, accepted, _, late = windows.offer_unit(native, rng.randrange(2**40))
    assert accepted + len(refused) == len(native) and len(late) <= accepted
    assert {pos for pos, _ in created} <= set(missing) and len(created) <= len(missing)
    slots = sorted({slot for _, slot in created} | set(became) | {r[1] for r in refused})
    for slot in slots:
        sources = windows.sources(slot)  # counted right
        assert windows.count(slot) == len(BitMap.deserialize(sources))
        origins = windows.pending_origins(slot)
        assert len(set(origins)) == len(origins)
        if rng.random() < 0.7:  # watched (a collector's unsealed windows), or no longer, asked per job at once
            windows.watch(slot, rng.random() < 0.8)
        if rng.random() < 0.5:
            continue
        if rng.random() < 0.2:
            windows.add_sources(slot, BitMap(range(rng.randrange(8))).serialize())
        batch = windows.take(slot)
        if len(batch):
            check(batch.merged().encode())
            assert len(batch.refs()) == len(batch.entries()) == len(batch)
            if rng.random() < 0.3:  # a failed commit: pending again, the batch empty after
                held = len(batch)
                windows.restore(slot, batch)
                assert len(batch) == 0 and windows.pending(slot) >= held
        if rng.random() < 0.35:
            windows.remove(slot)
    for job, attempt in windows.watched_jobs():  # each answer a watched window of that job holding pending parts
        every = windows.complete(job, attempt, _native.Sources(BitMap().serialize()))
        assert every and set(windows.complete(job, attempt, None)) <= set(every)
        for slot in windows.complete(job, attempt, _native.Sources(BitMap(range(rng.randrange(4))).serialize())):
            assert windows.pending(slot) > 0
        for slot in windows.complete(job, attempt, None, rng.randrange(-1, 10), rng.random() < 0.5):  # the root's rule
            assert windows.pending(slot) > 0


def run(cases: int, seed: int) -> tuple[int, int]:
    """Seeded random cases (no hypothesis: the sanitizer run wants plain speed). (cases, accepted)."""
    rng = random.Random(seed)
    bases = seeds()
    accepted = 0
    for _ in range(cases):
        if rng.random() < 0.25:
            accepted += ingest(rng)
            continue
        if rng.random() < 0.05:
            accepted += many(rng)
            continue
        if rng.random() < 0.2:
            accepted += unit(rng, bases)
            continue
        data = rng.choice(bases)
        for _ in range(rng.randint(1, 3)):
            data = mutate(rng, data)
        accepted += check(data)
    return cases, accepted


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", type=Path, help="the extension to load as telemetry.summary._native")
    parser.add_argument("--cases", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.module:
        load_module(args.module)
    cases, accepted = run(args.cases, args.seed)
    from telemetry.summary import _native
    print(f"{cases} cases, {accepted} accepted, module {_native.__file__}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parent))
    main()
