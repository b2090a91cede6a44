"""The systemd units: hardening keys present (pure Python), and `systemd-analyze verify`.

`systemd-analyze verify` also checks that ExecStart's binary exists. The
telemetry CLI is not installed at /usr/local/bin/telemetry on a CI machine, so
the verify test runs against a temporary root (``--root``) holding the units,
a stub executable at that path, and a copy of this host's own system units
(for sysinit.target and friends). Nothing else about the units is changed.
Warnings (unknown keys, unparsable values) make verify print to stderr while
still exiting 0, so the test also requires an empty stderr.
"""

from __future__ import annotations

import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
UNITS = REPO / "collectors" / "systemd"
AGENT = UNITS / "telemetry-agent.service"
COLLECTOR = UNITS / "telemetry-collector@.service"


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """section -> key -> every value assigned (units may repeat a key)."""
    out: dict[str, dict[str, list[str]]] = {}
    section = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1]
            out.setdefault(section, {})
            continue
        assert section is not None, f"{path.name}: key outside a section: {line!r}"
        assert "=" in line, f"{path.name}: not KEY=VALUE: {line!r}"
        key, value = line.split("=", 1)
        out[section].setdefault(key.strip(), []).append(value.strip())
    return out


COMMON_HARDENING = {
    "Type": "notify",
    "Restart": "always",
    "ProtectSystem": "strict",
    "NoNewPrivileges": "yes",
    "PrivateTmp": "yes",
    "ProtectHome": "yes",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectControlGroups": "yes",
    "RestrictSUIDSGID": "yes",
    "DevicePolicy": "closed",
    "User": "telemetry",
}


@pytest.mark.parametrize("path", [AGENT, COLLECTOR], ids=lambda p: p.name)
def test_hardening_keys_present(path: Path) -> None:
    unit = parse_unit(path)
    svc = unit["Service"]
    for key, value in COMMON_HARDENING.items():
        assert svc.get(key) == [value], (path.name, key, svc.get(key))
    assert svc["WatchdogSec"] and svc["WatchdogSec"][0].rstrip("s").isdigit()
    assert svc["CapabilityBoundingSet"] == [""]
    assert any(v.startswith("-/etc/telemetry/") for v in svc["EnvironmentFile"])
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert "network-online.target" in unit["Unit"]["After"][0]


def test_agent_unit_specifics() -> None:
    svc = parse_unit(AGENT)["Service"]
    assert svc["ExecStart"] == ["/usr/local/bin/telemetry agent --config /etc/telemetry/agent.toml"]
    assert svc["RuntimeDirectory"] == ["telemetry"]
    assert "video" in svc["SupplementaryGroups"][0].split()
    allow = " ".join(svc["DeviceAllow"])
    assert "char-nvidia*" in allow and "/dev/nvidiactl" in allow
    assert "PrivateDevices" not in svc, "PrivateDevices would hide /dev/nvidia*"
    assert "ProtectProc" not in svc, "the agent reads the ranks' /proc/PID/stat"


def test_collector_unit_specifics() -> None:
    svc = parse_unit(COLLECTOR)["Service"]
    assert svc["ExecStart"] == ["/usr/local/bin/telemetry collector --config /etc/telemetry/collector-%i.toml"]
    assert svc["PrivateDevices"] == ["yes"]
    assert svc["StateDirectory"] == ["telemetry/collector-%i"]
    # Not "telemetry": stopping the agent on the same host would delete a shared /run/telemetry.
    assert svc["RuntimeDirectory"] == ["telemetry-collector-%i"]
    assert svc["WorkingDirectory"] == ["%S/telemetry/collector-%i"]  # ProtectSystem=strict: cwd / is read-only


def test_example_config_files_parse() -> None:
    agent = tomllib.loads((UNITS / "agent.toml").read_text())
    assert agent["socket_path"] == "/run/telemetry/agent.sock"  # inside RuntimeDirectory=telemetry
    assert agent["parents"]
    collector = tomllib.loads((UNITS / "collector-example.toml").read_text())
    assert collector["listen"] and not Path(collector["db"]).is_absolute()  # lands in WorkingDirectory
    for raw in (UNITS / "agent.env").read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#"):
            key, _, _value = line.partition("=")
            assert key.isidentifier() and key.upper() == key, line


@pytest.mark.parametrize(("command", "example"), [("agent", "agent.toml"), ("collector", "collector-example.toml")])
def test_example_configs_are_accepted_by_the_cli(command: str, example: str) -> None:
    """`telemetry <command> --config <example> --help`: the CLI rejects unknown keys before printing help."""
    click_testing = pytest.importorskip("click.testing")
    cli = pytest.importorskip("collectors.cli")
    if command not in getattr(cli.main, "commands", {}):
        pytest.skip(f"`telemetry {command}` is not in the CLI yet")
    result = click_testing.CliRunner().invoke(cli.main, [command, "--config", str(UNITS / example), "--help"])
    assert result.exit_code == 0, result.output


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (apt-get install systemd)")
def test_systemd_analyze_verify(tmp_path: Path) -> None:
    root = tmp_path / "root"
    system = root / "etc" / "systemd" / "system"
    system.mkdir(parents=True)
    for unit in (AGENT, COLLECTOR):
        shutil.copy(unit, system / unit.name)
    stub = root / "usr" / "local" / "bin" / "telemetry"
    stub.parent.mkdir(parents=True)
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    host_units = next(
        (p for p in (Path("/usr/lib/systemd/system"), Path("/lib/systemd/system")) if (p / "sysinit.target").exists()),
        None,
    )
    assert host_units is not None, "systemd-analyze is installed but the host has no system units to verify against"
    shutil.copytree(host_units, root / "usr" / "lib" / "systemd" / "system", symlinks=True)
    proc = subprocess.run(
        [
            "systemd-analyze",
            "verify",
            f"--root={root}",
            "telemetry-agent.service",
            "telemetry-collector@rack07.service",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.strip() == "", proc.stderr
    assert proc.stdout.strip() == "", proc.stdout


@pytest.mark.skipif(shutil.which("systemd-sysusers") is None, reason="systemd-sysusers is not installed")
def test_sysusers_entry(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    conf = UNITS / "telemetry.sysusers.conf"
    proc = subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", str(conf)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    passwd = (tmp_path / "etc" / "passwd").read_text()
    assert passwd.startswith("telemetry:x:") and passwd.rstrip().endswith(":/var/lib/telemetry:/usr/sbin/nologin")
