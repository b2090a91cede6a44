"""The delivery core's invariants where conventions met and broke (issue 27): each defect reproduced by injecting
the interleaving that broke it (these failed on the code before the fix), with the real Node, Finaliser and
SQLite Store.
"""

from __future__ import annotations

import threading

import pytest
from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines, Durability, Part
from collectors.root.finalise import Finaliser
from collectors.root.store import Store, StoreLost
from helpers_tree import summary_of


class _Acks:
    """The tier's ack_down: every acknowledgement, in order, with what it refused."""

    def __init__(self) -> None:
        self.acks: list[tuple[tuple[str, int], object]] = []

    def __call__(self, origin, *rest, refused=None) -> None:
        self.acks.append((origin, refused))


def _part(step: int, origin: tuple[str, int], source: int = 0) -> Part:
    return Part(Key("job", "loss", step), [origin], BitMap([source]), built=summary_of({source: float(step)}))


def _root(tmp_path, store: Store | None = None) -> tuple[Node, Finaliser, _Acks]:
    acks = _Acks()
    node = Node("root", Deadlines(), ack_down=acks)
    finaliser = Finaliser(store or Store(tmp_path / "root.db"))
    node.sink = finaliser
    node.complete = lambda win: True
    return node, finaliser, acks


# ---------------------------------------------------------------- Durability: one acknowledgement per origin
def test_a_release_of_an_origin_not_held_is_an_error_not_a_second_ack(caplog) -> None:
    acks: list[tuple] = []
    durability = Durability(lambda origin, refused: acks.append((origin, refused)))
    durability.hold(("child", 1))
    durability.release(("child", 1))
    assert acks == [(("child", 1), [])]  # DURABLE, once
    durability.release(("child", 1), refusal=None)  # a double release
    durability.release(("child", 2))  # never held at all
    assert acks == [(("child", 1), [])], "a release of an origin not held acknowledged it (again)"
    assert durability.unheld_releases == 2
    assert "not held" in caplog.text
    assert durability.outstanding() == 0


def test_a_refusal_after_durable_is_not_sent(caplog) -> None:
    """The second release carries a refusal: before, the sender got REFUSED after DURABLE."""
    acks: list[tuple] = []
    durability = Durability(lambda origin, refused: acks.append((origin, refused)))
    durability.hold(("child", 7), times=2)
    durability.release(("child", 7))
    durability.release(("child", 7))
    from collectors.delivery.windows import Refusal
    durability.release(("child", 7), Refusal(Key("job", "loss", 1), "late"))
    assert acks == [(("child", 7), [])]
    assert durability.unheld_releases == 1


# ---------------------------------------------------------------- Finaliser: a failed commit into a gone window
class _FailingStore(Store):
    """A real store whose next save fails (a full disk), after running `before` (the intake meanwhile)."""

    def __init__(self, path, before=None) -> None:
        super().__init__(path)
        self.fail_next = False
        self.before = before

    def save(self, rows: list[Row], jobs: dict[str, int], runs: dict | None = None) -> None:
        if self.before is not None:
            before, self.before = self.before, None
            before()
        if self.fail_next:
            self.fail_next = False
            raise OSError(28, "No space left on device")
        super().save(rows, jobs, runs)


def test_a_failed_commit_of_a_window_dropped_meanwhile_releases_its_holds(tmp_path) -> None:
    """The window is shipped, the table lets it go during the commit (its budget), the commit fails: its parts
    must not go back into the orphaned window (nothing would ever ship or release them, and the rank's close()
    would never be True): they are refused to their senders and counted."""
    node, finaliser, acks = _root(tmp_path)
    store = _FailingStore(tmp_path / "fail.db")
    finaliser.store = store
    assert node.offer(_part(1, ("child", 1)), expected=1)[0] == "accepted"
    key = Key("job", "loss", 1)

    def dropped_meanwhile() -> None:  # what WindowTable._make_room does to the oldest window, under the lock
        with node.lock:
            win = node.table._remove(key)
            node._dropped(win)
    store.before, store.fail_next = dropped_meanwhile, True
    with pytest.raises(OSError):
        node.flush()
    assert node.durability.outstanding() == 0, "the failed commit orphaned the parts' durability holds"
    assert [origin for origin, _ in acks.acks] == [("child", 1)]
    assert acks.acks[0][1], "what was never stored is refused, not acknowledged durable"
    assert node.counters["dropped_windows"] == 1


def test_a_failed_commit_of_a_window_still_held_retries_it(tmp_path) -> None:
    """The usual failure (the window is still in the table) is unchanged: retried at the next flush."""
    node, finaliser, acks = _root(tmp_path)
    store = _FailingStore(tmp_path / "retry.db")
    finaliser.store = store
    node.offer(_part(1, ("child", 1)), expected=1)
    store.fail_next = True
    with pytest.raises(OSError):
        node.flush()
    assert acks.acks == [] and node.durability.outstanding() == 1
    node.flush()
    assert acks.acks == [(("child", 1), None)]
    assert store.load(Key("job", "loss", 1)) is not None


# ---------------------------------------------------------------- Finaliser: store loss while intake goes on
class _LostOnce(Store):
    """A store whose file is found lost on the next save; its reopen lets the intake run (another thread)."""

    def __init__(self, path, intake) -> None:
        super().__init__(path)
        self.intake = intake
        self.lost = True

    def save(self, rows: list[Row], jobs: dict[str, int], runs: dict | None = None) -> None:
        if self.lost:
            self.lost = False
            raise StoreLost("the store's file was deleted")
        super().save(rows, jobs, runs)


class _KeyedRow(Row):
    """A row whose key, read while the held rows are written again, lets another thread's intake run: what a
    thread switch in the middle of that loop allows."""

    intake: threading.Thread | None = None

    def __getattribute__(self, name: str):
        if name == "key" and _KeyedRow.intake is not None:
            thread, _KeyedRow.intake = _KeyedRow.intake, None
            thread.start()
            thread.join(0.3)
        return object.__getattribute__(self, name)


def test_store_loss_recovery_reads_the_held_windows_under_the_lock(tmp_path) -> None:
    """Recovering from a lost file writes again every window held in memory, without the node's lock (it is a
    commit); intake meanwhile inserts into `final` (a reload) under the lock. Before, the loop read `final`
    without the lock and died of "dictionary changed size during iteration"."""
    node, finaliser, acks = _root(tmp_path)
    for step in range(3):
        held = Key("job", "loss", 100 + step)
        finaliser.final[held] = _KeyedRow(held, 1, summary_of({0: 1.0}), 0, 1)

    def intake() -> None:
        with node.lock:
            for step in range(50):
                key = Key("job", "loss", 200 + step)
                finaliser.final[key] = Row(key, 1, summary_of({0: 2.0}), 0, 1)
    _KeyedRow.intake = threading.Thread(target=intake, daemon=True)
    finaliser.store = _LostOnce(tmp_path / "lost.db", intake)
    node.offer(_part(1, ("child", 1)), expected=1)
    node.flush()  # raised RuntimeError before the fix
    assert acks.acks == [(("child", 1), None)]
    assert finaliser.files_lost == 1
    assert finaliser.store.load(Key("job", "loss", 1)) is not None
    assert finaliser.store.load(Key("job", "loss", 100)) is not None


# ---------------------------------------------------------------- the window's lifecycle, and the lock discipline
def test_a_windows_lifecycle_goes_through_its_transitions(tmp_path) -> None:
    """take -> dispatch -> settle, a duplicate absorbed into what is open, a failed dispatch restored."""
    node, _, _ = _root(tmp_path)
    with node.lock:
        node.offer(_part(1, ("child", 1)), expected=2)
        win = node.table.windows[Key("job", "loss", 1)]
        out = win.take(late=False)
        win.dispatch(7, out)
        assert win.forwarded and not win.settled
        assert win.absorb([("child", 9)]) == 1 and out.absorbed == [("child", 9)]
        assert win.settle(7) is out and win.settle(7) is None, "a slot settles once"
        win.restore(out)
        assert win.pending == out.constituents and win.absorbed == [("child", 9)]
        assert node.table.settle(Key("job", "loss", 2), 7) is None  # a window the table does not hold


def test_the_sinks_check_they_run_under_the_nodes_lock(tmp_path) -> None:
    node, finaliser, _ = _root(tmp_path)
    with pytest.raises(AssertionError, match="lock"):
        finaliser.ship(node, [], 0.0)
    with node.lock:
        assert finaliser.ship(node, [], 0.0) is None


def test_world_size_without_the_unions(tmp_path) -> None:
    """Node.world_size (asked per commit and per step window at the root) is what states(job) says."""
    from collectors.delivery.node import RankView

    node, _, _ = _root(tmp_path)
    node.child_ranks["rack0"] = {"job": RankView(alive=BitMap(range(0, 8)), world_size=16,
                                                 hosts={r: "h0" for r in range(8)})}
    node.child_ranks["rack1"] = {"job": RankView(alive=BitMap(range(8, 16)), world_size=16)}
    node.own_ranks = {"own": RankView(alive=BitMap([0]), world_size=3)}
    for job in ("job", "own", "none"):
        assert node.world_size(job) == node.states(job).world_size == node.ranks(job).world_size


# ---------------------------------------------------------------- Finaliser: parts that do not merge
def test_a_window_whose_parts_do_not_merge_is_refused_and_the_others_stored(tmp_path, monkeypatch) -> None:
    """At the root (a Python table): the first window's merge raises (Window.take), a late part's merge into the
    stored window raises (Finaliser.ship): each is refused to its senders and counted, the other window of the
    flush is stored, and nothing stays held (before: the failing window's parts and every window after it in the
    flush were taken and lost, their senders never acknowledged)."""
    import collectors.delivery.windows as windows_module
    import collectors.root.finalise as finalise_module

    node, finaliser, acks = _root(tmp_path)
    for step in (1, 2):
        for source in (0, 1):
            assert node.offer(_part(step, ("child", 10 * step + source), source), expected=2)[0] == "accepted"
    merge_parts = windows_module.merge_parts
    calls: list[int] = []

    def first_fails(parts: list[Part]):  # type: ignore[no-untyped-def]  # merge_parts, raising the first time
        calls.append(len(parts))
        if len(calls) == 1:
            raise ValueError("cannot merge summaries with k=3 and k=5")
        return merge_parts(parts)

    monkeypatch.setattr(windows_module, "merge_parts", first_fails)
    node.flush()
    assert node.counters["bad_inputs"] == 1
    refused = [(origin, refusals) for origin, refusals in acks.acks if refusals]
    assert len(refused) == 2 and all("could not be merged (cannot merge summaries" in r[0].reason
                                     for _, r in refused), acks.acks
    assert len(acks.acks) == 4, "the other window's parts are stored and acknowledged"
    assert len(finaliser.final) == 1
    stored = next(iter(finaliser.final))
    assert node.offer(_part(stored.index, ("child", 99), 5), expected=2)[0] == "accepted"  # a late part

    class _Broken:
        @staticmethod
        def merge_all(summaries: list[object]) -> object:
            raise OverflowError("intermediate overflow in fsum")

    monkeypatch.setattr(finalise_module, "Summary", _Broken)
    node.flush()
    assert node.counters["bad_inputs"] == 2
    assert acks.acks[-1][0] == ("child", 99) and "could not be merged into the stored window" in acks.acks[-1][1][0].reason
    assert node.durability.outstanding() == 0
    assert node.durability.unheld_releases == 0


def test_a_later_part_of_a_window_refused_at_the_root_is_refused_not_stored_as_its_first(tmp_path,
                                                                                      monkeypatch) -> None:
    """A window whose parts did not merge at the root has no row: a part of it that comes later (a late host) is
    refused with it, never stored as the window's first row (late=0) holding only its own ranks, which detectors
    would read as the whole step (before: it was). A resend of the refused parts is refused again."""
    import collectors.delivery.windows as windows_module

    node, finaliser, acks = _root(tmp_path)
    for source in (0, 1):
        assert node.offer(_part(1, ("child", 10 + source), source), expected=3)[0] == "accepted"

    def fails(parts: list[Part]) -> object:  # merge_parts, raising
        raise ValueError("cannot merge summaries with k=3 and k=5")

    monkeypatch.setattr(windows_module, "merge_parts", fails)
    node.flush()
    monkeypatch.undo()
    assert node.counters["bad_inputs"] == 1
    reason = acks.acks[0][1][0].reason
    assert node.offer(_part(1, ("child", 12), 2), expected=3)[0] == "accepted"  # the late host
    node.flush()
    assert Key("job", "loss", 1) not in finaliser.final, "a later part stored as the refused window's first row"
    assert acks.acks[-1][0] == ("child", 12) and [r.reason for r in acks.acks[-1][1]] == [reason], acks.acks
    assert node.counters["bad_inputs"] == 2
    with node.lock:
        node.durability.hold(("child", 10))
        assert node.offer(_part(1, ("child", 10), 0), expected=3, preheld=True)[0] == "duplicate"  # a resend
    assert acks.acks[-1][0] == ("child", 10) and [r.reason for r in acks.acks[-1][1]] == [reason], acks.acks
    assert node.durability.outstanding() == 0
    assert node.durability.unheld_releases == 0


def test_late_parts_that_do_not_merge_into_stored_windows_are_logged_rate_limited(tmp_path, monkeypatch,
                                                                                  caplog) -> None:
    """A late part that does not merge into its stored window is logged at most once per interval (as Node.take's
    failed merges are): a sender repeating bad parts every flush must not flood the root's log (before: one line
    each)."""
    import collectors.root.finalise as finalise_module

    node, finaliser, acks = _root(tmp_path)
    for step in (1, 2):
        assert node.offer(_part(step, ("child", step), 0), expected=1)[0] == "accepted"
    node.flush()
    assert len(finaliser.final) == 2

    class _Broken:
        @staticmethod
        def merge_all(summaries: list[object]) -> object:
            raise OverflowError("intermediate overflow in fsum")

    monkeypatch.setattr(finalise_module, "Summary", _Broken)
    for step in (1, 2):
        assert node.offer(_part(step, ("child", 10 + step), 1), expected=1)[0] == "accepted"
        node.flush()
    assert node.counters["bad_inputs"] == 2
    lines = [r for r in caplog.records if "could not be merged into the stored window" in r.getMessage()]
    assert len(lines) == 1, [r.getMessage() for r in lines]
    assert node.durability.outstanding() == 0
