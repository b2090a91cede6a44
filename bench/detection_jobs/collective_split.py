"""Does a step's second synchronous all-reduce mis-attribute the wait? sync2's shape, each collective timed apart.

    python bench/detection_jobs/collective_split.py [--steps 300] [--world 3] [--out bench/results]
        [--slow-rank R --factor F --onset N]

The straggler rule judges `collective_wait`, the union of a rank's collectives per step (telemetry/torch/waits.py).
In bench/detection_jobs/shapes.py's `sync2` the gradients are averaged by two synchronous all-reduces back to back:
the rank the others wait for at the first one returns from it last-but-transfer, and the second one's waits are
then the ring's transfer and the ranks' exit skew from the first, not anyone's lateness. If that skew were large
or tied to one rank (a ring position), the summed wait would credit the wrong rank, or one rank on every step.
This runs sync2's model and loop bare (no telemetry: nothing else in the step) under torchrun, 3 gloo CPU ranks,
one intra-op thread, and has every rank record per step when it called and returned from each all-reduce
(CLOCK_MONOTONIC, shared by the processes of one host). Printed and written (collective_split.json, with the
1-minute load): how often the least total wait is the least wait at the first all-reduce (its last arriver, the
rank the others waited for), the gaps (median wait less the least, as a share of the step) of each all-reduce and
of the sum, each rank's mean lead at each, and on the steps whose summed gap reaches the persistence lane's
`min_evidence` (0.04) whether their least-waiting rank is still the first all-reduce's last arriver.

With `--slow-rank R --factor F --onset N` rank R sleeps (F - 1) x its median step before N inside its backward from
step N on (a gradient hook half-way through the model, as shapes.py's `--where backward`), and `slow` says where that
time went: per all-reduce, the slow rank's mean wait and the other ranks' median wait before the onset and from it
(the sleep is in the backward, before both all-reduces: it should show as the others' wait at the first one). Why:
issue 24's sync2-backward-1.1x cell was missed, and the question was whether the backward's extra time reaches the
waits at all when two synchronous all-reduces follow it (docs/detectors.md, "The sync2 1.1x cells").
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

WARMUP = 10  # start-up steps left out, as the rule's `wait_warmup`
EVIDENCE = 0.04  # the per-step persistence lane's bar (wait_score.WaitScore's min_evidence)

# A rank's record of one step: [start, called AR1, returned AR1, called AR2, returned AR2, end] (ns)
Step = list[int]


def worker(steps: int, out: Path, slow_rank: int = -1, factor: float = 1.0, onset: int = 0) -> None:
    """One rank of the bare sync2 job (shapes.py's MLP and average_grads, without the telemetry), rank `slow_rank`
    sleeping (`factor` - 1) x its median step in its backward from step `onset` on."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import torch.nn.functional as F

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    d = 512
    model = nn.Sequential(*[nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(6)], nn.Linear(d, 1))
    sleep = [0.0]  # seconds the backward sleeps now (0 until the onset, and on other ranks)

    def in_backward(grad: torch.Tensor) -> torch.Tensor:
        if sleep[0]:
            time.sleep(sleep[0])
        return grad

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator().manual_seed(rank)
    w = torch.randn(d, generator=torch.Generator().manual_seed(0))
    clock = time.perf_counter_ns
    record: list[Step] = []
    for step in range(steps):
        if rank == slow_rank and step == onset:
            sleep[0] = (factor - 1.0) * statistics.median((r[5] - r[0]) / 1e9 for r in record[WARMUP:] or record)
        x = torch.randn(512, d, generator=g)
        y = x @ w / d ** 0.5
        times = [clock()]
        h = model[:4](x)  # the hook half-way through the model, as shapes.py's MLP has it (after its 4th layer)
        h.register_hook(in_backward)
        F.mse_loss(model[4:](h).squeeze(-1), y).backward()
        grads = [p.grad for p in model.parameters() if p.grad is not None]
        flat = torch.cat([q.reshape(-1) for q in grads])
        for part in flat.chunk(2):
            times.append(clock())
            dist.all_reduce(part)
            times.append(clock())
        flat /= world
        offset = 0
        for q in grads:
            q.copy_(flat[offset: offset + q.numel()].view_as(q))
            offset += q.numel()
        opt.step()
        opt.zero_grad(set_to_none=True)
        times.append(clock())
        record.append(times)
    (out / f"rank{rank}.json").write_text(json.dumps(record))
    dist.barrier()
    dist.destroy_process_group()


def analyse(ranks: list[list[Step]], warmup: int = WARMUP) -> dict[str, Any]:
    """The split of each step's waits over its two all-reduces (`ranks[r][step]`: rank r's Step)."""
    world = len(ranks)
    rows: list[dict[str, Any]] = []
    for s in range(warmup, min(len(r) for r in ranks)):
        t = [ranks[r][s] for r in range(world)]
        step = statistics.median(x[5] - x[0] for x in t)
        if step <= 0:
            continue
        w1 = [x[2] - x[1] for x in t]
        w2 = [x[4] - x[3] for x in t]
        total = [a + b for a, b in zip(w1, w2, strict=True)]

        def least(v: list[int]) -> int:
            return min(range(world), key=lambda r: (v[r], r))

        def gap(v: list[int], step: float = step) -> float:
            return (statistics.median(v) - min(v)) / step

        rows.append({"late1": max(range(world), key=lambda r: (t[r][1], r)), "least1": least(w1),
                     "least2": least(w2), "least": least(total), "gap1": gap(w1), "gap2": gap(w2),
                     "gap": gap(total), "leads1": [(statistics.median(w1) - v) / step for v in w1],
                     "leads2": [(statistics.median(w2) - v) / step for v in w2]})
    if not rows:
        return {"judged_steps": 0}

    def share(rows: list[dict[str, Any]], test: Any) -> float | None:
        return round(sum(bool(test(r)) for r in rows) / len(rows), 3) if rows else None

    def quantiles(key: str) -> dict[str, float]:
        v = sorted(r[key] for r in rows)
        return {"p50": round(statistics.median(v), 4), "p90": round(v[int(0.9 * (len(v) - 1))], 4),
                "mean": round(statistics.fmean(v), 4)}

    strong = [r for r in rows if r["gap"] >= EVIDENCE]
    return {
        "judged_steps": len(rows),  # after the start-up steps
        "least_is_first_late_arriver": share(rows, lambda r: r["least"] == r["late1"]),
        "least_is_least_at_first": share(rows, lambda r: r["least"] == r["least1"]),
        "least_is_least_at_second": share(rows, lambda r: r["least"] == r["least2"]),
        "second_least_is_first_late_arriver": share(rows, lambda r: r["least2"] == r["late1"]),
        "gap_first": quantiles("gap1"), "gap_second": quantiles("gap2"), "gap_sum": quantiles("gap"),
        "mean_lead_first": [round(statistics.fmean(r["leads1"][k] for r in rows), 4) for k in range(world)],
        "mean_lead_second": [round(statistics.fmean(r["leads2"][k] for r in rows), 4) for k in range(world)],
        "evidence_steps": len(strong),
        "evidence_least_is_first_late_arriver": share(strong, lambda r: r["least"] == r["late1"]),
        "least_counts": dict(sorted(Counter(r["least"] for r in rows).items())),
        "least_counts_second": dict(sorted(Counter(r["least2"] for r in rows).items())),
    }


def slow_split(ranks: list[list[Step]], slow: int, onset: int, factor: float, warmup: int = WARMUP) -> dict[str, Any]:
    """Where the slow rank's extra time went: per all-reduce, its mean wait and the other ranks' median wait (s)
    over the steps before `onset` (after start-up) and from it, and the median step; `injected_s`, the sleep the
    slow rank took per step ((`factor` - 1) x its median step before the onset, as `worker` sets it)."""

    def side(first: int, last: int) -> dict[str, float]:
        steps = range(first, min(last, min(len(r) for r in ranks)))
        out: dict[str, float] = {}
        for name, (call, ret) in (("first", (1, 2)), ("second", (3, 4))):
            own = [(ranks[slow][s][ret] - ranks[slow][s][call]) / 1e9 for s in steps]
            others = [statistics.median((ranks[r][s][ret] - ranks[r][s][call]) / 1e9
                                        for r in range(len(ranks)) if r != slow) for s in steps]
            out[f"{name}_own_s"] = round(statistics.fmean(own), 5)
            out[f"{name}_others_s"] = round(statistics.fmean(others), 5)
        out["step_s"] = round(statistics.median(statistics.median((r[s][5] - r[s][0]) / 1e9 for r in ranks)
                                                for s in steps), 5)
        return out

    before, after = side(warmup, onset), side(onset, 10**9)
    own = [(r[5] - r[0]) / 1e9 for r in ranks[slow][:onset]]
    injected = (factor - 1.0) * statistics.median(own[warmup:] or own)
    return {"rank": slow, "onset": onset, "injected_s": round(injected, 5), "before": before, "after": after,
            "change": {k: round(after[k] - before[k], 5) for k in before}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--world", type=int, default=3)
    p.add_argument("--out", type=Path, default=Path("bench/results"), help="directory for collective_split.json")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds the job may take")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps in its backward from --onset")
    p.add_argument("--factor", type=float, default=1.1, help="... (F - 1) x its median step before the onset")
    p.add_argument("--onset", type=int, default=100, help="... from this step")
    p.add_argument("--worker", type=Path, default=None, help=argparse.SUPPRESS)  # a rank's side, under torchrun
    args = p.parse_args(argv)
    if args.steps <= WARMUP or args.world < 2:
        p.error(f"--steps must exceed {WARMUP} and --world be 2 or more")
    if args.slow_rank >= args.world or (args.slow_rank >= 0 and not WARMUP < args.onset < args.steps):
        p.error(f"--slow-rank must be under --world and --onset between {WARMUP} and --steps")
    if args.worker is not None:
        worker(args.steps, args.worker, args.slow_rank, args.factor, args.onset)
        return 0
    load_start = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={args.world}",
               str(Path(__file__).resolve()), "--steps", str(args.steps), "--worker", tmp,
               "--slow-rank", str(args.slow_rank), "--factor", str(args.factor), "--onset", str(args.onset)]
        started = time.monotonic()
        done = subprocess.run(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=args.timeout,
                              capture_output=True, text=True)
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 1
        ranks = [json.loads((Path(tmp) / f"rank{r}.json").read_text()) for r in range(args.world)]
    result = {"benchmark": "collective_split", "steps": args.steps, "world": args.world,
              "wall_s": round(time.monotonic() - started, 1),
              "loadavg_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)], **analyse(ranks)}
    name = "collective_split.json"
    if args.slow_rank >= 0:
        result["slow"] = {"factor": args.factor, **slow_split(ranks, args.slow_rank, args.onset, args.factor)}
        name = f"collective_split_slow{args.factor:g}x.json"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / name).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
