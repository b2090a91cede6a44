"""bench/remote_write.py runs and writes its figures (a smoke run; the figures are the bench's, not asserted)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_remote_write_bench_smoke(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "bench" / "remote_write.py"), "--quick", "--out", str(tmp_path)],
                   check=True, timeout=120, capture_output=True)
    result = json.loads((tmp_path / "remote_write_quick.json").read_text())
    assert result["intake"]["samples_per_step"] == 5 * 9 + 1  # 5 metrics: 7 figures and 2 ranks each, the index
    sent = result["sending_local_receiver"]
    assert sent["flushed"] and sent["samples"] == sent["receiver_samples"] == 40 * (5 * 9 + 1)
    assert not any(sent["dropped"].values())
