"""A collector's budget check of a native unit's metric names, skipped for the names it admitted last time
(`CollectorService._fast`, `Unit.metric_names`; docs/scale.md, "One block per unit"): a rack's children repeat their
names every step. Skipping must never let through what the check would refuse: after the job is forgotten (its
budget with it), after a name the budget never admitted, or with names the budget does not hold in another order.
A unit that passes goes into the native table in one call (Node.offer_read); one that does not is judged window by
window (which admits its names, within the budget).
"""

from __future__ import annotations

from pyroaring import BitMap

from collectors.collector.service import CollectorService, _ChildStream
from collectors.common.validation import MetricBudget
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines
from telemetry import Summary
from telemetry.summary.summary import read_native_unit
from telemetry.v1 import forward_pb2, summary_pb2

RANKS = range(8)


def _unit(seq: int, names: list[str], job: str = "job") -> bytes:
    states = forward_pb2.RankStates(job=job, alive=BitMap(RANKS).serialize(), world_size=16)
    summary = Summary.from_arrays([float(r) for r in RANKS], list(RANKS), time_ns=5).to_proto()
    return forward_pb2.SummaryBatch(sender_id="child", seq=seq, ranks=[states], windows=[
        forward_pb2.WindowSummary(key=summary_pb2.WindowKey(job=job, metric=name, step=seq), summary=summary,
                                  expected=16) for name in names]).SerializeToString()


class _Rack:
    """A rack's service with a native table, fed one child's units; counts the units offered in one call."""

    def __init__(self, budget: int) -> None:
        node = Node("rack", Deadlines(120.0), ack_down=lambda *a, **k: None, native=True)
        self.svc = CollectorService(node, None, None, MetricBudget(budget), max_world_size=4096)  # type: ignore[arg-type]  # host and slots: no stream here
        self.fast: list[int] = []
        offer_read = node.offer_read

        def counted(origin: tuple[str, int], unit: object) -> object:
            self.fast.append(origin[1])
            return offer_read(origin, unit)  # type: ignore[arg-type]  # passed through as given

        node.offer_read = counted  # type: ignore[method-assign,assignment]  # counting the calls
        self.acks: list[forward_pb2.Ack] = []
        rack = self

        class Answers:
            def put(self, ack: forward_pb2.Ack) -> None:
                rack.acks.append(ack)

        self.stream = _ChildStream(Answers(), None)  # type: ignore[arg-type]  # only put() is called

    def send(self, data: bytes) -> None:
        self.svc._one(self.stream, self.svc._receive(data))


def test_names_admitted_last_time_skip_the_check_until_the_job_is_forgotten() -> None:
    rack = _Rack(budget=4)
    names = ["m0", "m1", "m2", "m3"]
    rack.svc.budget.admit_all("job", names)
    rack.send(_unit(1, names))
    rack.send(_unit(2, names))  # the same names: not checked again
    assert rack.fast == [1, 2]
    rack.svc.forget_job("job")  # the budget forgets the job: its names must be checked (and admitted) again
    rack.send(_unit(3, names))
    assert rack.fast == [1, 2]  # judged window by window, which admitted them
    assert rack.svc.budget.admitted("job", names)
    rack.send(_unit(4, names))
    assert rack.fast == [1, 2, 4]
    assert all(ack.status == forward_pb2.Ack.RECEIVED for ack in rack.acks if ack.seq)


def test_a_name_never_admitted_or_another_order_is_checked() -> None:
    rack = _Rack(budget=4)
    rack.svc.budget.admit_all("job", ["m0", "m1", "m2"])
    rack.send(_unit(1, ["m0", "m1", "m2"]))
    rack.send(_unit(2, ["m2", "m0", "m1"]))  # other bytes, the same admitted names: checked, and fast
    rack.send(_unit(3, ["m0", "m1", "m9"]))  # m9 never admitted: window by window (which admits it: 4 of 4)
    rack.send(_unit(4, ["m0", "m1", "m9", "m5"]))  # m5 would be a fifth name: refused by the budget
    assert rack.fast == [1, 2]
    assert not rack.svc.budget.admitted("job", ["m5"])


def test_metric_names_are_the_units_names_each_once_in_order() -> None:
    """Unit.metric_names: equal bytes for equal names in one order, different bytes otherwise (a name's length is
    part of it: "ab", "c" is not "a", "bc")."""
    def names(metrics: list[str], job: str = "job", attempt: int = 0) -> bytes:
        return read_native_unit(_unit(1, metrics), 2**53, 2**63, 4096).metric_names(job, attempt)

    assert names(["a", "bc"]) == names(["a", "bc"])
    assert len({names(["a", "bc"]), names(["ab", "c"]), names(["bc", "a"]), names(["a"]), names([])}) == 5
    assert names(["a", "bc"], job="other") == b"" == names(["a", "bc"], attempt=1)
