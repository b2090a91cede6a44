"""The store's lifecycle and the fleet's host-index collisions on /metrics (issue 28, docs/fleet.md).

One small collector (the prometheus_client model: `collect` and `describe`, registered on `RootMetrics.registry`
by `RootServer`), reading counters that live where the work is done: the retention sweep's (late data rolled up
again, or dropped past its raw retention) and the root's run ledger's (host indexes two hosts claimed, and the
fleet windows refused for it) and the root's host-index table's (indexes given back and handed to a new host).
"""

from __future__ import annotations

from collections.abc import Callable

from collectors.root.exposition import Declared, Family, Spec

REROLLED = Spec("telemetry_store_late_rerolled", "Rollups (1 min, 1 h) made again because late data reached their "
                "members after they were rolled up.", (), counter=True)
DROPPED = Spec("telemetry_store_late_dropped", "Raw 1 s (or 1 min) windows that came later than their period's raw "
               "retention: deleted, never rolled up (docs/fleet.md, Retention).", (), counter=True)
COLLISIONS = Spec("telemetry_fleet_index_collisions", "Fleet host indexes a child named for another host than the "
                  "one holding them at the root (one per child and index; docs/fleet.md, Bad input).", (),
                  counter=True)
REFUSED = Spec("telemetry_fleet_refused_windows", "Fleet windows the root refused because they held sources of a "
               "host index another host holds.", (), counter=True)
REUSED = Spec("telemetry_fleet_host_indexes_reused", "Fleet host indexes given back (their host gone past "
              "--host-index-reuse-after) and handed to a new host (docs/fleet.md, Host indexes).", (), counter=True)


class FleetStoreMetrics(Declared):
    """Reads the counters each scrape: `late()` -> (rerolled, dropped), `collisions()` -> (seen, refused windows),
    `reused()` -> host indexes given back and handed to a new host."""

    SPECS = (REROLLED, DROPPED, COLLISIONS, REFUSED, REUSED)

    def __init__(self, late: Callable[[], tuple[int, int]], collisions: Callable[[], tuple[int, int]],
                 reused: Callable[[], int] = lambda: 0) -> None:
        self.late = late
        self.collisions = collisions
        self.reused = reused

    def fill(self, families: dict[str, Family]) -> None:
        for spec, value in zip(self.SPECS, (*self.late(), *self.collisions(), self.reused())):
            families[spec.name].add_metric([], value)
