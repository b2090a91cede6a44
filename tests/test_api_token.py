"""The root's HTTP API with a token (issue 14 item 5): every path but /healthz needs `Authorization: Bearer`,
401 otherwise; the token comes from a file (on the command line it works but is warned about), and a token
on a non-loopback API address (plain HTTP) is refused unless --allow-insecure-token. Real root processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

TOKEN = "api-s3cret"


def _get(api: str, path: str, token: str | None = None) -> tuple[int, dict, str]:
    """(HTTP status, WWW-Authenticate header, body) of a GET, with `token` as a bearer token when given."""
    request = urllib.request.Request(f"http://{api}{path}")
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, dict(reply.headers), reply.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read().decode()


def _root(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, "-m", "collectors.cli", "collector", "--listen", "127.0.0.1:0",
                             "--db", str(tmp_path / "r.db"), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line, proc.stderr.read()
    return proc, json.loads(line)


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory):
    """One root for the read-only requests below (each of them only GETs): one process start, not eight."""
    tmp_path = tmp_path_factory.mktemp("token-root")
    (tmp_path / "api.token").write_text(TOKEN + "\n")
    proc, ready = _root(tmp_path, "--api", "127.0.0.1:0", "--api-token-file", str(tmp_path / "api.token"))
    yield ready["api"]
    proc.terminate()
    assert proc.wait(10) == 0
    assert "visible to every user" not in proc.stderr.read()  # from a file: no warning


@pytest.mark.parametrize("path", ["/api/v1/jobs", "/api/v1/jobs/j/steps?metric=loss", "/api/v1/jobs/j/progress",
                                  "/api/v1/jobs/j/events", "/api/v1/events", "/metrics", "/no/such/path"])
def test_every_path_but_healthz_needs_the_token(root, path):
    for token in (None, "wrong", TOKEN + "x", ""):
        status, headers, body = _get(root, path, token)
        assert status == 401, (path, token, status)
        assert headers.get("WWW-Authenticate") == "Bearer"
        assert json.loads(body) == {"error": "missing or wrong bearer token"}
    status, _, _ = _get(root, path, TOKEN)
    assert status == (404 if path == "/no/such/path" else 200)


def test_healthz_stays_open(root):
    assert _get(root, "/healthz")[:1] == (200,)


def test_a_token_on_the_command_line_works_but_is_warned_about(tmp_path):
    proc, ready = _root(tmp_path, "--api", "127.0.0.1:0", "--api-token", TOKEN)
    try:
        assert _get(ready["api"], "/api/v1/jobs")[0] == 401
        assert _get(ready["api"], "/api/v1/jobs", TOKEN)[0] == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
    assert "--api-token on the command line is visible to every user of this host" in proc.stderr.read()


def test_a_token_on_a_non_loopback_api_is_refused_unless_allowed(tmp_path):
    (tmp_path / "t").write_text(TOKEN)
    refused = subprocess.run([sys.executable, "-m", "collectors.cli", "collector", "--listen", "127.0.0.1:0",
                              "--db", str(tmp_path / "r.db"), "--api", "0.0.0.0:0", "--api-token-file",
                              str(tmp_path / "t")], capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and "required by the HTTP API over plaintext TCP (0.0.0.0:0)" in refused.stderr
    proc, ready = _root(tmp_path, "--api", "0.0.0.0:0", "--api-token-file", str(tmp_path / "t"),
                        "--allow-insecure-token")
    try:
        port = ready["api"].rsplit(":", 1)[1]
        assert _get(f"127.0.0.1:{port}", "/api/v1/jobs", TOKEN)[0] == 200
    finally:
        proc.terminate()
        assert proc.wait(10) == 0
