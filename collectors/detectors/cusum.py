"""A job-wide CUSUM with lanes: the severity-aware rule mfu_drop and dataloader_stall share (issue 24 item 3).

Each step the detector turns its figure into evidence `e` (mfu_drop: the relative drop below the run's robust
baseline beyond `noise_k` robust sigmas of its own spread; dataloader_stall: the worst rank's wait fraction
above its baseline beyond the same allowance). Each lane is Page's one-sided CUSUM with its own reference
`drift` and `threshold`:

    S <- min(cap x threshold, max(0, S + e - drift))

and the job is named when any lane's `S / threshold` reaches 1. A lane with a high reference and a low
threshold (the fast lane) names a large excess in one or two steps and ignores small ones altogether; one with
a low reference and a high threshold (the slow lane) sums a small excess over tens of steps. The delay is
therefore about threshold / (e - drift): it shrinks with the severity, which a fixed persistence window
(mfu_drop's 40 steps before issue 24) cannot do. The cap bounds how long a lane takes to fall back after
the excess ends (`cap` x threshold / drift steps at most). `since` is the step the highest lane left zero:
the CUSUM's estimate of the onset, the event's step.

Unlike collectors/detectors/wait_score.py (one score per candidate rank: who is slow), this is one score per
job (is the job worse than itself), O(lanes) state.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

Z90 = 1.2816  # the standard normal's 90th percentile: (p90 - p50) / Z90 is sigma for normal noise


@dataclass
class CusumLane:
    drift: float
    threshold: float
    cap: float = 2.0
    clip: float = math.inf    # the most one step's evidence counts for (so one wild step cannot name the job)
    score: float = 0.0
    since: int | None = None  # the step the score left zero
    since_time: float = 0.0   # when that step happened (unix s)

    def update(self, step: int, evidence: float, time: float = 0.0) -> None:
        score = self.score + min(evidence, self.clip) - self.drift
        if score <= 0.0:
            self.score, self.since = 0.0, None
            return
        if self.since is None:
            self.since, self.since_time = step, time
        self.score = min(score, self.cap * self.threshold)

    @property
    def ratio(self) -> float:
        return self.score / self.threshold


def tail_sigma(values: Iterable[float], upper: bool) -> float:
    """The spread of `values` on one side of their median, as a sigma: (p90 - p50) / 1.2816 (`upper`) or
    (p50 - p10) / 1.2816. The side judged is the one that matters: the worst rank's data-loader wait is skewed
    (a max over ranks of a log-normal), and 3 MAD sigmas above its median were crossed every few steps of clean
    series (bench/drop_rules.py, loaded); a shared host's MFU dips on its low side only."""
    values = list(values)
    if len(values) < 3:
        return 0.0
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    median = statistics.median(values)
    return max(0.0, (deciles[-1] - median) if upper else (median - deciles[0])) / Z90


def parse_lanes(value: object, field_name: str) -> tuple[tuple[float, ...], ...]:
    """Lanes as configured: a list of [drift, threshold] or [drift, threshold, clip] lists, drift >= 0, threshold
    and clip > 0 (ValueError naming `field_name` otherwise)."""
    if not isinstance(value, (list, tuple)) or not value:
        raise ValueError(f"{field_name}: a non-empty list of [drift, threshold(, clip)] lanes")
    lanes = []
    for lane in value:
        if (not isinstance(lane, (list, tuple)) or len(lane) not in (2, 3)
                or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in lane)):
            raise ValueError(f"{field_name}: each lane is [drift, threshold] or [drift, threshold, clip], got {lane!r}")
        numbers = tuple(float(v) for v in lane)
        if not (all(math.isfinite(v) and v < 1e6 for v in numbers) and numbers[0] >= 0
                and all(v > 0 for v in numbers[1:])):
            raise ValueError(f"{field_name}: a lane's drift must be >= 0, its threshold and clip > 0, got {lane!r}")
        lanes.append(numbers)
    return tuple(lanes)


def lane_name(index: int, lanes: int) -> str:
    """The default two lanes by name (fast, slow), for an event's detail; configured ones by number."""
    return ("fast", "slow")[index] if lanes == 2 else f"lane {index}"


class Cusum:
    """The lanes of one job; `ratio` (the highest lane's score / threshold) names the job at 1."""

    def __init__(self, lanes: Iterable[Sequence[float]], cap: float = 2.0) -> None:
        self.lanes = [CusumLane(float(lane[0]), float(lane[1]), cap, float(lane[2]) if len(lane) > 2 else math.inf)
                      for lane in lanes]
        self.calm_steps = 0  # judged steps in a row without evidence (while an event is open)

    def update(self, step: int, evidence: float, time: float = 0.0) -> None:
        for lane in self.lanes:
            lane.update(step, evidence, time)

    def leading(self) -> tuple[int, CusumLane]:
        """The lane that rates the job highest, and its index (0: the first configured)."""
        index = max(range(len(self.lanes)), key=lambda i: self.lanes[i].ratio)
        return index, self.lanes[index]

    @property
    def ratio(self) -> float:
        return self.leading()[1].ratio

    def since(self) -> int | None:
        return self.leading()[1].since

    def reset(self) -> None:
        for lane in self.lanes:
            lane.score, lane.since = 0.0, None
        self.calm_steps = 0

    def calm(self, clear_steps: int) -> bool:
        """One more judged step without evidence: True once `clear_steps` came in a row, and the lanes start
        afresh (the detector then closes its event)."""
        self.calm_steps += 1
        if self.calm_steps < clear_steps:
            return False
        self.reset()
        return True

    def stir(self) -> None:
        """A step with evidence, or one that must keep an open event from closing: the calm run starts again."""
        self.calm_steps = 0
