"""What one simulated host's second costs bench/fleet.py's simulator, by stage, in one process and one thread.

    python bench/host_cost.py                  # 64 hosts, 30 rounds (about 10 s)
    python bench/ab.py --base REV --rounds 4 -- $PWD/bench/host_cost.py --out {out}   # a change, as a ratio

Each host is the agent's real hardware path, as in `bench/fleet.py --sim` and `telemetry agent`: its own generated
sysfs tree (collectors/sim/sysfs.py, 2 NICs and 8 IB ports: a TEST DOUBLE of /sys) read by the real NicProbe, the
real HardwareSampler bucketing the readings into the fleet's 1 s windows, and its own Node and Upstream. What is
not here is gRPC: the outbox is a stand-in that numbers each unit, serialises it as the channel would, and
acknowledges it DURABLE after the round (the real Upstream._on_ack), so the figures are the Python work of a
host-second without the stream's (bench/fleet.py measures that, with `sim_cpu_ms_per_host_sample`).

Per host and second (thread CPU, `time.thread_time`), the means over the rounds after the warm-up (`--warmup`, by
default past the nodes' `retain_s`: the ramp while their tables of durable windows fill is no host's steady second):
`sample_ms` (HardwareSampler.sample_once: the probe, bucketing ~134 readings, offering ~25 windows), of which
`probe_ms` (NicProbe.sample alone, measured in a separate pass of the same rounds' length), `flush_ms` (Node.flush:
taking, merging and encoding the windows into one unit), `wire_ms` (the unit serialised), `ack_ms` (its
acknowledgement handled), and `total_ms` (sample + flush + wire + ack); `gc_ms`, the garbage collector's share of
the total (its collections' thread CPU, run inside those stages), with `gc_collections` per generation.
"""

from __future__ import annotations

import gc
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.append(str(Path(__file__).resolve().parent.parent))  # after PYTHONPATH: bench/ab.py puts its tree first

from harness import apply_quick, failure, parser, run_in_workdir, write_result

NAME = "host_cost"
QUICK = {"hosts": 16, "rounds": 10, "warmup": 2}
RETAIN_S = 30.0  # how long a node keeps a durable window, as in bench/fleet.py's simulator


class _Outbox:
    """The outbox's part Upstream uses: units numbered and kept until the round's end acknowledges them."""

    def __init__(self, on_ack: Any) -> None:
        self.on_ack, self.units, self.seq = on_ack, [], 0
        self.resent, self.on_drop, self.connections = 0, None, 1

    def submit(self, message: Any, payload: object, nbytes: int | None = None) -> Any:
        from collectors.delivery.outbox import Unit
        self.seq += 1
        message.sender_id, message.seq = "host", self.seq
        unit = Unit(self.seq, message, payload, nbytes or 0)
        self.units.append(unit)
        return unit

    def forget(self, seq: int) -> None:
        """Nothing kept past the acknowledgement."""


def run(work: Path, hosts: int, rounds: int, warmup: int) -> dict[str, Any]:
    """The hosts' trees on /dev/shm where there is one, removed after, whatever happens (tmpfs is memory)."""
    sysfs = Path(tempfile.mkdtemp(prefix="host-cost-", dir="/dev/shm" if Path("/dev/shm").is_dir() else work))
    try:
        return measure(sysfs, hosts, rounds, warmup)
    finally:
        shutil.rmtree(sysfs, ignore_errors=True)


def measure(sysfs: Path, hosts: int, rounds: int, warmup: int = int(RETAIN_S) + 2) -> dict[str, Any]:
    from collectors.agent.hardware import HardwareSampler
    from collectors.agent.ranks import RankRegistry
    from collectors.common.gctune import tune_gc
    from collectors.delivery.node import Node, Upstream
    from collectors.delivery.windows import Deadlines
    from collectors.probes import NicProbe
    from collectors.sim.sysfs import write_host
    from telemetry.v1 import forward_pb2

    tune_gc()  # as `telemetry agent` and the simulator do
    sims = []
    for i in range(hosts):
        write_host(sysfs / f"h{i}", nics=2, hcas=8)
        node = Node(f"agent-host-{i:05d}", Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None, retain_s=RETAIN_S)
        node.complete = lambda win: True
        upstream = Upstream(node, _Outbox)
        node.sink = upstream
        registry = RankRegistry()
        sampler = HardwareSampler(node, registry, host_id=f"host-{i:05d}", nic=NicProbe(sysfs / f"h{i}"),
                                  host_index=i)
        sims.append((node, upstream, registry, sampler))
    stages: dict[str, list[float]] = {"sample_ms": [], "flush_ms": [], "wire_ms": [], "ack_ms": []}
    collections, gc_s, gc_started = [0, 0, 0], [0.0], [0.0]

    def on_gc(phase: str, info: dict[str, int]) -> None:  # the collector's thread CPU, measured rounds only
        if phase == "start":
            gc_started[0] = time.thread_time()
        elif measuring[0]:
            collections[info["generation"]] += 1
            gc_s[0] += time.thread_time() - gc_started[0]

    measuring = [False]
    gc.callbacks.append(on_gc)
    durable = forward_pb2.Ack.DURABLE
    first_ns = (time.time_ns() // 1_000_000_000) * 1_000_000_000 + 700_000_000
    for r in range(rounds + warmup):
        measuring[0] = r >= warmup
        at_ns = first_ns + r * 1_000_000_000
        spent = dict.fromkeys(stages, 0.0)
        for node, _, registry, sampler in sims:
            t0 = time.thread_time()
            sampler.sample_once(now_ns=at_ns, next_wall_ns=at_ns + 1_000_000_000)
            if registry.changed:
                with node.lock:
                    node.own_ranks = registry.views()
                    registry.changed = False
            t1 = time.thread_time()
            node.flush()
            spent["sample_ms"] += t1 - t0
            spent["flush_ms"] += time.thread_time() - t1
        t0 = time.thread_time()
        for _, upstream, _, _ in sims:
            for unit in upstream.outbox.units:
                unit.message.SerializeToString()
        t1 = time.thread_time()
        for _, upstream, _, _ in sims:
            units, upstream.outbox.units = upstream.outbox.units, []
            for unit in units:
                upstream._on_ack(unit, forward_pb2.Ack(seq=unit.seq, status=durable))
        spent["wire_ms"] += t1 - t0
        spent["ack_ms"] += time.thread_time() - t1
        if r >= warmup:
            for name, value in spent.items():
                stages[name].append(1000 * value / hosts)
    measuring[0] = False
    gc.callbacks.remove(on_gc)
    probe = []
    for _ in range(rounds):
        t0 = time.thread_time()
        for _, _, _, sampler in sims:
            assert sampler.nic is not None
            sampler.nic.sample()
        probe.append(1000 * (time.thread_time() - t0) / hosts)
    result: dict[str, Any] = {name: round(statistics.fmean(values), 4) for name, values in stages.items()}
    result["probe_ms"] = round(statistics.fmean(probe), 4)
    result["total_ms"] = round(sum(result[name] for name in stages), 4)
    result["gc_ms"] = round(1000 * gc_s[0] / (hosts * rounds), 4)
    result["gc_collections"] = collections
    result["windows_per_host_second"] = round(sims[0][3].stats.offered_windows / (rounds + warmup), 1)
    result["readings_per_host_second"] = round(sims[0][3].stats.readings / (rounds + warmup), 1)
    return result


def main(argv: list[str]) -> int:
    p = parser(__doc__, NAME, QUICK)
    p.add_argument("--hosts", type=int, default=64, help="simulated hosts, sampled in turn each round")
    p.add_argument("--rounds", type=int, default=30, help="seconds simulated (rounds), after the warm-up")
    p.add_argument("--warmup", type=int, default=int(RETAIN_S) + 2,
                   help="rounds before the measured ones (default: past the node's retain_s, so that its table of "
                        "durable windows is full and drops one second's windows as it takes one: the steady state)")
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    if args.hosts < 1 or args.rounds < 1 or args.warmup < 0:
        p.error("--hosts and --rounds must be at least 1, --warmup at least 0")

    def one(work: Path) -> dict[str, Any]:
        result: dict[str, Any] = {"complete": False, "hosts": args.hosts, "rounds": args.rounds, "warmup": args.warmup}
        try:
            result.update(run(work, args.hosts, args.rounds, args.warmup))
            result["complete"] = True
        except (Exception, KeyboardInterrupt) as exc:
            result["error"] = failure(exc)
        return result

    result = run_in_workdir(NAME, None, one)
    return write_result(args.out, NAME, result, "the host cost bench",
                        lambda r: print(", ".join(f"{k} {r[k]}" for k in ("sample_ms", "probe_ms", "flush_ms",
                                                                           "wire_ms", "ack_ms", "total_ms",
                                                                           "gc_ms"))))


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
