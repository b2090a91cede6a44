"""The root's Prometheus exposition (`/metrics`): the panels' figures per job, events, delivery, hardware.

One `CollectorRegistry` per root (never the process-global one). `RootMetrics` keeps what the families need of
each job between scrapes (`JobFigures`, fed with the finalised rows: no database read per scrape) and registers
one small collector per concern on the registry (collectors/root/exposition.py: step figures, stragglers, ranks,
hardware, events, the tree's delivery counters, detector errors, the store); the root adds its other collectors
(goodput, forensics, rank exits, its own delivery bookkeeping, fleet and store lifecycle, remote write) to the same
registry.

Every name and its meaning: docs/metrics.md. Prometheus must scrape this with `honor_labels: true`,
or its own `job` target label renames ours to `exported_job` (docs/metrics.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from collectors.common.rows import Row
from collectors.detectors.events import EventLog
from collectors.root.exposition import (
    DetectorErrors,
    Events,
    Hardware,
    Ranks,
    StepFigures,
    StoreStatus,
    Stragglers,
    TreeDelivery,
)
from collectors.root.job_figures import JobFigures


class RootMetrics:
    """Feed it finalised rows (`observe`), scrape it (`render`). Thread-safe. A collaborator left None leaves its
    families out (`counters`, `detector_errors`, `store`) or empty (`events`, `liveness`)."""

    def __init__(self, events: EventLog | None = None, liveness: Callable[[str], dict] | None = None,
                 counters: Callable[[], dict[str, int]] | None = None,
                 detector_errors: Callable[[], int] | None = None,
                 store: Callable[[], dict[str, int]] | None = None,
                 jobs: Callable[[], Iterable[str]] | None = None) -> None:
        self.figures = JobFigures(jobs)
        self.registry = CollectorRegistry(auto_describe=False)
        self.collectors: list[Collector] = [  # registered on `registry`, each describing its own families
            StepFigures(self.figures), Stragglers(self.figures), Ranks(self.figures, liveness),
            Hardware(self.figures), Events(self.figures, events)]
        if counters is not None:
            self.collectors.append(TreeDelivery(counters))
        if detector_errors is not None:
            self.collectors.append(DetectorErrors(detector_errors))
        if store is not None:
            self.collectors.append(StoreStatus(store))
        for collector in self.collectors:
            self.registry.register(collector)

    def observe(self, rows: Iterable[Row]) -> None:
        self.figures.observe(rows)

    def forget(self, job: str) -> None:
        """A finished job: its series leave the exposition."""
        self.figures.forget(job)

    def render(self) -> tuple[str, bytes]:
        """(content type, body) for GET /metrics: the classic text format 0.0.4, which every Prometheus
        reads (our names never need the 1.0.0 format's escaping)."""
        with self.figures.scrape():
            return CONTENT_TYPE_PLAIN_0_0_4, generate_latest(self.registry)
