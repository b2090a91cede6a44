"""The straggler detector on `collective_wait` (issue 24): the rank the others wait for, at any severity and scale.

Rows are built the way the root finalises them (exact summaries, every rank a source) from a synchronous
model: each rank works `compute` x noise (+ the straggler's extra), everyone leaves the step's collectives
together, and a rank waits for as long as the last one took longer than it (plus the transfer). The noise
includes what the loaded 2-core machine does to real jobs (bench/detection.py --matrix): a rank held back
by the scheduler for a step or two now and then, by up to half a step. The torchrun tests
(tests/test_straggler_shapes.py) check that real jobs produce such rows.
"""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors import EventLog
from collectors.detectors.cpu_starved import CpuStarvedDetector
from collectors.detectors.straggler import StragglerConfig, StragglerDetector
from collectors.detectors.wait_score import WaitScore
from telemetry.summary import Summary

JOB = "waits"


def _row(metric: str, step: int, values: np.ndarray, expected: int | None = None) -> Row:
    summary = Summary.from_arrays(values.astype(np.float64), np.arange(len(values), dtype=np.int64), time.time_ns())
    return Row(Key(JOB, metric, step, 0), len(values) if expected is None else expected, summary, 0, time.time_ns())


def _step(rng: np.random.Generator, world: int, extra: dict[int, float], compute: float = 0.1,
          burst: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """(step_time, collective_wait) of one synchronous step."""
    work = compute * np.exp(rng.normal(0, 0.04, world))
    if burst and rng.random() < 0.15:  # the scheduler holds one rank back now and then
        work[rng.integers(world)] += burst * compute * rng.random()
    for rank, seconds in extra.items():
        work[rank] += seconds
    transfer = 0.01 * np.exp(rng.normal(0, 0.1, world))
    wait = work.max() - work + transfer
    return work + wait, wait


def _run(det: StragglerDetector, steps: int, world: int, slow: int = -1, factor: float = 1.0, onset: int = 30,
         seed: int = 0, burst: float = 0.5, queued: bool = False) -> None:
    """With `queued`, each step's run-queue waits too (a few ms each, none explaining a lead), as the SDK logs
    them: the fast lane then names at `runqueue_fast_threshold`."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        extra = {slow: (factor - 1.0) * 0.1} if slow >= 0 and step >= onset else {}
        step_time, wait = _step(rng, world, extra, burst=burst)
        det.observe(_row("step_time", step, step_time))
        if queued:
            det.observe(_row("runqueue_wait", step, np.abs(rng.normal(0.002, 0.001, world))))
        det.observe(_row("collective_wait", step, wait))


@pytest.mark.parametrize(("factor", "within"), [(2.0, 3), (1.5, 5), (1.2, 30), (1.1, 100)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_named_within_the_bound_of_its_severity(factor: float, within: int, seed: int) -> None:
    log = EventLog(None)
    det = StragglerDetector(log)
    _run(det, 30 + within + 5, 8, slow=3, factor=factor, seed=seed)
    events = log.query(JOB)
    # One event; a slight (1.1x) straggler, least-waiting on ~75 % of the steps here, may close and reopen.
    assert len(events) == 1 or (factor <= 1.1 and len(events) <= 3), events
    assert all(e["ranks"] == [3] for e in events), events
    event = events[0]
    assert event["detail"]["signal"] == "collective_wait"
    assert event["detail"]["detected_step"] - 30 <= within, event
    # The onset: where the score left zero, about where the slowness began; for a slight rank, named by the
    # persistence lane, the start of its run of least-waiting steps (noise blurs it by a few tens of steps).
    assert event["step"] >= (25 if factor > 1.1 else 5), event


@pytest.mark.parametrize("world", [3, 8, 64])
def test_clean_noisy_jobs_raise_nothing(world: int) -> None:
    for seed in range(3):
        log = EventLog(None)
        det = StragglerDetector(log)
        _run(det, 1000, world, seed=seed)
        assert log.query(JOB) == [], (world, seed)


def test_event_closes_when_the_rank_recovers_and_reports_the_cost() -> None:
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = np.random.default_rng(7)
    for step in range(120):
        extra = {5: 0.1} if 20 <= step < 60 else {}
        step_time, wait = _step(rng, 8, extra)
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("collective_wait", step, wait))
    events = log.query(JOB)
    assert len(events) == 1 and events[0]["status"] == "closed", events
    detail = events[0]["detail"]
    per_step = detail["wait_s_total"] / detail["steps"]
    assert 0.08 < per_step < 0.13, detail                                   # the median rank waits ~0.1 s a step
    assert detail["wait_rank_s_total"] / detail["steps"] > 7 * 0.08, detail  # the 7 others each do
    assert 30 <= detail["steps"] <= 48, detail  # the 40 slow steps, and a few the noise added after


def test_a_rank_without_its_wait_is_not_judged() -> None:
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = np.random.default_rng(1)
    for step in range(60):
        step_time, wait = _step(rng, 8, {2: 0.1} if step >= 10 else {})
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("collective_wait", step, wait[:7], expected=8))  # rank 7 missing: it could be the slow one
    assert log.query(JOB) == []


def test_waits_take_over_from_arrivals_and_step_time() -> None:
    """A job that logs waits is judged on them only: a rank late to the last collective is not named."""
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = np.random.default_rng(2)
    for step in range(80):
        step_time, wait = _step(rng, 8, {})
        arrival = np.full(8, 0.1)
        arrival[4] = 0.3  # what an arrival-only job would call a straggler
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("collective_arrival", step, arrival))
        det.observe(_row("collective_wait", step, wait))
    assert log.query(JOB) == []


def test_state_is_bounded_whatever_the_world() -> None:
    """16,384 noisy ranks, a different least-waiting rank each step: the score keeps at most `track` ranks per
    lane, and a 1.2x rank among them is still named."""
    score = WaitScore(track=8)
    rng = random.Random(0)
    sizes = []
    for step in range(400):
        slow = step >= 200
        least = 16_000 if slow and rng.random() < 0.9 else rng.randrange(16_384)
        gap = 0.017 if slow else abs(rng.gauss(0, 0.01))
        score.update(step, least, gap, 0.1)
        sizes.append(max(len(lane.scores) for lane in score.lanes))
        if step < 200:
            assert score.named() is None, step
    assert max(sizes) <= 8
    named = score.named()
    assert named is not None and named[0] == 16_000


def test_config_options_reach_the_score() -> None:
    config = StragglerConfig(wait_threshold=3.0, wait_drift=0.05, wait_fast_threshold=0.9, wait_fast_drift=0.3,
                             wait_warmup=5)
    det = StragglerDetector(EventLog(None), config=config)
    rng = np.random.default_rng(0)
    for step in range(20):
        step_time, wait = _step(rng, 4, {1: 0.1} if step >= 8 else {}, burst=0.0)
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("collective_wait", step, wait))
    score = det.state(JOB).score
    assert score is not None
    assert [(lane.threshold) for lane in score.lanes] == [0.9, 3.0]
    assert score.drifts == [0.3, 0.05]  # the references before the job's own level raises them
    assert 0 < score.ratio(1) <= config.wait_cap


def _turns(rng: np.random.Generator, world: int, steps: int, slow: int = -1, onset: int = 10**9, extra: float = 0.0,
           level: float = 0.3) -> list[tuple[int, int, float]]:
    """(step, least-waiting rank, gap share) of a job whose ranks take turns waiting least by a large share of the
    step when nobody is slow (a tensor-parallel job's pairs on an oversubscribed host: 0.25-0.35 measured in
    bench/detection.py --matrix), with the bursts such a host adds: one rank least for 3-4 steps in a row at
    1.3-1.7x the usual share. A slow rank from `onset` is least every step with `extra` on top of the level."""
    out, burst_rank, burst_left = [], -1, 0
    for step in range(steps):
        if step >= onset:
            out.append((step, slow, min(0.95, level + extra + rng.normal(0, 0.05))))
            continue
        if burst_left == 0 and rng.random() < 0.03:
            burst_rank, burst_left = int(rng.integers(world)), int(rng.integers(3, 5))
        if burst_left:
            burst_left -= 1
            out.append((step, burst_rank, level * rng.uniform(1.3, 1.7)))
        else:
            out.append((step, int(rng.integers(world)), max(0.0, rng.normal(level, 0.12))))
    return out


@pytest.mark.parametrize("seed", range(4))
def test_a_job_that_waits_a_lot_when_nobody_is_slow_raises_the_bar_not_an_alarm(seed: int) -> None:
    """The references follow the job's own evidence level (wait_score.py): turns of 0.3 of a step and bursts of
    one rank at ~1.5x that for 3-4 steps name nobody over 1,000 steps, while a rank that adds 0.35 of a step (a
    2x straggler in such a job) is named within 3 steps of its onset. Without the background (wait_background=0) the same
    clean job is called a straggler: the test can fail."""
    rng = np.random.default_rng(seed)
    clean = _turns(rng, 4, 1010)
    score = WaitScore()
    for _, least, x in clean[:10]:  # start-up: the level only (StragglerDetector's wait_warmup)
        score.observe(x, least)
    clean = clean[10:]
    assert all(score.update(step, least, x, 1.0) is not None and score.named() is None for step, least, x in clean)
    fixed = WaitScore(background=0)
    assert any(fixed.update(step, least, x, 1.0) is not None and fixed.named() is not None
               for step, least, x in clean), "the fixed references call this clean job a straggler"
    slow = _turns(np.random.default_rng(seed), 4, 120, slow=2, onset=100, extra=0.35)
    score = WaitScore()
    for _, least, x in slow[:10]:
        score.observe(x, least)
    slow = slow[10:]
    named_at = next(step for step, least, x in slow if score.update(step, least, x, 1.0) is not None
                    and score.named() is not None)
    assert score.named() is not None and score.named()[0] == 2
    assert 100 <= named_at <= 103, named_at


def test_a_whole_machine_stall_on_one_step_names_nobody_whatever_the_windows_order() -> None:
    """One step where the host stalls every rank for seconds (a clean fsdp2 run of bench/detection.py --matrix:
    a 5.6 s step among 0.19 s ones, every rank waiting 4.9-5.5 s, the least-waiting one 0.57 s less): its
    evidence is its gap over that step's own length, not over the step before, even when its collective_wait
    window comes before its step_time window. (Judged over the previous step, the gap read as 3 steps, clipped
    to 1: the rank was named on that one step.)"""
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = np.random.default_rng(3)
    for step in range(60):
        step_time, wait = _step(rng, 8, {}, burst=0.0)
        if step in (30, 45):
            wait = np.full(8, 5.44) + rng.normal(0, 0.02, 8)
            wait[step % 8] = 4.87
            step_time = np.full(8, 5.62)
        det.observe(_row("collective_wait", step, wait))  # the waits first: the step's length not known yet
        det.observe(_row("step_time", step, step_time))
    assert log.query(JOB) == []


def test_a_new_culprit_named_on_its_own_score_closes_the_old_event_at_once() -> None:
    """Rank 2 is 2x slow for steps 5-11, rank 1 from step 12 on (4 ranks, no running shares): rank 2's event
    closes on the step rank 1 is named (StragglerDetector._hand_over) - not `wait_clear_steps` later, which would
    hold rank 1's event back by as many steps - and rank 1's event begins at its own onset."""
    for seed in range(10):
        rng = np.random.default_rng(seed)
        world = 4
        log = EventLog(None)
        det = StragglerDetector(log, config=StragglerConfig(wait_warmup=3))
        for step in range(30):
            compute = 0.1 * np.exp(0.02 * rng.standard_normal(world))
            if 5 <= step <= 11:
                compute[2] *= 2.0
            if step >= 12:
                compute[1] *= 2.0
            det.observe(_row("step_time", step, np.full(world, compute.max() + 0.004)))
            det.observe(_row("collective_wait", step, compute.max() - compute + 0.002))
        events = sorted(log.query(JOB), key=lambda e: e["step"])
        assert [e["ranks"] for e in events] == [[2], [1]], (seed, events)
        old, new = events[0], events[1]
        assert old["status"] == "closed" and new["status"] == "open", (seed, events)
        assert 12 <= new["step"] <= new["detail"]["detected_step"] <= 12 + 4, (seed, new["detail"])
        assert old["detail"]["cleared_at_step"] == new["detail"]["detected_step"], (seed, old["detail"], new["detail"])
        assert old["last_step"] < new["detail"]["detected_step"], (seed, old)


def test_a_leader_that_fails_the_run_check_does_not_hide_a_rank_that_qualifies() -> None:
    """Rank 1 is a slight straggler, waiting least on every step by 13 % of it (the persistence lane names it);
    then rank 2 is held back 72 % of a step for two steps (a blip): its fast-lane score leads rank 1's ratio but
    it has no run of `fast_steps` steps, so it is not named - and rank 1, which qualifies on its own lanes, still
    is (named() judged only the leader: it named nobody)."""
    score = WaitScore()
    for step in range(80):
        score.update(step, 1, 0.13, 1.0)
    assert score.named() == score.named(1) and score.named(1) is not None
    for step in range(80, 82):
        score.update(step, 2, 0.72, 1.0)
    leader = score.leader()
    assert leader is not None and leader[0] == 2 and leader[1] >= 1.0, leader
    assert score.named(2) is None
    named = score.named()
    assert named is not None and named[0] == 1 and named == score.named(1), named


# A recorded sync2 job (bench/detection_jobs/shapes.py: 4 CPU ranks on the loaded 2-core machine, rank 0 2x slower
# from step 14 after its optimizer step, so from step 15 on the others wait for it): each rank's step_time,
# runqueue_wait and collective_wait per step, as the root stored them (steps 0-19). On step 17 rank 2, held back
# between its steps, reached the collectives as late as rank 0 and waited 1 ms less (0.050 s vs 0.051).
_SYNC2_STEP = [
    (0.1253, 0.0564, 0.1206, 0.0911),
    (0.0769, 0.0822, 0.0861, 0.0578),
    (0.1142, 0.1038, 0.0875, 0.1223),
    (0.0686, 0.0735, 0.0749, 0.0423),
    (0.0697, 0.0755, 0.0679, 0.0904),
    (0.1079, 0.0793, 0.0799, 0.0649),
    (0.0523, 0.0679, 0.1089, 0.1186),
    (0.0734, 0.0946, 0.0675, 0.0358),
    (0.0713, 0.0911, 0.0660, 0.0850),
    (0.0940, 0.0821, 0.0964, 0.0693),
    (0.0863, 0.0613, 0.0906, 0.0857),
    (0.0775, 0.0995, 0.0888, 0.0982),
    (0.0588, 0.0432, 0.0425, 0.0608),
    (0.0505, 0.0636, 0.0811, 0.0650),
    (0.1656, 0.0739, 0.0730, 0.1080),
    (0.1318, 0.1257, 0.1125, 0.0880),
    (0.1113, 0.1570, 0.1483, 0.1383),
    (0.1411, 0.1027, 0.0823, 0.1217),
    (0.1186, 0.1442, 0.1562, 0.1351),
    (0.1668, 0.1143, 0.1035, 0.1207),
]
_SYNC2_QUEUED = [
    (0.0256, 0.0248, 0.0101, 0.0426),
    (0.0278, 0.0393, 0.0325, 0.0159),
    (0.0249, 0.0202, 0.0118, 0.0472),
    (0.0217, 0.0116, 0.0164, 0.0184),
    (0.0250, 0.0155, 0.0428, 0.0431),
    (0.0587, 0.0289, 0.0088, 0.0064),
    (0.0130, 0.0182, 0.0020, 0.0277),
    (0.0148, 0.0335, 0.0108, 0.0096),
    (0.0120, 0.0198, 0.0155, 0.0273),
    (0.0178, 0.0175, 0.0221, 0.0198),
    (0.0182, 0.0170, 0.0266, 0.0401),
    (0.0451, 0.0357, 0.0299, 0.0536),
    (0.0289, 0.0070, 0.0153, 0.0032),
    (0.0077, 0.0119, 0.0523, 0.0096),
    (0.0389, 0.0270, 0.0180, 0.0028),
    (0.0019, 0.0033, 0.0093, 0.0013),
    (0.0017, 0.0158, 0.0286, 0.0125),
    (0.0063, 0.0235, 0.0172, 0.0010),
    (0.0052, 0.0145, 0.0025, 0.0010),
    (0.0006, 0.0310, 0.0396, 0.0154),
]
_SYNC2_WAITS = [
    (0.0851, 0.0169, 0.0892, 0.0207),
    (0.0402, 0.0243, 0.0387, 0.0254),
    (0.0764, 0.0684, 0.0629, 0.0432),
    (0.0322, 0.0486, 0.0428, 0.0108),
    (0.0304, 0.0451, 0.0101, 0.0350),
    (0.0350, 0.0359, 0.0563, 0.0438),
    (0.0250, 0.0347, 0.0928, 0.0644),
    (0.0443, 0.0450, 0.0428, 0.0139),
    (0.0444, 0.0531, 0.0369, 0.0297),
    (0.0611, 0.0620, 0.0591, 0.0346),
    (0.0584, 0.0299, 0.0544, 0.0326),
    (0.0170, 0.0487, 0.0437, 0.0292),
    (0.0186, 0.0217, 0.0142, 0.0449),
    (0.0277, 0.0382, 0.0312, 0.0411),
    (0.0380, 0.0323, 0.0401, 0.0909),
    (0.0435, 0.1092, 0.0888, 0.0730),
    (0.0231, 0.1239, 0.1109, 0.1081),
    (0.0506, 0.0643, 0.0501, 0.1063),
    (0.0252, 0.1148, 0.1405, 0.1198),
    (0.0788, 0.0519, 0.0329, 0.0928),
]


def test_a_rank_arriving_with_the_straggler_for_a_step_does_not_restart_its_run() -> None:
    """The fast lane names a rank only after a run of `wait_fast_steps` steps of evidence; rank 2 waiting least
    by a hair on step 17 (tied with rank 0) cut rank 0's run in two, and it was named at step 22, 7 steps after
    the others began to wait for it (the 1-in-39 flake of test_straggler_shapes[sync2]). A tied step neither
    extends nor breaks the run: named at step 18, 3 steps of waiting after its onset."""
    log = EventLog(None)
    det = StragglerDetector(log)
    for step in range(len(_SYNC2_WAITS)):
        det.observe(_row("step_time", step, np.array(_SYNC2_STEP[step])))
        det.observe(_row("runqueue_wait", step, np.array(_SYNC2_QUEUED[step])))
        det.observe(_row("collective_wait", step, np.array(_SYNC2_WAITS[step])))
    events = log.query(JOB)
    assert [e["ranks"] for e in events] == [[0]], events
    assert events[0]["step"] == 15 and events[0]["detail"]["detected_step"] <= 18, events[0]


def test_a_tie_bridges_only_a_run_with_evidence() -> None:
    """A step on which the run's rank ties with another (`tied`) keeps the run only when it has evidence: a rank
    tied with another on a step where neither had any must not hold off the rank that waits least next."""
    score = WaitScore()
    score.update(0, 2, 0.01, 1.0)                # rank 2 least by a hair: a run without evidence
    score.update(1, 0, 0.5, 1.0, tied={2})       # rank 0 least by half a step, rank 2 tied: rank 0's run begins
    assert score.run == (0, 1)
    score.update(2, 1, 0.05, 1.0, tied={0})      # rank 1 least, rank 0 tied: rank 0's run stands, not extended
    assert score.run == (0, 1)
    score.update(3, 1, 0.05, 1.0)                # rank 1 least, rank 0 not tied: the run ends
    assert score.run == (1, 0)


def _descheduled(det_rows: list[list[Row]], det: StragglerDetector) -> None:
    for rows in det_rows:
        for row in rows:
            det.observe(row)


def _deschedule_run(seed: int, queued_seen: bool, world: int = 3, rank: int = 2,
                    held: range = range(20, 26)) -> list[list[Row]]:
    """`world` ranks; `rank` held back by a whole step (2x) on the steps `held`: descheduled (its run-queue wait
    is the time it lost, as the SDK's runqueue_wait reads it) when `queued_seen`, else slow (a sleep, a throttled
    device: no run-queue wait). Each step: step_time, runqueue_wait, collective_wait rows."""
    rng = np.random.default_rng(seed)
    out = []
    for step in range(40):
        extra = {rank: 0.1} if step in held else {}
        step_time, wait = _step(rng, world, extra)
        queued = np.abs(rng.normal(0.002, 0.001, world))
        if queued_seen and step in held:
            queued[rank] += 0.1
        out.append([_row("step_time", step, step_time), _row("runqueue_wait", step, queued),
                    _row("collective_wait", step, wait)])
    return out


def test_a_descheduled_rank_is_not_a_straggler_and_a_slow_one_still_is() -> None:
    """Six steps of one rank 2x behind the others: a straggler by its waits alone. When its run-queue wait says
    it was ready to run and got no CPU for that time, the lead is discounted and nothing is named; the same lead
    with no run-queue wait (slow, not descheduled) is named in time. Over 10 noise seeds."""
    for seed in range(10):
        log = EventLog(None)
        _descheduled(_deschedule_run(seed, queued_seen=True), StragglerDetector(log))
        assert log.query(JOB) == [], (seed, log.query(JOB))
        log = EventLog(None)
        _descheduled(_deschedule_run(seed, queued_seen=False), StragglerDetector(log))
        events = log.query(JOB)
        assert [e["ranks"] for e in events] == [[2]] and events[0]["detail"]["detected_step"] <= 20 + 3, (seed, events)
        assert events[0]["detail"]["runqueue_excess_s"] < 0.01, events[0]["detail"]
        log = EventLog(None)
        off = StragglerDetector(log, config=StragglerConfig(runqueue_discount=False))
        _descheduled(_deschedule_run(seed, queued_seen=True), off)
        assert [e["ranks"] for e in log.query(JOB)] == [[2]], (seed, log.query(JOB))  # the switch turns it off


@pytest.mark.parametrize("load", [2.0, 3.0, 4.0])
@pytest.mark.parametrize("seed", range(3))
def test_a_cpu_bound_straggler_on_a_loaded_host_is_named_in_time(load: float, seed: int) -> None:
    """Every runnable thread of the host gets 1 / `load` of a CPU, so each rank's run-queue wait is
    (load - 1) x its CPU time; rank 2 does `factor` x the CPU work from step 30 (a real CPU-bound straggler,
    not a sleep: it queues more in proportion, its share of time queued the same as its peers'). Only its
    run-queue wait over the median rank's *scaled by its busy time* is discounted: 2x named within 3 steps and
    1.5x within 5, as on an idle host (the absolute excess took ~(load - 1) / load of its lead: 2x named at
    6-7 steps at load 2, 18-20 at 3; the reviewer's /tmp/rev24/cpu_slow.py)."""
    for factor, within in ((2.0, 3), (1.5, 5)):
        rng = np.random.default_rng(seed)
        log = EventLog(None)
        det = StragglerDetector(log)
        for step in range(30 + within + 5):
            cpu = 0.1 * np.exp(rng.normal(0, 0.04, 3))
            if step >= 30:
                cpu[2] *= factor
            wall = load * cpu
            wait = wall.max() - wall + 0.01 * np.exp(rng.normal(0, 0.1, 3))
            det.observe(_row("step_time", step, wall + wait))
            det.observe(_row("runqueue_wait", step, (load - 1) * cpu))
            det.observe(_row("collective_wait", step, wait))
        events = log.query(JOB)
        assert [e["ranks"] for e in events] == [[2]], (factor, events)
        assert events[0]["detail"]["detected_step"] - 30 <= within, (factor, events[0]["detail"])


def test_the_suite_judges_a_steps_run_queue_waits_before_its_waits() -> None:
    """Windows of one step reach the detectors in whatever order the root finalised them: the suite orders the
    step's run-queue waits first, so the discount applies whichever came first."""
    from collectors.detectors.suite import Detectors
    for seed in range(3):
        log = EventLog(None)
        suite = Detectors(log)
        for rows in _deschedule_run(seed, queued_seen=True):
            suite.on_rows([rows[2], rows[0], rows[1]])  # waits, step_time, then the run-queue waits
        assert [e for e in log.query(JOB) if e["kind"] == "straggler"] == [], seed


@pytest.mark.parametrize("seed", range(5))
def test_a_job_that_logs_run_queue_waits_is_judged_at_the_fast_lanes_own_threshold(seed: int) -> None:
    """With the scheduler's bursts discounted the fast lane names at `runqueue_fast_threshold` (0.6, not 0.8):
    1.5x named within 5 steps and 2x within 3; a clean noisy job logging run-queue waits stays silent (the bursts
    of `_step` that no run-queue wait explains included); a job without them keeps 0.8."""
    for factor, within in ((2.0, 3), (1.5, 5)):
        log = EventLog(None)
        det = StragglerDetector(log)
        _run(det, 30 + within + 5, 3, slow=1, factor=factor, seed=seed, queued=True)
        events = log.query(JOB)
        assert [e["ranks"] for e in events] == [[1]], (factor, events)
        assert events[0]["detail"]["detected_step"] - 30 <= within, (factor, events[0]["detail"])
        score = det.state(JOB).score
        assert score is not None and score.lanes[0].threshold == StragglerConfig().runqueue_fast_threshold
    for world in (3, 8):
        log = EventLog(None)
        det = StragglerDetector(log)
        _run(det, 1000, world, seed=seed, queued=True)
        assert log.query(JOB) == [], (world, seed)
    det = StragglerDetector(EventLog(None))
    _run(det, 40, 3, seed=seed)
    score = det.state(JOB).score
    assert score is not None and score.lanes[0].threshold == StragglerConfig().wait_fast_threshold


def _fast_threshold_after(world: int, queued: np.ndarray, *, queued_after_waits: bool = False) -> float:
    """The fast lane's threshold after 12 steps of `world` ranks, rank 5 waiting least each step, with the run-queue
    waits `queued` each step (before or after the step's waits)."""
    det = StragglerDetector(EventLog(None))
    rng = np.random.default_rng(0)
    for step in range(12):
        wait = 0.05 + 0.01 * rng.random(world)
        wait[5] = 0.0
        det.observe(_row("step_time", step, np.full(world, 0.2)))
        rows = [_row("runqueue_wait", step, queued), _row("collective_wait", step, wait)]
        for row in reversed(rows) if queued_after_waits else rows:
            det.observe(row)
    score = det.state(JOB).score
    assert score is not None
    return score.lanes[0].threshold


def test_the_fast_lanes_own_threshold_only_where_the_discount_can_act() -> None:
    """`runqueue_fast_threshold` (0.6) holds on a step where the discount found the judged rank's run-queue wait;
    wherever it cannot act the job keeps `wait_fast_threshold` (0.8): a kernel that counts nothing (every rank 0),
    run-queue rows that come after the step's waits, a least-waiting rank outside the exact top-k of a world over
    8 (it waited no longer than those). Before: 0.6 once any run-queue row had arrived."""
    c = StragglerConfig()
    assert _fast_threshold_after(6, np.linspace(0.001, 0.006, 6)) == c.runqueue_fast_threshold
    assert _fast_threshold_after(6, np.zeros(6)) == c.wait_fast_threshold
    assert _fast_threshold_after(6, np.linspace(0.001, 0.006, 6), queued_after_waits=True) == c.wait_fast_threshold
    far = np.linspace(0.002, 0.012, 12)
    far[5] = 0.0001  # the least-waiting rank's run-queue wait is the least: outside the top 8
    assert _fast_threshold_after(12, far) == c.wait_fast_threshold


def test_a_run_queue_row_missing_ranks_is_not_used() -> None:
    """A step's run-queue row without some ranks' values (a rank whose clock gave up, a window not yet whole) is
    not the step's: its median is of the ranks present. Rank 2 is slow (a sleep) on a host where ranks 0 and 2
    queue alike; the row lacks rank 0, so its median is the mean of rank 1's few ms and rank 2's 0.1 s. Such a
    step is not kept (no discount), as `_waits` judges no step missing a rank's wait; the slow rank is named in
    time. Before: the row was kept as the step's (the state assertion fails; the proportional discount happens
    to leave this rank's lead whole, so the naming alone does not tell)."""
    log = EventLog(None)
    det = StragglerDetector(log)
    rng = np.random.default_rng(0)
    for step in range(40):
        step_time, wait = _step(rng, 3, {2: 0.1} if step >= 20 else {})
        det.observe(_row("step_time", step, step_time))
        queued = Summary.from_arrays(np.array([0.002, 0.1]), np.array([1, 2], dtype=np.int64), time.time_ns())
        det.observe(Row(Key(JOB, "runqueue_wait", step, 0), 3, queued, 0, time.time_ns()))
        det.observe(_row("collective_wait", step, wait))
        assert step not in det.state(JOB).queued
    events = log.query(JOB)
    assert [e["ranks"] for e in events] == [[2]] and events[0]["detail"]["detected_step"] <= 20 + 3, events


# Recorded clean runs of bench/detection.py --matrix (3 CPU ranks on the loaded 2-core machine) on which the rule
# before `descheduled_leave` named a rank (4 false alarms): each time a rank that waited least on ~60 % of 60 steps
# by 13-21 % of a step, and whose step thread queued for a CPU, over those steps, 0.9-1.0 of that lead more than
# the median rank (never a quarter of a step on 5 of 10 steps: cpu_starved's per-step test did not leave it).
_RECORDED_FALSE_ALARMS = {
    "detection_matrix_runqueue_heldout.json": ("mx-accum-clean-9348b9",),
    "detection_matrix_tie_heldout.json": ("mx-sync2-clean-adbd67",),
    "detection_matrix_runqueue1.json": ("mx-ddp-clean-1099b2",),
}


def _recorded_runs() -> list[dict]:
    from pathlib import Path

    from bench.recordings import read_json
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    runs = []
    for name, jobs in _RECORDED_FALSE_ALARMS.items():
        runs += [r for r in read_json(results / name)["runs"] if r["job"] in jobs]
    assert len(runs) == 3
    return runs


def test_a_rank_descheduled_over_many_steps_is_not_named_on_recorded_clean_runs() -> None:
    """Replayed as the root judged them (bench/detection_jobs/replay_matrix.py: each rank's own waits and run-queue
    waits, the agents' running shares remade): the false alarms are gone with `descheduled_leave`, and come back
    without it (the rule before): three of the four recorded, the fourth (rank 2's second) gone on its own since the
    agents seed each running share by the median of its first five (candidate D, session 46)."""
    from bench.detection_jobs.replay_matrix import replay_run
    for run in _recorded_runs():
        assert [e for e in replay_run(run, {})["events"] if e["kind"] == "straggler"] == [], run["job"]
    before = [e["ranks"] for run in _recorded_runs()
              for e in replay_run(run, {"descheduled_leave": False})["events"] if e["kind"] == "straggler"]
    assert sorted(before) == [[0], [0], [2]], before


# A recorded clean run (bench/detection.py --matrix, 3 CPU ranks of sync2 on the loaded 2-core machine;
# detection_matrix_oncpu_heldout.json, the tuning split) on which the per-step persistence lane named rank 0 at step
# 54: least-waiting on 60 % of 60 steps by 4-6 % of a step, a job whose own level was 3 %, while the running shares
# put its gap (0.02-0.10) under their own bar (0.31). docs/detectors.md, 2026-11-27.
_CHANCE_PERSISTENCE = ("detection_matrix_oncpu_heldout.json", "mx-sync2-clean-a7b4d5")


def test_the_per_step_persistence_lane_names_a_rank_only_where_the_running_shares_agree() -> None:
    """Replayed as the root judged it: no straggler event (before: rank 0, its event's step 54)."""
    from pathlib import Path

    from bench.detection_jobs.replay_matrix import replay_run
    from bench.recordings import read_json
    name, job = _CHANCE_PERSISTENCE
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    (run,) = [r for r in read_json(results / name)["runs"] if r["job"] == job]
    found = [(e["step"], e["ranks"]) for e in replay_run(run, {})["events"] if e["kind"] == "straggler"]
    assert found == [], found


# Two recorded clean fsdp2 runs of three ranks (held out) on which the running persistence lane named rank 2: it had
# the lowest running share on 80 % of 60 steps with a mean gap at the shares' own bar (~0.018: FSDP's ranks all wait
# ~75 % of a step, their shares are tight), while its lead over the other two in the step's own waits averaged 0.014
# and 0.005 of a step over the 60 steps before (a 1.1x rank: ~0.09), its on-CPU time 0.96 and 1.00 of theirs.
_CHANCE_RUNNING = [("detection_matrix_descheduled_live1.json", "mx-fsdp2-clean-7b8a54"),
                   ("detection_matrix_oncpu_live.json", "mx-fsdp2-clean-3a289d")]


@pytest.mark.parametrize(("name", "job"), _CHANCE_RUNNING)
def test_the_running_persistence_lane_names_a_rank_only_where_its_waits_lead(name: str, job: str) -> None:
    """Replayed as the root judged it: no straggler event (before: rank 2 named at step 181, and at 232 with its
    event's step 173). A rank named by that lane alone needs a mean lead of 0.04 of a step in its own waits over the
    window (straggler._waits_agree)."""
    from pathlib import Path

    from bench.detection_jobs.replay_matrix import replay_run
    from bench.recordings import read_json
    results = Path(__file__).resolve().parents[1] / "bench" / "results"
    (run,) = [r for r in read_json(results / name)["runs"] if r["job"] == job]
    found = [(e["step"], e["ranks"]) for e in replay_run(run, {})["events"] if e["kind"] == "straggler"]
    assert found == [], found


def _persistent_run(det: StragglerDetector, seed: int, queued_seen: bool, steps: int = 160,
                    onset: int = 30) -> None:
    """3 ranks; from `onset` rank 2 is ~12 % of a step behind on ~70 % of the steps (a 1.1x-1.15x rank, never a
    quarter of a step: cpu_starved's per-step test does not see it). With `queued_seen` that time was its step
    thread's run-queue wait, as on the recorded runs: over the steps about all of it (1.1 of it in the mean), on
    one step much less or much more (0.2 or 2.0 of it, half the steps each), so that the per-step discount keeps
    each short step's remainder; else it was slow (no run-queue wait)."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        behind = step >= onset and rng.random() < 0.7
        extra = {2: 0.012 + 0.004 * rng.random()} if behind else {}
        step_time, wait = _step(rng, 3, extra, burst=0.0)
        queued = np.abs(rng.normal(0.002, 0.001, 3))
        if queued_seen and behind:
            queued[2] += extra[2] * (0.2 if rng.random() < 0.5 else 2.0)
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("runqueue_wait", step, queued))
        det.observe(_row("collective_wait", step, wait))


@pytest.mark.parametrize("seed", range(5))
def test_a_slight_slow_lead_is_named_with_the_pooled_rule(seed: int) -> None:
    """`descheduled_leave` still names a slight, persistent lead where the rank was slow (no run-queue wait)."""
    log = EventLog(None)
    _persistent_run(StragglerDetector(log), seed, queued_seen=False)
    assert [e["ranks"] for e in log.query(JOB)] == [[2]], (seed, log.query(JOB))


def test_a_slight_lead_its_run_queue_wait_explains_over_many_steps_is_not_a_straggler() -> None:
    """The pooled rule (`descheduled_leave`) leaves a slight, persistent lead its run-queue wait explains over the
    steps though not on each step (descheduled from the job's start, as the recorded ranks were): without it the
    per-step discount's remainders name the rank on most seeds (4 of these 5), with it on none."""
    def events(leave: bool, seed: int) -> list[list[int]]:
        log = EventLog(None)
        _persistent_run(StragglerDetector(log, config=StragglerConfig(descheduled_leave=leave)), seed,
                        queued_seen=True, onset=0)
        return [e["ranks"] for e in log.query(JOB)]

    without = [events(False, seed) for seed in range(5)]
    assert sum(1 for e in without if e and e[0] == [2]) >= 3, without
    assert [events(True, seed) for seed in range(5)] == [[]] * 5


def _sleeping_straggler_among_many(det: StragglerDetector, world: int, factor: float, seed: int,
                                   steps: int = 160, onset: int = 30) -> None:
    """`world` ranks, rank 2 `factor`x slower from `onset` by sleeping (no extra run-queue wait); every rank's
    step thread queues a while each step, independently (exponential, 0.02 s in the mean: a loaded host)."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        step_time, wait = _step(rng, world, {2: (factor - 1.0) * 0.1} if step >= onset else {})
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("runqueue_wait", step, rng.exponential(0.02, world)))
        det.observe(_row("collective_wait", step, wait))


@pytest.mark.parametrize("factor", [1.1, 1.2])
def test_a_slight_sleeping_straggler_of_a_world_over_the_top_k_is_not_left_as_descheduled(factor: float) -> None:
    """In a world over the exact top-k (16 ranks), `descheduled_leave` counts the straggler's steps where it queued
    less than the top-k (its wait from the bottom-k): keeping only the steps where it was in the top-k kept those
    where it queued unusually long, and left a 1.1x rank unnamed in 160 steps on every seed (1.2x on 3 of 5).
    Named as with the rule off (within 5 steps of it), and 1.1x within the issue's bound of 100 steps."""
    def named(leave: bool, seed: int) -> int | None:
        log = EventLog(None)
        _sleeping_straggler_among_many(StragglerDetector(log, config=StragglerConfig(descheduled_leave=leave)), 16,
                                       factor, seed)
        events = log.query(JOB)
        return events[0]["detail"]["detected_step"] - 30 if events and events[0]["ranks"] == [2] else None

    for seed in range(5):
        with_rule, without = named(True, seed), named(False, seed)
        assert without is not None, seed
        assert with_rule is not None and with_rule <= without + 5, (seed, with_rule, without)
        if factor == 1.1:
            assert with_rule <= 100, (seed, with_rule)


def _held_once_then_slow(det: StragglerDetector, factor: float, seed: int, held_s: float, steps: int = 90,
                         onset: int = 30) -> None:
    """3 ranks; rank 2's step thread held on the run queue for `held_s` once, 3 steps before it turns `factor`x
    slower (sleeping) from `onset`; otherwise small independent run-queue waits."""
    rng = np.random.default_rng(seed)
    for step in range(steps):
        extra = {2: (factor - 1.0) * 0.1} if step >= onset else {}
        queued = np.abs(rng.normal(0.002, 0.001, 3))
        if step == onset - 3:
            extra = {2: held_s}
            queued[2] += held_s
        step_time, wait = _step(rng, 3, extra)
        det.observe(_row("step_time", step, step_time))
        det.observe(_row("runqueue_wait", step, queued))
        det.observe(_row("collective_wait", step, wait))


@pytest.mark.parametrize("factor", [2.0, 1.5])
def test_one_long_hold_on_the_run_queue_does_not_hide_a_severe_straggler(factor: float) -> None:
    """`descheduled_leave` counts each step's lead and excess up to the job's typical step: uncapped, one 2 s hold
    (20 steps' worth) outweighed every lead after it, and a 2x rank was named at 4-5 steps (bound 3), 1.5x at
    9-10 (bound 5)."""
    bound = {2.0: 3, 1.5: 5}[factor]
    for seed in range(5):
        log = EventLog(None)
        _held_once_then_slow(StragglerDetector(log), factor, seed, 2.0)
        events = [e for e in log.query(JOB) if e["ranks"] == [2]]
        assert events, (seed, log.query(JOB))
        assert events[0]["detail"]["detected_step"] - 30 <= bound, (seed, events[0]["detail"])


def test_descheduled_settings_are_checked() -> None:
    for bad in ({"descheduled_share": 0.0}, {"descheduled_share": 1.5}, {"descheduled_min_steps": 0},
                {"descheduled_min_steps": 61}, {"descheduled_window": 1001}, {"starved_recent": 0},
                {"starved_recent": 11}):
        with pytest.raises(ValueError, match="descheduled|starved_recent"):
            StragglerConfig(**bad)


# A recorded tensor-parallel job (tests/test_straggler_shapes.py[tp], 4 CPU ranks on the loaded 2-core machine, load
# 17-24): rank 3, 2x slower in its backward from step 14, was also starved of CPU on steps 11-15 (its step thread
# queued 0.06-0.11 s a step more than the median rank's, a quarter of a step and more) and no longer from step 16,
# yet `starved_leave` (5 starved steps of the last 10) left it to cpu_starved until step 21: named at 22, the
# test's bound 20. Per step: (step, step_time p50, collective_wait p50, min, argmin, each rank's
# runqueue_wait); the other ranks' waits are not recorded (each at the p50 here, as bench/detection_jobs/
# replay_matrix.py rebuilds them).
_TP_STARVED = [
    (0, 0.2272, 0.1610, 0.1378, 0, (0.0740, 0.0507, 0.0039, 0.0921)),
    (1, 0.1307, 0.0928, 0.0354, 3, (0.0199, 0.0343, 0.0070, 0.0281)),
    (2, 0.1345, 0.0902, 0.0766, 0, (0.0348, 0.0191, 0.0784, 0.0117)),
    (3, 0.1377, 0.1094, 0.0467, 2, (0.0083, 0.0155, 0.0098, 0.0187)),
    (4, 0.1413, 0.1084, 0.0260, 3, (0.0275, 0.0098, 0.0180, 0.0549)),
    (5, 0.1247, 0.0913, 0.0782, 1, (0.0054, 0.0331, 0.0529, 0.0559)),
    (6, 0.1295, 0.0877, 0.0546, 2, (0.0168, 0.0250, 0.0743, 0.0379)),
    (7, 0.1430, 0.1141, 0.0841, 3, (0.0136, 0.0093, 0.0210, 0.0903)),
    (8, 0.1348, 0.0828, 0.0678, 1, (0.0106, 0.0292, 0.0600, 0.0253)),
    (9, 0.1248, 0.0959, 0.0571, 0, (0.0840, 0.0442, 0.0239, 0.0104)),
    (10, 0.1199, 0.0939, 0.0677, 2, (0.0238, 0.0604, 0.0147, 0.0192)),
    (11, 0.1406, 0.1087, 0.0798, 3, (0.0158, 0.0245, 0.0115, 0.0764)),
    (12, 0.1915, 0.1607, 0.0269, 3, (0.0384, 0.0292, 0.0149, 0.1477)),
    (13, 0.1311, 0.0833, 0.0698, 3, (0.0179, 0.0545, 0.0023, 0.1245)),
    (14, 0.3185, 0.2769, 0.0829, 3, (0.0527, 0.0557, 0.0112, 0.1395)),
    (15, 0.3464, 0.3143, 0.0300, 3, (0.0259, 0.0236, 0.0118, 0.1281)),
    (16, 0.2982, 0.2725, 0.0631, 3, (0.0101, 0.0408, 0.0138, 0.0930)),
    (17, 0.2465, 0.2030, 0.0427, 3, (0.0284, 0.0674, 0.0125, 0.0436)),
    (18, 0.2356, 0.1767, 0.0798, 3, (0.0226, 0.0772, 0.0231, 0.0382)),
    (19, 0.3195, 0.2711, 0.0581, 3, (0.0255, 0.0529, 0.0300, 0.1191)),
    (20, 0.2779, 0.2323, 0.0820, 3, (0.0244, 0.0830, 0.0283, 0.0460)),
    (21, 0.2844, 0.2019, 0.1068, 3, (0.0603, 0.0746, 0.0086, 0.0590)),
    (22, 0.3190, 0.2510, 0.0856, 3, (0.0277, 0.1285, 0.0111, 0.0955)),
    (23, 0.2891, 0.2228, 0.1027, 3, (0.0520, 0.0723, 0.0932, 0.0443)),
    (24, 0.2424, 0.1625, 0.0353, 3, (0.0615, 0.0992, 0.0090, 0.0295)),
    (25, 0.2588, 0.2001, 0.0982, 3, (0.0564, 0.0600, 0.0530, 0.0192)),
]


# A recorded FSDP2 job (tests/test_straggler_shapes.py[fsdp2], load 13-24): rank 2, 2x slower in its backward from step
# 14, was starved of CPU on steps 2-13 (0.1-0.43 s a step more than the median rank, 4.5 times the lead it had on
# them; cpu_starved opened an event naming it) and not from step 15. No straggler event in the job's 26 steps: the
# open cpu_starved event left it whatever its lead (and the surplus of its earlier queueing counted against the
# lead of its fault in `descheduled_leave`'s sum). Same columns as _TP_STARVED.
_FSDP2_STARVED = [
    (0, 0.5659, 0.3333, 0.2710, 3, (0.1567, 0.1729, 0.2091, 0.1405)),
    (1, 0.4279, 0.3554, 0.3324, 3, (0.0026, 0.0266, 0.0072, 0.1645)),
    (2, 0.5757, 0.5102, 0.4907, 2, (0.0047, 0.0112, 0.2780, 0.1408)),
    (3, 0.6525, 0.5897, 0.5077, 2, (0.0040, 0.0049, 0.4217, 0.0307)),
    (4, 0.6194, 0.5609, 0.4643, 2, (0.0041, 0.0045, 0.2960, 0.0147)),
    (5, 0.6317, 0.5711, 0.5253, 2, (0.0018, 0.0058, 0.4308, 0.0111)),
    (6, 0.6320, 0.5693, 0.4541, 2, (0.0046, 0.0026, 0.3396, 0.0354)),
    (7, 0.5001, 0.4583, 0.3832, 2, (0.0016, 0.0096, 0.3441, 0.0135)),
    (8, 0.3639, 0.3107, 0.2950, 2, (0.0023, 0.0021, 0.1317, 0.0368)),
    (9, 0.5072, 0.4455, 0.4122, 2, (0.0016, 0.0033, 0.2378, 0.0539)),
    (10, 0.4019, 0.3581, 0.3479, 2, (0.0017, 0.0019, 0.1005, 0.0777)),
    (11, 0.5737, 0.5005, 0.4498, 2, (0.0015, 0.0054, 0.1481, 0.1355)),
    (12, 0.5367, 0.4685, 0.4470, 2, (0.0077, 0.0057, 0.1996, 0.1910)),
    (13, 0.5186, 0.4689, 0.4313, 2, (0.0018, 0.0129, 0.2556, 0.0457)),
    (14, 1.1043, 1.0450, 0.4633, 2, (0.0242, 0.0254, 0.2051, 0.0240)),
    (15, 0.8130, 0.7530, 0.2371, 2, (0.0163, 0.0017, 0.0100, 0.0083)),
    (16, 0.7976, 0.7292, 0.1856, 2, (0.0153, 0.0614, 0.0642, 0.0341)),
    (17, 0.8009, 0.7283, 0.1943, 2, (0.0241, 0.0247, 0.0398, 0.0353)),
    (18, 0.8072, 0.7540, 0.2422, 2, (0.0161, 0.0105, 0.0116, 0.0428)),
    (19, 0.7599, 0.7071, 0.1908, 2, (0.0044, 0.0373, 0.0070, 0.0238)),
    (20, 0.9650, 0.8729, 0.3938, 2, (0.0142, 0.0133, 0.0056, 0.1071)),
    (21, 0.9133, 0.8271, 0.3363, 2, (0.0183, 0.0947, 0.0168, 0.1117)),
    (22, 0.8167, 0.7168, 0.2190, 2, (0.0197, 0.0364, 0.0142, 0.0578)),
    (23, 0.8856, 0.8068, 0.2914, 2, (0.0127, 0.0249, 0.0414, 0.0462)),
    (24, 0.7577, 0.6961, 0.1622, 2, (0.0316, 0.0239, 0.0452, 0.0482)),
    (25, 0.7991, 0.7347, 0.2254, 2, (0.0537, 0.0135, 0.0198, 0.0520)),
]


def _replayed(recorded: list[tuple], settings: dict) -> list[tuple[str, list[int], int | None]]:
    """The recorded steps (the least-waiting rank at the min, the others at the p50) through the straggler and
    cpu_starved detectors, as the root runs them: (kind, ranks, detected step) of each event."""
    log = EventLog(None)
    detectors = (CpuStarvedDetector(log), StragglerDetector(log, config=StragglerConfig(**settings)))
    for step, step_p50, p50, least, argmin, queued in recorded:
        waits = np.full(4, p50)
        waits[argmin] = least
        for row in (_row("step_time", step, np.full(4, step_p50)), _row("runqueue_wait", step, np.array(queued)),
                    _row("collective_wait", step, waits)):
            for det in detectors:
                if det.wants(row):
                    det.observe(row)
    return [(e["kind"], e["ranks"], e["detail"].get("detected_step")) for e in log.query(JOB)]


def test_a_straggler_the_cpu_also_starves_is_named_once_the_starving_is_over() -> None:
    """Left to cpu_starved only while it is starved now (a starved step among its last `starved_recent`): named at
    step 18, three steps after its last starved step (at 21 with the whole `starved_window`: `starved_recent` 10)."""
    assert _replayed(_TP_STARVED, {}) == [("straggler", [3], 18)]
    assert _replayed(_TP_STARVED, {"starved_recent": 10}) == [("straggler", [3], 21)]


def test_a_straggler_starved_before_its_onset_is_named() -> None:
    """The open cpu_starved event no longer holds it once it is not starved now: named at step 19 (never, before;
    the shapes test's bound is 20). What still holds it until then is the surplus of its earlier queueing in
    `descheduled_leave`'s sum (capping each step's queueing at its lead named it at 16, but replayed over the
    held-out runs raised their false alarms from 5 to 9: not done)."""
    assert _replayed(_FSDP2_STARVED, {}) == [("cpu_starved", [2], None), ("straggler", [2], 19)]


def test_the_per_step_persistence_lane_judges_alone_once_the_running_shares_stop_coming() -> None:
    """A job whose running shares stopped coming (a rank without its figure, a restarted rank's steps going back,
    the job's metric budget): the gate on the per-step persistence lane (`_running_agrees`) read the last share step
    however old, so a slight straggler under the fast lane's reference, whose share steps no longer feed the slow
    lanes either, was never named (review of ef1a6c2: the cpu_work model, shares until step 100, a 1.1x rank from
    120: named before that commit, never after). Shares older than `running_stale` steps now count as none."""
    score = WaitScore()
    for step in range(20):  # shares at first: rank 0 has the lowest (no evidence)
        score.update(step, step % 3, 0.0, 1.0, world=3)
        score.update_running(step, 0, 0.0)
    assert not score.named()
    for step in range(20, 120):  # shares stop; rank 2 waits least by 6 % of a step on 3 steps in 4
        least = 2 if step % 4 else step % 2
        score.update(step, least, 0.06 if least == 2 else 0.01, 1.0, world=3)
    named = score.named()
    assert named is not None and named[0] == 2, named
