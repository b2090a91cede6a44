"""tests/bounded_run.py: a command past its time-out is killed with every process it started (a build's
compilers ran on beside the suite after tests/test_wheel.py's time-out: subprocess.run kills only its child)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from bounded_run import run

# A parent that starts a child which outlives it unless killed, writes the child's pid to argv[1], then waits.
PARENT = """
import pathlib, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
pathlib.Path(sys.argv[1]).write_text(str(child.pid))
child.wait()
"""


def _gone(pid: int) -> bool:
    """No such process, or only its zombie left (reparented: init reaps it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_a_timed_out_command_leaves_no_process_behind(tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    for timeout in (2, 8, 32, 128):  # until the parent got as far as starting its child (a loaded machine)
        with pytest.raises(subprocess.TimeoutExpired):
            run([sys.executable, script, pid_file], timeout=timeout)
        if pid_file.exists() and pid_file.read_text():
            break
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 30  # SIGKILL is delivered at once; this only bounds the reaping
    while not _gone(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert _gone(child), f"the command's child {child} outlived the time-out"
    finally:
        if not _gone(child):
            subprocess.run(["kill", "-9", str(child)], check=False)


def test_a_command_that_ends_returns_its_output_and_status(tmp_path: Path) -> None:
    done = run([sys.executable, "-c", "import sys; print('out'); print('err', file=sys.stderr); sys.exit(3)"],
               timeout=60, cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (3, "out\n", "err\n")
