"""The process's client loop (collectors/delivery/clientloop.py) and the batched hand-over to a loop it and the
servers' Host use (collectors/common/loopcalls.py): calls handed over from any thread run on the loop, each once, in
the order each thread made them, however many are made while one wake-up is pending."""

from __future__ import annotations

import asyncio
import random
import threading
import time

from collectors.delivery.clientloop import LoopRequests, shared_loop
from telemetry.streams import END


def test_requests_put_from_many_threads_arrive_once_each_in_each_threads_order() -> None:
    loop = shared_loop()
    requests = LoopRequests(loop)
    threads, each = 8, 2_000
    go = threading.Barrier(threads)

    def put(who: int) -> None:
        go.wait()
        for n in range(each):
            requests.put((who, n))

    async def read() -> list[tuple[int, int]]:
        got = []
        async for item in requests:
            got.append(item)
        return got

    reading = asyncio.run_coroutine_threadsafe(read(), loop.loop)
    putters = [threading.Thread(target=put, args=(who,)) for who in range(threads)]
    for thread in putters:
        thread.start()
    for thread in putters:
        thread.join(30)
    requests.put(END)
    got = reading.result(30)
    assert len(got) == threads * each
    for who in range(threads):
        assert [n for w, n in got if w == who] == list(range(each))
    assert shared_loop() is loop  # one loop per process


def test_a_call_made_on_the_loop_itself_runs_too() -> None:
    loop = shared_loop()
    ran = threading.Event()
    loop.call_soon(lambda: loop.call_soon(ran.set))
    assert ran.wait(10)


def test_a_failing_call_is_reported_and_the_calls_after_it_still_run(caplog) -> None:
    loop = shared_loop()
    ran = threading.Event()

    def fails() -> None:
        raise ValueError("boom")
    with caplog.at_level("ERROR", logger="asyncio"):
        loop.call_soon(fails)
        loop.call_soon(ran.set)
        assert ran.wait(10)
    assert any("boom" in str(r.exc_info) or "handed to the loop" in r.getMessage() for r in caplog.records)


def test_an_outbox_closed_as_it_starts_or_while_it_connects_returns_at_once() -> None:
    """close() waits for the outbox's session to end on the client loop, and that end comes at once: closed before
    the loop began the session (the loop busy), or while the session waits for a parent that does not answer (the
    wait is cancelled and the channel closed), never the whole timeout."""
    import time

    from collectors.delivery.outbox import Outbox
    from helpers_tree import dead_address

    dead = dead_address()
    for busy, pause in ((True, 0.0), (True, 0.0), (False, 0.0), (False, 0.3), (False, 0.3)):
        outbox = Outbox("closing", [dead], None, lambda unit, ack: None, connect_timeout_s=5.0)
        if busy:  # the loop is busy (another outbox's callback): close() comes before it can begin the session
            shared_loop().call_soon(time.sleep, 0.3)
        started = time.monotonic()
        outbox.start()
        time.sleep(pause)
        outbox.close(5.0)
        assert time.monotonic() - started - pause < 2.0, (busy, pause)
        assert outbox.connected_to is None


class _StreamCountingParent:
    """A FakeParent that counts the Forward streams open on it (a stream ends when its requests end or it is
    cancelled)."""

    def __init__(self) -> None:
        from helpers_tree import FakeParent

        counts = self
        self.open_streams = 0
        self.lock = threading.Lock()

        class Counting(FakeParent):
            def Forward(self, request_iterator, context):
                with counts.lock:
                    counts.open_streams += 1
                try:
                    yield from super().Forward(request_iterator, context)
                finally:
                    with counts.lock:
                        counts.open_streams -= 1

        self.parent = Counting()

    def streams_end(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if self.open_streams == 0:
                    return True
            time.sleep(0.01)
        return False


def test_an_outbox_closed_just_as_its_parent_answers_ends_its_session_and_sends_nothing_more(monkeypatch) -> None:
    """close() cancels the session's task; on Python 3.11 asyncio.wait_for swallows that cancel when the wait for
    the channel ended in the same pass of the loop. Forced here: channel_ready() returns just as close() runs (on
    the loop, not waiting). The session must still end, the parent's stream with it, and a unit submitted after
    close() must not go out (its ack would land in a stopped node)."""
    import time

    import collectors.delivery.outbox as outbox_module
    from collectors.delivery.outbox import Outbox
    from telemetry.v1 import forward_pb2

    counting = _StreamCountingParent()
    real_make = outbox_module.make_aio_channel
    closing: list[Outbox] = []

    class ClosesWhenReady:
        def __init__(self, channel) -> None:
            self._channel = channel

        def __getattr__(self, name: str):
            return getattr(self._channel, name)

        async def channel_ready(self) -> None:
            await self._channel.channel_ready()
            closing[0].close(0)  # stop set, END sent (no live stream yet), the task's cancel scheduled: no wait

    monkeypatch.setattr(outbox_module, "make_aio_channel", lambda *a: ClosesWhenReady(real_make(*a)))
    acked: list[int] = []
    try:
        outbox = Outbox("closing", [counting.parent.address], None, lambda unit, ack: acked.append(unit.seq))
        closing.append(outbox)
        outbox.start()
        assert outbox._done.wait(5.0), "the session went on after close()"
        assert counting.streams_end(5.0), "the parent's stream is still open after close()"
        outbox.submit(forward_pb2.SummaryBatch(), None)
        time.sleep(0.2)
        assert counting.parent.seqs() == [] and acked == []
    finally:
        counting.parent.stop()


def test_outboxes_started_and_closed_against_a_live_parent_all_end_with_their_streams() -> None:
    """The same race unforced: start/close cycles at random moments against a live parent (close() lands before,
    during or after the connect); every close ends its session and the parent's stream within its timeout."""
    from collectors.delivery.outbox import Outbox

    counting = _StreamCountingParent()
    rng = random.Random(28)
    try:
        for cycle in range(200):
            outbox = Outbox(f"c{cycle}", [counting.parent.address], None, lambda unit, ack: None)
            outbox.start()
            time.sleep(rng.uniform(0, 0.004))
            outbox.close(5.0)
            assert outbox._done.is_set(), cycle
        assert counting.streams_end(5.0)
    finally:
        counting.parent.stop()


def test_calls_handed_to_a_closed_loop_raise_every_time_and_are_not_kept() -> None:
    """LoopCalls raises as call_soon_threadsafe does once its loop is closed, on every call, and holds nothing: a
    closed loop never runs them. Also when the loop closed with a wake-up pending (close() drops it), and for a
    server's Host, whose call_soon swallows the error after close()."""
    from collectors.common.aioserve import Host
    from collectors.common.loopcalls import LoopCalls

    for wake_pending in (False, True):
        loop = asyncio.new_event_loop()
        calls = LoopCalls(loop)
        if wake_pending:
            calls.call_soon(print, "never run")  # a wake-up scheduled on a loop that never runs it
        loop.close()
        for _ in range(3):
            try:
                calls.call_soon(print, "never run")
            except RuntimeError:
                pass
            else:
                raise AssertionError(f"a call on a closed loop was accepted (wake pending: {wake_pending})")
            assert len(calls._calls) == 0 and not calls._wake_pending
    host = Host("closed")
    host.close()
    for _ in range(1_000):
        host.call_soon(lambda: None)
    assert len(host._calls._calls) == 0


def test_calls_made_on_the_loops_own_thread_run_in_order_without_waking_it() -> None:
    """A call made on the loop's thread (a tier acknowledging a unit it took in inline) runs, in order with the calls
    of other threads, and writes nothing to the loop's self-pipe: the loop is awake (one syscall there and one read
    here per unit before)."""
    from collectors.common.loopcalls import LoopCalls

    loop = asyncio.new_event_loop()
    calls = LoopCalls(loop)
    writes = []
    real_write = loop._write_to_self  # type: ignore[attr-defined]  # counted: the self-pipe write of a wake-up
    loop._write_to_self = lambda: (writes.append(1), real_write())  # type: ignore[attr-defined]  # private: counted per wake-up
    ran: list[int] = []

    async def on_the_loop() -> None:
        for i in range(5):
            calls.call_soon(ran.append, i)
        await asyncio.sleep(0)
        assert ran == [0, 1, 2, 3, 4]
        assert writes == [], "a call made on the loop's own thread wrote to its self-pipe"
        other = threading.Thread(target=lambda: [calls.call_soon(ran.append, i) for i in range(5, 8)])
        other.start()
        other.join()
        for _ in range(100):
            if len(ran) == 8:
                break
            await asyncio.sleep(0.01)
        assert ran == list(range(8))
        assert writes == [1], "calls from another thread wake the loop once per burst"

    try:
        loop.run_until_complete(on_the_loop())
    finally:
        loop.close()
