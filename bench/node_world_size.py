"""What reading a job's world size costs the root under its node's lock (issue 27): the old way (the rank views'
union with their host maps, `Node.ranks(job).world_size`, asked per commit and per step window whose `expected` is
0; or their bitmap unions, `Node.states(job).world_size`, the detectors' `world_of`) against `Node.world_size(job)`.

    .venv/bin/python bench/node_world_size.py        # writes bench/results/node_world_size.json
"""

from __future__ import annotations

import argparse
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pyroaring import BitMap

from collectors.delivery.node import Node, RankView
from collectors.delivery.windows import Deadlines
from harness import write_json  # bench/'s own module: on sys.path when run as a script

DEFAULT_JSON = Path(__file__).resolve().parent / "results" / "node_world_size.json"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ranks", type=int, default=16_384)
    p.add_argument("--racks", type=int, default=32)
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--json", type=Path, default=DEFAULT_JSON)
    args = p.parse_args()
    node = Node("root", Deadlines(), ack_down=lambda *a, **k: None)
    per = args.ranks // args.racks
    for rack in range(args.racks):
        ranks = range(rack * per, (rack + 1) * per)
        node.child_ranks[f"rack{rack}"] = {"job": RankView(alive=BitMap(ranks), world_size=args.ranks,
                                                           hosts={r: f"host{r // 8}" for r in ranks})}
    assert node.world_size("job") == node.ranks("job").world_size == args.ranks
    figures = {}
    for name, call in (("ranks_us", lambda: node.ranks("job").world_size),
                       ("states_us", lambda: node.states("job").world_size),
                       ("world_size_us", lambda: node.world_size("job"))):
        figures[name] = min(timeit.repeat(call, number=args.calls, repeat=5)) / args.calls * 1e6
    out = {"benchmark": "node_world_size", "ranks": args.ranks, "racks": args.racks, **figures}
    print(f"{args.ranks} ranks in {args.racks} racks, us per call (best of 5): ranks().world_size "
          f"{figures['ranks_us']:.1f}, states().world_size {figures['states_us']:.1f}, "
          f"world_size() {figures['world_size_us']:.2f}")
    write_json(args.json, out)


if __name__ == "__main__":
    main()
