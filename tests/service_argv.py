"""The command line of each service as the signal tests (tests/test_service_signals.py) and bench/stop_time.py start
it: a root, a rack under `parent`, an agent under `parent` without hardware probes; every file in `workdir`."""

from __future__ import annotations

from pathlib import Path


def service_argv(service: str, workdir: Path, parent: str | None) -> list[str]:
    """`telemetry`'s arguments for `service` ("root", "rack" or "agent"); a rack and an agent need `parent`."""
    if service == "root":
        return ["collector", "--listen", "127.0.0.1:0", "--db", str(workdir / "root.db"), "--api", "127.0.0.1:0"]
    assert parent is not None
    if service == "rack":
        return ["collector", "--listen", "127.0.0.1:0", "--parent", parent, "--id", f"rack-{workdir.name}"]
    return ["agent", "--socket", str(workdir / "a.sock"), "--parent", parent, "--no-gpu-probe", "--no-nic-probe",
            "--id", f"agent-{workdir.name}", "--host-id", workdir.name]
