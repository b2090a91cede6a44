"""`telemetry demo --train`: examples/train_ddp.py under torchrun (CPU: gloo on loopback), logging to the demo's agent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from collectors.sim.procs import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"


def example_path() -> Path:
    if not EXAMPLE.exists():
        raise FileNotFoundError(f"--train needs the torch example at {EXAMPLE} (run from a checkout of the repository)")
    try:
        import torch  # noqa: F401
    except ImportError:
        raise RuntimeError("--train needs torch: pip install torch==2.13.0") from None
    return EXAMPLE


def launch(world: int, job: str, agent: str, steps: int, flags: list[str], log_path: Path) -> subprocess.Popen:
    """Start torchrun with `world` ranks on this host; its output goes to `log_path`."""
    port = free_port()
    env = {**os.environ, "TELEMETRY_AGENT": agent, "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(EXAMPLE.parents[1])}
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(world),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", job,
            "--local-addr", "127.0.0.1", "--max-restarts", "0", str(example_path()), "--job", job,
            "--steps", str(steps), "--linger", "2", *flags]
    with log_path.open("ab") as log:
        # A session of its own, so stop() can signal torchrun and every rank it started together.
        return subprocess.Popen(argv, env=env, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                start_new_session=True)


def stop(proc: subprocess.Popen, grace: float = 15.0) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
    except ProcessLookupError:
        pass
