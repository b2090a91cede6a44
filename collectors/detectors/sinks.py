"""Where events go besides the root's table: sinks behind bounded queues, each on a thread of its own.

`EventLog` (collectors/detectors/events.py) hands every change of an event to its sinks as `sink(action, event)`
with action one of "open", "update", "close". `WebhookSink` POSTs JSON; `GrafanaAnnotationSink` posts Grafana
annotations (a region from open to close). Sinks never block a detector: each has a bounded queue and a thread
of its own, drops (and counts) past it, and drains at shutdown (`flush`/`shutdown`, `QueuedSink`).
`make_sinks` builds the configured ones (`SinkConfig`, the root's --webhook-url / --grafana-url).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from collectors.detectors.events import Event, Sink, dumps

log = logging.getLogger(__name__)


class QueuedSink:
    """Runs deliveries on a daemon thread behind a bounded queue; drops (and counts) when full.

    The contract (opentelemetry's exporters'): `flush(timeout)` waits for what is queued; `shutdown(timeout)`
    delivers what is queued, then stops, counting as dropped whatever it could not deliver in time and whatever
    is handed to it after. `sent`, `failed` and `dropped` are exported at the root
    (telemetry_event_sink_events_total)."""

    def __init__(self, name: str, actions: Iterable[str], max_queue: int = 1000) -> None:
        self.actions = frozenset(actions)
        self.queue: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue(max_queue)
        self.dropped = 0
        self.failed = 0
        self.sent = 0
        self._shut = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def __call__(self, action: str, event: Event) -> None:
        if action not in self.actions:
            return
        if self._shut:
            self.dropped += 1
            return
        try:
            self.queue.put_nowait((action, event.to_dict()))
        except queue.Full:
            self.dropped += 1

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            try:
                if item is None:
                    return
                try:
                    self.deliver(*item)
                    self.sent += 1
                except Exception as exc:
                    self.failed += 1
                    log.warning("%s: could not deliver %s of event %s: %s", type(self).__name__, item[0],
                                item[1].get("id"), exc)
            finally:
                self.queue.task_done()

    def deliver(self, action: str, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait until the queue is empty (for tests and shutdown)."""
        deadline = time.monotonic() + timeout
        while self.queue.unfinished_tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        return not self.queue.unfinished_tasks

    def shutdown(self, timeout: float = 2.0) -> bool:
        """Deliver what is queued, then stop the thread, within `timeout`: True if everything queued went out.
        What is still queued at the deadline is counted as dropped (a slow endpoint never holds a stop longer)."""
        deadline = time.monotonic() + timeout
        self._shut = True
        try:
            self.queue.put(None, timeout=max(0.0, deadline - time.monotonic()))
        except queue.Full:
            pass
        self._thread.join(max(0.0, deadline - time.monotonic()))
        if not self._thread.is_alive():
            return True
        left = 0
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                break
            self.queue.task_done()
            left += item is not None
        self.dropped += left
        log.warning("%s: %d event(s) not delivered in the %.1f s of the shutdown (counted as dropped)",
                    type(self).__name__, left, timeout)
        return False


class WebhookSink(QueuedSink):
    """POSTs `{"action": "open"|"update"|"close", "event": {...}}` as JSON to a URL (urllib, no retries)."""

    def __init__(self, url: str, actions: Iterable[str] = ("open", "close"), timeout_s: float = 5.0,
                 headers: dict[str, str] | None = None) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self.headers = {"Content-Type": "application/json", **(headers or {})}
        super().__init__("event-webhook", actions)

    def deliver(self, action: str, event: dict[str, Any]) -> None:
        body = dumps({"action": action, "event": event}).encode()
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as reply:
            reply.read()



class GrafanaAnnotationSink(QueuedSink):
    """Posts each event as a Grafana annotation (grafana-client): created on open, its end set on close.

    Tags: "telemetry", the kind, "job:<job>", the severity. Annotations are organisation-wide (no
    dashboard id), so every dashboard that shows annotations with the tag "telemetry" shows them.
    """

    def __init__(self, url: str, token: str | None, actions: Iterable[str] = ("open", "close"),
                 api: Any = None, timeout_s: float = 5.0) -> None:
        if api is None:
            from grafana_client import GrafanaApi  # optional dependency: only when this sink is configured
            api = GrafanaApi.from_url(url, credential=token, timeout=timeout_s)
        self.api = api
        self.annotation_ids: dict[int, int] = {}
        super().__init__("event-grafana", actions)

    def deliver(self, action: str, event: dict[str, Any]) -> None:
        tags = ["telemetry", event["kind"], f"job:{event['job']}", event["severity"]]
        text = describe(event)
        start_ms = int(event["time"] * 1000)
        if action == "open" or event["id"] not in self.annotation_ids:
            end_ms = int(event["closed"] * 1000) if event.get("closed") else None
            reply = self.api.annotations.add_annotation(time_from=start_ms, time_to=end_ms, tags=tags, text=text)
            if isinstance(reply, dict) and "id" in reply:
                self.annotation_ids[event["id"]] = int(reply["id"])
            return
        end_ms = int((event.get("closed") or event["updated"]) * 1000)
        self.api.annotations.partial_update_annotation(self.annotation_ids[event["id"]], time_from=start_ms,
                                                       time_to=end_ms, tags=tags, text=text)
        if action == "close":
            self.annotation_ids.pop(event["id"], None)



def describe(event: dict[str, Any]) -> str:
    """One line a person reads: what, where, which ranks."""
    ranks = event.get("ranks") or []
    shown = ", ".join(map(str, ranks[:8])) + (" ..." if len(ranks) > 8 else "")
    where = f" step {event['step']}" if event.get("step") is not None else ""
    who = f" ranks [{shown}]" if ranks else ""
    hosts = event.get("hosts") or []
    on = f" on {', '.join(hosts[:4])}" if hosts else ""
    summary = event.get("detail", {}).get("summary", "")
    return f"[{event['severity']}] {event['kind']} in {event['job']}{where}:{who}{on} {summary}".rstrip()


@dataclass
class SinkConfig:
    webhook_url: str | None = None
    webhook_actions: list[str] = field(default_factory=lambda: ["open", "close"])
    grafana_url: str | None = None
    grafana_token: str | None = None


def make_sinks(config: SinkConfig) -> list[Sink]:
    sinks: list[Sink] = []
    if config.webhook_url:
        sinks.append(WebhookSink(config.webhook_url, config.webhook_actions))
    if config.grafana_url:
        sinks.append(GrafanaAnnotationSink(config.grafana_url, config.grafana_token))
    return sinks
