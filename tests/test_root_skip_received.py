"""A child that opens its Forward stream with `skip_received` (forward.proto) is answered without plain RECEIVED acks,
at the root and at a rack alike; an old child (no flag) is answered as before; `Upstream` opens so, and its units
still become durable against a parent that sends RECEIVED anyway (an old one). So senders and parents of either
version mix, each unit still gets exactly one DURABLE after what it acks is done, and overlaps are still told.

Why: each ack is a gRPC write at the parent and a read at the child (at the root, 32 of its 96 messages a step), and
`Upstream._on_ack` does nothing with a RECEIVED that carries no rejections. Restarts with quiet senders on both
sides are tests/test_tree_delivery.py's (every `Upstream` opens quiet).
"""

from __future__ import annotations

import time

import pytest

from helpers_tree import FakeParent, RawChild, make_collector, make_root, steps, stop_all, wait_for, window
from telemetry.v1 import forward_pb2

DURABLE = forward_pb2.Ack.DURABLE
RECEIVED = forward_pb2.Ack.RECEIVED
REJECTED = forward_pb2.Ack.REJECTED_OVERLAP


class QuietChild(RawChild):
    """A hand-driven child whose stream opens with skip_received, as `Upstream`'s does."""

    def send(self, batch: forward_pb2.SummaryBatch) -> None:
        if batch.seq == 0:
            batch.skip_received = True
        super().send(batch)


def _acks_until_durable(child: RawChild, seq: int) -> list[tuple[int, int]]:
    """(seq, status) of every ack up to and including `seq`'s DURABLE."""
    seen = []
    while True:
        ack = child.ack()
        assert ack is not None, f"stream ended: {child.error}"
        seen.append((ack.seq, ack.status))
        if ack.seq == seq and ack.status == DURABLE:
            return seen


@pytest.fixture(params=["root", "rack"])
def tier(request, tmp_path):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0") if request.param == "rack" else None
    try:
        yield root, rack or root
    finally:
        stop_all(rack, root)


@pytest.mark.parametrize("quiet", [True, False], ids=["skip_received", "old_child"])
def test_each_unit_is_answered_received_unless_the_child_opened_quiet(tier, quiet):
    root, target = tier
    child = (QuietChild if quiet else RawChild)(target.address, "hand")
    try:
        assert (child.ack().seq, child.acks.empty()) == (0, True), "the opening is answered either way"
        acks = []
        for step in (1, 2, 3):
            seq = child.batch(window("quiet", "loss", step, {0: 1.0 * step, 1: 2.0}, expected=2))
            acks += _acks_until_durable(child, seq)
        time.sleep(0.2)  # nothing more comes for these units
        assert child.acks.empty()
        expected = [(1, DURABLE), (2, DURABLE), (3, DURABLE)]
        if not quiet:
            expected = [(1, RECEIVED), (1, DURABLE), (2, RECEIVED), (2, DURABLE), (3, RECEIVED), (3, DURABLE)]
        assert acks == expected
        rows = wait_for(lambda: len(steps(root.api_address, "quiet", "loss")) == 3
                        and steps(root.api_address, "quiet", "loss"), 10, what="the three steps stored")
        assert [(r["step"], r["count"], r["min"]) for r in rows] == [(1, 2, 1.0), (2, 2, 2.0), (3, 2, 2.0)]
    finally:
        child.close()


def test_a_quiet_child_still_hears_of_overlaps_and_of_each_units_durability(tier):
    root, target = tier
    child = QuietChild(target.address, "hand")
    try:
        assert child.ack().seq == 0
        first = child.batch(window("ov", "loss", 1, {0: 1.0, 1: 2.0}, expected=4))
        assert _acks_until_durable(child, first) == [(first, DURABLE)]
        # {1, 2} overlaps {0, 1} partly: refused naming source 1, then durable (it holds nothing).
        second = child.batch(window("ov", "loss", 1, {1: 5.0, 2: 3.0}, expected=4))
        rejected = child.ack()
        assert rejected is not None and (rejected.seq, rejected.status) == (second, REJECTED)
        assert [(r.index, list(r.overlapping_sources)) for r in rejected.rejections] == [(0, [1])]
        assert _acks_until_durable(child, second) == [(second, DURABLE)]
        # An exact duplicate: absorbed, durable, no RECEIVED before.
        third = child.batch(window("ov", "loss", 1, {0: 1.0, 1: 2.0}, expected=4))
        assert _acks_until_durable(child, third) == [(third, DURABLE)]
    finally:
        child.close()


def test_a_second_stream_of_a_child_is_answered_as_it_opened(tier):
    """The flag belongs to the stream: a child reconnecting without it (a downgrade) gets RECEIVED again, and one
    reconnecting with it none."""
    _, target = tier
    for quiet, step in ((True, 1), (False, 2), (True, 3)):
        child = (QuietChild if quiet else RawChild)(target.address, "hand")
        try:
            assert child.ack().seq == 0
            seq = child.batch(window("again", "loss", step, {0: 1.0}, expected=1), seq=step)
            statuses = [status for _, status in _acks_until_durable(child, seq)]
            assert statuses == ([DURABLE] if quiet else [RECEIVED, DURABLE])
        finally:
            child.close()
        wait_for(lambda: "hand" not in target.service._links, 5, what="the stream's end seen by the tier")


def test_upstream_opens_quiet_and_is_durable_against_a_parent_that_sends_received(tmp_path):
    """A rack (its `Upstream`) under a parent that answers RECEIVED then DURABLE whatever the opening says, as a parent
    that does not know skip_received does: every unit is forgotten once durable, and the child's units are acked
    DURABLE down."""
    parent = FakeParent(durable=True)
    rack = make_collector([parent.address], "rack0")
    child = RawChild(rack.address, "agent0")
    try:
        opening = child.ack()
        assert opening is not None and opening.seq == 0, f"stream ended: {child.error}"
        seqs = [child.batch(window("old", "loss", step, {0: 1.0, 1: 2.0}, expected=2)) for step in (1, 2, 3)]
        for seq in seqs:
            child.ack_for(seq, DURABLE)
        openings = [batch for batch in parent.batches if batch.seq == 0]
        assert openings and all(batch.skip_received for batch in openings)
        assert len({batch.seq for batch in parent.batches if batch.windows}) >= 1
        wait_for(lambda: rack.upstream.outbox.pending() == 0, 5, what="the rack's outbox to drain")
    finally:
        child.close()
        stop_all(rack)
        parent.stop()
