"""Every drop path counts what it dropped and releases what it held (issue 14 item 1)."""

from __future__ import annotations

from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines, Part
from helpers_tree import summary_of


def test_the_oldest_window_dropped_from_a_full_table_is_counted_and_its_holds_released() -> None:
    acked: list[tuple[str, int]] = []
    refusals: list = []

    def ack_down(origin, *rest, refused=None):
        acked.append(origin)
        refusals.append(refused)

    node = Node("n", Deadlines(), ack_down=ack_down, max_windows=2)
    for step in range(3):
        origin = ("child", step + 1)
        part = Part(Key("job", "loss", step), [origin], BitMap([0]), built=summary_of({0: float(step)}))
        assert node.offer(part, expected=1)[0] == "accepted"
    assert node.counters["dropped_windows"] == 1
    assert acked == [("child", 1)]  # the dropped window's unit is no longer held: the child stops retaining it
    # ... and it is told the window was dropped, not that it is durable (its ranks' close() is not True).
    assert [(r.key, r.index) for r in refusals[0]] == [(Key("job", "loss", 0), 0)]
    assert "window table was full" in refusals[0][0].reason
    assert node.durability.outstanding() == 2
    assert Key("job", "loss", 0) not in node.table.windows
