#!/usr/bin/env python
"""The straggler rule at 16,384 ranks (issue 24): the simulator's ranks through the agents', collectors' and root's code.

    python bench/straggler_scale.py [--ranks 16384] [--steps 160] [--factors 2,1.5,1.2,1.1] [--out bench/results]

Per step, every rank's figures come from `telemetry sim`'s own model (collectors/sim/model.py `RankModel`:
log-normal compute noise, sigma 5 %, synchronous collectives, `collective_wait` = the slowest rank's extra
compute + the transfer, `work_time` the rest). They take the score's whole path through the tree's code, in one
process: each node agent (8 ranks, `--ranks-per-agent`) holds its ranks' step in an `OpenStep`
(collectors/agent/intake.py), adds each rank's running wait share with its own `WaitShares`
(collectors/agent/wait_share.py, as `AgentService._seal_step` does) and summarises each metric as its sealed
part (`OpenStep.parts`, `Part.summary`); each rack (64 agents, `--agents-per-rack`) merges its agents'
summaries (`merge_parts`, as a collector does), the root merges the racks' and hands the rows to its
`StragglerDetector`. What is left out is the network and the processes (bench/scale.py measures those at this
size; `telemetry sim` runs them for real at the sizes this machine can host: docs/detectors.md). One run per
factor, the straggler from step 40 on a rank in the middle of the world, plus one clean run; `--no-shares`
leaves the running shares out (the rule on per-step waits alone, as before them). Prints, per run: the step
the rank was named at, the rank named, false alarms, and the largest number of candidate ranks the rule kept
(its state: O(k), not O(ranks)); writes straggler_scale.json (with each run's per-step trace: the least-waiting
rank, the evidence, the slow rank's score) and, with --plot, straggler_scale_RANKS.png.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

from harness import apply_quick, parser, write_result
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))

from pyroaring import BitMap

from collectors.agent.intake import OpenStep, RankValues
from collectors.agent.wait_share import WaitShares
from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.delivery.windows import Part, merge_parts
from collectors.detectors import EventLog
from collectors.detectors.straggler import StragglerDetector
from collectors.sim.model import RankModel, parse_injection
from telemetry.names import WAIT_METRIC, WAIT_SHARE_METRIC, WORK_METRIC

QUICK = {"ranks": 1024, "steps": 120}
ONSET = 40
JOB = "scale"


def one_run(ranks: int, steps: int, factor: float, seed: int, per_agent: int = 8, per_rack: int = 64,
            shares: bool = True) -> dict[str, Any]:
    slow = ranks // 2 + 1
    injections = [parse_injection(f"straggler:rank={slow},from={ONSET},factor={factor}")] if factor > 1 else []
    models = [RankModel(r, seed, injections, ranks) for r in range(ranks)]
    agents = [range(a, min(a + per_agent, ranks)) for a in range(0, ranks, per_agent)]
    averages = [WaitShares() for _ in agents]  # each agent's own, as AgentService keeps it
    log = EventLog(None)
    det = StragglerDetector(log)
    tracked, started = 0, time.perf_counter()
    trace = []  # per step: the least-waiting rank, the evidence, the slow rank's ratio (1 names it), share argmin
    for step in range(steps):
        values = [m.values(step) for m in models]
        now = time.time_ns()
        parts: dict[str, list[list[Part]]] = {}  # metric -> per rack, its agents' parts
        for a, (hosted, average) in enumerate(zip(agents, averages)):
            open_step = OpenStep(JOB, step, ranks, deadline=0.0)
            for metric in ("step_time", WAIT_METRIC, WORK_METRIC):
                open_step.metrics[metric] = {r: RankValues([values[r][metric]], [(f"{JOB}/{r}", step)], now, now)
                                             for r in hosted}
            if shares:
                average.add_to(open_step, lambda origin: None, lambda job: True)
            for part, _ in open_step.parts():
                racks = parts.setdefault(part.key.metric, [])
                if a // per_rack >= len(racks):
                    racks.append([])
                racks[a // per_rack].append(part)
        share_least = None
        for metric in ("step_time", WAIT_METRIC, WAIT_SHARE_METRIC):
            if metric not in parts:
                continue
            racks = [Part(Key(JOB, metric, step), [], BitMap(), built=merge_parts(agent_parts))
                     for agent_parts in parts[metric]]
            summary = merge_parts(racks)  # the root merges its racks' windows
            det.observe(Row(Key(JOB, metric, step, 0), ranks, summary, 0, time.time_ns()))
            if metric == WAIT_METRIC:
                waits = summary
            elif metric == WAIT_SHARE_METRIC:
                share_least = summary.argmin
        score = det.state(JOB).score
        if score is not None:
            tracked = max(tracked, max(len(lane.scores) for lane in score.lanes))
            x = score.evidence(max(0.0, waits.quantile(0.5) - waits.min), det.state(JOB).step_scale)
            trace.append([step, waits.argmin, round(x, 4), round(score.ratio(slow), 4), share_least])
    events = log.query(JOB)
    after = [e for e in events if e["detail"]["detected_step"] >= ONSET]
    named = after[0] if after and factor > 1 else None
    return {"factor": factor, "ranks": ranks, "steps": steps, "shares": shares, "slow_rank": slow if factor > 1 else None,
            "named_rank": named["ranks"] if named else None,
            "delay_steps": named["detail"]["detected_step"] - ONSET if named else None,
            "opened_on": named["detail"].get("opened_on") if named else None,
            "false_alarms": len(events) - (1 if named else 0),
            "max_tracked_ranks": tracked, "seconds": round(time.perf_counter() - started, 1), "trace": trace}


def plot(path: Path, runs: list[dict[str, Any]]) -> None:
    """Per run, the slow rank's score (1 names it) and whether it waited least, step by step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.5))
    for i, run in enumerate(runs):
        steps = [s for s, *_ in run["trace"]]
        label = (f"{run['factor']:g}x rank {run['slow_rank']}" if run["slow_rank"] is not None
                 else f"clean: rank {runs[0]['slow_rank']}'s score")
        ax.plot(steps, [ratio for _, _, _, ratio, _ in run["trace"]], color=f"C{i}", label=label)
        least = [s for s, _, _, _, share in run["trace"] if run["slow_rank"] is not None and share == run["slow_rank"]]
        ax.plot(least, [-0.08 - 0.06 * i] * len(least), "|", color=f"C{i}", markersize=6)
        if run["delay_steps"] is not None:
            ax.axvline(ONSET + run["delay_steps"], color=f"C{i}", linestyle=":", linewidth=1)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.axvline(ONSET, color="black", linewidth=0.8)
    ax.annotate("onset", xy=(ONSET, 1.9), fontsize=8)
    ax.set_xlabel("step")
    ax.set_ylabel("slow rank's score / threshold")
    ax.set_ylim(-0.1 - 0.06 * len(runs), 2.1)
    ax.set_title(f"straggler rule at {runs[0]['ranks']:,} simulated ranks (ticks: steps the slow rank had the lowest running share; "
                 "dotted: named)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "straggler_scale", QUICK)
    p.add_argument("--ranks", type=int, default=16_384)
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--factors", default="2,1.5,1.2,1.1", help="the straggler's compute factor per run (plus a clean run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", action="store_true", help="also draw straggler_scale_RANKS.png (matplotlib)")
    p.add_argument("--ranks-per-agent", type=int, default=8)
    p.add_argument("--agents-per-rack", type=int, default=64)
    p.add_argument("--no-shares", action="store_true",
                   help="leave the agents' running wait shares out: the rule on per-step waits alone")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    if args.ranks < 2 or args.steps <= ONSET or args.ranks_per_agent < 1 or args.agents_per_rack < 1:
        p.error(f"--ranks must be >= 2, --steps > {ONSET}, --ranks-per-agent and --agents-per-rack >= 1")
    runs = []
    for factor in [float(f) for f in args.factors.split(",")] + [1.0]:
        run = one_run(args.ranks, args.steps, factor, args.seed, args.ranks_per_agent, args.agents_per_rack,
                      not args.no_shares)
        print(f"{args.ranks} ranks, factor {factor:g}: named {run['named_rank']} (truth {run['slow_rank']}) "
              f"{run['delay_steps']} steps after the onset (opened on {run['opened_on']}); false alarms {run['false_alarms']}; "
              f"candidates kept <= {run['max_tracked_ranks']} ({run['seconds']} s)", flush=True)
        runs.append(run)
    result = {"benchmark": "straggler_scale", "complete": True, "machine": machine_facts(), "config": vars(args)
              | {"out": str(args.out)}, "runs": runs}
    if args.plot:
        figure = Path(args.out) / f"straggler_scale_{args.ranks}.png"
        figure.parent.mkdir(parents=True, exist_ok=True)  # (write_result makes it too, but after the figure)
        plot(figure, runs)
        print(f"wrote {figure}")
    return write_result(args.out, "straggler_scale", result, "straggler scale bench")


if __name__ == "__main__":
    raise SystemExit(main())
