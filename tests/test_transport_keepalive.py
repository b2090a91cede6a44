"""A server accepts its own clients' keepalive pings (collectors/common/transport.py).

The shape that draws gRPC's GOAWAY "too_many_pings" (grpc's doc/keepalive.md; its chttp2 transport): a server counts
a strike for each ping that arrives less than `grpc.http2.min_ping_interval_without_data_ms` (default 5 minutes)
after the previous one while it has WRITTEN nothing on the connection (a data, header or WINDOW_UPDATE frame of its
own clears the strikes), and past max_ping_strikes (2) it cuts the connection: every stream on it breaks. So it takes
4 pings with nothing flowing in EITHER direction: a client that sends data gets a WINDOW_UPDATE back at once, which
clears the strikes (tried: one message every 1.5 s against a 1 s keepalive, with the server's BDP probe on or off:
never cut). A client's pings without data of its own are limited (grpc.http2.max_pings_without_data, 2), then
(grpcio 1.85: the max_pings_wo_data_throttle experiment, on by default) one a minute. Measured at our 10 s keepalive
(grpcio 1.85.1, 127.0.0.1, a health Watch left silent after its first answer, GRPC_TRACE=http_keepalive): the old
server received pings at 0 s (the client's BDP ping answering that answer), 10, 20 and 80 s and cut the stream at
80 s; the server with transport's options kept it (bench/keepalive_cut.py, bench/results/keepalive_cut.json). A
silent stream of 45 s, or one the client writes on, is not cut (the reviewer's tries).

Here at scale: a client keepalive of 1 s (gRPC spaces a client's pings 1 s apart at the least) and the client's limit
of pings without data lifted (`grpc.http2.max_pings_without_data` 0), because its one-a-minute throttle is a gRPC
constant: the 4 pings arrive at ~0, 1, 2, 3 s instead of 0, 10, 20, 80 s, inside the server's 5 minutes either way.
The server with the options servers had before (gRPC's default interval) cuts the silent Watch; the server
transport.make_server builds keeps the same stream, with the same pings, well past that point."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from collectors.common import transport

MAX_MESSAGE_BYTES = 1 << 20
MIN_PING_INTERVAL = "grpc.http2.min_ping_interval_without_data_ms"


def _option(options: list[tuple[str, int | str]], name: str) -> int | str | None:
    values = [value for key, value in options if key == name]
    assert len(values) <= 1, f"{name} given {len(values)} times"
    return values[0] if values else None


def test_servers_accept_pings_as_often_as_their_clients_send_them() -> None:
    _, client = transport._channel_setup("127.0.0.1:1", None, 1 << 20)
    keepalive = _option(client, "grpc.keepalive_time_ms")
    assert keepalive == transport.KEEPALIVE_TIME_MS
    accepted = _option(transport._server_options(1 << 20), MIN_PING_INTERVAL)
    assert isinstance(accepted, int), "the server keeps gRPC's default: a ping every 5 minutes at most"
    assert accepted <= keepalive // 2, (accepted, keepalive)  # with room for a ping sent early (jitter, load)


def test_the_servers_options_keep_the_message_limits() -> None:
    server = transport._server_options(1 << 20)
    assert _option(server, "grpc.max_receive_message_length") == (1 << 20) + transport.HARD_CAP_SLACK
    assert _option(server, "grpc.max_send_message_length") == 1 << 20


async def _start(server: grpc.aio.Server) -> str:
    address = transport.bind(server, "127.0.0.1:0")
    await server.start()
    return address


async def _server_before_the_fix() -> tuple[grpc.aio.Server, health.aio.HealthServicer]:
    """make_server's server with the options servers had before: gRPC's default ping interval (5 minutes)."""
    options = [option for option in transport._server_options(MAX_MESSAGE_BYTES) if option[0] != MIN_PING_INTERVAL]
    server = grpc.aio.server(options=options)
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    return server, servicer


async def _watch_silently(address: str, cut_by: asyncio.Future[float] | None, hold_s: float,
                          after_cut_s: float) -> tuple[str, float]:
    """Open a health Watch (the server answers SERVING once, then writes nothing) on a channel of its own with
    transport's client options, and keep it open: until it breaks, or `hold_s`, or `after_cut_s` past the time
    `cut_by` resolves to. Returns how it ended ("held" or the status code and details) and when (s)."""
    _, options = transport._channel_setup(address, None, MAX_MESSAGE_BYTES)
    options += [("grpc.http2.max_pings_without_data", 0),  # gRPC's one-a-minute throttle, lifted (docstring)
                ("grpc.use_local_subchannel_pool", 1)]     # a connection of its own, not shared with the other test's
    start = time.monotonic()
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs package declares no methods on it
        call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        first = await call.read()
        assert isinstance(first, health_pb2.HealthCheckResponse), first
        assert first.status == health_pb2.HealthCheckResponse.SERVING
        deadline = start + hold_s
        reader = asyncio.ensure_future(call.read())
        try:
            while not reader.done():
                if cut_by is not None and cut_by.done():
                    deadline = min(deadline, start + cut_by.result() + after_cut_s)
                if time.monotonic() >= deadline:
                    return "held", time.monotonic() - start
                await asyncio.wait({reader}, timeout=0.1)
            answer = reader.result()
            return f"answered {answer}", time.monotonic() - start  # the server wrote: not the silent shape
        except grpc.aio.AioRpcError as err:
            return f"{err.code().name}: {err.details()}", time.monotonic() - start
        finally:
            reader.cancel()
            call.cancel()


async def _both(keepalive_ms: int) -> tuple[tuple[str, float], tuple[str, float]]:
    before, before_health = await _server_before_the_fix()
    after, after_health = transport.make_server(None, MAX_MESSAGE_BYTES)
    try:
        await transport.set_serving(before_health, True)
        await transport.set_serving(after_health, True)
        before_address, after_address = await _start(before), await _start(after)
        cut: asyncio.Future[float] = asyncio.get_running_loop().create_future()

        async def before_side() -> tuple[str, float]:
            ended = await _watch_silently(before_address, None, hold_s=30.0, after_cut_s=0.0)
            cut.set_result(ended[1])
            return ended

        # the server as built now is watched until 3 more pings went past the point where the other was cut
        after_side = _watch_silently(after_address, cut, hold_s=30.0, after_cut_s=3 * keepalive_ms / 1000)
        before_ended, after_ended = await asyncio.gather(before_side(), after_side)
        return before_ended, after_ended
    finally:
        await asyncio.gather(before.stop(None), after.stop(None))


@pytest.mark.integration  # two gRPC servers on 127.0.0.1, ~7 s
def test_a_stream_on_which_nothing_flows_is_cut_by_the_old_server_and_kept_by_the_new(
        monkeypatch: pytest.MonkeyPatch) -> None:
    keepalive_ms = 1_000
    monkeypatch.setattr(transport, "KEEPALIVE_TIME_MS", keepalive_ms)  # the clients' and the server's options alike
    (before, before_s), (after, after_s) = asyncio.run(_both(keepalive_ms))
    # the old server: the 4th ping (~4 s) is its third strike; 30 s is the bound if it never came
    assert before.startswith("UNAVAILABLE") and "ping" in before.lower(), (before, before_s)
    assert before_s < 30.0, before_s
    assert after == "held", (after, after_s)
    assert after_s >= before_s + 2 * keepalive_ms / 1000, (before_s, after_s)
