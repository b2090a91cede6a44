"""One asyncio loop thread per process for every outbox's stream to its parent (grpc.aio).

Why: a synchronous gRPC stream costs its client three threads that wake on their own: the reader of the
parent's acks (grpc's blocking iterator waits in 0.1 s slices), the channel's spin thread (0.2 s slices) and
the request consumer. An idle agent spent most of its CPU on those wake-ups, and a process simulating hundreds
of hosts (bench/fleet.py) most of its CPU (py-spy: 85 % of it, docs/fleet.md). On grpc.aio a stream is a
coroutine, and one poller thread per process waits on the completion queue without a timeout: nothing wakes
until a message or the connection needs it. Every outbox of a process shares the one loop, so a process of
2,000 simulated hosts runs one loop thread, not 6,000 threads.

What runs on the loop must not block for long: an outbox's callbacks (its acks, the parent's capture requests)
run there, and take only their node's lock.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from collectors.common.loopcalls import LoopCalls
from telemetry.streams import END

_lock = threading.Lock()
_shared: ClientLoop | None = None


class ClientLoop:
    """An event loop on a daemon thread of its own, for the process's outbound streams."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.calls = LoopCalls(self.loop)  # from other threads: one wake-up per burst (loopcalls.py)
        started = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(started,), name="outbox-loop", daemon=True)
        self._thread.start()
        started.wait()

    def _run(self, started: threading.Event) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.call_soon(started.set)
        self.loop.run_forever()

    def call_soon(self, func: Callable[..., Any], *args: Any) -> None:
        """Run `func(*args)` on the loop, from any thread, in the order of the calls."""
        self.calls.call_soon(func, *args)


def shared_loop() -> ClientLoop:
    """The process's client loop, started on first use; it lives as long as the process."""
    global _shared
    with _lock:
        if _shared is None:
            _shared = ClientLoop()
        return _shared


class LoopRequests:
    """A stream's requests, put from any thread (`put`: thread-safe, in the order of the calls) and read on the
    loop as an async iterator that ends at END."""

    def __init__(self, loop: ClientLoop) -> None:
        self._loop = loop
        self._queue: asyncio.Queue[Any] = asyncio.Queue()

    def put(self, item: Any) -> None:
        self._loop.call_soon(self._queue.put_nowait, item)  # in the callers' order, from any thread

    async def __aiter__(self) -> AsyncIterator[Any]:
        while True:
            item = await self._queue.get()
            if item is END:
                return
            yield item
