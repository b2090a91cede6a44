"""A real root and agent as processes (`python -m collectors.cli`), and torchrun jobs against them.

Shared by the tests that run real torchrun jobs (gloo, CPU): each starts the services on port 0 and a
private Unix socket, and stops them (SIGTERM, then SIGKILL) whatever the test did. The job scripts end their
ranks with `end_rank`, whose done line `durable_ranks` counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from collectors.demo.train import kill_job, torchrun_env
from collectors.sim.procs import free_port, stop_process

REPO = Path(__file__).resolve().parents[1]


def start_service(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, dict]:
    """Start `telemetry ARGS...`; returns the process and the JSON line it prints once ready."""
    proc = subprocess.Popen([sys.executable, "-m", "collectors.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=env)
    line = proc.stdout.readline()  # type: ignore[union-attr]
    if not line:
        proc.kill()
        raise AssertionError(f"{args[0]} did not start: {proc.stderr.read()}")  # type: ignore[union-attr]
    return proc, json.loads(line)


def stop_service(proc: subprocess.Popen) -> None:
    stop_process(proc)


@contextmanager
def root_and_agent(tmp: Path, root_args: tuple[str, ...] = (), agent_args: tuple[str, ...] = (),
                   root_env: dict[str, str] | None = None) -> Iterator[dict]:
    """{"api": the root's HTTP address, "agent": the agent's address for TELEMETRY_AGENT, "tmp", "db"}."""
    root, ready = start_service(["collector", "--listen", "127.0.0.1:0", "--db", str(tmp / "root.db"),
                                 "--api", "127.0.0.1:0", *root_args], env=root_env)
    agent = None
    try:
        sock = tmp / "agent.sock"
        agent, _ = start_service(["agent", "--socket", str(sock), "--parent", ready["address"], *agent_args])
        yield {"api": ready["api"], "agent": f"unix:{sock}", "tmp": tmp, "db": tmp / "root.db"}
    finally:
        if agent is not None:
            stop_service(agent)
        stop_service(root)


def torchrun_argv(world: int, script: Path, args: list[str], launcher: tuple[str, ...] = ()) -> list[str]:
    """torchrun with `world` ranks on this host (c10d rendezvous on a free loopback port) running `script ARGS`;
    `launcher`: more of torchrun's own options (--rdzv-id, --max-restarts)."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(world),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--local-addr", "127.0.0.1",
            *launcher, str(script), *args]


def job_env(agent: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The ranks' environment: the agent's address, loopback-only gloo, the repository importable, and `env`."""
    return {**torchrun_env(agent), "PYTHONPATH": str(REPO), **(env or {})}


def torchrun(world: int, script: Path, args: list[str], agent: str, log: Path) -> subprocess.Popen:
    """Start `script` under torchrun with `world` ranks on this host (loopback gloo); output to `log`."""
    with log.open("ab") as out:
        return subprocess.Popen(torchrun_argv(world, script, args), env=job_env(agent), cwd=REPO,
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL)


def run_job(world: int, script: Path, args: list[str], agent: str, job: str, timeout: float,
            launcher: tuple[str, ...] = (), env: dict[str, str] | None = None) -> str:
    """Run `script` under torchrun to its end and return its stdout; a job that fails, or runs past `timeout` s
    (then it is killed: torchrun and every rank of `job`), fails the test with the end of its output."""
    proc = subprocess.Popen(torchrun_argv(world, script, args, launcher), env=job_env(agent, env), cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_job(proc, job)
        out, err = proc.communicate(timeout=10)
        raise AssertionError(f"job timed out\n{out[-3000:]}\n{err[-4000:]}") from None
    assert proc.returncode == 0, f"job failed ({proc.returncode})\n{out[-3000:]}\n{err[-4000:]}"
    return out


def durable_ranks(out: str) -> int:
    """How many ranks printed `end_rank`'s done line with everything they logged durable at the root."""
    return out.count('"durable": true')


def end_rank(run: Any, rank: int, timeout: float = 60.0) -> NoReturn:
    """A job script's last lines: close `run` (up to `timeout` s for its data to be durable), leave the process
    group, print the done line, exit (3 when not durable; os._exit: no interpreter teardown left to hang)."""
    import torch.distributed as dist

    ok = run.close(timeout=timeout)
    dist.destroy_process_group()
    print(f'{{"event": "done", "rank": {rank}, "durable": {str(ok).lower()}}}', flush=True)
    os._exit(0 if ok else 3)
