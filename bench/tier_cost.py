#!/usr/bin/env python
"""One tier of the tree on its own: a real rack or root fed by its children's pre-built units (issue 29).

    python bench/tier_cost.py --tier rack [--children 64] [--ranks-per-child 8] [--metrics 20,100,300]
    python bench/tier_cost.py --tier root [--children 32] [--ranks-per-child 512] [--metrics 20]
    python bench/tier_cost.py --tier root --in-process [--callgrind]   (the root's intake and flush, no gRPC)
    options: --steps 8 --warmup 2 --idle-s 3 --profile [--profile-steps 10] --out bench/results

The tier under test is a real `CollectorServer` (a rack, under a real `RootServer` in a process of its own) or a
real `RootServer` with its SQLite store, API and detectors, each in its own process (bench/scale.py's collector
role, bench/scale_collector.py). Its children are simulated in this process: every child's unit of every step
(one `SummaryBatch` per child per step, one window per metric, the child's ranks' summary built by
`Summary.from_arrays` as an agent builds it, merged as a rack merges it when a child stands for more than
one agent, plus the child's `RankStates`) is built before anything is measured, then sent on a real Forward
stream on loopback. Steps are closed-loop: a step ends when every child holds the root's DURABLE ack of it.
So the tier's CPU holds none of the children's work: unlike bench/scale.py, whose figures at 16,384 ranks
come from a machine that is also running 2,048 simulated agents.

Per step: the tier's process CPU (every thread) net of its idle background (measured for --idle-s first),
and its own code on the steps' data (thread CPU of the unit handler, the flush, the ship and the parent's
acks, as bench/scale.py measures it). --profile then samples the tier's Python threads with py-spy over
--profile-steps further steps (not the measured ones: py-spy's pauses cost the tier CPU), only the thread holding
the GIL (so Python at work, not waiting), and attributes each sample to the summary path (telemetry/summary and its native module), the delivery
core (collectors/delivery), the root's finalising, store and detectors (collectors/root, collectors/detectors),
protobuf, gRPC, or other; the top functions by own samples and by inclusive samples are listed. Writes tier_cost.json (or
tier_cost_root.json) under --out.

--in-process (the root only) drives a real `RootServer`'s service and flush in this process, without gRPC, its event
loop or its threads: each child's unit read as the stream reads it (`CollectorService._receive`), taken in as the loop
takes it (`_inline`; where that declines, the pool's path, `_one`, waiting for a parked unit's store reads), the node
flushed after every 8 units and at the step's end (its SQLite commit, consumers and DURABLE acks included), and every
step's ack per unit checked (its DURABLE: the children open with skip_received, as every Upstream does). It reports
the CPU of the whole process per step and by phase (read, intake, flush): what the root's own code costs, apart from
gRPC's and asyncio's per-message work, and, being deterministic, a count
of instructions that the machine's load does not move: `valgrind --tool=callgrind --instr-atstart=no python
bench/tier_cost.py --tier root --in-process --callgrind ...` counts only the measured steps (--callgrind turns
callgrind's instrumentation on for them with callgrind_control, and off after). Writes tier_cost_root_inprocess.json.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script

REPO = Path(__file__).resolve().parent.parent
JOB = "tiercost"


def build_units(children: int, per_child: int, metrics: int, steps: int) -> list[list[bytes]]:
    """units[step][child]: serialised SummaryBatch of that child at that step (seq = step + 1)."""
    import numpy as np
    from pyroaring import BitMap

    from collectors.common.keys import Key
    from telemetry import Summary
    from telemetry.v1 import forward_pb2

    world = children * per_child
    names = [f"metric_{i:03d}" for i in range(metrics)]
    out: list[list[bytes]] = []
    for step in range(steps):
        rng = np.random.default_rng([7, step])
        values = 0.5 * rng.lognormal(0.0, 1.0, size=(metrics, world))
        row = []
        for child in range(children):
            ranks = np.arange(child * per_child, (child + 1) * per_child, dtype=np.int64)
            windows = []
            for m, name in enumerate(names):
                agents = [Summary.from_arrays(values[m, r0:r0 + 8], ranks[r0 - ranks[0]:r0 - ranks[0] + 8], time_ns=1)
                          for r0 in range(int(ranks[0]), int(ranks[-1]) + 1, 8)]
                summary = agents[0] if len(agents) == 1 else Summary.merge_all(agents)
                windows.append(forward_pb2.WindowSummary(key=Key(JOB, name, step).to_proto(),
                                                         summary=summary.to_proto(), expected=world))
            states = forward_pb2.RankStates(job=JOB, alive=BitMap(ranks.tolist()).serialize(), world_size=world)
            row.append(forward_pb2.SummaryBatch(sender_id=f"child-{child}", seq=step + 1, windows=windows,
                                                ranks=[states]).SerializeToString())
        out.append(row)
    return out


class Sender:
    """One child's Forward stream: sends pre-serialised units, collects the DURABLE acks (opened with skip_received,
    as a real child's: the tier answers each unit with its DURABLE alone)."""

    def __init__(self, address: str, sender_id: str) -> None:
        import grpc

        from telemetry.v1 import forward_pb2

        self.channel = grpc.insecure_channel(address)
        self._requests: queue.Queue = queue.Queue()
        self.durable: set[int] = set()
        self.other: list[str] = []
        self.closing = False
        self._cond = threading.Condition()
        # Units travel pre-serialised: the stream's serializer passes bytes through.
        self._call = self.channel.stream_stream(
            "/telemetry.v1.Collector/Forward", request_serializer=lambda b: b,
            response_deserializer=forward_pb2.Ack.FromString)(iter(self._requests.get, None))
        threading.Thread(target=self._read, daemon=True).start()
        # Opened as every Upstream opens its stream (collectors/delivery/outbox.py): no plain RECEIVED acks wanted.
        self._requests.put(forward_pb2.SummaryBatch(sender_id=sender_id, seq=0, skip_received=True).SerializeToString())

    def _read(self) -> None:
        import grpc

        from telemetry.v1 import forward_pb2

        try:
            for ack in self._call:
                with self._cond:
                    if ack.status == forward_pb2.Ack.DURABLE:
                        self.durable.add(ack.seq)
                    elif ack.status != forward_pb2.Ack.RECEIVED:
                        self.other.append(f"seq {ack.seq}: status {ack.status} {list(ack.rejections)[:2]}")
                    self._cond.notify_all()
        except grpc.RpcError as exc:
            if not self.closing:
                with self._cond:
                    self.other.append(f"stream ended: {exc.code()}")
                    self._cond.notify_all()

    def send(self, unit: bytes) -> None:
        self._requests.put(unit)

    def wait_durable(self, seq: int, timeout: float) -> None:
        end = time.monotonic() + timeout
        with self._cond:
            while seq not in self.durable:
                if self.other:
                    raise RuntimeError("; ".join(self.other))
                left = end - time.monotonic()
                if left <= 0:
                    raise RuntimeError(f"seq {seq} not durable within {timeout} s")
                self._cond.wait(min(left, 0.5))

    def close(self) -> None:
        self.closing = True
        self._requests.put(None)
        self.channel.close()


def where(stack: str) -> str:
    """The part of the code a py-spy sample (its frames, outermost first) is charged to: its innermost known one."""
    for frame in reversed(stack.split(";")):
        if "telemetry/summary" in frame or "_native" in frame:
            return "summary path (telemetry/summary, native)"
        if "collectors/delivery" in frame:
            return "delivery core (collectors/delivery)"
        if "collectors/root" in frame or "collectors/detectors" in frame:
            return "root: finalise, store, detectors (collectors/root, collectors/detectors)"
        if "collectors/collector" in frame or "collectors/common" in frame:
            return "collector service (collectors/collector, collectors/common)"
        if "google/protobuf" in frame or "_pb2" in frame:
            return "protobuf"
        if "grpc" in frame:
            return "gRPC"
    return "other (interpreter, threads, GC)"


def start_profile(pid: int, out: Path, rate: int) -> tuple[subprocess.Popen, Path]:
    """py-spy sampling the tier process until `stop_profile`."""
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    raw = out / f"pyspy_{pid}.txt"
    proc = subprocess.Popen([spy, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw", "--output",
                             str(raw), "--threads", "--gil"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # py-spy attaches
    return proc, raw


def stop_profile(proc: subprocess.Popen, raw: Path) -> dict[str, Any]:
    """The samples of the tier's thread holding the GIL (py-spy --gil: Python running, not waiting; gRPC's C threads
    are not sampled): shares by part of the code, top functions by own samples."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
    if not raw.exists():
        return {"error": "py-spy wrote nothing (ptrace not permitted?)"}
    parts: collections.Counter[str] = collections.Counter()
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        frames = [f for f in stack.split(";") if not f.startswith(("thread (", "process "))]
        if not frames:
            continue
        n = int(count)
        total += n
        parts[where(";".join(frames))] += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    raw.unlink()
    return {"samples": total, "shares": {k: v / total for k, v in parts.most_common()} if total else {},
            "top_own": [{"function": f, "share": n / total} for f, n in own.most_common(20)] if total else [],
            "top_inclusive": [{"function": f, "share": n / total} for f, n in inclusive.most_common(40)] if total else []}


def run(args: argparse.Namespace, metrics: int, out: Path) -> dict[str, Any]:
    os.environ["TELEMETRY_SCALE_METRICS"] = str(metrics)  # the collectors' per-job metric budget admits them all
    from bench.scale_child import Child, kill_all

    steps = args.warmup + args.steps + (args.profile_steps if args.profile else 0)
    t0 = time.monotonic()
    units = build_units(args.children, args.ranks_per_child, metrics, steps)
    built_s = time.monotonic() - t0
    work = Path(tempfile.mkdtemp(prefix="tier_cost_"))
    procs: list[Child] = []
    senders: list[Sender] = []
    try:
        root = Child("root", "collector", {"id": "root", "parents": [], "db": str(work / "root.db"),
                                           "deadline_floor": 120.0}, work)
        procs.append(root)
        address = root.wait_ready()["address"]
        tier = root
        if args.tier == "rack":
            tier = Child("rack", "collector", {"id": "rack", "parents": [address], "db": "",
                                               "deadline_floor": 120.0}, work)
            procs.append(tier)
            address = tier.wait_ready()["address"]
        senders = [Sender(address, f"child-{c}") for c in range(args.children)]

        def step(i: int) -> None:
            for c, sender in enumerate(senders):
                sender.send(units[i][c])
            for sender in senders:
                sender.wait_durable(i + 1, args.step_timeout)

        for i in range(args.warmup):
            step(i)
        cpu0 = sum(tier.cpu_jiffies())  # seconds (bench/procstat.py), despite the name
        time.sleep(args.idle_s)
        idle_per_s = (sum(tier.cpu_jiffies()) - cpu0) / args.idle_s
        own0 = tier.ask({"cmd": "stats"})["stats"]["step_work_s"]
        cpu0, wall0 = sum(tier.cpu_jiffies()), time.monotonic()
        for i in range(args.warmup, args.warmup + args.steps):
            step(i)
        wall = time.monotonic() - wall0
        cpu = sum(tier.cpu_jiffies()) - cpu0
        own = tier.ask({"cmd": "stats"})["stats"]["step_work_s"] - own0
        spy: dict[str, Any] = {}
        if args.profile:  # further steps, sampled (py-spy's pauses would inflate the figures above)
            proc, raw = start_profile(tier.pid, work, args.profile_rate)
            for i in range(args.warmup + args.steps, steps):
                step(i)
            spy = stop_profile(proc, raw)
        n = args.steps
        return {
            "tier": args.tier, "metrics": metrics, "children": args.children, "ranks_per_child": args.ranks_per_child,
            "ranks": args.children * args.ranks_per_child, "steps": n, "warmup": args.warmup,
            "child_windows_per_step": args.children * metrics,
            "cpu_ms_per_step": cpu / n * 1e3, "idle_cpu_ms_per_s": idle_per_s * 1e3,
            "net_cpu_ms_per_step": (cpu - idle_per_s * wall) / n * 1e3, "own_code_ms_per_step": own / n * 1e3,
            "wall_ms_per_step": wall / n * 1e3, "units_built_s": built_s,
            "cpu_us_per_child_window": cpu / n / (args.children * metrics) * 1e6,
            "profile": spy or None, "load_1min": os.getloadavg()[0],
        }
    finally:
        for sender in senders:
            sender.close()
        kill_all(procs)
        shutil.rmtree(work, ignore_errors=True)


class _Answers:
    """A stream's answers, kept (the in-process drive has no stream to write them to)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def put(self, item: Any) -> None:
        self.items.append(item)


def callgrind_instrument(on: bool) -> None:
    """callgrind's instrumentation of this process on or off (run under valgrind --tool=callgrind), so that only the
    measured steps are counted (bench/rack_tables.py uses it too)."""
    subprocess.run(["callgrind_control", "-i", "on" if on else "off", str(os.getpid())], check=True,
                   stdout=subprocess.DEVNULL, timeout=120)
    time.sleep(1.0)  # valgrind takes the command up at its next poll


def run_in_process(args: argparse.Namespace, metrics: int) -> dict[str, Any]:
    """The root's intake and flush in this process (see the module's docstring): CPU per step, by phase."""
    os.environ["TELEMETRY_SCALE_METRICS"] = str(metrics)
    from collectors.collector.service import _ChildStream
    from collectors.common.aioserve import NOT_INLINE
    from collectors.common.gctune import tune_gc
    from collectors.root.server import RootConfig, RootServer
    from telemetry.v1 import forward_pb2

    steps = args.warmup + args.steps
    units = build_units(args.children, args.ranks_per_child, metrics, steps)
    work = Path(tempfile.mkdtemp(prefix="tier_cost_"))
    root = RootServer(RootConfig(db=work / "root.db", api=None, deadline_floor_s=120.0))
    tune_gc()  # as RootServer.start
    root.reads.start()
    service, node = root.service, root.node
    streams = [_ChildStream(cast(Any, _Answers()), None) for _ in range(args.children)]
    phases = dict.fromkeys(("read", "intake", "flush"), 0.0)
    try:
        for c, stream in enumerate(streams):
            opening = forward_pb2.SummaryBatch(sender_id=f"child-{c}", seq=0, skip_received=True).SerializeToString()
            service._one(stream, service._receive(opening))

        def step(i: int, timed: dict[str, float]) -> None:
            clock = time.process_time
            for c, stream in enumerate(streams):
                t0 = clock()
                unit = service._receive(units[i][c])
                t1 = clock()
                if service._inline(stream, unit) is NOT_INLINE:
                    parked = service._one(stream, unit)
                    if parked is not None:
                        parked.ready.result(args.step_timeout)
                t2 = clock()
                if c % 8 == 7:
                    node.flush()
                timed["read"] += t1 - t0
                timed["intake"] += t2 - t1
                timed["flush"] += clock() - t2
            t0 = clock()
            node.flush()
            timed["flush"] += clock() - t0
            for c, stream in enumerate(streams):  # the DURABLE of this step's unit, nothing else (opened quiet)
                statuses = sorted(ack.status for ack in cast(Any, stream.answers).items if ack.seq == i + 1)
                if statuses != [forward_pb2.Ack.DURABLE]:
                    raise RuntimeError(f"step {i}, child {c}: acks {statuses}")

        for i in range(args.warmup):
            step(i, dict(phases))
        if args.callgrind:
            callgrind_instrument(True)
        cpu0, wall0 = time.process_time(), time.monotonic()
        for i in range(args.warmup, steps):
            step(i, phases)
        cpu, wall = time.process_time() - cpu0, time.monotonic() - wall0
        if args.callgrind:
            callgrind_instrument(False)
    finally:
        root.reads.stop()
        root.store.close()
        shutil.rmtree(work, ignore_errors=True)
    n = args.steps
    return {
        "tier": "root", "in_process": True, "metrics": metrics, "children": args.children,
        "ranks_per_child": args.ranks_per_child, "ranks": args.children * args.ranks_per_child, "steps": n,
        "warmup": args.warmup, "child_windows_per_step": args.children * metrics, "cpu_ms_per_step": cpu / n * 1e3,
        "phase_cpu_ms_per_step": {name: spent / n * 1e3 for name, spent in phases.items()},
        "wall_ms_per_step": wall / n * 1e3, "cpu_us_per_child_window": cpu / n / (args.children * metrics) * 1e6,
        "load_1min": os.getloadavg()[0],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tier", choices=("rack", "root"), default="rack")
    p.add_argument("--children", type=int, help="children of the tier (rack: 64 agents; root: 32 racks)")
    p.add_argument("--ranks-per-child", type=int, help="ranks under each child (rack: 8; root: 512)")
    p.add_argument("--metrics", default=None, help="comma-separated metric counts (rack: 20,100,300; root: 20)")
    p.add_argument("--steps", type=int, default=8, help="measured steps per metric count")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--idle-s", type=float, default=3.0, help="seconds the idle background is measured")
    p.add_argument("--step-timeout", type=float, default=120.0)
    p.add_argument("--profile", action="store_true", help="then sample the tier with py-spy over further steps")
    p.add_argument("--profile-steps", type=int, default=10, help="steps sampled with --profile")
    p.add_argument("--profile-rate", type=int, default=1000, help="py-spy samples per second")
    p.add_argument("--in-process", action="store_true",
                   help="the root's intake and flush driven in this process, without gRPC (--tier root)")
    p.add_argument("--callgrind", action="store_true",
                   help="with --in-process under callgrind: instrument the measured steps only")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    if args.in_process and args.tier != "root":
        p.error("--in-process drives the root alone (--tier root)")
    if args.callgrind and not args.in_process:
        p.error("--callgrind counts the in-process drive's steps (--in-process)")
    rack = args.tier == "rack"
    args.children = args.children or (64 if rack else 32)
    args.ranks_per_child = args.ranks_per_child or (8 if rack else 512)
    if args.ranks_per_child % 8:
        p.error("--ranks-per-child must be a multiple of 8 (agents of 8 ranks)")
    counts = [int(x) for x in (args.metrics or ("20,100,300" if rack else "20")).split(",")]
    args.out.mkdir(parents=True, exist_ok=True)
    results = []
    for metrics in counts:
        if args.in_process:
            r = run_in_process(args, metrics)
            results.append(r)
            print(f"root in process {r['ranks']:,} ranks ({r['children']} children x {r['ranks_per_child']}), {metrics} "
                  f"metrics: {r['cpu_ms_per_step']:.2f} ms CPU/step (" + ", ".join(
                      f"{name} {ms:.2f}" for name, ms in r["phase_cpu_ms_per_step"].items()) +
                  f"), {r['cpu_us_per_child_window']:.1f} us per child window, load {r['load_1min']:.1f}", flush=True)
            continue
        r = run(args, metrics, args.out)
        results.append(r)
        print(f"{args.tier} {r['ranks']:,} ranks ({r['children']} children x {r['ranks_per_child']}), {metrics} metrics: "
              f"{r['cpu_ms_per_step']:.1f} ms CPU/step (net of idle {r['net_cpu_ms_per_step']:.1f}, own code "
              f"{r['own_code_ms_per_step']:.1f}), {r['cpu_us_per_child_window']:.1f} us per child window, "
              f"wall {r['wall_ms_per_step']:.0f} ms/step, load {r['load_1min']:.1f}", flush=True)
        prof = r.get("profile") or {}
        for part, share in (prof.get("shares") or {}).items():
            print(f"    {share * 100:5.1f} %  {part}")
        for title, rows in (("own", prof.get("top_own") or []), ("inclusive", prof.get("top_inclusive") or [])):
            print(f"    top functions, {title} samples:")
            for row in rows[:12 if title == "own" else 30]:
                print(f"        {row['share'] * 100:5.1f} %  {row['function']}")
    name = "tier_cost.json" if rack else "tier_cost_root_inprocess.json" if args.in_process else "tier_cost_root.json"
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    (args.out / name).write_text(json.dumps({"argv": sys.argv[1:], "git_commit": commit, "results": results}, indent=1))
    print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
