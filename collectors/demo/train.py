"""The torch example (examples/train_ddp.py) under torchrun on this host: for `telemetry demo --train`, the
end-to-end test and bench/sdk_overhead.py. CPU ranks use gloo on loopback only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "train_ddp.py"


def example_path() -> Path:
    if not EXAMPLE.exists():
        raise FileNotFoundError(f"--train needs the torch example at {EXAMPLE} (run from a checkout of the repository)")
    try:
        import torch  # noqa: F401  (imported only to see that torch is installed)
    except ImportError:
        raise RuntimeError("--train needs torch: pip install torch==2.13.0") from None
    return EXAMPLE


def torchrun_command(world: int, script: Path, args: Sequence[str], launcher: Sequence[str] = ()) -> list[str]:
    """torchrun with `world` ranks on this host running `script ARGS`; `launcher`: more of torchrun's own options
    (--rdzv-id, --max-restarts).

    The c10d rendezvous store binds loopback port 0 itself (what `--standalone` does), never a port chosen here
    beforehand: torchrun that finds its endpoint taken silently joins whatever store listens there as a client, so
    jobs started together once shared one rendezvous (and its run id) through a port another job's store or a gloo
    socket took between the choosing and the binding."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(world),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:0", "--local-addr", "127.0.0.1",
            *launcher, str(script), *args]


def torchrun_argv(world: int, job: str, *example_args: str) -> list[str]:
    """torchrun with `world` ranks on this host running the example as `job` (its rendezvous id too)."""
    return torchrun_command(world, EXAMPLE, ["--job", job, *example_args], ("--rdzv-id", job, "--max-restarts", "0"))


def torchrun_env(agent: str) -> dict[str, str]:
    """The environment for it: the agent's address, loopback-only gloo, one intra-op thread per rank."""
    return {**os.environ, "TELEMETRY_AGENT": agent, "MASTER_ADDR": "127.0.0.1", "GLOO_SOCKET_IFNAME": "lo",
            "OMP_NUM_THREADS": "1", "PYTHONPATH": str(EXAMPLE.parents[1])}


def launch(world: int, job: str, agent: str, steps: int, flags: list[str], log_path: Path) -> subprocess.Popen:
    """Start torchrun with `world` ranks on this host; its output goes to `log_path`."""
    example_path()
    with log_path.open("ab") as log:
        return subprocess.Popen(torchrun_argv(world, job, "--steps", str(steps), "--linger", "2", *flags),
                                env=torchrun_env(agent), stdout=log, stderr=log, stdin=subprocess.DEVNULL)


def _job_pids(job: str) -> list[int]:
    """The processes whose command line names `job` (`--job JOB`): its ranks, each in a session of its own."""
    marker, found = f"--job\0{job}\0".encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except (OSError, ValueError):
            pass
    return found


def _signal(pids: list[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def kill_job(torchrun: subprocess.Popen, job: str, grace: float = 15.0) -> None:
    """Stop a torchrun started here and its ranks: SIGTERM (torchrun forwards it), then SIGKILL to any rank of
    `job` still running (job ids are unique, so the marker is safe). A stopped rank (SIGSTOP, a debugger's) is
    continued first: it acts on SIGTERM only once it runs, and torchrun would wait for it all of `grace`."""
    if torchrun.poll() is None:
        torchrun.terminate()
        _signal(_job_pids(job), signal.SIGCONT)
        try:
            torchrun.wait(grace)
        except subprocess.TimeoutExpired:
            torchrun.kill()
            torchrun.wait(5)
    _signal(_job_pids(job), signal.SIGKILL)


def run(world: int, job: str, agent: str, *example_args: str, timeout: float) -> tuple[subprocess.CompletedProcess,
                                                                                       bool]:
    """Run the example to the end (its output captured), or kill the job after `timeout` seconds;
    returns the finished process and whether it timed out."""
    cmd = torchrun_argv(world, job, *example_args)
    proc = subprocess.Popen(cmd, env=torchrun_env(agent), cwd=EXAMPLE.parents[1], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err), False
    except subprocess.TimeoutExpired:
        kill_job(proc, job)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            out, err = "", "(no output: pipes still held)"
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err), True
