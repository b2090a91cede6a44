"""Asking the tree for a host's index in the fleet (issue 28, docs/fleet.md "Host indexes").

An agent calls `Collector.RegisterHost` on its parent; a collector passes the call to its own parent (`ask`), so
that it reaches the root, which hands indexes out (collectors/root/host_indexes.py). Registrations are rare (one
per agent start), so collectors relay them rather than lease blocks of indexes: one table at the root is the one
place an index can be held, and nothing has to be reconciled after a partition.
"""

from __future__ import annotations

from pathlib import Path

import grpc

from collectors.common.transport import Security, call_metadata, make_channel
from telemetry.v1 import forward_pb2, forward_pb2_grpc

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
DEFAULT_CALL_TIMEOUT_S = 10.0


class NoParentAnswered(Exception):
    """No parent address answered a registration (unreachable, or not up yet): ask again later."""


def read_machine_id(paths: tuple[str, ...] = MACHINE_ID_FILES) -> str:
    """The machine's stable id (systemd's /etc/machine-id), "" when there is none (some containers)."""
    for path in paths:
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text:
            return text[:128]
    return ""


def ask(parents: list[str], security: Security | None, request: forward_pb2.HostRegistration,
        timeout_s: float = DEFAULT_CALL_TIMEOUT_S) -> forward_pb2.HostAssignment:
    """Ask each parent address in turn; the first answer wins (an answer may be a refusal). NoParentAnswered
    when none answered; a parent that does not know the call (an older version: UNIMPLEMENTED) is passed on as
    the grpc.RpcError."""
    problems = []
    for address in parents:
        channel = make_channel(address, security)
        try:
            stub = forward_pb2_grpc.CollectorStub(channel)
            return stub.RegisterHost(request, timeout=timeout_s, metadata=call_metadata(security))
        except grpc.RpcError as exc:
            if exc.code() in (grpc.StatusCode.UNIMPLEMENTED, grpc.StatusCode.UNAUTHENTICATED,
                              grpc.StatusCode.PERMISSION_DENIED):
                raise
            problems.append(f"{address}: {exc.code().name} {exc.details() or ''}".strip())
        finally:
            channel.close()
    raise NoParentAnswered("; ".join(problems) or "no parent address")
