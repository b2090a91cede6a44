"""telemetry.torch.nccl_timing: the GPU-side wait signal on NCCL, without a GPU.

c10d's completion hook is driven by hand here with WorkInfo-like records (``time_started`` and
``active_duration`` as timedeltas, what torch 2.11 gives on an H100: bench/gpu_check.py, docs/torch.md), and
the groups are stand-ins in c10d's group map: which groups get hooked, how works are given to the step that
enqueued them, when a step's figure is settled, and what CollectiveTimer.measure returns on that path. The
real hook on a real NCCL group is checked by bench/gpu_check.py (nccl_timing) on a GPU.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from torch.distributed import distributed_c10d

from telemetry.torch.nccl_timing import DeviceCollectiveTime
from telemetry.torch.waits import CollectiveTimer

MS = 1_000_000


def _work(started_ms: float, duration_ms: float) -> SimpleNamespace:
    return SimpleNamespace(time_started=timedelta(milliseconds=started_ms),
                           active_duration=timedelta(milliseconds=duration_ms))


class _Group:
    """A process group as attach() sees it: a backend name and the hook registration."""

    def __init__(self, backend: str = "nccl", refuse: Exception | None = None) -> None:
        self.backend, self.refuse, self.hooks = backend, refuse, []

    def _get_backend_name(self) -> str:
        return self.backend

    def _register_on_completion_hook(self, hook: Any) -> None:
        if self.refuse is not None:
            raise self.refuse
        if self.hooks:
            raise RuntimeError("ProcessGroupNCCL OnCompletion hook already registered")
        self.hooks.append(hook)


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> dict[Any, Any]:
    table: dict[Any, Any] = {}
    monkeypatch.setattr(distributed_c10d, "_world", SimpleNamespace(pg_map=table))
    return table


def test_only_nccl_groups_with_timing_are_hooked_and_new_groups_are_found(
        groups: dict[Any, Any], caplog: pytest.LogCaptureFixture) -> None:
    nccl, gloo = _Group(), _Group("gloo")
    no_timing = _Group(refuse=ValueError("ProcessGroupNCCL OnCompletion hook requires recording start and end "
                                         "events which require setting TORCH_NCCL_ENABLE_TIMING"))
    groups.update({nccl: None, gloo: None, no_timing: None})
    device = DeviceCollectiveTime()
    with caplog.at_level(logging.INFO, logger="telemetry.torch.nccl_timing"):
        assert device.attach() == 1
        assert device.attach() == 1  # unchanged map: no rescan, nothing logged twice
    assert len(nccl.hooks) == 1 and not gloo.hooks and not no_timing.hooks
    assert sum("TORCH_NCCL_ENABLE_TIMING" in r.getMessage() for r in caplog.records) == 1
    subgroup = _Group()  # a tensor-parallel subgroup created later
    groups[subgroup] = None
    assert device.attach() == 2 and len(subgroup.hooks) == 1 and len(nccl.hooks) == 1


def test_a_group_with_a_hook_of_its_own_is_left_alone(groups: dict[Any, Any]) -> None:
    taken = _Group()
    taken.hooks.append(lambda info: None)  # the user's, registered first
    groups[taken] = None
    device = DeviceCollectiveTime()
    assert device.attach() == 0 and len(taken.hooks) == 1


def test_works_count_for_the_step_that_enqueued_them_once_it_settled() -> None:
    device = DeviceCollectiveTime(settle_s=0.25)
    # Step 1 = [0, 300) ms, step 2 = [310, 610), step 3 = [620, 920) ms.
    device.hook(_work(10, 40))
    device.hook(_work(200, 60))
    assert device.step(0, 300 * MS) is None  # just ended: not settled
    device.hook(_work(305, 7))   # between steps 1 and 2 (a logging all-reduce after the step): step 2's
    device.hook(_work(250, 5))   # step 1's, reported late (c10d's watchdog)
    device.hook(_work(400, 30))
    device.hook(_work(400, -1))  # no duration: not counted
    seconds, works = device.step(310 * MS, 610 * MS)  # step 1 ended 310 ms before: settled
    assert (works, seconds) == (3, pytest.approx(0.105))
    device.hook(_work(700, 500))  # longer than its step (works on several streams): clipped
    device.hook(_work(100, 9))    # step 1's, after its figure was given: late
    assert device.step(620 * MS, 920 * MS) == (pytest.approx(0.037), 2)
    assert device.late == 1
    assert device.step(930 * MS, 1230 * MS) == (pytest.approx(0.3), 1)


def test_short_steps_give_the_newest_settled_step_the_same_on_every_rank() -> None:
    device = DeviceCollectiveTime(settle_s=0.25)
    figures = []
    for i in range(10):  # 100 ms steps: the figure at step i is step i-3's
        device.hook(_work(i * 100 + 1, i + 1))
        figures.append(device.step(i * 100 * MS, (i * 100 + 99) * MS))
    assert figures[:3] == [None, None, None]
    assert [f for f in figures[3:]] == [(pytest.approx((i - 2) / 1e3), 1) for i in range(3, 10)]


def test_a_work_enqueued_after_the_newest_step_waits_for_the_next() -> None:
    device = DeviceCollectiveTime(settle_s=0.0)
    device.hook(_work(150, 20))  # reported before the step it belongs to has ended
    assert device.step(0, 100 * MS) == (0.0, 0)
    assert device.step(140 * MS, 200 * MS) == (pytest.approx(0.02), 1)


def test_measure_gives_the_gpu_figure_where_a_group_is_hooked(groups: dict[Any, Any]) -> None:
    timer = CollectiveTimer()
    timer._intervals.append([10 * MS, 20 * MS, 10 * MS])  # a host-blocked span: what gloo measures
    assert timer.measure(0, 100 * MS)[0] == pytest.approx(0.01)
    nccl = _Group()
    groups[nccl] = None
    timer.device = DeviceCollectiveTime(settle_s=0.25)
    timer._intervals.append([110 * MS, 120 * MS, 110 * MS])
    assert timer.measure(100 * MS, 400 * MS)[0] is None  # hooked, nothing settled yet: no figure
    nccl.hooks[0](_work(150, 80))
    wait, _ = timer.measure(400 * MS, 700 * MS)
    assert wait == pytest.approx(0.08)
