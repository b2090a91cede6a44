"""The long fuzz run of the tree's untrusted entry points (the tests run a bounded one: tests/test_fuzz.py).

    python bench/fuzz.py [--examples 1000] [--seed 0] [--out bench/results]
    python bench/fuzz.py --native [--examples 100000]     # the native summary decoder alone

Same strategies and invariants as the tests (tests/fuzz_entry_points.py): every stream to a real agent
and root ends with a status that is the input's fault, every API answer is 200/400/404, and a healthy
job logged between the entry points stays exact with no event about its ranks, also next to a rogue child
and a rogue rank sending fingerprints, captures, attempts and heartbeat times about it (issue 26). Prints the cases run per entry point and the time, and
writes fuzz.json; exits 1 on the first broken invariant (hypothesis prints the shrunk case).

--native fuzzes the native summary decoder (telemetry.summary._native, issue 29) in-process with hypothesis:
each case is a valid summary damaged by 1 to 3 mutations drawn by hypothesis (truncation, bit flips, byte
damage, spliced raw protobuf records, moved slices, random bytes; tests/native_fuzz.py), or raw bytes, or (about
a quarter) hostile arrays for the native ingest (native_fuzz.ingest). The
invariant is tests/native_fuzz.py's `check` (ValueError, or a usable summary). Then the leak check: as many
seeded cases again without hypothesis (whose own bookkeeping grows with every example), the process's RSS
sampled every 10 %; the growth after the first 10 % must stay under 8 MiB. Writes fuzz_native.json. tests/test_native_asan.py runs the same cases under AddressSanitizer.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

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

RSS_GROWTH_LIMIT = 8 << 20


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def native(examples: int, seed_: int, out: Path) -> None:
    """Hypothesis-driven cases against the native summary decoder; RSS sampled as it goes."""
    import native_fuzz  # tests/native_fuzz.py

    bases = native_fuzz.seeds()
    counts = {"cases": 0, "accepted": 0, "ingest": 0}
    every = max(1, examples // 10)

    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(base=st.integers(0, len(bases) - 1), rng=st.randoms(use_true_random=False),
           steps=st.integers(0, 3), raw=st.one_of(st.none(), st.binary(max_size=300)))
    def case(base: int, rng: Any, steps: int, raw: bytes | None) -> None:
        if steps == 0:  # the native ingest
            counts["accepted"] += native_fuzz.ingest(rng)
            counts["ingest"] += 1
        else:
            data = raw if raw is not None else bases[base]
            if raw is None:
                for _ in range(steps):
                    data = native_fuzz.mutate(rng, data)
            counts["accepted"] += native_fuzz.check(data)
        counts["cases"] += 1
        if counts["cases"] % every == 0:
            sys.stderr.write(f"\rhypothesis: {counts['cases']:,} cases")

    started = time.monotonic()
    seed(seed_)(case)()
    fuzz_s = time.monotonic() - started
    sys.stderr.write("\n")

    samples: list[tuple[int, int]] = []  # the leak check: plain seeded cases, RSS as they go
    rng = random.Random(seed_)
    for done in range(1, examples + 1):
        if done % 4 == 0:
            native_fuzz.ingest(rng)
        else:
            data = rng.choice(bases)
            for _ in range(rng.randint(1, 3)):
                data = native_fuzz.mutate(rng, data)
            native_fuzz.check(data)
        if done % every == 0:
            samples.append((done, rss_bytes()))
            sys.stderr.write(f"\rleak check: {done:,} cases, RSS {samples[-1][1] / 2**20:.1f} MiB")
    sys.stderr.write("\n")
    elapsed = time.monotonic() - started
    growth = samples[-1][1] - samples[0][1] if len(samples) > 1 else 0
    result = {"cases": counts["cases"], "accepted": counts["accepted"], "ingest_cases": counts["ingest"],
              "hypothesis_seconds": fuzz_s,
              "leak_check_cases": examples, "seconds": elapsed, "seed": seed_,
              "rss_samples": [{"cases": c, "rss_bytes": r} for c, r in samples],
              "rss_growth_after_first_tenth_bytes": growth, "rss_growth_limit_bytes": RSS_GROWTH_LIMIT,
              "git_head": git_head(), "load_1min": os.getloadavg()[0]}
    out.mkdir(parents=True, exist_ok=True)
    (out / "fuzz_native.json").write_text(json.dumps(result, indent=1))
    print(f"native decoder and ingest: {counts['cases']:,} hypothesis cases ({counts['ingest']:,} of ingest; "
          f"{counts['accepted']:,} accepted) in {fuzz_s:.0f} s, "
          f"no crash; leak check {examples:,} cases: RSS {samples[0][1] / 2**20:.1f} -> {samples[-1][1] / 2**20:.1f} MiB "
          f"after the first tenth (growth {growth / 2**20:.2f} MiB, limit {RSS_GROWTH_LIMIT / 2**20:.0f})")
    if growth > RSS_GROWTH_LIMIT:
        sys.exit(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=None,
                        help="cases per entry point [1000], or in all with --native [100000]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    parser.add_argument("--native", action="store_true", help="fuzz the native summary decoder alone")
    args = parser.parse_args()
    if args.native:
        native(args.examples or 100_000, args.seed, args.out)
        return
    args.examples = args.examples or 1000
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
            @given(child=rogue_child_streams(), rank=rogue_rank_streams, own=rogue_job_streams)
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
                if run is rogues:
                    tree.open_healthy()  # running from now on: the rogues' attempts are never its latest
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
