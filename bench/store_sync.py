"""What `--durability power` costs the root: commits per second with SQLite synchronous=NORMAL vs FULL.

    python bench/store_sync.py [--rounds 5] [--commits 200] [--windows 64] [--dir DIR] [--out bench/results]

Each commit is one `Store.save` of `--windows` finalised windows (a 64-rank summary each), as the root's
flush writes them. The two modes run in interleaved rounds in one process on the same directory, so the
ratio is measured under the same load; the median round is reported. The directory's file system decides
the figures (an fsync on tmpfs is free; on a disk it is not): pass `--dir` on the disk the root's --db
will live on. Prints a table and writes store_sync.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from harness import write_json
from machine import REPO, cpu_model, git_head

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

from collectors.common.keys import Key
from collectors.root.store import SYNC_MODES, Row, Store
from telemetry.summary import Summary


def _rows(windows: int, step: int) -> list[Row]:
    rng = np.random.default_rng(step)
    summary = Summary.from_arrays(rng.normal(0.1, 0.01, 64), np.arange(64, dtype=np.int64), time.time_ns())
    return [Row(Key("bench", f"m{i}", step), 64, summary, 0, time.time_ns()) for i in range(windows)]


def _round(directory: Path, mode: str, commits: int, windows: int) -> float:
    """Commits per second of one fresh store in this mode."""
    path = directory / f"{mode}.db"
    for leftover in directory.glob(f"{mode}.db*"):
        leftover.unlink()
    store = Store(path, mode)
    batches = [_rows(windows, step) for step in range(commits)]
    start = time.perf_counter()
    for rows in batches:
        store.save(rows, {"bench": 64})
    elapsed = time.perf_counter() - start
    store.close()
    return commits / elapsed


def _filesystem(directory: Path) -> str:
    best = ("", "?")
    for line in Path("/proc/mounts").read_text().splitlines():
        _, mount, kind, *_ = line.split()
        if str(directory.resolve()).startswith(mount) and len(mount) > len(best[0]):
            best = (mount, kind)
    return f"{best[1]} at {best[0]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per mode [5]")
    parser.add_argument("--commits", type=int, default=200, help="commits per round [200]")
    parser.add_argument("--windows", type=int, default=64, help="windows per commit [64]")
    parser.add_argument("--dir", type=Path, help="where the store files go [a temporary dir under the repo]")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results", help="JSON directory")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir or REPO) as tmp:
        directory = Path(tmp)
        rates: dict[str, list[float]] = {mode: [] for mode in SYNC_MODES}
        for round_ in range(args.rounds):
            for mode in SYNC_MODES:
                rates[mode].append(_round(directory, mode, args.commits, args.windows))
            print(f"round {round_ + 1}/{args.rounds}: " + ", ".join(
                f"{mode} {rates[mode][-1]:,.0f} commits/s" for mode in SYNC_MODES), file=sys.stderr)
        filesystem = _filesystem(directory)
    median = {mode: statistics.median(values) for mode, values in rates.items()}
    result = {
        "commits_per_s": median, "rounds": rates, "windows_per_commit": args.windows,
        "commit_ms": {mode: 1000 / rate for mode, rate in median.items()},
        "power_over_process_time": median["process"] / median["power"],
        "filesystem": filesystem, "cpu": cpu_model(), "git_head": git_head(), "load_1min": os.getloadavg()[0],
    }
    print(f"\nstore commits of {args.windows} windows on {filesystem} (median of {args.rounds} rounds)")
    for mode, rate in median.items():
        print(f"  --durability {mode:8s} ({SYNC_MODES[mode]:6s}): {rate:8,.0f} commits/s, "
              f"{1000 / rate:6.2f} ms per commit")
    print(f"  power costs {result['power_over_process_time']:.2f}x the time of process per commit")
    write_json(args.out / "store_sync.json", result, indent=1)


if __name__ == "__main__":
    main()
