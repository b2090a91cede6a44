"""bench/idle_gap.py decodes a rack child's unit back to back and after idle gaps, and writes what it measured (a smoke
run: tiny units, one pass; the figures are the bench's, not asserted); bad arguments are refused by name."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = str(REPO / "bench" / "idle_gap.py")


def test_idle_gap_bench_smoke(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, BENCH, "--children", "2", "--metrics", "3", "--gaps", "0,0.001",
                           "--reps", "1", "--rounds", "2", "--out", str(tmp_path)],
                          timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "idle_gap.json").read_text())["rows"]
    assert [row["gap_s"] for row in rows] == [0.0, 0.001]
    for row in rows:  # every decode of every round counted: children x reps x rounds
        assert row["decodes"] == 4 and row["median_us"] > 0
    assert rows[0]["ratio_to_first_gap"] == 1.0


def test_idle_gap_bench_refuses_bad_gaps(tmp_path: Path) -> None:
    for gaps in ("0,fast", "0,-1"):
        done = subprocess.run([sys.executable, BENCH, "--gaps", gaps, "--out", str(tmp_path)],
                              timeout=60, capture_output=True, text=True)
        assert done.returncode == 2 and "--gaps" in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "idle_gap.json").exists()
