"""bench/scale.py's collector process (racks, cluster tiers and the root): a real CollectorServer whose own code
on the steps' data is timed (thread CPU) and whose received bytes are counted, both on the receiving side."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.scale_child import commands, emit
from bench.scale_workload import MAX_METRICS_PER_JOB


def child_collector(cfg: dict) -> None:
    """A real CollectorServer; counts the bytes of every SummaryBatch it is handed (the receiving side)."""
    from collectors.collector.server import CollectorConfig, CollectorServer
    from collectors.common.aioserve import NOT_INLINE
    from collectors.root.server import RootConfig, RootServer

    root = not cfg["parents"]
    server: CollectorServer | RootServer = (
        RootServer(RootConfig(listen="127.0.0.1:0", node_id=cfg["id"], db=Path(cfg["db"]), api="127.0.0.1:0",
                              deadline_floor_s=cfg["deadline_floor"], max_metrics_per_job=MAX_METRICS_PER_JOB))
        if root else
        CollectorServer(CollectorConfig(listen="127.0.0.1:0", parents=cfg["parents"], node_id=cfg["id"],
                                        deadline_floor_s=cfg["deadline_floor"],
                                        max_metrics_per_job=MAX_METRICS_PER_JOB)))
    stats = {"batches": 0, "windows": 0, "bytes": 0, "bytes_with_windows": 0, "rank_state_bytes": 0,
             "hosts_listed": 0, "step_work_s": 0.0}
    # Beside the process CPU: the thread CPU of the tier's own code on a step's data (units carrying windows,
    # flush ticks with windows pending, shipping them, the parent's acks of them). It leaves out gRPC's threads
    # and the background, and does not depend on how long a step of the simulation takes.
    lock = threading.Lock()

    def timed(fn: Callable[..., Any], is_step: Callable[..., bool]) -> Callable[..., Any]:
        def wrapper(*args: Any) -> Any:
            t0 = time.thread_time()
            try:
                return fn(*args)
            finally:
                if is_step(*args):
                    with lock:
                        stats["step_work_s"] += time.thread_time() - t0
        return wrapper

    def count(unit: Any) -> None:
        # A unit as the stream's deserialiser (CollectorService._receive) hands it over: its size on the wire, and its
        # windows read natively (or, where a window read did not take, in its message parsed whole).
        batch = unit.batch
        size = unit.size
        windows = len(batch.windows) if unit.read is None else len(unit.read)
        stats["batches"] += 1
        stats["bytes"] += size
        if windows:
            stats["bytes_with_windows"] += size
            stats["windows"] += windows
        for states in batch.ranks:
            stats["rank_state_bytes"] += states.ByteSize()
            stats["hosts_listed"] += len(states.hosts)

    def has_windows(unit: Any) -> bool:
        return bool(unit.batch.windows if unit.read is None else len(unit.read))

    handle = server.service._handle

    def counted(sender: Any, unit: Any, responses: Any) -> Any:
        count(unit)
        return handle(sender, unit, responses)

    server.service._handle = timed(  # type: ignore[method-assign]  # the bench wraps it here to time it
        counted, lambda sender, unit, responses: has_windows(unit))
    # A unit taken in on the event loop (CollectorService._inline) never reaches _handle: counted and timed here
    # when it was taken (NOT_INLINE: it goes on to the pool, and to _handle above).
    inline = server.service._inline

    def counted_inline(stream: Any, unit: Any) -> Any:
        t0 = time.thread_time()
        done = inline(stream, unit)
        if done is not NOT_INLINE:
            count(unit)
            if has_windows(unit):
                with lock:
                    stats["step_work_s"] += time.thread_time() - t0
        return done

    server.service._inline = counted_inline  # type: ignore[method-assign]  # the bench wraps it here to time it
    table = server.node.table
    native = table.native  # a collector's: its unsealed windows are watched natively, not in _pending

    def any_pending(now: float, complete: Any, covered: Any = None, world: Any = None) -> bool:
        return bool(table._pending) or (native is not None and bool(native.watched_jobs()))

    table.due = timed(table.due, any_pending)  # type: ignore[method-assign]  # wrapped to time it
    sink = server.node.sink
    assert sink is not None  # CollectorServer wires it: the root's Finaliser, a tier's Upstream
    ship = sink.ship

    def ship_timed(node: Any, windows: Any, now: float) -> Any:
        # The root's Finaliser returns its SQLite commit, which Node.flush runs after releasing the node's lock:
        # time that too (a tier's Upstream returns None).
        after = ship(node, windows, now)
        return None if after is None else timed(after, lambda: True)

    sink.ship = timed(ship_timed, lambda node, windows, now: bool(windows))  # type: ignore[method-assign]  # wrapped to time it
    if isinstance(server, CollectorServer):
        outbox = server.upstream.outbox
        outbox._on_ack = timed(outbox._on_ack, lambda unit, ack: bool(unit.message.windows))
    server.start()
    emit({"ready": True, "address": server.address, "api": server.api_address if isinstance(server, RootServer)
          else None, "pid": os.getpid()})

    def on(cmd: dict) -> dict:
        if cmd["cmd"] == "stats":
            with server.node.lock:
                counters = server.node.subtree_counters()
            with lock:
                return {"stats": dict(stats), "counters": counters}
        if cmd["cmd"] == "threads":  # OS thread id -> Python thread name (bench/rack_arrival.py's per-thread CPU)
            return {"threads": {str(t.native_id): t.name for t in threading.enumerate()}}
        return {}

    commands(on)
    os._exit(0)

