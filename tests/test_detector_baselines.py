"""The robust baselines of the loss-spike, MFU-drop and data-loader-stall detectors (issue 12 item 2).

Synthetic streams shaped like what bench/detection.py saw on real torchrun jobs: a loss at its noise floor
with heavy-tailed per-step noise, a loss falling from scratch, an MFU that swings with a shared host's
load. Clean streams must raise nothing; the faults must still be raised, in their step, naming the rank.
"""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest

from collectors.common.keys import Key
from collectors.detectors.base import Baseline, mad_sigma
from collectors.detectors.dataloader_stall import DataloaderStallDetector
from collectors.detectors.events import EventLog
from collectors.detectors.loss_spike import LossSpikeDetector
from collectors.detectors.mfu_drop import MfuDropDetector
from collectors.root.store import Row
from telemetry.summary import Summary

JOB = "train"
WORLD = 3


def row(metric: str, step: int, values: list[float], late: int = 0) -> Row:
    summary = Summary.from_arrays(np.array(values, dtype=np.float64), np.arange(len(values), dtype=np.int64),
                                  time.time_ns())
    return Row(Key(JOB, metric, step), len(values), summary, late, time.time_ns())


def noise_floor_loss(rng: random.Random, step: int) -> list[float]:
    """An MSE at its noise floor: a chi-square-like mean of 64 squared normals per rank (relative spread ~18 %,
    a heavy right tail), plus the curve of a model still learning a little."""
    return [0.03 * (1 + 2 * math.exp(-step / 40)) * sum(rng.gauss(0, 1) ** 2 for _ in range(64)) / 64
            for _ in range(WORLD)]


def falling_loss(rng: random.Random, step: int) -> list[float]:
    """A language model from scratch: 4.6 nats falling towards 2.2, fastest first, 3 % noise per rank."""
    level = 2.2 + 2.4 * math.exp(-step / 25)
    return [level * (1 + rng.gauss(0, 0.03)) for _ in range(WORLD)]


# ------------------------------------------------------------------ base helpers
def test_mad_sigma_ignores_one_wild_value_and_robust_line_follows_a_falling_series():
    values = [1.0, 1.1, 0.9, 1.05, 0.95, 1.0, 1.02, 0.98, 1000.0]
    assert 0.04 < mad_sigma(values) < 0.1, "one wild value does not inflate it"
    window = Baseline(50)
    for x in range(20):
        window.add(10.0 - 0.5 * x + (100.0 if x == 7 else 0.0))  # a falling line with one outlier
    nxt, sigma = window.robust_line(20)
    assert nxt == pytest.approx(0.0, abs=1e-9) and sigma == pytest.approx(0.0, abs=1e-9)


# ------------------------------------------------------------------ loss spike
@pytest.mark.parametrize("shape", [noise_floor_loss, falling_loss])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_loss_spike_clean_noisy_losses_raise_nothing(shape, seed):
    log = EventLog(None)
    det = LossSpikeDetector(log)
    rng = random.Random(seed)
    for step in range(1500):
        det.observe(row("loss", step, shape(rng, step)))
    assert log.query(JOB, limit=100) == []


def test_loss_spike_issue_case_stationary_noise_on_three_ranks_and_a_loss_below_its_mean():
    """Issue 12: stationary noise on 3 ranks opened two events in 15 steps, one for a loss below its mean."""
    log = EventLog(None)
    det = LossSpikeDetector(log)
    rng = random.Random(12)
    for step in range(15):
        det.observe(row("loss", step, [2.0 + rng.gauss(0, 0.1) for _ in range(WORLD)]))
    det.observe(row("loss", 15, [1.2] * WORLD))  # far below: never a spike
    assert log.query(JOB) == []


@pytest.mark.parametrize("shape,rise", [(falling_loss, 3.0), (noise_floor_loss, 20.0)])
def test_loss_spike_bad_batch_on_one_rank_is_raised_in_its_step_naming_it(shape, rise):
    log = EventLog(None)
    det = LossSpikeDetector(log)
    rng = random.Random(5)
    for step in range(200):
        values = shape(rng, step)
        if step == 150:
            values[2] *= rise  # the bad batch: its rank's loss, not the others'
        det.observe(row("loss", step, values))
        if step == 150:
            (event,) = log.query(JOB)
            assert event["step"] == 150 and event["ranks"] == [2] and event["detail"]["rule"] == "sigma"
    (event,) = log.query(JOB)
    assert event["status"] == "closed" and event["ranks"] == [2]


def test_loss_spike_needs_both_a_robust_z_and_a_relative_rise():
    # A nearly noiseless flat loss: +5 % is many sigmas, but no real rise.
    log = EventLog(None)
    det = LossSpikeDetector(log)
    for step in range(60):
        det.observe(row("loss", step, [2.0 + 1e-4 * (step % 3) + (0.1 if step == 50 else 0.0)] * WORLD))
    assert log.query(JOB) == []
    # A very noisy loss: +30 % is a rise, but inside the noise.
    log = EventLog(None)
    det = LossSpikeDetector(log)
    rng = random.Random(3)
    for step in range(60):
        det.observe(row("loss", step, [2.0 * (1 + rng.gauss(0, 0.2)) + (0.6 if step == 50 else 0.0)] * WORLD))
    assert log.query(JOB) == []


def test_loss_spike_warmup_judges_only_megatrons_factor_rule_early():
    log = EventLog(None)
    det = LossSpikeDetector(log)
    for step, value in enumerate([4.6, 4.0, 3.6, 3.3, 7.0, 3.0, 2.9, 80.0]):
        det.observe(row("loss", step, [value] * WORLD))
    (event,) = log.query(JOB)
    assert event["step"] == 7 and event["detail"]["rule"] == "factor_of_max", "7.0 at step 4 is in the warm-up"


def test_loss_spike_keeps_the_ranks_named_while_the_spike_lasts():
    log = EventLog(None)
    det = LossSpikeDetector(log)
    for step in range(30):
        values = [2.0 + 0.01 * (step % 3)] * WORLD
        if step == 20:
            values[1] = 20.0  # one rank's bad batch...
        if step in (21, 22):
            values = [6.0] * WORLD  # ...then every rank disturbed by the update it made
        det.observe(row("loss", step, values))
    (event,) = log.query(JOB)
    assert (event["step"], event["last_step"], event["ranks"]) == (20, 22, [1])
    assert event["detail"]["broad"] is False


# ------------------------------------------------------------------ MFU drop
def test_mfu_on_a_shared_host_swinging_with_its_load_raises_nothing_but_a_collapse_is_raised():
    """Step-to-step noise of 30 % and a level that sags 35 % for 40 steps (the host got busier): not a
    drop of this job's; a rank stuck in a slow path (MFU / 10) is."""
    log = EventLog(None)
    det = MfuDropDetector(log)
    rng = random.Random(9)
    for step in range(600):
        level = 0.2 if step < 400 else 0.02
        if 200 <= step < 240:
            level = 0.13
        det.observe(row("mfu", step, [level * math.exp(rng.gauss(0, 0.3))] * WORLD))
        if step == 399:
            assert log.query(JOB) == [], "swings of the host's load are not a drop"
    (event,) = log.query(JOB)
    assert 400 <= event["step"] <= 410 and event["detail"]["relative_drop"] > 0.8
    assert event["detail"]["threshold"] < 0.9 * event["detail"]["baseline"], "held to the job's own spread"


def test_mfu_steady_job_is_held_to_ten_percent_and_warmup_steps_are_left_out():
    log = EventLog(None)
    det = MfuDropDetector(log)
    for step in range(100):
        value = 0.05 if step < 5 else (0.45 if step < 60 else 0.39)  # slow first steps; -13 % from 60
        det.observe(row("mfu", step, [value] * WORLD))
    (event,) = log.query(JOB)
    assert event["step"] == 60 and event["detail"]["baseline"] == pytest.approx(0.45)


# ------------------------------------------------------------------ data-loader stall
def _loader_run(det: DataloaderStallDetector, stall_at: int, stall_s: float, late: bool) -> None:
    rng = random.Random(4)
    for step in range(60):
        waits = [0.0002 * math.exp(rng.gauss(0, 0.5)) for _ in range(WORLD)]
        if step == 30:
            waits[0] = 0.004  # a 3x blip: noise
        times = [0.05 * math.exp(rng.gauss(0, 0.05)) for _ in range(WORLD)]
        stalled = step == stall_at
        if stalled and not late:
            waits[1] = stall_s
        det.observe(row("dataloader_wait", step, waits if not (stalled and late) else waits))
        det.observe(row("step_time", step, times))
        if stalled and late:  # the stalled rank's wait arrives after its window was finalised
            det.observe(row("dataloader_wait", step, [waits[0], stall_s, waits[2]], late=1))


@pytest.mark.parametrize("late", [False, True], ids=["in-window", "late-delta"])
def test_dataloader_one_long_stall_is_raised_at_once_naming_the_rank(late):
    log = EventLog(None)
    det = DataloaderStallDetector(log)
    _loader_run(det, stall_at=40, stall_s=5.0, late=late)
    (event,) = log.query(JOB)
    assert (event["step"], event["ranks"], event["status"]) == (40, [1], "closed")
    assert event["detail"]["rule"] == "long_stall" and event["detail"]["wait_max_s"] == 5.0


def test_dataloader_long_stall_rank_stays_named_when_other_ranks_stall_after_it():
    """bench/detection.py saw it: after a rank's 75 s stall (a late delta), another rank waited a third of
    each step for three steps while catching up; the event must still name the rank that stalled."""
    log = EventLog(None)
    det = DataloaderStallDetector(log)
    for step in range(40):
        waits = [0.0002] * WORLD
        if 36 <= step <= 38:
            waits[0] = 0.02  # 40 % of a 0.05 s step
        det.observe(row("dataloader_wait", step, waits))
        det.observe(row("step_time", step, [0.05] * WORLD))
        if step == 35:
            det.observe(row("dataloader_wait", step, [0.0002, 75.0, 0.0002], late=1))
    (event,) = log.query(JOB)
    assert (event["step"], event["last_step"], event["ranks"]) == (35, 38, [0, 1])


def test_dataloader_waits_under_three_ms_are_not_stalls_however_short_the_step():
    """A 4 ms step: bursts of 1.5 ms waits (the host, the SDK's thread) are 40 % of it and not a stall;
    a loader 5 ms slower per batch on one rank is."""
    log = EventLog(None)
    det = DataloaderStallDetector(log)
    for step in range(80):
        waits = [0.0001] * WORLD
        if step % 20 in (10, 11, 12):
            waits[step % WORLD] = 0.0015
        if step >= 60:
            waits[2] = 0.005
        det.observe(row("dataloader_wait", step, waits))
        det.observe(row("step_time", step, [0.004] * WORLD))
    (event,) = log.query(JOB)
    assert (event["step"], event["ranks"]) == (60, [2])


def test_dataloader_short_waits_are_not_long_stalls():
    log = EventLog(None)
    det = DataloaderStallDetector(log)
    _loader_run(det, stall_at=40, stall_s=0.5, late=True)  # 10 steps long but under a second: noise-sized
    assert log.query(JOB) == []
