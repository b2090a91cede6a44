"""Every drop path counts what it dropped and releases what it held (issue 14 item 1); and only a real loss
is a drop (issue 28 item 4): the window table's budget forgets durable windows first, silently."""

from __future__ import annotations

import logging

from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.delivery.node import Node
from collectors.delivery.windows import SOURCE_BYTES, WINDOW_BYTES, Deadlines, OutPart, Part, Window
from helpers_tree import summary_of

ONE = WINDOW_BYTES + SOURCE_BYTES  # what a window with one source costs against the budget


class _Recorder:
    def __init__(self) -> None:
        self.acked: list[tuple[str, int]] = []
        self.refusals: list = []

    def __call__(self, origin, *rest, refused=None) -> None:
        self.acked.append(origin)
        self.refusals.append(refused)


class _PersistAtOnce:
    """A sink like the root's Finaliser, minus SQLite: whatever is due is stored and acknowledged at once."""

    def __init__(self) -> None:
        self.forgotten: list[Key] = []

    def ship(self, node: Node, windows: list[Window], now: float):
        outs: list[OutPart] = [win.take(late=win.forwarded) for win in windows]
        for win in windows:
            win.forwarded = True
        node.release_all(outs)
        return None

    def forget(self, keys: list[Key]) -> None:
        self.forgotten.extend(keys)


def _part(step: int, origin: tuple[str, int]) -> Part:
    return Part(Key("job", "loss", step), [origin], BitMap([0]), built=summary_of({0: float(step)}))


def test_durable_windows_forgotten_for_the_budget_are_no_loss() -> None:
    """Issue 28's reproduction: five windows, each acknowledged durable, through a table with room for two.
    The fixed cap counted three of them as dropped (and warned three times) though nothing was lost."""
    ack = _Recorder()
    node = Node("n", Deadlines(), ack_down=ack, window_budget_bytes=2 * ONE + ONE // 2)
    node.sink = sink = _PersistAtOnce()
    node.complete = lambda win: True
    for step in range(5):
        assert node.offer(_part(step, ("child", step + 1)), expected=1)[0] == "accepted"
        node.flush()
    assert ack.acked == [("child", n) for n in range(1, 6)] and ack.refusals == [None] * 5  # all DURABLE
    assert node.counters["dropped_windows"] == 0
    assert node.table.evicted == 3 and len(sink.forgotten) == 3
    assert node.table.bytes <= node.table.max_bytes


def test_settled_windows_go_before_an_unsettled_one() -> None:
    ack = _Recorder()
    node = Node("n", Deadlines(), ack_down=ack, window_budget_bytes=3 * ONE + ONE // 2)
    node.sink = _PersistAtOnce()
    node.complete = lambda win: True
    node.offer(_part(0, ("child", 1)), expected=1)  # the oldest, but still pending: it must stay
    for step in (1, 2):
        node.table.window(Key("job", "loss", step), 1)
    node.offer(_part(1, ("child", 2)), expected=1)
    node.offer(_part(2, ("child", 3)), expected=1)
    node.table.due(0.0, lambda win: win.key.index > 0)  # seal 1 and 2 only ...
    for key in (Key("job", "loss", 1), Key("job", "loss", 2)):
        win = node.table.windows[key]
        node.release_all([win.take(late=False)])  # ... and make them durable
    node.offer(_part(3, ("child", 4)), expected=1)  # over budget: a settled window goes, not step 0
    assert Key("job", "loss", 0) in node.table.windows
    assert node.counters["dropped_windows"] == 0 and node.table.evicted >= 1


def test_the_oldest_unstored_window_dropped_from_a_full_table_is_counted_and_its_holds_released() -> None:
    ack = _Recorder()
    node = Node("n", Deadlines(), ack_down=ack, window_budget_bytes=2 * ONE + ONE // 2)
    for step in range(3):
        assert node.offer(_part(step, ("child", step + 1)), expected=1)[0] == "accepted"
    assert node.counters["dropped_windows"] == 1
    assert ack.acked == [("child", 1)]  # the dropped window's unit is no longer held: the child stops retaining it
    # ... and it is told the window was dropped, not that it is durable (its ranks' close() is not True).
    assert [(r.key, r.index) for r in ack.refusals[0]] == [(Key("job", "loss", 0), 0)]
    assert "over its budget" in ack.refusals[0][0].reason
    assert node.durability.outstanding() == 2
    assert Key("job", "loss", 0) not in node.table.windows


def test_a_window_only_in_flight_is_let_go_without_a_loss() -> None:
    """Its data is in the outbox (or being committed): it settles its holds when that is acknowledged."""
    ack = _Recorder()
    node = Node("n", Deadlines(), ack_down=ack, window_budget_bytes=2 * ONE + ONE // 2)
    node.offer(_part(0, ("child", 1)), expected=1)
    win = node.table.windows[Key("job", "loss", 0)]
    out = win.take(late=False)
    win.inflight[7] = out
    node.offer(_part(1, ("child", 2)), expected=1)
    node.offer(_part(2, ("child", 3)), expected=1)
    assert Key("job", "loss", 0) not in node.table.windows
    assert node.counters["dropped_windows"] == 0 and ack.acked == []
    node.release_all([out])  # the parent's DURABLE arrives
    assert ack.acked == [("child", 1)] and ack.refusals == [None]


def test_the_drop_warning_is_rate_limited(caplog) -> None:
    node = Node("n", Deadlines(), ack_down=_Recorder(), window_budget_bytes=ONE + ONE // 2)
    with caplog.at_level(logging.WARNING, logger="collectors.delivery.node"):
        for step in range(1000):
            node.offer(_part(step, ("child", step + 1)), expected=1)
    assert node.counters["dropped_windows"] == 999
    assert len([r for r in caplog.records if "dropped" in r.getMessage()]) == 1


def test_the_budget_is_in_bytes_and_counts_sources() -> None:
    node = Node("n", Deadlines(), ack_down=_Recorder(), window_budget_bytes=10 * WINDOW_BYTES)
    wide = Part(Key("job", "loss", 0), [("child", 1)], BitMap(range(4096)),
                built=summary_of(dict.fromkeys(range(4096), 1.0)))
    node.offer(wide, expected=4096)
    assert node.table.bytes == WINDOW_BYTES + 4096 * SOURCE_BYTES
