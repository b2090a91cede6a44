"""bench/fleet.py's week of retention, small (issue 28 item 5): the hour rollups it checks agree with the raw
readings, old rows go, and the result is written. The tree part runs processes per host count and is
run by hand (docs/fleet.md); tests/test_fleet.py covers the same path end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
