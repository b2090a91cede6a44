"""`telemetry doctor` (issue 23 §2): checks a node the way a rank's values travel and names what to fix.

Against real services: an agent and a root in this process, the doctor as its own process (what a user runs).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from collectors.doctor import FAIL, OK, WARN, check_nvml, check_socket
from collectors.probes.gpu import open_gpu_probe
from helpers_tree import dead_address, make_agent, make_root, stop_all
from nvml_double import FakeNvml


def _doctor(*args: str, env: dict | None = None) -> tuple[int, dict[str, list[dict]]]:
    done = subprocess.run([sys.executable, "-m", "collectors.cli", "doctor", "--json", "--no-nvml", *args],
                          capture_output=True, text=True, timeout=60, env=env)
    by_check: dict[str, list[dict]] = {}
    for finding in json.loads(done.stdout):
        by_check.setdefault(finding["check"], []).append(finding)
    return done.returncode, by_check


@pytest.fixture
def tree(tmp_path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "agent.sock", "agent-0")
    yield root, agent, tmp_path / "agent.sock"
    stop_all(agent, root)


def test_a_healthy_node_passes(tree, tmp_path):
    root, _, sock = tree
    config = tmp_path / "agent.toml"
    config.write_text(f'parents = ["{root.address}"]\nsocket_path = "{sock}"\n')
    code, found = _doctor("--agent", f"unix:{sock}", "--config", str(config), "--root-api", root.api_address)
    assert code == 0, found
    for check in ("agent address", "agent socket", "agent", "parent"):
        assert [f["status"] for f in found[check]] == [OK], found[check]
    assert root.address in found["parent"][0]["detail"]
    assert any("from the root's clock" in f["detail"] for f in found["clock"]), found["clock"]


def test_no_agent_fails_naming_the_socket(tmp_path):
    sock = tmp_path / "agent.sock"
    env = {"PATH": "/usr/bin:/bin", "TELEMETRY_AGENT": f"unix:{sock}"}
    code, found = _doctor("--parent", dead_address(), "--timeout", "0.5", env=env)
    assert code == 1
    assert "TELEMETRY_AGENT" in found["agent address"][0]["detail"]
    (socket_finding,) = found["agent socket"]
    assert socket_finding["status"] == FAIL and f"no socket at {sock}" in socket_finding["detail"]
    assert [f["status"] for f in found["parent"]] == [FAIL, FAIL], found["parent"]


def test_a_malformed_agent_address_is_a_failure_saying_so():
    code, found = _doctor("--agent", "localhost")
    assert code == 1 and found["agent address"][0]["status"] == FAIL
    assert "HOST:PORT" in found["agent address"][0]["detail"]


def test_a_dead_parent_fails(tree):
    _, _, sock = tree
    parent = dead_address()
    code, found = _doctor("--agent", f"unix:{sock}", "--parent", parent, "--timeout", "0.5")
    assert code == 1 and found["agent"][0]["status"] == OK
    assert found["parent"][0]["status"] == FAIL and parent in found["parent"][0]["detail"]


def test_a_file_that_is_no_socket_fails(tmp_path):
    path = tmp_path / "agent.sock"
    path.write_text("")
    (finding,) = check_socket(f"unix:{path}")
    assert finding.status == FAIL and "not a socket" in finding.detail


def test_nvml_counts_the_gpus_and_reads_a_sample():
    finding = check_nvml(lambda log: open_gpu_probe(log, nvml=FakeNvml(gpus=2), events=False))
    assert finding.status == OK and finding.detail.startswith("2 GPU(s)"), finding


def test_no_nvml_is_a_warning_not_a_failure():
    finding = check_nvml(lambda log: open_gpu_probe(log, nvml=_NoDriver(), events=False))
    assert finding.status == WARN and "NVML could not initialise" in finding.detail, finding


class _NoDriver:
    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")
