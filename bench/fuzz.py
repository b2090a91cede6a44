"""The long fuzz run of the tree's untrusted entry points (the tests run a bounded one: tests/test_fuzz.py).

    python bench/fuzz.py [--examples 1000] [--seed 0] [--out bench/results]

Same strategies and invariants as the tests (tests/fuzz_entry_points.py): every stream to a real agent
and root ends with a status that is the input's fault, every API answer is 200/400/404, and a healthy
job logged between the entry points stays exact with no event about its ranks, also next to a rogue child
and a rogue rank sending fingerprints, captures, attempts and heartbeat times about it (issue 26). Prints the cases run per entry point and the time, and
writes fuzz.json; exits 1 on the first broken invariant (hypothesis prints the shrunk case).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from machine import REPO, git_head

sys.path.insert(0, str(REPO / "tests"))  # the fuzzers live with the tests
sys.path.insert(0, str(REPO))  # the checkout, before tests/

from fuzz_entry_points import (
    FuzzTree,
    api_paths,
    api_queries,
    forward_streams,
    rank_streams,
    raw_streams,
    rogue_child_streams,
    rogue_job_streams,
    rogue_rank_streams,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=1000, help="cases per entry point [1000]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the services warn about every refused input: expected here
    many = settings(max_examples=args.examples, deadline=None, suppress_health_check=list(HealthCheck),
                    database=None)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        tree = FuzzTree(Path(tmp)).start()
        try:
            @many
            @given(stream=rank_streams)
            def ranks(stream: Any) -> None:
                tree.stream("agent", stream)

            @many
            @given(stream=raw_streams)
            def raw(stream: Any) -> None:
                tree.stream("agent", stream, raw=True)
                tree.stream("root", stream, raw=True)

            @many
            @given(stream=forward_streams)
            def forward(stream: Any) -> None:
                tree.stream("root", stream)

            @many
            @given(child=rogue_child_streams, rank=rogue_rank_streams, own=rogue_job_streams)
            def rogues(child: Any, rank: Any, own: Any) -> None:
                tree.stream("root", child)
                tree.stream("agent", rank)
                tree.stream("agent", own)

            @many
            @given(path=api_paths, query=api_queries)
            def api(path: Any, query: Any) -> None:
                tree.api(path, query)

            tree.log_healthy()  # the healthy job's ranks known before the rogues speak
            for name, run in (("rank streams", ranks), ("raw bytes", raw), ("forward streams", forward),
                              ("rogue child and rank next to the healthy job", rogues), ("API queries", api)):
                begun = time.monotonic()
                sys.stderr.write(f"{name}: ")
                sys.stderr.flush()
                seed(args.seed)(run)()
                tree.log_healthy()
                tree.check_healthy()
                sys.stderr.write(f"done in {time.monotonic() - begun:.0f} s, {sum(tree.cases.values())} cases so far\n")
        finally:
            tree.stop()
    elapsed = time.monotonic() - started
    result = {"cases": tree.cases, "total_cases": sum(tree.cases.values()), "seconds": elapsed,
              "examples_per_entry_point": args.examples, "seed": args.seed, "healthy_steps_exact": tree.healthy_steps,
              "git_head": git_head(), "load_1min": os.getloadavg()[0]}
    print(f"{result['total_cases']:,} cases in {elapsed:.0f} s: " +
          ", ".join(f"{k} {v:,}" for k, v in sorted(tree.cases.items())) +
          f"; the healthy job's {tree.healthy_steps} steps exact; no invariant broken")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fuzz.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
