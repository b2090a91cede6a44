"""Who is on the other end of a rank stream: the kernel's SO_PEERCRED for the agent's Unix socket (DESIGN §7).

grpcio gives a servicer no way to the socket under a call: for a Unix socket `context.peer()` is just
"unix:" and `context.auth_context()` holds only the transport type (grpc/grpc#15511, #28755). So grpc
does not accept on the ranks' socket itself. `PeerRelay` does: for each connection it reads SO_PEERCRED
(pid, uid, gid of the process that connected, recorded by the kernel at connect time, not claimed by
anyone), then opens a connection of its own to grpc's socket, which lives in a private directory (0700)
nobody else can reach, and copies bytes both ways. Its side of that connection binds an unguessable
abstract-namespace name, which grpc reports as the call's peer ("unix-abstract:NAME"): `credentials(peer)`
maps it back to the credentials of the connection the call came in on.

`PeerCheck` is what the agent does with them at a rank's hello: the peer's uid must be allowed (this
process's own, root's, and --allowed-uids), and the pid the hello claims must be the peer's own or one of
its descendants (a launcher that connects for its child), found by walking /proc/PID/stat's parent chain.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from collectors.common.validation import BadInput

log = logging.getLogger(__name__)

MAX_ANCESTRY = 64  # parent links walked from a claimed pid looking for the peer (process trees are shallow)
_UCRED = struct.Struct("3i")  # struct ucred: pid, uid, gid


@dataclass(frozen=True)
class PeerCred:
    pid: int
    uid: int
    gid: int


def parent_pid(pid: int) -> int | None:
    """The parent of `pid` from /proc/PID/stat (None: gone, or not visible to this process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2:].split()  # after "pid (comm) ": the comm may hold spaces and ")"
    return int(fields[1]) if len(fields) > 1 else None


def descends_from(pid: int, ancestor: int) -> bool:
    """`pid` is `ancestor` or one of its descendants, within MAX_ANCESTRY parent links."""
    for _ in range(MAX_ANCESTRY):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        parent = parent_pid(pid)
        if parent is None:
            return False
        pid = parent
    return False


class PeerCheck:
    """The rule a rank's hello must pass (see the module docstring); raises BadInput("PERMISSION_DENIED")."""

    def __init__(self, relay: PeerRelay | None, allowed_uids: frozenset[int]) -> None:
        self.relay = relay
        self.allowed_uids = allowed_uids

    def check(self, peer: str, claimed_pid: int) -> None:
        if peer.startswith(("ipv4:", "ipv6:")):
            return  # the opt-in loopback TCP listener (--tcp): TCP carries no peer credentials
        cred = self.relay.credentials(peer) if self.relay is not None else None
        if cred is None:
            raise BadInput("PERMISSION_DENIED", f"no peer credentials for this connection ({peer[:80]!r}): ranks "
                                                "must connect through the agent's socket (--socket)")
        if cred.uid not in self.allowed_uids:
            raise BadInput("PERMISSION_DENIED", f"the connecting process (pid {cred.pid}) runs as uid {cred.uid}, "
                                                f"which may not send to this agent (allowed: "
                                                f"{sorted(self.allowed_uids)}; widen with --allowed-uids)")
        if not descends_from(claimed_pid, cred.pid):
            raise BadInput("PERMISSION_DENIED", f"the hello claims pid {claimed_pid}, but the connection is pid "
                                                f"{cred.pid}'s and pid {claimed_pid} is neither it nor its "
                                                "descendant")


def default_uids(extra: tuple[int, ...] = ()) -> frozenset[int]:
    """The uids allowed by default (this process's and root's), and `extra`."""
    return frozenset({os.getuid(), 0, *extra})


class _Half(asyncio.Protocol):
    """One side of a relayed connection: what it reads goes to its twin; back-pressure is passed across."""

    def __init__(self, relay: PeerRelay) -> None:
        self.relay = relay
        self.transport: asyncio.Transport | None = None
        self.twin: _Half | None = None
        self.name: str | None = None  # the grpc-facing half's abstract name, while registered

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A Unix stream server's transport (loop.create_unix_server): a full Transport, read and write.
        self.transport = cast(asyncio.Transport, transport)
        self.relay.halves.add(self)

    def data_received(self, data: bytes) -> None:
        if self.twin is not None and self.twin.transport is not None:
            self.twin.transport.write(data)

    def pause_writing(self) -> None:  # our write buffer is full: stop reading what fills it
        if self.twin is not None and self.twin.transport is not None:
            self.twin.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.twin is not None and self.twin.transport is not None:
            self.twin.transport.resume_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self.relay.halves.discard(self)
        if self.name is not None:
            self.relay.forget(self.name)
        if self.twin is not None and self.twin.transport is not None:
            self.twin.transport.close()


class _Outer(_Half):
    """A rank's connection to the public socket: its credentials read, then paired with one to grpc."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        cast(asyncio.Transport, transport).pause_reading()  # until the grpc side is connected (cast: as above)
        sock = transport.get_extra_info("socket")
        pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
        self.relay.opened(self, PeerCred(pid, uid, gid))


class PeerRelay:
    """The ranks' Unix socket, relayed to grpc's private one with each connection's credentials noted.

    Runs its own event loop thread: the bytes it copies never wait behind the grpc server's loop.
    """

    def __init__(self, public: Path) -> None:
        self.public = public
        self._dir = tempfile.mkdtemp(prefix="telemetry-agent-")  # mode 0700: only this user reaches grpc's socket
        self.inner = Path(self._dir) / "grpc.sock"
        self._creds: dict[str, PeerCred] = {}
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="agent-peer-relay", daemon=True)
        self._server: asyncio.AbstractServer | None = None
        self.halves: set[_Half] = set()  # open connections, both sides (touched on the relay's loop only)

    @property
    def grpc_address(self) -> str:
        return f"unix:{self.inner}"

    def start(self) -> None:
        """Listen on the public socket (call after grpc listens on `grpc_address`)."""
        self._thread.start()

        async def listen() -> asyncio.AbstractServer:
            return await self._loop.create_unix_server(lambda: _Outer(self), str(self.public))
        self._server = asyncio.run_coroutine_threadsafe(listen(), self._loop).result(10)

    def credentials(self, peer: str) -> PeerCred | None:
        """The credentials of the connection grpc names `peer` ("unix-abstract:NAME"), while it is open."""
        name = peer.removeprefix("unix-abstract:")
        if name == peer:
            return None
        with self._lock:
            return self._creds.get(name)

    def opened(self, outer: _Outer, cred: PeerCred) -> None:
        self._loop.create_task(self._pair(outer, cred))

    async def _pair(self, outer: _Outer, cred: PeerCred) -> None:
        inner = _Half(self)
        sock: socket.socket | None = None
        try:
            sock, name = self._bound_socket()
            with self._lock:
                self._creds[name] = cred
            inner.name = name
            await self._loop.sock_connect(sock, str(self.inner))
            await self._loop.create_unix_connection(lambda: inner, sock=sock)
        except OSError as exc:
            log.warning("could not relay a rank connection (pid %d) to the agent's gRPC socket: %s", cred.pid, exc)
            if sock is not None and inner.transport is None:
                sock.close()
            if inner.name is not None:
                self.forget(inner.name)
            if outer.transport is not None:
                outer.transport.close()
            return
        outer.twin, inner.twin = inner, outer
        if outer.transport is None or outer.transport.is_closing():
            assert inner.transport is not None
            inner.transport.close()  # the rank went away while we connected
            return
        outer.transport.resume_reading()

    def _bound_socket(self) -> tuple[socket.socket, str]:
        """A socket bound to a fresh abstract name (what grpc will report as this connection's peer)."""
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        name = f"telemetry-agent-{os.getpid()}-{secrets.token_hex(12)}"
        try:
            sock.bind(f"\0{name}")
        except OSError:
            sock.close()
            raise
        return sock, name

    def forget(self, name: str) -> None:
        with self._lock:
            self._creds.pop(name, None)

    def stop(self, timeout: float = 2.0) -> None:
        async def close() -> None:
            if self._server is not None:
                self._server.close()
            for half in list(self.halves):
                if half.transport is not None:
                    half.transport.abort()
            await asyncio.sleep(0)  # let the transports finish closing
        if self._thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout)
            except Exception as exc:  # stopping must stay bounded whatever happened
                log.warning("peer relay did not close cleanly: %r", exc)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
        if not self._thread.is_alive():
            self._loop.close()
        for path in (self.inner, self.public):
            try:
                path.unlink()
            except FileNotFoundError:
                pass
        try:
            os.rmdir(self._dir)
        except FileNotFoundError:
            pass  # stopped twice
        except OSError as exc:
            log.warning("could not remove %s: %s", self._dir, exc)
