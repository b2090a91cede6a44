"""Defaults from the environment torchrun sets, and where the node agent listens."""

from __future__ import annotations

import os
from pathlib import Path
from typing import overload

from telemetry.sdk.address import check_address

SYSTEM_SOCKET = Path("/run/telemetry/agent.sock")
AGENT_ENV = "TELEMETRY_AGENT"


def default_socket() -> Path:
    """/run/telemetry/agent.sock where /run/telemetry is usable (systemd's RuntimeDirectory), else a per-user path."""
    run_dir = SYSTEM_SOCKET.parent
    if os.access(run_dir, os.W_OK) or (not run_dir.exists() and os.access(run_dir.parent, os.W_OK)):
        return SYSTEM_SOCKET
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "telemetry" / "agent.sock" if runtime else Path(f"/tmp/telemetry-{os.getuid()}/agent.sock")


def default_agent() -> str:
    """TELEMETRY_AGENT (a gRPC address, e.g. unix:/path or 127.0.0.1:PORT; a malformed one is a ValueError),
    else the default socket."""
    given = os.environ.get(AGENT_ENV)
    return check_address(given, AGENT_ENV) if given else f"unix:{default_socket()}"


@overload
def env_int(name: str, default: int) -> int: ...
@overload
def env_int(name: str, default: None) -> int | None: ...
def env_int(name: str, default: int | None) -> int | None:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not an integer") from None
