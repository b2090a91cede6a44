"""bench/scale.py's processes: each is `bench/scale.py _child ROLE CONFIG`, prints a JSON ready line, then answers
JSON commands read on stdin, one JSON line each on stdout. `commands` is the child's side, `Child` the parent's."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.procstat import cpu_times, status_kb

REPO = Path(__file__).resolve().parent.parent
SCRIPT = Path(__file__).resolve().with_name("scale.py")  # its `_child ROLE CONFIG` runs the role


# ---------------------------------------------------------------------------- the child's side
def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def commands(handle: Callable[[dict], dict | None]) -> None:
    """Child side: read JSON commands on stdin, answer each with {"id": ..., **handle(cmd)}; EOF stops."""
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        try:
            # CPU of the whole process (every thread, live or exited), nanosecond clock
            reply = {"cpu": time.process_time()} if cmd.get("cmd") == "cpu" else (handle(cmd) or {})
        except Exception as exc:  # reported to the parent, which fails the run
            reply = {"error": repr(exc)}
        emit({"id": cmd.get("id"), **reply})
        if cmd.get("cmd") == "stop":
            break


# ---------------------------------------------------------------------------- the parent's side
class Child:
    """A child process of bench/scale.py (`_child ROLE CONFIG`): a JSON ready line, then JSON commands."""

    def __init__(self, name: str, role: str, config: dict, logs: Path) -> None:
        from collectors.common.lifetime import PARENT_ENV
        self.name = name
        env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
        log = open(logs / f"{name}.log", "ab")
        self.popen = subprocess.Popen([sys.executable, str(SCRIPT), "_child", role, json.dumps(config)],
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, env=env, cwd=REPO,
                                      text=True, bufsize=1)
        log.close()
        self.log_path = logs / f"{name}.log"
        self.pid = self.popen.pid
        self.ready: dict = {}
        self._next = 0
        self._replies: dict[int, dict] = {}
        self._cond = threading.Condition()
        self._first: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if msg.get("ready"):
                self._first.put(msg)
                continue
            with self._cond:
                self._replies[msg.get("id")] = msg
                self._cond.notify_all()
        self._first.put(None)
        with self._cond:
            self._cond.notify_all()

    def wait_ready(self, timeout: float = 600.0) -> dict:
        try:
            msg = self._first.get(timeout=timeout)
        except queue.Empty:
            msg = None
        if msg is None:
            raise RuntimeError(f"{self.name} did not start: {self.tail()}")
        self.ready = msg
        return msg

    def send(self, cmd: dict) -> int:
        self._next += 1
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps({"id": self._next, **cmd}) + "\n")
        self.popen.stdin.flush()
        return self._next

    def wait(self, ident: int, timeout: float = 120.0) -> dict:
        end = time.monotonic() + timeout
        with self._cond:
            while ident not in self._replies:
                left = end - time.monotonic()
                if left <= 0 or self.popen.poll() is not None:
                    raise RuntimeError(f"{self.name}: no answer to command {ident}: {self.tail()}")
                self._cond.wait(min(left, 0.5))
            reply = self._replies.pop(ident)
        if "error" in reply:
            raise RuntimeError(f"{self.name}: {reply['error']}")
        return reply

    def ask(self, cmd: dict, timeout: float = 120.0) -> dict:
        return self.wait(self.send(cmd), timeout)

    def cpu_jiffies(self) -> tuple[float, float]:
        return cpu_times(self.pid)

    def hwm_mb(self) -> float:
        return status_kb(self.pid, "VmHWM") / 1024

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-1500:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.popen.poll() is None:
            self.popen.kill()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            pass


def start_all(children: list[Child], timeout: float = 600.0) -> None:
    for child in children:
        child.wait_ready(timeout)


def kill_all(children: list[Child]) -> None:
    for child in children:
        if child.popen.poll() is None:
            child.popen.kill()
    for child in children:
        child.kill()
