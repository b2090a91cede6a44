"""gRPC servers and channels between tiers: health checking, optional TLS/mTLS and a bearer token.

Addresses: "unix:/path/to.sock" or "HOST:PORT". Every server gets the
standard grpc.health.v1 service. With a token, every call must carry
`authorization: Bearer TOKEN` or is refused with UNAUTHENTICATED.
"""

from __future__ import annotations

import errno
import hmac
import socket
from dataclasses import dataclass
from pathlib import Path

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from collectors.common.validation import DEFAULT_MAX_MESSAGE_BYTES

# gRPC's own cap on a received message: the services' limit plus this. A message a little over the limit is read
# and refused by the service, with a message naming the limit, and counted; one further over is refused by gRPC
# from its length prefix, before it is read (counted too: aioserve.py). The slack was 3x the limit (a 64 MiB
# message read and parsed before its refusal, on every stream at once); bench/sender_id_memory.py measures it.
HARD_CAP_SLACK = 1024 * 1024


@dataclass(frozen=True)
class Security:
    """TLS material and token; all optional. Paths are PEM files."""

    cert: Path | None = None        # this side's certificate (server; client too for mTLS)
    key: Path | None = None
    ca: Path | None = None          # CA to verify the peer (client: the server; server: clients => mTLS)
    token: str | None = None
    server_name: str | None = None  # TLS name override for clients (tests use "localhost")

    @property
    def tls(self) -> bool:
        return self.ca is not None or self.cert is not None


# A client's keepalive ping on an open stream (every channel: agents to collectors, collectors to parents), and the
# shortest interval between pings a server accepts while it writes nothing on the connection. gRPC's server default
# is 5 minutes, and its third strike (the 4th such ping) cuts the connection with GOAWAY "too_many_pings": every
# stream on it breaks and the children reconnect and resend. A client's pings without data of its own are few (2), then
# one a minute, so a stream on which nothing flows either way (data from either side clears the strikes: the server
# answers a client's data with a WINDOW_UPDATE) was cut after ~80 s of silence: pings at 0 (BDP), 10, 20 and 80 s
# (tests/test_transport_keepalive.py, with the shape; docs/scale.md has the whole tree before and after). A server
# accepts its clients' interval.
KEEPALIVE_TIME_MS = 10_000
KEEPALIVE_TIMEOUT_MS = 5_000


def _options(max_message_bytes: int) -> list[tuple[str, int | str]]:
    return [("grpc.max_receive_message_length", max_message_bytes + HARD_CAP_SLACK),
            ("grpc.max_send_message_length", max_message_bytes),
            ("grpc.so_reuseport", 0)]


def _server_options(max_message_bytes: int) -> list[tuple[str, int | str]]:
    return _options(max_message_bytes) + [("grpc.http2.min_ping_interval_without_data_ms", KEEPALIVE_TIME_MS // 2)]


class _TokenInterceptor(grpc.aio.ServerInterceptor):
    def __init__(self, token: str) -> None:
        self._expected = f"Bearer {token}".encode()

        async def deny(request: object, context: grpc.aio.ServicerContext) -> None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

        self._deny: grpc.RpcMethodHandler[object, None] = grpc.unary_unary_rpc_method_handler(deny)
        self._deny_stream: grpc.RpcMethodHandler[object, None] = grpc.stream_stream_rpc_method_handler(deny)

    async def intercept_service(self, continuation, handler_call_details):
        if handler_call_details.method.startswith("/grpc.health.v1.Health/"):
            return await continuation(handler_call_details)
        for key, value in handler_call_details.invocation_metadata or ():
            if key == "authorization" and hmac.compare_digest(str(value).encode(), self._expected):
                return await continuation(handler_call_details)
        handler = await continuation(handler_call_details)
        if handler is not None and handler.request_streaming:
            return self._deny_stream
        return self._deny


def make_server(security: Security | None = None, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
                ) -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """A grpc.aio server with the health service; call on the event loop that will run it (aioserve.Host)."""
    interceptors = [_TokenInterceptor(security.token)] if security and security.token else []
    server = grpc.aio.server(interceptors=interceptors, options=_server_options(max_message_bytes))
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    return server, health_servicer


class CannotListen(OSError):
    """A service's address could not be bound: the command line says so in one line (no traceback)."""


def listen_problem(address: str) -> str | None:
    """Why HOST:PORT cannot be bound, from a plain socket's bind (gRPC's error names no reason), with the fix;
    None if it can be."""
    host, _, port = address.rpartition(":")
    try:
        family, kind, proto, _, where = socket.getaddrinfo(host.strip("[]"), int(port), type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as servers bind: TIME_WAIT is no owner
            probe.bind(where)
    except (OSError, ValueError) as exc:
        reason = getattr(exc, "strerror", None) or str(exc)
        if getattr(exc, "errno", None) == errno.EADDRINUSE:
            return f"{reason}: another process listens there (ss -ltnp 'sport = :{port}'); stop it or pick another port"
        return reason
    return None


def bind(server: grpc.aio.Server, address: str, security: Security | None = None) -> str:
    """Bind an address ("unix:PATH" or "HOST:PORT"; port 0 picks one); return the bound address. An address that
    cannot be bound is a CannotListen saying why."""
    tcp = not address.startswith("unix:")
    problem = listen_problem(address) if tcp and not address.endswith(":0") else None
    if problem is not None:  # found before gRPC tries, which would log a line of its own and give no reason
        raise CannotListen(f"cannot listen on {address}: {problem}")
    try:
        return _bind(server, address, security)
    except RuntimeError:  # grpc's "Failed to bind to address ...", which gives no reason
        why = (listen_problem(address) if tcp else "is its directory writable?") or "GRPC_VERBOSITY=debug says why"
        raise CannotListen(f"cannot listen on {address}: {why}") from None


def _bind(server: grpc.aio.Server, address: str, security: Security | None = None) -> str:
    if security and security.tls and not address.startswith("unix:"):
        if security.cert is None or security.key is None:
            raise ValueError("TLS server needs --tls-cert and --tls-key")
        creds = grpc.ssl_server_credentials(
            [(security.key.read_bytes(), security.cert.read_bytes())],
            root_certificates=security.ca.read_bytes() if security.ca else None,
            require_client_auth=security.ca is not None)
        port = server.add_secure_port(address, creds)
    else:
        port = server.add_insecure_port(address)
    if port == 0 and not address.startswith("unix:"):
        raise CannotListen(f"cannot listen on {address}: {listen_problem(address) or 'gRPC bound no port'}")
    if address.startswith("unix:"):
        return address
    host = address.rsplit(":", 1)[0]
    return f"{host}:{port}"


async def set_serving(health_servicer: health.aio.HealthServicer, serving: bool, *services: str) -> None:
    """Every named service (and the server as a whole, "") SERVING or NOT_SERVING."""
    status = health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
    for name in ("", *services):
        await health_servicer.set(name, status)


def _channel_setup(address: str, security: Security | None, max_message_bytes: int
                   ) -> tuple[grpc.ChannelCredentials | None, list[tuple[str, int | str]]]:
    """A client channel's credentials (None: plaintext) and options, for a sync or an aio channel alike."""
    options = _options(max_message_bytes) + [("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
                                             ("grpc.keepalive_timeout_ms", KEEPALIVE_TIMEOUT_MS)]
    if security and security.tls and not address.startswith("unix:"):
        creds = grpc.ssl_channel_credentials(
            root_certificates=security.ca.read_bytes() if security.ca else None,
            private_key=security.key.read_bytes() if security.key else None,
            certificate_chain=security.cert.read_bytes() if security.cert else None)
        if security.server_name:
            options.append(("grpc.ssl_target_name_override", security.server_name))
        return creds, options
    return None, options


def make_channel(address: str, security: Security | None = None,
                 max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> grpc.Channel:
    creds, options = _channel_setup(address, security, max_message_bytes)
    if creds is not None:
        return grpc.secure_channel(address, creds, options=options)
    return grpc.insecure_channel(address, options=options)


def make_aio_channel(address: str, security: Security | None = None,
                     max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> grpc.aio.Channel:
    """As make_channel, for grpc.aio (call it on the loop that will use the channel)."""
    creds, options = _channel_setup(address, security, max_message_bytes)
    if creds is not None:
        return grpc.aio.secure_channel(address, creds, options=options)
    return grpc.aio.insecure_channel(address, options=options)


def certificate_names(context: grpc.aio.ServicerContext) -> frozenset[str] | None:
    """The names the client's certificate vouches for (its subject CN and subjectAltName entries), or None
    when the call came without one (no mTLS). A collector binds a child's sender_id to them."""
    auth = context.auth_context()
    names = [*auth.get("x509_common_name", ()), *auth.get("x509_subject_alternative_name", ())]
    return frozenset(name.decode(errors="replace") for name in names) if names else None


def call_metadata(security: Security | None) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {security.token}"),) if security and security.token else ()
