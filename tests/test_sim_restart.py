"""Issue 17: the simulator's `--inject restart:step=S,resume=K[,world=W]`.

A real tree (root, rack, agents) and simulated ranks on the real SDK: attempt 1 runs steps 1-5 on 4 ranks and
crashes (its processes exit without closing their runs); after a pause attempt 2 resumes at step 3 on 2 ranks
and runs to step 8. Through the root's API: both attempts' steps match the ranks' truth exactly (the replayed
steps 3-5 once per attempt), /goodput lists the two attempts with the replayed steps, and a `restart` event
says what the restart cost. Bad specs are refused with a message saying why.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from collectors.cli import main as cli
from collectors.sim.model import check_injections, parse_injection
from collectors.sim.orchestrate import SimConfig, Simulation, plan_attempts
from collectors.sim.verify import compare

pytestmark = pytest.mark.timeout(180)

RESTART = "restart:step=5,resume=3,world=2"


class GoodputSimulation(Simulation):
    """Reads the job's goodput while the tree is still up (run() stops it after the report)."""

    goodput: dict = {}

    def report(self) -> dict:
        report = super().report()
        self.goodput = self.fetch(f"/api/v1/jobs/{self.config.job}/goodput")
        return report


def test_a_restart_runs_two_attempts_and_the_root_accounts_the_replay(tmp_path: Path) -> None:
    injections = (RESTART, "spike:step=4,factor=3")
    config = SimConfig(ranks=4, ranks_per_node=2, nodes_per_rack=2, steps=8, step_interval=0.3, seed=11,
                       injections=[parse_injection(t) for t in injections], inject_texts=list(injections),
                       workdir=tmp_path / "sim", restart_pause_s=1.5, agent_deadline_floor=1.0,
                       collector_deadline_floor=1.0, root_deadline_floor=1.5)
    sim = GoodputSimulation(config)
    report = sim.run()

    assert report["world_sizes"] == {1: 4, 2: 2}
    problems = compare(report["metrics"], Path(report["truth_file"]), report["world_sizes"])
    assert problems == [], problems[:10]
    loss = [(r["step"], r["attempt"], r["count"]) for r in report["metrics"]["loss"]]
    assert loss == [(1, 1, 4), (2, 1, 4), (3, 1, 4), (3, 2, 2), (4, 1, 4), (4, 2, 2), (5, 1, 4), (5, 2, 2),
                    (6, 2, 2), (7, 2, 2), (8, 2, 2)]
    by_key = {(r["step"], r["attempt"]): r for r in report["metrics"]["loss"]}
    assert by_key[(4, 1)]["max"] != by_key[(4, 2)]["max"], "a replayed step's figures are the new attempt's own"
    delivery = report["delivery"]
    assert (delivery["duplicates"], delivery["sdk_dropped"], delivery["dropped_windows"]) == (0, 0, 0), delivery

    figures = sim.goodput
    assert figures["restarts"] == 1
    assert [(a["attempt"], a["world_size"], a["first_step"], a["last_step"], a["steps"], a["steps_replayed"])
            for a in figures["attempts"]] == [(1, 4, 1, 5, 5, 0), (2, 2, 3, 8, 6, 3)]
    second = figures["attempts"][1]
    assert second["downtime_s"] >= config.restart_pause_s, "the crash-to-restart pause is downtime"
    assert figures["lost_s"] > 0 and figures["replay_s"] > 0
    parts = figures["productive_s"] + figures["lost_s"] + figures["restart_downtime_s"]
    assert parts == pytest.approx(figures["wall_s"], abs=1e-6)
    assert 0 < figures["goodput"] < 1

    restarts = [e for e in report["events"] if e["kind"] == "restart"]
    assert len(restarts) == 1, report["events"]
    event = restarts[0]
    assert (event["job"], event["attempt"], event["severity"]) == ("sim", 2, "info")
    detail = event["detail"]
    assert (detail["previous_attempt"], detail["steps_replayed"], detail["previous_last_step"]) == (1, 3, 5)
    assert (detail["world_size"], detail["previous_world_size"]) == (2, 4)
    assert detail["downtime_s"] == pytest.approx(second["downtime_s"])


def test_the_plan_of_attempts() -> None:
    def plan(text: str, ranks: int = 4, steps: int = 10) -> list[tuple]:
        config = SimConfig(ranks=ranks, steps=steps, injections=[parse_injection(text)] if text else [])
        return [(a.attempt, a.world, a.first_step, a.last_step, a.crash) for a in plan_attempts(config)]

    assert plan("") == [(None, 4, 1, 10, False)]
    assert plan("restart:step=6,resume=4") == [(1, 4, 1, 6, True), (2, 4, 4, 10, False)]
    assert plan("restart:step=6,resume=6,world=8") == [(1, 4, 1, 6, True), (2, 8, 6, 10, False)]


@pytest.mark.parametrize("texts, message", [
    (["restart:step=5"], "restart: missing resume"),
    (["restart:step=5,resume=6"], "resume=6 is after step=5"),
    (["restart:step=0,resume=0"], "must be >= 1"),
    (["restart:step=5,resume=2,world=0"], "world=0 must be >= 1"),
    (["restart:step=5,resume=x"], "resume='x' is not a number"),
    (["restart:step=5,resume=2,ranks=3"], "unknown or malformed argument 'ranks=3'; takes step, resume, world"),
    (["restart:step=10,resume=2"], "must be before the last step (--steps 10)"),
    (["restart:step=5,resume=2", "restart:step=7,resume=6"], "at most one restart per run"),
    (["restart:step=5,resume=2", "hang:rank=1,step=3"], "cannot be combined with hang or dead"),
])
def test_bad_restart_specs_say_what_is_wrong(texts: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=None) as caught:
        check_injections([parse_injection(t) for t in texts], 4, 10)
    assert message in str(caught.value)
    result = CliRunner().invoke(cli, ["sim", "--ranks", "4", "--steps", "10",
                                      *[arg for t in texts for arg in ("--inject", t)]])
    assert result.exit_code == 2 and message in result.output.replace("\n", " "), result.output
