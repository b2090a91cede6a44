"""The evidence that one rank makes the others wait, accumulated over steps in O(k) per job.

Each step the root knows, exactly and in constant size whatever the world, the rank that waited least in
collectives (`collective_wait`'s `argmin`, telemetry.torch.waits) and how much longer the median rank
waited (`gap` = p50 - min), and the step's length (`step_time`'s p50). The least-waiting rank is the one
the others waited for; `x = gap / step` is the share of the step they lost to it: ~(f - 1) / f for a rank
f times slower (0.5 at 2x, 0.33 at 1.5x, 0.17 at 1.2x, 0.09 at 1.1x).

On a clean job the least-waiting rank changes from step to step (the scheduler, the network, the data
make each rank late now and then). A straggler is the same rank step after step. Two CUSUMs per candidate
rank (Page's sequential test), each a `Lane` with its own reference `drift` and `threshold`, tell them
apart with a delay that shrinks with the severity:

    the step's least-waiting rank r:   S_r <- min(cap x threshold, S_r + x - drift)
    every other tracked rank q:        S_q <- max(0, S_q - x - drift)

A noise rank climbs by its gap on the steps it is least-waiting and falls by the others' gaps on the steps
it is not: on a clean job its score drifts down. A straggler climbs every step by about its own slowdown.
The fast lane (drift 0.15, threshold 0.8) names a 2x rank in ~3 steps and a 1.5x one in ~4-5, and ignores a
rank held back by 20-30 % for tens of steps, or by any factor for two (what the oversubscribed bench machine
does to clean jobs: it names a rank only once it waited least on `fast_steps` = 3 steps of evidence for that
lane, x over its reference, in one unbroken run of consecutive least-waiting steps);
the slow lane (0.08, 1.5) names a 1.2x rank in ~15-25 steps. A third, the persistence lane, names a rank
that waited least on `share` (60 %) of the last `window` (60) steps with a mean evidence of at least
`min_evidence` (0.04): a 1.1x rank, under the slow lane's reference, in ~40-80 steps. A gap under
`min_gap_s` is no evidence (the step's own scheduling jitter). `ratio` = score / threshold (the highest
lane) is what is judged (1 names the rank) and reported.

The references are relative to the job's own evidence level: a job whose ranks take turns waiting least by a
large share of the step when nobody is slow (a tensor-parallel job's pairs, short steps on an oversubscribed
host: the median clean step's evidence 0.25-0.35 there, 0.02-0.12 in the other shapes measured) would
otherwise climb the lanes on every burst of the scheduler's. So every lane's reference is raised by how far
the median evidence of the job's last `background` steps lies above `reference` (0.12, the highest
clean median measured outside the tensor-parallel shape): steps whose least-waiting rank is named
(ratio >= 1) are left out, so a straggler does not raise the bar it is judged by, and so are steps of a job
whose other least-waiting ranks of the last 8 steps are all different (a large world's noise, spread over
ranks: `observe`). The raise is at most
`max_raise` (0.2, about the tensor-parallel level measured: a short job's start-up steps, the noisiest,
must not lift it further and delay a 2x rank). A 2x rank in such a job still adds ~0.5-0.7 a step (named
in 2-3 steps); a burst of one rank held back by ~1.5x for 4-5 steps no longer names it. What it cannot
tell apart: a rank held back by 2x or more for 3 or more steps in a row is, for those steps, a straggler
(the bound is 2x within 3 steps); the loaded bench machine does that to clean jobs now and then
(docs/detectors.md).

The state is bounded: per lane at most `track` ranks with a positive score per job (the lowest is dropped
when a new rank needs a place), and the last `window` steps' least-waiting rank, whatever the world size;
nothing per rank of the job is kept. A rank's score starts at the step it left zero (`since`): the event's
step, the CUSUM's estimate of the onset (for the persistence lane: where its run of least-waiting steps
began).

**The running share** (issue 24 item 2). At 16,384 ranks a slight straggler is not the least-waiting rank of
most steps (the slowest of 16,383 noisy ranks competes with it), and the root keeps no per-rank history. Each
rank's agent keeps its running wait share instead (collectors/agent/wait_share.py, the metric
`collective_wait_share_ewma`), whose exact argmin the tree merges: the rank that waited least over its recent
steps, and by how much less than the median rank (`x` = p50 - min, already a share of a step). When the job
has it (`update_running`), the slow lane takes its evidence from it, and a running persistence lane (the
lowest share on `running_share` = 80 % of the window: an average's lowest rank is sticky) joins the per-step
one; the fast lane and the per-step persistence lane keep the per-step evidence (a 2x rank is named in 2-3
steps, before a running average could move). Without it every lane takes the per-step evidence, as before.
On the running shares the bar (`running_floor`) is the job's own level of them plus `running_spread_k` times
their spread (median absolute deviation), at least `running_margin`: averaged, the lowest clean share stays
near the level step after step (its spread ~0.003 at 16,384 simulated ranks), while a loaded host's bursts
widen it on a small real job. A rank on its way up the lanes, or with the lowest share on half the window,
is left out of that level (a slight straggler's own gap must not become the level it is judged against).
"""

from __future__ import annotations

import math
import statistics
from collections import Counter, deque
from collections.abc import Container
from dataclasses import dataclass, field


@dataclass
class Lane:
    """One CUSUM, tuned to one range of severities: `drift` is its reference (evidence per step below it
    is noise to this lane), `threshold` the score that names the rank. Scores are kept for at most `track`
    ranks (the lowest dropped); `since` is when each left zero."""

    drift: float
    threshold: float
    cap: float
    track: int
    scores: dict[int, float] = field(default_factory=dict)
    since: dict[int, int] = field(default_factory=dict)

    def update(self, step: int, least: int, x: float) -> None:
        for rank in list(self.scores):
            if rank != least:
                score = self.scores[rank] - x - self.drift
                if score <= 0:
                    del self.scores[rank]
                    self.since.pop(rank, None)
                else:
                    self.scores[rank] = score
        score = self.scores.get(least, 0.0) + x - self.drift
        if score <= 0:
            self.scores.pop(least, None)
            self.since.pop(least, None)
            return
        if least not in self.scores:
            if len(self.scores) >= self.track:
                lowest = min(self.scores, key=lambda r: self.scores[r])
                del self.scores[lowest]
                self.since.pop(lowest, None)
            self.since[least] = step
        self.scores[least] = min(score, self.cap * self.threshold)


class WaitScore:
    """Two lanes by default: a fast one for severe stragglers (a high reference, a low threshold: a 2x rank
    named in ~2 steps, while a rank held back by 20-30 % for many steps - what the loaded bench machine does
    to clean jobs - never climbs it) and a slow one for slight ones (a low reference, a high threshold: a
    1.2x rank in ~15-20 steps). `ratio` = score / threshold, the highest over the lanes, is what is reported
    and judged: a rank is named at 1."""

    def __init__(self, lanes: tuple[tuple[float, float], ...] = ((0.15, 0.8), (0.08, 1.5)), cap: float = 2.0,
                 track: int = 8, min_gap_s: float = 0.002, window: int = 60, share: float = 0.6,
                 min_evidence: float = 0.04, background: int = 64, reference: float = 0.12,
                 max_raise: float = 0.2, running_drifts: tuple[float, ...] | None = None,
                 running_margin: float = 0.01, running_spread_k: float = 3.0, fast_steps: int = 3,
                 spread_window: int = 8, spread_min: int = 5, persist_z: float = 3.5) -> None:
        self.lanes = [Lane(drift, threshold, cap, track) for drift, threshold in lanes]
        self.drifts = [drift for drift, _ in lanes]
        # The job's own evidence level: the last `background` steps' evidence whose least-waiting rank was not
        # named; its median above `reference` raises every lane's drift by as much (O(background) state).
        self.reference, self.max_raise = reference, max_raise
        self.background: deque[float] = deque(maxlen=background)
        self.level = reference
        self.min_gap_s = min_gap_s
        self.track = track
        # The persistence lane, for slight stragglers under the slow lane's reference: the least-waiting rank
        # of each of the last `window` steps and its evidence (O(window), whatever the world).
        self.window, self.share, self.min_evidence = window, share, min_evidence
        self.recent: deque[tuple[int, int, float]] = deque(maxlen=window)  # (step, least-waiting rank, x)
        # The running shares' own evidence level, once the job has them (update_running): the slow and the
        # persistence lanes judge those, the fast lane the per-step evidence.
        self.running = False
        # The slow lanes' references on the running shares (their noise is the averaged one: lower), by default
        # the per-step ones.
        self.running_drifts = list(running_drifts) if running_drifts is not None else self.drifts[1:]
        self.running_margin = running_margin
        self.running_spread_k = running_spread_k
        self.running_spread = 0.0
        self.running_quiet_ratio = 0.25  # a step's rank scored under this (of a threshold) joins the background
        self.running_share = 0.8  # the running persistence lane: the lowest share on this much of `window` steps
        self.recent_running: deque[tuple[int, int, float]] = deque(maxlen=window)
        # The step of the latest running share: older than `running_stale` steps behind the per-step evidence, the
        # shares stopped coming (a rank without its figure, a restarted rank's steps, the job's metric budget) and
        # the per-step persistence lane is judged as in a job without them (`_running_agrees`)
        self.running_step = -1
        self.running_stale = 8
        # A rank whose event closed while its running share is still the lowest (it recovered; its average takes
        # ~15 steps to rejoin the others'): no evidence of it counts while its gap keeps falling.
        self.quiet: tuple[int, float] | None = None  # (rank, the lowest gap seen since)
        self.running_background: deque[float] = deque(maxlen=background)
        self.running_level = reference
        # The fast lane names a rank only once it waited least on each of the last `fast_steps` steps in a row
        # (consecutive step numbers) counting only the steps of evidence for that lane (x over its reference),
        # whatever its score (`run`: the rank of the current run and its steps of evidence; `run_step`: its
        # last step).
        self.fast_steps = fast_steps
        self.run: tuple[int, int] = (-1, 0)
        self.run_step = -1
        # The last `spread_window` steps' least-waiting ranks, for the level (observe); `spread_min` of them at
        # least, all different, make the job's noise a spread one
        self.leasts: deque[int] = deque(maxlen=spread_window)
        self.spread_min = spread_min
        # The job's world (`update`), for the persistence lanes' chance level (persist_share; 0: not known)
        self.world = 0
        self.persist_z = persist_z
        # Ranks slowed alike (`group_named`): each running-share step's tied group of two or more ranks that had
        # about the lowest share (empty: none) and the lead the others had over them (O(window) whatever the world)
        self.recent_groups: deque[tuple[int, tuple[int, ...], float]] = deque(maxlen=window)

    def evidence(self, gap_s: float, step_s: float) -> float:
        """The share of the step the median rank lost to the least-waiting one (0 when the gap is no evidence)."""
        x = gap_s / step_s if step_s > 0 and gap_s >= self.min_gap_s else 0.0
        return min(max(x, 0.0), 1.0)

    def observe(self, x: float, least: int) -> None:
        """A step's evidence (its least-waiting rank `least`) into the job's own level only (start-up steps, not
        judged, still show it).

        Not when the other ranks that waited least over the last `spread_window` steps (`spread_min` = 5 or
        more) are all different ranks: the job's noise is spread over many ranks (a large world: the slowest of
        thousands of noisy ranks is a different one each step), no lane climbs on it, and it must not raise the
        references;
        and in such a job a rank that waits least again is a candidate, not the job's level (at 16,384 ranks a
        1.5x rank's own first steps were the level's only samples: its bar rose with it and it was named in 7
        steps instead of 4). A small job (five ranks or fewer) always has repeats: its level is as before."""
        others = [r for r in self.leasts if r != least]
        self.leasts.append(least)
        if len(others) >= self.spread_min and len(set(others)) == len(others):
            return
        self.level = self._level(self.background, x, self.level)

    def observe_running(self, x: float) -> None:
        """A step's running-share evidence into its own level only (start-up steps); the job has them now."""
        self._switch()
        self._observe_running(x)

    def observe_running_start(self) -> None:
        """A start-up step of the running shares that does not count towards their level: the job has them."""
        self._switch()

    def _observe_running(self, x: float) -> None:
        """A running-share step's evidence into their level and its spread (the median absolute deviation),
        both from the one median of the background."""
        median = self._median(self.running_background, x)
        if median is not None:
            self.running_level = min(median, self.reference + self.max_raise)
            self.running_spread = statistics.median(abs(v - median) for v in self.running_background)

    def _level(self, background: deque[float], x: float, level: float) -> float:
        median = self._median(background, x)
        return level if median is None else min(median, self.reference + self.max_raise)

    @staticmethod
    def _median(background: deque[float], x: float) -> float | None:
        """`x` into the background; its median once it holds 8 steps (None before, or when it keeps none)."""
        if not background.maxlen:
            return None
        background.append(x)
        if len(background) < min(8, background.maxlen):
            return None
        return statistics.median(background)

    def _switch(self) -> None:
        """The job has running shares from now on: the slow and persistence lanes start again on them (what
        the per-step evidence put there is not the same figure)."""
        if self.running:
            return
        self.running = True
        for lane in self.lanes[1:]:
            lane.scores.clear()
            lane.since.clear()

    def update(self, step: int, least: int, gap_s: float, step_s: float, tied: Container[int] = (),
               world: int = 0) -> float:
        """One step's evidence: `least` waited least, the median rank `gap_s` more, in a step of `step_s`; `tied`:
        the other ranks that waited about as little (`_extend_run`). Returns the evidence `x` used (0 when the gap
        is no evidence)."""
        if world:
            self.world = world
        x = self.evidence(gap_s, step_s)
        if self.ratio(least) < 1.0:
            self.observe(x, least)
        else:
            self.leasts.append(least)
        raised = max(0.0, self.level - self.reference)
        self._extend_run(step, least, x, self.drifts[0] + raised, tied)
        lanes = self.lanes[:1] if self.running else self.lanes  # running shares feed the others
        for lane, drift in zip(lanes, self.drifts):
            lane.drift = drift + raised
            lane.update(step, least, x)
        self.recent.append((step, least, x))
        return x

    def _extend_run(self, step: int, least: int, x: float, fast_drift: float, tied: Container[int] = ()) -> None:
        """The step into the fast lane's run of consecutive steps on which `least` waited least: it counts only
        when it is evidence for that lane (`x` over its reference `fast_drift`). A step that is no evidence - the
        rank that waits least by a hair on a clean step, as one of 3 ranks does every third step - would
        otherwise join a blip's two far steps into a run of three (a 3-rank job's rank held back 3x for two
        steps was named on 113 of 200 noise seeds); it does not break the run either (a 1.5x rank of the
        tensor-parallel shape dips under the reference every few steps: restarting the run there named
        tp-data-1.5x of bench/results/detection_matrix.json in 7 steps, not 3). Another rank, or a gap in the
        step numbers (steps not judged), starts the run again.

        The one exception: a step that is no evidence on which the run's rank is `tied` with the least-waiting
        one (it waited about as little: another rank reached the collectives as late as it did, held back
        between its steps - its data, the scheduler) says nothing about which of the two the others wait for; it
        neither extends nor breaks a run that has evidence. (Where the least-waiting rank's step is evidence,
        its own run begins: it may be the straggler, and the tied rank the one held back.) Without it, a 2x rank
        of sync2 (bench/detection_jobs/shapes.py) whose run of three one such step cut (3 live runs in 18 here)
        was named 6-10 steps after its onset instead of 2-5: its lane's score was there, the run check held it
        back."""
        evidence = int(x > fast_drift)
        if self.run[0] == least and step == self.run_step + 1:
            self.run = (least, self.run[1] + evidence)
        elif not evidence and self.run[0] in tied and self.run[1] and step == self.run_step + 1:
            pass  # the run's rank arrived with the least-waiting one: the run stands
        else:
            self.run = (least, evidence)
        self.run_step = step

    def update_running(self, step: int, least: int, x: float) -> float:
        """One step of the running shares: `least` has the lowest (exact), `x` = p50 - min of them, a share of a
        step (clipped to [0, 1]). Feeds the slow and persistence lanes (the fast one keeps the per-step
        evidence); returns the x used."""
        self._switch()
        x = min(max(x, 0.0), 1.0) if math.isfinite(x) else 0.0
        if self.quiet is not None:
            rank, lowest = self.quiet
            if least == rank and x <= lowest + self.running_margin:
                self.quiet = (rank, min(lowest, x))
                x = 0.0  # its average still falling back to the others': no evidence
            else:
                self.quiet = None  # another rank has the lowest share, or this one's gap grows again
        if self.ratio(least) < self.running_quiet_ratio and not self._holds_lowest(least):
            # (a rank on its way up the lanes is left out: a straggler's ramp must not lift the bar it climbs)
            self._observe_running(x)
        # Averaged, the shares' evidence is steady: the lowest clean running share lies at about the job's level
        # step after step, within its own spread (the averaged noise's, and the scheduler's bursts on a loaded
        # host). So the reference is the level plus `running_spread_k` times that spread (at least the margin),
        # never under the lane's own.
        floor = self.running_floor()
        for lane, drift in zip(self.lanes[1:], self.running_drifts):
            lane.drift = max(drift, floor)
            lane.update(step, least, x)
        self.recent_running.append((step, least, x))
        self.running_step = max(self.running_step, step)
        return x

    def _persistence(self, rank: int, running: bool = False) -> float:
        """The persistence lane's ratio: 1 once the rank waited least on `share` of a full window with a mean
        evidence of `min_evidence` on those steps (less before, in proportion to its share),
        and on `share` of the window's last sixth. On the running shares (`running`), whose lowest rank is
        sticky by construction (an average moves slowly), it must have the lowest share on `running_share` of
        the window (90 %) with a mean gap over the bar the slow lane uses on them (`running_floor`)."""
        if running and self.world == 2:
            # Two ranks: the lowest running share is the sign of one difference of two averages, each rank's half
            # the time by chance and sticky for ~15 steps (weight 1/8): 80 % of 60 steps is a coin that lands
            # the same way on ~4 throws (clean model jobs of two ranks: 2 false events in 18,000 steps; none
            # without this lane, whose slight stragglers the slow lanes then name: 1.1x later, docs/detectors.md)
            return 0.0
        recent = self.recent_running if running else self.recent
        share = self.running_share if running else self.persist_share()
        if not recent:
            return 0.0
        mine = [x for _, r, x in recent if r == rank]
        bar = self.running_floor() if running else self.min_evidence
        if not mine or sum(mine) / len(mine) < bar:
            return 0.0
        # ... and still now: its share of the last sixth of the window too (a recovered rank drops out at once)
        tail = list(recent)[-max(1, self.window // 6):]
        now = sum(r == rank for _, r, _ in tail) / len(tail)
        return min(len(mine) / (share * self.window), now / share)

    def persist_share(self) -> float:
        """The per-step persistence lane's share of the window, over what chance gives a clean rank: in a job of
        n ranks each is the least-waiting one on ~1/n of the steps, and `share` (60 %) lies 4.4 binomial sigmas
        over 1/3 at 60 steps but only 1.6 over 1/2: at two ranks, with each rank's lead taken over its peer
        (straggler.peer_median), clean ranks reached it twice in 6,000 clean model steps (20 jobs of
        bench/detection_jobs/cpu_work.py --world 2). So at least 1/n + `persist_z` sigmas (0.73 at two ranks;
        three and more keep `share`; a world not known keeps it too)."""
        if self.world < 2:
            return self.share
        p = 1.0 / self.world
        return max(self.share, p + self.persist_z * math.sqrt(p * (1.0 - p) / self.window))

    def _running_agrees(self, rank: int) -> bool:
        """Whether the job's running shares, when it has them, say `rank` makes the others wait now: it has the
        lowest running share on the latest running step, by the bar the slow lane uses on them (`running_floor`:
        the job's own level of them and their spread) or more. The per-step persistence lane counts how often a
        rank waited least, as if the steps were independent draws; on a loaded host they are not (the scheduler
        holds one rank back for tens of steps at a time), and 60 % of 60 steps came by chance on a recorded clean
        sync2 run whose running shares put that rank's gap at a third of their own bar (docs/detectors.md,
        2026-11-27: no in-time cell of the model or the recorded runs changed).
        A slight straggler is behind on every step: by the time that lane names it, its running share is the
        lowest by more than the job's noise. A job without running shares is judged on the per-step lane alone, and
        so is one whose shares stopped coming `running_stale` steps ago (review: the last share step gated the
        lane for good, and the slow lanes, fed by share steps only, stopped too)."""
        if not self.running:
            return True
        if self.recent and self.recent[-1][0] - self.running_step > self.running_stale:
            return True
        if not self.recent_running:
            return False
        _, least, x = self.recent_running[-1]
        return least == rank and x >= self.running_floor()

    def update_group(self, step: int, group: tuple[int, ...], x: float) -> None:
        """One running-share step's tied group (straggler.tied_group: two or more ranks with about the lowest share,
        sorted; empty when the lowest is alone) and `x`, the share of a step the other ranks' median lost to them."""
        x = min(max(x, 0.0), 1.0) if math.isfinite(x) else 0.0
        self.recent_groups.append((step, group, x if group else 0.0))

    def group_ratio(self, group: tuple[int, ...]) -> float:
        """The running persistence lane's ratio for a group of ranks slowed alike: the same group on
        `running_share` of the window (and of its last sixth) with a mean lead over the bar the slow lane uses on
        the running shares (`running_floor`); the detector asks the group's lead in the step's own waits too
        (straggler._group_descheduled). Ranks slowed alike take turns at the lowest share (the per-rank
        lanes see each one lowest on half the steps, and each falls on the other's: never named), and where they
        are half the world or more the median rank is one of them, so no rank's own gap shows it (two equal
        1.1x ranks of three: never named, review)."""
        if not group or not self.recent_groups:
            return 0.0
        mine = [x for _, g, x in self.recent_groups if g == group]
        if not mine or sum(mine) / len(mine) < self.running_floor():
            return 0.0
        tail = list(self.recent_groups)[-max(1, self.window // 6):]
        now = sum(g == group for _, g, _ in tail) / len(tail)
        return min(len(mine) / (self.running_share * self.window), now / self.running_share)

    def group_named(self) -> tuple[tuple[int, ...], float] | None:
        """The window's most frequent tied group and its ratio, when that is 1 or more."""
        groups = Counter(g for _, g, _ in self.recent_groups if g)
        if not groups:
            return None
        group = groups.most_common(1)[0][0]
        ratio = self.group_ratio(group)
        return (group, ratio) if ratio >= 1.0 else None

    def group_since(self, group: tuple[int, ...]) -> int | None:
        """The earliest step from which on the group was the tied group on `running_share` of the steps."""
        onset, mine = None, 0
        for i, (step, g, _) in enumerate(reversed(self.recent_groups), 1):
            mine += g == group
            if mine >= self.running_share * i:
                onset = step
        return onset

    def forget_group(self, group: tuple[int, ...]) -> None:
        """Drop a group's evidence (its event closed: a stale window must not name it again)."""
        self.recent_groups = deque(((step, g, x) for step, g, x in self.recent_groups if g != group),
                                   maxlen=self.window)

    def _holds_lowest(self, rank: int) -> bool:
        """Whether `rank` had the lowest running share on half the window or more: a slight straggler has it on
        every step, and its gap must not become the job's level (it would lift the bar to itself)."""
        if len(self.recent_running) < 8:
            return False
        return sum(r == rank for _, r, _ in self.recent_running) * 2 >= len(self.recent_running)

    def running_floor(self) -> float:
        """The bar on the running shares' evidence: the job's own level of it plus `running_spread_k` times its
        spread (at least `running_margin`)."""
        return self.running_level + max(self.running_margin, self.running_spread_k * self.running_spread)

    def forget(self, rank: int, share_gap: float | None = None) -> None:
        """Drop a rank's evidence (its event closed: it recovered; a stale score must not name it again); with
        `share_gap`, its running share's gap when it closed, its running evidence is not counted while that
        gap keeps falling (`quiet`)."""
        if share_gap is not None:
            self.quiet = (rank, share_gap)
        for lane in self.lanes:
            lane.scores.pop(rank, None)
            lane.since.pop(rank, None)
        self.recent = deque(((step, r, x) for step, r, x in self.recent if r != rank), maxlen=self.window)
        self.recent_running = deque(((step, r, x) for step, r, x in self.recent_running if r != rank),
                                    maxlen=self.window)

    def ratio(self, rank: int) -> float:
        lanes = max((lane.scores.get(rank, 0.0) / lane.threshold for lane in self.lanes), default=0.0)
        return max(lanes, self._persistence(rank), self._persistence(rank, running=True))

    def since(self, rank: int) -> int | None:
        """The step the rank's score left zero in the lane that rates it highest."""
        best = max(self.lanes, key=lambda lane: lane.scores.get(rank, 0.0) / lane.threshold)
        lane_ratio = best.scores.get(rank, 0.0) / best.threshold
        for running in (False, True):
            if self._persistence(rank, running) > lane_ratio:
                # The earliest step from which on the rank waited least on `share` of the steps.
                onset, mine = None, 0
                share = self.running_share if running else self.persist_share()
                for i, (step, r, _) in enumerate(reversed(self.recent_running if running else self.recent), 1):
                    mine += r == rank
                    if mine >= share * i:
                        onset = step
                return onset
        return best.since.get(rank)

    def tracked(self) -> int:
        return len({rank for lane in self.lanes for rank in lane.scores})

    def _candidates(self) -> set[int]:
        """Every rank some lane scores, and the most frequent least-waiting rank of each window."""
        ranks = {rank for lane in self.lanes for rank in lane.scores}
        for recent in (self.recent, self.recent_running):
            if recent:
                ranks.add(Counter(r for _, r, _ in recent).most_common(1)[0][0])
        return ranks

    def leader(self) -> tuple[int, float] | None:
        """The rank with the highest ratio, and that ratio (None when every score is 0)."""
        ranks = self._candidates()
        if not ranks:
            return None
        rank = max(ranks, key=lambda r: (self.ratio(r), -r))
        return rank, self.ratio(rank)

    def named(self, rank: int | None = None) -> tuple[int, float] | None:
        """The rank with the highest ratio of those that qualify (with `rank`: that rank, if it qualifies):
        ratio 1 or more, and named on the fast lane alone only once it waited least on `fast_steps` steps of
        evidence for that lane in its current run of consecutive least-waiting steps (`_extend_run`): a rank the
        scheduler holds back for one or two steps, however far (3 CPU ranks on 2 shared cores: 2-3x for two
        steps), is not a straggler, and the bound on a 2x one is 3 steps. Every candidate is judged, not the
        leader alone: a leader that fails the run check (a blip's fast-lane score, still above the threshold)
        must not hide a rank that qualifies on its own lanes (a slight straggler the slow or persistence lane
        names)."""
        candidates = self._candidates() if rank is None else {rank}
        rated = sorted(((self.ratio(r), -r) for r in candidates), reverse=True)
        for ratio, negative in rated:
            if ratio < 1.0:
                return None
            if self._qualifies(-negative):
                return -negative, ratio
        return None

    def by_running_persistence_alone(self, rank: int) -> bool:
        """Whether the running persistence lane is the only one that names `rank` (`_qualifies`' other ways fail)."""
        if self.run[1] >= self.fast_steps and self.run[0] == rank:
            return False
        if max(lane.scores.get(rank, 0.0) / lane.threshold for lane in self.lanes[1:]) >= 1.0:
            return False
        if self._persistence(rank) >= 1.0 and self._running_agrees(rank):
            return False
        return self._persistence(rank, running=True) >= 1.0

    def _qualifies(self, rank: int) -> bool:
        """A rank at ratio 1 or more is named on the fast lane only at the end of a run of `fast_steps` steps of
        evidence for it; on the per-step persistence lane only where the running shares agree (`_running_agrees`);
        on any other lane as it stands."""
        if self.run[1] >= self.fast_steps and self.run[0] == rank:
            return True
        slow = [lane.scores.get(rank, 0.0) / lane.threshold for lane in self.lanes[1:]]
        if max([*slow, self._persistence(rank, running=True)]) >= 1.0:
            return True
        return self._persistence(rank) >= 1.0 and self._running_agrees(rank)
