"""What the agent holds before sealing: each rank's values per (job, step, metric), and heartbeats per second.

A rank closes step s when it says so or moves past it; the agent seals a
step when every local rank that is not dead has closed it, or when the
step's deadline passes (DESIGN §4). Sealed values become one part per rank
in the node's window table, held there until durable at the root.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from pyroaring import BitMap

from collectors.common.keys import Key, bucket_of
from collectors.delivery.windows import Origin, Part, RawValues

HEARTBEAT_WIDTH_MS = 1000
HEARTBEAT_GRACE_S = 0.5


@dataclass
class RankValues:
    values: list[float] = field(default_factory=list)
    origins: list[Origin] = field(default_factory=list)
    first_ns: int = 0
    last_ns: int = 0


@dataclass
class OpenStep:
    job: str
    step: int
    world_size: int
    deadline: float
    metrics: dict[str, dict[int, RankValues]] = field(default_factory=dict)
    closed: BitMap = field(default_factory=BitMap)

    def parts(self) -> list[tuple[Part, int]]:
        """One part per metric holding every local rank's values (split per rank only if ever needed)."""
        out = []
        for metric, by_rank in self.metrics.items():
            values: list[float] = []
            sources: list[int] = []
            origins: list[Origin] = []
            for rank, rv in by_rank.items():
                values.extend(rv.values)
                sources.extend([rank] * len(rv.values))
                origins.extend(rv.origins)
            raw = RawValues(np.array(values, dtype=np.float64), np.array(sources, dtype=np.int64),
                            min(rv.first_ns for rv in by_rank.values()), max(rv.last_ns for rv in by_rank.values()),
                            {rank: rv.origins for rank, rv in by_rank.items()})
            out.append((Part(Key(self.job, metric, self.step), origins, BitMap(by_rank), raw=raw), self.world_size))
        return out


@dataclass
class OpenBeat:
    key: Key
    world_size: int
    values: dict[int, tuple[float, int]] = field(default_factory=dict)  # rank -> (value, time ns); last wins

    def parts(self) -> list[tuple[Part, int]]:
        ranks = list(self.values)
        times = [t for _, t in self.values.values()]
        raw = RawValues(np.array([v for v, _ in self.values.values()], dtype=np.float64),
                        np.array(ranks, dtype=np.int64), min(times), max(times), {rank: [] for rank in ranks})
        return [(Part(self.key, [], BitMap(ranks), raw=raw), self.world_size)]

    @property
    def due_ns(self) -> int:
        """When this second's beats go on: its end and a grace for beats on their way."""
        return (self.key.index + self.key.width_ms) * 1_000_000 + int(HEARTBEAT_GRACE_S * 1e9)

    def due(self, now_ns: int) -> bool:
        return now_ns >= self.due_ns


def beat_key(job: str, metric: str, time_ns: int) -> Key:
    return Key(job, metric, bucket_of(time_ns, HEARTBEAT_WIDTH_MS), HEARTBEAT_WIDTH_MS)
