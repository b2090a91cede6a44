"""sd_notify client against real AF_UNIX datagram sockets bound by the test (path and abstract)."""

from __future__ import annotations

import logging
import os
import socket
import struct
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from collectors.common import sdnotify
from collectors.common.sdnotify import Notifier, WatchdogPinger, watchdog_interval_s

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def path_socket(tmp_path: Path):
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(5.0)
    yield sock, str(path)
    sock.close()


@pytest.fixture
def abstract_socket():
    name = f"telemetry-test-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(b"\0" + name.encode())
    sock.settimeout(5.0)
    yield sock, "@" + name
    sock.close()


def recv_lines(sock: socket.socket) -> list[str]:
    return sock.recv(4096).decode().split("\n")


@pytest.mark.parametrize("which", ["path_socket", "abstract_socket"])
def test_messages_arrive(which: str, request: pytest.FixtureRequest) -> None:
    sock, addr = request.getfixturevalue(which)
    n = Notifier({"NOTIFY_SOCKET": addr})
    assert n.enabled
    assert n.ready("listening on /run/telemetry/agent.sock")
    assert recv_lines(sock) == ["READY=1", "STATUS=listening on /run/telemetry/agent.sock"]
    assert n.watchdog()
    assert recv_lines(sock) == ["WATCHDOG=1"]
    assert n.status("8 ranks\nstep 4812")  # one line: a newline would start a new KEY=VALUE
    assert recv_lines(sock) == ["STATUS=8 ranks step 4812"]
    assert n.stopping()
    assert recv_lines(sock) == ["STOPPING=1"]
    n.close()


def test_noop_without_notify_socket(caplog: pytest.LogCaptureFixture) -> None:
    n = Notifier({})
    assert not n.enabled
    with caplog.at_level(logging.DEBUG):
        assert n.ready() is False and n.watchdog() is False and n.stopping() is False
    assert not caplog.records
    assert WatchdogPinger(n, interval_s=0.01).start() is False


def test_module_functions_use_the_environment(path_socket, monkeypatch: pytest.MonkeyPatch) -> None:
    sock, addr = path_socket
    monkeypatch.setenv("NOTIFY_SOCKET", addr)
    monkeypatch.setattr(sdnotify, "_default", None)
    assert sdnotify.ready()
    assert recv_lines(sock) == ["READY=1"]
    assert sdnotify.watchdog() and recv_lines(sock) == ["WATCHDOG=1"]
    monkeypatch.setattr(sdnotify, "_default", None)


def test_send_failure_is_logged_once_and_never_raises(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    n = Notifier({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")})
    with caplog.at_level(logging.WARNING, logger="collectors.common.sdnotify"):
        assert n.ready() is False
        assert n.watchdog() is False
    assert len(caplog.records) == 1
    assert not Notifier({"NOTIFY_SOCKET": "vsock:2:1234"}).enabled


def test_watchdog_interval() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 15.0
    assert watchdog_interval_s({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "soon"}) is None


def test_pinger_pings_while_healthy_and_stops_promptly(abstract_socket) -> None:
    sock, addr = abstract_socket
    env = {"NOTIFY_SOCKET": addr, "WATCHDOG_USEC": "100000"}  # 0.1 s period: ping every 0.05 s
    healthy = {"ok": True}
    pinger = WatchdogPinger(env=env, healthy=lambda: healthy["ok"])
    assert pinger.interval_s == pytest.approx(0.05)
    assert pinger.start()
    try:
        for _ in range(3):
            assert recv_lines(sock) == ["WATCHDOG=1"]
        # Unhealthy: pings are withheld, so systemd's watchdog would fire.
        healthy["ok"] = False
        time.sleep(0.12)  # let an in-flight ping land
        sock.settimeout(0.0)
        try:
            while True:
                sock.recv(4096)
        except BlockingIOError:
            pass
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.recv(4096)
        assert pinger.skipped >= 2
        healthy["ok"] = True
        sock.settimeout(5.0)
        assert recv_lines(sock) == ["WATCHDOG=1"]
    finally:
        t0 = time.monotonic()
        pinger.stop()
        stopped_in = time.monotonic() - t0
    assert stopped_in < 0.5 and not pinger.running


def test_a_separate_process_answers_the_protocol(tmp_path: Path) -> None:
    """What systemd sees: datagrams on the socket whose sender (SCM_CREDENTIALS) is the
    service's main process, READY=1 first, then WATCHDOG=1 at WATCHDOG_USEC/2, then STOPPING=1."""
    path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_PASSCRED, 1)
    sock.settimeout(10.0)
    script = textwrap.dedent(
        """
        import time
        from collectors.common.sdnotify import Notifier, WatchdogPinger
        n = Notifier()
        n.ready("up")
        p = WatchdogPinger(n)
        assert p.start()
        time.sleep(0.5)
        p.stop()
        n.stopping()
        """
    )
    env = dict(os.environ, NOTIFY_SOCKET=str(path), WATCHDOG_USEC="200000", PYTHONPATH=str(REPO))
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env)
    try:
        got: list[tuple[str, int]] = []
        creds_size = struct.calcsize("3i")
        while not got or got[-1][0] != "STOPPING=1":
            msg, ancdata, _flags, _addr = sock.recvmsg(4096, socket.CMSG_SPACE(creds_size))
            pid = None
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_CREDENTIALS:
                    pid, _uid, _gid = struct.unpack("3i", data[:creds_size])
            got.append((msg.decode(), pid))
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        sock.close()
    assert got[0] == ("READY=1\nSTATUS=up", proc.pid)
    pings = [m for m, _ in got if m == "WATCHDOG=1"]
    assert 3 <= len(pings) <= 8, got  # 0.5 s at one ping per 0.1 s
    assert all(pid == proc.pid for _, pid in got), "every datagram must come from the main pid (NotifyAccess=main)"
    assert got[-1][0] == "STOPPING=1"
