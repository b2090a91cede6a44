"""CPU-starved rank: a rank whose step thread waits for a CPU far more than the job's other ranks, step after step.

A neighbour on the rank's host (another job's process, a data-loader pool, a runaway logger, too many ranks for
the cores) holds the CPU the rank is ready to run on. The straggler rule does not name such a rank (descheduled
is not slow: docs/detectors.md, "straggler"), so until now it raised nothing. The signal is the SDK's per-step
`runqueue_wait` (telemetry/sdk/runqueue.py): the seconds of the step the rank's step thread was runnable but not
running, from /proc/thread-self/schedstat, two preads a step. Nothing else is read or sent for it.

The rule, per job and step, once both the step's `runqueue_wait` and `step_time` windows are in: a rank of the run-queue
window's exact top-k is *starved* at the step when its run-queue wait exceeds the job's median rank's by at least
`min_excess` of the job's median step time (in a job of two ranks: the other rank's), and is at least `min_wait_s`;
where the job logs `oncpu_time` (the same read), the median rank's wait is first scaled by the rank's CPU work over the
median rank's (collectors/detectors/cpu_work.py): a rank that does more CPU work queues more in proportion on a loaded
host, and is slow by itself (the straggler rule's), not starved. Relative to the median rank, because a host every rank
of which queues alike is the job's own oversubscription (or a machine loaded evenly), not a neighbour taking one rank's
CPU; and a job of one rank has no peer to compare with (not judged).
A rank starved in `needed` of the job's last `window` steps is named; the event (one per job, severity
warning) names every such rank and its host, with its queued share of the step and the median rank's, and
closes once no rank has been starved in more than `clear_below` of the last `window` steps for `clear_steps`
steps in a row (a rank starved off and on by a busy neighbour keeps one event, not one a minute); a rank
starved while it is open joins it. A rank outside the top-k is judged not starved when the top-k's smallest
wait is not starved itself; else (more starved ranks than k: the top-k is *saturated*) no followed rank's record
is aged by step number on that step: each holds its last `window` judgements, so ranks starved alike, each in
the top-k only some steps, still collect `needed` hits and whole starved hosts are named, not only the k ranks
that happen to lead. The event then says `more_than_k` and how many starved ranks it has seen.

What it cannot see: a rank slowed by a neighbour in other ways (memory bandwidth, a shared NIC, the page cache),
time lost by the rank's other threads (torch's intra-op pool, gloo's transport) while its step thread slept on
them, and a job whose SDK does not log `runqueue_wait` (not Linux, a kernel without schedstats, an older SDK).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from collectors.common.rows import Row
from collectors.detectors.base import Detector, fnum
from collectors.detectors.cpu_work import StepCpu, cpu_ratio, expected_queue
from telemetry.names import ONCPU_METRIC, RUNQUEUE_METRIC
from telemetry.summary import Summary

STEP_TIME = "step_time"
PENDING_STEPS = 16  # steps per job waiting for their other window (the two are finalised one by one)


@dataclass
class CpuStarvedConfig:
    enabled: bool = True
    min_excess: float = 0.25   # of the job's median step time, over the median rank's run-queue wait
    min_wait_s: float = 0.005  # and at least this long
    window: int = 10           # the job's last steps a rank's record holds
    needed: int = 8            # starved steps in its window that name it
    clear_below: int = 2       # the event closes once no rank is starved in more than this many of its window
    clear_steps: int = 30      # ... for this many steps in a row
    severity: str = "warning"
    # Where the job logs each rank's step-thread time on a CPU (`oncpu_time`), a rank's run-queue wait is compared
    # with the median rank's scaled by its CPU work over the median rank's (cpu_work.py): a rank that queues more
    # because it does more work (a CPU-bound straggler on a loaded host) is not starved by a neighbour
    oncpu_scale: bool = True
    # ... by the least of the rank's ratios of its last `oncpu_steps` steps, or its ratio this step less
    # `oncpu_margin`, whichever is more (cpu_work.cpu_ratio). This section's own: the same defaults as the straggler
    # rule's options of those names, set apart from them (changing one section's leaves the other's as it was)
    oncpu_steps: int = 5
    oncpu_margin: float = 0.5

    def __post_init__(self) -> None:
        if not (isinstance(self.oncpu_steps, int) and 1 <= self.oncpu_steps <= 1000):
            raise ValueError(f"cpu_starved: oncpu_steps must be in 1..1000, got {self.oncpu_steps!r}")
        if not (isinstance(self.oncpu_margin, (int, float)) and math.isfinite(self.oncpu_margin)
                and self.oncpu_margin >= 0):
            raise ValueError(f"cpu_starved: oncpu_margin must be a finite number >= 0, got {self.oncpu_margin!r}")
        if not 0 < self.needed <= self.window:
            raise ValueError(f"cpu_starved: needed must be in 1..window ({self.window}), got {self.needed}")
        if not 0 <= self.clear_below < self.needed:
            raise ValueError(f"cpu_starved: clear_below must be in 0..needed-1, got {self.clear_below}")
        if self.clear_steps < 1:
            raise ValueError(f"cpu_starved: clear_steps must be at least 1, got {self.clear_steps}")
        if self.min_excess <= 0 or self.min_wait_s < 0:
            raise ValueError("cpu_starved: min_excess must be > 0 and min_wait_s >= 0")


@dataclass
class _Rank:
    record: deque = field(default_factory=deque)   # (step, starved, wait share, median share), newest last

    def starved(self) -> int:
        return sum(1 for _, hit, _, _ in self.record if hit)

    def add(self, entry: tuple, window: int) -> None:
        self.record.append(entry)
        while len(self.record) > window:
            self.record.popleft()

    def age(self, step: int, window: int) -> None:
        """Forget what is older than the last `window` steps (a rank outside the top-k is not judged every
        step: its old starved steps must not add up over a longer stretch)."""
        while self.record and self.record[0][0] <= step - window:
            self.record.popleft()


@dataclass
class _Job:
    pending: dict[int, dict[str, Summary]] = field(default_factory=dict)
    last_judged: int = -1
    saturated_at: int | None = None  # the last step whose top-k held only starved ranks, with ranks outside it
    quiet: int = 0  # steps in a row with no rank starved in more than clear_below of its window
    step_s: float = 0.0  # the last judged step's step_time p50 (bounds an on-CPU row whose step_time is not in)
    cpu: dict[int, StepCpu] = field(default_factory=dict)  # the last oncpu_steps steps' on-CPU times (cpu_work.py)
    ranks: dict[int, _Rank] = field(default_factory=dict)


class CpuStarvedDetector(Detector):
    kind = "cpu_starved"
    metrics = frozenset({RUNQUEUE_METRIC, STEP_TIME, ONCPU_METRIC})

    def __init__(self, events, context=None, config: CpuStarvedConfig | None = None) -> None:
        super().__init__(events, context)
        self.config = config or CpuStarvedConfig()
        self._jobs: dict[str, _Job] = {}

    def observe(self, row: Row) -> None:
        if not row.key.is_step or row.late:
            return  # a late delta adds a rank that was missing: the step was judged without it, once
        job, step = row.key.job, row.key.index
        state = self._jobs.setdefault(job, _Job())
        if step <= state.last_judged:
            return
        windows = state.pending.setdefault(step, {})
        windows[row.key.metric] = row.summary
        if row.key.metric == ONCPU_METRIC:
            steps = windows.get(STEP_TIME)  # a step thread is on a CPU at most its step (cpu_work.StepCpu.of)
            step_s = steps.quantile(0.5) if steps is not None and steps.count else state.step_s
            cpu = StepCpu.of(row.summary, row.expected, step_s or math.inf) if self.config.oncpu_scale else None
            if cpu is not None:
                state.cpu[step] = cpu
                while len(state.cpu) > self.config.oncpu_steps:
                    del state.cpu[min(state.cpu)]
        if RUNQUEUE_METRIC not in windows or STEP_TIME not in windows:
            while len(state.pending) > PENDING_STEPS:  # a job without one of the two: nothing to judge
                del state.pending[min(state.pending)]
            return
        del state.pending[step]
        for old in [s for s in state.pending if s < step]:
            del state.pending[old]  # finalised in order: an older step missing its other window will not get it
        state.last_judged = step
        self._judge(job, state, step, windows[RUNQUEUE_METRIC], windows[STEP_TIME])

    def _judge(self, job: str, state: _Job, step: int, queued: Summary, steps: Summary) -> None:
        c = self.config
        if queued.count < 2 or steps.count == 0:
            return  # no peer to compare with
        step_s = steps.quantile(0.5)
        if not step_s > 0:
            return
        state.step_s = step_s
        median = queued.quantile(0.5) if queued.count > 2 else queued.min  # of two ranks: the other one's
        top = queued.top()

        def hit(wait: float, rank: int) -> bool:
            # over what the median rank would have queued doing the rank's CPU work (the suite hands a step's
            # on-CPU times before its run-queue waits)
            expected = expected_queue(median, cpu_ratio(state.cpu, rank, step, c.oncpu_steps, c.oncpu_margin))
            return wait >= c.min_wait_s and (wait - expected) >= c.min_excess * step_s

        for wait, rank in top:
            self._note(state, rank, step, hit(wait, rank), wait / step_s, median / step_s)
        saturated = bool(top) and hit(*top[-1]) and queued.count > len(top)
        if saturated:
            state.saturated_at = step
        elif top:
            listed = {rank for _, rank in top}
            for rank in [r for r in state.ranks if r not in listed]:
                self._note(state, rank, step, False, None, median / step_s)
        self._decide(job, state, step, saturated)

    def _note(self, state: _Job, rank: int, step: int, starved: bool, share: float | None, median: float) -> None:
        record = state.ranks.get(rank)
        if record is None:
            if not starved:
                return  # only ranks once starved are followed
            record = state.ranks[rank] = _Rank()
        record.add((step, starved, share, median), self.config.window)

    def _decide(self, job: str, state: _Job, step: int, saturated: bool) -> None:
        c = self.config
        for rank in list(state.ranks):
            if not saturated:  # saturated: a rank outside the top-k keeps its last judgements, not aged away
                state.ranks[rank].age(step, c.window)
            if not state.ranks[rank].starved():
                del state.ranks[rank]  # only ranks starved within the window are followed
        named = sorted(r for r, rec in state.ranks.items() if rec.starved() >= c.needed)
        open_event = self.events.get_open(self.kind, job)
        state.quiet = state.quiet + 1 if all(rec.starved() <= c.clear_below for rec in state.ranks.values()) else 0
        if not named:
            if open_event is not None and state.quiet >= c.clear_steps:
                self.clear(job, step=step)
            return
        if open_event is not None and set(named) <= set(open_event.ranks):
            return  # no rank starved that the event does not name already
        if open_event is not None:
            named = sorted(set(named) | set(open_event.ranks))  # an open event keeps the ranks it named
            named = [r for r in named if r in state.ranks] or named
        hosts = self.context.hosts_of(job)
        listed = []
        for rank in named[:32]:
            rec = state.ranks[rank].record
            shares = sorted(s for _, hit, s, _ in rec if hit and s is not None)
            medians = sorted(m for _, hit, _, m in rec if hit)
            listed.append({"rank": rank, "host": hosts.get(rank), "starved_steps": state.ranks[rank].starved(),
                           "of_steps": len(rec), "queued_share": fnum(shares[len(shares) // 2], 3),
                           "median_rank_queued_share": fnum(medians[len(medians) // 2], 3)})
        first = listed[0]
        where = f"on host {first['host']}" if first["host"] else "(host unknown)"
        detail = {
            "summary": (f"rank {first['rank']} {where} waited for a CPU {first['queued_share']:.0%} of its steps "
                        f"(the job's median rank {first['median_rank_queued_share']:.0%}) in "
                        f"{first['starved_steps']} of its last {first['of_steps']} steps"
                        + (f"; {len(named) - 1} more rank(s)" if len(named) > 1 else "")),
            "ranks": listed,
            "starved_ranks_seen": len(named),
            "more_than_k": state.saturated_at is not None and state.saturated_at > step - c.window,
            "rule": {"min_excess": c.min_excess, "min_wait_s": c.min_wait_s, "needed": c.needed,
                     "window": c.window},
        }
        start = min(s for rank in named for s, hit, _, _ in state.ranks[rank].record if hit)
        self.raise_(job, step=start if open_event is None else None, ranks=named, detail=detail,
                    severity=c.severity)
