"""The straggler detector on `collective_arrival` (issue 12): synchronous jobs, where step_time cannot name anyone.

Rows are built the way the root finalises them (exact summaries, every rank a source); the torchrun tests
(tests/test_straggler_torchrun.py) check that real gloo jobs produce such rows.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np

from collectors.common.keys import Key
from collectors.detectors import EventLog
from collectors.detectors.straggler import StragglerConfig, StragglerDetector
from collectors.root.store import Row
from telemetry.summary import Summary

JOB = "sync"
WORLD = 8


def _row(metric: str, step: int, values: list[float], expected: int = WORLD) -> Row:
    summary = Summary.from_arrays(np.array(values, dtype=np.float64), np.arange(len(values), dtype=np.int64),
                                  time.time_ns())
    return Row(Key(JOB, metric, step, 0), expected, summary, 0, time.time_ns())


def _sync_step(rng: random.Random, slow: dict[int, float], compute: float = 0.1) -> tuple[list[float], list[float]]:
    """One synchronous step: each rank's own work (its arrival), and the wall step time every rank sees."""
    arrivals = [compute * math.exp(rng.gauss(0, 0.03)) + slow.get(r, 0.0) for r in range(WORLD)]
    wall = max(arrivals) + 0.005
    return arrivals, [wall + rng.gauss(0, 0.0005) for _ in range(WORLD)]


def _run(det: StragglerDetector, steps: range, slow_at, seed: int = 3) -> None:
    rng = random.Random(seed)
    for step in steps:
        arrivals, walls = _sync_step(rng, slow_at(step))
        det.observe(_row("step_time", step, walls))
        det.observe(_row("collective_arrival", step, arrivals))


def test_slow_rank_named_from_arrivals_while_step_time_is_flat():
    log = EventLog(None)
    det = StragglerDetector(log)
    _run(det, range(60), lambda step: {5: 0.08} if 20 <= step < 40 else {})
    events = log.query(JOB)
    assert len(events) == 1, events
    event = events[0]
    # Rank 5 is late on every step from 20: a straggler once late on 14 of the last 16 steps (step 33); the
    # event starts where its lateness began.
    assert event["ranks"] == [5] and event["step"] == 20, event
    assert event["detail"]["signal"] == "collective_arrival"
    assert event["detail"]["detected_step"] == 33
    assert 0.07 < event["detail"]["wait_s_total"] / event["detail"]["steps"] < 0.09
    assert event["detail"]["wait_rank_s"] > 7 * 0.07  # the 7 others each waited for it
    assert event["status"] == "closed"


def test_the_step_time_fallback_is_not_judged_once_arrivals_come():
    """step_time max/p50 of a synchronous job is ~1 whoever is slow: judging it there could only mislead."""
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = random.Random(1)
    for step in range(30):
        arrivals, walls = _sync_step(rng, {})
        if step >= 10:
            walls[2] *= 3.0  # would be a straggler on step_time alone
        det.observe(_row("step_time", step, walls))
        det.observe(_row("collective_arrival", step, arrivals))
    assert log.query(JOB) == []


def test_noise_that_lands_on_a_different_rank_each_step_is_not_a_straggler():
    log = EventLog(None)
    det = StragglerDetector(log)
    _run(det, range(80), lambda step: {step % WORLD: 0.08} if step >= 10 else {})
    assert log.query(JOB) == []


def test_a_rank_delayed_for_a_few_steps_is_not_a_straggler():
    """What an oversubscribed host does: the scheduler holds one rank back for 3 steps in a row, now and then."""
    log = EventLog(None)
    det = StragglerDetector(log)
    _run(det, range(120), lambda step: {(step // 20) % WORLD: 0.08} if step % 20 in (10, 11, 12) else {})
    assert log.query(JOB) == []


def test_start_up_waits_and_tiny_waits_are_not_judged():
    log = EventLog(None)
    det = StragglerDetector(log)
    # Steps 0-4: rank 3 compiles slowly (warm-up). Then rank 6 lags by 8 ms on 20 ms steps: 40 % of the
    # step, but under min_wait_s (OS scheduling noise on a shared host).
    rng = random.Random(2)
    for step in range(40):
        slow = {3: 0.5} if step < 5 else {6: 0.008}
        arrivals, walls = _sync_step(rng, slow, compute=0.02)
        det.observe(_row("step_time", step, walls))
        det.observe(_row("collective_arrival", step, arrivals))
    assert log.query(JOB) == []
    det2 = StragglerDetector(EventLog(None), config=StragglerConfig(min_wait_s=0.005))  # 8 ms counts now
    rng = random.Random(2)
    for step in range(40):
        arrivals, walls = _sync_step(rng, {6: 0.008} if step >= 5 else {}, compute=0.02)
        det2.observe(_row("collective_arrival", step, arrivals))
    assert [e["ranks"] for e in det2.events.query(JOB)] == [[6]]


def test_a_step_some_rank_reported_no_arrival_for_is_not_judged():
    """The rank without a figure could be the slow one: max - p50 of the others would name the wrong rank."""
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = random.Random(4)
    for step in range(30):
        arrivals, walls = _sync_step(rng, {1: 0.1} if step >= 10 else {})
        det.observe(_row("step_time", step, walls))
        det.observe(_row("collective_arrival", step, arrivals[:WORLD - 1]))  # rank 7 sent none
    assert log.query(JOB) == []


def test_a_rank_always_a_little_late_is_not_an_event_a_real_straggler_on_top_is():
    """A rank that is always 30 ms late (a slower host in a mixed fleet) costs a fifth of the step: the
    job's normal, not an event; a 100 ms slowdown of another rank on top of it is one, naming only it."""
    log = EventLog(None)
    det = StragglerDetector(log)
    _run(det, range(100), lambda step: {4: 0.03} if step < 60 else {4: 0.03, 2: 0.1})
    events = log.query(JOB)
    assert [(e["ranks"], e["step"]) for e in events] == [([2], 60)], events
