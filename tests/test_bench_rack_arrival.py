"""bench/rack_arrival.py runs a real rack under a real root fed the same pre-built units in a burst and spread over the
step (a smoke run: tiny fan-in, one measured step per shape; the figures are the bench's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_rack_arrival_bench_smoke(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "rack_arrival.py"), "--children", "3", "--metrics", "2",
                           "--spreads", "0,0.2", "--groups", "1,2", "--steps", "1", "--rounds", "1", "--idle-s", "0.2",
                           "--out", str(tmp_path)], timeout=180, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads((tmp_path / "rack_arrival.json").read_text())["results"]
    assert [(r["spread_s"], r["group"]) for r in rows] == [(0.0, 1), (0.2, 1), (0.2, 2)]
    for row in rows:  # every shape hands the rack the same units: one per child, every window
        assert (row["batches_per_step"], row["windows_per_step"]) == (3, 6)
        assert row["own_code_ms_per_step"] > 0 and any(t["thread"] == "flush" for t in row["threads"])
