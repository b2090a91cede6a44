"""The node agent's address as the SDK is given it: checked when a Run starts, explained when nothing answers.

A mistyped address used to fail silently: gRPC takes `localhost` (no port) or `/run/telemetry/agent.sock` (no
`unix:`) as a name it will keep trying to resolve, and every value logged went nowhere. `check_address` refuses
such an address at `telemetry.init()` with what to write instead; `why_unreachable` says, for the warning the
sender logs, what is wrong with an address that is well formed but does not answer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

#: gRPC name schemes passed through as they are (grpc's naming.md): the user chose the resolver.
_SCHEMES = ("dns:", "ipv4:", "ipv6:", "unix-abstract:", "vsock:")
_HOST_PORT = re.compile(r"(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):(?P<port>[0-9]{1,5})")
EXAMPLES = "unix:/run/telemetry/agent.sock or 127.0.0.1:7400"


def check_address(address: str, source: str) -> str:
    """`address` if it is one the SDK can connect to, else ValueError naming `source` (where it came from, e.g.
    "TELEMETRY_AGENT") and the fix."""
    given = f"{source}={address!r}"
    if not address.strip() or address != address.strip():
        raise ValueError(f"{given}: an agent address must not be empty or padded with spaces ({EXAMPLES})")
    if address.startswith("unix:"):
        path = address[len("unix:"):]
        if path.startswith("//"):
            path = path[2:]  # unix:///abs/path is the URI form of unix:/abs/path
            if not path.startswith("/"):
                raise ValueError(f"{given}: unix:// takes an absolute path after it (unix:///run/...); "
                                 f"or write unix:/path")
        if not path:
            raise ValueError(f"{given}: no socket path after unix: ({EXAMPLES})")
        return address
    if address.startswith(_SCHEMES):
        return address
    if address.startswith(("/", "./", "~")) or address.endswith(".sock"):
        raise ValueError(f"{given} looks like a socket path: write unix:{address} (gRPC would take it for a host "
                         f"name and never connect)")
    match = _HOST_PORT.fullmatch(address)
    if match is None:
        hint = f"; add the port the agent's --tcp listens on, e.g. {address}:7400" if ":" not in address else ""
        raise ValueError(f"{given} is neither HOST:PORT nor unix:PATH ({EXAMPLES}){hint}")
    if not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"{given}: port {match['port']} is not in 1-65535")
    return address


def socket_path(address: str) -> Path | None:
    """The filesystem path of a unix: address, else None."""
    if not address.startswith("unix:"):
        return None
    path = address[len("unix:"):]
    return Path(path[2:] if path.startswith("//") else path)


def why_unreachable(address: str) -> str:
    """What can be seen from here about why the agent at `address` does not answer, and what to do."""
    path = socket_path(address)
    if path is None:
        return (f"nothing answers at {address}: start the node agent there (telemetry agent --tcp {address} ...), "
                f"or point TELEMETRY_AGENT at the one that runs")
    if not path.exists():
        return (f"no socket at {path}: is the node agent running on this host (systemctl status telemetry-agent; "
                f"telemetry agent --socket {path} ...)? If it listens elsewhere, set TELEMETRY_AGENT=unix:PATH")
    if not os.access(path, os.R_OK | os.W_OK):
        return (f"{path} exists but this user (uid {os.getuid()}) may not connect to it: add the user to the "
                f"socket's group (ls -l {path}; the systemd unit's is 'telemetry') or run the agent with "
                f"--allowed-uids")
    return f"{path} exists but nothing accepts on it: the agent that made it has stopped (telemetry doctor)"
