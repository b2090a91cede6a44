"""A silent stream under the clients' real keepalive, against a server with gRPC's default ping policy and one built
by transport.make_server: which of them cuts it with GOAWAY "too_many_pings", and after how long.

    .venv/bin/python bench/keepalive_cut.py [--hold-s 120] [--out bench/results]

Both servers on 127.0.0.1 at once (one after the other would double the wall time); each client a channel of its own
with transport's options (keepalive every 10 s), a health Watch that the server answers once and then leaves silent.
The fast, scaled-down form of the same shape is tests/test_transport_keepalive.py (its docstring has the mechanism).
Writes keepalive_cut.json: per server, how the stream ended ("held" for `--hold-s`, or the status) and when.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from collectors.common import transport

MAX_MESSAGE_BYTES = 1 << 20
MIN_PING_INTERVAL = "grpc.http2.min_ping_interval_without_data_ms"


async def _watch(address: str, hold_s: float) -> dict[str, Any]:
    _, options = transport._channel_setup(address, None, MAX_MESSAGE_BYTES)
    options.append(("grpc.use_local_subchannel_pool", 1))  # a connection of its own
    async with grpc.aio.insecure_channel(address, options=options) as channel:
        stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs package declares no methods on it
        call = stub.Watch(health_pb2.HealthCheckRequest(service=""))
        await call.read()
        start = time.monotonic()
        try:
            answer = await asyncio.wait_for(call.read(), hold_s)
            ended = f"answered: {answer}"
        except TimeoutError:
            ended = "held"
        except grpc.aio.AioRpcError as err:
            ended = f"{err.code().name}: {err.details()}"
        return {"ended": ended, "after_s": round(time.monotonic() - start, 1)}


async def _serve(server: grpc.aio.Server, servicer: health.aio.HealthServicer) -> str:
    address = transport.bind(server, "127.0.0.1:0")
    await server.start()
    await transport.set_serving(servicer, True)
    return address


async def run(hold_s: float) -> dict[str, Any]:
    default = grpc.aio.server(options=[option for option in transport._server_options(MAX_MESSAGE_BYTES)
                                       if option[0] != MIN_PING_INTERVAL])
    default_health = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(default_health, default)
    built, built_health = transport.make_server(None, MAX_MESSAGE_BYTES)
    try:
        addresses = await _serve(default, default_health), await _serve(built, built_health)
        results = await asyncio.gather(*(_watch(address, hold_s) for address in addresses))
    finally:
        await asyncio.gather(default.stop(None), built.stop(None))
    return {"grpcio": grpc.__version__, "client_keepalive_ms": transport.KEEPALIVE_TIME_MS, "hold_s": hold_s,
            "server_grpc_default_ping_policy": results[0], "server_make_server": results[1]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--hold-s", type=float, default=120.0, help="how long a stream is kept silent (default 120)")
    p.add_argument("--out", type=Path, default=Path("bench/results"), help="directory for keepalive_cut.json")
    args = p.parse_args()
    print(f"holding a silent health Watch up to {args.hold_s:.0f} s against each server ...", file=sys.stderr)
    result = asyncio.run(run(args.hold_s))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "keepalive_cut.json").write_text(json.dumps(result, indent=1) + "\n")
    for name in ("server_grpc_default_ping_policy", "server_make_server"):
        print(f"{name}: {result[name]['ended']} after {result[name]['after_s']} s")


if __name__ == "__main__":
    main()
