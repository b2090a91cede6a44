"""bench/scale.py's baseline, gathering everything: one process receives every rank's every value over the same gRPC
stack and, once all N ranks sent a step, computes exact figures per metric with numpy and commits them to SQLite;
sender processes stand in for the ranks, each sending its RankBatch of 20 values per step."""

from __future__ import annotations

import json
import os
import queue
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

import numpy as np

from bench.scale_child import commands, emit
from bench.scale_workload import METRICS, QS, rank_messages

RANKS_PER_SENDER = 2048
RANKS_PER_CHANNEL = 64
RANKS_PER_STREAM = 16  # baseline: two nodes' ranks share a stream (grpcio's limit on concurrent streams, below)
GATHER_SERVICE = "bench.Gather"


def _grpc_options() -> list[tuple[str, int]]:
    # The tree's server/channel options (collectors.common.transport): 4x the 16 MiB message limit.
    from collectors.common.validation import DEFAULT_MAX_MESSAGE_BYTES
    return [("grpc.max_receive_message_length", 4 * DEFAULT_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES), ("grpc.so_reuseport", 0)]


def child_gather(cfg: dict) -> None:
    """The baseline: one process receives every rank's every value, keeps them, finalises exactly."""
    import asyncio

    import grpc

    from telemetry.v1 import ingest_pb2

    world = cfg["world"]
    index = {m: i for i, m in enumerate(METRICS)}
    stats = {"messages": 0, "bytes": 0, "finalised": 0, "values": 0}
    steps: dict[int, dict[str, Any]] = {}  # step -> {"values": (20, world) array, "count", "last_ns"}
    db = sqlite3.connect(cfg["db"], isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.execute("CREATE TABLE IF NOT EXISTS windows (metric TEXT, idx INTEGER, count INTEGER, mean REAL, "
               "stddev REAL, min REAL, argmin INTEGER, max REAL, argmax INTEGER, top TEXT, p50 REAL, p90 REAL, "
               "p99 REAL, p999 REAL, last_time_ns INTEGER, finalised_ns INTEGER, PRIMARY KEY (metric, idx))")

    def finalise(step: int, rec: dict[str, Any]) -> None:
        stamp = time.time_ns()
        rows = []
        for i, metric in enumerate(METRICS):
            v = rec["values"][i]
            top = np.argsort(-v, kind="stable")[:8]
            p = np.quantile(v, QS)
            rows.append((metric, step, int(v.size), float(v.mean()), float(v.std()), float(v.min()),
                         int(v.argmin()), float(v.max()), int(v.argmax()),
                         json.dumps([[float(v[j]), int(j)] for j in top]), *map(float, p), rec["last_ns"], stamp))
        db.execute("BEGIN")
        db.executemany("INSERT OR REPLACE INTO windows VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
        db.execute("COMMIT")
        stats["finalised"] += 1

    def take(raw: bytes) -> None:
        stats["messages"] += 1
        stats["bytes"] += len(raw)
        batch = ingest_pb2.RankBatch.FromString(raw)
        for sb in batch.steps:
            rec = steps.get(sb.step)
            if rec is None:
                rec = steps[sb.step] = {"values": np.full((len(METRICS), world), np.nan), "count": 0, "last_ns": 0}
            values = rec["values"]
            for mv in sb.metrics:
                values[index[mv.metric], batch.rank] = mv.values[0]
                stats["values"] += len(mv.values)
            rec["count"] += 1
            if sb.end_time_ns > rec["last_ns"]:
                rec["last_ns"] = sb.end_time_ns
            if rec["count"] == world:
                finalise(sb.step, rec)

    async def push_stream(requests: AsyncIterator[bytes], context: Any) -> bytes:
        async for raw in requests:
            take(raw)
        return b""

    async def main() -> None:
        server = grpc.aio.server(options=_grpc_options())
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
            GATHER_SERVICE, {"PushStream": grpc.stream_unary_rpc_method_handler(push_stream)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        emit({"ready": True, "address": f"127.0.0.1:{port}", "pid": os.getpid()})
        loop = asyncio.get_running_loop()
        done = asyncio.Event()

        def on(cmd: dict) -> dict:
            if cmd["cmd"] == "stats":
                return {"stats": dict(stats), "steps_held": len(steps)}
            if cmd["cmd"] == "stop":
                loop.call_soon_threadsafe(done.set)
            return {}

        threading.Thread(target=commands, args=(on,), daemon=True).start()
        await done.wait()

    asyncio.run(main())
    os._exit(0)


def child_senders(cfg: dict) -> None:
    """Baseline ranks: each sends its RankBatch of 20 values per step to the gather server.

    A stream per RANKS_PER_STREAM ranks (their messages multiplexed on it), from grpcio's synchronous client (a
    thread per stream): grpcio's asyncio server stalls with ~2,000 concurrent streams or more (measured here), so
    16,384 ranks use 1,024 streams.
    """
    import grpc

    from telemetry.v1 import ingest_pb2

    world, lo, hi = cfg["world"], cfg["first_rank"], cfg["first_rank"] + cfg["ranks"]
    batches = {step: [ingest_pb2.RankMessage.FromString(raw).batch
                      for raw in rank_messages(cfg["seed"], step, world, list(range(lo, hi)))]
               for step in range(1, cfg["steps"] + 1)}
    channels = [grpc.insecure_channel(cfg["gather"], options=_grpc_options() + [
        ("grpc.use_local_subchannel_pool", 1)]) for _ in range(0, hi - lo, RANKS_PER_CHANNEL)]
    for channel in channels:
        grpc.channel_ready_future(channel).result(timeout=60)
    queues: list[queue.Queue] = [queue.Queue() for _ in range(lo, hi, RANKS_PER_STREAM)]
    calls = [channels[i * RANKS_PER_STREAM // RANKS_PER_CHANNEL].stream_unary(f"/{GATHER_SERVICE}/PushStream")
             .future(iter(q.get, None)) for i, q in enumerate(queues)]
    emit({"ready": True, "pid": os.getpid(), "ranks": hi - lo, "streams": len(calls)})

    def on(cmd: dict) -> dict:
        if cmd["cmd"] == "feed":
            for i, batch in enumerate(batches[cmd["step"]]):
                batch.steps[0].end_time_ns = time.time_ns()
                queues[i // RANKS_PER_STREAM].put(batch.SerializeToString())
            return {"fed": cmd["step"]}
        return {}

    commands(on)
    os._exit(0)

