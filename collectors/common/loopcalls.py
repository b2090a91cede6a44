"""Calls handed to an asyncio loop from other threads, batched: one wake-up of the loop for all made while one is
pending.

Why: `loop.call_soon_threadsafe` writes to the loop's self-pipe on every call. A tier acknowledges each child's
unit from its flush thread (64 calls in a row per rack and second), and a process of simulated hosts submits a unit
per host in a row: py-spy put 8-11 % of those processes' CPU in that write (docs/fleet.md). Here a call is a deque
append, and only the first of a burst wakes the loop; a call made on the loop's own thread wakes nothing.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from typing import Any


class LoopCalls:
    """`call_soon(func, *args)` from any thread (the loop's too): `func(*args)` runs on the loop, each call once, in
    the order of the calls. Raises RuntimeError as call_soon_threadsafe does once the loop is closed, and from then
    on holds no call (a closed loop runs none)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._calls: collections.deque[tuple[Callable[..., Any], tuple[Any, ...]]] = collections.deque()
        self._wake_pending = False

    def call_soon(self, func: Callable[..., Any], *args: Any) -> None:
        if self._loop.is_closed():  # nothing will run the calls: drop those held (a wake-up close() discarded)
            self._wake_pending = False
            self._calls.clear()
            raise RuntimeError("Event loop is closed")
        self._calls.append((func, args))  # deque.append and popleft are atomic
        if not self._wake_pending:  # a wake-up already on its way runs this call too
            self._wake_pending = True
            if asyncio.events._get_running_loop() is self._loop:
                # On the loop's own thread (a unit taken in inline acknowledges it from there): the loop is awake,
                # so no write to its self-pipe (a syscall here and a read there, per unit).
                self._loop.call_soon(self._run)
                return
            try:
                self._loop.call_soon_threadsafe(self._run)
            except RuntimeError:  # the loop closed since the check above
                self._wake_pending = False
                self._calls.clear()
                raise

    def _run(self) -> None:
        self._wake_pending = False  # first: a call appended from now on schedules its own wake-up
        calls = self._calls
        while calls:
            func, args = calls.popleft()
            try:
                func(*args)
            except Exception as exc:  # as the loop treats a failing callback: reported, the others still run
                self._loop.call_exception_handler({"message": f"exception in a call handed to the loop: {func!r}",
                                                   "exception": exc})
