"""Child processes that never outlive the simulator: PDEATHSIG (armed by the child), a ready line, kill on exit."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from collectors.common.lifetime import PARENT_ENV


def stop_process(popen: subprocess.Popen, sig: int = signal.SIGTERM, grace: float = 10.0) -> None:
    """End a child that may still run: `sig` (SIGTERM by default), up to `grace` s for it to exit, then SIGKILL."""
    if popen.poll() is None:
        popen.send_signal(sig)
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            popen.kill()
            popen.wait(5)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Proc:
    """One service process; `start()` waits for its JSON ready line (or its exit, which is an error)."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, ready_line: bool = True) -> None:
        # A copy: the bound ports are written into it (_pin_ports), never into the caller's list.
        self.name, self.argv, self.log_dir, self.ready_line = name, list(argv), log_dir, ready_line
        self.popen: subprocess.Popen | None = None
        self.ready: dict = {}
        self.restarts = 0

    def start(self, timeout: float = 120.0) -> Proc:
        log = open(self.log_dir / f"{self.name}.log", "ab")
        # The child arms PDEATHSIG itself (collectors.common.lifetime): no preexec_fn in a threaded parent.
        env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
        self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE if self.ready_line else log, stderr=log,
                                      stdin=subprocess.DEVNULL, env=env)
        log.close()
        if self.ready_line:
            self.ready = self._read_ready(timeout)
            self._pin_ports()
        return self

    def _pin_ports(self) -> None:
        """A service asked to bind port 0 keeps the port it bound for its restarts: its children were given that
        address. Port 0 is asked so that no other process can take the port between its choice and the bind."""
        for flag, key in (("--listen", "address"), ("--api", "api")):
            if flag in self.argv and self.ready.get(key):
                at = self.argv.index(flag) + 1
                if at < len(self.argv) and self.argv[at].endswith(":0"):
                    self.argv[at] = self.ready[key]

    def _read_ready(self, timeout: float) -> dict:
        assert self.popen is not None and self.popen.stdout is not None
        deadline = time.monotonic() + timeout
        buffer = b""
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.popen.stdout], [], [], 0.1)
            if ready:
                chunk = os.read(self.popen.stdout.fileno(), 65536)
                if not chunk:
                    break
                buffer += chunk
                if b"\n" in buffer:
                    return json.loads(buffer.split(b"\n", 1)[0])
            if self.popen.poll() is not None:
                break
        self.kill()
        tail = (self.log_dir / f"{self.name}.log").read_text(errors="replace")[-2000:]
        raise RuntimeError(f"{self.name} did not start: {tail}")

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen is not None:
            stop_process(self.popen, sig, grace=5)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)

    def restart(self) -> None:
        self.kill()
        self.restarts += 1
        self.start()


def python_module(module: str, *args: str) -> list[str]:
    return [sys.executable, "-m", module, *args]
