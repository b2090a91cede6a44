"""bench/forward_cost.py serves the Forward stream through the tiers' machinery with a handler that only answers, in
both answer modes (a smoke run: 2 children, 3 steps; the figures are the bench's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_forward_cost_bench_smoke(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "forward_cost.py"), "--children", "2", "--unit-bytes",
                           "100", "--steps", "3", "--warmup", "1", "--rounds", "1", "--out", str(tmp_path)],
                          timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    found = json.loads((tmp_path / "forward_cost.json").read_text())
    assert [(r["mode"], r["messages_per_step"]) for r in found["results"]] == [("received+durable", 6), ("durable", 4)]
    assert all(r["cpu_ms_per_step"] >= 0 for r in found["results"])
    (summary,) = found["summary"]
    assert summary["unit_bytes"] == 100
