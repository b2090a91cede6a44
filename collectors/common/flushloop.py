"""A server's flush loop, and the health it reports: healthy only while flushes succeed.

Why: the systemd watchdog and the gRPC health service must say whether this node makes progress
(forwards, persists), not merely whether a thread is alive. A loop that ticks while every flush
raises (a full disk under the root's store, say) looked healthy before. A failing flush is logged
once per `log_every_s` with the count of failures since the last line, not 50 times a second.

A flush returns the time (monotonic) its next work is due, and the loop sleeps until then unless `wake()` says work
came meanwhile (the agent: a rank's message, a hardware sample; a collector: a unit from a child); flushes stay
`interval_s` apart either way, so work that comes together is flushed together. A flush that returns None (nothing
due) or raises is run again after `interval_s`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

log = logging.getLogger(__name__)

STALE_AFTER_S = 10.0  # no successful flush for this long: unhealthy (watchdog not pinged, NOT_SERVING)
LOG_EVERY_S = 10.0


class FlushLoop:
    def __init__(self, name: str, flush: Callable[[], float | None], interval_s: float,
                 stale_after_s: float = STALE_AFTER_S, log_every_s: float = LOG_EVERY_S) -> None:
        self.name = name
        self._flush = flush
        self.interval_s = interval_s
        self.stale_after_s = stale_after_s
        self.log_every_s = log_every_s
        self.last_ok = time.monotonic()
        self.failures = 0          # consecutive failed flushes
        self._unlogged = 0         # failures since the last log line
        self._logged_at = float("-inf")
        self.next_due: float | None = None  # what the last flush returned: when its next work is due
        self.flushes = 0
        self.stop_event = threading.Event()
        self._woken = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def healthy(self, now: float | None = None) -> bool:
        """A flush succeeded within stale_after_s (a flush that hangs turns this false too)."""
        now = time.monotonic() if now is None else now
        return now - self.last_ok < self.stale_after_s

    def start(self) -> None:
        self._thread.start()

    def wake(self) -> None:
        """Work came (from any thread): flush now, or `interval_s` after the last flush."""
        self._woken.set()

    def stop(self, timeout: float = 2.0) -> None:
        self.stop_event.set()
        self._woken.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def once(self) -> bool:
        """One flush; True if it succeeded. Also what the thread runs."""
        now = time.monotonic()
        self.flushes += 1
        try:
            self.next_due = self._flush()
        except Exception as exc:
            self.next_due = None
            self._failed(exc, now)
        else:
            if self.failures:
                log.warning("%s: flushing again after %d failed attempts", self.name, self.failures)
            self.last_ok, self.failures, self._unlogged = time.monotonic(), 0, 0
        return self.failures == 0

    def _failed(self, exc: Exception, now: float) -> None:
        self.failures += 1
        self._unlogged += 1
        if now - self._logged_at >= self.log_every_s:
            log.error("%s: flush failed (%d failures since the last report, %d in a row; %.0f s since the last "
                      "success): %s", self.name, self._unlogged, self.failures, now - self.last_ok, exc,
                      exc_info=self._logged_at == float("-inf"))
            self._logged_at, self._unlogged = now, 0

    def _run(self) -> None:
        last = time.monotonic()
        next_at = last + self.interval_s
        while not self.stop_event.is_set():
            wait = next_at - time.monotonic()
            if wait > 0 and self._woken.wait(wait):
                spacing = last + self.interval_s - time.monotonic()  # woken early: still interval_s apart
                if spacing > 0:
                    self.stop_event.wait(spacing)
            if self.stop_event.is_set():
                return
            self._woken.clear()
            last = time.monotonic()
            self.once()
            due = self.next_due
            next_at = last + self.interval_s if due is None else max(due, last + self.interval_s)
