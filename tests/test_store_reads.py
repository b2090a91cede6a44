"""The root's store reads off the node's lock (issue 27 item 2, collectors/root/reads.py): the ordering hazards of
reads in flight, made deterministic by holding the read (a gate on the store's reader calls) while the tree goes on.

* a reload in flight while the same window receives new parts from another child: both wait for the reload (a
  part let in first would create the window afresh, and its commit replace the stored row: data lost);
* a run-ledger recall in flight while two children claim the same rank: judged after the recall, so the first
  process (in the store) keeps the rank and the second run is refused; with nothing stored, in arrival order;
* the store failing during a read: the unit stays parked, the read is retried, nothing is acknowledged before;
* the node's lock is free during a read: another child's new window is acknowledged meanwhile;
* a window the table let go while its commit is under way is read only after the commit.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import generate_latest
from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.delivery.node import Node
from collectors.delivery.runs import Claim
from collectors.delivery.windows import Deadlines, Part
from collectors.root.finalise import Finaliser
from collectors.root.reads import StoreReads
from collectors.root.store import Store
from helpers_tree import RawChild, counters, make_root, stop_all, summary_of, wait_for, window
from telemetry.v1 import forward_pb2

RECEIVED, DURABLE, REJECTED = forward_pb2.Ack.RECEIVED, forward_pb2.Ack.DURABLE, forward_pb2.Ack.REJECTED_OVERLAP


class Gate:
    """Holds one of the store's read calls until opened: a read in flight, for as long as the test wants."""

    def __init__(self, store: Store, name: str) -> None:
        self.entered = threading.Event()
        self.opened = threading.Event()
        real = getattr(store, name)

        def gated(*args, **kwargs):
            self.entered.set()
            assert self.opened.wait(20), "the test never opened the gate"
            return real(*args, **kwargs)

        setattr(store, name, gated)


@contextmanager
def held(root, read: str, *children: RawChild) -> Iterator[Gate]:
    """The root's store read `read` held (a Gate) while the test runs; after it, whatever it did, the gate opened,
    the children closed and the root stopped."""
    gate = Gate(root.store, read)
    try:
        yield gate
    finally:
        gate.opened.set()
        for child in children:
            child.close()
        stop_all(root)


def _exported(root) -> dict[str, float]:
    """The root's store-read figures as its /metrics exposition gives them."""
    text = generate_latest(root.wiring.metrics.registry).decode()
    return {name: float(value) for name, value in re.findall(r"^(telemetry_store_read\w*) (\S+)$", text, re.M)}


def _no_ack_for(child: RawChild, seconds: float = 0.3) -> bool:
    time.sleep(seconds)
    return child.acks.empty()


def _persisted(tmp_path, *windows: forward_pb2.WindowSummary):
    """A root that persisted `windows` (from child "first"), stopped: its file, to restart a root on."""
    db = tmp_path / "root.db"
    root = make_root(db)
    child = RawChild(root.address, "first")
    try:
        child.ack()
        seq = child.batch(*windows)
        child.ack_for(seq, DURABLE)
    finally:
        child.close()
        root.stop(0)
    return db


def test_a_reload_in_flight_holds_new_parts_of_the_same_window_until_it_is_installed(tmp_path):
    db = _persisted(tmp_path, window("re", "loss", 1, {0: 1.0, 1: 2.0}, expected=4))
    root = make_root(db)
    resender, other = RawChild(root.address, "first"), RawChild(root.address, "other")
    with held(root, "load_many", resender, other) as gate:
        resender.ack(), other.ack()
        resent = resender.batch(window("re", "loss", 1, {0: 1.0, 1: 2.0}, expected=4), seq=1)
        assert gate.entered.wait(10), "the resent window is read from the store"
        new = other.batch(window("re", "loss", 1, {2: 0.5}, expected=4))
        assert _no_ack_for(other), "a new part of a window being read waits for the read"
        assert _no_ack_for(resender)
        gate.opened.set()
        resender.ack_for(resent, DURABLE)
        other.ack_for(new, DURABLE)
        row = wait_for(lambda: (found := root.store.load(Key("re", "loss", 1))) is not None and found.late
                       and found, what="the late delta merged into the stored row")
        assert (sorted(row.summary.sources), row.late, row.summary.min) == ([0, 1, 2], 1, 0.5)
        assert counters(root)["duplicates"] == 1


def _claiming(child: RawChild, job: str, step: int, process: int) -> int:
    """A unit naming rank 0 of `job` run by `process` (a run claim), with a window of that rank."""
    child.seq += 1
    states = forward_pb2.RankStates(job=job, alive=BitMap([0]).serialize(), world_size=1, host_ranks=[0],
                                    hosts=[f"host-{process}"], processes=[process])
    child.send(forward_pb2.SummaryBatch(sender_id=child.sender_id, seq=child.seq, ranks=[states],
                                        windows=[window(job, "loss", step, {0: float(step)}, expected=1)]))
    return child.seq


def _verdict(child: RawChild, seq: int) -> int:
    while True:
        ack = child.ack()
        assert ack is not None, child.error
        if ack.seq == seq and ack.status in (RECEIVED, REJECTED):
            return ack.status if not ack.rejections or ack.rejections[0].overlapping_sources else -1


def test_a_recall_in_flight_judges_two_claims_of_one_rank_after_it(tmp_path):
    first_process, second_run = 0x1111, 0x2222
    db = tmp_path / "root.db"
    root = make_root(db)
    child = RawChild(root.address, "rack-a")
    child.ack()
    child.ack_for(_claiming(child, "run", 1, first_process), DURABLE)  # the claim is committed with the window
    child.close()
    root.stop(0)
    root = make_root(db)  # a restarted root: the claim is in its store only
    impostor, original = RawChild(root.address, "rack-b"), RawChild(root.address, "rack-a")
    with held(root, "load_runs", impostor, original) as gate:
        impostor.ack(), original.ack()
        refused = _claiming(impostor, "run", 2, second_run)  # first to arrive, but a second run
        assert gate.entered.wait(10), "the job's claims are recalled from the store"
        accepted = _claiming(original, "run", 3, first_process)
        assert _no_ack_for(impostor) and _no_ack_for(original), "both claims wait for the recall"
        gate.opened.set()
        assert _verdict(impostor, refused) == -1, "the second run's window is refused"
        assert _verdict(original, accepted) == RECEIVED
        original.ack_for(accepted, DURABLE)


def test_claims_waiting_on_one_recall_are_judged_in_arrival_order(tmp_path):
    root = make_root(tmp_path / "root.db")
    one, two = RawChild(root.address, "rack-a"), RawChild(root.address, "rack-b")
    with held(root, "load_runs", one, two) as gate:
        one.ack(), two.ack()
        first = _claiming(one, "fresh", 1, 0xAAAA)
        assert gate.entered.wait(10)
        second = _claiming(two, "fresh", 1, 0xBBBB)
        assert _no_ack_for(two)
        gate.opened.set()
        assert _verdict(one, first) == RECEIVED
        assert _verdict(two, second) == -1
        one.ack_for(first, DURABLE)
        # ... and the accepted claim is in the store (written with the commit), for a root restarted later
        assert {rank: c.process for rank, c in root.store.load_runs("fresh").items()} == {0: 0xAAAA}


def test_a_failing_read_keeps_the_unit_parked_and_is_retried(tmp_path):
    db = _persisted(tmp_path, window("fail", "loss", 1, {0: 1.0}, expected=2))
    root = make_root(db)
    real = root.store.load_many
    calls: list[int] = []
    failing = threading.Event()
    failing.set()

    def broken(keys):
        calls.append(len(keys))
        if failing.is_set():
            raise sqlite3.OperationalError("disk I/O error")
        return real(keys)

    root.store.load_many = broken
    child = RawChild(root.address, "first")
    try:
        child.ack()
        seq = child.batch(window("fail", "loss", 1, {0: 1.0}, expected=2), seq=1)
        wait_for(lambda: len(calls) >= 2, what="the read retried")
        assert child.acks.empty(), "nothing acknowledged while the window could not be read"
        assert root.reads.read_failures >= 2
        failing.clear()
        child.ack_for(seq, DURABLE)
        assert counters(root)["duplicates"] == 1, "the resend was recognised once the read succeeded"
        row = root.store.load(Key("fail", "loss", 1))
        assert row is not None and (sorted(row.summary.sources), row.late) == ([0], 0)
        exported = _exported(root)  # on the root's /metrics
        assert exported["telemetry_store_read_failures_total"] == root.reads.read_failures >= 2
        assert exported["telemetry_store_reads_parked_units_total"] >= 1
        assert exported["telemetry_store_reads_windows_total"] >= 1
        assert exported["telemetry_store_reads_waiting_units"] == 0
    finally:
        failing.clear()
        child.close()
        stop_all(root)


def test_the_nodes_lock_is_free_while_a_read_is_in_flight(tmp_path):
    db = _persisted(tmp_path, window("old", "loss", 1, {0: 1.0}, expected=1))
    root = make_root(db)
    fresh = RawChild(root.address, "fresh")
    fresh.ack()
    fresh.ack_for(fresh.batch(window("new", "loss", 1, {0: 1.0}, expected=1)), DURABLE)  # its series is known now
    resender = RawChild(root.address, "first")
    with held(root, "load_many", fresh, resender) as gate:
        resender.ack()
        resent = resender.batch(window("old", "loss", 1, {0: 1.0}, expected=1), seq=1)
        assert gate.entered.wait(10)
        seq = fresh.batch(window("new", "loss", 2, {0: 2.0}, expected=1))
        fresh.ack_for(seq, DURABLE)  # taken in, committed and acknowledged while the read is held
        assert not gate.opened.is_set() and resender.acks.empty()
        gate.opened.set()
        resender.ack_for(resent, DURABLE)


def test_a_window_let_go_during_its_commit_is_read_after_the_commit(tmp_path):
    """The reader sees the last committed state: a window the table let go while its commit is under way must
    not be read before that commit ends (it would be read without the committed parts, and its next commit
    would replace the row with less)."""
    node = Node("root", Deadlines(), ack_down=lambda *a, **k: None)
    finaliser = Finaliser(Store(tmp_path / "root.db"))
    node.sink = finaliser
    reads = StoreReads(finaliser.store, finaliser, node)
    key = Key("job", "loss", 1)
    with node.lock:
        node.offer(Part(key, [("child", 1)], BitMap([0]), built=summary_of({0: 1.0})), expected=1)
        commit = finaliser.ship(node, [node.table.windows[key]], 0.0)
        assert commit is not None
        node.table.windows.pop(key)  # let go meanwhile (its budget)
        assert reads.needs([key], []).keys == {key}
        ready = reads.park(reads.needs([key], []), lambda: None)
    assert reads.step() > 0 and not ready.done(), "not read while its commit is under way"
    commit()
    assert reads.step() == 0 and ready.done()
    with node.lock:
        win = node.table.windows[key]
        assert list(win.sources) == [0] and win.sealed
        assert finaliser.final[key].summary.count == 1


def test_a_child_gone_while_its_unit_waits_resends_it_and_it_is_absorbed_once(tmp_path):
    """The stream ends while its unit waits for a read: the unit is dropped unjudged (nothing held, nothing
    acknowledged), the read still lands, and the child's resend after it reconnects is one duplicate, durable."""
    db = _persisted(tmp_path, window("gone", "loss", 1, {0: 1.0, 1: 2.0}, expected=2))
    root = make_root(db)
    gate = Gate(root.store, "load_many")
    child = RawChild(root.address, "first")
    try:
        child.ack()
        child.batch(window("gone", "loss", 1, {0: 1.0, 1: 2.0}, expected=2), seq=1)
        assert gate.entered.wait(10)
        child.close()
        wait_for(lambda: "first" not in root.service._links, what="the stream's end noticed")
        gate.opened.set()
        wait_for(lambda: root.reads.waiting() == 0, what="the batch done")
        assert counters(root)["duplicates"] == 0, "the unit of the stream that ended was not taken in"
        child = RawChild(root.address, "first")
        child.ack()
        seq = child.batch(window("gone", "loss", 1, {0: 1.0, 1: 2.0}, expected=2), seq=1)
        child.ack_for(seq, DURABLE)
        assert counters(root)["duplicates"] == 1
        row = root.store.load(Key("gone", "loss", 1))
        assert row is not None and (sorted(row.summary.sources), row.late) == ([0, 1], 0)
        with root.node.lock:
            assert not root.node.durability._refs and not root.node.durability.unheld_releases, "nothing left held"
    finally:
        gate.opened.set()
        child.close()
        stop_all(root)


def test_a_unit_whose_read_cannot_be_installed_ends_its_stream_and_its_resend_is_absorbed(tmp_path):
    """A bug while installing what was read must not leave the unit waiting for ever (its stream would hang): the
    stream ends with INTERNAL, the child reconnects and resends, and the resend is judged afresh."""
    db = _persisted(tmp_path, window("bug", "loss", 1, {0: 1.0}, expected=1))
    root = make_root(db)
    real = root.finaliser.install
    broken = threading.Event()
    broken.set()

    def install(node, row):
        if broken.is_set():
            raise RuntimeError("injected")
        real(node, row)

    root.finaliser.install = install
    child = RawChild(root.address, "first")
    try:
        child.ack()
        child.batch(window("bug", "loss", 1, {0: 1.0}, expected=1), seq=1)
        assert child.ack() is None and child.error is not None and child.error.code().name == "INTERNAL"
        broken.clear()
        child.close()
        wait_for(lambda: "first" not in root.service._links, what="the stream's end noticed")
        child = RawChild(root.address, "first")
        child.ack()
        child.ack_for(child.batch(window("bug", "loss", 1, {0: 1.0}, expected=1), seq=1), DURABLE)
        assert counters(root)["duplicates"] == 1
    finally:
        broken.clear()
        child.close()
        stop_all(root)


def test_the_reader_opens_the_stores_own_file_whatever_its_name(tmp_path):
    """The reader's connection is a read-only URI: a path with '#', '?' or '%' must still name the store's file
    (unquoted, SQLite read 'a#b.db' as the file 'a' and ignored mode=ro; a restarted root then forgot its claims)."""
    for name in ("a#b.db", "a?b.db", "a%41b.db", "sp ace.db"):
        path = tmp_path / name
        store = Store(path)
        try:
            store.save_runs("job", {0: Claim(7, "host-a")})
            store.save_runs("job", {1: Claim(2**64 - 1, "host-b")})
        finally:
            store.close()
        again = Store(path)
        try:
            assert again.load_runs("job") == {0: Claim(7, "host-a"), 1: Claim(2**64 - 1, "host-b")}, name
        finally:
            again.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(("-wal", "-shm"))) == \
        sorted(("a#b.db", "a?b.db", "a%41b.db", "sp ace.db"))
