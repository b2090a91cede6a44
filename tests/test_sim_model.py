"""The simulator's rank model (issue 12, item 4): synchronous collectives by default, each rank working
out the step's slowest compute alone in O(1); without them, a rank's step time is its own compute."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys

import numpy as np

from collectors.sim.model import ARRIVAL, METRICS, OVERHEAD_S, TRANSFER_S, RankModel, metrics, parse_injection
from collectors.sim.sync import StepMax, _nth_not_in
from collectors.sim.verify import synchronised
from telemetry.names import WAIT_METRIC as WAIT
from telemetry.names import WORK_METRIC as WORK

WORLD = 64


def step_values(step: int, injections: tuple[str, ...] = (), world: int = WORLD, seed: int = 3,
                sync: bool = True) -> list[dict[str, float]]:
    parsed = [parse_injection(t) for t in injections]
    return [RankModel(r, seed, parsed, world, sync_collectives=sync).values(step) for r in range(world)]


def column(values: list[dict[str, float]], metric: str) -> list[float]:
    return [v[metric] for v in values]


def test_every_rank_waits_for_the_slowest_and_logs_its_own_compute_as_arrival():
    for step in range(1, 30):
        values = step_values(step)
        arrival, wall = column(values, ARRIVAL), column(values, "step_time")
        assert list(values[0]) == [*METRICS, ARRIVAL, WAIT, WORK] and metrics(True) == (*METRICS, ARRIVAL, WAIT, WORK)
        waits = column(values, WAIT)
        slowest = int(np.argmax(arrival))
        assert waits[slowest] <= min(waits) + 4 * TRANSFER_S, "the slowest rank waits least (but for the transfer)"
        assert all(w >= 0 for w in waits)
        assert min(wall) > max(arrival), "nobody leaves the step before the last rank arrives"
        assert max(wall) - max(arrival) < 10 * OVERHEAD_S, "a rank's wall time is the slowest compute + its overhead"
        assert 0.05 < min(arrival) and max(arrival) < 0.2


def test_a_straggler_slows_everyone_and_only_its_arrival_names_it():
    injections = ("straggler:rank=13,from=5,until=9,factor=2.5",)
    for step in range(1, 13):
        values = step_values(step, injections)
        arrival, wall = column(values, ARRIVAL), column(values, "step_time")
        slow = 5 <= step <= 9
        assert max(wall) / statistics.median(wall) < 1.05, "step_time cannot tell the straggler"
        assert (int(np.argmax(arrival)) == 13) == slow, step
        assert (int(np.argmin(column(values, WAIT))) == 13) == slow, "the others wait for it: it waits least"
        ratio = max(arrival) / statistics.median(arrival)
        assert (ratio > 2.0) == slow, (step, ratio)
        assert statistics.median(wall) > (0.2 if slow else 0.1), "the whole job runs at the straggler's pace"


def test_the_agreed_maximum_is_exactly_the_slowest_ranks_compute():
    """Each rank computes the step's maximum on its own; it equals the largest arrival bit for bit, whether
    a free rank or a straggler (two injections on one rank multiply) is the slowest."""
    cases = [((), {}), (("straggler:rank=0,from=1,factor=1.01",), {0: 1.01}),
             (("straggler:rank=7,from=1,factor=3", "straggler:rank=7,from=1,factor=2"), {7: 6.0})]
    for injections, slow in cases:
        for step in range(1, 8):
            arrival = column(step_values(step, injections, world=16), ARRIVAL)
            assert max(arrival) == StepMax(3, step, 16, slow, 0.1).max_s, (injections, step)


def test_deterministic_per_seed():
    assert step_values(4, seed=9) == step_values(4, seed=9)
    assert column(step_values(4, seed=9), ARRIVAL) != column(step_values(4, seed=10), ARRIVAL)


def test_o1_per_step_whatever_the_world_size():
    """A billion ranks would take hours if a rank looked at every other one."""
    model = RankModel(5, 0, [parse_injection("straggler:rank=999999999,from=1,factor=2")], 10**9)
    values = model.values(1)
    assert values["step_time"] > 0.17, "the last rank, twice as slow, sets everyone's pace"
    assert values[ARRIVAL] < 0.14, "rank 5's own compute: at most the maximum of 10**9 free draws (~6 sigma)"


def test_each_ranks_compute_and_the_maximum_have_the_law_of_independent_draws():
    """A rank's compute noise is N(0, 1) over steps, as without the model; the step maximum of n ranks is
    distributed as the maximum of n independent normals (checked against numpy's)."""
    z = [math.log(RankModel(5, 1, [], 1000).values(s)[ARRIVAL] / 0.1) / 0.05 for s in range(4000)]
    assert abs(statistics.mean(z)) < 0.06 and abs(statistics.stdev(z) - 1) < 0.05
    tops = np.array([math.log(StepMax(1, s, 200, {}, 0.1).max_s / 0.1) / 0.05 for s in range(8000)])
    reference = np.random.default_rng(0).standard_normal((8000, 200)).max(axis=1)
    assert abs(tops.mean() - reference.mean()) < 0.03 and abs(tops.std() - reference.std()) < 0.03
    argmax = [StepMax(1, s, 10, {3: 2.0}, 0.1).argmax for s in range(5000)]
    counts = np.bincount(argmax, minlength=10)
    assert counts[3] == 0 and counts.min(initial=10**9, where=np.arange(10) != 3) > 400, counts


def test_without_collectives_step_time_is_the_ranks_own_compute():
    values = step_values(6, ("straggler:rank=13,from=5,factor=2.5",), sync=False)
    wall = column(values, "step_time")
    assert list(values[0]) == list(METRICS) and metrics(False) == METRICS
    assert int(np.argmax(wall)) == 13 and max(wall) / statistics.median(wall) > 2.0
    synced = step_values(6, ("straggler:rank=13,from=5,factor=2.5",))
    assert [v["loss"] for v in values] == [v["loss"] for v in synced], "the other figures do not change"


def test_nth_not_in_skips_the_excluded():
    assert [_nth_not_in(n, {1, 3}) for n in range(4)] == [0, 2, 4, 5]
    assert [_nth_not_in(n, set()) for n in range(3)] == [0, 1, 2]


def test_verify_names_a_rank_that_left_before_the_last_arrived():
    steps = {"step_time": [{"step": 1, "count": 4, "min": 0.31, "argmin": 2},
                           {"step": 2, "count": 4, "min": 0.29, "argmin": 1}],
             ARRIVAL: [{"step": 1, "count": 4, "max": 0.3, "argmax": 3}, {"step": 2, "count": 4, "max": 0.3,
                                                                         "argmax": 0}]}
    assert synchronised(steps) == ["step 2: rank 1's step_time 0.29 is shorter than rank 0's collective_arrival 0.3"]
    assert synchronised({"step_time": steps["step_time"]}) == [], "without collectives nothing is checked"


def test_sim_help_documents_the_flag():
    out = subprocess.run([sys.executable, "-m", "collectors.cli", "sim", "--help"], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0 and "--sync-collectives / --no-sync-collectives" in out.stdout, out.stdout


def test_mfu_falls_with_a_straggler_as_real_mfu_does():
    """MFU = FLOPs / (wall x peak): under synchronous collectives the straggler slows every rank's step, so every
    rank's MFU falls by its factor; without, only its own (issue 23: it stayed at 45 % while step time doubled)."""
    injections = ("straggler:rank=13,from=5,until=9,factor=2.5",)
    healthy = statistics.mean(column(step_values(4, injections), "mfu"))
    slow = column(step_values(6, injections), "mfu")
    assert 0.43 < healthy < 0.47
    assert max(slow) < healthy / 2, "every rank waits for rank 13: everyone's MFU falls"
    assert 0.43 < statistics.mean(column(step_values(10, injections), "mfu")) < 0.47, "recovered"
    unsynced = column(step_values(6, injections, sync=False), "mfu")
    assert unsynced[13] < 0.2 and min(v for r, v in enumerate(unsynced) if r != 13) > 0.43
