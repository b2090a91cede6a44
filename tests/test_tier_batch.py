"""A tier reads a child's whole unit in one native call (issue 29 item 2: `read_unit`, CollectorService._receive),
and judges every window exactly as the per-window path does (`CollectorService._parse`): same key, same summary
bytes, same sources, or the same refusal in the same words. Hostile bytes inside a unit: one bad window is refused
alone, with the reason it always had, and the rest of the unit goes in.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from collectors.collector import service as service_module
from collectors.collector.service import CollectorService, _ChildStream, _Unit
from collectors.common.aioserve import NOT_INLINE
from collectors.common.fleet import FLEET_JOB
from collectors.common.keys import Key
from collectors.common.validation import MetricBudget
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines
from native_fuzz import varint
from telemetry import Summary
from telemetry.summary.summary import read_native_unit, read_unit, unit_windows
from telemetry.v1 import forward_pb2, summary_pb2

WORLD_CAP = 4096


def service(native: bool = False) -> CollectorService:
    """A rack's service; `native`: its windows held natively, as a CollectorServer's are."""
    node = Node("rack", Deadlines(120.0), ack_down=lambda *a, **k: None, native=native)
    return CollectorService(node, None, None, MetricBudget(64), max_world_size=WORLD_CAP)  # type: ignore[arg-type]  # host and slots: no stream here


def summary_bytes(ranks: range, seed: int = 0, k: int = 8, max_centroids: int = 200) -> bytes:
    rng = np.random.default_rng(seed)
    ids = np.fromiter(ranks, dtype=np.int64)
    return Summary.from_arrays(rng.lognormal(0, 1, len(ids)), ids, time_ns=5, k=k,
                               max_centroids=max_centroids).to_bytes()


def window(job: str = "job", metric: str = "loss", step: int | None = 3, summary: bytes | None = None,
           expected: int = 16, attempt: int = 0, bucket: tuple[int, int] | None = None,
           late: bool = False) -> forward_pb2.WindowSummary:
    key = summary_pb2.WindowKey(job=job, metric=metric, attempt=attempt)
    if bucket is not None:
        key.bucket.start_ms, key.bucket.width_ms = bucket
    elif step is not None:
        key.step = step
    msg = forward_pb2.WindowSummary(key=key, expected=expected, late=late)
    msg.summary.MergeFromString(summary_bytes(range(8)) if summary is None else summary)
    return msg


def judged(svc: CollectorService,
           batch: forward_pb2.SummaryBatch) -> list[tuple[Key, bytes, list[int], int, bool] | str]:
    """The unit's windows as the stream judges them: read by its deserialiser, parsed by the unit handler's path."""
    return [found if isinstance(found, str) else (found[0], found[1].to_bytes(), list(found[2]), found[3], found[4])
            for found in svc._parse_unit(svc._receive(batch.SerializeToString()))[0]]


def _refused(data: bytes, *args: int) -> object:
    raise ValueError("refused by the test")


def parsed_whole(svc: CollectorService, data: bytes) -> _Unit:
    """The unit as the stream's deserialiser hands it over when the native read refuses it: parsed whole by
    protobuf, every window then judged by the per-window path (`_parse`)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(service_module, "read_native_unit", _refused)
        unit = svc._receive(data)
    assert unit.read is None and set(unit.windows) <= {None}
    return unit


def one_by_one(svc: CollectorService,
               batch: forward_pb2.SummaryBatch) -> list[tuple[Key, bytes, list[int], int, bool] | str]:
    return [found if isinstance(found, str) else (found[0], found[1].to_bytes(), list(found[2]), found[3], found[4])
            for found in (svc._parse(w) for w in batch.windows)]


HOSTILE = {
    "plain": window(),
    "late delta": window(late=True),
    "second job, attempt": window(job="other:job-2", attempt=3, summary=summary_bytes(range(8, 16), 1)),
    "bucket": window(bucket=(60_000, 1000), step=None),
    "bucket of width 0": window(bucket=(60_000, 0), step=None),
    "negative bucket start": window(bucket=(-1000, 1000), step=None),
    "no step nor bucket": window(step=None),
    "bad job name": window(job="job with spaces"),
    "empty job": window(job=""),
    "job too long": window(job="j" * 129),
    "non-ASCII metric": window(metric="lösung"),
    "bad metric name": window(metric="Loss"),
    "attempt 2**63": window(attempt=2**63),
    "step beyond 2**53": window(step=2**53 + 1),
    "step 2**53": window(step=2**53),
    "expected above the cap": window(expected=WORLD_CAP + 1),
    "source beyond the cap": window(summary=summary_bytes(range(WORLD_CAP, WORLD_CAP + 2))),
    "fleet job, sparse sources": window(job=FLEET_JOB, summary=summary_bytes(range(10**6, 10**6 + 3))),
    "other shape (k)": window(summary=summary_bytes(range(8), k=4)),
    "other shape (centroids)": window(summary=summary_bytes(range(8), max_centroids=100)),
    "empty summary": window(summary=b""),
    "summary that does not decode": window(summary=summary_pb2.Summary(count=3).SerializeToString()),
    "mean outside [min, max]": window(summary=summary_pb2.Summary(
        k=8, count=1, sum=1.0, mean=5.0, min=1.0, max=1.0, sources=BitMap([0]).serialize(),
        top_values=[1.0], top_sources=[0], bottom_values=[1.0], bottom_sources=[0]).SerializeToString()),
}


def test_every_window_is_judged_as_the_per_window_path_judges_it() -> None:
    svc = service()
    batch = forward_pb2.SummaryBatch(sender_id="child", seq=1, windows=list(HOSTILE.values()))
    fast, slow = judged(svc, batch), one_by_one(svc, batch)
    assert fast == slow
    verdicts = dict(zip(HOSTILE, fast))
    # A metric's name is the budget's to refuse, under the lock (_offer); a bucket may start before 1970.
    accepted = {"plain", "late delta", "second job, attempt", "bucket", "step 2**53", "fleet job, sparse sources",
                "bad metric name", "non-ASCII metric", "negative bucket start"}
    assert {name for name, verdict in verdicts.items() if not isinstance(verdict, str)} == accepted
    assert "malformed summary" in verdicts["mean outside [min, max]"]
    assert "a source id" in verdicts["source beyond the cap"]
    assert [name for name, verdict in verdicts.items() if not isinstance(verdict, str) and verdict[4]] == ["late delta"]


def _field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


@pytest.mark.parametrize("native", [False, True])
@pytest.mark.parametrize("order", ["bucket then step", "step then bucket"])
def test_a_key_with_both_a_step_and_a_bucket_is_keyed_as_protobuf_keys_it(order: str, native: bool) -> None:
    """A key's step and bucket are a oneof: protobuf keeps the last one on the wire. Fed as the RAW bytes a child
    sent (judged() re-serialises, which normalises them), the unit path keys the window as the per-window path does
    (before: a step after a bucket kept the bucket's width, keying the window Key(index=step, width_ms=1000))."""
    bucket = _field(4, varint(1 << 3) + varint(60_000) + varint(2 << 3) + varint(1000))
    step = varint(3 << 3) + varint(7)
    parts = [bucket, step] if order == "bucket then step" else [step, bucket]
    key = _field(1, b"job") + _field(2, b"loss") + b"".join(parts)
    raw = _field(3, _field(1, key) + _field(2, summary_bytes(range(8))) + varint(3 << 3) + varint(16))
    batch = forward_pb2.SummaryBatch.FromString(raw)
    assert batch.windows[0].key.WhichOneof("window") == ("step" if order == "bucket then step" else "bucket")
    svc = service(native)
    fast = [found if isinstance(found, str) else (found[0], found[1].to_bytes(), list(found[2]), found[3], found[4])
            for found in svc._parse_unit(svc._receive(raw))[0]]
    assert fast == one_by_one(svc, batch)
    assert not isinstance(fast[0], str)
    assert (fast[0][0].index, fast[0][0].width_ms) == ((7, 0) if order == "bucket then step" else (60_000, 1000))


def test_the_native_read_leaves_odd_windows_to_the_per_window_path() -> None:
    """What read_unit takes itself (plain windows) and what it hands back as None (judged in Python)."""
    batch = forward_pb2.SummaryBatch(windows=list(HOSTILE.values()))
    read, groups, rest = read_unit(batch.SerializeToString(), 2**53, 2**63, WORLD_CAP)
    assert rest == b""
    taken = {name for name, found in zip(HOSTILE, read) if found is not None}
    # the sources' extent is judged per group in Python; the rarer odd ones (non-ASCII, before 1970) are left to it;
    # a late delta is read as any window, with its flag
    assert taken == {"plain", "late delta", "second job, attempt", "bucket", "step 2**53", "fleet job, sparse sources",
                     "source beyond the cap", "bad metric name"}
    assert [name for name, found in zip(HOSTILE, read) if found is not None and found[8]] == ["late delta"]
    assert len(groups) == 4  # ranks 0-7 (four windows), 8-15, the fleet's sparse ids, the cap's


@pytest.mark.parametrize("late", [0, 1, 2])
def test_a_late_flag_is_read_natively_when_it_is_a_bool_as_upb_writes_one(late: int) -> None:
    """late = 0 or 1 is read natively (the flag in the window's tuple); any other varint, which protobuf reads as
    true, is left to the per-window path. Either way the window is judged as the per-window path judges it."""
    body = _field(1, _field(1, b"job") + _field(2, b"loss") + varint(3 << 3) + varint(3))
    body += _field(2, summary_bytes(range(8))) + varint(3 << 3) + varint(16) + varint(4 << 3) + varint(late)
    raw = _field(3, body)
    read, _, _ = read_unit(raw, 2**53, 2**63, WORLD_CAP)
    assert (read[0] is None) == (late == 2)
    if read[0] is not None:
        assert read[0][8] is (late == 1)
    svc = service()
    fast = [found if isinstance(found, str) else (found[0], found[1].to_bytes(), list(found[2]), found[3], found[4])
            for found in svc._parse_unit(svc._receive(raw))[0]]
    assert fast == one_by_one(svc, forward_pb2.SummaryBatch.FromString(raw))
    assert fast[0][4] is (late != 0)  # type: ignore[index]  # a window, not a refusal


def test_a_unit_of_late_deltas_goes_into_a_native_table_in_one_call() -> None:
    """The batch path takes late deltas (issue 29: a late window cost 4.9x the per-window path, bench/late_intake.py):
    a unit of late deltas is read natively whole and offered in one call (Node.offer_read), and each window it went
    into counts the late part (Window.late_parts: `only_late` then sends it up as a late delta)."""
    svc = service(True)
    svc.budget.admit_all("job", [f"m{i}" for i in range(4)])  # else a first unit is judged window by window
    states = forward_pb2.RankStates(job="job", alive=BitMap(range(8)).serialize(), world_size=16)
    batch = forward_pb2.SummaryBatch(sender_id="child", seq=1, ranks=[states], windows=[
        window(metric=f"m{i}", summary=summary_bytes(range(8), i), late=i % 2 == 0) for i in range(4)])
    received = svc._receive(batch.SerializeToString())
    assert received.read is not None and received.read.all_fast
    calls: list[int] = []
    offer_read = svc.node.offer_read

    def counted(*args: object) -> object:
        calls.append(1)
        return offer_read(*args)  # type: ignore[arg-type]  # passed through as given

    svc.node.offer_read = counted  # type: ignore[method-assign]  # counting the calls
    acks, held, bad_inputs = _answers(svc, received)
    assert calls == [1] and bad_inputs == 0 and acks[-1].status == forward_pb2.Ack.RECEIVED
    assert held == ["m0:8", "m1:8", "m2:8", "m3:8"]
    table = svc.node.table
    assert {key.metric: (win.late_parts, win.only_late) for key, win in table.windows.items()} == {
        "m0": (1, True), "m1": (0, False), "m2": (1, True), "m3": (0, False)}


def test_windows_of_equal_sources_share_one_bitmap() -> None:
    svc = service()
    batch = forward_pb2.SummaryBatch(windows=[window(metric=f"m{i}", summary=summary_bytes(range(8), i))
                                              for i in range(5)])
    parsed, _ = svc._parse_unit(svc._receive(batch.SerializeToString()))
    assert all(not isinstance(p, str) for p in parsed)
    assert len({id(p[2]) for p in parsed if not isinstance(p, str)}) == 1
    assert parsed[0][2] == BitMap(range(8))  # type: ignore[index]  # checked: none is a refusal


HELLO = forward_pb2.SummaryBatch(sender_id="child", seq=0).SerializeToString()  # a child's first unit


def _answers(svc: CollectorService, received: _Unit) -> tuple[list[forward_pb2.Ack], list[str], int]:
    """A child's first unit, then `received`, through the unit handler (`_one`): every ack, the windows held
    (metric:sources) and bad_inputs."""
    acks: list[forward_pb2.Ack] = []

    class Answers:
        def put(self, ack: forward_pb2.Ack) -> None:
            acks.append(ack)

    stream = _ChildStream(Answers(), None)  # type: ignore[arg-type]  # only put() is called
    svc._one(stream, svc._receive(HELLO))
    svc._one(stream, received)
    table = svc.node.table
    return acks, sorted(f"{key.metric}:{len(table.sources(win))}" for key, win in table.windows.items()), \
        svc.node.counters["bad_inputs"]


def test_one_bad_window_in_a_unit_is_refused_alone() -> None:
    """Through the service's unit handler: the bad window is rejected by index with its reason and counted in
    bad_inputs, the good ones are accepted into the node's windows."""
    svc = service()
    bad = HOSTILE["mean outside [min, max]"]
    windows = [window(metric=f"m{i}", summary=summary_bytes(range(8), i)) for i in range(4)]
    windows.insert(2, bad)
    states = forward_pb2.RankStates(job="job", alive=BitMap(range(8)).serialize(), world_size=16)
    unit = forward_pb2.SummaryBatch(sender_id="child", seq=1, windows=windows, ranks=[states])
    acks, held, bad_inputs = _answers(svc, svc._receive(unit.SerializeToString()))
    ack = acks[-1]
    assert ack.status == forward_pb2.Ack.REJECTED_OVERLAP
    assert [r.index for r in ack.rejections] == [2]
    assert ack.rejections[0].reason == svc._parse(bad)
    assert not ack.rejections[0].overlapping_sources
    assert bad_inputs == 1
    assert held == ["m0:8", "m1:8", "m2:8", "m3:8"]


def _mutated(data: bytes, flips: list[tuple[int, int]]) -> bytes:
    raw = bytearray(data)
    for position, bit in flips:
        raw[position % len(raw)] ^= 1 << bit
    return bytes(raw)


UNIT = forward_pb2.SummaryBatch(sender_id="child", seq=1, windows=[
    window(metric="a"), window(metric="b", bucket=(60_000, 1000), step=None),
    window(metric="c", attempt=2, summary=summary_bytes(range(8, 16), 2))]).SerializeToString()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(UNIT) - 1), st.integers(0, 7)), min_size=1, max_size=4))
def test_bit_flips_inside_a_unit_are_judged_as_the_per_window_path_judges_them(flips: list[tuple[int, int]]) -> None:
    """Hostile bytes: every unit upb still parses (as gRPC does before the service sees it) is judged window by
    window as before; the native read never fails on it."""
    try:
        batch = forward_pb2.SummaryBatch.FromString(_mutated(UNIT, flips))
    except Exception:  # upb refuses it (DecodeError): the stream fails before the service sees it, as before
        return
    svc = service()
    assert judged(svc, batch) == one_by_one(svc, batch)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400))
def test_random_bytes_never_crash_the_native_read(data: bytes) -> None:
    try:
        read, groups, _ = read_unit(data, 2**53, 2**63, WORLD_CAP)
    except ValueError:
        return
    for found in read:
        assert found is None or isinstance(found[6], Summary)
    assert all(isinstance(g, bytes) for g in groups)


# ---------------------------------------------------------------- the Forward stream's own deserialiser
RANKS = forward_pb2.RankStates(job="job", alive=BitMap(range(16)).serialize(), world_size=16)
FULL_UNIT = forward_pb2.SummaryBatch(
    sender_id="child", seq=4, ranks=[RANKS], counters=forward_pb2.Counters(duplicates=2, late=1),
    windows=[window(metric="a"), window(metric="b", bucket=(60_000, 1000), step=None),
             window(metric="c", summary=summary_bytes(range(8, 16), 2))]).SerializeToString()


def _without_windows(batch: forward_pb2.SummaryBatch) -> forward_pb2.SummaryBatch:
    rest = forward_pb2.SummaryBatch()
    rest.CopyFrom(batch)
    del rest.windows[:]
    return rest


def test_a_plain_unit_is_read_natively_and_the_rest_by_protobuf() -> None:
    svc = service()
    unit = svc._receive(FULL_UNIT)
    whole = forward_pb2.SummaryBatch.FromString(FULL_UNIT)
    assert isinstance(unit, _Unit) and unit.size == len(FULL_UNIT)
    assert unit.batch == _without_windows(whole)
    parsed, keys = svc._parse_read(unit_windows(unit.read), unit.groups)
    assert [(p[0], p[1].to_bytes(), list(p[2]), p[3], p[4]) for p in parsed if not isinstance(p, str)] == \
        one_by_one(svc, whole)
    assert [key.to_proto() for key in keys if key is not None] == [w.key for w in whole.windows]


def test_a_unit_with_an_odd_window_is_parsed_whole_as_before() -> None:
    batch = forward_pb2.SummaryBatch.FromString(FULL_UNIT)
    batch.windows.append(HOSTILE["mean outside [min, max]"])
    svc = service()
    received = svc._receive(batch.SerializeToString())
    assert received.batch == batch and received.size == batch.ByteSize()
    assert received.windows[-1] is None and None not in received.windows[:-1]
    # the windows read took are not read again; the odd one is judged by the per-window path
    parsed, _ = svc._parse_unit(received)
    assert [p if isinstance(p, str) else (p[0], p[1].to_bytes(), list(p[2]), p[3], p[4]) for p in parsed] == \
        one_by_one(svc, batch)


@pytest.mark.parametrize("table", ["python", "native"])
def test_the_unit_path_answers_as_the_parsed_path(table: str) -> None:
    """Through _one: the same acks (rejections included: a window over the metric budget, one a run refusal does
    not touch), the same windows and counters, whether the unit came natively or parsed whole, into a window table
    in Python (the root's) or held natively (a collector's)."""
    batch = forward_pb2.SummaryBatch.FromString(FULL_UNIT)
    for i in range(70):  # past the budget of 64 metrics: the last ones are refused by the budget, by index
        batch.windows.append(window(metric=f"m{i}", summary=summary_bytes(range(8), i)))
    data = batch.SerializeToString()
    native, parsed = service(table == "native"), service()
    unit = native._receive(data)
    assert isinstance(unit, _Unit)
    assert _answers(native, unit) == _answers(parsed, parsed_whole(parsed, data))
    again = service(table == "native")
    assert _answers(again, again._receive(data))[0][-1].rejections[0].key == batch.windows[64].key  # a, b, c, m0-m60


def test_a_unit_with_an_odd_window_is_read_natively_once_and_answered_as_parsed(monkeypatch) -> None:
    """The fallback path takes the windows read did take from that one read, not from a second one of protobuf's
    re-serialisation; the acks, windows and counters are those of the parsed path."""
    batch = forward_pb2.SummaryBatch.FromString(FULL_UNIT)
    batch.windows.insert(1, HOSTILE["mean outside [min, max]"])
    parsed = service()
    expected = _answers(parsed, parsed_whole(parsed, batch.SerializeToString()))
    calls: list[int] = []

    def counted(data: bytes, *args: int) -> object:
        calls.append(len(data))
        return read_native_unit(data, *args)

    monkeypatch.setattr(service_module, "read_native_unit", counted)
    svc = service()
    answered = _answers(svc, svc._receive(batch.SerializeToString()))
    assert calls == [len(batch.SerializeToString()), len(HELLO)]  # the unit once, then _answers' first unit
    assert answered == expected and expected[2] == 1  # the odd window refused, counted once


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, len(FULL_UNIT) - 1), st.integers(0, 7)), min_size=1, max_size=3))
def test_bit_flips_in_a_unit_are_refused_by_the_stream_exactly_when_protobuf_refuses_them(
        flips: list[tuple[int, int]]) -> None:
    data = _mutated(FULL_UNIT, flips)
    try:
        whole = forward_pb2.SummaryBatch.FromString(data)
    except Exception:  # protobuf's DecodeError: the deserialiser must refuse it too
        whole = None
    svc = service()
    try:
        received = svc._receive(data)
    except Exception:  # as above
        assert whole is None, "a unit protobuf accepts was refused"
        return
    assert whole is not None, "a unit protobuf refuses was accepted"
    # parsed whole where a window read did not take (or the unit did not read at all), else without its windows
    assert received.batch == (whole if received.read is None else _without_windows(whole))
    parsed, _ = svc._parse_unit(received)
    assert [p if isinstance(p, str) else (p[0], p[1].to_bytes(), list(p[2]), p[3], p[4]) for p in parsed] == \
        one_by_one(svc, whole)


def test_a_native_unit_taken_in_on_the_loop_answers_as_the_pool_path() -> None:
    """StreamWork.inline (CollectorService._inline): a collector takes a child's natively read unit in on the event
    loop when the node's lock is free (no hand-off to the pool and back), with the same acks, windows and counters as
    the pool's path (`_one`); it declines (NOT_INLINE, nothing done) while another thread holds the lock, before the
    child named itself, for a unit protobuf parsed, and for a node whose windows are in Python (the root's)."""
    batch = forward_pb2.SummaryBatch.FromString(FULL_UNIT)
    for i in range(70):  # past the budget of 64 metrics: the last ones are refused by the budget, by index
        batch.windows.append(window(metric=f"m{i}", summary=summary_bytes(range(8), i)))
    data = batch.SerializeToString()
    pool = service(True)
    expected = _answers(pool, pool._receive(data))
    acks: list[forward_pb2.Ack] = []

    class Answers:
        def put(self, ack: forward_pb2.Ack) -> None:
            acks.append(ack)

    svc = service(True)
    stream = _ChildStream(Answers(), None)  # type: ignore[arg-type]  # only put() is called
    assert svc._inline(stream, svc._receive(HELLO)) is NOT_INLINE  # the child has not named itself yet
    svc._one(stream, svc._receive(HELLO))
    held, done = threading.Event(), threading.Event()

    def hold() -> None:
        with svc.node.lock:
            held.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(10)
        assert svc._inline(stream, svc._receive(data)) is NOT_INLINE
    finally:
        done.set()
        holder.join(10)
    assert svc._inline(stream, parsed_whole(svc, data)) is NOT_INLINE
    assert len(acks) == 1 and not svc.node.table.windows  # nothing was taken in by the declined calls
    assert svc._inline(stream, svc._receive(data)) is None
    table = svc.node.table
    assert (acks, sorted(f"{key.metric}:{len(table.sources(win))}" for key, win in table.windows.items()),
            svc.node.counters["bad_inputs"]) == expected
    python = service(False)
    python_stream = _ChildStream(Answers(), None)  # type: ignore[arg-type]  # only put() is called
    python._one(python_stream, python._receive(HELLO))
    assert python._inline(python_stream, python._receive(data)) is NOT_INLINE
