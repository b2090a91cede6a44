"""bench/scale.py's measurements: each process's CPU (asked in-process, /proc beside it), the per-step figures net of
the idle background, the bytes a collector was handed, the root's (or the baseline's) store read for completeness,
latency and the quantiles' error against the exact ones. METHOD says how each is measured (it goes in the JSON)."""

from __future__ import annotations

import json
import sqlite3
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np

from bench.scale_child import Child
from bench.scale_workload import JOB, METRICS, QNAMES, QS, step_values

METHOD = {
    "per_step": "net of the idle background: (delta - idle rate x wall) / measured steps; gross in the JSON too",
    "cpu": "time.process_time() of the whole process, asked in-process (every thread); /proc/PID/stat "
           "utime+stime recorded beside it as a cross-check",
    "peak_rss": "VmHWM from /proc/PID/status at the end of the run",
    "bytes": "tree: ByteSize() of every SummaryBatch a collector's service is handed (in the receiving "
             "process); gather: length of every message the server receives; protobuf payload bytes, "
             "without gRPC/HTTP2 framing",
    "agent": "CPU of the agent-hosting processes / agents hosted; rank input fed in-process (no SDK, "
             "no rank-facing gRPC) at every size",
    "latency": "finalised_ns - last_time_ns of every metric window of the measured steps (root API rows; "
               "the gather server's rows)",
    "steps_per_s": "measured steps / (last finalised - first fed), closed loop: a step is fed once the previous "
                   "one is finalised at the root",
    "rel_err": "|root estimate / numpy.quantile(all N fed values) - 1| per step (warm-up and measured); "
               "rank_err: |fraction of the N values <= estimate - q|",
    "own_code": "beside process CPU: thread CPU of the tier's own code on the steps' data (collectors: handling "
                "units with windows, flush ticks with windows pending, shipping them, the parent's acks of them; "
                "agents: feeding and ticking, the parent's acks); no gRPC threads, no background",
}


def cpu_of(children: dict[str, Child]) -> dict[str, tuple[float, tuple[float, float]]]:
    """Each child's process CPU seconds: (time.process_time() asked in-process, /proc/PID/stat (utime, stime))."""
    idents = {n: c.send({"cmd": "cpu"}) for n, c in children.items()}
    return {n: (c.wait(idents[n])["cpu"], c.cpu_jiffies()) for n, c in children.items()}


def cpu_deltas(cpu0: dict[str, tuple[float, tuple[float, float]]], cpu1: dict[str, tuple[float, tuple[float, float]]],
               idle_cpu: dict[str, float], wall: float) -> dict[str, dict[str, float]]:
    """Each process's CPU between two `cpu_of` readings `wall` seconds apart: gross, net of its idle rate
    (`idle_cpu`, CPU s per s), and /proc's gross beside it."""
    return {n: {"gross_s": cpu1[n][0] - cpu0[n][0], "idle_s_per_s": idle_cpu[n],
                "net_s": max(0.0, cpu1[n][0] - cpu0[n][0] - idle_cpu[n] * wall),
                "gross_s_proc_stat": sum(cpu1[n][1]) - sum(cpu0[n][1])} for n in cpu0}


def per_step(run: dict, name: str, steps: int, key: str = "net_s") -> float:
    """A process's CPU ms per measured step (net of its idle background, or `key`: "gross_s")."""
    return run["cpu"][name][key] / steps * 1e3


def received(run: dict, name: str, steps: int) -> dict[str, Any]:
    """Bytes a collector was handed per measured step: units carrying windows (the step's data and the rank
    states they carry), and the liveness-only units' rate (background, not per step)."""
    s0, s1, m = run["stats0"][name], run["stats1"][name], steps
    d = {k: s1["stats"][k] - s0["stats"][k] for k in s0["stats"]}
    return {"bytes_per_step": d["bytes_with_windows"] / m, "own_code_ms_per_step": d["step_work_s"] / m * 1e3,
            "liveness_bytes_per_s": (d["bytes"] - d["bytes_with_windows"]) / run["wall_s"],
            "rank_state_bytes_per_step": d["rank_state_bytes"] / m, "hosts_listed_per_step": d["hosts_listed"] / m,
            "batches_per_step": d["batches"] / m, "windows_per_step": d["windows"] / m,
            "counters": s1.get("counters", {})}


class RootDb:
    """Reads a root's (or the baseline's) SQLite store read-only: the parent polls it, the root is not asked."""

    def __init__(self, path: Path, baseline: bool) -> None:
        self.path, self.baseline = path, baseline
        self.db: sqlite3.Connection | None = None

    def _conn(self) -> sqlite3.Connection | None:
        if self.db is None and self.path.exists():
            try:
                self.db = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True, check_same_thread=False)
            except sqlite3.Error:
                return None
        return self.db

    def complete(self, world: int, lo: int, hi: int, metric: str | None = "step_time") -> set[int]:
        """Steps in [lo, hi] whose window(s) are finalised with every rank counted."""
        db = self._conn()
        if db is None:
            return set()
        where = "metric=? AND" if metric else ""
        args: tuple = (metric,) if metric else ()
        extra = "" if self.baseline else " AND job='scale' AND width_ms=0"
        try:
            rows = db.execute(f"SELECT idx, count(*) FROM windows WHERE {where} idx BETWEEN ? AND ? AND count=?"
                              f"{extra} GROUP BY idx", (*args, lo, hi, world)).fetchall()
        except sqlite3.Error:
            return set()
        need = 1 if metric else len(METRICS)
        return {idx for idx, n in rows if n >= need}

    def rows(self, lo: int, hi: int) -> list[dict]:
        db = self._conn()
        assert db is not None
        db.row_factory = sqlite3.Row
        extra = "" if self.baseline else " AND job='scale' AND width_ms=0"
        out = [dict(r) for r in db.execute(
            f"SELECT metric, idx, count, p50, p90, p99, p999, last_time_ns, finalised_ns FROM windows "
            f"WHERE idx BETWEEN ? AND ?{extra}", (lo, hi))]
        db.row_factory = None
        return out

    def late(self, lo: int, hi: int) -> int:
        """Late deltas the root merged into the steps' windows (0 when every window sealed complete)."""
        db = self._conn()
        assert db is not None
        row = db.execute("SELECT sum(late) FROM windows WHERE idx BETWEEN ? AND ? AND job='scale' AND width_ms=0",
                         (lo, hi)).fetchone()
        return int(row[0] or 0)

    def close(self) -> None:
        if self.db is not None:
            self.db.close()


def api_steps(api: str, metric: str, last: int) -> list[dict]:
    with urllib.request.urlopen(f"http://{api}/api/v1/jobs/{JOB}/steps?metric={metric}&last={last}",
                                timeout=30) as resp:
        return json.load(resp)["steps"]


def pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def latency(values: list[float]) -> dict[str, Any]:
    return {"p50": pct(values, 50), "p99": pct(values, 99), "max": max(values) if values else None,
            "samples": len(values)}


def quantile_errors(seed: int, world: int, rows: list[dict]) -> dict[str, Any]:
    """Per quantile, over every step: relative error against numpy.quantile (linear interpolation) of the N
    values fed, and rank error |fraction of the N values <= the estimate - q| (one rank is 1/N)."""
    rel: dict[str, list[float]] = {q: [] for q in QNAMES}
    rank: dict[str, list[float]] = {q: [] for q in QNAMES}
    for r in rows:
        values = np.sort(step_values(seed, r["step"], world)[0])
        for qn, q, key, truth in zip(QNAMES, QS, ("p50", "p90", "p99", "p999"), np.quantile(values, QS)):
            rel[qn].append(abs(r[key] / truth - 1.0))
            rank[qn].append(abs(np.searchsorted(values, r[key], side="right") / values.size - q))
    return {qn: {"max": float(max(v)), "median": float(np.median(v)), "steps": len(v),
                 "rank_err_max": float(max(rank[qn]))} if v else None for qn, v in rel.items()}


