"""Measure how long the training loop waits for each batch."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Generic, TypeVar

__all__ = ["TimedLoader"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class TimedLoader(Generic[T]):
    """Wrap an iterable (typically a ``DataLoader``); time every ``next()`` on it.

    For each batch, the seconds spent inside the wrapped iterator's ``__next__`` (waiting for
    workers, collation, pinning, or a synchronous dataset) are stored in ``last_wait_s``, added
    to ``total_wait_s`` and passed to ``on_wait(seconds)`` before the batch is yielded. Each
    ``for`` loop over the wrapper starts a fresh pass (a new epoch) over the wrapped iterable.

    Telemetry never breaks training: an exception from ``on_wait`` is logged (once) and
    swallowed. Exceptions from the wrapped iterator propagate unchanged. ``len()`` and any
    other attribute (``sampler``, ``dataset``, ``batch_size``...) are those of the wrapped object.
    """

    def __init__(self, iterable: Iterable[T], on_wait: Callable[[float], Any] | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.iterable = iterable
        self.on_wait = on_wait
        self.last_wait_s: float | None = None
        self.total_wait_s = 0.0
        self.batches = 0
        self._clock = clock
        self._callback_failed = False

    def __iter__(self) -> Iterator[T]:
        clock = self._clock
        it = iter(self.iterable)
        while True:
            start = clock()
            try:
                batch = next(it)
            except StopIteration:
                return
            waited = clock() - start
            self.last_wait_s = waited
            self.total_wait_s += waited
            self.batches += 1
            if self.on_wait is not None:
                try:
                    self.on_wait(waited)
                except Exception:
                    if not self._callback_failed:
                        self._callback_failed = True
                        log.warning("TimedLoader on_wait callback failed; further failures are "
                                    "not logged", exc_info=True)
            yield batch

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]  # the loader's len(); TypeError where it has none

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found normally; delegate to the wrapped iterable.
        if name == "iterable":  # not yet set (e.g. during unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.iterable, name)

    def __repr__(self) -> str:
        return f"TimedLoader({self.iterable!r}, batches={self.batches}, total_wait_s={self.total_wait_s:.3f})"
