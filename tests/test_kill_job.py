"""collectors.demo.train.kill_job against a real torchrun whose rank is stopped (SIGSTOP, as a debugger or a
`kill -STOP` leaves it): the stopped rank must be continued, so that it acts on the SIGTERM torchrun forwards and
torchrun ends on its own within the grace, rather than waiting for it until kill_job SIGKILLs torchrun (whose own
clean-up then never runs). The ranks are plain Python (no torch import): only the launcher starts torch.
"""

from __future__ import annotations

import os
import signal
import subprocess
import uuid
from pathlib import Path

import pytest

from bench.torchrun_jobs import REPO, job_env, torchrun_argv
from collectors.demo.train import _job_pids, kill_job
from helpers_tree import wait_for

pytestmark = pytest.mark.timeout(90)

RANK = """
import os, signal, sys, time
from pathlib import Path
rank = int(os.environ["RANK"])
Path(sys.argv[1], f".rank{rank}").write_text(str(os.getpid()))
os.rename(Path(sys.argv[1], f".rank{rank}"), Path(sys.argv[1], f"rank{rank}"))
if rank == 1:
    os.kill(os.getpid(), signal.SIGSTOP)
time.sleep(300)
"""


def _state(pid: int) -> str:
    """The process's state letter (/proc/PID/stat's third field; T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_kill_job_continues_a_stopped_rank_so_torchrun_ends_on_its_own(tmp_path: Path) -> None:
    script, job = tmp_path / "rank.py", f"stopped-{uuid.uuid4().hex[:8]}"
    script.write_text(RANK)
    proc = subprocess.Popen(torchrun_argv(2, script, [str(tmp_path), "--job", job], ("--max-restarts", "0")),
                            env=job_env("unix:/nonexistent"), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        pids = wait_for(lambda: [int((tmp_path / f"rank{r}").read_text()) for r in (0, 1)]
                        if all((tmp_path / f"rank{r}").exists() for r in (0, 1)) else None,
                        timeout=60, what="both ranks started")
        wait_for(lambda: _state(pids[1]) == "T" or None, timeout=10, what="rank 1 stopped")
        assert proc.poll() is None and _state(pids[0]) != "T"
        kill_job(proc, job, grace=15)
        # torchrun ended by the SIGTERM it was sent, having stopped both ranks itself: not SIGKILLed after the grace
        assert proc.returncode is not None and proc.returncode != -signal.SIGKILL, proc.returncode
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
        for pid in _job_pids(job):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

