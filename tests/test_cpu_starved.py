"""cpu_starved: a rank whose step thread waits for a CPU far more than the job's median rank, step after step.

The matrix: world sizes (2 to 64: past the run-queue summary's exact top-k) x how much more the starved rank
queues x the noise every rank queues with (an idle host to one loaded evenly, like this 2-core machine under
load); and the shapes that must raise nothing: a host every rank of which queues alike, a slow rank that is not
queued (a sleep, a slow GPU), a rank starved for a few steps only, a job of one rank, a job without the figure."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors import Context, Detectors, DetectorsConfig, EventLog
from collectors.detectors.cpu_starved import CpuStarvedConfig, CpuStarvedDetector
from telemetry.summary import Summary

JOB = "train"
STEP_S = 0.25


def summary(values: dict[int, float]) -> Summary:
    return Summary.from_arrays(np.array(list(values.values()), dtype=np.float64),
                               np.array(list(values), dtype=np.int64), time.time_ns())


def row(metric: str, step: int, values: dict[int, float], world: int, late: int = 0) -> Row:
    return Row(Key(JOB, metric, step, 0), world, summary(values), late, time.time_ns())


def setup(config: CpuStarvedConfig | None = None, hosts_per: int = 8):
    log = EventLog(None)
    ctx = Context(hosts_of=lambda job: {r: f"node{r // hosts_per}" for r in range(1024)})
    return log, CpuStarvedDetector(log, ctx, config)


def feed(det, step: int, world: int, queued: dict[int, float], slow: dict[int, float] | None = None,
         order: str = "queued_first") -> None:
    """One step: each rank's run-queue wait (s) and step time (STEP_S, or `slow`'s)."""
    times = {r: (slow or {}).get(r, STEP_S) for r in range(world)}
    rows = [row("runqueue_wait", step, queued, world), row("step_time", step, times, world)]
    for r in rows if order == "queued_first" else rows[::-1]:
        if det.wants(r):
            det.observe(r)


def noisy(rng: random.Random, world: int, level: float) -> dict[int, float]:
    """Every rank queued about `level` of its step, with the scheduler's noise."""
    return {r: STEP_S * min(1.0, rng.uniform(0.5, 1.5) * level) if level else STEP_S * rng.uniform(0, 0.02)
            for r in range(world)}


def starved_events(log: EventLog) -> list[dict]:
    return [e for e in log.query(JOB) if e["kind"] == "cpu_starved"]


# (world, excess, level): a rank cannot queue more than its step (level + excess <= 1); of two ranks the
# reference is the other's noisy wait (up to 1.5 x level), so the excess must clear min_excess over its noise
SHAPES = [(world, excess, level) for world in (2, 4, 16, 64) for excess in (0.35, 0.6, 0.9) for level in (0.0, 0.2, 0.4)
          if level + excess <= 1.0 and (world > 2 or excess - level / 2 >= CpuStarvedConfig().min_excess)]


@pytest.mark.parametrize(("world", "excess", "level"), SHAPES)
def test_a_starved_rank_is_named_with_its_host(world, excess, level):
    """From step 20 rank `world - 1` queues `excess` of a step more than its peers: named, nothing before, with
    its host and the step the starvation began; closed once it runs again."""
    rng = random.Random(world * 100 + int(excess * 10) + int(level * 100))
    log, det = setup()
    victim = world - 1
    config = det.config
    for step in range(20):
        feed(det, step, world, noisy(rng, world, level))
    assert starved_events(log) == []
    for step in range(20, 40):
        queued = noisy(rng, world, level)
        queued[victim] = STEP_S * (level + excess)
        feed(det, step, world, queued)
    (event,) = starved_events(log)
    assert event["ranks"] == [victim] and event["severity"] == "warning"
    assert event["hosts"] == [f"node{victim // 8}"]
    assert 20 <= event["step"] and event["detail"]["ranks"][0]["starved_steps"] >= config.needed
    assert event["detail"]["ranks"][0]["host"] == f"node{victim // 8}"
    assert event["detail"]["ranks"][0]["queued_share"] == pytest.approx(level + excess, abs=0.01)
    assert event["step"] == 20
    for step in range(40, 80):  # its hits leave the window in 10 steps, then clear_steps (30) quiet ones
        feed(det, step, world, noisy(rng, world, level))
    assert starved_events(log)[0]["status"] == "closed"


def test_named_within_needed_steps_of_the_onset():
    log, det = setup()
    rng = random.Random(5)
    for step in range(10):
        feed(det, step, 8, noisy(rng, 8, 0.1))
    opened = None
    for step in range(10, 30):
        queued = noisy(rng, 8, 0.1)
        queued[3] = STEP_S * 0.8
        feed(det, step, 8, queued)
        if opened is None and starved_events(log):
            opened = step
    assert opened == 10 + det.config.needed - 1


@pytest.mark.parametrize("level", [0.3, 0.6, 0.9])
@pytest.mark.parametrize("world", [2, 3, 8, 64])
def test_a_host_every_rank_of_which_queues_alike_is_not_one_starved_rank(level, world):
    """The machine loaded evenly (this 2-core machine under load: clean runs queue 30-66 % of their step): no
    rank is starved more than its peers."""
    log, det = setup()
    rng = random.Random(world + int(level * 10))
    for step in range(300):
        feed(det, step, world, noisy(rng, world, level))
    assert starved_events(log) == []


def test_a_slow_rank_that_is_not_queued_is_not_starved():
    """A straggler (a sleep, a slow GPU): a longer step, no run-queue wait: the straggler's, not this."""
    log, det = setup()
    rng = random.Random(7)
    for step in range(100):
        feed(det, step, 8, noisy(rng, 8, 0.05), slow={2: STEP_S * 2})
    assert starved_events(log) == []


def test_a_few_starved_steps_are_not_named():
    log, det = setup()
    rng = random.Random(8)
    for step in range(200):
        queued = noisy(rng, 8, 0.1)
        if step % 10 < det.config.needed - 1:  # starved 7 steps in every 10: one short of the rule
            queued[5] = STEP_S * 0.9
        feed(det, step, 8, queued)
    assert starved_events(log) == []


def test_more_starved_ranks_than_the_top_k_names_only_starved_ranks():
    """A host of 16 starved ranks in a job of 64 (the summary's exact top-k holds 8): every rank named is one of
    them, and ranks outside the top-k are not cleared while the top-k is all starved."""
    log, det = setup()
    rng = random.Random(9)
    starved = set(range(16, 32))
    for step in range(40):
        queued = noisy(rng, 64, 0.1)
        for r in starved:
            queued[r] = STEP_S * rng.uniform(0.7, 0.9)
        feed(det, step, 64, queued)
    (event,) = starved_events(log)
    assert event["ranks"] and set(event["ranks"]) <= starved
    assert event["hosts"] and set(event["hosts"]) <= {"node2", "node3"}


@pytest.mark.parametrize("starved_n", [9, 16, 24, 32])
def test_every_starved_host_is_named_when_more_ranks_are_starved_than_the_top_k(starved_n):
    """24 or 32 ranks starved alike (3-4 whole hosts of 8), top-k 8: each rank reaches the top-k only some
    steps, so its record must not be aged away by step number while the top-k is all starved; every starved
    host is named, and the event says the top-k was saturated and how many starved ranks were seen."""
    rng = random.Random(1)
    log, det = setup()
    for step in range(80):
        queued = {r: STEP_S * rng.uniform(0, 0.02) for r in range(64)}
        for r in range(starved_n):
            queued[r] = STEP_S * 0.6 * rng.uniform(0.9, 1.1)
        feed(det, step, 64, queued)
    (event,) = starved_events(log)
    assert set(event["ranks"]) == set(range(starved_n))
    assert {x["host"] for x in event["detail"]["ranks"]} == {f"node{r // 8}" for r in range(starved_n)}
    assert event["detail"]["more_than_k"] is True
    assert event["detail"]["starved_ranks_seen"] == starved_n


def test_nothing_to_compare_with_or_nothing_to_read():
    log, det = setup()
    for step in range(50):
        feed(det, step, 1, {0: STEP_S * 0.9})  # one rank: no peer
    for step in range(50):
        det.observe(row("runqueue_wait", step, {0: 0.0, 1: STEP_S * 0.9}, 2))  # no step_time: nothing to judge
    for step in range(50):  # late deltas only
        det.observe(row("runqueue_wait", step + 100, {0: 0.0, 1: STEP_S * 0.9}, 2, late=1))
        det.observe(row("step_time", step + 100, {0: STEP_S, 1: STEP_S}, 2, late=1))
    assert starved_events(log) == []
    assert len(det._jobs[JOB].pending) <= 16


@pytest.mark.parametrize("order", ["queued_first", "step_time_first"])
def test_the_order_of_a_steps_two_windows_does_not_matter(order):
    log, det = setup()
    for step in range(20):
        feed(det, step, 4, {0: 0.0, 1: 0.01, 2: 0.0, 3: STEP_S * 0.8}, order=order)
    assert [e["ranks"] for e in starved_events(log)] == [[3]]


def test_config_is_validated_and_the_suite_runs_it():
    with pytest.raises(ValueError):
        CpuStarvedConfig(needed=11, window=10)
    with pytest.raises(ValueError):
        DetectorsConfig.from_mapping({"cpu_starved": {"min_excess": 0}})
    with pytest.raises(ValueError):
        DetectorsConfig.from_mapping({"cpu_starved": {"clear_below": 8}})
    with pytest.raises(ValueError):
        DetectorsConfig.from_mapping({"cpu_starved": {"clear_steps": 0}})
    log = EventLog(None)
    suite = Detectors(log, DetectorsConfig(), Context(hosts_of=lambda job: {r: "h" for r in range(4)}))
    for step in range(20):
        suite.on_rows([row("runqueue_wait", step, {0: 0.0, 1: 0.01, 2: 0.0, 3: STEP_S * 0.8}, 4),
                       row("step_time", step, {r: STEP_S for r in range(4)}, 4)])
    (event,) = [e for e in log.query(JOB) if e["kind"] == "cpu_starved"]
    assert event["ranks"] == [3] and event["hosts"] == ["h"]
    off = EventLog(None)
    suite = Detectors(off, DetectorsConfig.from_mapping({"cpu_starved": {"enabled": False}}))
    for step in range(20):
        suite.on_rows([row("runqueue_wait", step, {0: 0.0, 1: 0.01, 2: 0.0, 3: STEP_S * 0.8}, 4),
                       row("step_time", step, {r: STEP_S for r in range(4)}, 4)])
    assert off.query(JOB) == []


def test_a_rank_starved_off_and_on_keeps_one_event():
    """A busy neighbour that comes and goes (12 steps on, 8 off, for 200 steps): one event while it lasts, not one
    per burst; closed clear_steps after the last burst."""
    log, det = setup()
    rng = random.Random(10)
    for step in range(200):
        queued = noisy(rng, 8, 0.1)
        if step % 20 < 12:
            queued[6] = STEP_S * 0.8
        feed(det, step, 8, queued)
    (event,) = starved_events(log)
    assert event["ranks"] == [6] and event["status"] == "open"
    for step in range(200, 250):
        feed(det, step, 8, noisy(rng, 8, 0.1))
    (event,) = starved_events(log)
    assert event["status"] == "closed"


def test_a_second_starved_rank_joins_the_open_event():
    log, det = setup()
    for step in range(40):
        queued = {r: 0.005 for r in range(8)}
        queued[1] = STEP_S * 0.8
        if step >= 20:
            queued[5] = STEP_S * 0.7
        feed(det, step, 8, queued)
    (event,) = starved_events(log)
    assert event["ranks"] == [1, 5] and [r["rank"] for r in event["detail"]["ranks"]] == [1, 5]
