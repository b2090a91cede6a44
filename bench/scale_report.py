"""bench/scale.py's report: the result (scale.json) built from the runs so far, the targets and whether they are met
(verdicts), where the baseline's root figures cross the tree's (crossover), and the table printed at the end."""

from __future__ import annotations

import math
import os
import platform
from typing import Any

import numpy as np

from bench.machine import cpu_model, git_head, memory_bytes
from bench.scale_gather import RANKS_PER_SENDER, RANKS_PER_STREAM
from bench.scale_measure import METHOD
from bench.scale_runs import AGENTS_PER_HOST
from bench.scale_workload import METRICS, QNAMES, RANKS_PER_NODE

TARGETS = {
    "root_bytes_per_step_per_metric_growth_1k_to_16k": "<= 1.2x (baseline ~16x)",
    "root_cpu_ms_per_step": "<= 20, and <= 1.2x from 1,024 to 16,384",
    "rack_cpu_ms_per_step": "<= 20",
    "agent_cpu_ms_per_step": "<= 2 (one agent, 8 ranks)",
    "step_time_rel_err": "p50/p90/p99 <= 0.5 %, p99.9 <= 1 %",
}


# ---------------------------------------------------------------------------- report
def crossover(tree: list[dict], base: list[dict], key: str) -> dict[str, Any] | None:
    """Where the baseline's root figure meets the tree's, on a log-log interpolation of the measured points.

    If the baseline is already above the tree at the smallest common size, the baseline's figure is
    extrapolated down as proportional to N (its fit through the origin) against the tree's figure there,
    and the result is marked extrapolated.
    """
    t = {r["ranks"]: r[key] for r in tree}
    b = {r["ranks"]: r[key] for r in base}
    common = sorted(set(t) & set(b))
    if not common:
        return None
    for n0, n1 in zip(common, common[1:]):
        d0, d1 = b[n0] - t[n0], b[n1] - t[n1]
        if d0 <= 0 < d1:
            f = d0 / (d0 - d1)
            return {"ranks": math.exp(math.log(n0) + f * (math.log(n1) - math.log(n0))), "extrapolated": False}
    if b[common[0]] > t[common[0]]:
        per_rank = float(np.mean([b[n] / n for n in common]))
        return {"ranks": t[common[0]] / per_rank, "extrapolated": True,
                "how": f"baseline fit {per_rank:.4g} x N against the tree's figure at {common[0]:,} ranks"}
    return {"ranks": None, "extrapolated": False, "how": "the baseline stays below the tree at every measured size"}


def machine() -> dict[str, Any]:
    import grpc
    memory = memory_bytes()
    return {"nproc": os.cpu_count(), "cpu": cpu_model(), "mem_mb": memory // 2**20 if memory else 0,
            "python": platform.python_version(),
            "grpcio": grpc.__version__, "numpy": np.__version__, "kernel": platform.release(),
            "git_head": git_head() or ""}


def fmt(v: float | None, spec: str = ",.1f") -> str:
    return "–" if v is None else format(v, spec)


def own(r: dict, tiers: dict, tier: str, spec: str = ",.1f") -> str:
    return f"{fmt(tiers[tier]['cpu_ms_per_step'], spec)} ({fmt(tiers[tier]['own_code_ms_per_step'], spec)})"


def table(result: dict) -> tuple[list[str], list[list[str]]]:
    """One row per size and design."""
    head = ["ranks", "design", "root KiB/step", "root B/step/metric", "root CPU ms/step (own code)",
            "rack CPU ms/step (own code)", "agent CPU ms/step (own code)", "peak RSS MiB root / rack / agents proc",
            "rack KiB/step in",
            "latency p50 / p99 ms", "steps/s",
            "step_time rel. err. % p50 / p99 / p99.9, worst step (rank err. in ranks)"]
    rows = []
    runs = sorted(result["tree"] + result["gather"],
                  key=lambda r: (bool(r.get("wide")), r["ranks"], r["design"] != "tree"))
    for r in runs:
        if not r.get("completed"):
            rows.append([f"{r['ranks']:,}", design(r), "stopped: " + r.get("reason", "")[:60]] + ["–"] * 9)
            continue
        tree = r["design"] == "tree"
        t = r.get("tiers", {})
        err = r["rel_err"]
        rows.append([
            f"{r['ranks']:,}", design(r), fmt(r["root_bytes_per_step"] / 1024),
            fmt(r["root_bytes_per_step_per_metric"], ",.0f"),
            own(r, t, "root") if tree else fmt(r["root_cpu_ms_per_step"]),
            own(r, t, "rack") if tree else "–", own(r, t, "agent", ".2f") if tree else "–",
            (f"{t['root']['peak_rss_mb']:.0f} / {t['rack']['peak_rss_mb_max']:.0f} / "
             f"{t['agent']['peak_rss_mb_per_process']:.0f} ({t['agent']['agents_per_process'][0]} agents)")
            if tree else f"{r['peak_rss_mb']:.0f}",
            fmt(t["rack"]["bytes_per_step"] / 1024) if tree else "–",
            f"{fmt(r['latency_ms']['p50'], ',.0f')} / {fmt(r['latency_ms']['p99'], ',.0f')}",
            f"{r['steps_per_s']:.2f}",
            " / ".join(f"{err[q]['max'] * 100:.2f}" if err.get(q) else "–" for q in ("p50", "p99", "p99.9"))
            + f" ({max(err[q]['rank_err_max'] for q in QNAMES if err.get(q)) * r['ranks']:.2f})"])
    return head, rows


def design(r: dict) -> str:
    if not r.get("wide"):
        return r["design"]
    plan = r["plan"]
    return f"tree, {plan['fanin']['rack']} agents/rack, {plan['root_fanin']} racks/root"


def markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows]) + "\n"


def verdicts(tree: list[dict], base: list[dict]) -> dict[str, Any]:
    by = {r["ranks"]: r for r in tree}
    gb = {r["ranks"]: r for r in base if r.get("completed")}
    out: dict[str, Any] = {}
    if not by:
        return out
    lo, hi = min(by), max(by)
    if lo != hi:
        g = by[hi]["root_bytes_per_step_per_metric"] / by[lo]["root_bytes_per_step_per_metric"]
        out["root_bytes_growth"] = {"value": g, "from": lo, "to": hi, "met": g <= 1.2}
        if lo in gb and hi in gb:
            out["gather_bytes_growth"] = {"value": gb[hi]["root_bytes_per_step"] / gb[lo]["root_bytes_per_step"],
                                          "ideal": hi / lo}
        c = by[hi]["root_cpu_ms_per_step"] / by[lo]["root_cpu_ms_per_step"]
        out["root_cpu_growth"] = {"value": c, "from": lo, "to": hi, "met": c <= 1.2}
    for tier, target in (("root", 20.0), ("rack", 20.0), ("agent", 2.0)):
        worst = max(r["tiers"][tier]["cpu_ms_per_step"] for r in tree)
        out[f"{tier}_cpu_ms_per_step"] = {"max": worst, "target": target, "met": worst <= target}
    worst_err = {q: max(r["rel_err"][q]["max"] for r in tree if r["rel_err"].get(q)) for q in QNAMES}
    out["step_time_rel_err_worst"] = {"value": worst_err, "met": all(
        worst_err[q] <= (0.01 if q == "p99.9" else 0.005) for q in QNAMES)}
    return out


def config(args: Any, sizes: list[int], wide_sizes: list[int], shape: dict[str, int],
           wide_shape: dict[str, int]) -> dict[str, Any]:
    """The run's settings, as scale.json's `config`."""
    return {"sizes": sizes, "measured_steps": args.steps, "warmup_steps": args.warmup,
            "idle_s": args.idle_s, "metrics": len(METRICS), "ranks_per_node": RANKS_PER_NODE,
            "nodes_per_rack": shape["agents_per_rack"], "root_fanin": shape["root_fanin"],
            "max_fanin": shape["max_fanin"], "wide_sizes": wide_sizes, "wide_shape": wide_shape,
            "agents_per_process": AGENTS_PER_HOST, "ranks_per_sender_process": RANKS_PER_SENDER,
            "ranks_per_gather_stream": RANKS_PER_STREAM,
            "collector_deadline_floor_s": args.collector_deadline_floor, "seed": args.seed,
            "ranks_fed_in_process": sizes + wide_sizes,
            "shared_channels": args.share_channels,
            "values": "0.5 x lognormal(0, 1) per rank, metric and step (seeded)"}


def completed(tree: list[dict], base: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """The runs that completed: the tree at the --agents-per-rack shape, the baseline, the tree at --wide-shape."""
    return ([r for r in tree if r.get("completed") and not r.get("wide")], [r for r in base if r.get("completed")],
            [r for r in tree if r.get("completed") and r.get("wide")])


def result(cfg: dict[str, Any], tree: list[dict], base: list[dict], failed: list[dict], loadavg_start: Any,
           run_time_s: float, final: bool) -> dict[str, Any]:
    """scale.json: the runs so far (`final`: all of them), and what they show."""
    done_tree, done_base, done_wide = completed(tree, base)
    return {
        "benchmark": "scale", "issue": 5, "complete": final, "machine": machine(), "loadavg_start": loadavg_start,
        "loadavg_end": os.getloadavg(), "config": cfg,
        "method": METHOD, "targets": TARGETS, "tree": tree, "gather": base, "failed": failed,
        "crossover": crossings(done_tree, done_base), "verdicts": verdicts(done_tree, done_base),
        "verdicts_wide": verdicts(done_wide, []), "run_time_s": run_time_s,
    }


def crossings(tree: list[dict], base: list[dict]) -> dict[str, Any]:
    """The crossover of each root figure the plot shows."""
    return {k: crossover(tree, base, k) for k in ("root_bytes_per_step", "root_cpu_ms_per_step")}
