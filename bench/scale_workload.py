"""What the simulated ranks of bench/scale.py send: 20 metrics of one value per rank per step, seeded.

The number of metrics is TELEMETRY_SCALE_METRICS (default 20), read at import in every process of a run:
bench/scale.py --metrics N sets it for the run it starts (issue 29: per-layer metrics, a few hundred per rank).
"""

from __future__ import annotations

import functools
import os

import numpy as np

JOB = "scale"
N_METRICS = int(os.environ.get("TELEMETRY_SCALE_METRICS", "20"))
METRICS = ["step_time"] + [f"metric_{i:02d}" for i in range(1, N_METRICS)]
# Every tier's per-job metric budget (256 by default) must admit them all.
MAX_METRICS_PER_JOB = max(256, N_METRICS)
RANKS_PER_NODE = 8
QS = (0.5, 0.9, 0.99, 0.999)
QNAMES = ("p50", "p90", "p99", "p99.9")


def step_values(seed: int, step: int, world: int) -> np.ndarray:
    """Every rank's value of every metric at one step: shape (metrics, world). Row 0 is step_time.

    Lognormal (sigma 1, median 0.5): the distribution the summary's error is stated for, and far
    wider than real step times, so a hard case for the sketch.
    """
    rng = np.random.default_rng([seed, step])
    return 0.5 * rng.lognormal(0.0, 1.0, size=(len(METRICS), world))


@functools.lru_cache(maxsize=1)
def _step_values_kept(seed: int, step: int, world: int) -> np.ndarray:
    """`step_values`, kept for the next call: a hosting process asks it once per agent for the same step (256
    agents at 16,384 ranks x 300 metrics drew 256 x 4.9 M lognormal values a step, minutes of CPU before step 1)."""
    values = step_values(seed, step, world)
    values.flags.writeable = False
    return values


def rank_messages(seed: int, step: int, world: int, ranks: list[int]) -> list[bytes]:
    """Each rank's step as the SDK sends it: a RankMessage of every metric, one value each. end_time_ns is left 0, so
    the agent stamps the values with their arrival time."""
    from telemetry.v1 import ingest_pb2
    values = _step_values_kept(seed, step, world)
    return [ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job=JOB, rank=r, seq=step, steps=[
        ingest_pb2.RankStepBatch(step=step, closed=True, metrics=[
            ingest_pb2.MetricValues(metric=m, values=[float(values[i, r])]) for i, m in enumerate(METRICS)])]))
        .SerializeToString() for r in ranks]
