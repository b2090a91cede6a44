#!/usr/bin/env python
"""A rack's own code with its windows held natively against the same rack with its windows in Python, in one run.

    python bench/rack_tables.py [--metrics 20,100,300] [--children 64] [--ranks-per-child 8] [--steps 6] [--rounds 2]
    valgrind --tool=callgrind --instr-atstart=no python bench/rack_tables.py --callgrind --metrics 300 [--steps 6]

Issue 29's native window table (telemetry/summary/native/table.hpp; docs/scale.md, "The native window table"). A
rack's `CollectorService`, `Node` and `Upstream` are driven in this process, without gRPC: each step, every child's
unit (bench/tier_cost.py's: one window per metric, built as agents build them) goes through the stream's deserialiser
(`CollectorService._receive`) and unit handler (`_one`), the node flushes, and the parent's DURABLE ack of what it
sent comes back (`Upstream._on_ack`), so every child's unit is acknowledged. The two tables run interleaved (python,
native, python, native, ... one fresh rack each round), and the CPU time of each step is the figure (process CPU of
this one thread: no gRPC, no other threads). Both must send the parent the same windows, byte for byte (checked,
per step). Prints a table and writes rack_tables.json under --out.

--callgrind (under valgrind's callgrind, started with --instr-atstart=no) runs the native table once, with callgrind's
instrumentation on for every step but the first (a job's first unit admits its metrics one by one): a count of the
rack's instructions a step that the machine's load does not move (docs/scale.md quotes it). callgrind writes its
profile; this writes nothing else.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # its stub parent (tests/stub_outbox.py)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script
sys.path.insert(0, str(Path(__file__).resolve().parent))

from collectors.collector.service import CollectorService, _ChildStream
from collectors.common.aioserve import StreamSlots
from collectors.common.validation import MetricBudget
from collectors.delivery.node import Node, Upstream
from collectors.delivery.windows import Deadlines
from machine import REPO, git_head, machine_facts
from stub_outbox import StubOutbox
from telemetry.v1 import forward_pb2
from tier_cost import build_units, callgrind_instrument


class _Answers:
    """A child's stream of acks, kept."""

    def __init__(self) -> None:
        self.acks: list[forward_pb2.Ack] = []

    def put(self, ack: forward_pb2.Ack) -> None:
        self.acks.append(ack)


def run(native: bool, units: list[list[bytes]], metrics: int,
        before_step: Callable[[int], None] | None = None) -> tuple[list[float], list[list[bytes]]]:
    """One fresh rack through every step: each step's CPU seconds, and the windows it sent up per step.
    `before_step(step)` is called before each step's clock starts."""
    service: CollectorService | None = None
    node = Node("rack", Deadlines(600.0), ack_down=lambda *a, **k: service.ack_down(*a, **k),  # type: ignore[union-attr]  # the service is set just below
                native=native)
    outbox = StubOutbox()
    upstream = Upstream(node, lambda on_ack: outbox)  # type: ignore[arg-type,return-value]  # the stub parent
    node.sink = upstream
    service = CollectorService(node, None, StreamSlots(10_000, "child", "--max-children"),  # type: ignore[arg-type]  # no host: no streams here
                               MetricBudget(metrics))
    streams = []
    for child in range(len(units[0])):
        stream = _ChildStream(_Answers(), None)  # type: ignore[arg-type]  # only put() is called
        stream.sender = f"child-{child}"
        service._links[stream.sender] = stream.answers
        streams.append(stream)
    times, sent = [], []
    gc.collect()
    for step, row in enumerate(units):
        if before_step is not None:
            before_step(step)
        t0 = time.process_time()
        for stream, data in zip(streams, row):
            service._one(stream, service._receive(data))
        node.flush(time.monotonic())
        shipped, outbox.units = outbox.units, []
        for unit in shipped:
            upstream._on_ack(unit, forward_pb2.Ack(seq=unit.seq, status=forward_pb2.Ack.DURABLE))
        times.append(time.process_time() - t0)
        sent.append(sorted(w.SerializeToString() for unit in shipped for w in unit.message.windows))
        durable = sum(1 for s in streams for a in s.answers.acks  # type: ignore[attr-defined]  # the answers are an _Answers
                      if a.seq == step + 1 and a.status == forward_pb2.Ack.DURABLE)
        if durable != len(streams) or len(sent[-1]) != metrics:
            raise RuntimeError(f"step {step}: {durable} of {len(streams)} units durable, {len(sent[-1])} windows sent")
    return times, sent


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--metrics", default="20,100,300", help="comma-separated metric counts per rank")
    p.add_argument("--children", type=int, default=64, help="the rack's children (agents)")
    p.add_argument("--ranks-per-child", type=int, default=8)
    p.add_argument("--steps", type=int, default=6, help="steps per run (the first, a job's first unit, not counted)")
    p.add_argument("--rounds", type=int, default=2, help="runs of each table, interleaved")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    p.add_argument("--callgrind", action="store_true",
                   help="under callgrind: the native table once, instrumented for every step but the first")
    args = p.parse_args()
    if args.steps < 2 or args.rounds < 1:
        p.error("--steps must be at least 2 and --rounds at least 1")
    if args.callgrind:
        for metrics in (int(m) for m in args.metrics.split(",")):
            units = build_units(args.children, args.ranks_per_child, metrics, args.steps)
            run(True, units, metrics, before_step=lambda step: callgrind_instrument(True) if step == 1 else None)
            callgrind_instrument(False)
            print(f"{metrics} metrics: {args.steps - 1} steps instrumented", flush=True)
        return 0
    results: list[dict[str, Any]] = []
    for metrics in (int(m) for m in args.metrics.split(",")):
        units = build_units(args.children, args.ranks_per_child, metrics, args.steps)
        per: dict[str, list[float]] = {"python": [], "native": []}
        sent: dict[str, list[list[bytes]]] = {}
        for _ in range(args.rounds):
            for table in ("python", "native"):
                times, sent[table] = run(table == "native", units, metrics)
                per[table].extend(times[1:])  # the first step admits the job's metrics one by one in both
        if sent["python"] != sent["native"]:
            raise RuntimeError(f"{metrics} metrics: the two tables sent different windows")
        child_windows = args.children * metrics
        row: dict[str, Any] = {"metrics": metrics, "children": args.children, "child_windows_per_step": child_windows}
        for table, times in per.items():
            median = statistics.median(times)
            row[table] = {"cpu_ms_per_step_median": median * 1e3, "cpu_ms_per_step": [t * 1e3 for t in times],
                          "us_per_child_window": median / child_windows * 1e6}
        row["python_over_native"] = row["python"]["cpu_ms_per_step_median"] / row["native"]["cpu_ms_per_step_median"]
        results.append(row)
        print(f"{metrics:4d} metrics x {args.children} children: python table "
              f"{row['python']['cpu_ms_per_step_median']:7.1f} ms/step ({row['python']['us_per_child_window']:.2f} "
              f"us/child window), native table {row['native']['cpu_ms_per_step_median']:7.1f} ms/step "
              f"({row['native']['us_per_child_window']:.2f} us), {row['python_over_native']:.2f}x; same windows sent",
              flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "rack_tables.json"
    out.write_text(json.dumps({"benchmark": "rack_tables", "argv": sys.argv[1:], "git_commit": git_head(),
                               "machine": machine_facts(), "results": results}, indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
