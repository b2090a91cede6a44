"""bench/fleet.py's week of retention, small (issue 28 item 5): the hour rollups it checks agree with the raw
readings, old rows go, and the result is written. The tree part runs processes per host count and is
run by hand (docs/fleet.md); tests/test_fleet.py covers the same path end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from contextlib import closing
from pathlib import Path

import pytest

from telemetry import Summary

REPO = Path(__file__).resolve().parent.parent


def test_a_small_week_rolls_up_exactly_and_levels_off(tmp_path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "fleet.py"), "--skip-tree", "--week-step", "21600",
                           "--week-sources", "16", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    week = json.loads((tmp_path / "fleet.json").read_text())["week"]
    assert week["hour_rollups_checked"] >= 50 and week["rollup_mismatches"] == []
    assert week["rows_by_width_ms"].get("1000", 0) <= 2 * 3  # raw seconds: the last hour or two only
    assert week["rows_by_width_ms"].get("60000", 0) <= 2 * 5  # minute rollups: the last day's (--week-retention)


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
        names = set(root.node.hosts(fleet_ids.FLEET_JOB).values())
        assert {name.split(":")[0] for name in names} == {f"host-{i:05d}" for i in range(8)}
    finally:
        replayed.stop()
        stop_all(cluster, root)
