#!/usr/bin/env python
"""Benchmark the mergeable summary against the `tdigest` package and an exact keep-all baseline.

    python bench/sketch.py [--json PATH] [--quick]

Per implementation, in one run on one machine:

- ingest_values_per_s: values folded per second through the batch path
  (Summary.add_many, TDigest.batch_update, an array copy for the exact
  baseline), in chunks of 10,000 values, one source per chunk.
- merge32_ms: one merge of 32 summaries of 10,000 lognormal values each
  (Summary.merge_all; `+` folded left for tdigest; concatenation for exact).
  Median of repeats.
- tree_ms: 8,192 leaf summaries of 64 values each, already built (ours: as an
  agent builds them, Summary.from_arrays, natively), merged
  8 -> 1 (1,024 left), 32 -> 1 (32 left), 32 -> 1 (the root). Every summary
  entering a merge is serialised and parsed first; the timing covers the whole
  tree including those round trips. Median of runs; every run of
  telemetry.Summary gets freshly ingested leaves. The leaves' own ingest is
  timed apart (wire: leaf_*_ingest_encode_us). The pure-Python tdigest
  package runs this tree on 512 leaves only (said so in the output and JSON).
- bytes_10k: serialised size of one summary of 10,000 lognormal values.
- rel_err / rank_err at p50, p90, p99, p99.9 for lognormal and bimodal
  ("straggler": 99 % near 0.5 s, 1 % near 1.35 s) data, measured on the
  tree's root against exact numpy quantiles of every value in that tree.
  rank_err = distance from q to the fraction of exact values <= estimate.

For telemetry.Summary it also times each phase of the tree (to_bytes,
from_bytes, merge_all, per tier) and, if the tree misses its 60 ms target,
prints a cProfile of one tree run. In the same run (issue 29: ratios, not
absolute figures, on a shared machine):

- wire: per summary (the tree's 64-value leaves, parsed), from_bytes (native:
  parse, every check, the Summary object) against upb's raw parse of the same
  bytes (summary_pb2.Summary.FromString: no checks, no Summary), to_bytes of a
  parsed summary and of a freshly ingested one; target from_bytes <= 3x upb.
- python_before: the same tree through the Python Summary as it was before
  the native path (tests/summary_oracle.py), and the speed-up.

Serialised forms: Summary.to_bytes(); tdigest: json.dumps(TDigest.to_dict())
(the package's own dict form); exact: float64 values then one uint32 source
per value, raw little-endian.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import gc
import io
import json
import operator
import os
import platform
import pstats
import statistics
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from tdigest import TDigest as PyTDigest

from distributions import draw, rank_error  # bench/distributions.py
from harness import write_json
from machine import cpu_model  # bench/machine.py
from telemetry import Summary
from telemetry.v1 import summary_pb2

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))  # the Python Summary before issue 29 lives with the tests, as their oracle
from summary_oracle import OracleSummary  # noqa: E402  (needs tests/ on the path, added just above)

DEFAULT_JSON = REPO / "bench" / "results" / "sketch.json"

QS = (0.5, 0.9, 0.99, 0.999)
QNAMES = ("p50", "p90", "p99", "p99.9")
FANOUTS = (8, 32, 32)
PER_LEAF = 64
SEED = 0

TARGETS = {
    "ingest_values_per_s": ">= 5e6",
    "merge32_ms": "<= 2",
    "tree_ms": "<= 60",
    "from_bytes vs upb's raw parse": "<= 3x",
    "bytes_10k": "<= 4096",
    "lognormal rel_err p50/p90/p99": "<= 0.005",
    "lognormal rel_err p99.9": "<= 0.01",
    "bimodal rank_err (every quantile)": "<= 0.001",
    "ingest and merge32 vs tdigest": ">= 100x",
}

console = Console(width=None if sys.stdout.isatty() else 132)


# ----------------------------------------------------------------------------- implementations

class Impl:
    name: str
    note: str = ""

    def leaf(self, values: np.ndarray, source: int) -> Any: ...
    def ingest(self, chunks: Sequence[np.ndarray]) -> Any: ...
    def to_bytes(self, x: Any) -> bytes: ...
    def from_bytes(self, b: bytes) -> Any: ...
    def merge_all(self, xs: list[Any]) -> Any: ...
    def quantiles(self, x: Any, qs: Sequence[float]) -> list[float]: ...


class Ours(Impl):
    name = "telemetry.Summary"
    note = "fastdigest t-digest, 200 centroids, plus exact fields"

    def leaf(self, values, source):
        # As an agent builds a window's summary from its ranks' raw values (natively: Summary.from_arrays).
        return Summary.from_arrays(values, np.full(values.size, source), time_ns=1)

    def ingest(self, chunks):
        s = Summary()
        for source, chunk in enumerate(chunks):
            s.add_many(chunk, source)
        return s

    to_bytes = staticmethod(Summary.to_bytes)
    from_bytes = staticmethod(Summary.from_bytes)
    merge_all = staticmethod(Summary.merge_all)

    def quantiles(self, x, qs):
        return x.quantiles(list(qs))


class PyTDigestImpl(Impl):
    name = "tdigest"
    note = f"pure-Python tdigest {metadata.version('tdigest')}, defaults (delta=0.01, K=25); digest only"

    def leaf(self, values, source):
        d = PyTDigest()
        d.batch_update(values)
        return d

    def ingest(self, chunks):
        d = PyTDigest()
        for chunk in chunks:
            d.batch_update(chunk)
        return d

    def to_bytes(self, x):
        return json.dumps(x.to_dict()).encode()

    def from_bytes(self, b):
        return PyTDigest().update_from_dict(json.loads(b))

    def merge_all(self, xs):
        return functools.reduce(operator.add, xs)

    def quantiles(self, x, qs):
        return [float(x.percentile(100.0 * q)) for q in qs]


class Exact(Impl):
    """Keeps every (value, source) pair."""

    name = "exact"
    note = "keep-all: float64 values + uint32 source per value"
    _head = struct.Struct("<Q")

    def leaf(self, values, source):
        return np.array(values, dtype=np.float64), np.full(values.size, source, dtype=np.uint32)

    def ingest(self, chunks):
        kept = [self.leaf(chunk, source) for source, chunk in enumerate(chunks)]
        return self.merge_all(kept)

    def to_bytes(self, x):
        values, sources = x
        return self._head.pack(values.size) + values.astype("<f8", copy=False).tobytes() + \
            sources.astype("<u4", copy=False).tobytes()

    def from_bytes(self, b):
        (n,) = self._head.unpack_from(b)
        values = np.frombuffer(b, dtype="<f8", count=n, offset=8)
        sources = np.frombuffer(b, dtype="<u4", count=n, offset=8 + 8 * n)
        return values, sources

    def merge_all(self, xs):
        return np.concatenate([v for v, _ in xs]), np.concatenate([s for _, s in xs])

    def quantiles(self, x, qs):
        return [float(v) for v in np.quantile(x[0], list(qs))]


# ----------------------------------------------------------------------------- measurements

CPU_SECONDS: list[float] = []   # process CPU time of every timed() call, beside its wall time


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    """Wall seconds of fn() (garbage collected first, collector left on); its CPU seconds go to CPU_SECONDS."""
    gc.collect()
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    wall = time.perf_counter() - t0
    CPU_SECONDS.append(time.process_time() - c0)
    return wall, out


def run_tree(impl: Impl, leaves: Sequence[Any], phases: dict[str, float] | None = None) -> Any:
    """8 -> 1, 32 -> 1, 32 -> 1 with a bytes round trip of every summary entering a merge."""
    level = list(leaves)
    to_b, from_b, merge = impl.to_bytes, impl.from_bytes, impl.merge_all
    for tier, fanout in enumerate(FANOUTS, 1):
        nxt = []
        if phases is None:
            for i in range(0, len(level), fanout):
                nxt.append(merge([from_b(to_b(x)) for x in level[i:i + fanout]]))
        else:
            clock = time.perf_counter
            for i in range(0, len(level), fanout):
                t0 = clock()
                blobs = [to_b(x) for x in level[i:i + fanout]]
                t1 = clock()
                parsed = [from_b(b) for b in blobs]
                t2 = clock()
                nxt.append(merge(parsed))
                t3 = clock()
                phases[f"tier{tier}.to_bytes"] = phases.get(f"tier{tier}.to_bytes", 0.0) + (t1 - t0)
                phases[f"tier{tier}.from_bytes"] = phases.get(f"tier{tier}.from_bytes", 0.0) + (t2 - t1)
                phases[f"tier{tier}.merge_all"] = phases.get(f"tier{tier}.merge_all", 0.0) + (t3 - t2)
        level = nxt
    assert len(level) == 1, len(level)
    return level[0]


def accuracy(impl: Impl, root: Any, values: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    exact_sorted = np.sort(values)
    estimates = impl.quantiles(root, QS)
    rel, rank = {}, {}
    for name, q, est in zip(QNAMES, QS, estimates):
        truth = float(np.quantile(values, q))
        rel[name] = abs(est / truth - 1.0)
        rank[name] = rank_error(exact_sorted, est, q)
    return rel, rank


def build_leaves(impl: Impl, values: np.ndarray, n_leaves: int, progress: Progress, label: str) -> list[Any]:
    task = progress.add_task(f"{impl.name}: build {n_leaves} leaves ({label})", total=n_leaves)
    leaves = []
    step = max(1, n_leaves // 100)
    for i in range(n_leaves):
        leaves.append(impl.leaf(values[i * PER_LEAF:(i + 1) * PER_LEAF], i))
        if i % step == step - 1:
            progress.advance(task, step)
    progress.update(task, completed=n_leaves)
    return leaves


def bench_impl(impl: Impl, cfg: dict[str, Any], data: dict[str, np.ndarray], progress: Progress) -> dict[str, Any]:
    rng = np.random.default_rng(SEED + 1)
    out: dict[str, Any] = {"note": impl.note}

    # ingest
    n_chunks = cfg["ingest_chunks"]
    chunks = [rng.lognormal(0.0, 1.0, cfg["ingest_chunk"]) for _ in range(n_chunks)]
    task = progress.add_task(f"{impl.name}: ingest {n_chunks} x {cfg['ingest_chunk']:,}", total=cfg["ingest_repeats"])
    runs = []
    for _ in range(cfg["ingest_repeats"]):
        seconds, _ = timed(lambda: impl.ingest(chunks))
        runs.append(seconds)
        progress.advance(task)
    out["ingest_values_per_s"] = n_chunks * cfg["ingest_chunk"] / statistics.median(runs)
    out["ingest"] = {"chunk": cfg["ingest_chunk"], "chunks": n_chunks, "runs_s": runs,
                     "cpu_runs_s": CPU_SECONDS[-len(runs):]}

    # merge of 32 x 10,000
    inputs_values = [rng.lognormal(0.0, 1.0, 10_000) for _ in range(32)]
    task = progress.add_task(f"{impl.name}: build 32 x 10,000 for merge32", total=32)
    inputs = []
    for i, v in enumerate(inputs_values):
        inputs.append(impl.leaf(v, i))
        progress.advance(task)
    task = progress.add_task(f"{impl.name}: merge32 x {cfg['merge_repeats']}", total=cfg["merge_repeats"])
    runs = []
    for _ in range(cfg["merge_repeats"]):
        seconds, _ = timed(lambda: impl.merge_all(list(inputs)))
        runs.append(seconds * 1e3)
        progress.advance(task)
    out["merge32_ms"] = statistics.median(runs)
    out["merge32"] = {"runs_ms": runs, "cpu_runs_ms": [c * 1e3 for c in CPU_SECONDS[-len(runs):]]}

    # size
    out["bytes_10k"] = len(impl.to_bytes(inputs[0]))

    # tree, accuracy
    n_leaves = cfg["tree_leaves"]
    out["tree"] = {"leaves": n_leaves, "values_per_leaf": PER_LEAF, "fanouts": list(FANOUTS),
                   "round_trip_every_hop": True}
    if n_leaves != cfg["full_leaves"]:
        out["tree"]["reduced"] = True
        out["tree"]["note"] = (f"REDUCED: {n_leaves} leaves instead of {cfg['full_leaves']} "
                               f"({n_leaves * PER_LEAF:,} values); accuracy is on that reduced set")
    out["rel_err"], out["rank_err"] = {}, {}
    for dist, values in data.items():
        values = values[: n_leaves * PER_LEAF]
        leaves = build_leaves(impl, values, n_leaves, progress, dist)
        repeats = cfg["tree_repeats"] if dist == "lognormal" else 1
        task = progress.add_task(f"{impl.name}: tree x {repeats} ({dist})", total=repeats)
        runs, root = [], None
        for repeat in range(repeats):
            if repeat and isinstance(impl, Ours):
                # Fresh leaves (outside the timing): every run starts from summaries as ingest left them.
                leaves = build_leaves(impl, values, n_leaves, progress, dist)
            seconds, root = timed(functools.partial(run_tree, impl, leaves))
            runs.append(seconds * 1e3)
            progress.advance(task)
        out["tree"][f"runs_ms_{dist}"] = runs
        out["tree"][f"cpu_runs_ms_{dist}"] = [c * 1e3 for c in CPU_SECONDS[-len(runs):]]
        out["rel_err"][dist], out["rank_err"][dist] = accuracy(impl, root, values)
        if dist == "lognormal":
            out["tree_ms"] = statistics.median(runs)
            if isinstance(impl, Ours):
                phases: dict[str, float] = {}
                leaves = build_leaves(impl, values, n_leaves, progress, dist)
                run_tree(impl, leaves, phases)
                counts = {1: n_leaves, 2: n_leaves // FANOUTS[0], 3: n_leaves // FANOUTS[0] // FANOUTS[1]}
                out["tree"]["phases_ms"] = {k: v * 1e3 for k, v in phases.items()}
                out["tree"]["per_summary_us"] = {
                    k: v * 1e6 / counts[int(k[4])] for k, v in phases.items() if not k.endswith("merge_all")}
                out["tree"]["per_merge_all_us"] = {
                    k: v * 1e6 / (counts[int(k[4])] // FANOUTS[int(k[4]) - 1] or 1)
                    for k, v in phases.items() if k.endswith("merge_all")}
                out["wire"] = wire_costs(leaves)
                out["tree"]["python_before"] = python_before(values, n_leaves, cfg["before_repeats"], progress)
                if out["tree_ms"] > 60:
                    out["tree"]["profile_top"] = profile_tree(impl, build_leaves(impl, values, n_leaves, progress, dist))
        del leaves
    if out["tree"].get("reduced"):
        out["tree"]["tree_ms_full_size_estimate"] = {
            "value": out["tree_ms"] * cfg["full_leaves"] / n_leaves,
            "method": f"ESTIMATE, NOT MEASURED: the {n_leaves}-leaf time scaled linearly to {cfg['full_leaves']} leaves",
        }
    return out


def per_call_us(fn: Callable[[Any], Any], items: Sequence[Any], repeats: int = 5) -> float:
    """Median over repeats of (process CPU seconds / item) for fn over items, in microseconds."""
    runs = []
    for _ in range(repeats):
        gc.collect()
        c0 = time.process_time()
        for x in items:
            fn(x)
        runs.append((time.process_time() - c0) / len(items) * 1e6)
    return statistics.median(runs)


def wire_costs(leaves: Sequence[Summary]) -> dict[str, float]:
    """Per-summary decode and encode against upb's raw parse of the same bytes (CPU time, one run)."""
    blobs = [s.to_bytes() for s in leaves]
    parsed = [Summary.from_bytes(b) for b in blobs]
    ingested = [Summary.from_arrays(np.arange(64.0), np.full(64, i), time_ns=1) for i in range(len(leaves))]
    out = {
        "bytes_per_summary": statistics.mean(len(b) for b in blobs),
        "upb_parse_us": per_call_us(summary_pb2.Summary.FromString, blobs),
        "from_bytes_us": per_call_us(Summary.from_bytes, blobs),
        "oracle_from_bytes_us": per_call_us(OracleSummary.from_bytes, blobs, repeats=1),
        "to_bytes_parsed_us": per_call_us(Summary.to_bytes, parsed),
        "to_bytes_ingested_us": per_call_us(Summary.to_bytes, ingested, repeats=1),
    }
    out["from_bytes_over_upb"] = out["from_bytes_us"] / out["upb_parse_us"]
    # A leaf's ingest and first encode (an agent's window): native from_arrays, against the Python ingest that
    # add_many still is (its fields then converted to a native core by to_bytes: what from_arrays cost before the
    # native ingest) and the Python Summary before issue 29.
    arrays = [(np.arange(64.0) * (1 + i % 7), np.full(64, i)) for i in range(len(leaves))]

    def python_ingest(item: tuple[np.ndarray, np.ndarray]) -> bytes:
        s = Summary()
        s.add_many(item[0], int(item[1][0]), time_ns=1)
        return s.to_bytes()

    out["leaf_ingest_encode_us"] = per_call_us(lambda a: Summary.from_arrays(a[0], a[1], 1).to_bytes(), arrays)
    out["leaf_python_ingest_encode_us"] = per_call_us(python_ingest, arrays, repeats=3)
    out["leaf_oracle_ingest_encode_us"] = per_call_us(
        lambda a: OracleSummary.from_arrays(a[0], a[1], 1).to_bytes(), arrays, repeats=1)
    return out


def python_before(values: np.ndarray, n_leaves: int, repeats: int, progress: Progress) -> dict[str, Any]:
    """The same tree (same values, same leaves) through the Python Summary before issue 29."""
    leaves = [OracleSummary.from_arrays(values[i * PER_LEAF:(i + 1) * PER_LEAF], np.full(PER_LEAF, i), time_ns=1)
              for i in range(n_leaves)]
    impl = Ours()
    impl.to_bytes, impl.from_bytes, impl.merge_all = (  # type: ignore[method-assign]  # same tree, old class
        OracleSummary.to_bytes, OracleSummary.from_bytes, OracleSummary.merge_all)
    task = progress.add_task(f"python before issue 29: tree x {repeats}", total=repeats)
    runs, cpu = [], []
    for _ in range(repeats):
        seconds, _ = timed(functools.partial(run_tree, impl, leaves))
        runs.append(seconds * 1e3)
        cpu.append(CPU_SECONDS[-1] * 1e3)
        progress.advance(task)
    return {"runs_ms": runs, "cpu_runs_ms": cpu, "tree_ms": statistics.median(runs)}


def profile_tree(impl: Impl, leaves: Sequence[Any]) -> list[dict[str, Any]]:
    profiler = cProfile.Profile()
    profiler.enable()
    run_tree(impl, leaves)
    profiler.disable()
    stream = io.StringIO()
    stats = pstats.Stats(profiler, stream=stream)
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]  # pstats.Stats.stats: not in typeshed's stub
        rows.append({"function": f"{Path(filename).name}:{line}({func})", "calls": nc,
                     "tottime_ms": tt * 1e3, "cumtime_ms": ct * 1e3})
    rows.sort(key=lambda r: r["tottime_ms"], reverse=True)
    return rows[:25]


# ----------------------------------------------------------------------------- report

def machine() -> dict[str, Any]:
    model = cpu_model() or "unknown"
    versions = {}
    for package in ("numpy", "fastdigest", "tdigest", "protobuf", "pyroaring"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = None
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "telemetry"], cwd=REPO,
                                    capture_output=True, text=True, check=True).stdout.strip())
    except (OSError, subprocess.CalledProcessError):
        commit, dirty = None, None
    return {
        "git_commit": commit,
        "telemetry_dirty": dirty,   # uncommitted changes under telemetry/ when measured
        "nproc": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "cpu_count": os.cpu_count(),
        "cpu_model": model,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "packages": versions,
    }


def fmt_rate(x: float) -> str:
    return f"{x / 1e6:.2f} M/s" if x >= 1e6 else f"{x / 1e3:.1f} k/s"


def fmt_ms(x: float) -> str:
    return f"{x:,.3f}" if x < 10 else f"{x:,.1f}"


def print_report(result: dict[str, Any]) -> None:
    impls = result["implementations"]
    names = list(impls)
    m = result["machine"]
    commit = (m["git_commit"] or "?")[:10] + (" + uncommitted telemetry/ changes" if m["telemetry_dirty"] else "")
    table = Table(title=f"bench/sketch.py ({'QUICK' if result['quick'] else 'full'}) on {m['cpu_model']}, "
                        f"{m['nproc']} CPUs, Python {m['python']}, at {commit}")
    table.add_column("metric")
    for name in names:
        header = name + (" [reduced tree]" if impls[name]["tree"].get("reduced") else "")
        table.add_column(header, justify="right")
    table.add_column("target (ours)", justify="right")
    table.add_row("ingest values/s", *[fmt_rate(impls[n]["ingest_values_per_s"]) for n in names], ">= 5 M/s")
    table.add_row("merge32 ms", *[fmt_ms(impls[n]["merge32_ms"]) for n in names], "<= 2")
    table.add_row("tree ms", *[fmt_ms(impls[n]["tree_ms"]) + (f" ({impls[n]['tree']['leaves']} leaves)"
                                                             if impls[n]["tree"].get("reduced") else "")
                               for n in names], "<= 60")
    table.add_row("bytes_10k", *[f"{impls[n]['bytes_10k']:,}" for n in names], "<= 4096")
    for dist in ("lognormal", "bimodal"):
        for kind in ("rel_err", "rank_err"):
            for qn in QNAMES:
                target = ""
                if dist == "lognormal" and kind == "rel_err":
                    target = "<= 1 %" if qn == "p99.9" else "<= 0.5 %"
                if dist == "bimodal" and kind == "rank_err":
                    target = "<= 1e-3"
                cells = [(f"{impls[n][kind][dist][qn] * 100:.3f} %" if kind == "rel_err"
                          else f"{impls[n][kind][dist][qn]:.2e}") for n in names]
                table.add_row(f"{dist} {kind} {qn}", *cells, target)
    console.print(table)
    for name in names:
        note = impls[name]["tree"].get("note")
        if note:
            console.print(f"[yellow]{name}: {note}[/yellow]")
        estimate = impls[name]["tree"].get("tree_ms_full_size_estimate")
        if estimate:
            console.print(f"[yellow]{name}: tree at full size ≈ {estimate['value'] / 1e3:,.1f} s — "
                          f"{estimate['method']}[/yellow]")
    console.print("timings are wall clock (median); CPU times of the same runs are in the JSON (cpu_runs_*)")
    ratios = result["ratios"]
    console.print(f"ours / tdigest: ingest {ratios['ingest_ours_over_tdigest']:,.0f}x, "
                  f"merge32 {ratios['merge32_ours_over_tdigest']:,.0f}x (target >= 100x)")
    ours = impls[Ours.name]["tree"]
    phases = ours.get("phases_ms", {})
    if phases:
        console.print(f"{Ours.name} tree phases (ms, one instrumented run): " + ", ".join(
            f"{k} {v:.1f}" for k, v in phases.items()))
        console.print("  per summary (us): " + ", ".join(f"{k} {v:.1f}" for k, v in ours["per_summary_us"].items()))
        console.print("  per merge_all call (us): " + ", ".join(
            f"{k} {v:.1f}" for k, v in ours["per_merge_all_us"].items()))
    before = ours["python_before"]
    console.print(f"{Ours.name} tree (native) {impls[Ours.name]['tree_ms']:.1f} ms wall, "
                  f"{statistics.median(ours['cpu_runs_ms_lognormal']):.1f} ms CPU; the Python Summary before issue 29 "
                  f"{before['tree_ms']:.1f} ms wall, {statistics.median(before['cpu_runs_ms']):.1f} ms CPU: "
                  f"{result['ratios']['tree_before_over_native']:.1f}x")
    wire = impls[Ours.name]["wire"]
    console.print(f"per summary (CPU us): upb raw parse {wire['upb_parse_us']:.2f}, from_bytes {wire['from_bytes_us']:.2f} "
                  f"({wire['from_bytes_over_upb']:.2f}x upb; target <= 3x), before issue 29 "
                  f"{wire['oracle_from_bytes_us']:.2f}; to_bytes {wire['to_bytes_parsed_us']:.2f} (parsed), "
                  f"{wire['to_bytes_ingested_us']:.2f} (ingested)")
    console.print(f"per leaf of 64 values, ingest + first to_bytes (CPU us): native from_arrays "
                  f"{wire['leaf_ingest_encode_us']:.2f}, Python ingest + conversion to the native core "
                  f"{wire['leaf_python_ingest_encode_us']:.2f}, before issue 29 {wire['leaf_oracle_ingest_encode_us']:.2f}")
    if ours.get("profile_top"):
        console.print(f"[red]{Ours.name} tree_ms above 60 ms; cProfile of one tree run (top by own time):[/red]")
        for row in ours["profile_top"][:15]:
            console.print(f"  {row['tottime_ms']:8.1f} ms own {row['cumtime_ms']:8.1f} ms cum "
                          f"{row['calls']:>7} calls  {row['function']}")
    meets = result["meets_targets"]
    console.print("targets (ours): " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in meets.items()))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON,
                        help=f"where to write results (default {DEFAULT_JSON})")
    parser.add_argument("--quick", action="store_true", help="smaller tree and fewer repeats (a smoke run)")
    args = parser.parse_args(argv)

    full_leaves = 1024 if args.quick else 8192
    configs = {
        Ours.name: dict(ingest_chunk=10_000, ingest_chunks=20 if args.quick else 200,
                        ingest_repeats=3 if args.quick else 5,
                        merge_repeats=5 if args.quick else 21, tree_leaves=full_leaves,
                        tree_repeats=1 if args.quick else 5, before_repeats=1 if args.quick else 3),
        PyTDigestImpl.name: dict(ingest_chunk=10_000, ingest_chunks=1 if args.quick else 2, ingest_repeats=1,
                                 merge_repeats=1, tree_leaves=128 if args.quick else 512, tree_repeats=1),
        Exact.name: dict(ingest_chunk=10_000, ingest_chunks=20 if args.quick else 200,
                         ingest_repeats=3 if args.quick else 5,
                         merge_repeats=5 if args.quick else 21, tree_leaves=full_leaves,
                         tree_repeats=1 if args.quick else 3),
    }
    rng = np.random.default_rng(SEED)
    data = {dist: draw(dist, rng, full_leaves * PER_LEAF) for dist in ("lognormal", "bimodal")}

    result: dict[str, Any] = {
        "quick": args.quick, "seed": SEED, "machine": machine(),
        "definitions": {
            "ingest_values_per_s": "batch ingest (add_many / batch_update / array copy), chunks of 10,000, median run",
            "merge32_ms": "one merge of 32 summaries of 10,000 lognormal values, median of repeats",
            "tree_ms": "leaves x 64 values -> /8 -> /32 -> /32 -> 1, bytes round trip of every summary entering a "
                       "merge, leaves already built, median of runs (lognormal data)",
            "bytes_10k": "serialised size of a summary of 10,000 lognormal values",
            "rel_err": "|estimate / exact - 1| at the tree's root; exact = numpy.quantile of all values in the tree",
            "rank_err": "distance from q to [#(< est), #(<= est)] / n at the tree's root",
        },
        "targets": TARGETS, "implementations": {},
    }
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  TimeElapsedColumn(), console=console, transient=True) as progress:
        for impl in (Ours(), PyTDigestImpl(), Exact()):
            cfg = configs[impl.name] | {"full_leaves": full_leaves}
            result["implementations"][impl.name] = bench_impl(impl, cfg, data, progress)

    ours, slow = result["implementations"][Ours.name], result["implementations"][PyTDigestImpl.name]
    result["ratios"] = {
        "ingest_ours_over_tdigest": ours["ingest_values_per_s"] / slow["ingest_values_per_s"],
        "merge32_ours_over_tdigest": slow["merge32_ms"] / ours["merge32_ms"],
        "tree_before_over_native": ours["tree"]["python_before"]["tree_ms"] / ours["tree_ms"],
    }
    result["meets_targets"] = {
        "ingest": ours["ingest_values_per_s"] >= 5e6,
        "merge32": ours["merge32_ms"] <= 2.0,
        "tree": ours["tree_ms"] <= 60.0,
        "from_bytes <= 3x upb": ours["wire"]["from_bytes_over_upb"] <= 3.0,
        "bytes_10k": ours["bytes_10k"] <= 4096,
        "lognormal rel_err": all(ours["rel_err"]["lognormal"][q] <= (0.01 if q == "p99.9" else 0.005) for q in QNAMES),
        "bimodal rank_err": all(v <= 1e-3 for v in ours["rank_err"]["bimodal"].values()),
        "100x tdigest": min(result["ratios"]["ingest_ours_over_tdigest"],
                            result["ratios"]["merge32_ours_over_tdigest"]) >= 100,
    }
    print_report(result)
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
