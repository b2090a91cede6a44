"""Check the root's finalised steps against the simulator's ground truth, exactly; and, when the ranks
synchronised through collectives, that no rank's step ended before the step's last rank arrived.

Steps are told apart by attempt: a restarted job's replayed steps are one window per attempt at the root
(rows carry `attempt`) and one set of values per attempt in the truth (lines carry `attempt`; 0 when absent).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

from collectors.sim.model import ARRIVAL

K = 8


def load_truth(path: Path) -> dict[tuple[str, int], dict[int, list[float]]]:
    """(metric, step) -> rank -> values, every attempt's together (see load_truth_by_attempt)."""
    truth: dict[tuple[str, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for (metric, step, _), by_rank in load_truth_by_attempt(path).items():
        for rank, values in by_rank.items():
            truth[(metric, step)][rank].extend(values)
    return truth


def load_truth_by_attempt(path: Path) -> dict[tuple[str, int, int], dict[int, list[float]]]:
    """(metric, step, attempt) -> rank -> values."""
    truth: dict[tuple[str, int, int], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    for line in path.read_text().splitlines():
        if line.strip():
            rec = json.loads(line)
            value = rec["value"]
            truth[(rec["metric"], rec["step"], int(rec.get("attempt", 0)))][rec["rank"]].append(float(value))
    return truth


def expected_figures(by_rank: dict[int, list[float]], world_size: int) -> dict[str, object]:
    finite = [(v, r) for r, values in by_rank.items() for v in values if math.isfinite(v)]
    nonfinite = sorted({r for r, values in by_rank.items() for v in values if not math.isfinite(v)})
    out: dict[str, object] = {
        "count": len(finite),
        "missing": [r for r in range(world_size) if r not in by_rank],
        "nonfinite_count": sum(1 for values in by_rank.values() for v in values if not math.isfinite(v)),
        "nonfinite_sources": nonfinite,
    }
    if finite:
        out["sum"] = math.fsum(v for v, _ in finite)
        top = sorted(finite, key=lambda p: (-p[0], p[1]))[:K]
        bottom = sorted(finite)[:K]
        out.update({"max": top[0][0], "argmax": top[0][1], "min": bottom[0][0], "argmin": bottom[0][1],
                    "top": [[v, r] for v, r in top], "values": np.array([v for v, _ in finite])})
    return out


def compare(steps_by_metric: dict[str, list[dict]], truth_path: Path, world_size: int | Mapping[int, int],
            quantile_tolerance: float = 0.02) -> list[str]:
    """Every mismatch between the root and the truth, as sentences; [] when they agree. `world_size`: the
    job's, or attempt -> its world size (attempts may differ); rows without `attempt` are attempt 0."""
    truth = load_truth_by_attempt(truth_path)

    def world(attempt: int) -> int:
        return world_size if isinstance(world_size, int) else world_size[attempt]

    problems: list[str] = []
    seen = set()
    for metric, rows in steps_by_metric.items():
        for row in rows:
            attempt = int(row.get("attempt", 0))
            key = (metric, row["step"], attempt)
            seen.add(key)
            if key not in truth:
                problems.append(f"{metric} step {row['step']}{_of(attempt)}: at the root but no rank logged it")
                continue
            problems.extend(_compare_row(metric, row, expected_figures(truth[key], world(attempt)),
                                         quantile_tolerance))
    for key in truth:
        if key[0] in steps_by_metric and key not in seen:
            problems.append(f"{key[0]} step {key[1]}{_of(key[2])}: logged by ranks {sorted(truth[key])} but not "
                            "at the root")
    return problems + synchronised(steps_by_metric)


def _of(attempt: int) -> str:
    return f" (attempt {attempt})" if attempt else ""


def synchronised(steps_by_metric: dict[str, list[dict]]) -> list[str]:
    """Steps at which, at the root, some rank's wall step time is shorter than the last rank's compute
    (`collective_arrival`): under synchronous collectives nobody leaves a step before the last arrives."""
    arrivals = {(row["step"], row.get("attempt", 0)): row for row in steps_by_metric.get(ARRIVAL, []) if row["count"]}
    problems = []
    for row in steps_by_metric.get("step_time", []):
        arrival = arrivals.get((row["step"], row.get("attempt", 0)))
        if row["count"] and arrival is not None and row["min"] < arrival["max"]:
            problems.append(f"step {row['step']}: rank {row['argmin']}'s step_time {row['min']} is shorter than "
                            f"rank {arrival['argmax']}'s {ARRIVAL} {arrival['max']}")
    return problems


def _compare_row(metric: str, row: dict, want: dict, tol: float) -> Iterable[str]:
    where = f"{metric} step {row['step']}{_of(int(row.get('attempt', 0)))}"
    for name in ("count", "missing", "nonfinite_count", "nonfinite_sources"):
        if row[name] != want[name]:
            yield f"{where}: {name} is {row[name]}, truth {want[name]}"
    if not want["count"]:
        return
    for name in ("min", "argmin", "max", "argmax", "top"):
        if row[name] != want[name]:
            yield f"{where}: {name} is {row[name]}, truth {want[name]}"
    mean_sum = row["mean"] * row["count"]
    if not math.isclose(mean_sum, want["sum"], rel_tol=1e-9, abs_tol=1e-9):
        yield f"{where}: sum {mean_sum} != truth {want['sum']}"
    values = want["values"]
    tol = max(tol, 1.5 / len(values))  # interpolation between order statistics is worth one rank
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        # rank error: the fraction of true values at or below the estimate, against q
        rank = float(np.mean(values <= row[name])) if len(values) else q
        lo = float(np.mean(values < row[name])) if len(values) else q
        if not (lo - tol <= q <= rank + tol):
            yield f"{where}: {name}={row[name]} has rank error beyond {tol} (rank in [{lo:.4f}, {rank:.4f}])"
