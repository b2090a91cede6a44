"""bench/straggler_scale.py: the straggler rule over the simulator's rank model, run small (the figures at 1,024
and 16,384 ranks are in docs/detectors.md); a 2x rank named soon, a clean run quiet, the per-step trace and the
plot written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_a_small_run_names_the_slow_rank_and_draws_its_score(tmp_path: Path) -> None:
    bench = [sys.executable, str(REPO / "bench" / "straggler_scale.py")]
    done = subprocess.run([*bench, "--ranks", "64", "--steps", "60", "--factors", "2", "--plot", "--out",
                           str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads((tmp_path / "straggler_scale.json").read_text())
    slow, clean = result["runs"]
    assert slow["named_rank"] == [slow["slow_rank"]] and slow["delay_steps"] <= 3, slow
    assert slow["false_alarms"] == 0 and clean["false_alarms"] == 0 and clean["named_rank"] is None
    assert slow["max_tracked_ranks"] <= 8
    ratios = {step: ratio for step, _, _, ratio, _ in slow["trace"]}
    assert ratios[39] < 1.0 <= ratios[40 + slow["delay_steps"]], slow["trace"]
    assert (tmp_path / "straggler_scale_64.png").stat().st_size > 10_000
    bad = subprocess.run([*bench, "--steps", "10"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--steps" in bad.stderr
