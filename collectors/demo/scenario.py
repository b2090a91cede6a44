"""Which faults the demo injects, and when: spread over the run so each detector's event stands alone.

The straggler is slow for a stretch and then recovers (its event opens and closes); the loss spike
and the NaN land after it at other ranks; the hang comes near the end, because nothing completes
after it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class Scenario:
    straggler_rank: int
    straggler_from: int
    straggler_until: int
    straggler_factor: float
    spike_step: int
    spike_factor: float
    nan_rank: int
    nan_step: int
    hang_rank: int
    hang_step: int
    # Under --train the slow rank sleeps (factor - 1) x its own median step: the example's steps are ~15 ms of
    # compute, so x2.5 made it only ~20 ms late, at the straggler rule's 20 ms floor, and a loaded machine hid
    # it on enough steps that no event opened (seen on a fresh-clone CI run). x6 makes it ~75 ms late.
    train_straggler_factor: float = 6.0

    @classmethod
    def for_run(cls, ranks: int, steps: int) -> Scenario:
        if steps < 20:
            raise ValueError(f"the demo needs at least 20 steps to place its faults apart (got {steps})")
        if ranks < 2:
            raise ValueError("the demo needs at least 2 ranks")

        def at(fraction: float) -> int:
            return max(1, round(steps * fraction))

        def rank(preferred: int) -> int:
            return preferred % ranks

        return cls(straggler_rank=rank(13), straggler_from=at(0.15), straggler_until=at(0.45),
                   straggler_factor=2.5, spike_step=at(0.5), spike_factor=4.0, nan_rank=rank(42),
                   nan_step=at(0.65), hang_rank=rank(7) if ranks > 7 else ranks - 1, hang_step=at(0.85))

    def sim_injections(self) -> list[str]:
        """As `telemetry sim --inject` texts."""
        return [f"straggler:rank={self.straggler_rank},from={self.straggler_from},"
                f"factor={self.straggler_factor},until={self.straggler_until}",
                f"spike:step={self.spike_step},factor={self.spike_factor}",
                f"nan:rank={self.nan_rank},step={self.nan_step}",
                f"hang:rank={self.hang_rank},step={self.hang_step}"]

    def train_flags(self, hang_seconds: float) -> list[str]:
        """As examples/train_ddp.py flags (a bad batch for the spike; the hang is a long sleep on one rank)."""
        return ["--slow-rank", str(self.straggler_rank), "--slow-from", str(self.straggler_from),
                "--slow-until", str(self.straggler_until), "--slow-factor", str(self.train_straggler_factor),
                "--bad-batch-step", str(self.spike_step), "--nan-step", str(self.nan_step),
                "--nan-rank", str(self.nan_rank), "--hang-step", str(self.hang_step),
                "--hang-rank", str(self.hang_rank), "--hang-seconds", str(hang_seconds)]

    def describe(self, train: bool = False) -> list[str]:
        factor = self.train_straggler_factor if train else self.straggler_factor
        return [f"straggler: rank {self.straggler_rank} x{factor} steps "
                f"{self.straggler_from}-{self.straggler_until}",
                f"loss spike: step {self.spike_step} (x{self.spike_factor})",
                f"NaN: rank {self.nan_rank} step {self.nan_step}",
                f"hang: rank {self.hang_rank} at step {self.hang_step}"]


def demo_detectors(train: bool) -> str:
    """The root's --detectors for a short demo: the no-progress hang check after 8 s instead of 60 s; under
    DDP every rank's wall step time converges to the slowest one's (the others wait for it in the
    all-reduce): the straggler is judged on `collective_arrival`, with a shorter persistence for a short run."""
    config: dict[str, dict[str, object]] = {"hang": {"no_progress_floor_s": 8.0}}
    # a demo's slow stretch is 30 % of a short run (9 steps of the tests' 30): shorter persistence than
    # production's 14 late of the last 16 steps (docs/detectors.md) so that the short run shows it. The
    # simulator's ranks are noiseless (7 of 8); 3 CPU ranks sharing 2 cores under --train: 4 of the last 5
    config["straggler"] = {"persist_k": 4, "persist_n": 5} if train else {"persist_k": 7, "persist_n": 8}
    # Both log collective_wait (issue 24), judged after `wait_warmup` start-up steps: 10 in production, 3 here,
    # where the slow stretch begins at 15 % of a short run.
    config["straggler"]["wait_warmup"] = 3
    # MFU falls with the straggler (every rank waits for it): mfu_drop's CUSUM names a drop that deep in about four
    # steps (issue 24), once it has a baseline; production's 5 start-up steps and 10 baseline steps would leave a
    # short demo's slow stretch (from 15 % of the run) unjudged. The simulator has no slow first steps.
    config["mfu_drop"] = {"warmup": 0 if not train else 2, "min_baseline": 3}
    return json.dumps(config)
