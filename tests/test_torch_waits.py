"""telemetry.torch.waits: what the SDK measures as a rank's collective_wait (issue 24).

The interval arithmetic on hand-made collectives (no torch needed), then the real wrapping in one process
(gloo, world 1): every entry point still works, async Work is timed from its wait(), and DDP gets the timed
hook at its first forward while a hook the user registers afterwards replaces it. Real multi-rank jobs are
tests/test_straggler_shapes.py.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from telemetry.torch.waits import _DDP, CollectiveTimer

MS = 1_000_000


def _timer(*intervals: list[int]) -> CollectiveTimer:
    timer = CollectiveTimer()
    for interval in intervals:
        timer._intervals.append(interval)
    return timer


def test_blocked_time_is_the_union_of_blocked_spans_within_the_step() -> None:
    timer = _timer([10 * MS, 20 * MS, 10 * MS],   # synchronous: blocked 10 ms
                   [15 * MS, 25 * MS, 15 * MS],   # overlaps the first: +5 ms
                   [30 * MS, 40 * MS, 35 * MS],   # async, waited from 35 ms: +5 ms
                   [50 * MS, 60 * MS, 0],         # async, never waited: nothing
                   [95 * MS, 0, 95 * MS])         # still outstanding at the step's end (100 ms): +5 ms, carried
    wait, taken = timer.measure(0, 100 * MS)
    assert taken == 5
    assert wait == pytest.approx(0.025)
    # The outstanding one carries over; its completion lands in the next step.
    timer._carry[0][1] = 110 * MS
    wait, taken = timer.measure(100 * MS, 200 * MS)
    assert taken == 0 and wait == pytest.approx(0.010)
    assert timer._carry == []


def test_ddp_buckets_block_from_the_backwards_last_bucket() -> None:
    """Buckets overlap the backward; the host blocks on them only once the last one was issued."""
    timer = _timer([10 * MS, 30 * MS, _DDP], [20 * MS, 45 * MS, _DDP], [40 * MS, 60 * MS, _DDP])
    wait, _ = timer.measure(0, 100 * MS)
    assert wait == pytest.approx(0.020)  # 40 -> 60 ms


def test_spans_outside_the_step_do_not_count() -> None:
    timer = _timer([0, 10 * MS, 0 + 1], [90 * MS, 120 * MS, 90 * MS])
    wait, _ = timer.measure(5 * MS, 100 * MS)
    assert wait == pytest.approx(0.015)  # 5 -> 10 and 90 -> 100


torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")


@pytest.fixture(scope="module")
def group() -> Iterator[CollectiveTimer]:
    """A world-1 gloo group and a timer of its own, installed; everything it wrapped is put back after (the
    wrapping is process-wide, and other tests share this process)."""
    if not dist.is_available():
        pytest.skip("torch.distributed is not available")
    from torch.nn.parallel import DistributedDataParallel as DDP

    from telemetry.torch.waits import ENTRY_POINTS
    saved = {name: getattr(dist, name) for name in ENTRY_POINTS if hasattr(dist, name)}
    saved_ddp = {name: DDP.__dict__[name] for name in ("forward", "register_comm_hook", "_register_builtin_comm_hook")}
    saved_wait = dist.Work.wait
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        yield CollectiveTimer()
    finally:
        dist.destroy_process_group()
        for name, original in saved.items():
            setattr(dist, name, original)
        for name, original in saved_ddp.items():
            setattr(DDP, name, original)
        if "_telemetry_timed" in DDP.__dict__:
            delattr(DDP, "_telemetry_timed")
        dist.Work.wait = saved_wait


def test_entry_points_are_timed_and_still_work(group: CollectiveTimer) -> None:
    t = group
    assert t.install() and t.install()  # idempotent
    assert getattr(dist.all_reduce, "_telemetry_timed", False)
    before = t.seen
    x = torch.ones(4)
    dist.all_reduce(x)
    work = dist.all_reduce(x, async_op=True)
    work.wait()
    out = [torch.zeros(4)]
    dist.all_gather(out, x)
    assert torch.equal(out[0], x)
    assert t.seen == before + 3
    wait, taken = t.measure(0, 2**62)
    assert taken >= 3 and wait >= 0.0


def test_ddp_gets_the_timed_hook_and_the_users_hook_replaces_it(group: CollectiveTimer) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    t = group
    t.install()
    model = DDP(torch.nn.Linear(4, 2))
    model(torch.randn(3, 4)).sum().backward()
    assert model._telemetry_hook[1] is default_hooks.allreduce_hook  # type: ignore[index]  # the slot telemetry set
    called = []

    def mine(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: keep none
        called.append(state)
        return default_hooks.allreduce_hook(None, bucket)

    model.register_comm_hook("mine", mine)  # after the first forward: DDP alone would refuse a second hook
    seen = t.seen
    model(torch.randn(3, 4)).sum().backward()
    assert called == ["mine"]
    assert t.seen > seen  # its all_reduce went through the timed entry point
    with pytest.raises(RuntimeError):
        model.register_comm_hook("again", mine)  # one user hook, as DDP says


def test_a_hook_registered_before_the_first_forward_is_timed_as_the_backwards_buckets(group: CollectiveTimer) -> None:
    """examples/train_ddp.py registers SyncWaitClock's hook right after building the model: its buckets must count
    as DDP's (blocked from the backward's last bucket), or every rank's collective_wait reads 0 and no straggler is
    ever named (the demo's --train job did exactly that)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    t = group
    t.install()
    model = DDP(torch.nn.Linear(4, 2))
    called = []

    def mine(state, bucket):  # type: ignore[no-untyped-def]  # DDP checks the annotations: keep none
        called.append(state)
        return default_hooks.allreduce_hook(None, bucket)

    model.register_comm_hook("early", mine)  # before any forward, as the example and SyncWaitClock do
    t.measure(0, 2**62)  # forget what earlier tests left
    model(torch.randn(3, 4)).sum().backward()
    assert called == ["early"]
    assert model._telemetry_hook == ["early", mine]  # type: ignore[attr-defined]  # went in through telemetry's hook
    assert t._intervals and all(iv[2] == _DDP for iv in t._intervals)  # the buckets, marked as DDP's
    with pytest.raises(RuntimeError):
        model.register_comm_hook("again", mine)  # still one user hook, as DDP says
