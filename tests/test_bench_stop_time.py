"""bench/stop_time.py runs and writes its JSON (one cycle per service, one hog: the figures are the bench's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_stop_time_bench_writes_its_figures(tmp_path: Path) -> None:
    out = tmp_path / "stop_time.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "stop_time.py"), "--cycles", "1", "--hogs", "1",
                           "--out", str(out)], capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    result = json.loads(out.read_text())
    assert set(result["summary"]) == {"idle", "1_hogs"}
    for by_service in result["summary"].values():
        assert set(by_service) == {"root", "rack", "agent"}
        assert all(s["n"] == 1 and s["nonzero_exit"] == 0 and s["overran"] == 0 for s in by_service.values())
    assert "median s" in done.stdout
