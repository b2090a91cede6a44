"""The root's HTTP API under hostile clients (issue 26 item 4): a deadline for the whole request, connection
limits per client, workers taken only once a request has arrived and apart for /metrics, JSON depth limits,
short bodies, and no service started with an empty token. Real root (HTTP server), real sockets; the token
cases run `telemetry collector` / `telemetry agent` as processes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

import collectors.root.api as api_module
from collectors.root.api import MAX_WORKERS, PER_CLIENT_CONNECTIONS
from helpers_tree import make_root, stop_all, wait_for

pytestmark = pytest.mark.timeout(90)
DEADLINE_S = 2.0


@pytest.fixture()
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(api_module, "REQUEST_DEADLINE_S", DEADLINE_S)  # the default 10 s, shortened for the test
    server = make_root(tmp_path / "root.db")
    yield server
    stop_all(server)


def _status(url: str, data: bytes | None = None) -> int:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data), timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _connect(address: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10, source_address=(source, 0))


def _raw(address: str, request: bytes, half_close: bool = False) -> tuple[int, float]:
    """Send raw bytes; (the answer's status, or 0 when closed without one; seconds until then)."""
    started = time.monotonic()
    with _connect(address) as sock:
        sock.sendall(request)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    return status, time.monotonic() - started


def test_clients_trickling_their_headers_hold_no_worker_and_are_cut_at_the_deadline(root) -> None:
    api = root.api_address
    stop = threading.Event()
    closed_after: list[float] = []

    def trickle() -> None:
        started = time.monotonic()
        with _connect(api) as sock:
            sock.sendall(b"GET /api/v1/jobs HTTP/1.1\r\nHost: x\r\n")
            try:
                while not stop.is_set():
                    sock.sendall(b"X")  # one header byte at a time, never the end of the headers
                    if stop.wait(0.3):
                        break
            except OSError:  # the server closed it
                closed_after.append(time.monotonic() - started)
    slow = [threading.Thread(target=trickle, daemon=True) for _ in range(MAX_WORKERS + 8)]  # more than workers
    for thread in slow:
        thread.start()
    try:
        time.sleep(0.5)
        # Before: every worker held by a trickler, 60/60 legitimate requests and scrapes answered 503.
        answers = [_status(f"http://{api}{path}") for _ in range(10)
                   for path in ("/api/v1/jobs", "/metrics", "/healthz")]
        assert answers == [200] * 30, answers
        wait_for(lambda: len(closed_after) == len(slow), DEADLINE_S + 10, what="every trickler cut")
        assert max(closed_after) < DEADLINE_S + 5, closed_after
    finally:
        stop.set()
        for thread in slow:
            thread.join(10)


def test_connections_past_the_per_client_cap_are_refused_and_other_clients_are_served(root) -> None:
    api = root.api_address
    idle = []
    try:
        for _ in range(PER_CLIENT_CONNECTIONS + 8):
            idle.append(_connect(api, source="127.0.0.2"))  # one client: loopback address 127.0.0.2
        wait_for(lambda: root.api_server.refused >= 8, 15, what="the connections past the cap refused")
        time.sleep(0.2)
        refused = 0
        for sock in idle:
            try:
                refused += sock.recv(100, socket.MSG_DONTWAIT).startswith(b"HTTP/1.1 503")
            except BlockingIOError:  # admitted: waiting for its request
                pass
        assert refused == 8 and root.api_server.refused == 8, (refused, root.api_server.refused)
        assert [_status(f"http://{api}/api/v1/jobs") for _ in range(5)] == [200] * 5  # another client
    finally:
        for sock in idle:
            sock.close()


def test_behind_a_proxy_the_per_client_cap_is_raised_to_the_total(tmp_path: Path) -> None:
    """Behind a reverse proxy or NAT every client is one address (the proxy's): --api-client-connections 128
    admits 40 connections from it, which the default 32 would cut (the proxy limits its own clients)."""
    server = make_root(tmp_path / "root.db", api_client_connections=128)
    idle = []
    try:
        for _ in range(PER_CLIENT_CONNECTIONS + 8):
            idle.append(_connect(server.api_address, source="127.0.0.2"))
        assert [_status(f"http://{server.api_address}/api/v1/jobs") for _ in range(3)] == [200] * 3
        time.sleep(0.2)
        assert server.api_server.refused == 0
    finally:
        for sock in idle:
            sock.close()
        stop_all(server)
    for bad in ("0", "129"):
        assert _service(tmp_path, "collector", "--api-client-connections", bad).returncode == 2


def test_deep_or_short_bodies_are_400_or_408_never_500(root) -> None:
    api = root.api_address
    url = f"http://{api}/api/v1/jobs/x/forensics"
    assert _status(url, b"[" * 30_000 + b"]" * 30_000) == 400
    assert _status(url, b'{"ranks": ' + b"[" * 40 + b"]" * 40 + b"}") == 400
    assert _status(url, b'{"ranks": "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["}') == 400  # brackets in a string
    head = b"POST /api/v1/jobs/x/forensics HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n"
    assert _raw(api, head + b'{"ranks": [1]}', half_close=True)[0] == 400   # shorter, and the client is done
    status, seconds = _raw(api, head + b'{"ranks": [1]}')                    # shorter, and the client waits
    assert status == 408 and seconds < DEADLINE_S + 5, (status, seconds)


def _service(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "collectors.cli", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})}, cwd=tmp_path)


@pytest.mark.parametrize("case", ["collector_token_file", "api_token_file", "api_token_env", "token_env",
                                  "agent_parent_token_file"])
def test_an_empty_or_whitespace_token_refuses_to_start(tmp_path: Path, case: str) -> None:
    empty = tmp_path / "token"
    empty.write_text(" \n" if case == "api_token_file" else "")
    root = ("collector", "--listen", "127.0.0.1:0", "--db", str(tmp_path / "r.db"), "--api", "127.0.0.1:0")
    found = {
        "collector_token_file": lambda: _service(tmp_path, *root, "--token-file", str(empty)),
        "api_token_file": lambda: _service(tmp_path, *root, "--api-token-file", str(empty)),
        "api_token_env": lambda: _service(tmp_path, *root, env={"TELEMETRY_API_TOKEN": ""}),
        "token_env": lambda: _service(tmp_path, *root, env={"TELEMETRY_TOKEN": "  "}),
        "agent_parent_token_file": lambda: _service(tmp_path, "agent", "--socket", str(tmp_path / "a.sock"),
                                                    "--parent", "unix:" + str(tmp_path / "p.sock"),
                                                    "--parent-token-file", str(empty)),
    }[case]()
    assert found.returncode == 2, (found.returncode, found.stdout, found.stderr[-2000:])
    assert "refusing to start without authentication" in found.stderr, found.stderr[-2000:]
    assert not found.stdout.strip() or "ready" not in json.loads(found.stdout.splitlines()[0])


def test_serve_refuses_an_empty_token(root) -> None:
    with pytest.raises(ValueError, match="empty"):
        api_module.serve(root.api, "127.0.0.1", 0, token=" ")
