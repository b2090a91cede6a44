#!/usr/bin/env python
"""What a child's late deltas cost a tier's intake against its first parts, per window, in one run.

    python bench/late_intake.py [--windows 300] [--repeats 20] [--rounds 3] [--out bench/results]

The native unit reader (`read_unit`, telemetry/summary/native/unit.cpp) leaves a window whose `late` flag is set to
the per-window path (`CollectorService._parse`, which carries the flag into `Part.late`), so a unit of late deltas is
parsed by protobuf and judged window by window. This measures that cost: one unit of --windows windows (one per
metric, 8 ranks each), late or not, through the stream's deserialiser and parser (`_receive` + `_parse_unit`) of a
collector whose windows are held natively; the two kinds interleaved (first, late, first, late, ...), process CPU
time per window. Prints the figures and writes late_intake.json under --out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script
sys.path.insert(0, str(Path(__file__).resolve().parent))

from collectors.collector.service import CollectorService
from collectors.common.validation import MetricBudget
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines
from machine import REPO, git_head, machine_facts
from telemetry import Summary
from telemetry.v1 import forward_pb2, summary_pb2


def unit(windows: int, late: bool) -> bytes:
    """A child's unit: one window of step 3 per metric, 8 ranks each, every one a late delta or none."""
    batch = forward_pb2.SummaryBatch(sender_id="child", seq=1)
    for i in range(windows):
        values = np.random.default_rng(i).lognormal(0, 1, 8)
        summary = Summary.from_arrays(values, np.arange(8, dtype=np.int64), time_ns=5)
        batch.windows.add(key=summary_pb2.WindowKey(job="job", metric=f"m{i}", step=3),
                          summary=summary.to_proto(), expected=16, late=late)
    return batch.SerializeToString()


def us_per_window(service: CollectorService, data: bytes, windows: int, repeats: int) -> float:
    start = time.process_time()
    for _ in range(repeats):
        service._parse_unit(service._receive(data))
    return (time.process_time() - start) / repeats / windows * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", type=int, default=300, help="windows per unit (default 300: one per metric)")
    p.add_argument("--repeats", type=int, default=20, help="units read per measurement (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved measurements per kind (default 3)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    node = Node("rack", Deadlines(120.0), ack_down=lambda *a, **k: None, native=True)
    service = CollectorService(node, None, None, MetricBudget(args.windows), max_world_size=4096)  # type: ignore[arg-type]  # no host or stream slots: parsing only
    units = {kind: unit(args.windows, kind == "late") for kind in ("first", "late")}
    samples: dict[str, list[float]] = {"first": [], "late": []}
    for _ in range(args.rounds):
        for kind, data in units.items():
            samples[kind].append(us_per_window(service, data, args.windows, args.repeats))
    medians = {kind: statistics.median(values) for kind, values in samples.items()}
    ratio = medians["late"] / medians["first"]
    print(f"first parts: {medians['first']:.2f} us a window, late deltas: {medians['late']:.2f} us a window "
          f"({ratio:.1f}x; rounds {samples})")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "late_intake.json"
    out.write_text(json.dumps({"benchmark": "late_intake", "argv": sys.argv[1:], "git_commit": git_head(),
                               "machine": machine_facts(), "us_per_window": samples, "median": medians,
                               "late_over_first": ratio}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
