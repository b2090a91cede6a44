"""A real root and agent as processes (`python -m collectors.cli`), and torchrun jobs on this host against them
(gloo, CPU, loopback only).

Shared by the benches that run real torchrun jobs (bench/forensics.py, bench/detection.py) and by the tests that do
(tests/torchrun_tree.py): the services start on port 0 and a private Unix socket, their stderr in a log beside the
database, and are stopped (SIGTERM, then SIGKILL) whatever the caller did.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from collectors.demo.train import torchrun_command, torchrun_env
from collectors.sim.procs import Proc, python_module, stop_process

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def root_and_agent(tmp: Path, root_args: tuple[str, ...] = (),
                   agent_args: tuple[str, ...] = ()) -> Iterator[dict[str, Any]]:
    """A root (its database tmp/root.db) and an agent under it; yields {"api": the root's HTTP address, "agent":
    the agent's address for TELEMETRY_AGENT, "tmp", "db", "services": (root, agent), the Procs}. Their logs:
    tmp/root.log, tmp/agent.log."""
    root = Proc("root", python_module("collectors.cli", "collector", "--listen", "127.0.0.1:0", "--db",
                                      str(tmp / "root.db"), "--api", "127.0.0.1:0", *root_args), tmp)
    agent: Proc | None = None
    try:
        root.start()
        sock = tmp / "agent.sock"
        agent = Proc("agent", python_module("collectors.cli", "agent", "--socket", str(sock), "--parent",
                                            root.ready["address"], *agent_args), tmp).start()
        yield {"api": root.ready["api"], "agent": f"unix:{sock}", "tmp": tmp, "db": tmp / "root.db",
               "services": (root, agent)}
    finally:
        for proc in (agent, root):
            if proc is not None and proc.popen is not None:
                stop_process(proc.popen)


def torchrun_argv(world: int, script: Path, args: list[str], launcher: tuple[str, ...] = ()) -> list[str]:
    """torchrun with `world` ranks on this host running `script ARGS` (collectors.demo.train.torchrun_command: its
    rendezvous store on a port it binds itself); `launcher`: more of torchrun's own options (--rdzv-id, ...)."""
    return torchrun_command(world, script, args, launcher)


def job_env(agent: str, env: dict[str, str] | None = None) -> dict[str, str]:
    """The ranks' environment: the agent's address, loopback-only gloo, the repository importable, and `env`."""
    return {**torchrun_env(agent), "PYTHONPATH": str(REPO), **(env or {})}


def torchrun(world: int, script: Path, args: list[str], agent: str, log: Path,
             launcher: tuple[str, ...] = ()) -> subprocess.Popen:
    """Start `script` under torchrun with `world` ranks on this host (loopback gloo); its output (stdout and
    stderr) appended to `log`. Stop it with collectors.demo.train.kill_job."""
    with log.open("ab") as out:
        return subprocess.Popen(torchrun_argv(world, script, args, launcher), env=job_env(agent), cwd=REPO,
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
