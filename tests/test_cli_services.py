"""The `telemetry agent` / `telemetry collector` processes: ready line, systemd readiness, clean stop, --help."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest


def _start(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "collectors.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)


def test_root_rack_agent_announce_ready_and_stop_on_sigterm(tmp_path: Path) -> None:
    root, ready_root = _start(["collector", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "r.db"),
                               "--api", "127.0.0.1:0"])
    try:
        assert ready_root["role"] == "root" and ready_root["api"].startswith("127.0.0.1:")
        rack, ready_rack = _start(["collector", "--listen", "127.0.0.1:0", "--parent", ready_root["address"]])
        agent, ready_agent = _start(["agent", "--socket", str(tmp_path / "a.sock"), "--parent", ready_rack["address"]])
        assert ready_rack["role"] == "collector"
        assert ready_agent["addresses"] == [f"unix:{tmp_path / 'a.sock'}"]
        assert (tmp_path / "a.sock").stat().st_mode & 0o777 == 0o660
        for proc in (agent, rack):
            proc.terminate()
            assert proc.wait(10) == 0
        assert not (tmp_path / "a.sock").exists()
    finally:
        root.terminate()
        assert root.wait(10) == 0


def test_agent_tells_systemd_it_is_ready_and_stopping(tmp_path: Path) -> None:
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(str(tmp_path / "notify"))
    notify.settimeout(20)
    env = {**__import__("os").environ, "NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "400000"}
    root, ready_root = _start(["collector", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "r.db"),
                               "--api", "127.0.0.1:0"])
    agent, _ = _start(["agent", "--socket", str(tmp_path / "a.sock"), "--parent", ready_root["address"]], env)
    try:
        messages = []
        while not any("WATCHDOG=1" in m for m in messages):
            messages.append(notify.recv(4096).decode())
        assert "READY=1" in messages[0]
        agent.terminate()
        assert agent.wait(10) == 0
        rest = []
        while not any("STOPPING=1" in m for m in rest):
            rest.append(notify.recv(4096).decode())
    finally:
        agent.kill()
        root.terminate()
        root.wait(10)
        notify.close()


@pytest.mark.parametrize("command", [[], ["agent"], ["collector"], ["sim"]])
def test_help_explains_every_command(command: list[str]) -> None:
    out = subprocess.run([sys.executable, "-m", "collectors.cli", *command, "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "Usage:" in out and len(out) > 200


def test_agent_without_parent_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-m", "collectors.cli", "agent", "--socket", str(tmp_path / "a.sock")],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "--parent" in result.stderr


def test_sim_refuses_a_malformed_injection() -> None:
    result = subprocess.run([sys.executable, "-m", "collectors.cli", "sim", "--inject", "straggler:rank=x"],
                            capture_output=True, text=True)
    assert result.returncode == 2 and "not a number" in result.stderr


def test_a_token_over_plaintext_tcp_is_refused_unless_allowed_and_a_command_line_token_is_warned_about(tmp_path):
    run = [sys.executable, "-m", "collectors.cli"]
    refused = subprocess.run([*run, "collector", "--listen", "127.0.0.1:0", "--token", "abc",
                              "--db", str(tmp_path / "r.db"), "--api", "127.0.0.1:0"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "plaintext TCP" in refused.stderr
    assert "visible to every user of this host" in refused.stderr
    agent = subprocess.run([*run, "agent", "--socket", str(tmp_path / "a.sock"), "--parent", "127.0.0.1:1",
                            "--parent-token-file", str(_file(tmp_path / "t", "abc"))],
                           capture_output=True, text=True, timeout=60)
    assert agent.returncode == 2 and "sent to the parent over plaintext TCP" in agent.stderr
    assert "visible to every user" not in agent.stderr  # from a file: nothing to warn about
    allowed, ready = _start(["collector", "--listen", "127.0.0.1:0", "--token-file", str(tmp_path / "t"),
                             "--allow-insecure-token", "--db", str(tmp_path / "r.db"), "--api", "127.0.0.1:0"])
    try:
        assert ready["role"] == "root"
    finally:
        allowed.terminate()
        assert allowed.wait(10) == 0


def _file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
