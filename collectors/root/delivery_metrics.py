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
CUT = ("telemetry_reply_streams_cut", "Child streams the root cut because the child read none of its last "
       "MAX_ANSWERS acknowledgements (the child reconnects and resends what is not durable).")


class DeliveryMetrics(Collector):
    """Reads two counters each scrape: the node's `Durability.unheld_releases`, the server's `answers_cut`."""

    def __init__(self, unheld_releases: Callable[[], int], streams_cut: Callable[[], int]) -> None:
        self.unheld_releases = unheld_releases
        self.streams_cut = streams_cut

    def describe(self) -> Iterable[CounterMetricFamily]:
        return [CounterMetricFamily(*UNHELD), CounterMetricFamily(*CUT)]

    def collect(self) -> Iterable[CounterMetricFamily]:
        unheld = CounterMetricFamily(*UNHELD)
        unheld.add_metric([], self.unheld_releases())
        cut = CounterMetricFamily(*CUT)
        cut.add_metric([], self.streams_cut())
        return [unheld, cut]
