"""What the root's store reads cost its intake (issue 27 item 2): window reloads and run-ledger claims.

    .venv/bin/python bench/store_reads.py [--seconds 6] [--hold-ms 200] [--windows 100000] [--out bench/results]

Two scenarios against a real RootServer on loopback gRPC, driven by hand-made children:

* slow commit: every commit of the root's store holds the writer (its lock and SQLite's write lock) for
  `--hold-ms` first (a slow disk; `--durability power` on one), while a busy child keeps the flush loop
  committing (a unit of `--busy-windows` new windows every 20 ms). A probe child sends one brand-new window every
  50 ms, open loop, naming a new job every 5 units with its ranks' processes (a run-ledger claim); the figure
  is the probe's intake latency: from its send to its RECEIVED ack.
* restart: a store holding `--windows` persisted windows (built once, cached under --cache), a root started
  on a copy of it, and a child resending them all (units of 500 windows, all sent at once, as an outbox resends
  what it retains; `--resenders N`: N children, each its share, as racks after a root restart): the time until
  every one is acknowledged DURABLE (each a duplicate: counted, and checked),
  and meanwhile the probe's intake latency.

Prints a table and writes store_reads.json under --out. Compare two revisions with bench/ab.py.
"""

from __future__ import annotations

import argparse
import json
import queue
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from machine import REPO, machine_facts

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

import grpc
import numpy as np
from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.root.server import RootConfig, RootServer
from collectors.root.store import Row, Store
from telemetry import Summary
from telemetry.v1 import forward_pb2, forward_pb2_grpc

RECEIVED, DURABLE = forward_pb2.Ack.RECEIVED, forward_pb2.Ack.DURABLE
RESEND_JOB, RESEND_RANKS, RESEND_UNIT = "resend", 4, 500


def _summary(sources: int) -> Summary:
    return Summary.from_arrays(np.linspace(0.5, 1.5, sources), np.arange(sources, dtype=np.int64), time.time_ns())


class Child:
    """One child on a Forward stream: units sent open loop, each one's RECEIVED and DURABLE times kept."""

    def __init__(self, address: str, sender_id: str) -> None:
        self.sender_id = sender_id
        self.channel = grpc.insecure_channel(address, options=[("grpc.max_receive_message_length", 64 << 20),
                                                               ("grpc.max_send_message_length", 64 << 20)])
        self._requests: queue.Queue = queue.Queue()
        self.sent: dict[int, float] = {}
        self.received: dict[int, float] = {}
        self.durable: dict[int, float] = {}
        self.rejected = 0
        self.seq = 0
        stub = forward_pb2_grpc.CollectorStub(self.channel)
        self.call = stub.Forward(iter(self._requests.get, None))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._requests.put(forward_pb2.SummaryBatch(sender_id=sender_id, seq=0))

    def _read(self) -> None:
        try:
            for ack in self.call:
                now = time.perf_counter()
                if ack.seq and ack.status in (RECEIVED, forward_pb2.Ack.REJECTED_OVERLAP):
                    self.received.setdefault(ack.seq, now)
                    self.rejected += ack.status != RECEIVED
                elif ack.seq and ack.status == DURABLE:
                    self.durable.setdefault(ack.seq, now)
        except grpc.RpcError:
            pass

    def send(self, windows: list[forward_pb2.WindowSummary], ranks: list[forward_pb2.RankStates]) -> int:
        self.seq += 1
        batch = forward_pb2.SummaryBatch(sender_id=self.sender_id, seq=self.seq, windows=windows, ranks=ranks)
        self.sent[self.seq] = time.perf_counter()
        self._requests.put(batch)
        return self.seq

    def latencies_ms(self, seqs: list[int] | None = None) -> list[float]:
        seqs = list(self.sent) if seqs is None else seqs
        return [(self.received[s] - self.sent[s]) * 1e3 for s in seqs if s in self.received]

    def close(self) -> None:
        self._requests.put(None)
        self.call.cancel()
        self.channel.close()


def _states(job: str, ranks: int, processes: bool) -> forward_pb2.RankStates:
    msg = forward_pb2.RankStates(job=job, alive=BitMap(range(ranks)).serialize(), world_size=ranks,
                                 host_ranks=list(range(ranks)), hosts=[f"host{r}" for r in range(ranks)])
    if processes:
        msg.processes.extend(hash((job, r)) % (2**63) + 1 for r in range(ranks))
    return msg


class Probe:
    """A child sending one brand-new 4-rank window every `every_s`, a new job (a new claim) every 5 units."""

    def __init__(self, address: str, every_s: float = 0.05) -> None:
        self.child = Child(address, "probe")
        self.every_s = every_s
        self.summary = _summary(4).to_proto()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.seqs: list[tuple[float, int]] = []

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            job = f"probe{n // 5}"
            window = forward_pb2.WindowSummary(key=Key(job, "loss", n).to_proto(), summary=self.summary, expected=4)
            self.seqs.append((time.perf_counter(), self.child.send([window], [_states(job, 4, processes=True)])))
            n += 1
            self._stop.wait(self.every_s)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def between(self, start: float, end: float) -> list[int]:
        return [seq for at, seq in self.seqs if start <= at <= end]


def _figures(latencies: list[float]) -> dict[str, float | int | None]:
    if not latencies:
        return {"n": 0, "median_ms": None, "p90_ms": None, "max_ms": None}
    ordered = sorted(latencies)
    return {"n": len(ordered), "median_ms": round(statistics.median(ordered), 2),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 2), "max_ms": round(ordered[-1], 2)}


@contextmanager
def _slow_commits(hold_s: float) -> Iterator[None]:
    """Every Store.save first holds the writer (the store's lock and SQLite's write lock) for `hold_s`."""
    original = Store.save

    def save(self: Any, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                time.sleep(hold_s)
            finally:
                self._db.execute("COMMIT")
        return original(self, *args, **kwargs)

    Store.save = save  # type: ignore[method-assign]  # the injected slow disk, undone below
    try:
        yield
    finally:
        Store.save = original  # type: ignore[method-assign]  # the real save put back


def _root(db: Path, durability: str) -> RootServer:
    root = RootServer(RootConfig(db=db, node_id="root", api=None, durability=durability, deadline_floor_s=1.0,
                                 flush_interval_s=0.02))
    root.start()
    return root


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.01)


def slow_commit(directory: Path, seconds: float, hold_ms: float, busy_windows: int, durability: str
                ) -> dict[str, Any]:
    with _slow_commits(hold_ms / 1e3):
        root = _root(directory / "slow.db", durability)
        busy, probe = Child(root.address, "busy"), Probe(root.address)
        summary = _summary(4).to_proto()
        try:
            probe.start()
            start = time.perf_counter()
            step = 0
            while time.perf_counter() - start < seconds:
                busy.send([forward_pb2.WindowSummary(key=Key("busy", f"m{i}", step).to_proto(), summary=summary,
                                                     expected=4) for i in range(busy_windows)],
                          [_states("busy", 4, processes=False)])
                step += 1
                time.sleep(0.02)
            end = time.perf_counter()
            probe.stop()
            _wait(lambda: all(s in probe.child.received for _, s in probe.seqs), 60, "the probe's last acks")
            commits = root.finaliser.write_failures
            return {"probe_received": _figures(probe.child.latencies_ms(probe.between(start, end))),
                    "busy_received": _figures(busy.latencies_ms()), "busy_units": step, "seconds": round(end - start, 2),
                    "write_failures": commits}
        finally:
            probe.child.close()
            busy.close()
            root.stop(0)


def _build_store(path: Path, windows: int) -> None:
    """`windows` persisted windows of RESEND_JOB (100 metrics x steps), built once and kept."""
    done = path.with_suffix(".done")
    if done.exists() and path.exists():
        return
    for leftover in path.parent.glob(path.name + "*"):
        leftover.unlink()
    store = Store(path)
    summary = _summary(RESEND_RANKS)
    stamp = time.time_ns()
    rows = [Row(Key(RESEND_JOB, f"m{i % 100}", i // 100), RESEND_RANKS, summary, 0, stamp) for i in range(windows)]
    for at in range(0, windows, 5000):
        store.save(rows[at:at + 5000], {RESEND_JOB: RESEND_RANKS})
    store.close()
    done.write_text(str(windows))


def restart(directory: Path, cache: Path, windows: int, durability: str, resenders: int = 1) -> dict[str, Any]:
    cache.mkdir(parents=True, exist_ok=True)
    built = cache / f"restart-{windows}.db"
    started = time.perf_counter()
    _build_store(built, windows)
    build_s = time.perf_counter() - started
    db = directory / "restart.db"
    shutil.copyfile(built, db)
    root = _root(db, durability)
    children = [Child(root.address, f"resender{n}") for n in range(resenders)]
    probe = Probe(root.address)
    summary = _summary(RESEND_RANKS).to_proto()
    # each resender holds its share of the metrics (a rack's), resent in units of RESEND_UNIT windows
    shares = [[i for i in range(windows) if i % 100 % resenders == n] for n in range(resenders)]
    units = [[[forward_pb2.WindowSummary(key=Key(RESEND_JOB, f"m{i % 100}", i // 100).to_proto(), summary=summary,
                                         expected=RESEND_RANKS) for i in share[at:at + RESEND_UNIT]]
              for at in range(0, len(share), RESEND_UNIT)] for share in shares]
    states = [_states(RESEND_JOB, RESEND_RANKS, processes=False)]
    try:
        probe.start()
        time.sleep(0.5)  # the probe's own baseline first
        start = time.perf_counter()
        seqs = [[child.send(unit, states) for unit in mine] for child, mine in zip(children, units)]
        _wait(lambda: all(s in child.durable for child, mine in zip(children, seqs) for s in mine), 600,
              "every resent unit durable")
        end = time.perf_counter()
        probe.stop()
        _wait(lambda: all(s in probe.child.received for _, s in probe.seqs), 60, "the probe's last acks")
        duplicates = root.node.counters["duplicates"]
        last = max(child.received[s] for child, mine in zip(children, seqs) for s in mine)
        return {"windows": windows, "resenders": resenders, "units": sum(len(mine) for mine in units),
                "resend_durable_s": round(end - start, 3), "resend_received_last_s": round(last - start, 3),
                "duplicates": duplicates, "all_duplicates": duplicates == windows,
                "probe_received_during": _figures(probe.child.latencies_ms(probe.between(start, end))),
                "store_build_s": round(build_s, 2)}
    finally:
        probe.child.close()
        for child in children:
            child.close()
        root.stop(0)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=6.0, help="length of the slow-commit scenario")
    p.add_argument("--hold-ms", type=float, default=200.0, help="how long each commit holds the writer first")
    p.add_argument("--busy-windows", type=int, default=50, help="windows per busy unit (every 20 ms)")
    p.add_argument("--windows", type=int, default=100_000, help="windows persisted and resent after the restart")
    p.add_argument("--resenders", type=int, default=1, help="children resending the windows after the restart, "
                   "each its share of the metrics, all at once (racks after a root restart)")
    p.add_argument("--durability", default="process", choices=["process", "power"])
    p.add_argument("--skip", choices=["slow", "restart"], action="append", default=[])
    p.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "store_reads_cache",
                   help="where the restart scenario's store is built once and kept")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args()
    result: dict[str, Any] = {"machine": machine_facts(), "args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory() as tmp:
        if "slow" not in args.skip:
            result["slow_commit"] = slow_commit(Path(tmp), args.seconds, args.hold_ms, args.busy_windows,
                                                args.durability)
            print("slow commit:", json.dumps(result["slow_commit"]))
        if "restart" not in args.skip:
            result["restart"] = restart(Path(tmp), args.cache, args.windows, args.durability, args.resenders)
            print("restart:", json.dumps(result["restart"]))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "store_reads.json").write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
