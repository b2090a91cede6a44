"""bench/detection.py: its scoring rules on hand-made runs, and a small real run (one clean MLP job and one with
a bad batch, 3 gloo ranks under torchrun against a real root and agent) that writes a well-formed
detection.json and catches the fault, naming the rank.

No threshold on false alarms here: the figures depend on the machine's load, and reporting them is the
bench's job; the test checks that they are measured and that a real fault is caught.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.detection_jobs import dominance, inject, runqueue, slow_lead
from bench.detection_jobs.logs import done_lines
from bench.detection_jobs.matrix import aggregate as matrix_aggregate
from bench.detection_jobs.matrix import lead_bound, lead_slowdown, score_cell, uninjected_slowness
from bench.detection_jobs.replay import stored_job
from bench.detection_jobs.replay_matrix import evaluate
from bench.detection_jobs.score import aggregate, rank_verdict, score_run, step_at, table

REPO = Path(__file__).resolve().parent.parent


def _event(id_: int, kind: str, step: int, opened: float, ranks: list[int]) -> dict:
    return {"id": id_, "kind": kind, "step": step, "detail": {"summary": kind},
            "seen": {"opened": opened, "exact": True, "ranks": ranks}}


def test_scoring_false_alarms_detections_delays_and_ranks():
    finalised = [[s, int((100 + s) * 1e9)] for s in range(200)]  # step s finalised at t = 100 + s
    clean = {"job": "c", "model": "mlp", "seed": 0, "fault": "none", "steps_done": 200, "truth": None,
             "finalised": finalised, "events": [_event(1, "loss_spike", 50, 150.5, [])]}
    fault = {"job": "f", "model": "lm", "seed": 0, "fault": "bad_batch", "steps_done": 200, "finalised": finalised,
             "truth": {"rank": 2, "step": 100, "time": 199.5},
             "events": [_event(2, "straggler", 40, 140.2, [1]),         # before the fault: a false alarm
                        _event(3, "loss_spike", 100, 203.2, [2]),       # the detection
                        _event(4, "mfu_drop", 120, 221.0, [])]}         # after it, not expected: collateral
    a, b = score_run(clean), score_run(fault)
    assert a["clean_steps"] == 200 and [e["kind"] for e in a["false_alarms"]] == ["loss_spike"]
    assert b["clean_steps"] == 100 and [e["kind"] for e in b["false_alarms"]] == ["straggler"]
    hit = b["detections"]["loss_spike"]
    assert hit["detected"] and hit["delay_s"] == pytest.approx(3.7) and hit["delay_steps"] == 3
    assert hit["rank"] == "exact" and [e["kind"] for e in b["collateral"]] == ["mfu_drop"]
    agg = aggregate([a, b])
    spike = agg["per_detector"]["loss_spike"]
    assert (spike["false_alarms"], spike["clean_steps"], spike["false_alarms_per_1000_steps"]) == (1, 300, 3.333)
    assert (spike["detected"], spike["fault_runs"], spike["ranks"]) == (1, 1, {"exact": 1})
    assert agg["per_fault"]["bad_batch"] == {"runs": 1, "caught": 1, "expected": ["loss_spike"],
                                             "by": {"loss_spike": 1}, "collateral": ["mfu_drop"]}
    assert "| loss_spike | 3.333 (1) | 1/1 |" in table(agg)
    assert step_at(finalised, 99.9) is None and step_at(finalised, 150.0) == 50
    assert [rank_verdict(n, 2) for n in ([2], [1, 2], [1], [])] == ["exact", "includes", "wrong", "none"]


def _matrix_run(cell: str, factor: float, slow: int, onset: int, steps: int, seed: int) -> dict:
    """A recorded matrix run (bench/detection.py --matrix's `waits`): 3 ranks taking turns waiting least by
    ~0.1 of a 0.5 s step; from `onset` rank `slow` waits least every step by (factor - 1) / factor of it."""
    import random
    rng = random.Random(seed)
    waits, finalised = [], []
    for step in range(steps):
        slowed = factor and step >= onset
        least = slow if slowed else rng.randrange(3)
        share = (factor - 1) / factor if slowed else abs(rng.gauss(0.08, 0.05))
        waits.append([step, least, 0.01, 0.01 + share * 0.5, 3, 0.5, 0.02 + share * 0.5, (least + 1) % 3])
        finalised.append([step, int((1000 + step) * 1e9)])
    truth = {"rank": slow, "step": onset, "time": 1000 + onset - 0.5} if factor else None
    return {"job": cell, "cell": cell, "shape": cell.split("-")[0], "factor": factor, "where": "forward", "world": 3,
            "steps": steps, "steps_done": steps, "truth": truth, "finalised": finalised, "waits": waits, "events": []}


def test_matrix_replay_scores_a_rule_over_recorded_waits() -> None:
    """bench/detection_jobs/replay_matrix.py: recorded waits through the detector with given settings, scored
    as the matrix scores live runs; a threshold too high misses the straggler, one too low cries wolf."""
    runs = [_matrix_run("ddp-clean", 0.0, -1, 0, 300, 1), _matrix_run("ddp-forward-2x", 2.0, 1, 40, 60, 2)]
    out = evaluate(runs, {})
    assert out["false_alarms"] == 0 and out["clean_steps"] == 340 and out["in_time"] == {"2x": "1/1"}
    (fault,) = [s for s in out["scored"] if s["factor"]]
    assert fault["detection"]["ranks"] == [1] and fault["detection"]["delay_steps"] <= 3
    assert evaluate(runs, {"wait_fast_threshold": 50, "wait_threshold": 50})["in_time"] == {"2x": "0/1"}
    loose = {"wait_fast_drift": 0.0, "wait_drift": 0.0, "wait_background": 0}
    assert evaluate(runs, loose)["false_alarms"] > 0


def test_the_matrix_records_the_slowdown_the_lead_implies_and_judges_its_bound() -> None:
    """matrix.lead_slowdown: the slow rank's slowdown after its onset as the waits show it (step / (step - lead));
    `in_time_by_lead` judges the delay against the bound of that severity (a secondary verdict beside `in_time`, which
    keeps the injected factor's): a rank given 2x its CPU work whose lead implies 1.5x is judged by 1.5x's 5 steps. From the recorded waits (least, min, p50) and from each rank's own (`per_rank`)."""
    run = _matrix_run("sync2-forward-2x", 2.0, 1, 40, 60, 2)  # the slow rank waits least by half the step
    assert lead_slowdown(run) == pytest.approx(2.0)
    for entry in run["waits"]:  # ... by a third of it: 1.5x
        if entry[0] >= 40:
            entry[3] = 0.01 + 0.5 / 3
    assert lead_slowdown(run) == pytest.approx(1.5)
    assert lead_slowdown({**run, "truth": None}) is None
    # each rank's own wait: rank 1 waits 0.25 s less than the median rank of a 0.5 s step on every step after 40
    own = [[step, {"0": 0.3, "1": 0.05, "2": 0.3}, {}] for step in range(40, 60)]
    assert lead_slowdown({**run, "per_rank": own}) == pytest.approx(2.0)
    assert [lead_bound(v) for v in (2.3, 2.0, 1.6, 1.3, 1.15, 1.05, None)] == [3, 3, 5, 30, 100, None, None]
    run["events"] = [_event(1, "straggler", 40, 1044.0, [1])]  # opened when step 44 was finalised: 4 steps
    for e in run["events"]:
        e["seen"]["opened"] = 1044.0
    det = score_cell(run)["detection"]
    assert det["delay_steps"] == 4 and det["slowdown"] == pytest.approx(1.5)
    assert not det["in_time"] and det["in_time_by_lead"]  # late for 2x's 3 steps, in time for 1.5x's 5


def test_a_false_alarm_on_a_rank_slow_by_its_own_work_is_counted_and_listed_apart() -> None:
    """matrix.uninjected_slowness: an alarm in a clean run whose named rank did >= 1.05x the other ranks' median
    on-CPU work (median of the 30 steps up to the step the alarm was raised on) is marked `uninjected_slow`: still a false alarm in
    the raw count, and counted apart (per shape, and per 1,000 clean steps without those). A burst with the same work
    as its peers, or a run without on-CPU times, is not."""
    run = _matrix_run("sync2-clean", 0.0, -1, 0, 300, 3)

    def oncpu(step: int) -> dict[str, float]:  # rank 1 does 1.08x the work from step 150, 1.04x before
        return {"0": 0.050, "1": 0.050 * (1.08 if step >= 150 else 1.04), "2": 0.050}
    run["per_rank"] = [[step, {}, {}, {}, oncpu(step), {}] for step in range(300)]
    run["events"] = [_event(1, "straggler", 140, 1141.0, [1]), _event(2, "straggler", 213, 1214.0, [1]),
                     _event(3, "straggler", 242, 1243.0, [2]), _event(4, "straggler", 154, 1214.5, [1])]
    # raised on step 213, its evidence from 154 (a persistence lane's event): judged on the steps up to 213
    run["events"][3]["detail"]["detected_step"] = 213
    scored = score_cell(run)
    verdicts = [a["uninjected_slow"] for a in scored["false_alarms"]]
    assert [v["slow"] for v in verdicts] == [False, True, True, False], verdicts  # in the order they opened
    # the step finalised when each was seen to open (step s at 1000 + s), the 4th's own detected_step
    assert [a["raised_at"] for a in scored["false_alarms"]] == [141, 214, 213, 243]
    assert verdicts[0]["ratio"] == pytest.approx(1.04, abs=1e-3) and verdicts[1]["ratio"] == pytest.approx(1.08, abs=1e-3)
    assert uninjected_slowness(run, 154, [1])["ratio"] == pytest.approx(1.04, abs=1e-3)  # the 4th judged from 154: not
    assert verdicts[1]["steps"] == 30
    # windows straddling the change: 1.04 on 20 steps and 1.08 on 10 (median 1.04), then 1.04 on 9 and 1.08 on 21
    assert not uninjected_slowness(run, 159, [1])["slow"] and uninjected_slowness(run, 170, [1])["slow"]
    assert uninjected_slowness(run, 163, [2])["ratio"] < 1  # rank 2 against ranks 0 and 1
    assert uninjected_slowness({**run, "per_rank": []}, 213, [1]) is None  # no on-CPU times recorded
    assert uninjected_slowness(run, 10, [1]) is None  # 11 steps only
    shape = matrix_aggregate([scored])["per_shape"]["sync2"]
    assert (shape["false_alarms"], shape["uninjected_slow"]) == (4, 2)
    assert shape["false_alarms_per_1000_steps"] == pytest.approx(13.333)
    assert shape["other_false_alarms_per_1000_steps"] == pytest.approx(6.667)
    out = evaluate([run], {}, live=True)
    assert (out["false_alarms"], out["uninjected_slow"], out["other_false_alarms_per_1000"]) == (4, 2, {"sync2": 6.7})


def test_dominance_finds_a_clean_stretch_as_strong_as_a_straggler_named_in_time() -> None:
    """bench/detection_jobs/dominance.py: a clean run where one rank waits least 4 steps in a row by as much as
    a 2x straggler did (the bound's 3 steps after its onset) holds a stretch no per-step rule can tell from it; a
    clean run of turns does not."""
    straggler = _matrix_run("ddp-forward-2x", 2.0, 1, 40, 60, 2)
    assert dominance.in_time_cells([straggler]) == [("ddp-forward-2x", [0.5, 0.5, 0.5, 0.5])]
    cells = dominance.in_time_cells([straggler])
    clean = _matrix_run("ddp-clean", 0.0, -1, 0, 100, 1)
    assert dominance.dominating(clean, cells) is None
    for step in range(50, 54):  # rank 2 held back 2x for 4 steps
        clean["waits"][step][1], clean["waits"][step][3] = 2, 0.01 + 0.5 * 0.5
    assert dominance.dominating(clean, cells) == ("ddp-forward-2x", 50, 2)


def _with_per_rank(run: dict, queued: dict[int, tuple[int, float]]) -> dict:
    """The run's `per_rank` figures as bench/detection.py records them now: each rank's wait (the least rank at
    the min, the others at the p50) and run-queue wait (1 ms, and `queued[step]` = (rank, seconds) more)."""
    per_rank = []
    for step, least, low, p50, *_ in run["waits"]:
        waits = {str(r): (low if r == least else p50) for r in range(3)}
        rq = {str(r): 0.001 for r in range(3)}
        if step in queued:
            rank, extra = queued[step]
            rq[str(rank)] += extra
        per_rank.append([step, waits, rq, dict(rq)])
    return {**run, "per_rank": per_rank}


def test_the_run_queue_discount_takes_a_descheduled_stretch_out_of_the_replay_and_the_dominance() -> None:
    """bench/detection_jobs/runqueue.py and replay_matrix.py on runs with per-rank figures: a clean run where rank
    2 led the others by 2x for 6 steps is a false alarm, and dominates a straggler named in time, when nothing
    explains it; when its run-queue wait explains the lead, it is neither; a straggler that shows no run-queue
    wait (a sleep) is still named in time."""
    straggler = _with_per_rank(_matrix_run("ddp-forward-2x", 2.0, 1, 40, 60, 2), {})
    cells = dominance.in_time_cells([straggler])
    clean = _matrix_run("ddp-clean", 0.0, -1, 0, 100, 1)
    for step in range(50, 56):
        clean["waits"][step][1], clean["waits"][step][3] = 2, 0.01 + 0.5 * 0.5
    unexplained, explained = _with_per_rank(clean, {}), _with_per_rank(clean, {s: (2, 0.25) for s in range(50, 56)})
    assert dominance.dominating(runqueue.discounted(unexplained, 0), cells) == ("ddp-forward-2x", 50, 2)
    assert dominance.dominating(runqueue.discounted(explained, 0), cells) is None
    assert evaluate([unexplained, straggler], {})["false_alarms"] == 1
    out = evaluate([explained, straggler], {})
    assert out["false_alarms"] == 0 and out["in_time"] == {"2x": "1/1"}, out
    assert evaluate([explained], {"runqueue_discount": False})["false_alarms"] == 1
    excess, gap, steps = runqueue.explained([explained], clean=True)[0]  # the step thread's figure
    assert excess == pytest.approx(6 * 0.25) and gap >= excess and steps >= 6
    assert runqueue.explained([unexplained], clean=True)[0][0] == 0.0


def test_the_replay_remakes_the_running_shares_from_each_ranks_recorded_work(monkeypatch) -> None:
    """replay_matrix.py: where a run recorded each rank's work_time (per_rank's 7th figure, bench/detection.py from
    session 46 on) the agents' running shares are remade from each rank's wait and that work, as the agent makes
    them; a run without it, from its wait and the step's p50 less it (the approximation older recordings allow)."""
    from bench.detection_jobs import replay_matrix

    seen: list[tuple[int, int, float, float]] = []

    class Recording(replay_matrix.WaitShares):
        def update(self, job: str, rank: int, step: int, wait_s: float, work_s: float,
                   queued_s: float = 0.0) -> float | None:
            seen.append((step, rank, wait_s, work_s))
            return super().update(job, rank, step, wait_s, work_s, queued_s)

    monkeypatch.setattr(replay_matrix, "WaitShares", Recording)
    run = _with_per_rank(_matrix_run("ddp-clean", 0.0, -1, 0, 40, 1), {})
    run["shares"] = [[step, 0, 0.1, 0.2, 3] for step in range(40)]
    work = {str(r): 0.3 + 0.1 * r for r in range(3)}
    with_work = {**run, "per_rank": [[*entry, {}, {}, dict(work)] for entry in run["per_rank"]]}
    replay_matrix.replay_run(with_work, {})
    assert len(seen) == 3 * 40 and all(work_s == pytest.approx(0.3 + 0.1 * rank) for _, rank, _, work_s in seen)
    seen.clear()
    replay_matrix.replay_run(run, {})
    step, rank, wait_s, work_s = seen[0]
    assert work_s == pytest.approx(0.5 - wait_s) and len(seen) == 3 * 40  # the step's p50 (0.5 s) less the wait


def test_replay_fidelity_sets_the_live_result_beside_each_replays(tmp_path) -> None:
    """replay_fidelity.py: per run the live root's result, the replay's from the recorded work and from the step's
    p50; a run whose live events are the replay's own agrees with it, one whose live root named nothing does not;
    a run without recorded work has no work replay."""
    from bench.detection_jobs import replay_fidelity
    from bench.detection_jobs.replay_matrix import replay_run

    run = _with_per_rank(_matrix_run("ddp-forward-2x", 2.0, 1, 40, 60, 2), {})
    run["shares"] = []
    run["per_rank"] = [[*entry, {}, {}, {str(r): 0.4 for r in range(3)}] for entry in run["per_rank"]]
    named = {**run, "events": replay_run(run, {})["events"]}
    row = replay_fidelity.compare(named)
    assert row["has_work"] and row["live"] == row["replay_work"] == row["replay_p50"] and row["live"] <= 3
    assert replay_fidelity.compare(run)["live"] is None  # the live root named nobody: not in agreement
    assert replay_fidelity.compare({**run, "per_rank": [e[:6] for e in run["per_rank"]]})["has_work"] is False
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"runs": [named, run]}))
    assert replay_fidelity.main([str(path), "--out", str(tmp_path / "out.json")]) == 0
    (summary,) = json.loads((tmp_path / "out.json").read_text())["sets"]
    assert (summary["runs"], summary["with_work"], summary["agree_work"], summary["agree_p50"]) == (2, 2, 1, 1)


def test_inject_makes_stragglers_of_a_clean_runs_noise_and_the_rule_names_them() -> None:
    """bench/detection_jobs/inject.py: a clean run with per-rank figures, cut at each onset into a cell per
    severity, one rank slowed by (f - 1) x its median step: every other rank waits that much longer, the rule
    names the rank within the bound; a run too short for a severity gives no cell."""
    clean = _with_per_rank(_matrix_run("ddp-clean", 0.0, -1, 0, 300, 1), {})
    made = inject.cells([clean], 2.0, [40, 150])
    assert [(c["truth"]["step"], c["truth"]["rank"], c["steps_done"]) for c in made] == [(40, 1, 65), (150, 2, 175)]
    step = next(w for w in made[0]["waits"] if w[0] == 45)
    assert step[1] == 1 and step[5] == pytest.approx(1.0)  # the slowed rank waits least; the step is 2x
    assert evaluate(made, {})["in_time"] == {"2x": "2/2"}
    assert inject.cells([clean], 1.1, [250]) == []  # 110 steps after 250 are not in a 300-step run
    # A run that recorded each rank's work_time: the slowed rank's grows by the sleep, its peers' stay.
    worked = {**clean, "per_rank": [[*entry, {}, {}, {str(r): 0.4 for r in range(3)}] for entry in clean["per_rank"]]}
    (cell,) = [c for c in inject.cells([worked], 2.0, [40]) if c["truth"]["step"] == 40]
    work_45 = next(entry[6] for entry in cell["per_rank"] if entry[0] == 45)
    assert work_45 == {"0": 0.4, "1": pytest.approx(0.4 + 0.5), "2": 0.4}  # rank 1 slowed by its 0.5 s median step
    assert next(entry[6] for entry in cell["per_rank"] if entry[0] == 39) == {str(r): 0.4 for r in range(3)}


def _with_oncpu(run: dict, work: dict[int, float]) -> dict:
    """The run's `per_rank` with each rank's step-thread on-CPU time (its 4th figure, as bench/detection.py records
    it; every thread's after it): 0.4 s a step, `work[rank]` x
    that for the ranks given (a rank that does more, or less, CPU work than its peers)."""
    per_rank = []
    for entry in run["per_rank"]:
        oncpu = {r: 0.4 * work.get(int(r), 1.0) for r in entry[1]}
        per_rank.append([*entry[:4], oncpu, dict(oncpu)])  # the step thread's, and every thread's
    return {**run, "per_rank": per_rank}


def test_inject_every_rank_keeps_the_on_cpu_times_and_reads_each_ranks_work_before() -> None:
    """inject.py --every-rank: a cell per rank at each onset; the cells keep the run's on-CPU times (a sleep adds no
    CPU work; they were dropped before, so the rule judged injected cells without them), and `work_before` reads
    the slowed rank's on-CPU time over its peers' before the onset."""
    clean = _with_oncpu(_with_per_rank(_matrix_run("tp-clean", 0.0, -1, 0, 300, 1), {}), {2: 1.1})
    made = inject.cells([clean], 2.0, [40, 150], every_rank=True)
    assert [(c["truth"]["step"], c["truth"]["rank"]) for c in made] == [(40, r) for r in range(3)] + [
        (150, r) for r in range(3)]
    assert all(len(entry) == 6 and len(entry[4]) == 3 for c in made for entry in c["per_rank"])
    assert inject.work_before(made[2], 2, 40) == pytest.approx(1.1)
    assert inject.work_before(made[0], 0, 40) == pytest.approx(0.4 / 0.42)  # its peers: 0.4 and 0.44 s
    assert inject.work_before(_with_per_rank(_matrix_run("tp-clean", 0.0, -1, 0, 300, 1), {}), 0, 40) is None
    assert evaluate(made, {})["in_time"] == {"2x": "6/6"}


def test_slow_lead_says_who_waits_more_after_the_onset() -> None:
    """slow_lead.py: over the steps before a fault and from it, the slow rank's own wait and the others' median
    (the others wait the injected seconds more, the rank nothing more), its lead over them as a share of the
    step, the share of steps it waited least, and its CPU work over its peers' before."""
    run = _with_oncpu(_with_per_rank(_matrix_run("tp-forward-2x", 2.0, 1, 40, 80, 2), {}), {1: 0.9})
    run["truth"]["extra_s"] = 0.25
    row = slow_lead.cell_lead(run, steps=20)
    assert row is not None and row["cell"] == "tp-forward-2x"
    # its own wait falls (from the onset always the least, 0.01 s; before, the median's on the steps it was not least)
    assert -0.05 < row["own_s"] < 0 and row["others_s"] > 0.2 and row["lead"] == pytest.approx(0.5) and row["least"] == 1.0
    assert row["cpu"] == pytest.approx(0.9)
    assert slow_lead.cell_lead(_matrix_run("tp-clean", 0.0, -1, 0, 80, 1)) is None  # a clean run


def test_replay_finds_a_jobs_windows_under_its_latest_attempt(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "root.db")
    db.execute("CREATE TABLE windows (job TEXT)")
    db.executemany("INSERT INTO windows VALUES (?)", [("a@5",), ("a@17",), ("ab@99",), ("b",)])
    assert [stored_job(db, j) for j in ("a", "b", "c")] == ["a@17", "b", "c"]


def test_done_lines_finds_every_rank_even_two_on_one_line(tmp_path: Path) -> None:
    """The ranks share torchrun's output: two ranks' prints can land on one line with no newline between."""
    log = tmp_path / "job.log"
    log.write_text('[rank1]: noise {"event": "done", "rank": 1, "durable": true}{"event": "done", "rank": 2, '
                   '"durable": false}\n{"event": "done", "rank": 0, "durable": true}\n{"event": "done", "ra\n')
    assert [(d["rank"], d["durable"]) for d in done_lines(log)] == [(1, True), (2, False), (0, True)]


def test_help_and_bad_arguments():
    bench = [sys.executable, str(REPO / "bench" / "detection.py")]
    done = subprocess.run([*bench, "--help"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and "false alarms per 1,000 clean steps" in done.stdout
    done = subprocess.run([*bench, "--faults", "meteor"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown fault" in done.stderr


@pytest.mark.timeout(240)
def test_quick_run_catches_a_bad_batch_and_writes_json(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "detection.py"), "--quick", "--faults", "bad_batch", "--mlp-steps", "120",
         "--out", str(tmp_path), "--workdir", str(tmp_path / "work")], cwd=REPO, capture_output=True, text=True,
        timeout=230)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "| loss_spike |" in done.stdout and "2/2 mlp seed 0 bad_batch" in done.stderr
    result = json.loads((tmp_path / "detection.json").read_text())
    assert result["benchmark"] == "detection" and result["complete"] is True and "error" not in result
    assert result["machine"]["cpus"] >= 1 and result["config"]["quick"] is True
    clean, fault = result["runs"]
    assert (clean["fault"], fault["fault"]) == ("none", "bad_batch")
    for run in (clean, fault):
        assert run["steps_done"] == 120 and len(run["finalised"]) == 120
        log = (tmp_path / "work" / f"{run['job']}.log").read_text(errors="replace")
        assert sorted(r["rank"] for r in run["ranks_done"]) == [0, 1, 2], log[-6000:]
        assert all(r["durable"] is True for r in run["ranks_done"]), run["ranks_done"]
    truth = fault["truth"]
    assert (truth["fault"], truth["step"], truth["rank"]) == ("bad_batch", 60, 0)
    hit = fault["score"]["detections"]["loss_spike"]
    assert hit["detected"] and hit["rank"] == "exact" and hit["ranks"] == [0], fault["score"]
    assert 0 <= hit["delay_s"] < 10 and hit["delay_steps"] is not None and hit["delay_steps"] >= 0
    agg = result["aggregate"]
    assert agg["clean_runs"] == 1 and agg["fault_runs"] == 1 and agg["clean_steps"] == 120 + 60
    assert set(agg["per_detector"]) == {"straggler", "loss_spike", "mfu_drop", "dataloader_stall", "nonfinite", "hang"}
    assert agg["per_detector"]["loss_spike"]["detected"] == 1 and agg["per_fault"]["bad_batch"]["caught"] == 1


def _split_step(start: int, arrive1: list[int], wait2: list[int], step: int = 100_000_000) -> list[list[int]]:
    """Per rank one Step of collective_split's record (ns): every rank returns from the first all-reduce when the
    last arrives (+1 ms transfer), calls the second at once and waits `wait2[r]` in it."""
    done1 = start + max(arrive1) + 1_000_000
    return [[start, start + a, done1, done1, done1 + w, start + step] for a, w in zip(arrive1, wait2, strict=True)]


def test_collective_split_tells_which_all_reduce_names_the_least_waiting_rank() -> None:
    """bench/detection_jobs/collective_split.py's analysis on hand-made timings: where one rank arrives 20 ms late
    at the first all-reduce the least total wait is that rank's and the second all-reduce's skew (2 ms, rank 0
    least) does not move it; where nobody is late the second all-reduce alone names the least-waiting rank."""
    from bench.detection_jobs.collective_split import analyse

    late = [_split_step(s * 10**9, [0, 20_000_000, 0], [0, 2_000_000, 2_000_000]) for s in range(20)]
    out = analyse([[steps[r] for steps in late] for r in range(3)], warmup=0)
    assert out["judged_steps"] == 20
    assert out["least_is_first_late_arriver"] == 1.0 and out["least_is_least_at_second"] == 0.0
    assert out["gap_first"]["p50"] == pytest.approx(0.2) and out["gap_second"]["p50"] == pytest.approx(0.02)
    assert out["gap_sum"]["p50"] == pytest.approx(0.2 - 0.02)
    assert out["evidence_steps"] == 20 and out["evidence_least_is_first_late_arriver"] == 1.0
    assert out["mean_lead_second"] == pytest.approx([0.02, 0.0, 0.0])
    even = [_split_step(s * 10**9, [0, 0, 0], [2_000_000, 2_000_000, 0]) for s in range(20)]
    out = analyse([[steps[r] for steps in even] for r in range(3)], warmup=0)
    assert out["least_counts"] == {2: 20} and out["least_is_least_at_second"] == 1.0
    assert out["evidence_steps"] == 0 and out["evidence_least_is_first_late_arriver"] is None


def test_collective_split_says_where_a_slow_ranks_extra_time_went() -> None:
    """collective_split.slow_split on hand-made timings: rank 1 arrives 10 ms late at the first all-reduce from step
    10 (its backward's sleep): the other ranks' wait there rises by 10 ms, its own and the second all-reduce's do not
    move."""
    from bench.detection_jobs.collective_split import slow_split

    steps = [_split_step(s * 10**9, [0, 10_000_000 if s >= 10 else 0, 0], [1_000_000] * 3) for s in range(20)]
    out = slow_split([[st[r] for st in steps] for r in range(3)], slow=1, onset=10, factor=1.1, warmup=0)
    assert out["injected_s"] == pytest.approx(0.01)  # 0.1 x its 0.1 s step before the onset
    assert out["before"]["first_own_s"] == pytest.approx(0.001) and out["before"]["first_others_s"] == pytest.approx(0.001)
    assert out["change"]["first_others_s"] == pytest.approx(0.01) and out["change"]["first_own_s"] == pytest.approx(0.0)
    assert out["change"]["second_own_s"] == out["change"]["second_others_s"] == 0.0
    assert out["after"]["step_s"] == pytest.approx(0.1)


def test_replay_compare_judges_a_candidate_by_shape_and_severity() -> None:
    """bench/detection_jobs/replay_compare.py: per shape and severity, the pre-registered criterion (no shape's false
    alarms up, no shape's or severity's in-time cells down, in time up in total) against the baseline of the same run;
    a candidate that names the straggler sooner but cries wolf in a clean run fails it."""
    from bench.detection_jobs.replay_compare import _by_cpu_work, passes, summarise

    runs = [_matrix_run("ddp-clean", 0.0, -1, 0, 300, 1), _matrix_run("ddp-forward-2x", 2.0, 1, 40, 60, 2)]
    base = summarise(evaluate(runs, {})["scored"])
    assert base["by_shape"]["ddp"] == {"clean_steps": 340, "false_alarms": 0, "other_false_alarms": 0, "cells": 1,
                                       "in_time": 1}
    assert base["in_time_by_factor"] == {"2x": "1/1"}
    loose = summarise(evaluate(runs, {"wait_fast_drift": 0.0, "wait_drift": 0.0, "wait_background": 0})["scored"])
    assert loose["by_shape"]["ddp"]["false_alarms"] > 0
    # no on-CPU figures recorded: every false alarm is said to be unjudged by the rank's own CPU work
    assert loose["false_alarms_by_cpu_work"]["ddp"] == {"cpu_slow": 0, "not_cpu_slow": 0,
                                                        "not_judged": loose["by_shape"]["ddp"]["false_alarms"]}
    assert _by_cpu_work({"uninjected_slow": {"slow": True, "ratio": 1.07, "steps": 30}}) == "cpu_slow"
    assert _by_cpu_work({"uninjected_slow": {"slow": False, "ratio": 1.01, "steps": 30}}) == "not_cpu_slow"
    blind = summarise(evaluate(runs, {"wait_fast_threshold": 50, "wait_threshold": 50})["scored"])
    assert passes(blind, base) == {"false_alarms_up_in": [], "in_time_down_in_shapes": [],
                                   "in_time_down_in_factors": [], "in_time_up": True, "passes": True}
    verdict = passes(base, blind)
    assert verdict["in_time_down_in_shapes"] == ["ddp"] and verdict["in_time_down_in_factors"] == ["2x"]
    assert not verdict["passes"]
    assert passes(blind, loose)["false_alarms_up_in"] == ["ddp", "total"] and not passes(blind, loose)["passes"]
    # unjudged alarms (no on-CPU figures) count as false under s44's criterion too
    assert loose["other_false_alarms"] == loose["false_alarms"] > 0
    assert passes(blind, loose, "other_false_alarms")["false_alarms_up_in"] == ["ddp", "total"]


def test_replay_compare_s44_criterion_leaves_out_alarms_on_uninjected_slow_ranks() -> None:
    """prereg_heldout_s44.md: a candidate whose extra alarms all name ranks slow by their own CPU work passes on
    false alarms; one more alarm that is not (or cannot be judged) fails it, in its shape and in total."""
    from bench.detection_jobs.replay_compare import passes, summarise

    def run(alarms: list[dict | None]) -> dict:
        return {"shape": "sync2", "clean_steps": 300, "factor": 0.0, "detection": None,
                "false_alarms": [{} if a is None else {"uninjected_slow": a} for a in alarms]}

    slow = {"slow": True, "ratio": 1.1, "steps": 30}
    not_slow = {"slow": False, "ratio": 1.0, "steps": 30}
    base = summarise([run([not_slow])])
    more_slow = summarise([run([not_slow, slow, slow])])
    assert more_slow["false_alarms"] == 3 and more_slow["other_false_alarms"] == 1
    assert passes(base, more_slow)["false_alarms_up_in"] == ["sync2", "total"]
    assert passes(base, more_slow, "other_false_alarms")["false_alarms_up_in"] == []
    assert passes(base, summarise([run([not_slow, None])]), "other_false_alarms")["false_alarms_up_in"] == [
        "sync2", "total"]
