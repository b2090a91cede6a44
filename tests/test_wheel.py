"""The wheel installs under the project's own name, carries what the services need, and installs quietly.

Builds the wheel from this checkout (``python -m build --wheel --no-isolation``: the environment's
setuptools, no download), checks the build says nothing deprecated about our packaging, installs
``treemetry`` from it (no extras: the base install runs the CLI and the services) into a fresh venv and runs
the services' commands there, outside any checkout: ``telemetry dashboards push`` must find the dashboards in
the installed package. The distribution is ``treemetry``: on the package index, ``telemetry`` is someone
else's project, so an install line naming it would fetch that.

Needs the package registry for the fresh venv's dependencies (marked ``network``; deselect with
``-m "not network"`` on a machine without one).
"""

from __future__ import annotations

import json
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from bounded_run import run

REPO = Path(__file__).resolve().parents[1]
SYSTEMD = {"telemetry-agent.service", "telemetry-collector@.service", "telemetry.sysusers.conf", "agent.toml",
           "agent.env", "collector-example.toml"}

pytestmark = [pytest.mark.network, pytest.mark.timeout(300)]


def _run(cmd: list, cwd: Path, timeout: float = 240) -> str:
    done = run(cmd, timeout, cwd=cwd)  # past the time-out, the build's compilers are killed with it
    assert done.returncode == 0, f"{cmd}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout + done.stderr


class _Service(subprocess.Popen):
    ready: dict


def _ready(cmd: list, cwd: Path) -> _Service:
    """Start a service; return it once it printed its JSON ready line."""
    service = _Service([str(c) for c in cmd], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = service.stdout.readline() if service.stdout else ""
    if not line.startswith("{"):
        service.kill()
        raise AssertionError(f"{cmd} printed {line!r}:\n{service.communicate()[1][-3000:]}")
    service.ready = json.loads(line)
    return service


def test_wheel_installs_the_services_with_their_data(tmp_path: Path) -> None:
    pytest.importorskip("build")
    out = tmp_path / "dist"
    log = _run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", out, REPO], cwd=tmp_path)
    assert "deprecat" not in log.lower(), log  # e.g. SetuptoolsDeprecationWarning for a TOML license table
    (wheel,) = out.glob("*.whl")
    assert wheel.name.startswith("treemetry-"), wheel.name
    # The compiled summary hot path travels in the wheel (a platform wheel: no compiler where it is installed).
    with zipfile.ZipFile(wheel) as whl:
        assert any(n.startswith("telemetry/summary/_native") and n.endswith(".so") for n in whl.namelist())
    assert "-py3-none-any" not in wheel.name, wheel.name

    env = tmp_path / "venv"
    venv.create(env, with_pip=False)  # the outer pip installs into it: quicker than bootstrapping one
    python = env / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--disable-pip-version-check",
          wheel], cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"  # no checkout on the path: everything comes from the installed package
    elsewhere.mkdir()
    dry = _run([env / "bin" / "telemetry", "dashboards", "push", "--dry-run"], cwd=elsewhere)
    assert "would push dashboard telemetry-training-run" in dry and str(env) in dry, dry
    assert "watch" in _run([env / "bin" / "telemetry", "--help"], cwd=elsewhere)
    for command in ("agent", "collector", "watch", "demo", "doctor"):
        assert "Usage:" in _run([env / "bin" / "telemetry", command, "--help"], cwd=elsewhere), command
    # The deployment files come with the package (docs/deploy.md).
    assert "kind: DaemonSet" in _run([env / "bin" / "telemetry", "deploy", "--print", "kubernetes"], cwd=elsewhere)
    assert "[Service]" in _run([env / "bin" / "telemetry", "deploy", "--print", "systemd"], cwd=elsewhere)
    # The services themselves start from the base install (their imports run only once they start).
    root = _ready([env / "bin" / "telemetry", "collector", "--listen", "127.0.0.1:0", "--api", "127.0.0.1:0",
                   "--db", tmp_path / "root.db"], elsewhere)
    agent = _ready([env / "bin" / "telemetry", "agent", "--socket", tmp_path / "agent.sock", "--no-gpu-probe",
                    "--parent", root.ready["address"]], elsewhere)
    for service in (agent, root):
        service.terminate()
        assert service.wait(timeout=30) == 0, service.stderr.read() if service.stderr else ""
    assert "telemetry 0.1.0 (the package: pip install treemetry)" in _run([env / "bin" / "treemetry", "--version"], cwd=elsewhere)
    shown = _run([sys.executable, "-m", "pip", "--python", python, "show", "treemetry"], cwd=elsewhere)
    assert "Name: treemetry" in shown, shown
    native = _run([python, "-c", "from telemetry.summary import _native; print(_native.__file__)"], cwd=elsewhere)
    assert native.strip().startswith(str(env)), native
    where = _run([python, "-c", "import collectors, pathlib; print(pathlib.Path(collectors.__file__).parent)"],
                 cwd=elsewhere).strip()
    assert where.startswith(str(env)), where
    assert {p.name for p in (Path(where) / "systemd").iterdir()} >= SYSTEMD
