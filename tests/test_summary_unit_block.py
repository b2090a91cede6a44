"""The lists of the cores one unit's read makes are cut from one block (telemetry/summary/native/block.hpp;
docs/scale.md, "One block per unit"), freed when the last of them goes. The block's rules must hold whatever is done
with the summaries after the unit's read, and in whichever order they go: each read summary, used after the unit
and its bytes are gone (encoded, copied, merged into, merged with others, added to, dropped on another thread while
its unit's others are still used), gives what the same summary decoded alone (`Summary.from_bytes`) gives. Units of
one small window, of many windows (several chunks), and of lists larger than a chunk (k = 5,000: the heap's).
tests/native_fuzz.py (`unit`) runs the same uses on damaged units, under AddressSanitizer in test_native_asan.py.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable

import numpy as np
import pytest

from telemetry import Summary
from telemetry.summary.summary import read_unit
from telemetry.v1 import forward_pb2, summary_pb2

SHAPES = {  # name: (windows, ranks per window, k)
    "one window": (1, 8, 8),
    "300 windows": (300, 64, 8),
    "a list larger than a chunk": (3, 6000, 5000),
    # lists of 4-64 KiB: each larger than the chunk the block would cut next (4 KiB, then doubling), so the new chunk
    # must be sized to the list (review of 4ac28c3: a k = 300 unit overran the heap and aborted a rack)
    "lists of 4 KiB": (3, 300, 257),
    "lists of 16 KiB": (3, 1000, 1000),
    "lists of 64 KiB": (2, 4000, 4000),
}


def _protos(windows: int, ranks: int, k: int, seed: int) -> list[summary_pb2.Summary]:
    rng = np.random.default_rng(seed)
    sources = np.arange(ranks, dtype=np.int64)
    return [Summary.from_arrays(rng.lognormal(0, 1, ranks), sources, time_ns=1 + i, k=k).to_proto()
            for i in range(windows)]


def _read(protos: list[summary_pb2.Summary], k: int) -> list[Summary]:
    """The unit's summaries, read natively; the unit and its bytes gone before they are used."""
    data = forward_pb2.SummaryBatch(windows=[
        forward_pb2.WindowSummary(key=summary_pb2.WindowKey(job="job", metric=f"m{i}", step=1), summary=p,
                                  expected=1 << 20)
        for i, p in enumerate(protos)]).SerializeToString()
    read, _, _ = read_unit(data, 2**53, 2**63, 1 << 20, k=k)
    del data
    summaries = [w[6] for w in read]  # type: ignore[index]  # every window is plain
    del read
    gc.collect()
    return summaries


def _other(k: int, first_source: int) -> Summary:
    other = Summary(k)
    other.add_many(np.linspace(-3.0, 30.0, 16), first_source, time_ns=7)
    return other


def _encode(s: Summary, k: int) -> bytes:
    return s.to_bytes()


def _copy_then_drop(s: Summary, k: int) -> bytes:
    copy = s.copy()
    del s
    gc.collect()
    return copy.to_bytes()


def _merge_into(s: Summary, k: int) -> bytes:  # the read core's lists rewritten after its block was sealed
    s.merge(_other(k, 1 << 21))
    s.merge(_other(k, (1 << 21) + 1))
    return s.to_bytes()


def _merge_all(s: Summary, k: int) -> bytes:
    return Summary.merge_all([_other(k, 1 << 21), s, _other(k, (1 << 21) + 1)]).to_bytes()


def _add_many(s: Summary, k: int) -> bytes:
    s.add_many(np.linspace(100.0, 200.0, 32), 1 << 22, time_ns=9)
    return s.to_bytes()


USES: dict[str, Callable[[Summary, int], bytes]] = {
    "encode": _encode, "copy, original dropped": _copy_then_drop, "merged into": _merge_into,
    "merge_all": _merge_all, "add_many": _add_many,
}


@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("use", list(USES))
def test_a_read_summary_outlives_its_unit_as_its_decoded_twin(shape: str, use: str) -> None:
    windows, ranks, k = SHAPES[shape]
    protos = _protos(windows, ranks, k, seed=len(use))
    read = _read(protos, k)
    alone = [Summary.from_bytes(p.SerializeToString()) for p in protos]
    picks = sorted({0, windows // 2, windows - 1})
    for i in picks:
        assert USES[use](read[i], k) == USES[use](alone[i], k), (shape, use, i)
    rest = [read[i].to_bytes() for i in range(windows) if i not in picks]
    assert rest == [alone[i].to_bytes() for i in range(windows) if i not in picks]


@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_units_summaries_dropped_on_other_threads_while_the_rest_are_used(shape: str) -> None:
    """Half the summaries (every other one) dropped on four threads at once, while this one merges and encodes the
    rest; then those go too. Each kept one as its decoded twin."""
    windows, ranks, k = SHAPES[shape]
    protos = _protos(windows, ranks, k, seed=3)
    read = _read(protos, k)
    kept, dropped = read[::2], read[1::2]
    del read
    shares = [dropped[i::4] for i in range(4)]
    del dropped
    threads = [threading.Thread(target=share.clear) for share in shares]
    for t in threads:
        t.start()
    got = [_merge_into(s, k) for s in kept]
    for t in threads:
        t.join()
    assert got == [_merge_into(Summary.from_bytes(p.SerializeToString()), k) for p in protos[::2]]
    del kept
    gc.collect()
