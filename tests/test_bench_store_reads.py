"""bench/store_reads.py runs both scenarios and writes its figures (a smoke run; the latencies are the bench's, not
asserted: only that every resent window was recognised as a duplicate)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_store_reads_bench_smoke(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "bench" / "store_reads.py"), "--seconds", "1", "--hold-ms", "50",
                    "--busy-windows", "5", "--windows", "2000", "--cache", str(tmp_path / "cache"),
                    "--out", str(tmp_path)], check=True, timeout=120, capture_output=True)
    result = json.loads((tmp_path / "store_reads.json").read_text())
    assert result["slow_commit"]["probe_received"]["n"] > 0
    assert result["restart"]["duplicates"] == 2000 and result["restart"]["all_duplicates"]
