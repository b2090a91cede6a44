"""A misconfigured service says so (issue 23 §2): a parent that does not answer is a warning that repeats until
it does, then a line when it is back; a busy port is one line and a non-zero exit, not a 59-line traceback.
The SDK's side is tests/test_misconfigured.py."""

from __future__ import annotations

import json
import logging
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from collectors.delivery.outbox import Outbox
from helpers_tree import dead_address

EXIT_CANNOT_LISTEN = 69


def _telemetry(*args: str | Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "collectors.cli", *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


class _Lines:
    """A stream's lines as they come, on a thread of its own (a pipe nobody reads would fill up)."""

    def __init__(self, stream) -> None:
        self._lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self.seen: list[str] = []
        threading.Thread(target=lambda: [self._lines.put(line) for line in stream], daemon=True).start()

    def wait_for(self, text: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            except queue.Empty:
                break
            self.seen.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout} s; saw:\n{''.join(self.seen)}")


@pytest.fixture
def busy_port():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("flag", ["--listen", "--api"])
def test_a_busy_port_is_one_line_not_a_traceback(tmp_path, busy_port, flag):
    listen = {"--listen": "127.0.0.1:0", "--api": "127.0.0.1:0", flag: f"127.0.0.1:{busy_port}"}
    proc = _telemetry("collector", "--db", tmp_path / "root.db", *[x for kv in listen.items() for x in kv])
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CANNOT_LISTEN, (out, err)
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert f"127.0.0.1:{busy_port}" in err and "Address already in use" in err and "ss -ltnp" in err, err


def test_time_wait_is_no_owner(tmp_path):
    """A port whose last connection is in TIME_WAIT is free to a server (SO_REUSEADDR): a restart within a
    minute must not be told it is taken."""
    with socket.socket() as server:
        # As the collector before it did (gRPC and the API's HTTPServer set it): Linux lets a new bind take over
        # a TIME_WAIT socket only if both set SO_REUSEADDR.
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        accepted.close()  # the server side closes first: its end goes to TIME_WAIT
        client.close()
    proc = _telemetry("collector", "--db", tmp_path / "root.db", "--listen", f"127.0.0.1:{port}", "--api",
                      "127.0.0.1:0")
    try:
        ready = json.loads(proc.stdout.readline() or "{}")
        assert ready.get("address") == f"127.0.0.1:{port}", proc.stderr.read() if not ready else ready
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_agent_says_its_parent_is_unreachable_until_it_answers(tmp_path):
    parent = dead_address()
    agent = _telemetry("agent", "--socket", tmp_path / "agent.sock", "--no-gpu-probe", "--no-nic-probe",
                       "--parent", parent)
    root = None
    try:
        assert json.loads(agent.stdout.readline())["ready"]
        errors = _Lines(agent.stderr)
        said = errors.wait_for("cannot reach the parent", timeout=15)
        assert parent in said and "--parent" in said and "durable" in said, said
        root = _telemetry("collector", "--db", tmp_path / "root.db", "--listen", parent, "--api", "127.0.0.1:0")
        assert json.loads(root.stdout.readline())["ready"], root.stderr.read()
        assert parent in errors.wait_for("answers now", timeout=15)
    finally:
        for proc in (agent, root):
            if proc is not None:
                proc.terminate()
                proc.wait(30)


def test_the_outbox_keeps_saying_so_while_no_parent_answers(caplog):
    caplog.set_level(logging.WARNING, logger="collectors.delivery.outbox")
    parents = [dead_address(), dead_address()]
    outbox = Outbox("agent-x", parents, None, on_ack=lambda unit, ack: None, connect_timeout_s=0.1,
                    warn_every_s=0.3)
    outbox.start()
    try:
        time.sleep(1.5)
    finally:
        outbox.close()
    said = [r.getMessage() for r in caplog.records if "cannot reach the parent" in r.getMessage()]
    assert 2 <= len(said) <= 6, said  # repeated, at most one per 0.3 s
    assert all(parents[0] in s and parents[1] in s for s in said), said


def test_a_second_agent_on_a_live_socket_is_refused_and_a_stale_one_is_taken_over(tmp_path):
    """Two agents on one node (a manual one beside the systemd unit): the second used to unlink the first's socket
    and take its ranks' new connections, silently. A socket left by a killed agent is still taken over."""
    sock = tmp_path / "agent.sock"
    args = ("agent", "--socket", sock, "--no-gpu-probe", "--no-nic-probe", "--parent", dead_address())
    first = _telemetry(*args)
    try:
        assert json.loads(first.stdout.readline())["ready"]
        second = _telemetry(*args)
        out, err = second.communicate(timeout=60)
        assert second.returncode == EXIT_CANNOT_LISTEN and "another process accepts connections there" in err, err
        assert sock.exists(), "the first agent's socket is left alone"
    finally:
        first.kill()  # as SIGKILL leaves it: the socket file stays, nothing accepts on it
        first.wait(30)
    assert sock.exists()
    third = _telemetry(*args)
    try:
        assert json.loads(third.stdout.readline() or "{}").get("ready"), third.stderr.read()
    finally:
        third.terminate()
        third.wait(30)


def test_a_socket_folder_that_cannot_be_made_is_one_line(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = _telemetry("agent", "--socket", blocker / "agent.sock", "--no-gpu-probe", "--parent", dead_address())
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == EXIT_CANNOT_LISTEN and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"cannot make {blocker}" in err
