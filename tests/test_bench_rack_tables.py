"""bench/rack_tables.py drives a rack with its windows in Python and one with them held natively through the same
units (a smoke run: tiny fan-in, two steps; the figures are the bench's, not asserted; that both tables send the same
windows is: the bench fails otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_rack_tables_bench_smoke(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(REPO / "bench" / "rack_tables.py"), "--metrics", "3", "--children", "4",
                           "--steps", "2", "--rounds", "1", "--out", str(tmp_path)], timeout=120, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (result,) = json.loads((tmp_path / "rack_tables.json").read_text())["results"]
    assert (result["metrics"], result["children"], result["child_windows_per_step"]) == (3, 4, 12)
    assert result["python"]["cpu_ms_per_step_median"] > 0 and result["native"]["cpu_ms_per_step_median"] > 0
