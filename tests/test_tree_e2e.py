"""End to end (issue 3, "Must show"): the simulator's real tree of processes (root, racks, one agent per
node, simulated ranks on the real SDK) on loopback, checked exactly against the ranks' ground truth.

- 64 ranks with chaos (SIGKILL and restart of racks, agents and the root mid-run);
- 64 ranks without chaos, with NaN, spike and straggler injections (ranks synchronised through
  collectives: only `collective_arrival` names the straggler), and 16 ranks without collectives;
- a hung rank and a dead rank: the missing rank is named, the progress view tells which rank is behind
  and whether it is alive or dead.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from pathlib import Path

import pytest

from collectors.sim.model import ARRIVAL, METRICS, metrics, parse_injection
from collectors.sim.orchestrate import SimConfig, Simulation
from collectors.sim.verify import compare, load_truth


class ObservedSimulation(Simulation):
    """Records the root's progress view while hung or dead ranks are being observed."""

    def __init__(self, config: SimConfig) -> None:
        super().__init__(config)
        self.snapshots: list[dict] = []

    def _sleep_progress(self, seconds: float, what: str) -> None:
        end = time.time() + seconds
        while time.time() < end:
            time.sleep(min(0.5, max(0.0, end - time.time())))
            self.snapshots.append(self.fetch(f"/api/v1/jobs/{self.config.job}/progress"))


def simulate(tmp_path: Path, injections: tuple[str, ...] = (),
             **options: object) -> tuple[dict, ObservedSimulation]:
    config = SimConfig(injections=[parse_injection(t) for t in injections], inject_texts=list(injections),
                       workdir=tmp_path / "sim", **options)
    simulation = ObservedSimulation(config)
    report = simulation.run()
    return report, simulation


def verified(report: dict) -> None:
    problems = compare(report["metrics"], Path(report["truth_file"]), report["world_size"])
    assert problems == [], f"{len(problems)} mismatches against the truth, e.g. {problems[:10]}"
    for metric, rows in report["metrics"].items():
        counts = Counter(row["step"] for row in rows)
        assert all(n == 1 for n in counts.values()), f"{metric}: a step listed twice: {counts}"
        for row in rows:
            assert row["count"] <= report["world_size"], f"{metric} step {row['step']} counted {row['count']}"
            assert row["expected"] == report["world_size"]


def test_sim_64_ranks_with_chaos_is_exact(tmp_path):
    report, _ = simulate(tmp_path, ranks=64, steps=20, step_interval=0.3, seed=3, chaos=True, sync_collectives=True)
    verified(report)
    killed = Counter(entry["killed"].rstrip("0123456789") for entry in report["chaos_log"])
    assert killed["root"] == 1 and killed["rack"] >= 1 and killed["agent"] >= 1, report["chaos_log"]
    assert set(report["metrics"]) == set(metrics(True))
    for metric in metrics(True):
        rows = report["metrics"][metric]
        assert [r["step"] for r in rows] == list(range(1, 21)), f"{metric}: every step finalised once"
        assert all(r["count"] == 64 and r["missing"] == [] for r in rows), metric
    delivery = report["delivery"]
    assert delivery["sdk_dropped"] == 0 and delivery["dropped_windows"] == 0, delivery
    assert delivery["resent"] > 0, delivery


def test_sim_64_ranks_without_chaos_with_injections_is_exact(tmp_path):
    injections = ("nan:rank=5,step=3", "nan:rank=40,step=7", "spike:step=5,factor=4",
                  "straggler:rank=17,from=2,factor=3")
    report, _ = simulate(tmp_path, injections, ranks=64, steps=10, step_interval=0.3, seed=4, sync_collectives=True)
    verified(report)
    loss = {r["step"]: r for r in report["metrics"]["loss"]}
    assert sorted(loss) == list(range(1, 11))
    assert (loss[3]["nonfinite_sources"], loss[3]["nonfinite_count"], loss[3]["count"]) == ([5], 1, 63)
    assert (loss[7]["nonfinite_sources"], loss[7]["count"]) == ([40], 63)
    assert all(r["nonfinite_count"] == 0 for s, r in loss.items() if s not in (3, 7))
    assert loss[5]["min"] > 3 * loss[4]["max"], "the spike shows at step 5"
    arrival = report["metrics"][ARRIVAL]
    assert all(r["argmax"] == 17 for r in arrival if r["step"] >= 2), "the straggler arrives last"
    step_time = report["metrics"]["step_time"]
    assert all(r["max"] / r["p50"] < 1.1 for r in step_time), "everyone waits for it: step_time cannot tell"
    delivery = report["delivery"]
    assert (delivery["duplicates"], delivery["rejected_overlaps"], delivery["resent"], delivery["sdk_dropped"],
            delivery["dropped_windows"], delivery["bad_inputs"]) == (0, 0, 0, 0, 0, 0), delivery
    assert report["latency_ms"]["samples"] > 0


def test_sim_without_collectives_step_time_names_the_straggler(tmp_path):
    report, _ = simulate(tmp_path, ("straggler:rank=9,from=2,factor=3",), ranks=16, steps=5, step_interval=0.3,
                         seed=7, sync_collectives=False)
    verified(report)
    assert set(report["metrics"]) == set(METRICS)
    assert not any(metric == ARRIVAL for metric, _ in load_truth(Path(report["truth_file"]))), "nothing to arrive at"
    step_time = report["metrics"]["step_time"]
    assert [r["step"] for r in step_time] == [1, 2, 3, 4, 5]
    assert all(r["argmax"] == 9 and r["max"] / r["p50"] > 2 for r in step_time if r["step"] >= 2)


FAST_FLOORS = {"agent_deadline_floor": 1.0, "collector_deadline_floor": 1.0, "root_deadline_floor": 1.5,
               "hang_observe_s": 6.0}


def test_sim_hung_rank_is_named_missing_and_behind(tmp_path):
    report, sim = simulate(tmp_path, ("hang:rank=11,step=6", "nan:rank=2,step=3"), ranks=16, steps=10,
                           step_interval=0.3, seed=5, sync_collectives=True, **FAST_FLOORS)
    verified(report)
    loss = {r["step"]: r for r in report["metrics"]["loss"]}
    assert sorted(loss) == list(range(1, 7)), "nobody completes step 6; the blocked ranks logged its loss"
    assert (loss[6]["missing"], loss[6]["count"]) == ([11], 15)
    assert loss[3]["nonfinite_sources"] == [2]
    assert all(loss[s]["missing"] == [] for s in range(1, 6))
    for metric in ("step_time", "grad_norm", "mfu", "dataloader_wait", ARRIVAL):
        assert [r["step"] for r in report["metrics"][metric]] == [1, 2, 3, 4, 5], metric
    behind = [s for s in sim.snapshots if s.get("min_step") == 5 and s.get("ranks_at_min") == [11]
              and s.get("max_step") == 6]
    assert behind, f"the progress view never showed rank 11 alone behind at step 5: {sim.snapshots[-3:]}"
    assert behind[-1]["dead"] == 0 and behind[-1]["alive"] == 16, "the hung rank is alive"


def test_sim_dead_rank_is_named_missing_and_dead(tmp_path):
    report, sim = simulate(tmp_path, ("dead:rank=3,step=6",), ranks=16, steps=10, step_interval=0.3, seed=6,
                           **FAST_FLOORS)
    verified(report)
    truth = load_truth(Path(report["truth_file"]))
    assert 3 not in truth[("loss", 6)] and 3 in truth[("loss", 5)]
    loss = {r["step"]: r for r in report["metrics"]["loss"]}
    assert sorted(loss) == list(range(1, 7))
    assert (loss[6]["missing"], loss[6]["count"]) == ([3], 15)
    dead = [s for s in sim.snapshots if s.get("dead_ranks") == [3]]
    assert dead, f"the progress view never called rank 3 dead: {sim.snapshots[-3:]}"
    assert (dead[-1]["dead"], dead[-1]["alive"], dead[-1]["max_step"]) == (1, 15, 6)


def _live_children() -> list[int]:
    """Processes (not zombies) whose parent is this test process."""
    me = str(os.getpid())
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[1] == me and fields[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


@pytest.fixture(autouse=True)
def _no_orphans():
    """The simulator's processes never outlive it."""
    before = set(_live_children())
    yield
    deadline = time.monotonic() + 10
    while set(_live_children()) - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not set(_live_children()) - before, "processes left behind by the simulation"
