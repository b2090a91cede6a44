"""A server accepts its own clients' keepalive pings (collectors/common/transport.py).

Every channel between tiers pings every KEEPALIVE_TIME_MS on an open stream; gRPC's server refuses by default pings
closer than 5 minutes on a connection it sends nothing on, and after its third such ping cuts the connection with
GOAWAY "too_many_pings": every stream on it broke and its children reconnected and resent. bench/scale.py at 8,192
ranks x 300 metrics (steps of ~40 s there, the agents silent between them) logged 384 such cuts in its 4 agents
processes, and the reconnects left the racks' windows shipped without the cut children, their parts following as late
deltas: root 936 ms CPU a step, 54,300 windows a step for 4,800; with the server accepting the clients' interval, no
cut, root 146 ms, 4,800 windows (docs/scale.md). gRPC paces a client's pings at 1 s at least, so a real silence that
draws the cut takes minutes: this checks the options both sides are built with."""

from __future__ import annotations

from collectors.common import transport


def _option(options: list[tuple[str, int | str]], name: str) -> int | str | None:
    values = [value for key, value in options if key == name]
    assert len(values) <= 1, f"{name} given {len(values)} times"
    return values[0] if values else None


def test_servers_accept_pings_as_often_as_their_clients_send_them() -> None:
    _, client = transport._channel_setup("127.0.0.1:1", None, 1 << 20)
    keepalive = _option(client, "grpc.keepalive_time_ms")
    assert keepalive == transport.KEEPALIVE_TIME_MS
    accepted = _option(transport._server_options(1 << 20), "grpc.http2.min_ping_interval_without_data_ms")
    assert isinstance(accepted, int), "the server keeps gRPC's default: a ping every 5 minutes at most"
    assert accepted <= keepalive // 2, (accepted, keepalive)  # with room for a ping sent early (jitter, load)


def test_the_servers_options_keep_the_message_limits() -> None:
    server = transport._server_options(1 << 20)
    assert _option(server, "grpc.max_receive_message_length") == (1 << 20) + transport.HARD_CAP_SLACK
    assert _option(server, "grpc.max_send_message_length") == 1 << 20
