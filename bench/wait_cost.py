#!/usr/bin/env python
"""What timing every collective costs the training thread (issue 24: <= 1 % of a step at hundreds of collectives).

    python bench/wait_cost.py [--collectives 300] [--steps 30] [--rounds 5] [--out bench/results]

One process, a world-1 gloo group (the collectives complete at once: what is measured is the wrapper and
the step's bookkeeping, not the network). A "step" issues --collectives small collectives the way FSDP
does: half as async all-gathers into a tensor waited with Work.wait(), half as synchronous all-reduces,
then `CollectiveTimer.measure()` as `run.step` does at its exit. Rounds alternate without and with the
timer installed (installing is process-wide, so "without" runs the originals the timer keeps). Prints
the cost per collective (us) and per step, and that cost as a share of a step of --step-s seconds (the
share of a real step: the collectives' own time there is the network's); writes wait_cost.json.
"""

from __future__ import annotations

import socket
import statistics
import sys
import time

from harness import apply_quick, parser, write_result
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))

QUICK = {"steps": 10, "rounds": 3}


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__, "wait_cost", QUICK)
    p.add_argument("--collectives", type=int, default=300, help="collectives per step (default 300)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--step-s", type=float, default=0.5, help="the step the share is of (default 0.5 s)")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    import torch
    import torch.distributed as dist

    from telemetry.torch.waits import ENTRY_POINTS, CollectiveTimer

    torch.set_num_threads(1)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    originals = {name: getattr(dist, name) for name in ENTRY_POINTS if hasattr(dist, name)}
    original_wait = dist.Work.wait
    timer = CollectiveTimer()
    timer.install()
    timed = {name: getattr(dist, name) for name in originals}
    timed_wait = dist.Work.wait
    x, out = torch.ones(256), torch.empty(256)

    def step() -> None:
        start = time.perf_counter_ns()
        for i in range(args.collectives):
            if i % 2:
                dist.all_gather_into_tensor(out, x, async_op=True).wait()
            else:
                dist.all_reduce(x)
        timer.measure(start, time.perf_counter_ns())

    def use(fns: dict, wait: object) -> None:
        for name, fn in fns.items():
            setattr(dist, name, fn)
        dist.Work.wait = wait

    per_step: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(args.rounds):
        for mode, fns, wait in (("off", originals, original_wait), ("on", timed, timed_wait)):
            use(fns, wait)
            step()  # warm
            t0 = time.perf_counter()
            for _ in range(args.steps):
                step()
            per_step[mode].append((time.perf_counter() - t0) / args.steps)
    use(originals, original_wait)
    dist.destroy_process_group()
    off, on = statistics.median(per_step["off"]), statistics.median(per_step["on"])
    cost_step = on - off
    result = {"benchmark": "wait_cost", "complete": True, "machine": machine_facts(), "config": vars(args)
              | {"out": str(args.out)}, "step_s_off": off, "step_s_on": on, "per_step_s": per_step,
              "cost_per_collective_us": round(1e6 * cost_step / args.collectives, 2),
              "cost_per_step_ms": round(1e3 * cost_step, 3),
              "share_of_step": round(cost_step / args.step_s, 5)}
    print(f"{args.collectives} collectives per step: {1e3 * off:.2f} ms without the timer, {1e3 * on:.2f} ms with "
          f"(medians of {args.rounds} rounds): {result['cost_per_collective_us']} us per collective, "
          f"{result['cost_per_step_ms']} ms per step = {100 * result['share_of_step']:.2f} % of a {args.step_s:g} s step")
    return write_result(args.out, "wait_cost", result, "wait cost bench")


if __name__ == "__main__":
    raise SystemExit(main())
