"""Asking the tree for a host's index in the fleet (issue 28, docs/fleet.md "Host indexes").

An agent calls `Collector.RegisterHost` on its parent; a collector passes the call to its own parent (`ask`), so
that it reaches the root, which hands indexes out (collectors/root/host_indexes.py). Registrations are rare (one
per agent start), so collectors relay them rather than lease blocks of indexes: one table at the root is the one
place an index can be held, and nothing has to be reconciled after a partition.
"""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path

import grpc

from collectors.common.transport import Security, call_metadata, make_channel
from telemetry.v1 import forward_pb2, forward_pb2_grpc

log = logging.getLogger(__name__)

MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
MAX_ID = 128
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


def read_instance_id(path: str | Path, needed: bool = True) -> str:
    """This agent installation's id: a random id written once at `path` and read back at every start, "" when the
    file can be neither read nor written (logged). It tells two machines of one host name apart where their machine
    ids cannot (no /etc/machine-id, as in some containers; one cloned with an image), and stays the same across agent
    restarts (and reboots), so that a restarted agent is the same claimant. Not the kernel's boot_id: that changes
    at every reboot (the host would then be refused as another machine) and is shared by containers on one kernel.
    Written to a temporary file and linked into place, so a reader never sees half an id, and two agents sharing
    the file both end with the one that was linked first. A file that cannot be used is a warning when the id is
    `needed` (the machine has no machine id), else a note (a read-only container with the node's machine id)."""
    path = Path(path)
    say = log.warning if needed else log.info
    for _ in range(2):
        try:
            text = path.read_text().strip()[:MAX_ID]
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            say("cannot read the agent id file %s (%s): this machine cannot be told apart from another "
                        "under the same --host-id where their machine ids cannot", path, exc)
            return ""
        if text and text.isprintable():
            return text
        if text:
            say("the agent id file %s does not hold a usable id: not used", path)
            return ""
        made = uuid.uuid4().hex
        temporary = path.with_name(f".{path.name}.{os.getpid()}.{made[:8]}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary.write_text(made + "\n")
            try:
                os.link(temporary, path)
            except FileExistsError:
                continue  # another agent linked its id first: read that one
            finally:
                temporary.unlink(missing_ok=True)
        except OSError as exc:
            say("cannot write the agent id file %s (%s): this machine cannot be told apart from another "
                        "under the same --host-id where their machine ids cannot (give --id-file a writable path)",
                        path, exc)
            return ""
        log.info("this agent's installation id is %s (written to %s; keep the file across restarts)", made, path)
        return made
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
