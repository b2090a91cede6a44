"""The hang detector's missing-past-deadline rule over the shapes a step's windows really come in.

Held-out clean torchrun runs raised critical `hang` events naming a rank missing from step 0 or 1 while it ran
to the end (bench/results/detection_matrix_runqueue_heldout.json, detection_matrix_heldout.json): the rank had
reported the step (its `collective_wait` and `runqueue_wait` were in the step's windows) but not one metric of
it (the SDK logs `collective_arrival` only once it found the flight recorder), so that metric's window was
finalised without it; its heartbeat showed it past the step, so nobody was named, until the job's last
heartbeat bucket did not hold the rank any more (it had exited) and the detector named it, a minute and more
after the step. The matrix: which metric a rank left out x where the step is x in which order the windows come
x what the heartbeat says later; and the hangs the rule must still name, in the same shapes."""

from __future__ import annotations

import time

import numpy as np
import pytest

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors import Context, EventLog
from collectors.detectors.hang import HangConfig, HangDetector
from telemetry.summary import Summary

JOB = "train"
WORLD = 4
LAST = 40  # the job's last step
CLOSING = ("step_time", "collective_wait", "work_time", "runqueue_wait")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def row(metric: str, index: int, ranks, width_ms: int = 0, value=None, late: int = 0) -> Row:
    ranks = list(ranks)
    values = [float(index if value is None else value)] * len(ranks)
    summary = Summary.from_arrays(np.array(values, dtype=np.float64), np.array(ranks, dtype=np.int64),
                                  time.time_ns())
    return Row(Key(JOB, metric, index, width_ms), WORLD, summary, late, time.time_ns())


def live() -> dict:
    return {JOB: {"world_size": WORLD, "alive": WORLD, "stuck": 0, "dead": 0, "dead_ranks": [], "stuck_ranks": []}}


def setup() -> tuple[Clock, EventLog, HangDetector]:
    clock, log = Clock(), EventLog(None)
    return clock, log, HangDetector(log, Context(), HangConfig(), clock=clock)


def beat(det: HangDetector, clock: Clock, at: dict[int, int]) -> None:
    """One heartbeat bucket: each rank's current step."""
    bucket = int(clock.t * 1000)
    det.observe(Row(Key(JOB, "progress.current_step", bucket, 1000), WORLD,
                    Summary.from_arrays(np.array(list(at.values()), dtype=np.float64),
                                        np.array(list(at), dtype=np.int64), time.time_ns()), 0, time.time_ns()))


def step(det: HangDetector, clock: Clock, index: int, windows: dict[str, list[int]] | None = None,
         check: bool = True) -> None:
    """Step `index` finalised: every metric's window (all ranks unless `windows` says otherwise), in order."""
    clock.t += 0.5
    metrics = {"step_time": list(range(WORLD)), "collective_wait": list(range(WORLD)),
               "runqueue_wait": list(range(WORLD)), "collective_arrival": list(range(WORLD)),
               "loss": list(range(WORLD))}
    metrics.update(windows or {})
    for metric, ranks in metrics.items():
        det.observe(row(metric, index, ranks))
    if check:
        det.check(live())


def hangs(log: EventLog) -> list[dict]:
    return [e for e in log.query(JOB) if e["kind"] == "hang"]


def run_to_the_end(det: HangDetector, clock: Clock, gap: dict[int, dict[str, list[int]]]) -> None:
    """A clean job of LAST + 1 steps (the windows in `gap` as given), a heartbeat bucket every step with every
    rank one step on, then the job's last buckets, which no longer hold the ranks that exited first."""
    for s in range(LAST + 1):
        step(det, clock, s, gap.get(s))
        beat(det, clock, {r: s + 1 for r in range(WORLD)})
        clock.t += 0.5
        det.check(live())
    for holding in ([0, 1, 3], [0, 1], [0]):  # rank 2 exits first, then 3, then 1
        clock.t += 1.0
        beat(det, clock, {r: LAST for r in holding})
        det.check(live())
    clock.t += 5.0  # past every grace (and short of no progress's T: the job ends here)
    det.check(live())


@pytest.mark.parametrize("metric", ["collective_arrival", "collective_wait", "runqueue_wait", "loss"])
@pytest.mark.parametrize("at", [0, 1, 17, LAST])
def test_a_rank_that_left_one_metric_out_of_a_step_reported_it(metric, at):
    """The held-out runs' false alarm: rank 2 not in one metric's window of step `at`, in every other."""
    clock, log, det = setup()
    run_to_the_end(det, clock, {at: {metric: [0, 1, 3]}})
    assert hangs(log) == []


@pytest.mark.parametrize("first", ["complete", "incomplete"])
def test_the_order_of_a_steps_windows_does_not_matter(first):
    """Windows of one step are finalised one by one: the one without the rank may come before or after the
    ones with it (within the grace), and no heartbeat may hold the rank yet (the first bucket goes up late)."""
    clock, log, det = setup()
    step(det, clock, 0, check=False)
    ordered = [("collective_arrival", [0, 1, 3]), ("step_time", list(range(WORLD)))]
    for metric, ranks in ordered if first == "incomplete" else ordered[::-1]:
        det.observe(row(metric, 1, ranks))
        clock.t += 0.3
        det.check(live())
    clock.t += 5.0
    det.check(live())
    assert hangs(log) == []


def test_a_rank_seen_past_a_step_it_never_reported_is_not_named_when_it_exits():
    """Every window of step 3 lost rank 2's values (late past every grace, or lost): its heartbeat showed it at
    step 4 and on, so it is not hung; once seen past the step it stays so, whatever a later bucket holds."""
    clock, log, det = setup()
    run_to_the_end(det, clock, {3: {m: [0, 1, 3] for m in ("step_time", "collective_wait", "runqueue_wait",
                                                          "collective_arrival", "loss")}})
    assert hangs(log) == []


def test_a_job_that_logs_loss_on_rank_0_only_raises_nothing():
    """`run.log(step, loss=...)` on rank 0 only: every loss window lacks ranks 1-3, at every step."""
    clock, log, det = setup()
    run_to_the_end(det, clock, {s: {"loss": [0]} for s in range(LAST + 1)})
    assert hangs(log) == []


# -- the hangs it must still name ------------------------------------------------------------------------------


def _hung_at(det: HangDetector, clock: Clock, index: int, windows: dict[str, list[int]]) -> None:
    for s in range(index):
        step(det, clock, s)
        beat(det, clock, {r: s + 1 for r in range(WORLD)})
    step(det, clock, index, windows)
    beat(det, clock, {r: index + 1 if r != 2 else index for r in range(WORLD)})  # rank 2 stays at the step
    clock.t += 2.5  # past the grace
    det.check(live())


@pytest.mark.parametrize("logged_first", [False, True])
def test_a_rank_that_logged_inside_the_step_then_hung_is_named(logged_first):
    """Rank 2 logged `loss` inside step 5 and hung before closing it: the loss window holds it, no CLOSING one
    does. Named, whether the loss window came before the step's CLOSING ones or after."""
    clock, log, det = setup()
    windows = {m: [0, 1, 3] for m in CLOSING + ("collective_arrival",)}
    if logged_first:
        for s in range(5):
            step(det, clock, s)
            beat(det, clock, {r: s + 1 for r in range(WORLD)})
        det.observe(row("loss", 5, range(WORLD)))
        for metric, ranks in windows.items():
            det.observe(row(metric, 5, ranks))
        beat(det, clock, {r: 6 if r != 2 else 5 for r in range(WORLD)})
        clock.t += 2.5
        det.check(live())
    else:
        _hung_at(det, clock, 5, windows)
    (event,) = hangs(log)
    assert (event["step"], event["ranks"], event["detail"]["reasons"]) == (5, [2], ["missing_past_deadline"])


def test_a_rank_missing_from_every_window_of_a_step_is_named():
    clock, log, det = setup()
    _hung_at(det, clock, 5, {m: [0, 1, 3] for m in CLOSING + ("collective_arrival", "loss")})
    (event,) = hangs(log)
    assert (event["step"], event["ranks"]) == (5, [2])


def test_a_job_without_closing_metrics_is_judged_on_every_window():
    """A job that closes its steps with `end_step` and logs its own metrics only: a rank in none of the step's
    windows is missing; one in some of them is not."""
    clock, log, det = setup()
    for s in range(5):
        for metric in ("loss", "grad_norm"):
            det.observe(row(metric, s, range(WORLD)))
        beat(det, clock, {r: s + 1 for r in range(WORLD)})
        clock.t += 0.5
    det.observe(row("loss", 5, [0, 1, 3]))
    det.observe(row("grad_norm", 5, [0, 1, 2, 3]))  # rank 2 reported step 5 in this one
    det.observe(row("loss", 6, [0, 1, 3]))
    det.observe(row("grad_norm", 6, [0, 1, 3]))  # and not step 6 at all
    beat(det, clock, {r: 7 if r != 2 else 6 for r in range(WORLD)})
    clock.t += 2.5
    det.check(live())
    (event,) = hangs(log)
    assert (event["step"], event["ranks"], event["detail"]["missing"]) == (6, [2], {"6": [2]})


def test_a_late_closing_window_clears_the_hang():
    clock, log, det = setup()
    _hung_at(det, clock, 5, {m: [0, 1, 3] for m in CLOSING + ("collective_arrival", "loss")})
    assert len(hangs(log)) == 1
    det.observe(row("step_time", 5, range(WORLD), late=1))
    clock.t += 1.0
    det.check(live())
    assert hangs(log)[0]["status"] == "closed"
