"""Fork safety (issue 27 item 4): a worker forked after telemetry.init() (a DataLoader worker) neither sends on
the parent's channel nor hangs, even when the fork caught a parent thread holding the SDK's locks. A real fork,
in a real process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from helpers_tree import make_agent, make_root, steps, stop_all

JOB = Path(__file__).with_name("fork_job.py")


def test_a_forked_worker_neither_sends_nor_hangs(tmp_path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    try:
        done = subprocess.run([sys.executable, str(JOB), f"unix:{tmp_path / 'a.sock'}"], capture_output=True,
                              text=True, timeout=60)
        assert done.returncode == 0, done.stderr[-3000:]
        result = json.loads(done.stdout.strip().splitlines()[-1])
        assert result["child"] == 0, f"the forked worker {result['child']} (3: close() waited or said True)"
        assert result["closed"] is True, "the rank itself delivered everything it logged"
        rows = steps(root.api_address, "fork", "x")
        assert [(r["step"], r["count"], r["max"]) for r in rows] == [(1, 1, 1.0)], "nothing from the worker"
    finally:
        stop_all(agent, root)
