"""What the root receives per second from the fleet's windows, at host counts no machine here can run as processes
(issue 28: "root bytes in flat from 250 to 2,000 hosts"; docs/fleet.md, "What grows with hosts").

    python bench/fleet_wire.py                           # 64,250,500,1000,2000,4000 hosts, both value shapes
    python bench/fleet_wire.py --hosts 250,2000 --values varied

bench/fleet.py runs the whole tree as processes, and this 2-core machine keeps about 250 simulated hosts at 1 Hz.
The root's input per second is its one child's unit: one window per fleet metric and second, each the merge of
every host's part. This bench makes those windows with the same code, without the processes: per host a generated
sysfs tree (collectors/sim/sysfs.py, 2 NICs and 8 IB ports: a TEST DOUBLE of /sys), the real NicProbe and
HardwareSampler sampling it twice (1 s apart, so counters have deltas) into a real Node, whose sealed windows a
capturing sink takes (`Window.take`, as `Upstream.ship` does); then, per metric, the hosts' parts merged per rack
of --rack-size (`Summary.merge_all`, the native merge the racks run), the racks' merged at the cluster, and the
result encoded as the `WindowSummary` the cluster sends the root. Reported per host count: the windows' bytes
per second (what grows with hosts: rank states and framing are flat, bench/fleet.py), split into the t-digest
sketch, the sources bitmap and the rest, and the sketch's centroids.

Value shapes: `same` (every host's files alike, as bench/fleet.py's trees: healthy counters at 0), `varied` (each
host's counter totals drawn at random, and a third of its ports' counters rising between the two samples: every
value distinct, the sketch's worst case).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness import write_result

NAME = "fleet_wire"
NICS, HCAS = 2, 8


class Capture:
    """A node's sink that keeps what `Upstream.ship` would send: each sealed window's merged part."""

    def __init__(self) -> None:
        self.parts: dict[Any, Any] = {}

    def ship(self, node: Any, windows: list[Any], now: float) -> None:
        for win in windows:
            if win.has_pending:
                self.parts[win.key] = win.take(False).summary
        return None

    def forget(self, keys: list[Any]) -> None:
        pass


def _tree(root: Path, host: int, values: str, second: int) -> None:
    from collectors.sim.sysfs import IB_COUNTERS, NET_STATS, set_ib, set_nic, write_host
    if second == 0:
        write_host(root, NICS, HCAS)
    if values == "same":
        return
    rng = random.Random(host * 2 + second)
    base = random.Random(host)
    for n in range(NICS):
        totals = {c: base.randint(0, 10**9) + (rng.randint(1, 50) if second and rng.random() < 0.33 else 0)
                  for c in NET_STATS}
        set_nic(root, f"eth{n}", **totals)
    for h in range(HCAS):
        totals = {c: base.randint(0, 10**6) + (rng.randint(1, 50) if second and rng.random() < 0.33 else 0)
                  for c in IB_COUNTERS}
        set_ib(root, f"mlx5_{h}", 1, **totals)


def _scratch() -> str | None:
    """/dev/shm where there is one: hundreds of thousands of tiny files, written and read once."""
    return "/dev/shm" if Path("/dev/shm").is_dir() else None


def sample_hosts(work: Path, hosts: int, values: str) -> dict[Any, list[Any]]:
    """Every host's parts of one second (its second sample's bucket), by window key."""
    from collectors.agent.hardware import HardwareSampler
    from collectors.agent.ranks import RankRegistry
    from collectors.delivery.node import Node
    from collectors.delivery.windows import Deadlines
    from collectors.probes import NicProbe

    t0 = (time.time_ns() // 1_000_000_000 - 10) * 1_000_000_000 + 700_000_000
    parts: dict[Any, list[Any]] = {}
    for i in range(hosts):
        root = work / f"h{i}"
        sink = Capture()
        node = Node(f"agent-{i}", Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None, sink=sink)
        node.complete = lambda win: True
        probe = NicProbe(root)
        sampler = HardwareSampler(node, RankRegistry(), host_id=f"host-{i:05d}", nic=probe, host_index=i)
        for second in (0, 1):
            _tree(root, i, values, second)
            at = t0 + second * 1_000_000_000
            sampler.sample_once(now_ns=at, next_wall_ns=at + 1_000_000_000)
            node.flush()
        probe.close()
        for key, summary in sink.parts.items():
            if key.index == (t0 + 1_000_000_000) // 1_000_000 // 1000 * 1000:
                parts.setdefault(key, []).append(summary)
    return parts


def root_input(parts: dict[Any, list[Any]], rack_size: int) -> dict[str, Any]:
    """The windows the cluster sends the root for that second: racks' merges merged, encoded as on the wire."""
    from telemetry import Summary
    from telemetry.v1 import forward_pb2
    total = sketch = sources = centroids = 0
    for key, summaries in parts.items():
        racks = [Summary.merge_all(summaries[r:r + rack_size]) for r in range(0, len(summaries), rack_size)]
        merged = Summary.merge_all(racks)
        msg = forward_pb2.WindowSummary(key=key.to_proto(), summary=merged.to_proto(), expected=0)
        total += msg.ByteSize()
        sketch += msg.summary.sketch.ByteSize()
        sources += len(msg.summary.sources)
        centroids += len(msg.summary.sketch.weights) // 8
    n = len(parts)
    return {"windows": n, "bytes_per_s": total, "sketch_bytes_per_s": sketch, "sources_bytes_per_s": sources,
            "other_bytes_per_s": total - sketch - sources, "centroids_per_window": round(centroids / max(1, n), 1),
            "values_per_window": round(sum(s.count for ss in parts.values() for s in ss) / max(1, n), 1)}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hosts", default="64,250,500,1000,2000,4000", help="comma-separated host counts")
    p.add_argument("--values", default="same,varied", help="value shapes: same, varied (comma-separated)")
    p.add_argument("--rack-size", type=int, default=64, help="hosts per rack (merged there first)")
    p.add_argument("--out", default=None, help="directory for fleet_wire.json (default bench/results)")
    args = p.parse_args(argv)
    counts = [int(h) for h in args.hosts.split(",") if h]
    shapes = [v for v in args.values.split(",") if v]
    if not counts or any(h < 1 for h in counts) or not set(shapes) <= {"same", "varied"} or not shapes:
        p.error("--hosts: positive integers; --values: same and/or varied")
    rows = []
    print(f"{'values':7} {'hosts':>6} {'windows':>7} {'bytes/s':>9} {'sketch':>8} {'sources':>8} {'other':>7} "
          f"{'centroids':>9} {'values/w':>8} {'x first':>7}", flush=True)
    for shape in shapes:
        first = None
        for hosts in counts:
            with tempfile.TemporaryDirectory(prefix="fleet_wire_", dir=_scratch()) as tmp:
                started = time.monotonic()
                row = {"values": shape, "hosts": hosts, **root_input(sample_hosts(Path(tmp), hosts, shape),
                                                                    args.rack_size)}
                row["took_s"] = round(time.monotonic() - started, 1)
            first = first or row["bytes_per_s"]
            row["ratio_to_first"] = round(row["bytes_per_s"] / first, 3)
            rows.append(row)
            print(f"{shape:7} {hosts:>6} {row['windows']:>7} {row['bytes_per_s']:>9,} {row['sketch_bytes_per_s']:>8,} "
                  f"{row['sources_bytes_per_s']:>8,} {row['other_bytes_per_s']:>7,} {row['centroids_per_window']:>9} "
                  f"{row['values_per_window']:>8} {row['ratio_to_first']:>7}", flush=True)
    ratios = {}
    for shape in shapes:
        by = {r["hosts"]: r["bytes_per_s"] for r in rows if r["values"] == shape}
        if 250 in by and 2000 in by:
            ratios[shape] = round(by[2000] / by[250], 3)
    if ratios:
        print("root window bytes per second, 2,000 / 250 hosts:", ratios)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results"
    sys.exit(write_result(out, NAME, {"complete": True, "rack_size": args.rack_size, "rows": rows,
                                      "ratio_2000_over_250": ratios}, "fleet_wire"))


if __name__ == "__main__":
    main()
