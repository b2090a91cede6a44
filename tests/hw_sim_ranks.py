"""Simulated ranks (collectors.sim.ranks) that also report GPU and NIC readings, for the Prometheus test.

No GPU here: each rank's heartbeat carries the readings an agent's NVML probe would put in the job's
windows for the GPU that rank uses (docs/hardware.md names: gauges, and counters as `_delta`), through
the SDK's `heartbeat_extras`. Same windows, same sources (the rank) as the agent's hardware sampler.
`--hot-rank R --hot-after S`: rank R's GPU runs at 95 C from S seconds after its first heartbeat on.

    python tests/hw_sim_ranks.py --hot-rank 5 --hot-after 4 <collectors.sim.ranks arguments>
"""

from __future__ import annotations

import random
import sys
import time

import telemetry
from collectors.sim import ranks as sim_ranks


def readings(rank: int, started: float, hot_rank: int, hot_after: float) -> dict[str, float]:
    rng = random.Random()
    hot = rank == hot_rank and time.time() - started >= hot_after
    return {
        "gpu.temperature_celsius": 95.0 if hot else 55.0 + rank % 8 + rng.random(),
        "gpu.power_watts": 300.0 + rng.random() * 20,
        "gpu.sm_clock_mhz": 1410.0 if not hot else 1100.0,
        "gpu.throttle_thermal": 1.0 if hot else 0.0,
        "gpu.throttle_power": 0.0,
        "gpu.ecc_corrected_delta": 0.0,
        "gpu.ecc_uncorrected_delta": 0.0,
        "gpu.xid_errors_delta": 0.0,
        "gpu.pcie_replay_delta": 0.0,
        "gpu.nvlink_crc_flit_errors_delta": 0.0,
        "gpu.remapped_rows_uncorrectable_delta": 0.0,
        "nic.rx_errors_delta": 0.0,
    }


def main(argv: list[str]) -> int:
    hot_rank, hot_after = -1, 0.0
    if "--hot-rank" in argv:
        i = argv.index("--hot-rank")
        hot_rank = int(argv[i + 1])
        del argv[i:i + 2]
    if "--hot-after" in argv:
        i = argv.index("--hot-after")
        hot_after = float(argv[i + 1])
        del argv[i:i + 2]
    original = telemetry.init

    def init(*args, **kwargs):
        run = original(*args, **kwargs)
        started = time.time()
        rank = kwargs.get("rank", 0)
        run.heartbeat_extras.append(lambda: readings(rank, started, hot_rank, hot_after))
        return run

    telemetry.init = init  # collectors.sim.ranks calls telemetry.init(...) at run time
    return sim_ranks.main(argv)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
