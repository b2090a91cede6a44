"""bench/fleet.py's week of retention, small (issue 28 item 5): the hour rollups it checks agree with the raw
readings, old rows go, and the result is written. The tree part runs processes per host count and is
run by hand (docs/fleet.md); tests/test_fleet.py covers the same path end to end."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from telemetry import Summary

REPO = Path(__file__).resolve().parent.parent


def test_a_small_week_rolls_up_exactly_and_levels_off(tmp_path) -> None:
    """Every minute and hour rollup kept equals its raw readings; each day no kind holds more rows than the bound
    the retention sets (bench/fleet.py week_rows_kept), the database stays within its bound in bytes and level once
    that bound stops growing, and the store's bytes are the database and a write-ahead log within its limit."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "fleet.py"), "--skip-tree", "--week-step", "21600",
                           "--week-sources", "16", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    week = json.loads((tmp_path / "fleet.json").read_text())["week"]
    assert week["rollups_checked"]["hours"] >= 10 and week["rollups_checked"]["minutes"] >= 4
    assert week["rollup_mismatches"] == []
    assert not week["retention_is_default"]["hours"]  # the week's retention is stated, not the defaults
    for day in week["days"]:
        assert all(n <= day["rows_bound"][kind] for kind, n in day["rows"].items()), day
        assert day["db_bytes"] <= 1.5 * day["bound_bytes"], day  # B-tree pages at least two-thirds full
        assert day["store_bytes"] <= day["db_bytes"] + week["wal_limit_bytes"] + 65_536
    assert week["level_from_day"] is not None and week["level_from_day"] <= 3
    assert week["level_db_bytes_max_over_min"] <= 1.1  # level, not growing with the days


def test_fleet_wire_makes_the_roots_fleet_windows_one_per_metric_whatever_the_hosts(tmp_path) -> None:
    """bench/fleet_wire.py, small: the real sampler's windows of 8 and 96 hosts (two racks) merged as the tiers do
    are 25 windows a second either way, holding every host's readings; their sketch grows with the values it holds
    until its centroid bound, never past it (docs/fleet.md, "What grows with hosts")."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "fleet_wire.py"), "--hosts", "8,96", "--values",
                           "varied", "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    small, large = json.loads((tmp_path / "fleet_wire.json").read_text())["rows"]
    assert small["windows"] == large["windows"] == 25
    assert large["values_per_window"] == pytest.approx(12 * small["values_per_window"], abs=1)  # 12x the hosts
    assert small["centroids_per_window"] < large["centroids_per_window"] <= 210
    assert large["sources_bytes_per_s"] == small["sources_bytes_per_s"]  # one run per slot, whatever the hosts


def test_replayed_racks_feed_a_cluster_and_root_every_hosts_readings_under_their_names(tmp_path) -> None:
    """bench/fleet.py --racks replayed, small and in-process: 8 hosts' real samples merged per rack of 4
    (sample_racks), re-sent every second (ReplayedRacks) to a real cluster collector and root: the root stores each
    fleet metric's window of a second holding every host's devices, as live racks of those hosts send it, and
    knows every host by name (what the root's CPU and RSS at 2,000 hosts are measured with, docs/fleet.md)."""
    from bench.fleet import HCAS, ReplayedRacks, sample_racks, write_host_trees
    from collectors.common import fleet as fleet_ids
    from helpers_tree import make_collector, make_root, stop_all, wait_for

    write_host_trees(tmp_path / "sys", 8)
    racks, sampled = sample_racks(tmp_path / "sys", 8, 4)
    assert sampled["racks"] == 2 and sampled["windows_per_rack"] == 25
    root = make_root(tmp_path / "root.db")
    cluster = make_collector([root.address], "cluster")
    replayed = ReplayedRacks(racks, cluster.address).start()
    try:
        def whole_second():
            with closing(root.store.reader()) as db:
                rows = db.execute("SELECT summary FROM windows WHERE job=? AND metric='ib.port_active'",
                                  (fleet_ids.FLEET_JOB,)).fetchall()
            return [s for s in (Summary.from_bytes(row["summary"]) for row in rows) if s.count == 8 * HCAS]
        (first, *_) = wait_for(whole_second, 60.0, what="a second of ib.port_active holding all 8 hosts' ports")
        assert {fleet_ids.host_index_of(src) for src in first.sources} == set(range(8))
        assert replayed.sent >= 1
        names = set(root.node.hosts(fleet_ids.FLEET_JOB).values())
        assert {name.split(":")[0] for name in names} == {f"host-{i:05d}" for i in range(8)}
    finally:
        replayed.stop()
        stop_all(cluster, root)


def _store_with_seconds(path: Path, job: str, seconds: list[int], sources: int, rows_per_second: int = 1) -> None:
    """A real root store holding `ib.port_active` windows of the given seconds (ms since the epoch) only."""
    from collectors.root.store import Store

    Store(path).close()
    with closing(sqlite3.connect(path)) as db:
        for second_ms in seconds:
            for row in range(rows_per_second):
                db.execute("INSERT INTO windows (job, metric, idx, width_ms, expected, count, sources, missing, top, "
                           "nonfinite_count, nonfinite_sources, late, last_time_ns, finalised_ns, summary) VALUES "
                           "(?, 'ib.port_active', ?, 1000, 0, ?, ?, '', '', 0, '', 0, 0, ?, x'')",
                           (job if rows_per_second == 1 else f"{job}{row}", second_ms, sources, sources,
                            (second_ms + 1500) * 1_000_000))  # finalised after the second ended
        db.commit()


def test_coverage_counts_the_seconds_that_never_reached_the_root(tmp_path) -> None:
    """bench/fleet.py's coverage is the share of host-seconds stored, not the mean sources per stored row: a store
    holding every other second of 30 at 2,000 hosts is at 0.5 (the mean per row called it 1.0), and a second
    outside the measured stretch counts for nothing."""
    from bench.fleet import HCAS, _coverage

    t0_ms = 1_000_000_000_000
    since, until = t0_ms * 1_000_000, (t0_ms + 30_000) * 1_000_000
    _store_with_seconds(tmp_path / "half.db", "_fleet", [t0_ms + s * 1000 for s in range(0, 30, 2)], 2000 * HCAS)
    assert _coverage(tmp_path / "half.db", "fleet", 2000, since, until) == 0.5
    whole = [t0_ms + s * 1000 for s in range(-5, 35)]  # seconds before and after the stretch too
    _store_with_seconds(tmp_path / "whole.db", "_fleet", whole, 2000 * HCAS)
    assert _coverage(tmp_path / "whole.db", "fleet", 2000, since, until) == 1.0
    _store_with_seconds(tmp_path / "naive.db", "_host:h", whole[:20], HCAS, rows_per_second=4)  # 4 hosts, 15 s
    assert _coverage(tmp_path / "naive.db", "naive", 4, since, until) == 0.5


def test_the_replayer_counts_the_seconds_it_skips() -> None:
    """A replaying round that ran past the next second's sampling point skips that second and says so: its root
    gets less work per wall second, so replayed_seconds_per_s and replayed_seconds_skipped go with the figures."""
    from bench.fleet import next_second
    from collectors.agent.hardware import next_sample_ns

    first, skipped = next_second(5_000_000_000, 0)
    assert skipped == 0 and first == next_sample_ns(5_000_000_000, 1.0)
    assert next_second(first + 1, first) == (first + 1_000_000_000, 0)  # on time: the next second
    assert next_second(first - 10, first) == (first + 1_000_000_000, 0)  # a short round never sends a second twice
    assert next_second(first + 2_500_000_000, first) == (first + 3_000_000_000, 2)  # 2.5 s late: 2 seconds skipped


def test_host_cost_measures_a_simulated_host_second_by_stage(tmp_path) -> None:
    """bench/host_cost.py, small: a few hosts' real hardware path in one process, every stage's CPU measured, and
    each host offering its second as the fleet's 25 windows from its ~134 readings (the first sample, without
    deltas, fewer), each acknowledged; its hosts' trees (on /dev/shm, memory) are gone after."""
    shm = Path("/dev/shm")
    before = set(shm.glob("host-cost-*"))
    done = subprocess.run([sys.executable, str(REPO / "bench" / "host_cost.py"), "--hosts", "3", "--rounds", "4",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    left = [d for d in set(shm.glob("host-cost-*")) - before if {p.name for p in d.iterdir()} == {"h0", "h1", "h2"}]
    assert not left, f"host trees left on /dev/shm: {left}"
    result = json.loads((tmp_path / "host_cost.json").read_text())
    assert result["complete"]
    for stage in ("sample_ms", "probe_ms", "flush_ms", "wire_ms", "ack_ms"):
        assert result[stage] > 0, (stage, result)
    assert result["total_ms"] >= result["sample_ms"] + result["flush_ms"]
    assert 0 <= result["gc_ms"] <= result["total_ms"] and len(result["gc_collections"]) == 3
    assert 20 <= result["windows_per_host_second"] <= 25 and 100 <= result["readings_per_host_second"] <= 134


@pytest.mark.parametrize("hosts", [1, 5, 16, 64, 71, 142, 213, 270, 284, 2000])
@pytest.mark.parametrize("trials", [1, 5, 40])
def test_link_down_victims_are_distinct_hosts_in_as_many_racks_as_there_are(hosts, trials) -> None:
    """bench/fleet.py's link-down trials: a host named twice would match its earlier trial's event at once (a false
    pass), and trials in one rack measure one rack (a review found both at 71-284 hosts with the old formula)."""
    import random

    from bench.fleet import link_victims

    if trials > hosts:
        with pytest.raises(ValueError, match="--link-trials"):
            link_victims(hosts, 64, trials, random.Random(0))
        return
    victims = link_victims(hosts, 64, trials, random.Random(hosts))
    assert len(victims) == trials == len(set(victims)) and all(0 <= v < hosts for v in victims)
    racks = [v // 64 for v in victims]
    assert len(set(racks)) == min(trials, (hosts + 63) // 64)


def test_a_link_down_trial_counts_only_an_event_raised_after_its_write(tmp_path, monkeypatch) -> None:
    """An event already served for that host and port (an earlier trial's, a flapping port's) is not this trial's:
    the trial waits for a new one, and reports none when none comes."""
    import bench.fleet as fleet
    from collectors.sim.sysfs import write_host

    write_host(tmp_path / "sys" / "h3", nics=fleet.NICS, hcas=fleet.HCAS)
    db = tmp_path / "root.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE windows (job, metric, width_ms, idx, sources)")
    old = {"id": 7, "detail": {"host": "host-00003", "device": "mlx5_5/1", "rule": "old"}}
    new = {"id": 8, "detail": {"host": "host-00003", "device": "mlx5_5/1", "rule": "ib_link_downed"}}
    served = {"polls": 0, "events": [old]}

    def fake_get(api: str, path: str) -> dict:
        served["polls"] += 1
        if served["polls"] == 5 and served.get("raise_new"):
            served["events"] = [old, new]
        return {"events": list(served["events"])}

    monkeypatch.setattr(fleet, "_get", fake_get)
    unnamed = fleet._one_link_down("api", db, tmp_path / "sys", 3, "mlx5_5", 0.3, 1)
    assert unnamed["named_after_s"] is None  # the old event alone never counts
    served.update(polls=0, raise_new=True)
    named = fleet._one_link_down("api", db, tmp_path / "sys", 3, "mlx5_5", 5.0, 1)
    assert named["named_after_s"] is not None and named["rule"] == "ib_link_downed"


def test_a_link_down_trial_times_its_victims_own_sample_not_the_phase_point(tmp_path, monkeypatch) -> None:
    """Where a trial's time went is counted from the victim's first sample after the write as the simulator
    recorded it (SampleTimes), not from SAMPLE_PHASE: the simulator samples its hosts up to 0.5 s before that
    point, so the assumed wait was too long and `sample_to_named_s` came out negative (docs/fleet.md). Here the
    victim samples 0.15 s after the write, whatever the phase, and the event is served after it: the wait is that
    0.15 s, and wait + sample-to-named is the time to named. Fails before the fix (no measured sample)."""
    import time

    import bench.fleet as fleet
    from collectors.sim.sysfs import write_host

    write_host(tmp_path / "sys" / "h3", nics=fleet.NICS, hcas=fleet.HCAS)
    db = tmp_path / "root.db"
    with closing(sqlite3.connect(db)) as conn:
        conn.execute("CREATE TABLE windows (job, metric, width_ms, idx, sources)")
    times = fleet.SampleTimes(tmp_path / "hosts0.times", 4, create=True)
    times.record(3, time.time_ns() - 500_000_000)  # a sample before the write: not the one that read it
    event = {"id": 8, "detail": {"host": "host-00003", "device": "mlx5_5/1", "rule": "ib_link_downed"}}
    state: dict = {"sampled_ns": None}

    def fake_get(api: str, path: str) -> dict:
        link = tmp_path / "sys" / "h3" / "class" / "infiniband" / "mlx5_5" / "ports" / "1" / "counters"
        written = (link / "link_downed").read_text().strip() == "1"
        if written and state["sampled_ns"] is None and time.time_ns() >= state.setdefault("due", time.time_ns()
                                                                                            + 150_000_000):
            state["sampled_ns"] = time.time_ns()
            times.record(3, state["sampled_ns"])
        if state["sampled_ns"] is not None and time.time_ns() > state["sampled_ns"] + 100_000_000:
            return {"events": [event]}
        return {"events": []}

    monkeypatch.setattr(fleet, "_get", fake_get)
    reader = fleet.SampleTimes(tmp_path / "hosts0.times", 0)
    trial = fleet._one_link_down("api", db, tmp_path / "sys", 3, "mlx5_5", 5.0, 4, lambda: reader.of(3))
    assert trial["named_after_s"] is not None
    assert 0.14 <= trial["wait_for_sample_s"] <= 0.3, trial
    assert trial["sample_to_named_s"] >= 0.09, trial
    assert abs(trial["wait_for_sample_s"] + trial["sample_to_named_s"] - trial["named_after_s"]) <= 0.011, trial
    assert trial["sampled_at_phase_s"] == round(state["sampled_ns"] % 1_000_000_000 / 1e9, 3)


def test_sample_times_keep_each_hosts_last_samples() -> None:
    """The simulator's record of when each host sampled keeps its last SAMPLE_SLOTS samples (a trial that polls
    late still finds the sample after its write), per host, apart from the other hosts'."""
    import tempfile

    from bench.fleet import SAMPLE_SLOTS, SampleTimes, first_sample_after

    with tempfile.TemporaryDirectory() as where:
        times = SampleTimes(Path(where) / "t.times", 3, create=True)
        for n in range(1, SAMPLE_SLOTS + 3):
            times.record(1, n * 1_000_000_000)
        times.record(2, 7)
        reader = SampleTimes(Path(where) / "t.times", 0)
        assert sorted(reader.of(1)) == [n * 1_000_000_000 for n in range(3, SAMPLE_SLOTS + 3)]
        assert reader.of(0) == [0] * SAMPLE_SLOTS and sorted(reader.of(2))[-1] == 7
        assert first_sample_after(reader.of(1), 3_500_000_000, 10.0) == 4_000_000_000
        assert first_sample_after(reader.of(1), 3_500_000_000, 0.4) is None  # past the limit: no such sample


def test_mixed_racks_run_live_racks_beside_replayed_ones_and_say_so(tmp_path) -> None:
    """bench/fleet.py --racks mixed, small: 2 live racks of 4 simulated hosts beside 1 replayed rack into one
    cluster and root; the link down on a live rack's host is named, its time counted from its own sample (never
    negative after it), and every label says mixed with its live and replayed racks and hosts (docs/fleet.md,
    "Mixed racks")."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "fleet.py"), "--hosts", "12", "--rack-size", "4",
                           "--racks", "mixed", "--live-racks", "2", "--layouts", "fleet", "--skip-week",
                           "--seconds", "2", "--warmup", "3", "--link-trials", "1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "fleet.json").read_text())
    assert result["complete"], result.get("error")
    assert result["racks_fed"] == "mixed: 2 live racks of 4 hosts, the rest replayed"
    (run,) = result["runs"]
    assert run["racks_fed"] == "mixed" and run["racks"] == 3
    assert run["feed"] == {"label": "mixed_2_live_racks", "live_racks": 2, "live_hosts": 8, "replayed_racks": 1,
                           "replayed_hosts": 4}
    assert "fleet_mixed_2_live_racks_ratio_12_over_12" in result
    assert run["replayed_racks"]["racks"] == 1 and run["replayed_racks"]["hosts"] == 4
    assert run["live_rounds_phase_s"]["rounds"] >= 1 and run["replayed_rounds_phase_s"]["rounds"] >= 1
    (trial,) = run["link_down"]["trials"]
    assert trial["named_after_s"] is not None, trial
    assert int(trial["host"].split("-")[1]) < 8  # a live rack's host
    assert trial["wait_for_sample_s"] >= 0 and trial["sample_to_named_s"] >= 0, trial
    assert "mixed 2+1" in done.stdout


@pytest.mark.parametrize("flags, error", [
    (["--racks", "mixed"], "--racks mixed needs --live-racks K"),
    (["--racks", "mixed", "--live-racks", "0"], "must be at least 1"),
    (["--racks", "mixed", "--live-racks", "2", "--hosts", "256,64"], "more than the racks of 64 hosts (1 of"),
    (["--racks", "replayed", "--live-racks", "2"], "--live-racks is for --racks mixed"),
    (["--racks", "mixed", "--live-racks", "1", "--indexes", "tree"], "--racks mixed takes --indexes fixed"),
])
def test_mixed_racks_flags_are_checked_with_clear_errors(flags, error, capsys) -> None:
    from bench.fleet import main

    with pytest.raises(SystemExit) as stopped:
        main(flags)
    assert stopped.value.code == 2 and error in capsys.readouterr().err
