"""bench/tier_cost.py runs a real rack under a real root and a real root alone, fed by pre-built units (a smoke
run: tiny fan-in, one measured step; the figures are the bench's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_tier_cost_bench_smoke(tmp_path: Path) -> None:
    for tier, name in (("rack", "tier_cost.json"), ("root", "tier_cost_root.json")):
        done = subprocess.run([sys.executable, str(REPO / "bench" / "tier_cost.py"), "--tier", tier, "--children", "3",
                               "--ranks-per-child", "16", "--metrics", "2", "--steps", "1", "--warmup", "1",
                               "--idle-s", "0.2", "--out", str(tmp_path)], timeout=180, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        (result,) = json.loads((tmp_path / name).read_text())["results"]
        assert (result["tier"], result["ranks"], result["child_windows_per_step"]) == (tier, 48, 6)
        assert result["cpu_ms_per_step"] >= 0 and result["own_code_ms_per_step"] > 0


def test_tier_cost_bench_in_process_smoke(tmp_path: Path) -> None:
    """--in-process: the root's intake and flush in the bench's own process, every step's DURABLE per unit checked
    (the bench fails otherwise), its CPU split by phase."""
    done = subprocess.run([sys.executable, str(REPO / "bench" / "tier_cost.py"), "--tier", "root", "--in-process",
                           "--children", "9", "--ranks-per-child", "16", "--metrics", "2", "--steps", "2", "--warmup",
                           "1", "--out", str(tmp_path)], timeout=180, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "tier_cost_root_inprocess.json").read_text())["results"]
    assert (result["in_process"], result["ranks"], result["child_windows_per_step"]) == (True, 144, 18)
    assert sorted(result["phase_cpu_ms_per_step"]) == ["flush", "intake", "read"]
    assert result["cpu_ms_per_step"] > 0
    refused = subprocess.run([sys.executable, str(REPO / "bench" / "tier_cost.py"), "--tier", "rack", "--in-process"],
                             timeout=60, capture_output=True, text=True)
    assert refused.returncode == 2 and "--in-process drives the root alone" in refused.stderr
