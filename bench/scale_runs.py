"""bench/scale.py's runs: the tree's shape at a size (plan_tree), and one run of a size and design (Runner.tree,
Runner.baseline): its processes started, the closed loop of warm-up, idle and measured steps driven (Runner.drive),
its figures per tier collected, its processes killed and work directory removed whatever happened."""

from __future__ import annotations

import argparse
import math
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from bench.scale_child import Child, kill_all, start_all
from bench.scale_gather import RANKS_PER_SENDER
from bench.scale_measure import (
    RootDb,
    api_steps,
    cpu_deltas,
    cpu_of,
    latency,
    per_step,
    quantile_errors,
    received,
)
from bench.scale_workload import METRICS, RANKS_PER_NODE

AGENTS_PER_HOST = 256  # simulated agents a process hosts, at most


def plan_tree(world: int, shape: dict[str, int]) -> dict[str, Any]:
    """Agents, racks of `agents_per_rack`, and collector tiers above the racks (each collector taking at most
    `max_fanin` children) until the root has at most `root_fanin` children."""
    per_rack, max_fanin, root_fanin = shape["agents_per_rack"], shape["max_fanin"], shape["root_fanin"]
    agents = math.ceil(world / RANKS_PER_NODE)
    racks = math.ceil(agents / per_rack)
    tiers = [racks]
    while tiers[-1] > root_fanin:
        tiers.append(max(root_fanin if root_fanin < max_fanin else 1, math.ceil(tiers[-1] / max_fanin)))
    names = ["rack"] + ["cluster" if i == 1 else f"tier{i + 1}" for i in range(1, len(tiers))]
    return {"agents": agents, "tiers": dict(zip(names, tiers)), "root_fanin": tiers[-1], "shape": shape_name(shape),
            "path": "agent -> " + " -> ".join(names) + " -> root",
            "fanin": {"rack": min(per_rack, agents),
                      **{names[i]: math.ceil(tiers[i - 1] / tiers[i]) for i in range(1, len(tiers))}}}


def shape_name(shape: dict[str, int]) -> str:
    return f"{shape['agents_per_rack']} agents/rack, root fan-in <= {shape['root_fanin']}" + (
        f", <= {shape['max_fanin']} per collector" if shape["max_fanin"] != shape["root_fanin"] else "")


class Runner:
    """Runs one size of one design at a time (`tree`, `baseline`) in a directory of its own under `workdir`,
    saying what it does on the rich `progress` bar's `task`."""

    def __init__(self, args: argparse.Namespace, workdir: Path, progress: Any, task: Any) -> None:
        self.args, self.workdir, self.progress, self.task = args, workdir, progress, task
        self.t0 = time.monotonic()

    def patches(self, role: str) -> dict[str, Any]:
        """What a child of `role` changes in grpcio's client: only agent-hosting processes share channels."""
        return {"share_channels": role == "agents" and self.args.share_channels}

    @contextmanager
    def run_dir(self, name: str) -> Iterator[tuple[Path, list[Child]]]:
        """A run's work directory (NAME under the bench's) and the list its processes are put in; after the run,
        whatever happened, those processes killed and the directory removed (unless --keep)."""
        work = self.workdir / name
        work.mkdir(parents=True, exist_ok=True)
        children: list[Child] = []
        try:
            yield work, children
        finally:
            kill_all(children)
            if not self.args.keep:
                shutil.rmtree(work, ignore_errors=True)

    def say(self, text: str) -> None:
        self.progress.update(self.task, description=text)
        if self.args.verbose:
            self.progress.console.print(f"[{time.monotonic() - self.t0:8.1f} s] {text}")

    # ----------------------------------------------------------------- one run
    def drive(self, label: str, world: int, feeders: list[Child], db: RootDb, stats_of: dict[str, Child],
              durable_check: Any, step_timeout: float) -> dict[str, Any]:
        """Warm-up, idle, measured steps (closed loop: a step is fed once the previous one is finalised);
        returns per-process CPU deltas, the receivers' stats before and after, and timings."""
        a = self.args
        warm, measured = a.warmup, a.steps
        procs = {c.name: c for c in feeders} | stats_of

        def feed_steps(lo: int, hi: int) -> tuple[dict[int, float], dict[int, float]]:
            fed_at: dict[int, float] = {}
            done_at: dict[int, float] = {}
            for step in range(lo, hi + 1):
                for f in feeders:
                    f.send({"cmd": "feed", "step": step})
                fed_at[step] = time.monotonic()
                end = fed_at[step] + step_timeout
                while step not in db.complete(world, step, step):
                    if time.monotonic() > end:
                        raise TimeoutError(f"step {step} not finalised within {step_timeout:.0f} s")
                    for child in procs.values():
                        if not child.alive():
                            raise RuntimeError(f"{child.name} died: {child.tail()}")
                    time.sleep(0.02)
                done_at[step] = time.monotonic()
                self.progress.advance(self.task)
                self.say(f"{label}: step {step - lo + 1}/{hi - lo + 1} {'measured' if lo > warm else 'warm-up'}")
            end = time.monotonic() + step_timeout
            while len(db.complete(world, lo, hi, metric=None)) < hi - lo + 1:  # every metric's window
                if time.monotonic() > end:
                    raise TimeoutError("not every metric window finalised")
                time.sleep(0.02)
            return fed_at, done_at

        self.say(f"{label}: warm-up")
        feed_steps(1, warm)
        durable_check(warm, step_timeout)
        time.sleep(0.5)
        self.say(f"{label}: idle {a.idle_s:.0f} s")
        cpu0 = cpu_of(procs)
        t0 = time.monotonic()
        time.sleep(a.idle_s)
        cpu1 = cpu_of(procs)
        idle_wall = time.monotonic() - t0
        idle_cpu = {n: (cpu1[n][0] - cpu0[n][0]) / idle_wall for n in procs}
        lo, hi = warm + 1, warm + measured
        stats0 = {n: c.ask({"cmd": "stats"}) for n, c in procs.items()}
        cpu0 = cpu_of(procs)
        t0 = time.monotonic()
        fed_at, done_at = feed_steps(lo, hi)
        durable_check(hi, step_timeout)
        cpu1 = cpu_of(procs)
        wall = time.monotonic() - t0
        stats1 = {n: c.ask({"cmd": "stats"}) for n, c in procs.items()}
        return {
            "wall_s": wall, "idle_wall_s": idle_wall, "stats0": stats0, "stats1": stats1,
            "steps_per_s": measured / (done_at[hi] - fed_at[lo]),
            "cpu": cpu_deltas(cpu0, cpu1, idle_cpu, wall),
        }

    # ----------------------------------------------------------------- the tree
    def tree(self, world: int, shape: dict[str, int]) -> dict[str, Any]:
        a = self.args
        plan = plan_tree(world, shape)
        label = f"tree {world:,} ({shape['agents_per_rack']}/rack, root fan-in {plan['root_fanin']})"
        with self.run_dir(f"tree-{world}-{shape['agents_per_rack']}-{shape['root_fanin']}") as (work, children):
            self.say(f"{label}: starting root and {sum(plan['tiers'].values())} collectors")
            floor = a.collector_deadline_floor
            root = Child("root", "collector", {"parents": [], "id": "root", "db": str(work / "root.db"),
                                               "deadline_floor": floor, **self.patches("collector")}, work)
            children.append(root)
            root.wait_ready()
            levels: list[list[Child]] = []
            parents = [root.ready["address"]]
            for name in reversed(list(plan["tiers"])):  # top tier first: children need their parents' addresses
                count = plan["tiers"][name]
                level = [Child(f"{name}{i}", "collector", {"parents": [parents[i * len(parents) // count]],
                                                           "id": f"{name}{i}", "deadline_floor": floor,
                                                           **self.patches("collector")}, work)
                         for i in range(count)]
                children += level
                start_all(level)
                parents = [c.ready["address"] for c in level]
                levels.insert(0, level)
            racks = [c.ready["address"] for c in levels[0]]
            agents = plan["agents"]
            per_host = min(AGENTS_PER_HOST, max(1, math.ceil(agents / 2)))
            self.say(f"{label}: starting {agents:,} agents in {math.ceil(agents / per_host)} processes")
            hosts = [Child(f"agents{h}", "agents", {"world": world, "first_agent": first, "seed": a.seed,
                                                    "agents": min(per_host, agents - first), "racks": racks,
                                                    "agents_per_rack": shape["agents_per_rack"],
                                                    **self.patches("agents"),
                                                    "steps": a.warmup + a.steps}, work)
                     for h, first in enumerate(range(0, agents, per_host))]
            children += hosts
            start_all(hosts, timeout=600)
            time.sleep(2.0)  # the racks' liveness units (every second) tell the tiers above every rank
            db = RootDb(work / "root.db", baseline=False)
            collectors = {c.name: c for c in children if c not in hosts}

            def durable_check(upto: int, timeout_s: float) -> None:
                end = time.monotonic() + timeout_s
                while not all(h.ask({"cmd": "stats"})["min_durable"] >= upto for h in hosts):
                    if time.monotonic() > end:
                        raise TimeoutError(f"rank batches of step {upto} not durable after {timeout_s} s")
                    time.sleep(0.05)

            run = self.drive(label, world, hosts, db, collectors, durable_check, a.step_timeout)
            self.say(f"{label}: collecting")
            lo, hi = a.warmup + 1, a.warmup + a.steps
            host_stats = [h.ask({"cmd": "stats"}) for h in hosts]
            late = db.late(1, hi)
            complete = db.complete(world, 1, hi, metric=None) == set(range(1, hi + 1))
            api_rows = {m: api_steps(root.ready["api"], m, hi) for m in METRICS}
            hwm = {c.name: c.hwm_mb() for c in children}
            db.close()

        m = a.steps
        tiers: dict[str, Any] = {"root": {"processes": 1, "fanin": plan["root_fanin"],
                                          "cpu_ms_per_step": per_step(run, "root", m),
                                          "gross_cpu_ms_per_step": per_step(run, "root", m, "gross_s"),
                                          "idle_cpu_ms_per_s": run["cpu"]["root"]["idle_s_per_s"] * 1e3,
                                          "peak_rss_mb": hwm["root"], **received(run, "root", m)}}
        for name, level in zip(plan["tiers"], levels):
            names = [c.name for c in level]
            tiers[name] = {"processes": len(level), "fanin": plan["fanin"][name],
                           "cpu_ms_per_step": per_step(run, names[0], m),
                           "gross_cpu_ms_per_step": per_step(run, names[0], m, "gross_s"),
                           "idle_cpu_ms_per_s": run["cpu"][names[0]]["idle_s_per_s"] * 1e3,
                           "cpu_ms_per_step_mean": float(np.mean([per_step(run, n, m) for n in names])),
                           "cpu_ms_per_step_max": max(per_step(run, n, m) for n in names),
                           "peak_rss_mb": hwm[names[0]], "peak_rss_mb_max": max(hwm[n] for n in names),
                           **received(run, names[0], m)}
        n_agents = sum(h.ready["agents"] for h in hosts)
        host_names = [h.name for h in hosts]
        idle_tick_us = float(np.mean([h.ready["idle_tick_us"] for h in hosts]))
        views_us = float(np.mean([h.ready["views_us"] for h in hosts]))
        agent_work = sum(run["stats1"][n]["step_work_s"] - run["stats0"][n]["step_work_s"] for n in host_names)
        tiers["agent"] = {
            "own_code_ms_per_step": agent_work / n_agents / m * 1e3,
            "processes": len(hosts), "agents": n_agents, "agents_per_process": [h.ready["agents"] for h in hosts],
            "cpu_ms_per_step": sum(run["cpu"][n]["net_s"] for n in host_names) / n_agents / m * 1e3,
            "gross_cpu_ms_per_step": sum(run["cpu"][n]["gross_s"] for n in host_names) / n_agents / m * 1e3,
            "idle_tick_us": idle_tick_us, "views_us": views_us,
            # a production agent ticks every 20 ms and refreshes liveness every LIVENESS_EVERY_S (0.5 s)
            "idle_cpu_ms_per_s_production": (50 * idle_tick_us + 2 * views_us) / 1e3,
            "peak_rss_mb_per_process": max(hwm[n] for n in host_names),
            "ranks_fed_in_process": True, "sdk_streams": False,
            "durable_acks": sum(s["durable"] for s in host_stats), "rank_batches": world * hi,
            "bad_inputs": sum(s["bad_inputs"] for s in host_stats), "resent": sum(s["resent"] for s in host_stats),
        }
        lat = [(r["finalised_ns"] - r["last_time_ns"]) / 1e6 for rs in api_rows.values() for r in rs
               if lo <= r["step"] <= hi]
        return {
            "design": "tree", "ranks": world, "plan": plan, "measured_steps": m, "warmup_steps": lo - 1,
            "tiers": tiers,
            "root_bytes_per_step": tiers["root"]["bytes_per_step"],
            "root_bytes_per_step_per_metric": tiers["root"]["bytes_per_step"] / len(METRICS),
            "root_cpu_ms_per_step": tiers["root"]["cpu_ms_per_step"],
            "latency_ms": latency(lat), "steps_per_s": run["steps_per_s"], "wall_s": run["wall_s"],
            "rel_err": quantile_errors(a.seed, world, api_rows["step_time"]),
            "windows_complete": complete, "late_deltas": late, "cpu_raw": run["cpu"], "completed": True,
        }

    # ----------------------------------------------------------------- the baseline
    def baseline(self, world: int) -> dict[str, Any]:
        a = self.args
        label = f"gather {world:,}"
        with self.run_dir(f"gather-{world}") as (work, children):
            self.say(f"{label}: starting")
            gather = Child("gather", "gather", {"world": world, "db": str(work / "gather.db")}, work)
            children.append(gather)
            gather.wait_ready()
            senders = [Child(f"senders{i}", "senders", {
                "world": world, "first_rank": lo, "ranks": min(RANKS_PER_SENDER, world - lo),
                "gather": gather.ready["address"], "seed": a.seed, "steps": a.warmup + a.steps,
                **self.patches("senders")}, work)
                for i, lo in enumerate(range(0, world, RANKS_PER_SENDER))]
            children += senders
            start_all(senders, timeout=300)
            db = RootDb(work / "gather.db", baseline=True)
            run = self.drive(label, world, senders, db, {"gather": gather}, lambda upto, timeout_s: None,
                             min(a.step_timeout, a.baseline_timeout))
            lo, hi = a.warmup + 1, a.warmup + a.steps
            rows = db.rows(1, hi)
            hwm = gather.hwm_mb()
            db.close()
        m = a.steps
        s0, s1 = run["stats0"]["gather"]["stats"], run["stats1"]["gather"]["stats"]
        lat = [(r["finalised_ns"] - r["last_time_ns"]) / 1e6 for r in rows if lo <= r["idx"] <= hi]
        st_rows = [{"step": r["idx"], **{k: r[k] for k in ("p50", "p90", "p99", "p999")}}
                   for r in rows if r["metric"] == "step_time"]
        return {
            "design": "gather", "ranks": world, "measured_steps": m, "warmup_steps": lo - 1,
            "sender_processes": len(senders),
            "root_bytes_per_step": (s1["bytes"] - s0["bytes"]) / m,
            "root_bytes_per_step_per_metric": (s1["bytes"] - s0["bytes"]) / m / len(METRICS),
            "messages_per_step": (s1["messages"] - s0["messages"]) / m,
            "root_cpu_ms_per_step": per_step(run, "gather", m),
            "gross_cpu_ms_per_step": per_step(run, "gather", m, "gross_s"),
            "idle_cpu_ms_per_s": run["cpu"]["gather"]["idle_s_per_s"] * 1e3, "peak_rss_mb": hwm,
            "latency_ms": latency(lat), "steps_per_s": run["steps_per_s"], "wall_s": run["wall_s"],
            "rel_err": quantile_errors(a.seed, world, st_rows), "cpu_raw": run["cpu"], "completed": True,
        }


