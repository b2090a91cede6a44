"""What two pieces of bookkeeping cost under a node's lock, before and after issue 27 moved them (one run, the old
way and the new way interleaved, so both see the same machine):

1. The root's periodic detector check asks every job's rank->host map under the lock. The old way rebuilt it per
   job per check (`dict(Node.ranks(job).hosts)`: the rank views' bitmap unions and host maps, O(ranks)); now
   `Node.hosts(job)` is built once per change of the hosts (`hosts_version`) and shared.
2. An agent's flush refreshes its ranks' liveness, one /proc read per rank. The old way read them while holding
   the lock (`RankRegistry.views(now)`); now they are read before (`read_statuses`) and only applied under it
   (`views(now, statuses)`). Real processes: one sleeping child per rank.

    .venv/bin/python bench/node_lock.py        # writes bench/results/node_lock.json
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyroaring import BitMap

from collectors.agent.ranks import RankRegistry
from collectors.delivery.node import Node, RankView
from collectors.delivery.windows import Deadlines
from harness import write_json  # bench/'s own module: on sys.path when run as a script

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "node_lock.json"


def host_maps(ranks: int, racks: int, jobs: int, calls: int) -> dict[str, float]:
    """µs per periodic check (every job's map), the old way and the new, best of 5."""
    node = Node("root", Deadlines(), ack_down=lambda *a, **k: None)
    per_job = ranks // jobs
    per_rack = per_job // racks
    for job in range(jobs):
        for rack in range(racks):
            first = rack * per_rack
            node.child_ranks.setdefault(f"rack{rack}", {})[f"job{job}"] = RankView(
                alive=BitMap(range(first, first + per_rack)), world_size=per_job,
                hosts={r: f"host{r // 8}" for r in range(first, first + per_rack)})
    names = [f"job{job}" for job in range(jobs)]
    assert all(node.hosts(job) == node.ranks(job).hosts for job in names)

    def old() -> object:
        with node.lock:
            return {job: dict(node.ranks(job).hosts) for job in names}

    def new() -> object:
        with node.lock:
            return {job: node.hosts(job) for job in names}
    best = {"old": float("inf"), "new": float("inf")}
    for _ in range(5):
        for name, call in (("old", old), ("new", new)):
            best[name] = min(best[name], timeit.timeit(call, number=calls) / calls * 1e6)
    return {"check_old_us": best["old"], "check_new_us": best["new"]}


def liveness(ranks: int, rounds: int) -> dict[str, float]:
    """ms the lock is held per liveness refresh, the old way and the new (median of rounds), and the /proc reads
    the new way does before taking it."""
    children = [subprocess.Popen(["sleep", "600"]) for _ in range(ranks)]
    try:
        registry = RankRegistry()
        for rank, child in enumerate(children):
            registry.register(SimpleNamespace(job="j", rank=rank, world_size=ranks, local_rank=rank % 8, host="h",
                                              pid=child.pid, device="", incarnation=1, attempt=0), cast(Any, None))
        held_old, held_new, unlocked = [], [], []
        for _ in range(rounds):
            start = time.perf_counter()
            views = registry.views()  # the old way: the whole refresh under the lock
            held_old.append(time.perf_counter() - start)
            start = time.perf_counter()
            statuses = registry.read_statuses(registry.pids_to_read())
            middle = time.perf_counter()
            views = registry.views(statuses=statuses)
            held_new.append(time.perf_counter() - middle)
            unlocked.append(middle - start)
        assert len(views["j"].alive) == ranks
    finally:
        for child in children:
            child.kill()
        for child in children:
            child.wait()
    return {"held_old_ms": statistics.median(held_old) * 1e3, "held_new_ms": statistics.median(held_new) * 1e3,
            "read_unlocked_ms": statistics.median(unlocked) * 1e3}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=16_384, help="ranks at the root (1.)")
    p.add_argument("--racks", type=int, default=32)
    p.add_argument("--jobs", type=int, default=4)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--agent-ranks", type=int, default=256, help="ranks (sleeping processes) at the agent (2.)")
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = p.parse_args()
    maps = host_maps(args.ranks, args.racks, args.jobs, args.calls)
    live = liveness(args.agent_ranks, args.rounds)
    out = {"benchmark": "node_lock", "ranks": args.ranks, "racks": args.racks, "jobs": args.jobs,
           "agent_ranks": args.agent_ranks, **maps, **live}
    print(f"root, {args.ranks} ranks in {args.jobs} jobs x {args.racks} racks: the periodic check's host maps under "
          f"the lock {maps['check_old_us']:.0f} us -> {maps['check_new_us']:.1f} us per check (best of 5)")
    print(f"agent, {args.agent_ranks} ranks: lock held per liveness refresh {live['held_old_ms']:.2f} ms -> "
          f"{live['held_new_ms']:.2f} ms (median of {args.rounds}); /proc read before the lock "
          f"{live['read_unlocked_ms']:.2f} ms")
    write_json(args.json, out)


if __name__ == "__main__":
    main()
