"""One simulated host's ranks: each a thread with its own real SDK `Run`, on a shared step clock.

Run as `python -m collectors.sim.ranks ...` by the orchestrator. Writes every
value logged to a truth file (JSON lines) so the root's figures can be
checked exactly. Ranks that a `dead` injection kills live in a process of
their own, which exits at that step. With `--crash` (the first attempt of a
`restart` injection) every rank stops after its last step and the process
exits abruptly, without closing its runs, once what they logged is durable
at the root (so the truth holds exactly what the root can hold).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from pathlib import Path

import telemetry
from collectors.common.lifetime import die_with_parent
from collectors.sim.model import RankModel, parse_injection

CRASH_EXIT = 17


def _encode(value: float) -> float | str:
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def start_time(path: Path, done: threading.Event) -> float:
    """Step 1's wall time, which the simulator writes once every rank of every host is connected."""
    while not done.is_set():
        try:
            return float(path.read_text())
        except (FileNotFoundError, ValueError):
            time.sleep(0.05)
    return time.time()


def run_rank(args: argparse.Namespace, rank: int, truth: list[str], lock: threading.Lock, done: threading.Event,
             connected: threading.Semaphore) -> None:
    model = RankModel(rank, args.seed, [parse_injection(t) for t in args.inject], args.world_size,
                      sync_collectives=args.sync_collectives)
    agent = args.agent.format(node=rank // args.ranks_per_node)
    attempt = {} if args.attempt is None else {"attempt": args.attempt}
    run = telemetry.init(job=args.job, rank=rank, world_size=args.world_size, local_rank=rank % args.ranks_per_node,
                         agent=agent, flush_interval_s=args.flush_interval, **attempt)
    stop = model.stops_at()
    lines: list[str] = []  # this rank's truth lines, not yet flushed to `truth`
    try:
        if not run.wait_connected(args.connect_timeout):
            print(json.dumps({"rank": rank, "not_connected_after_s": args.connect_timeout}), file=sys.stderr,
                  flush=True)
        connected.release()
        start = start_time(args.start_file, done)
        for step in range(args.first_step, args.steps + 1):
            target = start + (step - args.first_step) * args.interval
            delay = target - time.time()
            if delay > 0:
                time.sleep(delay)
            if stop is not None and step >= stop[0]:
                how = stop[1]
                if how == "dead":
                    # This rank has a process of its own: record what it logged, then die abruptly.
                    _flush_truth(truth, lines, lock)
                    args.truth.write_text("".join(line + "\n" for line in truth))
                    os._exit(17)
                if how == "blocked" and step == stop[0]:
                    value = model.values(step)["loss"]
                    run.log(step, loss=value)
                    lines.append(json.dumps({"rank": rank, "step": step, "metric": "loss", "value": _encode(value),
                                             "attempt": run.attempt}))
                run.current_step = step if how == "blocked" else step - 1
                break
            values = model.values(step)
            run.log(step, **values)
            run.end_step(step)
            for metric, value in values.items():
                lines.append(json.dumps({"rank": rank, "step": step, "metric": metric, "value": _encode(value),
                                         "attempt": run.attempt}))
        if stop is not None:
            done.wait(args.hold)  # hung or blocked: stay alive (heartbeating) until told to stop
        if args.crash:
            if not _durable(run, args.close_timeout):
                print(json.dumps({"rank": rank, "undelivered_before_crash": run.stats}), file=sys.stderr, flush=True)
            return  # not closed: main() exits the process abruptly
    finally:
        _flush_truth(truth, lines, lock)
        ok = True if args.crash else run.close(timeout=args.close_timeout)
        if not ok:
            print(json.dumps({"rank": rank, "undelivered": run.stats}), file=sys.stderr, flush=True)


def _durable(run: telemetry.Run, timeout: float) -> bool:
    """Wait until everything `run` logged is durable at the root, without closing it (as close() waits)."""
    deadline = time.monotonic() + timeout
    # The SDK has no public flush: the simulator reads the same state close() waits on.
    while time.monotonic() < deadline and (run._records or run._sender.unacknowledged()):
        run._sender.wake()
        time.sleep(0.01)
    return not run._records and not run._sender.unacknowledged()


def _flush_truth(truth: list[str], lines: list[str], lock: threading.Lock) -> None:
    with lock:
        truth.extend(lines)
    lines.clear()


def main(argv: list[str] | None = None) -> int:
    die_with_parent()
    parser = argparse.ArgumentParser(description="simulated ranks of one host (used by `telemetry sim`)")
    parser.add_argument("--job", required=True)
    parser.add_argument("--ranks", required=True, help="comma-separated rank ids")
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--ranks-per-node", type=int, default=8)
    parser.add_argument("--agent", required=True, help="agent address; {node} is replaced by rank // ranks-per-node")
    parser.add_argument("--steps", type=int, required=True, help="the last step")
    parser.add_argument("--first-step", type=int, default=1, help="the first step (a resumed attempt's)")
    parser.add_argument("--attempt", type=int, default=None, help="the job's attempt [default: the SDK's]")
    parser.add_argument("--crash", action="store_true",
                        help="after the last step, once it is durable, exit abruptly without closing the runs")
    parser.add_argument("--interval", type=float, required=True)
    parser.add_argument("--start-file", type=Path, required=True,
                        help="file the simulator writes step 1's wall time into once all ranks are connected")
    parser.add_argument("--connect-timeout", type=float, default=120.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--inject", action="append", default=[])
    parser.add_argument("--no-sync-collectives", dest="sync_collectives", action="store_false",
                        help="no collectives: step_time is a rank's own compute; no collective_arrival")
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--hold", type=float, default=3600.0)
    parser.add_argument("--close-timeout", type=float, default=60.0)
    parser.add_argument("--flush-interval", type=float, default=0.05,
                        help="SDK batching interval; many simulated ranks share two cores")
    args = parser.parse_args(argv)
    truth: list[str] = []
    lock = threading.Lock()
    done = threading.Event()
    stop_file = args.truth.with_suffix(".stop")

    def watch_stop() -> None:
        while not done.is_set():
            if stop_file.exists():
                done.set()
            time.sleep(0.1)

    threading.Thread(target=watch_stop, daemon=True).start()
    ranks = [int(r) for r in args.ranks.split(",")]
    connected = threading.Semaphore(0)
    threads = [threading.Thread(target=run_rank, args=(args, r, truth, lock, done, connected), daemon=True)
               for r in ranks]
    for thread in threads:
        thread.start()
    for _ in ranks:
        connected.acquire()
    print(json.dumps({"ready": True, "ranks": len(ranks)}), flush=True)  # the simulator waits for this line
    for thread in threads:
        thread.join()
    done.set()
    args.truth.write_text("\n".join(truth) + ("\n" if truth else ""))
    if args.crash:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(CRASH_EXIT)  # a crash: the runs' streams break without a close
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
