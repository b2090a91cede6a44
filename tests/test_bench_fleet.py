"""bench/fleet.py's week of retention, small (issue 28 item 5): the hour rollups it checks agree with the raw
readings, old rows go, and the result is written. The tree part runs processes per host count and is
run by hand (docs/fleet.md); tests/test_fleet.py covers the same path end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_replayed_racks_feed_the_live_cluster_and_root_every_hosts_readings(tmp_path) -> None:
    """bench/fleet.py --racks replayed, small: 16 hosts' real samples merged per rack of 8, re-sent every second by
    one process to a live cluster collector and root: the root stores the fleet's windows holding every host's
    IB ports (coverage), one per metric and second, and the run says its racks were replayed."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "fleet.py"), "--hosts", "16", "--rack-size", "8",
                           "--layouts", "fleet", "--racks", "replayed", "--skip-week", "--seconds", "4", "--warmup",
                           "4", "--out", str(tmp_path)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "fleet.json").read_text())
    assert result["complete"], result.get("error")
    (run,) = result["runs"]
    assert run["racks_fed"] == "replayed" and run["racks"] == 2 and "link_down" not in run
    assert run["replayed_racks"] == {"racks": 2, "windows_per_rack": 25, "sampled_in_s": pytest.approx(1, abs=60)}
    assert run["coverage"] is not None and run["coverage"] > 0.9  # the windows stored hold every host's ports
    assert run["root_windows_stored_per_s"] > 10 and run["sim_cpu_per_s"] == 0.0
