"""Synchronous collectives: a rank's wall step time is the slowest rank's compute plus its own overhead.

In DDP/FSDP a rank leaves a step's last collective only once every rank has reached it, so the slow
rank makes everyone slow and max / p50 of `step_time` across ranks stays ~1. The simulator must show
that, or its straggler tests pass on a signal real jobs never have.

A simulated rank cannot ask the others for their compute (16,384 ranks are threads in a few
processes), so the ranks agree on the step's slowest compute without talking, in O(1) per step plus
O(stragglers): the noise of the ranks without a straggler injection is drawn as "the maximum of n
normal draws, and who drew it" from a seed every rank shares (top quantile u**(1/n), argmax uniform
among them), and every other such rank's draw is conditioned to lie below that maximum (its own
uniform scaled by the top quantile). That is exactly the joint law of n independent draws, so each
rank's compute has the same distribution as without the model. The injected stragglers' compute is
drawn from their own seeds, which every rank can replay.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from statistics import NormalDist

SIGMA = 0.05  # log-normal spread of a rank's compute time per step
_NORMAL = NormalDist()
_TOP = math.nextafter(1.0, 0.0)  # inv_cdf needs a quantile below 1


def rank_rng(seed: int, rank: int, step: int) -> random.Random:
    """The generator of one rank's figures at one step; its first draw is the rank's compute noise."""
    return random.Random(hash((seed, rank, step)) & 0xFFFFFFFF)


def compute_s(base_s: float, z: float, factor: float) -> float:
    return base_s * math.exp(SIGMA * z) * factor


class StepMax:
    """What every rank agrees on at one step: the slowest compute of all, and its own noise given that.

    `slow` maps each rank with an active straggler injection to its factor; every other rank of
    `world_size` draws its noise from the shared maximum.
    """

    def __init__(self, seed: int, step: int, world_size: int, slow: dict[int, float], base_s: float) -> None:
        self.slow = {r: f for r, f in slow.items() if 0 <= r < world_size}
        free = world_size - len(self.slow)
        shared = random.Random(hash((seed, step)) & 0xFFFFFFFF)  # (seed, step): no rank's (seed, rank, step)
        self.top_q = min(_TOP, math.exp(math.log1p(-shared.random()) / free)) if free else 0.0
        self.argmax = _nth_not_in(shared.randrange(free), self.slow) if free else -1
        candidates = [compute_s(base_s, _NORMAL.inv_cdf(self.top_q), 1.0)] if free else []
        candidates += [compute_s(base_s, rank_rng(seed, r, step).gauss(0.0, 1.0), f) for r, f in self.slow.items()]
        self.max_s = max(candidates)

    def noise(self, rank: int, z: float) -> float:
        """Rank `rank`'s noise, from its own independent draw `z`: kept as is for a straggler, else the
        maximum (for the rank that drew it) or conditioned to lie below it."""
        if rank in self.slow:
            return z
        if rank == self.argmax:
            return _NORMAL.inv_cdf(self.top_q)
        return _NORMAL.inv_cdf(max(_NORMAL.cdf(z) * self.top_q, 1e-300))


def _nth_not_in(n: int, excluded: Iterable[int]) -> int:
    """The n-th (from 0) non-negative integer not in `excluded`."""
    rank = n
    for skip in sorted(excluded):
        if skip <= rank:
            rank += 1
    return rank
