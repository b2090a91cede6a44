"""A warning that can repeat thousands of times a second, logged at most once per interval with a count."""

from __future__ import annotations

import logging
import time

DEFAULT_EVERY_S = 10.0


class RateLimitedLog:
    """Shared by the SDK (telemetry/sdk/sender.py) and the services (collectors/)."""

    def __init__(self, logger: logging.Logger, every_s: float = DEFAULT_EVERY_S) -> None:
        self.logger = logger
        self.every_s = every_s
        self._last = float("-inf")
        self._suppressed = 0

    def warn(self, message: str, *args: object) -> bool:
        """Log `message` unless one was logged less than `every_s` ago; True if this one was."""
        now = time.monotonic()
        if now - self._last < self.every_s:
            self._suppressed += 1
            return False
        if self._suppressed:
            message += f" (and {self._suppressed} more like it since the last report)"
        self.logger.warning(message, *args)
        self._last, self._suppressed = now, 0
        return True
