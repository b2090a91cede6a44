"""The root's windows held natively (issue 29: the root takes a rack's unit in one native call, as a rack does) against
the same root with its windows in Python, driven through the same events: racks' units (first parts, late deltas,
resends, bad windows, step windows and time buckets), flushes (on time, or past every deadline and the retention, so
that settled windows are forgotten and read back from the store for a resend: `Finaliser.install`), and commits that
fail (`Window.restore` of what was taken). Both must answer every rack alike (under a budget of a few windows, where
the two let different windows go, each is held to the invariants alone) (the same acks, each unit acknowledged
DURABLE once per delivery, and the same refusals in each ack, compared as a set: the native root may list one ack's
refusals in another order, which a child does not mind, as it matches each refusal by key and index), store the same
rows byte for byte and count the same. A unit goes in as production takes it: on the event loop
(`CollectorService._inline`) where that takes it, else on the pool's path (`_one`). Time is explicit: every event reads
the clock once, and both roots' flushes, and their tables' own readings (a window read back from the store is sealed
"now"), see that one reading, so a slow example cannot put the two roots on either side of the retention. The root's
completeness rule (`root_complete`: every rank of the world for a step, every rank known for a bucket) is asked
natively per job for a native table."""

from __future__ import annotations

import os
import time
import types
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyroaring import BitMap

from collectors.collector.service import CollectorService, _ChildStream
from collectors.common.aioserve import NOT_INLINE
from collectors.common.keys import Key
from collectors.common.validation import MetricBudget
from collectors.delivery import windows as windows_module
from collectors.delivery.node import Node
from collectors.delivery.runs import RunLedger
from collectors.delivery.windows import WINDOW_BYTES, Deadlines
from collectors.root.finalise import Finaliser, root_complete
from collectors.root.reads import StoreReads
from collectors.root.store import Store
from telemetry import Summary
from telemetry.summary import _native
from telemetry.v1 import forward_pb2

RACKS, METRICS, STEPS, RANKS = 3, 3, 3, 8  # metric 2 is a time bucket (width 1000 ms), the others step windows
HALVES = [range(0, 8), range(0, 4), range(4, 8)]  # a rack's ranks in a window: all, or a half


class _Answers:
    def __init__(self) -> None:
        self.acks: list[bytes] = []

    def put(self, ack: forward_pb2.Ack) -> None:
        self.acks.append(ack.SerializeToString())


class FlakyStore(Store):
    """A store whose next commit fails when told (`fail`): the root restores what it took and retries."""

    fail = False

    def save(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]  # Store.save's arguments, passed on
        if self.fail:
            self.fail = False
            raise OSError("the test's disk is full")
        super().save(*args, **kwargs)


def _key(metric: int, step: int) -> Key:
    return Key("job", f"m{metric}", step * 1000, 1000) if metric == 2 else Key("job", f"m{metric}", step, 0)


def _states(rack: int) -> forward_pb2.RankStates:
    return forward_pb2.RankStates(job="job", alive=BitMap(range(rack * RANKS, rack * RANKS + RANKS)).serialize(),
                                  world_size=RACKS * RANKS)


def opening(rack: int) -> bytes:
    """A rack's first unit on its stream (seq 0), with its rank states: the root knows every rack's ranks."""
    return forward_pb2.SummaryBatch(sender_id=f"r{rack}", seq=0, ranks=[_states(rack)]).SerializeToString()


def unit_bytes(rack: int, seq: int, step: int, metrics: list[tuple[int, int]], bad: bool, late: bool) -> bytes:
    """Rack `rack`'s unit `seq`: per (metric, half), that metric's window of `step` from those of its ranks."""
    windows = []
    for metric, half in metrics:
        ranks = np.array([rack * RANKS + r for r in HALVES[half]], dtype=np.int64)
        values = np.random.default_rng([rack, step, metric]).lognormal(0, 1, RANKS)[list(HALVES[half])]
        summary = Summary.from_arrays(values, ranks, time_ns=step + 1)
        windows.append(forward_pb2.WindowSummary(key=_key(metric, step).to_proto(), summary=summary.to_proto(),
                                                 expected=RACKS * RANKS, late=late))
    if bad and windows:
        windows[-1].summary.mean = 1e9  # outside [min, max]: refused alone, by index
    return forward_pb2.SummaryBatch(sender_id=f"r{rack}", seq=seq, windows=windows,
                                    ranks=[_states(rack)]).SerializeToString()


class Root:
    """A root's service, node, finaliser, store reads and SQLite store, driven by hand (no threads)."""

    def __init__(self, path: Path, native: bool, budget_windows: int = 1000) -> None:
        self.store = FlakyStore(path)
        self.finaliser = Finaliser(self.store)
        self.node = Node("root", Deadlines(600.0), ack_down=lambda *a, **k: self.service.ack_down(*a, **k),
                         retain_s=1.0, window_budget_bytes=budget_windows * WINDOW_BYTES, sink=self.finaliser,
                         complete=root_complete,
                         runs=RunLedger(recall=self.store.load_runs, record=self.finaliser.record_claims), native=native)
        self.reads = StoreReads(self.store, self.finaliser, self.node)
        self.service = CollectorService(self.node, None, None, MetricBudget(64), reads=self.reads)  # type: ignore[arg-type]  # no host or stream slots here
        self.service.budget.admit_all("job", [f"m{m}" for m in range(METRICS)])
        self.streams = {}
        for r in range(RACKS):
            stream = _ChildStream(_Answers(), None)  # type: ignore[arg-type]  # only put() is called
            self.service._links[f"r{r}"] = stream.answers
            stream.sender = f"r{r}"
            self.streams[r] = stream
        self.failures = 0
        self.inlined = 0

    def receive(self, rack: int, data: bytes) -> None:
        """A unit in as production takes it: on the loop (`_inline`) unless that declines, else on the pool's path."""
        stream, unit = self.streams[rack], self.service._receive(data)
        if self.service._inline(stream, unit) is not NOT_INLINE:
            self.inlined += 1
            return
        parked = self.service._one(stream, unit)
        if parked is not None:  # its windows are read from the store first (as the reads' thread does)
            self.reads.step()
            assert parked.ready.done(), "a parked unit not let in after its read"
            parked.ready.result()

    def flush(self, late: bool, fail: bool, now: float | None = None) -> None:
        """A flush at `now` (the clock's, if not given), or past every deadline and the retention (`late`)."""
        self.store.fail = fail
        now = time.monotonic() if now is None else now
        try:
            self.node.flush(now + (10_000.0 if late else 0.0))
        except OSError:
            self.failures += 1
        self.store.fail = False

    def state(self, keys: list[Key]) -> tuple[object, ...]:
        node = self.node
        acks = {r: sorted(_ack_as_compared(a) for a in s.answers.acks) for r, s in self.streams.items()}
        rows = self.store.load_many(keys)
        stored = sorted((key, row.expected, row.late, row.summary.to_bytes()) for key, row in rows.items())
        return (acks, node.subtree_counters(), node.durability.outstanding(), stored, self.failures,
                sorted((key, list(node.table.sources(win)), win.sealed, win.has_pending)
                       for key, win in node.table.windows.items()))


def _ack_as_compared(data: bytes) -> tuple[int, bytes, list[bytes]]:
    """An ack as the two roots must agree on it: its seq, the rest of it, and its refusals as a set (a child matches
    each refusal by key and index, not by its place in the ack)."""
    ack = forward_pb2.Ack.FromString(data)
    refusals = sorted(r.SerializeToString(deterministic=True) for r in ack.rejections)
    del ack.rejections[:]
    return ack.seq, ack.SerializeToString(deterministic=True), refusals


class _Clock:
    """The windows module's time, read once per event and the same for both roots (its wall clock is the real one)."""

    def __init__(self) -> None:
        self.now = time.monotonic()

    def monotonic(self) -> float:
        return self.now


EVENT = st.one_of(
    st.tuples(st.just("unit"), st.integers(0, RACKS - 1), st.integers(0, STEPS - 1),
              st.lists(st.tuples(st.integers(0, METRICS - 1), st.integers(0, 2)), min_size=1, max_size=3,
                       unique_by=lambda one: one[0]),
              st.booleans(), st.booleans()),  # a bad window; late deltas
    st.tuples(st.just("resend"), st.integers(0, RACKS - 1), st.integers(0, 10)),
    st.tuples(st.just("flush"), st.booleans(), st.booleans()),  # past every deadline; the commit fails
)


@settings(max_examples=int(os.environ.get("NATIVE_ROOT_EXAMPLES", "80")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(st.lists(EVENT, min_size=1, max_size=24), st.sampled_from([4, 1000, 1000]))
def test_a_native_root_answers_as_the_python_root(tmp_path_factory: pytest.TempPathFactory, events: list[tuple],
                                                   budget_windows: int) -> None:
    clock = _Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(windows_module, "time", types.SimpleNamespace(monotonic=clock.monotonic, time_ns=time.time_ns))
        _drive(tmp_path_factory.mktemp("roots"), events, budget_windows, clock)


def _drive(folder: Path, events: list[tuple], budget_windows: int, clock: _Clock) -> None:
    """Both roots through `events`, compared after each (when their budgets let them agree) and at the end."""
    roots = [Root(folder / "native.db", True, budget_windows), Root(folder / "python.db", False, budget_windows)]
    assert roots[0].node.table.native is not None and roots[1].node.table.native is None
    sent: dict[int, list[bytes]] = {r: [] for r in range(RACKS)}
    keys = [_key(m, s) for m in range(METRICS) for s in range(STEPS)]
    for root in roots:
        for r in range(RACKS):
            root.receive(r, opening(r))
    for event in events:
        clock.now = time.monotonic()
        if event[0] == "unit":
            _, rack, step, metrics, bad, late = event
            sent[rack].append(unit_bytes(rack, len(sent[rack]) + 1, step, metrics, bad, late))
            data = sent[rack][-1]
        elif event[0] == "resend":
            _, rack, pick = event
            if not sent[rack]:
                continue
            data = sent[rack][pick % len(sent[rack])]
        for root in roots:
            if event[0] == "flush":
                root.flush(event[1], event[2], clock.now)
            else:
                root.receive(rack, data)
        if budget_windows > 100:  # under a tight budget the tables let different windows go (one charges per unit)
            assert roots[0].state(keys) == roots[1].state(keys), event
    clock.now = time.monotonic()
    for root in roots:  # every window goes, and is committed
        root.flush(True, False, clock.now)
        root.flush(True, False, clock.now)
    if budget_windows > 100:
        assert roots[0].state(keys) == roots[1].state(keys)
    for root in roots:
        assert root.node.durability.outstanding() == 0 and root.node.durability.unheld_releases == 0


@pytest.mark.parametrize("native", [True, False])
def test_a_failed_commit_of_a_native_window_is_restored_and_stored_at_the_next_flush(tmp_path: Path,
                                                                                     native: bool) -> None:
    """A commit that fails puts what it took back into its windows, ahead of what came since, and the next flush
    stores the whole window and acknowledges every rack once (before: a native window could not be restored, and
    the root kept its windows in Python for it). A late part in the restored batch keeps the window's first row late
    only if every part was late."""
    root = Root(tmp_path / "root.db", native)
    for r in range(RACKS):
        root.receive(r, opening(r))
    for r in range(RACKS - 1):
        root.receive(r, unit_bytes(r, 1, 0, [(0, 0)], False, False))
    root.flush(True, fail=True)  # past its deadline: sealed, taken, and its commit fails
    assert root.failures == 1 and not root.finaliser.final
    win = root.node.table.windows[_key(0, 0)]
    assert win.has_pending and not win.inflight
    root.receive(RACKS - 1, unit_bytes(RACKS - 1, 1, 0, [(0, 0)], False, True))  # the last rack's, late
    root.flush(False, fail=False)
    row = root.store.load(_key(0, 0))
    assert row is not None and row.late == 0 and row.summary.count == RACKS * RANKS
    durable = [[forward_pb2.Ack.FromString(a).seq for a in root.streams[r].answers.acks
                if forward_pb2.Ack.FromString(a).status == forward_pb2.Ack.DURABLE] for r in range(RACKS)]
    assert durable == [[1]] * RACKS
    assert root.node.durability.outstanding() == 0


def test_a_native_root_seals_a_step_when_every_rank_of_the_world_is_in_and_not_before(tmp_path: Path) -> None:
    """root_complete asked natively, per job: a step window goes once it holds ranks [0, world) (its expected world),
    a bucket once every rank the racks cover is in; not one part before."""
    root = Root(tmp_path / "root.db", True)
    for r in range(RACKS):
        root.receive(r, opening(r))
    for r in range(RACKS):
        root.flush(False, False)
        assert not root.finaliser.final, f"stored with {r} of {RACKS} racks in"
        root.receive(r, unit_bytes(r, 1, 0, [(0, 0), (2, 0)], False, False))
    root.flush(False, False)
    assert sorted(root.finaliser.final) == sorted([_key(0, 0), _key(2, 0)])


def test_the_native_table_judges_the_world_rule_as_root_complete() -> None:
    """`Windows.complete` with a world: a step window holding [0, w) and nothing beyond (w its expected world, else
    the one given; never 0); a bucket by `covered`, or never without buckets."""
    table = _native.Windows()

    def offer(metric: str, width: int, expected: int, sources: list[int]) -> int:
        slot, _ = table.slot("job", 0, metric, 0, width, expected)
        table.watch(slot, True)
        ranks = np.array(sources, dtype=np.int64)
        core = Summary.from_arrays(np.ones(len(sources)), ranks, time_ns=1)._as_core()
        assert table.offer_core(slot, core, 1, 0)[0] == 0
        return slot

    whole = offer("whole", 0, 4, [0, 1, 2, 3])
    beyond = offer("beyond", 0, 4, [0, 1, 2, 3, 9])
    short = offer("short", 0, 4, [0, 1, 3])
    unexpected = offer("unexpected", 0, 0, [0, 1])
    bucket = offer("bucket", 1000, 0, [0, 1])
    covered = _native.Sources(BitMap([0, 1]).serialize())
    assert sorted(table.complete("job", 0, covered, 2)) == sorted([whole, unexpected, bucket])
    assert sorted(table.complete("job", 0, covered, 4)) == sorted([whole, bucket])
    assert table.complete("job", 0, None, 0, False) == [whole]
    assert short not in table.complete("job", 0, None, 3) and beyond not in table.complete("job", 0, None, 10)


def test_the_native_table_restores_a_taken_batch_ahead_of_what_came_since() -> None:
    """`Windows.restore`: the batch's parts are pending again before those offered since, the batch empty after."""
    table = _native.Windows()
    slot, _ = table.slot("job", 0, "m", 0, 0, 4)
    for origin, rank in ((1, 0), (2, 1), (3, 2)):
        core = Summary.from_arrays(np.ones(1), np.array([rank], dtype=np.int64), time_ns=1)._as_core()
        table.offer_core(slot, core, origin, 0)
        if origin == 2:
            batch = table.take(slot)
    assert table.pending_origins(slot) == [3]
    assert table.restore(slot, batch) is False and len(batch) == 0
    assert table.pending_origins(slot) == [1, 2, 3]
    assert table.restore(slot, table.take(slot)) is True


def test_the_native_table_names_the_windows_of_a_unit_it_does_not_hold() -> None:
    """`Windows.missing`: the positions of a unit's windows not in the table, without offering the unit."""
    table = _native.Windows()
    table.slot("job", 0, "m1", 0, 0, 24)
    data = unit_bytes(0, 1, 0, [(0, 0), (1, 0), (2, 0)], False, False)
    from telemetry.summary.summary import read_native_unit

    unit = read_native_unit(data, 2**40, 2**10, 2**20)
    assert table.missing(unit) == [0, 2]
    assert len(table.offer_unit(unit, 1)[0]) == 2  # the two missing windows created
    with pytest.raises(ValueError):
        table.missing(unit)  # its windows were offered (taken) already


def test_a_root_takes_a_unit_in_on_the_loop_unless_it_waits_for_the_store(tmp_path: Path) -> None:
    """CollectorService._inline at the root: a unit whose windows the table holds, or knows new (above the highest
    index its store may hold), goes in on the event loop; one that needs a read first (a series' top unknown) is
    declined (NOT_INLINE, nothing done: no ack, nothing held) and parks on the pool's path as before (before: the
    root declined every unit)."""
    root = Root(tmp_path / "root.db", True)
    for r in range(RACKS):
        root.receive(r, opening(r))
    acks = root.streams[0].answers.acks

    def inline(rack: int, step: int) -> object:
        return root.service._inline(root.streams[rack], root.service._receive(unit_bytes(rack, step + 1, step,
                                                                                         [(0, 0)], False, False)))

    assert inline(0, 0) is NOT_INLINE and len(acks) == 1, "its series' top is not known yet: it waits for a read"
    assert root.node.durability.outstanding() == 0 and not root.node.table.windows
    root.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False, False))  # parks, read, taken in
    assert inline(1, 0) is None, "the window is held: nothing to read"
    assert inline(0, 1) is None, "above the highest index the store may hold: known new"
    assert [forward_pb2.Ack.FromString(a).status for a in acks] == [forward_pb2.Ack.RECEIVED] * 3
    root.flush(True, False)
    assert sorted(root.finaliser.final) == [_key(0, 0), _key(0, 1)]


@pytest.mark.parametrize("carried", ["captures", "fingerprints", "exits"])
def test_a_root_declines_on_the_loop_a_unit_carrying_forensics(tmp_path: Path, carried: str) -> None:
    """At the root a unit with captures, fingerprints or rank exits is not taken in on the event loop (NOT_INLINE,
    nothing done): their hooks (storing captures, judging fingerprints and exits, a detector's work when the judging
    queue is full) are the root's own and unbounded, so the unit goes the pool's path (`_one`) as before; the same unit
    without them is taken inline (before: every such unit the table could take went in on the loop)."""
    root = Root(tmp_path / "root.db", True)
    for r in range(RACKS):
        root.receive(r, opening(r))
    root.receive(0, unit_bytes(0, 1, 0, [(0, 0)], False, False))  # the series' top read: later units known new
    acks = root.streams[1].answers.acks
    batch = forward_pb2.SummaryBatch.FromString(unit_bytes(1, 1, 1, [(0, 0)], False, False))
    getattr(batch, carried).add()
    unit = root.service._receive(batch.SerializeToString())
    assert root.service._inline(root.streams[1], unit) is NOT_INLINE
    assert len(acks) == 1 and _key(0, 1) not in root.node.table.windows, "declined: nothing done"
    assert root.service._one(root.streams[1], unit) is None  # the pool's path takes it
    assert [forward_pb2.Ack.FromString(a).seq for a in acks] == [0, 1]
    assert root.service._inline(root.streams[2], root.service._receive(
        unit_bytes(2, 1, 1, [(0, 0)], False, False))) is None, "the same unit without forensics goes in on the loop"


def test_merges_of_every_size_interleaved_on_two_threads_are_fastdigest_bit_for_bit() -> None:
    """The merge's two buffers are kept by each thread between its merges (tdigest.hpp's `Scratch`): merges growing,
    shrinking and past what a thread keeps (a merge of more than 2**17 centroids has buffers of its own) on two
    threads at once, each thread's merges in its own order and the two interleaved (a switch interval of 10 us: the
    GIL is held through each native merge, so merges alternate between the threads rather than overlap), each give
    every byte the oracle (fastdigest) gives; a smaller merge after a bigger one, on its thread or the other, must
    not read what the bigger one left in a buffer."""
    import sys
    import threading

    from summary_oracle import OracleSummary

    rng = np.random.default_rng(29)

    def children(n: int, size: int) -> tuple[list[Summary], list[OracleSummary]]:
        values = rng.lognormal(0.0, 1.0, (n, size))
        ours = [Summary.from_arrays(v, np.full(size, i), time_ns=5) for i, v in enumerate(values)]
        theirs = [OracleSummary.from_arrays(v, np.full(size, i), time_ns=5) for i, v in enumerate(values)]
        return ours, theirs

    cases = [children(n, size) for n, size in [(32, 400), (2, 50), (64, 400), (3, 8), (700, 400), (32, 400), (5, 30)]]
    assert sum(len(s._as_core().digest_bytes()) for s in cases[4][0]) > 2**17 * 16  # past the kept buffers
    expected = [OracleSummary.merge_all(theirs).to_bytes() for _, theirs in cases]
    orders = {"first": list(range(len(cases))) * 3, "second": list(reversed(range(len(cases)))) * 3}
    found: dict[str, list[tuple[int, bytes]]] = {name: [] for name in orders}
    sequence: list[str] = []  # which thread finished each merge, in the order they finished
    start = threading.Barrier(len(orders))

    def run(name: str) -> None:
        start.wait()
        for i in orders[name]:
            found[name].append((threading.get_ident(), Summary.merge_all(cases[i][0]).to_bytes()))
            sequence.append(name)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        threads = [threading.Thread(target=run, args=(name,)) for name in orders]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(120)
    finally:
        sys.setswitchinterval(interval)
    assert not any(thread.is_alive() for thread in threads)
    for name, order in orders.items():
        assert [merged for _, merged in found[name]] == [expected[i] for i in order], name
    assert len({ident for name in orders for ident, _ in found[name]}) == 2, "two threads merged"
    switches = sum(a != b for a, b in zip(sequence, sequence[1:]))
    assert switches >= 2, f"the threads' merges interleaved: {sequence}"


def test_a_windows_merge_holds_its_sources_run_optimised_before_any_encode() -> None:
    """A window's merge (`Batch.merged`) of 32 children of 512 contiguous ranks each holds its 16,384 sources as a run,
    not as the bitset a many-way union leaves (8 KB): what reads the sources before the encode (the root's `figures`)
    reads a few bytes. The same set, the same encoded bytes as the merge of the same children by `Summary.merge_all`."""
    table = _native.Windows()
    slot, _ = table.slot("job", 0, "m", 0, 0, 32 * 512)
    rng = np.random.default_rng(5)
    children = []
    for child in range(32):
        ranks = np.arange(child * 512, (child + 1) * 512, dtype=np.int64)
        children.append(Summary.from_bytes(Summary.from_arrays(rng.lognormal(0, 1, 512), ranks, time_ns=1).to_bytes()))
        table.offer_core(slot, children[-1]._as_core(), child, 0)
    merged = table.take(slot).merged()
    assert len(merged.sources_bytes()) < 64
    assert BitMap.deserialize(merged.sources_bytes()) == BitMap(range(32 * 512))
    assert merged.encode() == Summary.merge_all(children).to_bytes()
