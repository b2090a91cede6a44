"""What a real idle agent costs its host: `telemetry agent` processes on generated sysfs trees, no ranks.

    python bench/agent_cost.py                        # 4 agents, 30 s measured after 8 s
    python bench/agent_cost.py --agents 8 --seconds 60
    python bench/ab.py --base REV --rounds 3 -- /ABS/PATH/bench/agent_cost.py --out {out}   # A/B, one machine

Each agent is the real process (`python -m collectors.cli agent`, run from the current directory, so that an A/B run
in another tree measures that tree's agent) with the fleet layout (`--host-index N`), its NIC probe on its own
generated sysfs tree (2 NICs, 8 IB ports: collectors/sim/sysfs.py, a TEST DOUBLE of /sys), no GPU probe (no GPU
here) and no ranks, under one real root. Measured: each agent's CPU seconds per second over --seconds
(/proc/PID/stat, every thread; 10 ms ticks, so the figure is an average over the agents), and the root's. What a
host pays for the agent when no job runs on it: its 1 Hz sampling, its flush loop, its unit to the parent, gRPC.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import BenchError, apply_quick, failure, parser, run_in_workdir, write_result
from procstat import cpu_seconds

NAME = "agent_cost"
QUICK = {"agents": 2, "seconds": 10.0, "warmup": 4.0}


def run(work: Path, args: Any) -> dict[str, Any]:
    from collectors.sim.procs import Proc, free_port, python_module, stop_process
    from collectors.sim.sysfs import write_host

    result: dict[str, Any] = {"complete": False, "agents": args.agents, "seconds": args.seconds,
                              "code": os.getcwd(), "machine_cpus": os.cpu_count()}
    procs: list[Proc] = []
    try:
        root = Proc("root", python_module("collectors.cli", "collector", "--listen", "127.0.0.1:0", "--db",
                                          str(work / "root.db"), "--api", f"127.0.0.1:{free_port()}"), work).start()
        procs.append(root)
        agents = []
        for i in range(args.agents):
            write_host(work / f"h{i}", nics=2, hcas=8)
            agents.append(Proc(f"agent{i}", python_module(
                "collectors.cli", "agent", "--socket", str(work / f"a{i}.sock"), "--parent", root.ready["address"],
                "--no-gpu-probe", "--sysfs-root", str(work / f"h{i}"), "--host-id", f"bench-{i}", "--host-index",
                str(i)), work).start())
            procs.append(agents[-1])
        time.sleep(args.warmup)
        pids = [a.popen.pid for a in agents]
        before = [cpu_seconds(pid) for pid in pids]
        root0, started = cpu_seconds(root.popen.pid), time.monotonic()
        time.sleep(args.seconds)
        wall = time.monotonic() - started
        each = [(cpu_seconds(pid) - b) / wall * 1000 for pid, b in zip(pids, before)]
        result.update({
            "agent_cpu_ms_per_s": round(statistics.mean(each), 2),
            "agent_cpu_ms_per_s_each": [round(v, 2) for v in each],
            "root_cpu_ms_per_s": round((cpu_seconds(root.popen.pid) - root0) / wall * 1000, 2),
            "load_average": round(os.getloadavg()[0], 1), "complete": True})
        for proc in procs:
            if not proc.alive():
                raise BenchError(f"{proc.name} exited during the run")
    except (Exception, KeyboardInterrupt) as exc:
        result["error"] = failure(exc)
    finally:
        for proc in reversed(procs):
            if proc.popen is not None:
                stop_process(proc.popen)
    return result


def report(result: dict[str, Any]) -> None:
    print(f"{result['agents']} idle agents: {result['agent_cpu_ms_per_s']} ms CPU per second each "
          f"({result['agent_cpu_ms_per_s_each']}); root {result['root_cpu_ms_per_s']} ms/s; load "
          f"{result['load_average']}")


def main(argv: list[str]) -> int:
    p = parser(__doc__, NAME, QUICK)
    p.add_argument("--agents", type=int, default=4)
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds")
    p.add_argument("--warmup", type=float, default=8.0)
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    result = run_in_workdir(NAME, args.workdir, lambda work: run(work, args))
    return write_result(args.out, NAME, result, "the agent cost bench", report)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
