"""The root's store reads on /metrics (issue 27 item 2, collectors/root/reads.py): how often the intake had to wait
for the store, how much it read, and whether reads fail.

One small collector (the prometheus_client model: `collect` and `describe`, registered on `RootMetrics.registry` by
`RootServer`), reading `StoreReads`' counters each scrape.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from collectors.root.reads import StoreReads

PARKED = ("telemetry_store_reads_parked_units", "Units from children that waited for a read of the root's store (a "
          "window it no longer held in memory, a job's run claims) before they were taken in.")
WAITING = ("telemetry_store_reads_waiting_units", "Units waiting for a read of the root's store now.")
WINDOWS = ("telemetry_store_reads_windows", "Windows read back from the root's store for the intake (each a resend "
           "after a restart or a window forgotten for the budget).")
FAILURES = ("telemetry_store_read_failures", "Batches of the intake's store reads that failed (each retried; the units "
            "waiting meanwhile are not acknowledged).")


class StoreReadsMetrics(Collector):
    def __init__(self, reads: StoreReads) -> None:
        self.reads = reads

    def describe(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        return [CounterMetricFamily(*PARKED), GaugeMetricFamily(*WAITING), CounterMetricFamily(*WINDOWS),
                CounterMetricFamily(*FAILURES)]

    def collect(self) -> Iterable[CounterMetricFamily | GaugeMetricFamily]:
        reads = self.reads
        parked, windows, failures = CounterMetricFamily(*PARKED), CounterMetricFamily(*WINDOWS), CounterMetricFamily(
            *FAILURES)
        waiting = GaugeMetricFamily(*WAITING)
        parked.add_metric([], reads.parked)
        waiting.add_metric([], reads.waiting())
        windows.add_metric([], reads.windows_read)
        failures.add_metric([], reads.read_failures)
        return [parked, waiting, windows, failures]
