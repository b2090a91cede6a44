#!/usr/bin/env python
"""What a child's late deltas cost a tier's intake against its first parts, per window, in one run.

    python bench/late_intake.py [--windows 300] [--repeats 20] [--rounds 3] [--out bench/results]

Until issue 29's late fast path the native unit reader (`read_unit`, telemetry/summary/native/unit.cpp) left a window
whose `late` flag is set to the per-window path (`CollectorService._parse`), so a unit of late deltas was parsed by
protobuf and judged window by window (4.9x a first part's cost here); now it reads the flag with the window and
the unit takes the batch path. Two measures, each of one unit of --windows windows (one per metric, 8 ranks each),
late or not, the two kinds interleaved (first, late, first, late, ...), process CPU time per window:

- `us_per_window` (read): the stream's deserialiser and parser (`_receive` + `_parse_unit`) of a collector whose
  windows are held natively;
- `intake_us_per_window`: the whole intake of a rack (`_receive` + `_handle`: the checks, the native window table
  or, for a unit not read whole, window by window), each unit into a fresh node whose budget admitted its metrics
  and whose child covers its ranks, as a rack's steady state is (the collection thresholds the servers set, a
  collection before each measure).

Prints the figures and writes late_intake.json under --out.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from pyroaring import BitMap

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script
sys.path.insert(0, str(Path(__file__).resolve().parent))

from collectors.collector.service import CollectorService
from collectors.common.gctune import tune_gc
from collectors.common.validation import MetricBudget
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines
from machine import REPO, git_head, machine_facts
from telemetry import Summary
from telemetry.v1 import forward_pb2, summary_pb2


def unit(windows: int, late: bool) -> bytes:
    """A child's unit: one window of step 3 per metric, 8 ranks each, every one a late delta or none."""
    states = forward_pb2.RankStates(job="job", alive=BitMap(range(8)).serialize(), world_size=16)
    batch = forward_pb2.SummaryBatch(sender_id="child", seq=1, ranks=[states])
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


class _Answers:
    def put(self, ack: object) -> None:
        """The acks are not looked at."""


def rack(windows: int) -> CollectorService:
    """A rack's service over a native window table, its budget holding the unit's metrics already."""
    node = Node("rack", Deadlines(120.0), ack_down=lambda *a, **k: None, native=True)
    service = CollectorService(node, None, None, MetricBudget(windows), max_world_size=4096)  # type: ignore[arg-type]  # no host or stream slots: intake only
    service.budget.admit_all("job", [f"m{i}" for i in range(windows)])
    return service


def intake_us_per_window(data: bytes, windows: int, repeats: int) -> float:
    """`_receive` + `_handle` of the unit into `repeats` fresh racks (made before the clock starts)."""
    racks = [rack(windows) for _ in range(repeats)]
    answers = _Answers()
    gc.collect()  # each measure starts from the same heap: the collector's passes over it are the noise here
    start = time.process_time()
    for service in racks:
        service._handle("child", service._receive(data), answers)  # type: ignore[arg-type]  # only put() is called
    spent = time.process_time() - start
    refused = [service.node.counters["bad_inputs"] for service in racks if service.node.counters["bad_inputs"]]
    assert not refused and all(len(service.node.table.windows) == windows for service in racks), \
        "every window is to be taken in"
    return spent / repeats / windows * 1e6


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--windows", type=int, default=300, help="windows per unit (default 300: one per metric)")
    p.add_argument("--repeats", type=int, default=20, help="units read per measurement (default 20)")
    p.add_argument("--rounds", type=int, default=3, help="interleaved measurements per kind (default 3)")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    tune_gc()  # as the servers run (collectors/common/gctune.py)
    node = Node("rack", Deadlines(120.0), ack_down=lambda *a, **k: None, native=True)
    service = CollectorService(node, None, None, MetricBudget(args.windows), max_world_size=4096)  # type: ignore[arg-type]  # no host or stream slots: parsing only
    units = {kind: unit(args.windows, kind == "late") for kind in ("first", "late")}
    samples: dict[str, list[float]] = {"first": [], "late": []}
    intake: dict[str, list[float]] = {"first": [], "late": []}
    for _ in range(args.rounds):
        for kind, data in units.items():
            samples[kind].append(us_per_window(service, data, args.windows, args.repeats))
            intake[kind].append(intake_us_per_window(data, args.windows, args.repeats))
    medians = {kind: statistics.median(values) for kind, values in samples.items()}
    intake_medians = {kind: statistics.median(values) for kind, values in intake.items()}
    ratio = medians["late"] / medians["first"]
    intake_ratio = intake_medians["late"] / intake_medians["first"]
    print(f"read: first parts {medians['first']:.2f} us a window, late deltas {medians['late']:.2f} us a window "
          f"({ratio:.2f}x; rounds {samples})")
    print(f"intake into a rack: first parts {intake_medians['first']:.2f} us a window, late deltas "
          f"{intake_medians['late']:.2f} us a window ({intake_ratio:.2f}x; rounds {intake})")
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "late_intake.json"
    out.write_text(json.dumps({"benchmark": "late_intake", "argv": sys.argv[1:], "git_commit": git_head(),
                               "machine": machine_facts(), "us_per_window": samples, "median": medians,
                               "late_over_first": ratio, "intake_us_per_window": intake,
                               "intake_median": intake_medians, "intake_late_over_first": intake_ratio},
                              indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
