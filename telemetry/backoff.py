"""The one reconnect backoff of the tree: `telemetry.retaining.RetainingStream.run` waits it out between sessions
for the SDK's sender (rank -> agent) and delivery's outbox (tier -> parent).

Exponential with "equal jitter": each wait is drawn uniformly from [cap/2, cap], where the cap starts at
`initial_s` and is multiplied by `factor` after every draw, never past `maximum_s`. So a wait is never
shorter than half the current cap (a fleet reconnecting at once still spreads over [cap/2, cap]) and never
longer than `maximum_s`; `reset()` (after a stream that worked) starts again from `initial_s`. With the
defaults the caps are 0.05, 0.1, 0.2, ... 1.6, then 2.0 s for good.
"""

from __future__ import annotations

import random


class Backoff:
    """Waits between reconnects: uniform in [cap/2, cap]; the cap doubles (by `factor`) up to `maximum_s`."""

    def __init__(self, initial_s: float = 0.05, maximum_s: float = 2.0, factor: float = 2.0) -> None:
        self.initial_s, self.maximum_s, self.factor = initial_s, maximum_s, factor
        self._next = initial_s

    def next_delay(self) -> float:
        """The next wait, uniform in [cap/2, cap] for the current cap; then the cap grows by `factor`,
        bounded by `maximum_s`."""
        cap = self._next
        self._next = min(self.maximum_s, self._next * self.factor)
        return random.uniform(cap / 2, cap)

    def reset(self) -> None:
        """After a connection that worked: the next wait is drawn from [initial_s/2, initial_s] again."""
        self._next = self.initial_s
