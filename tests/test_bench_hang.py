"""bench/hang_clean.py and bench/cpu_starved_replay.py: what they count, on hand-made inputs (their real runs are
the benches themselves; docs/detectors.md quotes them)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_partial_windows_are_windows_without_a_rank_that_closed_the_step(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import hang_clean

    db = tmp_path / "root.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE windows (job TEXT, metric TEXT, idx INTEGER, width_ms INTEGER, missing TEXT)")
    rows = [("j", "step_time", 0, 0, "[]"), ("j", "collective_arrival", 0, 0, "[2]"),  # rank 2 closed step 0
            ("j", "loss", 1, 0, "[1]"), ("j", "step_time", 1, 0, "[]"),              # and rank 1 step 1
            ("j", "step_time", 2, 0, "[0]"), ("j", "loss", 2, 0, "[0]"),            # rank 0 never closed step 2
            ("j", "loss", 3, 0, "[1]"),                                              # no CLOSING window: unknown
            ("j", "progress.current_step", 5, 1000, "[1]"), ("other", "loss", 0, 0, "[2]")]
    con.executemany("INSERT INTO windows VALUES (?, ?, ?, ?, ?)", rows)
    con.commit()
    con.close()
    assert hang_clean.partial_windows(db, "j") == [{"step": 0, "metric": "collective_arrival", "ranks": [2]},
                                                   {"step": 1, "metric": "loss", "ranks": [1]}]


def test_hang_clean_refuses_bad_options():
    bench = [sys.executable, str(REPO / "bench" / "hang_clean.py")]
    assert subprocess.run([*bench, "--help"], cwd=REPO, capture_output=True, timeout=60).returncode == 0
    done = subprocess.run([*bench, "--shapes", "meteor"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "unknown shape 'meteor'" in done.stderr


def _run(job: str, world: int, starved: int | None, steps: int = 40) -> dict:
    per_rank, waits = [], []
    for step in range(steps):
        queued = {str(r): 0.02 for r in range(world)}
        if starved is not None and step >= 10:
            queued[str(starved)] = 0.2
        per_rank.append([step, {}, queued, {}])
        waits.append([step, 0, 0.0, 0.0, world, 0.25, 0.0, 0])
    return {"job": job, "cell": job, "world": world, "per_rank": per_rank, "waits": waits, "loadavg_1min": [1, 1]}


def test_cpu_starved_replay_names_the_starved_rank_of_a_recorded_run(tmp_path):
    matrix = {"runs": [_run("clean", 3, None), _run("starved", 4, 2), {"job": "old", "cell": "old", "world": 3,
                                                                        "waits": [], "per_rank": []}]}
    (tmp_path / "detection_matrix_x.json").write_text(json.dumps(matrix))
    done = subprocess.run([sys.executable, str(REPO / "bench" / "cpu_starved_replay.py"), "--results", str(tmp_path),
                           "--out", str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "cpu_starved_replay.json").read_text())
    assert result["summary"] == {"runs": 2, "steps": 80, "runs_with_event": 1, "events": 1}
    (starved,) = [r for r in result["runs"] if r["events"]]
    assert starved["job"] == "starved" and starved["events"][0]["ranks"] == [2]
