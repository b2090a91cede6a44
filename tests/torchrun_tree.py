"""A real root and agent as processes (`python -m collectors.cli`), and torchrun jobs against them.

Shared by the tests that run real torchrun jobs (gloo, CPU): each starts the services on port 0 and a
private Unix socket, and stops them (SIGTERM, then SIGKILL) whatever the test did.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from collectors.demo.train import torchrun_env
from collectors.sim.procs import free_port

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
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


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


def torchrun(world: int, script: Path, args: list[str], agent: str, log: Path) -> subprocess.Popen:
    """Start `script` under torchrun with `world` ranks on this host (loopback gloo); output to `log`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(world),
           "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--local-addr", "127.0.0.1",
           str(script), *args]
    with log.open("ab") as out:
        return subprocess.Popen(cmd, env={**torchrun_env(agent), "PYTHONPATH": str(REPO)}, cwd=REPO,
                                stdout=out, stderr=out, stdin=subprocess.DEVNULL)
