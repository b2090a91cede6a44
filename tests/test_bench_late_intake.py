"""bench/late_intake.py reads a unit of first parts and one of late deltas through a tier's intake (a smoke run: the
figures are the bench's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_late_intake_bench_smoke(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "late_intake.py"), "--windows", "4", "--repeats", "2",
                           "--rounds", "1", "--out", str(tmp_path)], timeout=120, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads((tmp_path / "late_intake.json").read_text())
    assert result["median"]["first"] > 0 and result["median"]["late"] > 0
