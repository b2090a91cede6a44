"""The servers' concurrency model: one asyncio loop thread holds every stream; work runs on a small pool.

Why: a synchronous grpc server pins one pool thread per open stream for as long as the stream lives,
so a collector with a 32-thread pool served 32 children and left the 33rd waiting forever, silently.
Here a stream costs a coroutine, not a thread: any number of streams are served up to a configured
cap (`StreamSlots`), and the next one is refused with RESOURCE_EXHAUSTED naming the cap. What a
message asks for (parsing sketches, merging under the node's lock) runs on `Host.pool`, never on the
loop, so one slow merge or a flush holding the node's lock does not stall the other streams' I/O.
Answers are put from any thread (the pool, the flush thread acknowledging durability) through
`Answers`, which hands them to the loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import queue
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import grpc

from collectors.common.loopcalls import LoopCalls
from collectors.common.transport import Security, bind, make_server, set_serving
from collectors.common.validation import BadInput
from telemetry.streams import END, rpc_code

log = logging.getLogger(__name__)

T = TypeVar("T")

POOL_WORKERS = 4  # the node's lock serialises merging anyway; more threads would only contend for it
HEALTH_EVERY_S = 1.0


class Host:
    """An event loop on its own thread, for one grpc.aio server, and the pool its handlers' work runs on.

    The services' callers (the CLI, tests, the simulator) are synchronous: `run()` submits a coroutine to
    the loop and waits for its result with a timeout, so no caller ever blocks without a bound.
    """

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._calls = LoopCalls(self.loop)
        self.closed = False  # close() was called: run() refuses work the loop would never take
        self.answers_cut = 0  # streams cut because their peer read none of MAX_ANSWERS answers (Answers)
        self.pool = WorkPool(self, POOL_WORKERS, f"{name}-work")
        self._thread = threading.Thread(target=self._run, name=f"{name}-loop", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, make: Callable[[], Awaitable[T]], timeout: float = 10.0) -> T:
        """Run `make()` (a coroutine factory: the coroutine is created on the loop) and return its result.

        After `close()` this raises RuntimeError at once: the coroutine is closed here, not left to be collected
        never awaited (a RuntimeWarning, and before, a wait for a loop that would never run it)."""
        async def call() -> T:
            return await make()
        coro = call()
        if self.closed:
            coro.close()
            raise RuntimeError("the server's event loop is stopped")
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        except RuntimeError:  # the loop closed between the check and the call
            coro.close()
            raise
        return future.result(timeout)

    def call_soon(self, func: Callable[..., Any], *args: Any) -> None:
        """Run `func(*args)` on the loop; callable from any thread, also after the loop stopped (then a no-op)."""
        try:
            self._calls.call_soon(func, *args)  # one wake-up of the loop per burst of calls (loopcalls.py)
        except RuntimeError:  # the loop is closed: the server is gone, and nothing is waiting for this
            pass

    def close(self, timeout: float = 2.0) -> None:
        self.closed = True
        self.call_soon(self.loop.stop)
        self._thread.join(timeout)
        self.pool.shutdown()
        if not self._thread.is_alive():
            self.loop.close()


class WorkPool:
    """The threads a Host's handlers' work runs on: `run(func, *args)` from the loop returns an asyncio future of
    `func(*args)` run on one of them.

    Why not `loop.run_in_executor` on a ThreadPoolExecutor: a collector hands every child's unit to the pool, and
    each hand-off paid the executor's Python-level bookkeeping (its locks, an idle semaphore taken per submit and
    released per item through a Condition), a concurrent future chained to an asyncio one, and a wake-up of the
    loop of its own for the result. py-spy (GIL samples) put that at ~15 % of a rack's GIL time in bench/scale.py
    at 300 metrics (docs/scale.md). Here a hand-off is a SimpleQueue put and get (in C), and the result comes back
    through `Host.call_soon`, whose one wake-up of the loop also carries the answers the work put meanwhile
    (Answers.put: a unit's acks, RECEIVED where the child did not open with skip_received).

    Every worker starts now, not on demand under load: each new thread brings its own malloc arena, and a service's
    memory should step up at start, not part-way through its life (the soak saw +3 MiB). Daemon threads, as the
    loop's: a process that exits without closing its server is not held by them."""

    def __init__(self, host: Host, workers: int, name: str) -> None:
        self._host = host
        self._queue: queue.SimpleQueue[tuple[asyncio.Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._shut = False
        self._threads = [threading.Thread(target=self._work, name=f"{name}_{i}", daemon=True) for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def run(self, func: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """On the loop: `func(*args)` on a worker, its result or exception in the future returned. A future cancelled
        before a worker takes it up is not run (as run_in_executor's). RuntimeError once shut down."""
        if self._shut:
            raise RuntimeError("the server's work pool is shut down")
        future: asyncio.Future[T] = self._host.loop.create_future()
        self._queue.put((future, func, args))
        return future

    def shutdown(self) -> None:
        """No more work: each worker ends after the item it is running (what is queued is dropped, as the loop that
        would take the results is stopped)."""
        self._shut = True
        for _ in self._threads:
            self._queue.put(None)

    def _work(self) -> None:
        get = self._queue.get
        while not self._shut:
            item = get()
            if item is None or self._shut:
                return
            self._one(*item)
            item = None  # not kept while this worker waits for the next: it holds a request (a unit of ~128 KB)

    def _one(self, future: asyncio.Future[Any], func: Callable[..., Any], args: tuple[Any, ...]) -> None:
        if future.cancelled():  # a read of a flag set on the loop: at worst the work runs, as it would have
            return
        try:
            result = func(*args)
        except BaseException as exc:  # as the executor's worker: the caller awaiting the future gets it
            self._host.call_soon(_settle, future, False, exc)
            # exc's traceback holds this frame: without its references, no cycle keeps the request (and the
            # frames of the handler that refused it) until a full collection (tests/test_stream_memory.py)
            future = func = args = None  # type: ignore[assignment]  # cleared to break the traceback's cycle
        else:
            self._host.call_soon(_settle, future, True, result)


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    """On the loop: a WorkPool item's outcome into its future, unless the waiter gave up on it meanwhile."""
    if future.cancelled():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


MAX_ANSWERS = 16_384
"""Answers one stream may have waiting: a peer that reads none of its acknowledgements (gRPC's flow control then
holds them here) must not grow the server without bound. Acks and rank acks are tens of bytes; a unit's
rejections and capture requests are bounded per unit (check_size), so this is a few MiB per stream at most."""


class Answers:
    """One stream's outgoing messages: `put` from any thread; the stream's coroutine takes them in order.

    Bounded (`max_items`): past it the peer is not reading, and the stream is cut with RESOURCE_EXHAUSTED
    (the answers waiting are dropped, counted in `Host.answers_cut`). Nothing is lost by that: a sender keeps
    every unit until it is acknowledged, reconnects and resends, and is answered again."""

    def __init__(self, host: Host, max_items: int | None = None) -> None:
        self._host = host
        self._queue: asyncio.Queue = asyncio.Queue()
        self.max_items = MAX_ANSWERS if max_items is None else max_items
        self.cut = False
        # Ends the stream at once: its coroutine may be blocked writing (the peer reads nothing), never to
        # take the refusal off the queue. serve_stream sets it (cancels the RPC's task).
        self.on_cut: Callable[[], object] | None = None

    def put(self, item: object) -> None:
        self._host.call_soon(self._put, item)

    def _put(self, item: object) -> None:
        """On the loop (one thread: no lock)."""
        if self.cut:
            return
        if item is not END and not isinstance(item, BadInput) and self._queue.qsize() >= self.max_items:
            self.cut = True
            self._host.answers_cut += 1
            dropped = self._queue.qsize()
            while not self._queue.empty():
                self._queue.get_nowait()
            log.warning("a stream's peer read none of its last %d answers: stream cut (it reconnects and resends "
                        "what is not acknowledged; %d cut so far)", dropped, self._host.answers_cut)
            item = BadInput("RESOURCE_EXHAUSTED", f"{dropped} answers waiting: this stream's acknowledgements are "
                                                  "not being read")
            if self.on_cut is not None:
                self.on_cut()
        self._queue.put_nowait(item)

    async def get(self) -> object:
        return await self._queue.get()


class StreamSlots:
    """A cap on concurrent streams: past it a new stream is refused, and the refusal counted, not queued."""

    def __init__(self, cap: int, what: str, flag: str) -> None:
        if cap < 1:
            raise ValueError(f"{flag} must be at least 1, got {cap}")
        self.cap = cap
        self.active = 0
        self.refused = 0
        self.what = what
        self._flag = flag

    def take(self) -> bool:
        """Only ever called on the loop thread: no lock needed."""
        if self.active >= self.cap:
            self.refused += 1
            return False
        self.active += 1
        return True

    def give_back(self) -> None:
        self.active -= 1

    def refusal(self) -> str:
        return (f"this server already serves {self.cap} {self.what} streams, its cap ({self._flag}); "
                f"raise the cap or spread the load")


@dataclass
class Parked:
    """A request whose handling waits for something slow (the root's store reads: collectors/root/reads.py):
    `ready` completes once it is done, without holding a pool thread meanwhile; the stream reads its next request
    only after (its order kept, and at most one request per stream parked)."""

    ready: concurrent.futures.Future[None]


@dataclass
class StreamWork:
    """What a service does with one stream; each runs on the pool, never on the loop."""

    handle: Callable[[Any], Parked | None]  # one request, in order
    ended: Callable[[], None]      # once, however the stream ended
    # One request on the loop itself, when that needs no wait (a lock free now): its outcome, or NOT_INLINE (nothing
    # done: the request goes to the pool). Saves the two thread hand-offs per request where the work is short.
    inline: Callable[[Any], Parked | None | object] | None = None


NOT_INLINE = object()


async def serve_stream(host: Host, slots: StreamSlots, context: grpc.aio.ServicerContext, requests: AsyncIterator,
                       start: Callable[[Answers], StreamWork], count: Callable[[str], None]
                       ) -> AsyncIterator[object]:
    """The body of every bidirectional stream in the tree: take a slot, read on a task, yield the answers.

    `start(answers)` gives the stream's work; answers put on `answers` go out in order, and a BadInput put
    there ends the stream with its status. `count(name)` adds one to the node's delivery counter `name`
    (refused_streams, bad_inputs); it runs on the pool.
    """
    if not slots.take():
        log.warning("refused a %s stream: %s", slots.what, slots.refusal())
        await off_loop(host, count, "refused_streams")
        _finish(context, grpc.StatusCode.RESOURCE_EXHAUSTED, slots.refusal())
        return
    try:
        answers = Answers(host)
        answers.on_cut = lambda: host.loop.create_task(_end(context, grpc.StatusCode.RESOURCE_EXHAUSTED,
                                                           "this stream's acknowledgements are not being read"))
        reader = asyncio.create_task(_read(host, requests, answers, start(answers), slots.what, count))
        try:
            while True:
                item = await answers.get()
                if item is END:
                    return
                if isinstance(item, BadInput):
                    _finish(context, getattr(grpc.StatusCode, item.code), str(item))
                    return
                yield item
        finally:
            reader.cancel()
    finally:
        slots.give_back()


async def _end(context: grpc.aio.ServicerContext, code: grpc.StatusCode, details: str) -> None:
    """End a stream from outside its handler (which may be blocked writing to a peer that reads nothing)."""
    try:
        await context.abort(code, details)
    except BaseException:  # abort raises by design (AbortError, or the RPC already ended): the status is sent
        pass


def _finish(context: grpc.aio.ServicerContext, code: grpc.StatusCode, details: str) -> None:
    """End a stream from its handler with a status, by returning after this, not with `context.abort`: abort
    raises, and the exception's traceback holds the stream's frames, its request iterator and the last message
    received, in cycles that only a full collection frees (issue 26; bench/sender_id_memory.py)."""
    context.set_code(code)
    context.set_details(details)


async def _read(host: Host, requests: AsyncIterator, answers: Answers, work: StreamWork, what: str,
                count: Callable[[str], None]) -> None:
    messages = aiter(requests)
    try:
        async for request in messages:
            try:
                done = work.inline(request) if work.inline is not None else NOT_INLINE
                parked = await host.pool.run(work.handle, request) if done is NOT_INLINE else cast(Parked | None, done)
                if parked is not None:
                    await asyncio.wrap_future(parked.ready)
            except BadInput:
                raise
            except Exception as exc:  # a bug, not the peer's fault: logged in full, the peer told tersely
                log.exception("handling a stream message failed")
                raise BadInput("INTERNAL", "internal error handling this message (logged by the server)") from exc
    except BadInput as exc:
        log.warning("refused a %s stream: %s", what, str(exc))  # not exc: a kept record would keep its frames
        await off_loop(host, count, "bad_inputs")
        answers.put(BadInput(exc.code, str(exc)))  # without the traceback, whose frames hold the request
    except Exception as exc:
        # The peer went away (it resends whatever is not durable), or sent a message over gRPC's own limit.
        if rpc_code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED:
            log.warning("a %s stream was cut: %s", what, exc)
            await off_loop(host, count, "bad_inputs")
    finally:
        # gRPC's request iterator is an async generator in a reference cycle with its receiver, suspended holding
        # the last message: left so, that message lives until a full collection (rare: gctune.py), and each
        # stream refused for a 10 MB sender_id kept ~10 MB (bench/sender_id_memory.py). Closed, it lets go.
        close = getattr(messages, "aclose", None)
        if close is not None:
            try:
                await close()
            except Exception:  # a generator that fails to close must not hide the stream's end
                log.debug("closing a %s stream's request iterator failed", what, exc_info=True)
        await off_loop(host, work.ended)
        answers.put(END)


async def off_loop(host: Host, func: Callable[..., None], *args: Any) -> None:
    """Run `func(*args)` on the pool, exactly once, even if this task is being cancelled meanwhile."""
    try:
        future = host.pool.run(func, *args)
    except RuntimeError:  # the pool is shut down: the server is stopping
        func(*args)
        return
    try:
        await asyncio.shield(future)
    except asyncio.CancelledError:
        pass  # it still runs, once, on the pool


class AioServer:
    """A grpc.aio server on its own Host, with the health service kept true to `healthy()`.

    `healthy` is polled on the loop every HEALTH_EVERY_S: a flush loop that fails or hangs turns every
    service NOT_SERVING within about that long, and SERVING again once it recovers.
    """

    def __init__(self, name: str, security: Security | None, services: tuple[str, ...],
                 healthy: Callable[[], bool]) -> None:
        self.host = Host(name)
        self._services = services
        self._healthy = healthy
        self._watch: asyncio.Task | None = None

        async def build() -> tuple[grpc.aio.Server, Any]:
            return make_server(security)
        self.server, self.health = self.host.run(build)

    def add(self, register: Callable[[grpc.aio.Server], None]) -> None:
        """Add a servicer: `register(server)`, e.g. a generated add_XServicer_to_server, run on the loop."""
        async def add() -> None:
            register(self.server)
        self.host.run(add)

    def bind(self, address: str, security: Security | None = None) -> str:
        async def add() -> str:
            return bind(self.server, address, security)
        return self.host.run(add)

    def start(self) -> None:
        async def start() -> None:
            await self.server.start()
            self._watch = asyncio.create_task(self._watch_health())
        self.host.run(start)

    async def _watch_health(self) -> None:
        reported: bool | None = None
        while True:
            healthy = self._healthy()
            if healthy != reported:
                if reported is not None:
                    log.warning("health: %s", "SERVING again" if healthy else "NOT_SERVING (no progress)")
                await set_serving(self.health, healthy, *self._services)
                reported = healthy
            await asyncio.sleep(HEALTH_EVERY_S)

    def stop(self, grace: float = 1.0) -> None:
        """Refuse new calls, give open streams `grace` seconds, cancel the rest; bounded however it goes.
        A second stop is a no-op (a test's teardown, or a signal during a stop)."""
        if self.host.closed:
            return

        async def stop() -> None:
            if self._watch is not None:
                self._watch.cancel()
            await self.server.stop(grace)
        try:
            self.host.run(stop, timeout=grace + 2.0)
        except Exception as exc:  # a timeout here must not keep the process from stopping
            log.warning("gRPC server did not stop cleanly: %r", exc)
        self.host.close()
