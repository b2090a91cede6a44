"""Run one bench at two revisions, alternately, and compare every figure of its JSON as head / base.

Why: a refactor is to leave the benchmarks' figures where they were (the codebase issue: within 10 %), and these
machines drift; figures taken days apart on another load say little. This runs the same command at the base
revision (a detached git worktree, removed after) and at the working tree, interleaved (base, head, base, head,
...), and compares the means of the rounds, so that both sides see the same machine.

    .venv/bin/python bench/ab.py --base 7923722 --keys 'own_code|bytes_per_step' -- \\
        bench/scale.py --sizes 1024,4096 --steps 10 --warmup 2 --idle-s 2 --wide '' --no-baseline --out {out}

The command after `--` is run in each tree with that tree first on PYTHONPATH, `{out}` replaced by a fresh
directory; the bench's JSON is the one *.json file it writes there (the one at its top, where others are below it). Every numeric leaf of it (a dotted path,
list items by index) that both sides have is compared, or those matching --keys (a regular expression). Writes
bench/results/ab.json (or --json): both revisions, each round's JSON and the table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import REPO, git_head, machine_facts


def leaves(value: Any, path: str = "") -> dict[str, float]:
    """Every number of a JSON document by its dotted path (booleans are not numbers here)."""
    out: dict[str, float] = {}
    if isinstance(value, dict):
        for key, item in value.items():
            out.update(leaves(item, f"{path}.{key}" if path else str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.update(leaves(item, f"{path}.{index}" if path else str(index)))
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        out[path] = float(value)
    return out


def compare(base: list[dict[str, Any]], head: list[dict[str, Any]], keys: str | None) -> list[dict[str, Any]]:
    """Per figure both sides have in every round: each side's rounds, means, and head / base."""
    wanted = re.compile(keys) if keys else None
    base_leaves, head_leaves = [leaves(doc) for doc in base], [leaves(doc) for doc in head]
    common = set.intersection(*(set(found) for found in base_leaves + head_leaves))
    rows = []
    for path in sorted(common):
        if wanted is not None and not wanted.search(path):
            continue
        b, h = [found[path] for found in base_leaves], [found[path] for found in head_leaves]
        mean_b, mean_h = statistics.fmean(b), statistics.fmean(h)
        rows.append({"figure": path, "base": b, "head": h, "base_mean": mean_b, "head_mean": mean_h,
                     "ratio": mean_h / mean_b if mean_b else None})
    return rows


def run_once(tree: Path, command: list[str], out: Path) -> dict[str, Any]:
    """The command in `tree`, its JSON result."""
    out.mkdir(parents=True)
    argv = [sys.executable if part == "python" else part.replace("{out}", str(out)) for part in command]
    if argv[0].endswith(".py"):
        argv.insert(0, sys.executable)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(":")}
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} in {tree} exited {done.returncode}:\n{done.stderr[-3000:]}")
    found = sorted(out.glob("*.json")) or sorted(out.rglob("*.json"))  # one at the top (scale.py --metrics: its table)
    if len(found) != 1:
        raise RuntimeError(f"{' '.join(argv)} wrote {len(found)} JSON files in {out}, not one")
    return dict(json.loads(found[0].read_text()))


NATIVE_SOURCES = "telemetry/summary/native"  # with setup.py: what the compiled part is built from
NATIVE_BUILT = "telemetry/summary/_native*.so"


def native_inputs(tree: Path) -> list[tuple[str, bytes]]:
    """setup.py and every file of the native sources in `tree`, by relative path: what its build reads."""
    files = [tree / "setup.py", *sorted(p for p in (tree / NATIVE_SOURCES).rglob("*") if p.is_file())]
    return [(str(p.relative_to(tree)), p.read_bytes()) for p in files if p.is_file()]


def reusable_build(tree: Path, working: Path = REPO) -> list[Path]:
    """The working tree's compiled part, when it is what building `tree` would make: the same build inputs, byte
    for byte, and built after every one of them was last changed (not a build left from older sources)."""
    built = sorted(working.glob(NATIVE_BUILT))
    inputs = native_inputs(working)
    if not built or native_inputs(tree) != inputs:
        return []
    newest_input = max((working / name).stat().st_mtime for name, _ in inputs)
    return built if all(p.stat().st_mtime >= newest_input for p in built) else []


def build_native(tree: Path, others: list[Path] | None = None) -> str:
    """A revision with a compiled part (setup.py: the summary's C++ core) imports only once it is built; a fresh
    worktree holds sources alone, so build it in place with this interpreter (its pybind11 and compiler). When
    its build inputs are the working tree's (a Python-only change: the common A/B), or those of one of `others`
    (--reuse-build: e.g. the main checkout, when the change under test is native), that checkout's build is copied
    instead of compiling the same sources again (minutes on 2 cores). Returns how: "copied" (from the working
    tree), "copied from PATH", "built", or "none" (no compiled part)."""
    if not (tree / "setup.py").exists():
        return "none"
    for working in [REPO, *(others or [])]:
        same = reusable_build(tree, working)
        if same:
            for built in same:
                shutil.copy2(built, tree / built.relative_to(working))
            return "copied" if working == REPO else f"copied from {working}"
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--inplace"], cwd=tree,
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"building the native extension in {tree} failed:\n{done.stderr[-3000:]}")
    return "built"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     allow_abbrev=False)
    parser.add_argument("--base", required=True, help="the revision to compare against (any git revision)")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, interleaved (default 2)")
    parser.add_argument("--keys", help="compare only the figures whose dotted path matches this regex")
    parser.add_argument("--json", type=Path, default=REPO / "bench" / "results" / "ab.json")
    parser.add_argument("--reuse-build", type=Path, action="append", default=[],
                        help="another checkout whose compiled part the base copies when its build inputs are the "
                             "base's, byte for byte, and it was built after them (e.g. the main checkout; repeatable)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- the bench command, with {out}")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command or not any("{out}" in part for part in command):
        parser.error("give the bench command after --, with {out} where its output directory goes")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    work = Path(tempfile.mkdtemp(prefix="telemetry-ab-"))
    base_tree = work / "base"
    try:
        subprocess.run(["git", "worktree", "add", "--detach", str(base_tree), args.base], cwd=REPO, check=True,
                       capture_output=True)
        native = build_native(base_tree, args.reuse_build)
        print(f"base worktree {base_tree}: native extension {native}", flush=True)
        docs: dict[str, list[dict[str, Any]]] = {"base": [], "head": []}
        for round_ in range(1, args.rounds + 1):
            for side, tree in (("base", base_tree), ("head", REPO)):
                start = time.monotonic()
                docs[side].append(run_once(tree, command, work / f"{side}-{round_}"))
                print(f"round {round_}/{args.rounds} {side}: {time.monotonic() - start:.0f} s", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=REPO, capture_output=True)
        shutil.rmtree(work, ignore_errors=True)
    rows = compare(docs["base"], docs["head"], args.keys)
    width = max((len(row["figure"]) for row in rows), default=10)
    print(f"{'figure':{width}}  {'base (rounds)':>24}  {'head (rounds)':>24}  head/base")
    for row in rows:
        ratio = "-" if row["ratio"] is None else f"{row['ratio']:.3f}"
        print(f"{row['figure']:{width}}  {', '.join(f'{v:.4g}' for v in row['base']):>24}  "
              f"{', '.join(f'{v:.4g}' for v in row['head']):>24}  {ratio:>9}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    base_rev = subprocess.run(["git", "rev-parse", args.base], cwd=REPO, capture_output=True, text=True).stdout.strip()
    args.json.write_text(json.dumps({"benchmark": "ab", "command": command, "base": base_rev, "head": git_head(),
                                     "rounds": args.rounds, "base_native": native, "machine": machine_facts(),
                                     "keys": args.keys, "table": rows, "runs": docs}, indent=1) + "\n")
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
