"""Exponential backoff with full jitter, bounded: used by every reconnecting client."""

from __future__ import annotations

import random


class Backoff:
    def __init__(self, initial_s: float = 0.05, maximum_s: float = 2.0, factor: float = 2.0) -> None:
        self.initial_s, self.maximum_s, self.factor = initial_s, maximum_s, factor
        self._next = initial_s

    def next_delay(self) -> float:
        """The next wait: uniform in [0, current cap]; the cap grows by `factor` up to `maximum_s`."""
        cap = self._next
        self._next = min(self.maximum_s, self._next * self.factor)
        return random.uniform(cap / 2, cap)

    def reset(self) -> None:
        self._next = self.initial_s
