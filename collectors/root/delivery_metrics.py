"""The root's own delivery bookkeeping on /metrics (issue 27): what its bounds cut and what its invariants caught.

One small collector (the prometheus_client model: `collect` and `describe`, registered on `RootMetrics.registry`
by `RootServer`); the subtree's delivery counters (`telemetry_delivery_*`) are `RootMetrics`'.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

UNHELD = ("telemetry_delivery_unheld_releases", "Durability releases of a unit not held at the root (a double "
          "release: a bookkeeping error, logged; never acknowledged a second time).")
SINKS = ("telemetry_event_sink_events", "Events handed to each event sink (webhook, Grafana), by outcome: sent, "
         "failed (the endpoint refused or did not answer), dropped (its queue was full, or still queued when the root "
         "stopped).", ["sink", "outcome"])
CUT = ("telemetry_reply_streams_cut", "Child streams the root cut because the child read none of its last "
       "MAX_ANSWERS acknowledgements (the child reconnects and resends what is not durable).")


class DeliveryMetrics(Collector):
    """Reads, each scrape: the node's `Durability.unheld_releases`, the server's `answers_cut`, and each event
    sink's counts (`EventLog.sink_counts`: sink, sent, failed, dropped)."""

    def __init__(self, unheld_releases: Callable[[], int], streams_cut: Callable[[], int],
                 sinks: Callable[[], list[tuple[str, int, int, int]]] = list) -> None:
        self.unheld_releases = unheld_releases
        self.streams_cut = streams_cut
        self.sinks = sinks

    def describe(self) -> Iterable[CounterMetricFamily]:
        return [CounterMetricFamily(*UNHELD), CounterMetricFamily(*CUT),
                CounterMetricFamily(SINKS[0], SINKS[1], labels=SINKS[2])]

    def collect(self) -> Iterable[CounterMetricFamily]:
        unheld = CounterMetricFamily(*UNHELD)
        unheld.add_metric([], self.unheld_releases())
        cut = CounterMetricFamily(*CUT)
        cut.add_metric([], self.streams_cut())
        sinks = CounterMetricFamily(SINKS[0], SINKS[1], labels=SINKS[2])
        for name, sent, failed, dropped in self.sinks():
            for outcome, count in (("sent", sent), ("failed", failed), ("dropped", dropped)):
                sinks.add_metric([name, outcome], count)
        return [unheld, cut, sinks]
