"""The Collector gRPC service: children stream SummaryBatches in, Acks flow back out."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator

import grpc
from pyroaring import BitMap

from collectors.common.keys import Key
from collectors.common.streams import answer
from collectors.common.validation import BadInput, MetricBudget, check_job, check_size
from collectors.delivery.node import COUNTER_FIELDS, Node
from collectors.delivery.windows import Origin, Part
from telemetry.summary import Summary
from telemetry.streams import END
from telemetry.v1 import forward_pb2, forward_pb2_grpc

log = logging.getLogger(__name__)

MAX_INDEX = 2**63 - 1  # the root stores window indexes as SQLite integers


class CollectorService(forward_pb2_grpc.CollectorServicer):
    """Accepts child units into a Node; `before_offer` lets the root reload windows it persisted."""

    def __init__(self, node: Node, budget: MetricBudget | None = None,
                 before_offer: Callable[[Key], None] | None = None) -> None:
        self.node = node
        self.budget = budget or MetricBudget()
        self.before_offer = before_offer
        self._links: dict[str, queue.Queue] = {}
        self._shapes: dict[str, tuple[int, int]] = {}  # per job: the (k, max_centroids) every part must share
        self._links_lock = threading.Lock()

    # Called by the node (under its lock) to answer a child about one of its units.
    def ack_down(self, origin: Origin, index: int | None = None, overlap: BitMap | None = None) -> None:
        sender, seq = origin
        with self._links_lock:
            link = self._links.get(sender)
        if link is None:
            return  # the child resends after it reconnects; the duplicate is then absorbed
        if index is None:
            link.put(forward_pb2.Ack(seq=seq, status=forward_pb2.Ack.DURABLE))
        else:
            link.put(forward_pb2.Ack(seq=seq, status=forward_pb2.Ack.REJECTED_OVERLAP, rejections=[
                forward_pb2.Rejection(index=index, overlapping_sources=list(overlap or ()),
                                      reason="sources already held upstream; split and resend")]))

    def Forward(self, request_iterator: Iterator[forward_pb2.SummaryBatch],
                context: grpc.ServicerContext) -> Iterator[forward_pb2.Ack]:
        state: dict[str, object] = {}
        stream, responses = answer(request_iterator, context,
                                   lambda requests, answers: self._consume(requests, answers, state))
        try:
            yield from stream
        finally:
            sender = state.get("sender")
            with self._links_lock:
                if sender is not None and self._links.get(sender) is responses:  # type: ignore[arg-type]
                    del self._links[sender]  # type: ignore[arg-type]

    def _consume(self, requests: Iterator[forward_pb2.SummaryBatch], responses: queue.Queue,
                 state: dict[str, object]) -> None:
        try:
            for batch in requests:
                check_size(batch)
                sender = state.get("sender")
                if sender is None:
                    if not batch.sender_id:
                        raise BadInput("INVALID_ARGUMENT", "the first batch must name its sender_id")
                    state["sender"] = sender = batch.sender_id
                    with self._links_lock:
                        self._links[batch.sender_id] = responses
                elif batch.sender_id and batch.sender_id != sender:
                    raise BadInput("INVALID_ARGUMENT",
                                   f"sender_id changed from {sender!r} to {batch.sender_id!r} on one stream")
                self._handle(str(sender), batch, responses)
        except BadInput as exc:
            with self.node.lock:
                self.node.counters["bad_inputs"] += 1
            log.warning("refused a child stream: %s", exc)
            responses.put(exc)
        except grpc.RpcError as exc:
            # The child went away (it resends whatever is not durable), or sent a message over the limit.
            if _code(exc) == grpc.StatusCode.RESOURCE_EXHAUSTED:
                with self.node.lock:
                    self.node.counters["bad_inputs"] += 1
                log.warning("a child stream was cut: %s", exc)
        finally:
            responses.put(END)

    def _handle(self, sender: str, batch: forward_pb2.SummaryBatch, responses: queue.Queue) -> None:
        node = self.node
        origin = (sender, batch.seq)
        with node.lock:
            node.child_states(sender, list(batch.ranks))
            node.child_counters[sender] = {name: getattr(batch.counters, name) for name in COUNTER_FIELDS}
            if batch.seq == 0:
                responses.put(forward_pb2.Ack(seq=0, status=forward_pb2.Ack.RECEIVED))
                return
            rejections = []
            for index, window in enumerate(batch.windows):
                rejection = self._offer(origin, index, window)
                if rejection is not None:
                    rejections.append(rejection)
            status = forward_pb2.Ack.REJECTED_OVERLAP if rejections else forward_pb2.Ack.RECEIVED
            responses.put(forward_pb2.Ack(seq=batch.seq, status=status, rejections=rejections))
            node.durability.settle(origin)

    def _offer(self, origin: Origin, index: int, window: forward_pb2.WindowSummary) -> forward_pb2.Rejection | None:
        node = self.node
        try:
            key = Key.from_proto(window.key)
            check_job(key.job)
            self.budget.admit(key.job, key.metric)
            if key.index > MAX_INDEX:
                raise ValueError(f"window index {key.index} is beyond 2**63-1")
            summary = Summary.from_proto(window.summary)
            shape = self._shapes.setdefault(key.job, (summary.k, summary.max_centroids))
            if (summary.k, summary.max_centroids) != shape:
                raise ValueError(f"summary has k={summary.k}, max_centroids={summary.max_centroids}; "
                                 f"job {key.job!r} uses k={shape[0]}, max_centroids={shape[1]}")
        except (ValueError, BadInput) as exc:
            node.counters["bad_inputs"] += 1
            log.warning("refused window %d of %s: %s", index, origin, exc)
            return forward_pb2.Rejection(index=index, key=window.key, reason=str(exc))
        if self.before_offer is not None:
            self.before_offer(key)
        part = Part(key, [origin], summary._sources, index=index, built=summary)
        verdict, overlap = node.offer(part, window.expected)
        if verdict != "overlap":
            return None
        return forward_pb2.Rejection(index=index, key=window.key, overlapping_sources=list(overlap or ()),
                                     reason=f"{len(overlap or ())} of {len(part.sources)} sources already held")


def _code(exc: grpc.RpcError) -> grpc.StatusCode | None:
    try:
        return exc.code()
    except Exception:  # the server-side iterator's error may carry no code
        return None
