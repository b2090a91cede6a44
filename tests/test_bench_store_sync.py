"""bench/store_sync.py runs and writes its figures (a smoke run; the figures are the bench's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_store_sync_bench_smoke(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "bench" / "store_sync.py"), "--rounds", "1", "--commits", "5",
                    "--windows", "4", "--dir", str(tmp_path), "--out", str(tmp_path)], check=True, timeout=120,
                   capture_output=True)
    result = json.loads((tmp_path / "store_sync.json").read_text())
    assert set(result["commits_per_s"]) == {"process", "power"}
    assert all(rate > 0 for rate in result["commits_per_s"].values())
