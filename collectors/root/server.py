"""The root: a collector tier with no parent that finalises, persists, detects and serves (DESIGN §6).

    root = RootServer(RootConfig(db=Path("root.db"), api="127.0.0.1:7600", detectors=DetectorsConfig()))
    root.start()   # gRPC (children), the consumers' threads, the HTTP API, then the flush loop
    root.stop()

It is built from the shared tier (collectors/collector/tier.py: `Node`, `CollectorService`, gRPC server, flush
loop, lifecycle sweep) with the root's parts: `Store` (SQLite, what DURABLE means), `Finaliser` (the node's
sink: merge, persist, then acknowledge durable), the node's `RunLedger` kept in the store, the consumers
(`Wiring`: detectors, event log, /metrics, restarts, forensics), the HTTP API (`RootApi`) and, given URLs,
remote-write of every finalised step to long-term stores (`RemoteWriter`, remote_write.py). Everything it
needs comes from the `RootConfig` it is given: `telemetry collector` without `--parent` builds one from its
flags (collectors/cli.py).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from collectors.collector.tier import Tier, TierConfig
from collectors.common.fleet import FLEET_JOB, MAX_HOST_INDEX
from collectors.common.gctune import tune_gc
from collectors.delivery.runs import RunLedger
from collectors.detectors.suite import DetectorsConfig
from collectors.root.api import PER_CLIENT_CONNECTIONS, BoundedHTTPServer, RootApi, serve
from collectors.root.delivery_metrics import DeliveryMetrics
from collectors.root.finalise import Finaliser, root_complete
from collectors.root.fleet_metrics import FleetStoreMetrics
from collectors.root.forensics import DEFAULT_MAX_RANKS, DEFAULT_MAX_REQUESTS, forensics_folder
from collectors.root.host_indexes import HostIndexes, ledger_claims, release_ledger_claims
from collectors.root.hosts import HostsView
from collectors.root.reads import StoreReads
from collectors.root.reads_metrics import StoreReadsMetrics
from collectors.root.remote_write import RemoteWriteConfig, RemoteWriter, remote_watermark
from collectors.root.retention import Retention, RetentionConfig
from collectors.root.store import Store
from collectors.root.wiring import Wiring

log = logging.getLogger(__name__)
HOSTS_SEEN_EVERY_S = 60.0  # how often the root notes the fleet's reported hosts as seen (host_indexes.note_seen)


@dataclass
class RootConfig(TierConfig):
    """Everything the root needs: the tier's settings, and its own below."""

    deadline_floor_s: float = 4.0  # a root waits a little longer than a collector (3 s) for slow children
    db: Path = Path("telemetry-root.db")  # SQLite file of finalised windows (and events, run claims)
    durability: str = "process"  # what DURABLE promises: "process" or "power" (collectors/root/store.py)
    api: str | None = "127.0.0.1:0"  # HTTP JSON API and /metrics, HOST:PORT; None: no API
    api_token: str | None = None  # the bearer token the API requires (all but /healthz); None: none
    api_client_connections: int = PER_CLIENT_CONNECTIONS  # API connections one client address may hold at once
    detectors: DetectorsConfig = field(default_factory=DetectorsConfig)  # docs/detectors.md; sinks included
    forensics_max_ranks: int = DEFAULT_MAX_RANKS  # ranks captured per event (docs/forensics.md)
    forensics_max_requests: int = DEFAULT_MAX_REQUESTS  # capture requests kept on disk, the oldest go first
    remote_write: RemoteWriteConfig | None = None  # every finalised step to long-term stores (remote_write.py)
    remote_write_close_s: float = 1.5  # at stop, how long what is queued may take to leave (within the stop deadline)
    retention: RetentionConfig = field(default_factory=RetentionConfig)  # the store's lifecycle (--retention)
    # a fleet host index unseen this long (and reported by no tier) may go to a new host (host_indexes.py); None: as
    # long as the store keeps fleet windows (RetentionConfig.fleet_kept_s), 0: never (--host-index-reuse-after)
    host_index_reuse_after_s: float | None = None


class RootServer(Tier):
    """The root, composed from its collaborators through their constructors (the pytorch/torchft model). `store`,
    `finaliser` and `retention` may be given (a test's store with a slow commit, a finaliser watched by a test);
    each one not given is built from `config`, and a finaliser or retention given must use the store given."""

    def __init__(self, config: RootConfig, *, store: Store | None = None, finaliser: Finaliser | None = None,
                 retention: Retention | None = None) -> None:
        self.config = config
        self.store = store if store is not None else Store(config.db, config.durability)
        self.finaliser = finaliser if finaliser is not None else Finaliser(self.store)
        # rollups and deletes, on their own thread
        self.retention = retention if retention is not None else Retention(self.store, config.retention)
        super().__init__(config, "root", whole_world=True, sink=self.finaliser, complete=root_complete,
                         runs=RunLedger(recall=self.store.load_runs, record=self.finaliser.record_claims),
                         reads=lambda node: StoreReads(self.store, self.finaliser, node),
                         native=True)  # children's parts held natively, as a collector's (windows.py)
        node = self.node
        assert isinstance(self.service.reads, StoreReads)
        self.reads = self.service.reads  # reloads and recalls off the lock (reads.py); started and stopped here
        self.wiring = Wiring(config.detectors, self.store, self.finaliser, self, self.service.route_requests,
                             forensics_folder(self.store.path), config.forensics_max_ranks,
                             config.forensics_max_requests)
        self.finaliser.on_finalised.append(self.wiring.on_finalised)
        self.finaliser.on_store_trouble.append(self.wiring.store_trouble)
        self.service.on_captures = self.wiring.forensics.on_captures
        self.service.on_fingerprints = self.wiring.on_fingerprints
        self.service.on_exits = self.wiring.on_exits
        self.on_job_finished.append(self.wiring.finished)
        self.wiring.metrics.registry.register(StoreReadsMetrics(self.reads))
        self.wiring.metrics.registry.register(DeliveryMetrics(self.wiring.events.sink_counts))
        stats, runs = self.retention.stats, node.runs
        self.wiring.metrics.registry.register(FleetStoreMetrics(
            lambda: (stats.late_rerolled, stats.late_dropped),
            lambda: (runs.fleet_collisions, runs.fleet_refused_windows), lambda: self.host_indexes.reused))
        # the fleet's host indexes (RegisterHost, docs/fleet.md)
        reuse = config.host_index_reuse_after_s
        self.host_indexes = HostIndexes(self.store, claimed=self._claimed_indexes, live=self._live_indexes,
                                        release=self._release_index,
                                        reuse_after_s=config.retention.fleet_kept_s() if reuse is None else reuse)
        self._seen_at = float("-inf")
        self.service.register_host = self.host_indexes.register
        self.api = RootApi(self.store, self.liveness, events=self.wiring.events_endpoint,
                           forensics=self.wiring.forensics_endpoint, ask_forensics=self.wiring.ask_forensics,
                           hosts=HostsView(self.store, self.node, self.host_indexes.table).handle,
                           detector_settings=self.wiring.detector_settings)
        self.remote_write: RemoteWriter | None = None
        if config.remote_write is not None and config.remote_write.urls:
            self.remote_write = RemoteWriter(config.remote_write, self.store.reader, self.wiring.events.totals,
                                             watermark=remote_watermark(self.store.path))
            self.finaliser.on_finalised.append(self.remote_write.on_finalised)
            self.wiring.events.sinks.append(self.remote_write.on_event)
            self.wiring.metrics.registry.register(self.remote_write)
            self.on_job_finished.append(self.remote_write.forget)
        self.api_server: BoundedHTTPServer | None = None
        self.api_address: str | None = None  # HOST:PORT once started (the port bound, if 0 was asked)

    def _claimed_indexes(self) -> dict[int, str]:
        """The host indexes the run ledger saw claimed: those in the store, and those claimed since its last commit
        (written with the next one: Finaliser.record_claims), from the ledger in memory."""
        found = ledger_claims(self.store)
        with self.node.lock:
            recent = self.node.runs.claims(FLEET_JOB)
        for source, claim in recent.items():
            found.setdefault(source & MAX_HOST_INDEX, claim.host.partition(":")[0])
        return found

    def _live_indexes(self) -> set[int]:
        """The host indexes whose fleet sources some child reports now."""
        with self.node.lock:
            alive = self.node.states(FLEET_JOB).alive
        return {source & MAX_HOST_INDEX for source in alive}

    def _release_index(self, index: int) -> None:
        """A host index given back: the ledger's claims on its sources forgotten, in memory and in the file (contested
        ones too, so that memory matches the file: a returning old host must find no claim of its own on the index)."""
        with self.node.lock:
            self.node.runs.release_host_index(index, self.node.states(FLEET_JOB).alive, contested=True)
        release_ledger_claims(self.store, index)

    def _sweep(self, now: float) -> bool:
        """The tier's sweep; and once a minute, the hosts reported now noted as seen (host indexes given back only
        after reuse_after unseen)."""
        finished = super()._sweep(now)
        if now - self._seen_at >= HOSTS_SEEN_EVERY_S:
            self._seen_at = now
            try:
                self.host_indexes.note_seen()
            except Exception:  # the store's trouble is reported by its commits; the next minute tries again
                log.exception("could not note the fleet's hosts as seen")
        return finished

    def start(self) -> None:
        tune_gc()
        self.reads.start()
        self.grpc.start()
        self.wiring.start()
        if self.remote_write is not None:
            self.remote_write.start()
        if self.config.api is not None:
            host, port = self.config.api.rsplit(":", 1)
            self.api_server = serve(self.api, host, int(port), extra=self.wiring.routes, token=self.config.api_token,
                                    per_client=self.config.api_client_connections)
            self.api_address = f"{host}:{self.api_server.server_address[1]}"
        self.flusher.start()
        self.retention.start()

    def stop(self, grace: float = 1.0) -> None:
        self.retention.stop()
        self.flusher.stop()
        self.grpc.stop(grace)
        self.reads.stop()
        if self.api_server is not None:
            self.api_server.shutdown()
        self.wiring.close()
        if self.remote_write is not None:  # after the last commit (the flush loop stopped), before the store
            self.remote_write.close(self.config.remote_write_close_s)
        self.store.close()
