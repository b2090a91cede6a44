"""How much of a rank's run-queue wait its own CPU work explains: CPU work is not descheduling (issue 24).

On a host where every runnable thread gets 1 / L of a CPU, a thread waits on the run queue (L - 1) times the time
it runs. A rank that does f times the CPU work of the job's median rank per step (a CPU-bound straggler) so
queues f times the median rank's run-queue wait: slow by itself, its excess queueing is the price of its own
work. A rank that queues more *for the same CPU work* was descheduled (a neighbour, or the job's other ranks,
held the CPU it was ready to run on). The SDK logs each rank's step-thread time on a CPU per step (`oncpu_time`,
telemetry/sdk/runqueue.py: the same schedstat read as `runqueue_wait`), so the rules that weigh a rank's run-queue
wait against the median rank's (straggler's `descheduled_leave` and `starved_leave`, cpu_starved) compare it with
the median rank's scaled by the rank's CPU work over the median rank's, when over 1: what the median rank would
have queued doing the rank's work on the same host.

Where the step's on-CPU figures are unknown (an SDK from before them, a kernel that counts nothing, a rank
outside the row's exact top-k and bottom-k, a row missing ranks, a rank reporting more than the job's typical
step) the median rank's wait is taken as it is: the
rules are what they were without it. What it cannot see: CPU work on the rank's other threads (torch's intra-op
pool, gloo's transport threads) - only the step thread is read; and a host whose load changes within a step.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from collectors.detectors.base import p50
from telemetry.summary import Summary


@dataclass(frozen=True)
class StepCpu:
    """One step's on-CPU seconds: the median rank's, and by rank those of the row's exact top-k and bottom-k."""

    median: float
    by_rank: dict[int, float]

    @classmethod
    def of(cls, s: Summary, expected: int, step_s: float = math.inf) -> StepCpu | None:
        """The step's figures, or None where they cannot scale anything: a row missing ranks (its median is
        not the job's), a kernel that counts nothing (every rank 0), non-finite values, a median over `step_s`.

        `step_s` is the job's typical step (its step_time p50: the step's own where known, else the last one
        seen): a step thread is on a CPU at most as long as its step, and a rank reporting more (a broken or
        hostile client) is taken as unknown (about the median rank's work, ratio 1), not believed. Believed, one
        rank of a 4-rank job descheduled at 2x on a host of 8 runnable threads per CPU that reported 10 s on a
        CPU in a 0.9 s step was named a straggler the step after its onset and cpu_starved stayed silent: the
        host problem hidden (tests/test_straggler_cpu_work.py)."""
        if len(s.sources) < expected or s.count < 2:
            return None
        median = p50(s) if s.count > 2 else s.min
        if not (math.isfinite(median) and 0 < median <= step_s):
            return None
        by_rank = {rank: value for value, rank in (*s.bottom(), *s.top()) if math.isfinite(value) and value <= step_s}
        return cls(median, by_rank)


def cpu_ratio(history: Mapping[int, StepCpu], rank: int, step: int, steps: int, margin: float) -> float | None:
    """`rank`'s CPU work over the median rank's on `step`, counted only where it is not the noise of the rank
    that happens to wait least: the least of its ratios over its last `steps` steps (every step the history
    holds up to `step`, not only those where it led), or the step's own ratio less `margin`, whichever is more;
    a rank outside a row's exact top-k and bottom-k did about as much as the median rank (1). None where
    `step`'s own figures are unknown.

    Why not the step's own ratio: the rank that waits least on a step is, more often than not, one whose CPU
    work ran long on that step by chance. On the recorded clean runs of bench/detection.py (9,860 steps) the
    least-waiting rank's CPU work on its step was the median rank's x 1.08 at the 90th percentile, x 1.23 at the
    99th, x 1.61 at most, and scaling by it raised the replayed false alarms from 5 to 13 in 10,770 clean steps.
    A CPU-bound straggler does more CPU work on every step: after `steps` steps the least of them is its own
    (slight ones: 1.1x, 1.2x); and a severe one's first steps are over the noise by far (a 2x rank's own ratio
    less the margin of 0.5 is 1.5: most of its queueing is its own from its first step)."""
    if step not in history:
        return None

    def ratio(s: int) -> float:
        return history[s].by_rank.get(rank, history[s].median) / history[s].median

    recent = sorted((s for s in history if s <= step), reverse=True)[:steps]
    return max(min(ratio(s) for s in recent), ratio(step) - margin)


def expected_queue(median_queue: float, ratio: float | None) -> float:
    """The run-queue wait the median rank would have had doing a rank's CPU work: the median rank's wait scaled
    by the rank's CPU work over the median rank's (`ratio`, when over 1); the median rank's wait itself where it
    is unknown."""
    return median_queue if ratio is None else median_queue * max(1.0, ratio)
