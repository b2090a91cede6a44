"""The streak state machine of the step detectors that raise after a run of over steps (straggler's step-time
rule; mfu_drop and dataloader_stall used it until issue 24 gave them a CUSUM, cusum.py).

Each judges one figure per step of a job (the slowest rank's arrival or step time) against the run's own
baseline, and calls the step over or normal. The rest is the same machine, written here once:

* an over step ends the run of normal ones (`clean` = 0), starts a streak when none is going (its first
  step and when that step happened are kept: the event's `step` and `time`), and counts it (`streak`);
* the event is raised once the streak is as long as the detector needs (`due`), and updated on every
  over step while it is open (its `step` is then the step updating it);
* a normal step ends the streak; the detector says whether it also counts towards closing, and the event
  closes after `clear_steps` such steps in a row.

What differs, each detector configures: the figure and how it is judged, which steps join its baseline,
how many over steps open an event (StragglerConfig.consecutive; 1 for the rules that raise at once), how
many normal ones close it, and what the event says.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from collectors.detectors.base import Baseline, Context, Detector
from collectors.detectors.events import Event, EventLog


@dataclass
class StreakState:
    """One job's place in the machine; detectors add their own fields in a subclass."""

    streak: int = 0            # over steps in a row
    start: int | None = None   # the streak's first step
    start_time: float = 0.0    # when that step happened (unix s): the event's time
    clean: int = 0             # normal steps in a row that count towards closing
    last_step: int = -1        # the last step judged: each step is judged once, in order


S = TypeVar("S", bound=StreakState)


class StreakDetector(Detector, Generic[S]):
    """A detector that judges each step of a job over or normal against the run's own baseline and raises
    after a streak of over steps (the module's docstring). Subclasses say how a job's state starts
    (`new_state`), judge the steps, and drive the machine with `over`, `due`, `raise_streak` and `normal`.
    Per job: `state(job)`, and `baseline(job)`, the last `baseline_steps` values the detector accepted."""

    def __init__(self, events: EventLog, context: Context | None, baseline_steps: int) -> None:
        super().__init__(events, context)
        self.baseline_steps = baseline_steps
        self._state: dict[str, S] = {}
        self._baseline: dict[str, Baseline] = {}

    def new_state(self) -> S:  # pragma: no cover - every streak detector overrides it
        raise NotImplementedError

    def state(self, job: str) -> S:
        state = self._state.get(job)
        if state is None:
            state = self._state[job] = self.new_state()
        return state

    def baseline(self, job: str) -> Baseline:
        baseline = self._baseline.get(job)
        if baseline is None:
            baseline = self._baseline[job] = Baseline(self.baseline_steps)
        return baseline

    def over(self, state: S, step: int, time: float) -> bool:
        """An over step: the normal run ends, a streak starts at `step` (which happened at `time`) unless one
        is going, and the step counts. True when it started the streak."""
        state.clean = 0
        began = state.streak == 0
        if began:
            state.start, state.start_time = step, time
        state.streak += 1
        return began

    def due(self, job: str, state: S, needed: int) -> bool:
        """Raise (or update) now: the streak is `needed` steps long, or the job's event is open already."""
        return state.streak >= needed or self.is_open(job)

    def raise_streak(self, job: str, state: S, step: int, open_event: Event | None, *, ranks: list[int],
                     detail: dict[str, Any], severity: str) -> None:
        """Open the job's event at the streak's first step and time, or update the open one at `step`."""
        self.raise_(job, step=state.start if open_event is None else step, ranks=ranks, detail=detail,
                    severity=severity, time=state.start_time)

    def normal(self, job: str, state: S, step: int, clear_steps: int, counts: bool = True) -> None:
        """A normal step: the streak ends; when it `counts` towards closing, the job's open event closes
        after `clear_steps` of them in a row."""
        state.streak, state.start = 0, None
        if not counts:
            return
        state.clean += 1
        if state.clean >= clear_steps and self.is_open(job):
            self.clear(job, step=step)
