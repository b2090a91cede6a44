"""What simulated ranks log, and the faults that can be injected (`--inject KIND:key=value,...`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from collectors.sim.sync import StepMax, compute_s, rank_rng
from telemetry.names import ARRIVAL_METRIC as ARRIVAL  # what the SDK logs under torch.distributed
from telemetry.names import WAIT_METRIC as WAIT
from telemetry.names import WORK_METRIC as WORK

METRICS = ("step_time", "loss", "grad_norm", "mfu", "dataloader_wait")
OVERHEAD_S = 0.002  # a rank's own work after the step's last collective (median; log-normal, sigma 0.3)
TRANSFER_S = 0.004  # a collective's own time (the data moving), on every rank alike (median; log-normal, sigma 0.3)


def metrics(sync_collectives: bool) -> tuple[str, ...]:
    """The metrics simulated ranks log."""
    return (*METRICS, ARRIVAL, WAIT, WORK) if sync_collectives else METRICS


# Each kind's arguments, with the parser of each value (int or float).
_KINDS: dict[str, dict[str, Callable[[str], float]]] = {
    "straggler": {"rank": int, "from": int, "factor": float, "until": int},
    "spike": {"step": int, "factor": float},
    "nan": {"rank": int, "step": int},
    "hang": {"rank": int, "step": int},
    "dead": {"rank": int, "step": int},
    # the job crashes after step `step`; a new attempt resumes at step `resume` (<= step: resume..step are
    # run again), on `world` ranks (default: as before). Run by the orchestrator, not by RankModel.
    "restart": {"step": int, "resume": int, "world": int},
}
# until: the last slow step.
_DEFAULTS: dict[str, dict[str, float]] = {"straggler": {"factor": 3.0, "until": 2**62}, "spike": {"factor": 5.0}}
_OPTIONAL: dict[str, set[str]] = {"restart": {"world"}}  # may be left out, without a default value


@dataclass(frozen=True)
class Injection:
    kind: str
    args: dict[str, float] = field(default_factory=dict)

    def __getitem__(self, name: str) -> float:
        return self.args[name]


def parse_injection(text: str) -> Injection:
    """'straggler:rank=3,from=20,factor=2.5' -> Injection; raises ValueError saying what is wrong."""
    kind, _, rest = text.partition(":")
    if kind not in _KINDS:
        raise ValueError(f"unknown injection {kind!r}; choose from {', '.join(_KINDS)}")
    args: dict[str, float] = dict(_DEFAULTS.get(kind, {}))
    for item in filter(None, rest.split(",")):
        name, eq, value = item.partition("=")
        if not eq or name not in _KINDS[kind]:
            raise ValueError(f"{kind}: unknown or malformed argument {item!r}; takes {', '.join(_KINDS[kind])}")
        try:
            args[name] = _KINDS[kind][name](value)
        except ValueError:
            raise ValueError(f"{kind}: {name}={value!r} is not a number") from None
    missing = [name for name in _KINDS[kind] if name not in args and name not in _OPTIONAL.get(kind, ())]
    if missing:
        raise ValueError(f"{kind}: missing {', '.join(missing)}")
    if kind == "restart":
        if args["resume"] < 1 or args["step"] < 1:
            raise ValueError(f"restart: step and resume must be >= 1, got step={args['step']}, resume={args['resume']}")
        if args["resume"] > args["step"]:
            raise ValueError(f"restart: resume={args['resume']} is after step={args['step']}; a job resumes from a "
                             "checkpoint at or before the step it crashed after (resume <= step)")
        if "world" in args and args["world"] < 1:
            raise ValueError(f"restart: world={args['world']} must be >= 1")
    return Injection(kind, args)


def check_injections(injections: list[Injection], ranks: int, steps: int) -> None:
    """What a set of injections cannot do in a run of `ranks` ranks and `steps` steps; raises ValueError."""
    for inj in injections:
        if "rank" in inj.args and inj["rank"] >= ranks:
            raise ValueError(f"{inj.kind}: rank {int(inj['rank'])} >= --ranks {ranks}")
    restarts = [inj for inj in injections if inj.kind == "restart"]
    if len(restarts) > 1:
        raise ValueError("restart: at most one restart per run")
    if restarts:
        if restarts[0]["step"] >= steps:
            raise ValueError(f"restart: step={restarts[0]['step']} must be before the last step (--steps {steps})")
        if any(inj.kind in ("hang", "dead") for inj in injections):
            raise ValueError("restart cannot be combined with hang or dead (they stop ranks of the first attempt)")


def restart_of(injections: list[Injection]) -> Injection | None:
    return next((inj for inj in injections if inj.kind == "restart"), None)


class RankModel:
    """Deterministic values for one rank: the same seed, rank and step always give the same figures.

    With `sync_collectives` (the default) the job synchronises through collectives each step: the rank
    logs its own compute as `collective_arrival`, as `step_time` the slowest rank's compute plus its own
    small overhead (collectors/sim/sync.py), and as `collective_wait` how much longer the slowest rank
    computed than it plus the transfer (with `work_time` the rest). Without, `step_time` is its own compute.
    """

    def __init__(self, rank: int, seed: int, injections: list[Injection], world_size: int,
                 sync_collectives: bool = True, base_step_s: float = 0.1) -> None:
        self.rank = rank
        self.seed = seed
        self.injections = injections
        self.world_size = world_size
        self.sync_collectives = sync_collectives
        self.base_step_s = base_step_s

    def values(self, step: int) -> dict[str, float]:
        rng = rank_rng(self.seed, self.rank, step)
        z = rng.gauss(0.0, 1.0)  # the first draw: sync.StepMax replays a straggler's
        figures = {
            "loss": 4.0 * math.exp(-step / 300.0) + 1.5 + rng.gauss(0.0, 0.02),
            "grad_norm": 1.0 + abs(rng.gauss(0.0, 0.1)),
            "mfu": 0.45 + rng.gauss(0.0, 0.005),
            "dataloader_wait": 0.002 * math.exp(rng.gauss(0.0, 0.3)),
        }
        slow = self._slow(step)
        factor = slow.get(self.rank, 1.0)
        # MFU is the step's FLOPs over (wall time x peak): the FLOPs stay, so a slower step is a lower MFU. Under
        # synchronous collectives every rank waits for the straggler, so every rank's MFU falls with it; without,
        # only the slow rank's.
        if self.sync_collectives:
            step_max = StepMax(self.seed, step, self.world_size, slow, self.base_step_s)
            arrival = compute_s(self.base_step_s, step_max.noise(self.rank, z), factor)
            wall = step_max.max_s + OVERHEAD_S * math.exp(rng.gauss(0.0, 0.3))
            if slow:
                healthy = StepMax(self.seed, step, self.world_size, {}, self.base_step_s).max_s
                figures["mfu"] *= min(1.0, healthy / step_max.max_s)
            # The rank waits in the step's collectives for as long as the slowest rank computed longer than it,
            # plus the transfer: what telemetry.torch.waits logs (the straggler waits least).
            wait = step_max.max_s - arrival + TRANSFER_S * math.exp(rng.gauss(0.0, 0.3))
            values = {"step_time": wall, **figures, ARRIVAL: arrival, WAIT: wait, WORK: max(0.0, wall - wait)}
        else:
            figures["mfu"] /= factor
            values = {"step_time": compute_s(self.base_step_s, z, factor), **figures}
        for inj in self.injections:
            if inj.kind == "spike" and inj["step"] == step:
                values["loss"] *= inj["factor"]
                values["grad_norm"] *= inj["factor"]
            elif inj.kind == "nan" and inj["rank"] == self.rank and inj["step"] == step:
                values["loss"] = float("nan")
        return values

    def _slow(self, step: int) -> dict[int, float]:
        """Rank -> its compute factor at `step`, for each rank a straggler injection slows then."""
        slow: dict[int, float] = {}
        for inj in self.injections:
            if inj.kind == "straggler" and inj["from"] <= step <= inj["until"]:
                rank = int(inj["rank"])
                slow[rank] = slow.get(rank, 1.0) * inj["factor"]
        return slow

    def stops_at(self) -> tuple[int, str] | None:
        """(step, how) this rank stops at: 'hang' (alive, never enters), 'dead' (exits), 'blocked' (enters,
        never ends)."""
        for inj in self.injections:
            if inj.kind in ("hang", "dead"):
                if inj["rank"] == self.rank:
                    return int(inj["step"]), inj.kind
                return int(inj["step"]), "blocked"
        return None
