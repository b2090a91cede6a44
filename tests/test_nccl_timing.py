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


def test_works_count_for_the_step_that_enqueued_them_given_one_exit_later() -> None:
    device = DeviceCollectiveTime(settle_s=0.25)
    # Step 1 = [0, 300) ms, step 2 = [310, 610), step 3 = [620, 920) ms: longer than the settle time, lag 1.
    device.hook(_work(10, 40))
    device.hook(_work(200, 60))
    assert device.step(0, 300 * MS) is None  # nothing before it
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
    assert device.lag == 1


def test_short_steps_settle_on_one_lag_and_then_give_every_step() -> None:
    device = DeviceCollectiveTime(settle_s=0.25)
    figures = []
    for i in range(12):  # 100 ms steps: a step has settled 3 exits later; the lag doubles 1 -> 2 -> 4
        device.hook(_work(i * 100 + 1, i + 1))
        figures.append(device.step(i * 100 * MS, (i * 100 + 99) * MS))
    assert device.lag == 4
    assert figures[:4] == [None] * 4
    assert figures[4:] == [(pytest.approx((i - 3) / 1e3), 1) for i in range(4, 12)]  # step i-4's, every exit


def test_ranks_at_the_same_pace_log_the_same_steps_whatever_their_jitter() -> None:
    """Away from SETTLE_S / 2**j (250, 125, 62.5 ms: the documented exception), two ranks at one pace with
    independent jitter settle on the same lag and log the same step's figure at every exit."""
    import random

    for step_ms in (20, 50, 83, 100, 175, 200, 300, 1000):
        rng = random.Random(step_ms)
        logged = []
        for _rank in range(2):
            device = DeviceCollectiveTime(settle_s=0.25)
            given = []
            for i in range(200):
                start = i * step_ms + rng.uniform(0, 0.02 * step_ms)
                end = (i + 1) * step_ms - 0.5 - rng.uniform(0, 0.02 * step_ms)
                device.hook(_work(start + 0.1, (1 + i) / 1e3))  # one work a step: its duration (us) names it
                figure = device.step(int(start * MS), int(end * MS))
                given.append(None if figure is None else round(figure[0] * 1e6) - 1)
            logged.append(given)
        tail = list(zip(logged[0][40:], logged[1][40:], strict=True))
        assert all(a is not None and a == b for a, b in tail), step_ms


def test_a_work_enqueued_after_the_newest_step_waits_for_the_next() -> None:
    device = DeviceCollectiveTime(settle_s=0.0)
    device.hook(_work(150, 20))  # reported before the step it belongs to has ended
    assert device.step(0, 100 * MS) is None
    assert device.step(140 * MS, 200 * MS) == (0.0, 0)
    assert device.step(210 * MS, 300 * MS) == (pytest.approx(0.02), 1)


def test_a_group_destroyed_and_created_again_is_hooked_again(groups: dict[Any, Any]) -> None:
    device = DeviceCollectiveTime()
    first = _Group()
    groups[first] = None
    assert device.attach() == 1
    groups.clear()  # destroy_process_group
    assert device.attach() == 0  # nothing hooked: the host-side figure is used again
    again = _Group()  # init_process_group again (an in-process restart)
    groups[again] = None
    assert device.attach() == 1 and len(again.hooks) == 1


def test_measure_gives_the_gpu_figure_where_a_group_is_hooked(groups: dict[Any, Any]) -> None:
    timer = CollectiveTimer()
    timer._intervals.append([10 * MS, 20 * MS, 10 * MS])  # a host-blocked span: what gloo measures
    assert timer.measure(0, 100 * MS)[0] == pytest.approx(0.01)
    nccl = _Group()
    groups[nccl] = None
    timer.device = DeviceCollectiveTime(settle_s=0.25)
    timer._intervals.append([110 * MS, 120 * MS, 110 * MS])
    assert timer.measure(100 * MS, 400 * MS)[0] is None  # hooked, no earlier step: no figure
    nccl.hooks[0](_work(150, 80))
    wait, _ = timer.measure(400 * MS, 700 * MS)
    assert wait == pytest.approx(0.08)


def test_the_sdk_measures_on_nccl_when_no_collective_passed_through_python(
        groups: dict[Any, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """DDP with a C++ comm hook, compiled or DTensor-only collectives: the wrappers see nothing (seen == 0),
    yet each step's exit must still hook the groups and log their GPU time."""
    import time

    import telemetry
    from telemetry.names import WAIT_METRIC
    from telemetry.sdk import run as run_module

    nccl = _Group()
    groups[nccl] = None
    timer = CollectiveTimer()
    timer.installed = True
    monkeypatch.setattr(run_module, "_dist_initialised", lambda: True)
    monkeypatch.setattr("telemetry.torch.waits.timer", lambda: timer)
    run = telemetry.init(job="nccl-cpp", rank=0, world_size=1, agent="127.0.0.1:1", device="", fingerprints=False)
    records: list[Any] = []
    monkeypatch.setattr(run, "_append", records.append)
    try:
        for step in range(3):
            with run.step(step):
                if nccl.hooks:
                    nccl.hooks[0](SimpleNamespace(time_started=timedelta(microseconds=time.perf_counter_ns() / 1e3),
                                                  active_duration=timedelta(milliseconds=2 + step)))
                time.sleep(0.3)
    finally:
        monkeypatch.undo()
        run.close(timeout=0.1)
    waits = {rec[1]: rec[2].get(WAIT_METRIC) for rec in records if isinstance(rec[2], dict)}
    assert timer.seen == 0 and len(nccl.hooks) == 1
    assert waits[0] is None  # hooked at this exit, no earlier step
    assert waits[1] == 0.0  # step 0's: its work was enqueued before the hook existed (hooked at its exit)
    assert waits[2] == pytest.approx(0.003)  # step 1's work, given at step 2's exit (lag 1: 0.3 s steps)
