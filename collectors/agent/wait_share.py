"""Each rank's running wait share, kept by its agent and sent up as a metric (issue 24 item 2).

The root names the rank the others wait for from the exact `argmin` of `collective_wait` per step
(collectors/detectors/wait_score.py). That is enough for a rank 1.5x or 2x slower: it waits least step after
step. A slight straggler among many noisy ranks is not: at 16,384 ranks with 5 % compute noise per rank and
step, the slowest clean rank of a step is ~20 % over the median, so a 1.2x rank waits least on only some of
its steps and the root, which keeps no per-rank history (O(k) per job, whatever the world), cannot average a
rank's own steps.

So the persistence is kept where the per-rank data is: the agent, which sees each of its ranks' steps whole,
keeps per rank an exponentially weighted running average of the rank's **wait share** (the share of its
step it spent waiting in collectives: `collective_wait / (collective_wait + work_time)`) and logs it, sealed
with the step, as one more per-step metric of the rank, `collective_wait_share_ewma`
(telemetry.names.WAIT_SHARE_METRIC). The tree merges it like any metric: `argmin` and `min` are exact at every
tier (DESIGN §3), the p50 is the t-digest's, so the root reads, in O(1) per step, which rank has waited least
over its recent steps and by how much less than the median rank: the straggler's share sits ~(f - 1) / f
under the median's (0.17 at 1.2x, 0.09 at 1.1x) while a clean rank's running share is the median's up to its
averaged noise. With `ALPHA` = 1/8 (a span of ~15 steps) a rank's per-step noise is cut ~4x (the variance by
alpha / (2 - alpha)): among 16,384 simulated ranks the lowest clean running share lies ~0.04 under the
median, a 1.2x rank's ~0.17, a 1.1x rank's ~0.08.

What it costs: one float per (job, rank) this agent hosts (up to SEED_STEPS during a rank's first steps, while its
average is seeded: `WaitShares`), one more value per rank and step up the tree. A
rank's value leaves with the step's other windows and is held for durability by the same batches that carried
the rank's wait and work (a batch is DURABLE once its derived value is too). A rank that logs no
`work_time`, or a step without both figures, gets no value that step; a step older than the rank's last one
seen (a resend after an agent restart) leaves the average as it is. Restarting the agent restarts every
average (the root's rule does not judge a job's first steps). The root's rule on it: docs/detectors.md,
"straggler".
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping

from collectors.agent.intake import OpenStep, RankValues
from collectors.delivery.windows import Origin
from telemetry.names import RUNQUEUE_METRIC, WAIT_METRIC, WAIT_SHARE_METRIC, WORK_METRIC

ALPHA = 0.125  # the weight of a step's share in the running average: a span of ~15 steps
SEED_STEPS = 5  # a rank's average starts as the median of its first shares (docs/detectors.md, candidate D)


def excess_queued(queued: Mapping[int, float], busy: Mapping[int, float]) -> dict[int, float]:
    """Per rank, its run-queue wait over what the median rank of the step (among those given: an agent's own
    ranks) would have queued in its place: the median run-queue wait scaled by the rank's running time (its
    busy time, `work_time`, less its run-queue wait) over the median running time, when over 1 (the root's
    rule, collectors/detectors/straggler.py `_excess`). On a host where every thread gets only part of a CPU a
    rank doing more CPU work queues more in proportion: its absolute excess would discount a CPU-bound
    straggler's lead by ~(L - 1) / L at L threads per CPU; a descheduled rank runs as long as its peers and
    keeps its whole excess. A rank alone among the given ones is its own median: no discount (one rank per
    host: the root's per-step discount still acts)."""
    ranks = [r for r in queued if r in busy and math.isfinite(queued[r]) and math.isfinite(busy[r])]
    if not ranks:
        return {}
    own = {r: max(0.0, queued[r]) for r in ranks}
    running = {r: busy[r] - own[r] for r in ranks}
    q_median = statistics.median(own.values())
    running_median = statistics.median(running.values())
    out = {}
    for r in ranks:
        ratio = running[r] / running_median if running_median > 0 else 1.0
        out[r] = max(0.0, own[r] - q_median * max(1.0, ratio))
    return out


class WaitShares:
    """Per (job, rank) this agent hosts: the running wait share and the last step it took in.

    `seed_steps`: a rank's average starts as the median of its first `seed_steps` shares (reported as the median
    of those so far until then) and is weighted from there on; 1 starts it at the first share. Why more than one:
    a job's first steps hold its processes' start (a rank waiting for peers still starting), and a seed weighs
    (1 - alpha)^n n steps later, (7/8)^16 = 0.12 at the root's first level samples; the median of five is untouched
    by any two skewed steps (docs/detectors.md, candidate D: its two pre-registered tests)."""

    def __init__(self, alpha: float = ALPHA, seed_steps: int = SEED_STEPS) -> None:
        if not 0.0 < alpha <= 1.0:
            raise ValueError(f"alpha must be in (0, 1], got {alpha}")
        if seed_steps < 1:
            raise ValueError(f"seed_steps must be at least 1, got {seed_steps}")
        self.alpha = alpha
        self.seed_steps = seed_steps
        self._avg: dict[tuple[str, int], tuple[int, float]] = {}  # (job, rank) -> (last step, running share)
        self._seeds: dict[tuple[str, int], list[float]] = {}  # (job, rank) -> its first shares, while seeding

    def __len__(self) -> int:
        return len(self._avg)

    def update(self, job: str, rank: int, step: int, wait_s: float, work_s: float,
               queued_s: float = 0.0) -> float | None:
        """One step of one rank: its running share after it, or None when the step gives none (missing or
        non-finite figures, a step that is not after the rank's last). `queued_s`, the rank's run-queue wait of
        the step (telemetry/sdk/runqueue.py) over what its peers' would explain (`excess_queued`), counts as not
        its own work: the share is (wait + queued) / step, so
        a rank descheduled while the others waited for it keeps the share of its peers (a non-finite or negative
        one counts as 0)."""
        total = wait_s + work_s
        if not (math.isfinite(total) and wait_s >= 0.0 and work_s >= 0.0 and total > 0.0):
            return None
        if not (math.isfinite(queued_s) and queued_s > 0.0):
            queued_s = 0.0
        share = min(1.0, (wait_s + queued_s) / total)
        key = (job, rank)
        last = self._avg.get(key)
        if last is not None and step <= last[0]:
            return None
        seeds = self._seeds.get(key)
        if last is None or seeds is not None:
            seeds = [share] if seeds is None else [*seeds, share]
            avg = statistics.median(seeds)
            if len(seeds) < self.seed_steps:
                self._seeds[key] = seeds
            else:
                self._seeds.pop(key, None)
        else:
            avg = last[1] + self.alpha * (share - last[1])
        self._avg[key] = (step, avg)
        return avg

    def add_to(self, open_step: OpenStep, hold: Callable[[Origin], None], admit: Callable[[str], bool]) -> int:
        """Add each rank's running share to a step about to be sealed (the caller holds the node's lock), held
        by the batches that carried its wait and work (`hold`, once per origin, as the intake holds each
        metric's); returns how many ranks got one. `admit(job)` says whether the job's metric budget takes the
        name (a job at its cap gets no running share, and its own metrics are not refused for it)."""
        waits = open_step.metrics.get(WAIT_METRIC)
        works = open_step.metrics.get(WORK_METRIC)
        queued = open_step.metrics.get(RUNQUEUE_METRIC) or {}
        if not waits or not works or WAIT_SHARE_METRIC in open_step.metrics or not admit(open_step.job):
            return 0
        shares: dict[int, RankValues] = {}
        excess = excess_queued({rank: math.fsum(values.values) for rank, values in queued.items()},
                               {rank: math.fsum(work.values) for rank, work in works.items()})
        for rank, wait in waits.items():
            work = works.get(rank)
            if work is None:
                continue
            rank_queued = queued.get(rank)
            avg = self.update(open_step.job, rank, open_step.step, math.fsum(wait.values), math.fsum(work.values),
                              excess.get(rank, 0.0))
            if avg is None:
                continue
            origins = list(dict.fromkeys(wait.origins + work.origins
                                         + (rank_queued.origins if rank_queued is not None else [])))
            for origin in origins:
                hold(origin)
            shares[rank] = RankValues([avg], origins, min(wait.first_ns, work.first_ns),
                                      max(wait.last_ns, work.last_ns))
        if shares:
            open_step.metrics[WAIT_SHARE_METRIC] = shares
        return len(shares)

    def forget(self, job: str) -> None:
        """A finished job: its ranks' averages go."""
        for key in [key for key in self._avg if key[0] == job]:
            del self._avg[key]
            self._seeds.pop(key, None)
