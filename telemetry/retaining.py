"""Retain, number, resend: the core of every client stream up the tree (DESIGN §5).

Two clients send numbered units up a gRPC bidirectional stream and keep each until the other end
acknowledges it: the SDK's `Sender` (a rank's batches to its agent, `telemetry/sdk/sender.py`) and a tier's
`Outbox` (units to its parent, `collectors/delivery/outbox.py`). They differ in what they send, how they
connect (one agent address; a list of parents to fail over between) and what an acknowledgement means. What
they share is here, once, so that the delivery guarantees are written and tested in one place:

`RetainingStream` holds the retained units, numbered 1, 2, 3, ... by `add`, until the client `settle`s one,
and the live stream (a queue feeding the gRPC request iterator) they go out on. `run` is the session loop:
one session (connect, `open` the stream, send, read acknowledgements) after another, with the one
`telemetry.backoff.Backoff` between them, until the client's stop event is set. `wait_ready` connects with a
timeout; `read_acks` reads a stream's acknowledgements and ends its requests when they end.

What it guarantees:

- Order: on every stream, units go out in sequence order, each at most once. `add` numbers a unit and puts
  it on the live stream under one lock; `open` puts the whole retained backlog, in sequence order, on a new
  stream and makes it the live one under the same lock. So a unit added while a stream opens goes after
  the backlog, never before it and never twice.
- At least once: a unit stays retained until `settle` (the client saw it acknowledged) or the bound drops it,
  and every stream opened while it is retained carries it again. The receiver deduplicates by sequence
  number (the agent) or by the sources it already holds (a collector).
- Bounded retention: the retained units' total weight (by default 1 per unit) never exceeds the bound the
  client passes to `add`, except that the newest unit is always kept. The oldest units go first and `add`
  returns them, for the client to count and report: a drop is never silent. A client that counts drops
  exactly (`keep_sent`: the SDK, whose `close()` and `stats` promise logged = delivered + dropped) drops only
  units never put on a stream: one that was may be delivered whatever happens here (the receiver took it, and
  may have passed it on before it died), so it is kept until acknowledged, and the bound then holds for the
  units not yet sent (those already sent are bounded by what the receiver takes, and by its own bounds).
- Bounded waits: connecting waits at most its timeout and stops early when the stop event is set; between
  sessions the loop waits out the backoff (at most `Backoff.maximum_s`) in a timed wait that returns at
  once on stop. Reading acknowledgements blocks until the stream ends: the client ends it (END on the
  requests, then cancelling the call) when it stops, and joins its threads with a timeout.

The threads are the client's: the SDK's sender thread batches while a reader thread of its own reads the
acknowledgements; an outbox's coroutine on its process's client loop (`open_on`) reads them while units are added
from other threads.
"""

from __future__ import annotations

import collections
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Generic, Protocol, TypeVar

import grpc
from google.protobuf.message import Message

from telemetry.backoff import Backoff
from telemetry.streams import END

log = logging.getLogger(__name__)

READY_SLICE_S = 0.1  # how often wait_ready looks at the stop event


class Numbered(Protocol):
    """A retained unit: its sequence number and the message that carries it on the stream."""

    @property
    def seq(self) -> int: ...

    @property
    def message(self) -> Message | bytes: ...  # bytes: serialised already (the stream's serialiser passes them on)


class Live(Protocol):
    """A live stream's requests: what `add` and `open` put units on (a queue.SimpleQueue; or the outbox's
    hand-over onto its event loop). `put` must be thread-safe."""

    def put(self, item: Any) -> None: ...


U = TypeVar("U", bound=Numbered)
A = TypeVar("A")
L = TypeVar("L", bound=Live)


class Unreachable(grpc.RpcError):
    """A session that could not connect within its timeout: UNAVAILABLE, as gRPC would say."""

    def __init__(self, details: str) -> None:
        super().__init__(details)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return grpc.StatusCode.UNAVAILABLE

    def details(self) -> str:
        return self._details


class RetainingStream(Generic[U]):
    """Numbered units retained until settled, the live stream they go out on, and the session loop.

    `weigh` gives a unit's weight for the bound (the SDK bounds values, not batches); by default each unit
    weighs 1. `lock` guards the units and the live stream; `open` runs its `then` under it.
    """

    def __init__(self, weigh: Callable[[U], int] | None = None, keep_sent: bool = False) -> None:
        self.lock = threading.Lock()
        self._units: collections.OrderedDict[int, U] = collections.OrderedDict()  # in sequence order
        self._weigh = weigh
        self.weight = 0  # of the retained units
        self._seq = 0
        self._live: Live | None = None
        self._keep_sent = keep_sent
        self._sent_through = 0  # every unit numbered up to this one went out on some stream (they go in order)
        self._unsent_from = 1   # no retained unit never sent is older than this one (keep_sent's drops)

    # ----------------------------------------------------------- the units
    def add(self, build: Callable[[int], U], bound: int) -> tuple[U, list[U]]:
        """Number a unit (`build(seq)` makes it, under the lock), retain it and put it on the live stream, if
        there is one. Past `bound` the oldest units are dropped (never the new one) and returned."""
        weigh = self._weigh
        units = self._units
        with self.lock:
            self._seq += 1
            unit = build(self._seq)
            units[self._seq] = unit
            self.weight += 1 if weigh is None else weigh(unit)
            dropped: list[U] = []
            while self.weight > bound and len(units) > 1:
                if self._keep_sent:
                    oldest = self._oldest_unsent()
                    if oldest is None:
                        break  # only units already sent, and the new one: kept until acknowledged
                else:
                    _, oldest = units.popitem(last=False)
                self.weight -= 1 if weigh is None else weigh(oldest)
                dropped.append(oldest)
            if self._live is not None:
                self._live.put(unit.message)
                self._sent_through = self._seq
        return unit, dropped

    def _oldest_unsent(self) -> U | None:
        """Take the oldest retained unit never sent, other than the newest (under the lock). Amortised O(1):
        units never sent are the newest ones, and leave only by being dropped here, oldest first."""
        seq = max(self._unsent_from, self._sent_through + 1)
        while seq < self._seq and seq not in self._units:
            seq += 1
        self._unsent_from = seq
        if seq >= self._seq:
            return None
        return self._units.pop(seq)

    def settle(self, seq: int) -> U | None:
        """Stop retaining unit `seq` (acknowledged); the unit, or None if it was not retained."""
        with self.lock:
            unit = self._units.pop(seq, None)
            if unit is not None:
                self.weight -= 1 if self._weigh is None else self._weigh(unit)
            return unit

    def get(self, seq: int) -> U | None:
        with self.lock:
            return self._units.get(seq)

    def clear(self) -> list[U]:
        """Stop retaining every unit; they are returned, oldest first."""
        with self.lock:
            units = list(self._units.values())
            self._units.clear()
            self.weight = 0
            return units

    def __len__(self) -> int:
        with self.lock:
            return len(self._units)

    # ----------------------------------------------------------- the live stream
    def open(self, first: Iterable[Message], then: Callable[[int], None] | None = None) -> queue.SimpleQueue[Any]:
        """A new stream's requests: `first` (the opening messages), then every retained unit in sequence
        order, then each unit added from now on. `then(resent)` runs under the lock once it is live, told
        how many retained units it carries."""
        return self.open_on(queue.SimpleQueue(), first, then)  # put and get in C

    def open_on(self, live: L, first: Iterable[Message], then: Callable[[int], None] | None = None) -> L:
        """As `open`, onto `live`: anything with a thread-safe `put` (an asyncio stream's requests: the outbox)."""
        for message in first:
            live.put(message)
        with self.lock:
            for unit in self._units.values():
                live.put(unit.message)
            self._live = live
            self._sent_through = self._seq
            if then is not None:
                then(len(self._units))
        return live

    def send(self, message: object) -> bool:
        """Put `message` (not retained) on the live stream; False when there is none."""
        with self.lock:
            live = self._live
            if live is None:
                return False
            live.put(message)
            return True

    def detach(self) -> None:
        """The stream ended: units added from now on wait for the next `open`."""
        with self.lock:
            self._live = None

    # ----------------------------------------------------------- the session loop
    def run(self, stop: threading.Event, session: Callable[[], None], failed: Callable[[Exception], bool],
            pause: Callable[[float], object] | None = None) -> bool:
        """Run `session` (connect, `open`, send, read acknowledgements until the stream ends) again and again
        until `stop` is set. A session that returns resets the backoff. An exception it raises goes to
        `failed`, which logs it (and may fail over) and says whether to go on: on False this returns False
        at once. After each session the live stream is detached. Between sessions, unless stopped,
        `pause(delay)` (default `stop.wait`) waits the next backoff delay; it must return once `stop` is set.
        Returns True once stopped."""
        backoff = Backoff()
        wait = stop.wait if pause is None else pause
        while not stop.is_set():
            try:
                session()
                backoff.reset()
            except Exception as exc:
                if not failed(exc):
                    return False
            finally:
                self.detach()
            if not stop.is_set():
                wait(backoff.next_delay())
        return True


def wait_ready(channel: grpc.Channel, timeout_s: float, stop: threading.Event) -> bool:
    """Wait for `channel` to connect, up to `timeout_s`, but no longer than until `stop` is set."""
    ready = grpc.channel_ready_future(channel)
    deadline = time.monotonic() + timeout_s
    while not stop.is_set():
        try:
            ready.result(timeout=min(READY_SLICE_S, max(0.0, deadline - time.monotonic())))
            return True
        except grpc.FutureTimeoutError:
            if time.monotonic() >= deadline:
                break
    ready.cancel()
    return False


def read_acks(call: Iterable[A], handle: Callable[[A], None], requests: queue.SimpleQueue[Any]) -> None:
    """Hand each acknowledgement on `call` to `handle` until the stream ends (or raises), then end the
    stream's requests, so that the sending side of the session sees it ended."""
    try:
        for ack in call:
            handle(ack)
    finally:
        requests.put(END)
