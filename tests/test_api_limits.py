"""The root's HTTP API under careless and hostile clients (issue 14): bounded workers, timeouts, no leaked
SQLite connections, generic error bodies, range-checked parameters."""

from __future__ import annotations

import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from collectors.root.api import MAX_WORKERS
from helpers_tree import api_get, make_root, stop_all, wait_for


@pytest.fixture()
def root(tmp_path: Path):
    server = make_root(tmp_path / "root.db")
    yield server
    stop_all(server)


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_json_requests_leak_no_sqlite_connections(root) -> None:
    for _ in range(20):
        api_get(root.api_address, "/api/v1/jobs")
    before = _fds()
    for _ in range(300):
        assert api_get(root.api_address, "/api/v1/jobs/x/steps?metric=loss")[0] == 200
        assert api_get(root.api_address, "/api/v1/jobs/x/progress")[0] == 200
    assert _fds() - before < 20, "every request's reader connection is closed, not left to the GC"


def test_out_of_range_parameters_are_400_not_500(root) -> None:
    status, body = api_get(root.api_address, f"/api/v1/jobs/x/events?since_id={2**70}")
    assert status == 400 and "since_id" in body["error"]
    assert api_get(root.api_address, "/api/v1/jobs/x/steps?last=0")[0] == 400


def test_an_internal_error_answers_500_without_its_details(root, monkeypatch) -> None:
    def broken() -> list:
        raise RuntimeError("secret path /var/lib/telemetry/root.db")

    monkeypatch.setattr(root.store, "reader", broken)
    status, body = api_get(root.api_address, "/api/v1/jobs")
    assert status == 500 and body == {"error": "internal error (logged by the root)"}


def test_idle_connections_cannot_take_every_thread_and_the_api_recovers(root) -> None:
    host, port = root.api_address.rsplit(":", 1)
    idle = []
    try:
        for _ in range(MAX_WORKERS + 40):
            idle.append(socket.create_connection((host, int(port)), timeout=5))
        time.sleep(0.5)
        start = time.monotonic()
        try:
            status = urllib.request.urlopen(f"http://{root.api_address}/healthz", timeout=5).status
        except urllib.error.HTTPError as exc:
            status = exc.code
        assert status in (200, 503) and time.monotonic() - start < 5, "answered at once, not queued"
        assert root.api_server.refused > 0
    finally:
        for sock in idle:
            sock.close()
    assert wait_for(lambda: api_get(root.api_address, "/healthz")[0] == 200, timeout=15, what="the API back")
