"""How many values per second one node agent ingests from 8 rank streams.

Real processes: a root (`telemetry collector`) and one agent (`telemetry
agent`), on loopback / a Unix socket. The bench process plays 8 ranks with
raw gRPC streams of pre-serialised batches (so the bench's own Python cost
is not what is measured), in two shapes:

- `scalar`: 20 metrics x 1 value per rank per step (one loss, one step
  time...): cost is per window.
- `microbatch`: 20 metrics x 32 values per rank per step (per-micro-batch
  figures): cost is per value.

Figures: `ingest_values_per_s` (all values sent / time until the agent had
acknowledged every batch RECEIVED), `durable_values_per_s` (until every
batch was DURABLE at the root: sealed, forwarded, persisted), and the
agent's CPU seconds (from /proc) per million values.

    python bench/agent_ingest.py [--steps N] [--json PATH]
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import grpc

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from harness import write_json
from machine import REPO, cpu_model
from procstat import cpu_seconds

sys.path.insert(0, str(REPO))  # the checkout: when run as a script only bench/ is on sys.path

from collectors.sim.procs import Proc, free_port, python_module
from telemetry.v1 import ingest_pb2, ingest_pb2_grpc

RANKS = 8
METRICS = [f"metric_{i:02d}" for i in range(20)]


def build_batches(rank: int, steps: int, values_per_metric: int, steps_per_batch: int) -> list[ingest_pb2.RankMessage]:
    messages = [ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(
        job="bench", rank=rank, world_size=RANKS, local_rank=rank, host="bench", pid=os.getpid()))]
    seq = 0
    for first in range(1, steps + 1, steps_per_batch):
        seq += 1
        batch = ingest_pb2.RankBatch(job="bench", rank=rank, seq=seq)
        for step in range(first, min(steps + 1, first + steps_per_batch)):
            sb = batch.steps.add(step=step, closed=True, end_time_ns=time.time_ns())
            for m, name in enumerate(METRICS):
                sb.metrics.add(metric=name, values=[0.001 * (step + m + rank + k) for k in range(values_per_metric)])
        messages.append(ingest_pb2.RankMessage(batch=batch))
    return messages


def drive(socket_path: Path, messages: list[ingest_pb2.RankMessage], last_seq: int,
          received: threading.Event, durable: threading.Event) -> None:
    channel = grpc.insecure_channel(f"unix:{socket_path}")
    stub = ingest_pb2_grpc.AgentStub(channel)
    done = queue.Queue()

    def requests() -> Iterator[ingest_pb2.RankMessage]:
        yield from messages
        done.get()  # keep the stream open until every batch is durable

    for ack in stub.Stream(requests()):
        if ack.status == ingest_pb2.RankAck.RECEIVED and ack.seq == last_seq:
            received.set()
        if ack.status == ingest_pb2.RankAck.DURABLE and ack.seq == last_seq:
            durable.set()
            done.put(None)
            break
    channel.close()


def run_shape(name: str, steps: int, values_per_metric: int, steps_per_batch: int, workdir: Path) -> dict:
    logs = workdir / name
    logs.mkdir()
    root = Proc("root", python_module("collectors.cli", "collector", "--listen", f"127.0.0.1:{free_port()}",
                                      "--db", str(logs / "root.db"), "--api", f"127.0.0.1:{free_port()}"), logs).start()
    sock = logs / "agent.sock"
    agent = Proc("agent", python_module("collectors.cli", "agent", "--socket", str(sock),
                                        "--parent", root.ready["address"]), logs).start()
    try:
        per_rank = [build_batches(r, steps, values_per_metric, steps_per_batch) for r in range(RANKS)]
        total_values = RANKS * steps * len(METRICS) * values_per_metric
        last_seq = len(per_rank[0]) - 1
        received = [threading.Event() for _ in range(RANKS)]
        durable = [threading.Event() for _ in range(RANKS)]
        assert agent.popen is not None  # started above
        cpu0 = cpu_seconds(agent.popen.pid)
        start = time.perf_counter()
        threads = [threading.Thread(target=drive, args=(sock, per_rank[r], last_seq, received[r], durable[r]),
                                    daemon=True) for r in range(RANKS)]
        for t in threads:
            t.start()
        for e in received:
            e.wait(600)
        t_received = time.perf_counter() - start
        cpu_received = cpu_seconds(agent.popen.pid) - cpu0
        for e in durable:
            e.wait(600)
        t_durable = time.perf_counter() - start
        cpu_durable = cpu_seconds(agent.popen.pid) - cpu0
        for t in threads:
            t.join(10)
        return {
            "shape": name, "ranks": RANKS, "steps": steps, "metrics": len(METRICS),
            "values_per_metric_per_step": values_per_metric, "steps_per_batch": steps_per_batch,
            "values": total_values, "all_received": all(e.is_set() for e in received),
            "all_durable": all(e.is_set() for e in durable),
            "ingest_s": round(t_received, 3), "ingest_values_per_s": round(total_values / t_received),
            "durable_s": round(t_durable, 3), "durable_values_per_s": round(total_values / t_durable),
            "agent_cpu_s_to_received": round(cpu_received, 3), "agent_cpu_s_to_durable": round(cpu_durable, 3),
            "agent_cpu_s_per_million_values": round(cpu_durable / total_values * 1e6, 3),
        }
    finally:
        agent.stop()
        root.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=2000, help="steps per rank (scalar shape; microbatch uses 1/8)")
    parser.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "agent_ingest.json")
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, steps, per_metric, per_batch in (("scalar", args.steps, 1, 25),
                                                   ("microbatch", max(1, args.steps // 8), 32, 4)):
            print(f"running {name}: 8 ranks x {steps} steps x 20 metrics x {per_metric} values ...", flush=True)
            result = run_shape(name, steps, per_metric, per_batch, Path(tmp))
            results.append(result)
            print(f"  ingest {result['ingest_values_per_s']:,} values/s; durable at root "
                  f"{result['durable_values_per_s']:,} values/s; agent CPU "
                  f"{result['agent_cpu_s_per_million_values']} s per million values", flush=True)
    out = {"benchmark": "agent_ingest", "target_values_per_s": 200_000, "machine": {
        "nproc": os.cpu_count(), "python": platform.python_version(), "cpu": cpu_model()}, "results": results}
    write_json(args.json, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
