"""The root's event sinks on /metrics (issue 27): what became of the events handed to each.

One small collector (a `Declared` of exposition.py: its family declared once, as `describe()` names it and
`collect()` fills it; registered on `RootMetrics.registry` by `RootServer`). The bounds of the delivery core (unheld
releases, cut reply streams, forensics queues, the GPU probe's events) are counted at every tier and exported with
the subtree's delivery counters (`telemetry_delivery_*`, `TreeDelivery` in exposition.py), the root's own included.
"""

from __future__ import annotations

from collections.abc import Callable

from collectors.root.exposition import Declared, Family, Spec

SINKS = Spec("telemetry_event_sink_events", "Events handed to each event sink (webhook, Grafana), by outcome: sent, "
             "failed (the endpoint refused or did not answer), dropped (its queue was full, or still queued when the "
             "root stopped).", ("sink", "outcome"), counter=True)


class DeliveryMetrics(Declared):
    """Reads each event sink's counts every scrape (`EventLog.sink_counts`: sink, sent, failed, dropped)."""

    SPECS = (SINKS,)

    def __init__(self, sinks: Callable[[], list[tuple[str, int, int, int]]] = list) -> None:
        self.sinks = sinks

    def fill(self, families: dict[str, Family]) -> None:
        sinks = families[SINKS.name]
        for name, sent, failed, dropped in self.sinks():
            for outcome, count in (("sent", sent), ("failed", failed), ("dropped", dropped)):
                sinks.add_metric([name, outcome], count)
