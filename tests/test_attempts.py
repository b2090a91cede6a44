"""Issue 17: attempts of a job (a reused name, a restart, a resize) reach the root apart, or are refused.

In process: a root and an agent; job "none" run as attempt 1 (2 ranks, steps 1-5) and then attempt 2
(3 ranks, resumed from step 3 to 7). Both reach the root whole; the API answers per step with the latest
attempt, or every attempt; goodput and the `restart` event say what the restart cost. In subprocesses: a
second run under the same job and attempt is refused with a clear error (close() False), not dropped.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import urllib.request
from pathlib import Path

import pytest

import telemetry
from collectors.root.goodput import AttemptSteps, compute, goodput
from collectors.root.store import _SCHEMA
from helpers_tree import api_get, counters, make_agent, make_collector, make_root, stop_all, wait_for

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[1]


def _run_attempt(agent: str, attempt: int, world: int, first: int, last: int, offset: float) -> list[bool]:
    runs = [telemetry.init(job="none", rank=r, world_size=world, agent=agent, attempt=attempt) for r in range(world)]
    for step in range(first, last + 1):
        for rank, run in enumerate(runs):
            run.log(step, loss=offset + step + rank / 10)
            run.end_step(step)
    return [run.close(15) for run in runs]


@pytest.fixture
def tree(tmp_path: Path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    try:
        yield root, f"unix:{agent.socket_path}"
    finally:
        stop_all(agent, root)


def test_two_attempts_of_one_name_both_reach_the_root(tree) -> None:
    root, agent = tree
    assert _run_attempt(agent, 1, 2, 1, 5, 0.0) == [True, True]
    assert _run_attempt(agent, 2, 3, 3, 7, 100.0) == [True, True, True]  # resized and resumed: a new attempt

    def steps(query: str = "") -> list[dict]:
        status, body = api_get(root.api_address, f"/api/v1/jobs/none/steps?metric=loss{query}")
        assert status == 200, body
        return body["steps"]

    wait_for(lambda: len(steps("&attempt=all")) == 10, 15, what="both attempts' steps at the root")
    timeline = steps()
    assert [(s["step"], s["attempt"]) for s in timeline] == [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 2), (7, 2)]
    assert [s["min"] for s in timeline] == [1.0, 2.0, 103.0, 104.0, 105.0, 106.0, 107.0]
    assert [s["count"] for s in timeline] == [2, 2, 3, 3, 3, 3, 3]
    every = steps("&attempt=all")
    assert [(s["step"], s["attempt"]) for s in every if s["step"] in (3, 4, 5)] == [
        (3, 1), (3, 2), (4, 1), (4, 2), (5, 1), (5, 2)]
    assert [s["step"] for s in steps("&attempt=1")] == [1, 2, 3, 4, 5]
    assert [s["step"] for s in steps("&last=2")] == [6, 7]
    assert api_get(root.api_address, "/api/v1/jobs/none/steps?attempt=x")[0] == 400

    jobs = api_get(root.api_address, "/api/v1/jobs")[1]["jobs"]
    assert jobs == [{"job": "none", "world_size": 3, "last_step": 7, "attempt": 2, "attempts": 2}]
    figures = api_get(root.api_address, "/api/v1/jobs/none/goodput")[1]
    assert [(a["attempt"], a["world_size"], a["first_step"], a["last_step"], a["steps_replayed"])
            for a in figures["attempts"]] == [(1, 2, 1, 5, 0), (2, 3, 3, 7, 3)]
    assert figures["restarts"] == 1
    parts = figures["productive_s"] + figures["lost_s"] + figures["restart_downtime_s"]
    assert parts == pytest.approx(figures["wall_s"], abs=1e-6)

    def restart_events() -> list[dict]:
        return api_get(root.api_address, "/api/v1/jobs/none/events?kind=restart")[1]["events"]

    with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
        exposition = reply.read().decode()
    assert f'telemetry_goodput_ratio{{job="none"}} {figures["goodput"]}' in exposition
    assert 'telemetry_restarts_total{job="none"} 1.0' in exposition
    assert 'telemetry_goodput_seconds_total{job="none",kind="restart_downtime"}' in exposition

    [event] = wait_for(restart_events, 10, what="the restart event")
    assert event["severity"] == "info" and event["job"] == "none" and event["attempt"] == 2
    assert event["detail"]["steps_replayed"] == 3 and event["detail"]["previous_attempt"] == 1
    assert event["detail"]["world_size"] == 3 and event["detail"]["previous_world_size"] == 2


RANK_SCRIPT = textwrap.dedent("""
    import sys, telemetry
    run = telemetry.init(job="same", rank=0, world_size=2, agent=sys.argv[1], attempt=0)
    other = telemetry.init(job="same", rank=1, world_size=2, agent=sys.argv[1], attempt=0)
    for step in range(1, 4):
        for r in (run, other):
            r.log(step, loss=float(step))
            r.end_step(step)
    print(run.close(10), other.close(10), run.stats["dropped_values"] > 0)
""")


def test_a_second_run_under_the_same_attempt_is_refused_not_dropped(tree) -> None:
    root, agent = tree
    runs = [subprocess.run([sys.executable, "-c", RANK_SCRIPT, agent], capture_output=True, text=True, timeout=60,
                           cwd=REPO) for _ in range(2)]
    assert runs[0].stdout.split() == ["True", "True", "False"], runs[0].stderr
    assert runs[1].stdout.split() == ["False", "False", "True"], runs[1].stderr
    assert "already ran in pid" in runs[1].stderr and "needs a new attempt" in runs[1].stderr


def test_goodput_accounts_every_second() -> None:
    """Attempt 1 runs steps 1-4 a second apart, dies; attempt 2 comes back 10 s later at step 3 (resumed from
    the step-2 checkpoint) and runs to step 6, a second per step."""
    s = 1_000_000_000
    first = AttemptSteps(1, 4, [(1, 0), (2, 1 * s), (3, 2 * s), (4, 3 * s)])
    second = AttemptSteps(7, 2, [(3, 13 * s), (4, 14 * s), (5, 15 * s), (6, 16 * s)])
    figures = compute("j", [second, first])
    assert figures["wall_s"] == 16.0
    assert figures["restart_downtime_s"] == 10.0  # step 4 of attempt 1 to step 3 of attempt 2
    assert figures["lost_s"] == 2.0  # attempt 1's steps 3 and 4, run again
    assert figures["productive_s"] == 4.0  # steps 2, 4, 5, 6 as they stand (step 3's second run is in the downtime)
    assert figures["replay_s"] == 1.0  # step 4 run again
    assert figures["goodput"] == 0.25
    assert [(a["attempt"], a["steps_replayed"], a["downtime_s"]) for a in figures["attempts"]] == [(1, 0, 0.0),
                                                                                                   (7, 2, 10.0)]
    assert compute("j", [])["goodput"] is None


def test_the_step_a_crash_broke_into_is_not_one_the_attempt_reached() -> None:
    """Rank 1 of 2 dies entering step 3; rank 0 reports step 3 alone (its collective failed), and that window is
    sealed without rank 1 whenever the deadline passes: before or after the restart's steps reach the root, the
    figures are the same (tests/test_restarts_torchrun.py raced on it). A step some rank missed in the middle of
    an attempt, and an attempt whose ranks never all report a step (ranks that log nothing), keep their steps."""
    import sqlite3

    def store(first_steps: list[tuple[int, int, int]]) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:")
        db.executescript(_SCHEMA)
        for name, steps in (("j@1", first_steps), ("j@2", [(3, 2, 2), (4, 2, 2)])):
            db.execute("INSERT INTO jobs VALUES (?, 2, 0)", (name,))
            for step, sources, expected in steps:
                db.execute("INSERT INTO windows (job, metric, idx, width_ms, expected, count, sources, missing, top, "
                           "nonfinite_count, nonfinite_sources, late, last_time_ns, finalised_ns, summary) VALUES "
                           "(?, 'step_time', ?, 0, ?, ?, ?, '[]', '[]', 0, '[]', 0, ?, 0, x'')",
                           (name, step, expected, sources, sources, step * 1_000_000_000 + (10**10 if name == "j@2"
                                                                                            else 0)))
        return db

    crashed = goodput(store([(1, 2, 2), (2, 2, 2), (3, 1, 2)]), "j")
    assert [(a["last_step"], a["steps"], a["steps_replayed"]) for a in crashed["attempts"]] == [(2, 2, 0), (4, 2, 0)]
    assert crashed["lost_s"] == 0.0 and crashed["restart_downtime_s"] == 11.0
    assert crashed == goodput(store([(1, 2, 2), (2, 2, 2)]), "j")  # as if the partial window were not sealed yet
    straggled = goodput(store([(1, 2, 2), (2, 1, 2), (3, 2, 2)]), "j")
    assert [(a["last_step"], a["steps"]) for a in straggled["attempts"]][0] == (3, 3)
    silent = goodput(store([(1, 1, 2), (2, 1, 2)]), "j")
    assert [(a["last_step"], a["steps"]) for a in silent["attempts"]][0] == (2, 2)


def test_a_rank_whose_telemetry_stops_mid_attempt_loses_the_attempt_no_step() -> None:
    """Rank 1's telemetry stops reaching the root at step 11 (its agent gone) while training goes on: every later
    step misses it, and they all ran. Only a lone last step missing ranks after one every rank ended is a crash's
    (ranks run in lock step: a crash breaks into one step). Steps of 1 s; attempt 2 starts 10 s later."""
    import sqlite3

    def store(*attempts: list[tuple[int, int]]) -> sqlite3.Connection:
        db = sqlite3.connect(":memory:")
        db.executescript(_SCHEMA)
        for number, steps in enumerate(attempts, 1):
            name = f"j@{number}"
            db.execute("INSERT INTO jobs VALUES (?, 2, 0)", (name,))
            for step, sources in steps:
                db.execute("INSERT INTO windows (job, metric, idx, width_ms, expected, count, sources, missing, top, "
                           "nonfinite_count, nonfinite_sources, late, last_time_ns, finalised_ns, summary) VALUES "
                           "(?, 'step_time', ?, 0, 2, ?, ?, '[]', '[]', 0, '[]', 0, ?, 0, x'')",
                           (name, step, sources, sources, (step + 10 * (number - 1)) * 1_000_000_000))
        return db

    def gap(first: int, last: int) -> list[tuple[int, int]]:
        return [(s, 2 if s <= 10 else 1) for s in range(first, last + 1)]

    one = goodput(store(gap(1, 100)), "j")
    assert [(a["last_step"], a["steps"]) for a in one["attempts"]] == [(100, 100)]
    assert one["wall_s"] == one["productive_s"] == 99.0
    # crashed at step 20 (rank 1's telemetry gone since 11), resumed from the checkpoint of step 15
    two = goodput(store(gap(1, 20), [(s, 2) for s in range(16, 31)]), "j")
    assert [(a["last_step"], a["steps"], a["steps_replayed"]) for a in two["attempts"]] == [(20, 20, 0), (30, 15, 5)]
    assert (two["lost_s"], two["restart_downtime_s"], two["productive_s"], two["wall_s"]) == (5.0, 6.0, 28.0, 39.0)
    # the gap ends one step before the last: the last step misses ranks after one every rank ended, a crash's
    gap_then_crash = [*gap(1, 15), *[(s, 2) for s in range(16, 20)], (20, 1)]
    three = goodput(store(gap_then_crash, [(s, 2) for s in range(16, 31)]), "j")
    assert [(a["last_step"], a["steps"], a["steps_replayed"]) for a in three["attempts"]] == [(19, 19, 0), (30, 15, 4)]
    # the gap starts at the last step of a run that went on: one step is taken for a crash's (nothing tells them apart)
    assert [(a["last_step"], a["steps"]) for a in goodput(store(gap(1, 11)), "j")["attempts"]] == [(10, 10)]
    assert [(a["last_step"], a["steps"]) for a in goodput(store(gap(1, 12)), "j")["attempts"]] == [(12, 12)]


def test_slurm_attempts_differ_for_requeues_steps_and_resubmissions(monkeypatch) -> None:
    """A script submitted twice under one job name gets two job ids: their attempts must differ (the second run
    would otherwise be taken for resends of the first once the tree forgot it), and each later one is larger."""
    from telemetry.sdk.attempt import default_attempt
    for name in ("TELEMETRY_ATTEMPT", "TORCHELASTIC_RESTART_COUNT"):
        monkeypatch.delenv(name, raising=False)

    def attempt(job: int, restarts: int = 0, step: int = 0) -> int:
        monkeypatch.setenv("SLURM_JOB_ID", str(job))
        monkeypatch.setenv("SLURM_RESTART_COUNT", str(restarts))
        monkeypatch.setenv("SLURM_STEP_ID", str(step))
        return default_attempt(8)
    first, requeued, next_step, resubmitted = attempt(1000), attempt(1000, 1), attempt(1000, 1, 1), attempt(1001)
    assert first < requeued < next_step < resubmitted < 2**63
    assert attempt(2**32 - 1, 4095, 65535) < 2**63


REUSE_SCRIPT = textwrap.dedent("""
    import sys, telemetry
    agent, offset, last = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
    runs = [telemetry.init(job="same", rank=r, world_size=2, agent=agent, attempt=0) for r in (0, 1)]
    for step in range(1, last + 1):
        for r in runs:
            r.log(step, loss=offset + step)
            r.end_step(step)
    print(*(r.close(15) for r in runs))
""")


def _reuse(agent: str, offset: float, last: int) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", REUSE_SCRIPT, agent, str(offset), str(last)], capture_output=True,
                          text=True, timeout=60, cwd=REPO)


def _losses(root) -> dict[int, float]:
    status, body = api_get(root.api_address, "/api/v1/jobs/same/steps?metric=loss&attempt=all")
    return {s["step"]: s["min"] for s in body["steps"]} if status == 200 else {}


def _forgotten(*servers) -> bool:
    return all(not server.node.jobs() for server in servers)


def test_a_reused_attempt_after_every_tier_forgot_the_first_run_is_refused(tmp_path: Path) -> None:
    """The agent forgets a finished job, so its own refusal ("already ran in pid") cannot help a second run
    launched later; the root's ledger of which process ran each rank can, also after the root restarts."""
    root = make_root(tmp_path / "root.db", job_idle_timeout_s=1.5)
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0", job_idle_timeout_s=1.5)
    address = f"unix:{agent.socket_path}"
    try:
        first = _reuse(address, 0.0, 3)
        assert first.stdout.split() == ["True", "True"], first.stderr
        wait_for(lambda: _losses(root) == {1: 1.0, 2: 2.0, 3: 3.0}, 15, what="the first run at the root")
        wait_for(lambda: _forgotten(agent, root), 20, what="every tier forgetting the finished job")

        second = _reuse(address, 100.0, 5)
        assert second.stdout.split() == ["False", "False"], second.stderr
        assert "already ran in another process" in second.stderr and "needs a new attempt" in second.stderr
        assert _losses(root) == {1: 1.0, 2: 2.0, 3: 3.0}  # nothing of the second run taken for the first's

        stop_all(root)
        wait_for(lambda: _forgotten(agent), 20, what="the agent forgetting the refused run")
        root = make_root(tmp_path / "root.db", job_idle_timeout_s=1.5, listen=root.address)
        third = _reuse(address, 200.0, 4)
        assert third.stdout.split() == ["False", "False"], third.stderr  # the restarted root still knows
        assert _losses(root) == {1: 1.0, 2: 2.0, 3: 3.0}
    finally:
        stop_all(agent, root)


def test_a_run_reusing_an_attempt_on_other_hosts_is_refused_at_the_rack(tmp_path: Path) -> None:
    """Run A on one host, then run B under the same job and attempt on another host: B's agent never knew A,
    the rack above both does, and refuses B's windows (A's stay whole)."""
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agents = [make_agent([rack.address], tmp_path / f"a{i}.sock", f"agent{i}") for i in range(2)]
    try:
        first = _reuse(f"unix:{agents[0].socket_path}", 0.0, 3)
        assert first.stdout.split() == ["True", "True"], first.stderr
        second = _reuse(f"unix:{agents[1].socket_path}", 100.0, 5)
        assert second.stdout.split() == ["False", "False"], second.stderr
        assert "already ran in another process" in second.stderr
        wait_for(lambda: _losses(root) == {1: 1.0, 2: 2.0, 3: 3.0}, 15, what="run A whole at the root")
        assert counters(rack)["bad_inputs"] > 0
    finally:
        stop_all(*agents, rack, root)


def test_run_ledger_keeps_the_first_process_per_rank(tmp_path: Path) -> None:
    from collectors.delivery.node import RankView
    from collectors.delivery.runs import Claim, RunLedger, process_digest
    from collectors.root.store import Store

    big, other = 2**64 - 1, process_digest("h1", 42, 7)
    assert other != process_digest("h1", 42, 8) and other != process_digest("h2", 42, 7) and other != 0
    store = Store(tmp_path / "root.db")
    ledger = RunLedger(recall=store.load_runs, record=store.save_runs)
    assert ledger.claim("rack0", "job", {0: Claim(big, "h0"), 1: Claim(other, "h1")})
    assert not ledger.claim("rack0", "job", {0: Claim(big, "h0")})  # the same process again: nothing new
    assert not ledger.claim("rack1", "job", {1: Claim(5, "h9")})  # another process for rank 1
    assert ledger.refused("rack1", "job") == {1: (Claim(other, "h1"), Claim(5, "h9"))}
    assert ledger.refused("rack0", "job") == {}
    ledger.forget_job("job")
    again = RunLedger(recall=store.load_runs)  # a restarted root: the store remembers (digests >= 2**63 too)
    again.claim("rack1", "job", {0: Claim(big, "h0"), 1: Claim(5, "h9")})
    assert list(again.refused("rack1", "job")) == [1] and again.processes("job") == {0: big, 1: other}
    store.close()

    view = RankView(world_size=4, hosts={0: "h0", 3: "h3"}, processes={0: big, 3: 9})
    assert RankView.from_proto(view.to_proto("job")).processes == {0: big, 3: 9}
    malformed = view.to_proto("job")
    del malformed.processes[-1]
    with pytest.raises(ValueError, match="parallel lists"):
        RankView.from_proto(malformed)


def test_a_second_init_in_one_process_drops_the_steps_it_replays(tmp_path: Path, caplog) -> None:
    """The tree tells runs apart by process: a second telemetry.init() of the same rank, job and attempt in the
    same process that logs a step again is refused by the SDK itself (close() False), after every tier forgot
    the first run too; one that goes on from the next step is delivered whole."""
    root = make_root(tmp_path / "root.db", job_idle_timeout_s=1.5)
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0", job_idle_timeout_s=1.5)
    address = f"unix:{agent.socket_path}"

    def run(first: int, last: int, offset: float) -> tuple[list[bool], list[dict[str, int]]]:
        runs = [telemetry.init(job="again", rank=r, world_size=2, agent=address, attempt=0) for r in (0, 1)]
        for step in range(first, last + 1):
            for r in runs:
                with r.step(step):
                    r.log(step, loss=offset + step)
        return [r.close(15) for r in runs], [r.stats for r in runs]

    def losses() -> dict[int, float]:
        status, body = api_get(root.api_address, "/api/v1/jobs/again/steps?metric=loss")
        return {s["step"]: s["min"] for s in body["steps"]} if status == 200 else {}

    try:
        assert run(1, 3, 0.0)[0] == [True, True]
        wait_for(lambda: losses() == {1: 1.0, 2: 2.0, 3: 3.0}, 15, what="the first run at the root")
        wait_for(lambda: _forgotten(agent, root), 20, what="every tier forgetting the finished job")
        closed, stats = run(1, 5, 100.0)
        assert closed == [False, False]
        assert [s["dropped_values"] for s in stats] == [6, 6]  # loss and step_time of steps 1-3
        assert "already logged by an earlier telemetry.init() in this process" in caplog.text
        wait_for(lambda: losses() == {1: 1.0, 2: 2.0, 3: 3.0, 4: 104.0, 5: 105.0}, 15, what="steps 4-5")
        assert run(6, 7, 200.0)[0] == [True, True]  # going on from the next step is no replay
        wait_for(lambda: losses().get(7) == 207.0, 15, what="steps 6-7")
    finally:
        stop_all(agent, root)


def test_the_replay_guard_remembers_a_bounded_number_of_runs(tmp_path: Path, monkeypatch) -> None:
    from telemetry.sdk import run as sdk_run

    monkeypatch.setattr(sdk_run, "MAX_RUNS_REMEMBERED", 2)
    monkeypatch.setattr(sdk_run, "_STEPS_LOGGED", {})
    agent = f"unix:{tmp_path / 'nobody.sock'}"
    for attempt in (1, 2, 3):
        run = telemetry.init(job="bounded", rank=0, world_size=2, agent=agent, attempt=attempt)
        run.log(1, loss=1.0)
        run.close(0.1)
    assert [key[2] for key in sdk_run._STEPS_LOGGED] == [2, 3]  # the oldest Run forgotten, the newest kept


def test_the_ledgers_known_processes_are_a_view_not_a_copy_per_unit() -> None:
    """`RunLedger.known` (what Coverage.note asks for each child's unit) reads the claims through: the same answers as
    the claims, a claim made after the call seen by it, and no copy of every rank's (a copy of 16,384 ranks per unit
    was 15.6 % of the root's CPU at 16,384 ranks x 300 metrics; before, this returned a snapshot dict)."""
    from collectors.delivery.runs import Claim, RunLedger

    ledger = RunLedger()
    ledger.claim("rack0", "j", {rank: Claim(1000 + rank, f"h{rank // 8}") for rank in range(16_384)})
    known = ledger.known("j")
    assert len(known) == 16_384 and 5 in known and 16_384 not in known
    assert known[5] == 1005 and known.get(5) == 1005 and known.get(16_384) is None and known.get(16_384, 7) == 7
    assert dict(known) == {rank: 1000 + rank for rank in range(16_384)}
    ledger.claim("rack1", "j", {16_384: Claim(42, "h2048")})
    assert known.get(16_384) == 42 and len(known) == 16_385, "a view of the ledger, not a snapshot"
    assert len(ledger.known("fresh")) == 0
