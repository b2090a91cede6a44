"""A running rack or cluster collector: a tier (collectors/collector/tier.py) that forwards to its parent.

The root is not built here: `RootServer` (root/server.py) is the same tier with the root's sink, and nothing here
imports it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from collectors.collector.tier import Tier, TierConfig
from collectors.common import host_index
from collectors.common.attempts import split
from collectors.common.fingerprints import FingerprintTable
from collectors.common.fleet import FLEET_JOB
from collectors.common.gctune import tune_gc
from collectors.common.transport import Security
from collectors.delivery.node import Upstream
from collectors.delivery.outbox import DEFAULT_OUTBOX_BYTES, Outbox
from telemetry.v1 import forensics_pb2, forward_pb2

log = logging.getLogger(__name__)


@dataclass
class CollectorConfig(TierConfig):
    parents: list[str] = field(default_factory=list)  # the parent first, then fallbacks; at least one
    parent_security: Security | None = None
    outbox_budget_bytes: int = DEFAULT_OUTBOX_BYTES  # --outbox-budget-mb: units kept for the parent (Outbox)


class CollectorServer(Tier):
    """Merges its children's units and forwards sealed windows to its parent; passes forensics through
    (captures and fingerprints up with its own units, capture requests down to its children)."""

    def __init__(self, config: CollectorConfig) -> None:
        if not config.parents:
            raise ValueError("a collector needs a parent address (the root, which has none, is a RootServer)")
        self.config = config
        super().__init__(config, "collector", native=True)  # children's parts held natively (windows.py)
        node_id = self.node.node_id
        self.upstream = Upstream(self.node, lambda on_ack: Outbox(node_id, config.parents, config.parent_security,
                                                                  on_ack, max_bytes=config.outbox_budget_bytes))
        self.node.sink = self.upstream
        self.fingerprints = FingerprintTable()
        self.upstream.fingerprints = self.fingerprints
        self.service.on_captures = self._captures_up
        self.service.on_fingerprints = self._fingerprints_up
        self.service.on_exits = self._exits_up
        self.upstream.outbox.on_requests = self._requests_down
        self.service.register_host = self._register_host
        self._claims_swept_at = float("-inf")
        self._children: frozenset[str] = frozenset()  # the children known at the last sweep

    def _register_host(self, request: forward_pb2.HostRegistration) -> forward_pb2.HostAssignment:
        """Passed up to the root; an index it hands out is this host's from now on: claims this tier's ledger still
        holds on that index's sources by another host, reported here by no child, are forgotten (the root gave the
        index back from a host gone past its reuse horizon: collectors/root/host_indexes.py)."""
        answer = host_index.ask(self.config.parents, self.config.parent_security, request)
        if not answer.refused:
            with self.node.lock:
                self.node.runs.release_host_index(answer.index, self.node.states(FLEET_JOB).alive,
                                                  keep_host=request.host)
        return answer

    def _sweep(self, now: float) -> bool:
        """The tier's sweep; and the fleet claims no child has reported for the job idle timeout forgotten (a host
        index given back is released on its new host's registration path only: RunLedger.forget_unreported), at once
        those of a child just forgotten here and those of sources a child stopped covering (a rack below that forgot
        the host's agent: the host went)."""
        finished = super()._sweep(now)
        timeout = self.config.job_idle_timeout_s
        with self.node.lock:
            children = frozenset(self.node.child_ranks)
            departed, self._children = self._children - children, children
            runs = self.node.runs
            # bounded: a pass walks every fleet claim here (at once when a child was just forgotten or dropped some)
            if not departed and not runs.dropping(FLEET_JOB) and now - self._claims_swept_at < min(60.0, timeout / 4):
                return finished
            self._claims_swept_at = now
            if runs.holds(FLEET_JOB):
                forgotten = runs.forget_unreported(FLEET_JOB, self.node.states(FLEET_JOB).covered, now, timeout,
                                                   departed)
                if forgotten:
                    log.info("%d fleet source claim(s) reported by no child for %.0f s (or made by a child just "
                             "forgotten, or no longer covered by the child that named them): forgotten here (the "
                             "root still holds them)", forgotten, timeout)
        return finished

    def _captures_up(self, captures: list[forensics_pb2.Capture]) -> None:
        for capture in captures:
            self.upstream.captures.put(capture)

    def _exits_up(self, exits: list[forensics_pb2.RankExit]) -> None:
        for record in exits:
            self.upstream.exits.put(record)

    def _fingerprints_up(self, found: list[forensics_pb2.JobFingerprints]) -> None:
        for job_fingerprints in found:
            self.fingerprints.merge(job_fingerprints)

    def _requests_down(self, requests: list[forensics_pb2.CaptureRequest]) -> None:
        self.service.route_requests(requests)

    def job_forgotten(self, job: str) -> None:
        self.fingerprints.forget(*split(job))

    def start(self) -> None:
        tune_gc()
        self.grpc.start()
        self.upstream.outbox.start()
        self.flusher.start()

    def stop(self, grace: float = 1.0) -> None:
        self.flusher.stop()
        self.upstream.outbox.close()
        self.grpc.stop(grace)
