#!/usr/bin/env python
"""Scale: the aggregation tree from 1,024 to 16,384 ranks, against gathering everything (issue 5).

    python bench/scale.py --out bench/results [--sizes 1024,2048,4096,8192,16384] [--steps 10] [--quick]
    python bench/scale.py --metrics 20,100,300 --out bench/results/metrics [...]   # the metrics axis

Per size N: 20 metrics per rank per step (--metrics: one whole run per count, each in OUT/metrics-M, and
scale_metrics.json with the table of every tier's CPU per step by metrics and size), 8 ranks per node agent,
32 agents per rack (--agents-per-rack).

The tree: every collector (racks; a cluster tier when there are more racks than the root's fan-in of 4,
--root-fanin, each collector taking at most 16 children, --racks-per-collector; the root with its SQLite store,
API and detectors) is a real `CollectorServer` (the root a `RootServer`) process (grpc.aio) speaking gRPC on loopback. The sizes in --wide
(default 16,384) are also run, tree only, at realistic fan-ins (--wide-shape 64x32: 64 agents per rack, up to 32
racks per collector, so 16,384 ranks are 2,048 agents in 32 racks of 64 under the root). The node agents are
the real agent classes wired as `AgentServer.__init__` wires them, each with its own Outbox and Forward stream to its rack, hosted up to 256 to
a process. At every size, rank input is fed to the agents in-process (a pre-serialised `RankMessage` per rank
per step, parsed and handed to `AgentService._batch` as the stream reader does; no SDK stream), and each agent
is then ticked once with `AgentServer`'s flush body.

The baseline: one process receives every rank's every value over the same gRPC stack and, once all N ranks
sent a step, computes exact figures per metric with numpy and commits them to SQLite.

Each run: start, warm-up steps, an idle period (each process's background CPU per second), then the measured
steps, closed loop. Per step figures are process CPU (every thread) net of the idle background; bytes are
counted by the receiving process; peak RSS is VmHWM. See docs/scale.md.
"""

# The code, a module a job: scale_workload (what the ranks send), scale_child (the processes and their JSON
# commands), scale_collector / scale_agents / scale_gather (the processes' roles: collectors, the agents fed
# in-process, the baseline), scale_runs (one run of a size: start, drive, collect), scale_measure (CPU, bytes,
# latency, errors), scale_report and scale_plot (scale.json, the table, scale.png); this file is the command line.

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script only bench/ is on sys.path

from bench.harness import apply_quick, parser, run_in_workdir
from bench.scale_plot import plot
from bench.scale_report import completed, config, markdown, result, table
from bench.scale_runs import Runner

DEFAULT_SIZES = (1024, 2048, 4096, 8192, 16384)
QUICK = {"sizes": "256,1024", "steps": 2, "warmup": 1, "idle_s": 1.0, "wide": "1024"}
# `_child ROLE CONFIG`: the module and function of each role, imported in that child alone.
ROLES = {"collector": ("bench.scale_collector", "child_collector"), "agents": ("bench.scale_agents", "child_agents"),
         "gather": ("bench.scale_gather", "child_gather"), "senders": ("bench.scale_gather", "child_senders")}


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = parser(__doc__, "scale", QUICK, writes="scale.json and scale.png")
    p.add_argument("--sizes", default=",".join(map(str, DEFAULT_SIZES)), help="comma-separated rank counts")
    p.add_argument("--steps", type=int, default=10, help="measured steps per size and design")
    p.add_argument("--warmup", type=int, default=2, help="warm-up steps (not measured)")
    p.add_argument("--idle-s", type=float, default=5.0, help="seconds of idle background measured per run")
    p.add_argument("--collector-deadline-floor", type=float, default=60.0,
                   help="collectors' and root's deadline floor: the simulated cluster is slower than real "
                        "time, windows should seal on completeness")
    p.add_argument("--step-timeout", type=float, default=120.0, help="give up a run after a step takes this long")
    p.add_argument("--baseline-timeout", type=float, default=60.0,
                   help="the baseline is stopped (and larger sizes skipped) when a step takes longer than this")
    p.add_argument("--no-baseline", action="store_true")
    p.add_argument("--agents-per-rack", type=int, default=32, help="node agents (of 8 ranks) per rack collector")
    p.add_argument("--racks-per-collector", type=int, default=16,
                   help="most children of a collector above the racks (cluster tier)")
    p.add_argument("--root-fanin", type=int, default=4,
                   help="cluster tiers are added until the root has at most this many children")
    p.add_argument("--wide", default="16384",
                   help="sizes also run (tree only) at realistic fan-ins, --wide-shape; '' for none")
    p.add_argument("--wide-shape", default="64x32",
                   help="AxR: A agents per rack, R racks per collector (and at most R children of the root)")
    p.add_argument("--share-channels", action=argparse.BooleanOptionalAction, default=True,
                   help="one gRPC channel per rack address for all the agents a process hosts (each agent "
                        "keeps its own Outbox and stream, on the process's one client loop)")
    p.add_argument("--metrics", default=None,
                   help="comma-separated metrics per rank per step (e.g. 20,100,300): a run of every size per "
                        "count, in OUT/metrics-M, then scale_metrics.json (default: 20, one run)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("-v", "--verbose", action="store_true", help="print each phase with its time")
    p.add_argument("--keep", action="store_true", help="keep the work directory (logs, databases)")
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    return args


def run(args: argparse.Namespace, workdir: Path, console: Any) -> dict[str, Any]:
    """Every size, the tree then the baseline, then the tree at --wide-shape; scale.json written after each run
    (complete: false until the last), scale.png at the end."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    wide_sizes = [int(s) for s in args.wide.split(",") if s.strip()]
    shape = {"agents_per_rack": args.agents_per_rack, "max_fanin": args.racks_per_collector,
             "root_fanin": args.root_fanin}
    apr, rpc = (int(x) for x in args.wide_shape.lower().split("x"))
    wide_shape = {"agents_per_rack": apr, "max_fanin": rpc, "root_fanin": rpc}
    cfg = config(args, sizes, wide_sizes, shape, wide_shape)
    started = time.monotonic()
    load0 = os.getloadavg()
    tree: list[dict] = []
    base: list[dict] = []
    failed: list[dict] = []

    def save(final: bool) -> dict:
        out = result(cfg, tree, base, failed, load0, time.monotonic() - started, final)
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "scale.json").write_text(json.dumps(out, indent=1))
        done_tree, done_base, done_wide = completed(tree, base)
        if final and (done_tree or done_base):
            plot(args.out / "scale.png", done_tree, done_base, out["crossover"], done_wide)
        return out

    stopped = False
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console) as progress:
        per_run = args.warmup + args.steps
        task = progress.add_task("starting", total=(len(sizes) * (1 if args.no_baseline else 2) + len(wide_sizes))
                                 * per_run)
        runner = Runner(args, workdir, progress, task)
        for world, wide in [(w, False) for w in sizes] + [(w, True) for w in wide_sizes]:
            try:
                r = runner.tree(world, wide_shape if wide else shape)
                r["wide"] = wide
                tree.append(r)
                progress.console.print(
                    f"tree   {world:>6,} ({r['plan']['fanin']['rack']}/rack, root fan-in {r['plan']['root_fanin']}): root {r['root_bytes_per_step'] / 1024:,.1f} KiB/step, root "
                    f"{r['root_cpu_ms_per_step']:.1f} ms/step, rack {r['tiers']['rack']['cpu_ms_per_step']:.1f} "
                    f"ms/step, agent {r['tiers']['agent']['cpu_ms_per_step']:.2f} ms/step, "
                    f"{r['steps_per_s']:.2f} steps/s")
            except (TimeoutError, RuntimeError) as exc:
                failed.append({"design": "tree", "ranks": world, "wide": wide, "reason": str(exc)[:2000]})
                progress.console.print(f"tree {world:,}: FAILED: {exc}")
            save(False)
            if args.no_baseline or wide:
                continue
            if stopped:
                progress.advance(task, per_run)
                continue
            try:
                r = runner.baseline(world)
                base.append(r)
                progress.console.print(
                    f"gather {world:>6,}: root {r['root_bytes_per_step'] / 1024:,.1f} KiB/step, root "
                    f"{r['root_cpu_ms_per_step']:.1f} ms/step, {r['steps_per_s']:.2f} steps/s")
            except (TimeoutError, RuntimeError) as exc:
                stopped = True
                base.append({"design": "gather", "ranks": world, "completed": False, "reason": str(exc)[:500]})
                progress.console.print(f"gather {world:,}: stopped, larger sizes skipped: {exc}")
            save(False)
        progress.update(task, description="done")
    return save(True)


def child(argv: list[str]) -> int:
    """`_child ROLE CONFIG`: one of a run's processes (bench/scale_child.py), dying with its parent."""
    from collectors.common.lifetime import die_with_parent
    from collectors.common.memory import tune_allocator
    die_with_parent()
    tune_allocator()  # as `telemetry collector` and `telemetry agent` do first (collectors/cli.py _serve)
    module, function = ROLES[argv[1]]
    getattr(importlib.import_module(module), function)(json.loads(argv[2]))
    return 0


def metrics_axis(args: argparse.Namespace, argv: list[str]) -> int:
    """One run of this command per metric count (the workload reads TELEMETRY_SCALE_METRICS in every process it
    starts), then the table of what each tier pays per step, by metrics and ranks."""
    import subprocess

    counts = [int(m) for m in args.metrics.split(",") if m.strip()]
    rest, skip = [], False
    for a in argv:  # the same options, less --metrics and --out
        if skip:
            skip = False
        elif a in ("--metrics", "--out"):
            skip = True
        elif not a.startswith(("--metrics=", "--out=")):
            rest.append(a)
    rows, failed = [], []
    for count in counts:
        out = args.out / f"metrics-{count}"
        print(f"--- {count} metrics per rank: {out}", flush=True)
        done = subprocess.run([sys.executable, __file__, *rest, "--out", str(out)],
                              env={**os.environ, "TELEMETRY_SCALE_METRICS": str(count)})
        if done.returncode:
            failed.append(count)
        run = json.loads((out / "scale.json").read_text()) if (out / "scale.json").exists() else {"tree": []}
        for r in run["tree"]:
            if r.get("completed", True) and "tiers" in r:
                rows.append({"metrics": count, "ranks": r["ranks"], "wide": r.get("wide", False),
                             "agents_per_rack": r["plan"]["fanin"]["rack"],
                             "root_cpu_ms_per_step": r["root_cpu_ms_per_step"],
                             "rack_cpu_ms_per_step": r["tiers"]["rack"]["cpu_ms_per_step"],
                             "agent_cpu_ms_per_step": r["tiers"]["agent"]["cpu_ms_per_step"],
                             "root_bytes_per_step": r["root_bytes_per_step"], "steps_per_s": r["steps_per_s"]})
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale_metrics.json").write_text(json.dumps(
        {"metrics": counts, "rows": rows, "failed_counts": failed, "argv": argv}, indent=1))
    print("| metrics | ranks | agents/rack | root CPU ms/step | rack CPU ms/step | agent CPU ms/step | root KiB/step |"
          " steps/s |\n|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['metrics']} | {r['ranks']:,} | {r['agents_per_rack']} | {r['root_cpu_ms_per_step']:.1f} | "
              f"{r['rack_cpu_ms_per_step']:.1f} | {r['agent_cpu_ms_per_step']:.2f} | "
              f"{r['root_bytes_per_step'] / 1024:,.1f} | {r['steps_per_s']:.2f} |")
    print(f"wrote {args.out / 'scale_metrics.json'}")
    return 1 if failed else 0


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["_child"]:
        return child(argv)
    args = parse_args(argv)
    if args.metrics is not None:
        return metrics_axis(args, argv)
    from rich.console import Console

    console = Console(width=None if sys.stdout.isatty() else 200)
    # --keep: a work directory of our own, which run_in_workdir leaves in place (a temporary one it removes).
    workdir = Path(tempfile.mkdtemp(prefix="telemetry-scale-")) if args.keep else None
    out = run_in_workdir("scale", workdir, lambda where: run(args, where, console))
    head, rows = table(out)
    print(markdown(head, rows), flush=True)
    console.print_json(json.dumps({"verdicts": out["verdicts"], "verdicts_wide": out["verdicts_wide"],
                                   "crossover": out["crossover"], "failed": out["failed"]}))
    console.print(f"wrote {args.out / 'scale.json'} and {args.out / 'scale.png'} in {out['run_time_s']:.0f} s")
    return 1 if out["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
