"""A tier's parent, stubbed: what `Upstream` needs of its `Outbox` (collectors/delivery/outbox.py) for a node driven
by hand without gRPC (tests/test_native_windows.py, test_delivery_bounds.py, test_delivery_scale_fixes.py,
bench/rack_tables.py). The driver answers the units itself (`Upstream._on_ack`, `_on_drop`), if at all."""

from __future__ import annotations

from collectors.delivery.outbox import Unit
from telemetry.v1 import forward_pb2


class StubOutbox:
    """Keeps each unit submitted, numbered as the real outbox numbers them, until it is forgotten (acknowledged
    DURABLE, as `Upstream._on_ack` forgets it, or dropped by the driver)."""

    def __init__(self) -> None:
        self.units: list[Unit] = []
        self.seq = 0
        self.resent = 0
        self.connections = 1
        self.on_drop = None

    def submit(self, message: forward_pb2.SummaryBatch, payload: object, nbytes: int | None = None) -> Unit:
        self.seq += 1
        self.units.append(Unit(self.seq, message, payload, nbytes or 0))
        return self.units[-1]

    def forget(self, seq: int) -> None:
        self.units = [unit for unit in self.units if unit.seq != seq]
