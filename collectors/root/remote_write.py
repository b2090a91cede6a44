"""Remote-write from the root: every finalised step, to any Prometheus-compatible store (docs/metrics.md).

    writer = RemoteWriter(RemoteWriteConfig(urls=("http://mimir:9009/api/v1/push",)), reader=store.reader,
                          event_totals=events.totals)
    finaliser.on_finalised.append(writer.on_finalised)   # the rows of each commit (RootServer does this)
    events.sinks.append(writer.on_event)                  # event counts
    registry.register(writer)                             # its own counters on the root's /metrics
    writer.start(); ...; writer.flush(2.0); writer.close(1.5)

What is sent is `remote_series.SeriesMaker`'s: per-step figures, hardware buckets, event counts, goodput. How:

* Each URL is an `Endpoint` with `shards` sender threads; a series always goes to the same shard (by its
  labels' hash), so its samples leave in order. A shard sends when it holds `batch_size` samples, or when its
  oldest sample has waited `flush_interval_s`: one HTTP POST of a snappy-compressed (block format, cramjam)
  protobuf `WriteRequest` (prompb.py), with the remote-write 0.1.0 headers.
* 2xx: sent. 5xx, 429 (its Retry-After honoured) and connection errors: retried with jittered exponential
  backoff (`telemetry.backoff.Backoff`) until the batch is `retry_deadline_s` old, then dropped and counted
  (`retries_exhausted`). Any other 4xx: the receiver refuses the request for good (e.g. an out-of-order
  sample): it is split in two by series and each half sent again, down to the series refused, whose samples
  are dropped and counted (`rejected`); nothing is retried as it was.
* The queue is bounded (`queue_samples` per endpoint, spread over its shards): a full shard drops its oldest
  sample (counted, `queue_full`), so that after an outage the newest history is what is kept. Within the bound
  nothing is lost: a receiver that comes back gets everything, oldest first.
* A store refuses a sample not newer than the last of its series (Prometheus rejects the whole request):
  samples at or before their series' last timestamp are dropped here and counted (`out_of_order`); a late
  delta merged into a step already sent is not sent (the store keeps the step's figures as first finalised;
  the root's API has the amended ones) and is counted as a late row.
* `flush(timeout)` sends everything queued now; `close(timeout)` flushes, then stops the senders, counting what
  is left as dropped (`shutdown`). The root closes it when it stops, within its stop deadline.
* Given a `watermark` file, what a stop or a crash left unsent is not lost: the store is the log, and the next
  `start()` reads back what was finalised after the watermark (remote_catchup.py).

Every counter is exported on the root's /metrics (`collect`): telemetry_remote_write_*.
"""

from __future__ import annotations

import http.client
import logging
import random
import sqlite3
import ssl
import threading
import time
import urllib.parse
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

import cramjam
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from collectors.common.rows import Row
from collectors.detectors.events import Event
from collectors.root import prompb
from collectors.root.goodput import goodput
from collectors.root.prompb import Labels
from collectors.root.remote_catchup import Watermark, latest, rows_after
from collectors.root.remote_series import Sample, SeriesMaker
from telemetry.backoff import Backoff

log = logging.getLogger(__name__)

DROP_REASONS = ("queue_full", "retries_exhausted", "rejected", "shutdown")
USER_AGENT = "telemetry-root-remote-write"


@dataclass(frozen=True)
class RemoteWriteConfig:
    """Where and how the root writes (the `--remote-write*` options of `telemetry collector`)."""

    urls: tuple[str, ...] = ()
    ca: Path | None = None            # CA to verify an https receiver (default: the system's)
    cert: Path | None = None          # client certificate for mTLS
    key: Path | None = None
    token: str | None = None          # sent as `Authorization: Bearer TOKEN`
    labels: tuple[tuple[str, str], ...] = ()  # external labels on every series, e.g. (("cluster", "a"),)
    shards: int = 2                   # sender threads (and connections) per URL
    batch_size: int = 2000            # samples per request at most
    queue_samples: int = 200_000      # per URL; beyond it the oldest samples are dropped (counted)
    flush_interval_s: float = 1.0     # the longest a queued sample waits for its batch to fill
    timeout_s: float = 10.0           # per HTTP request
    retry_deadline_s: float = 120.0   # a batch retried for longer than this is dropped (counted)
    backoff_initial_s: float = 0.1
    backoff_max_s: float = 5.0
    goodput_interval_s: float = 15.0  # how often jobs with new steps get their goodput written
    max_series: int = 200_000         # series whose last timestamp is remembered (the out-of-order guard)

    def __post_init__(self) -> None:
        for url in self.urls:
            parts = urllib.parse.urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"remote-write URL {url!r}: want http(s)://HOST[:PORT]/PATH")
        if self.shards < 1 or self.batch_size < 1 or self.queue_samples < self.shards:
            raise ValueError("remote-write: shards and batch size must be >= 1, the queue at least one per shard")
        if (self.cert is None) != (self.key is None):
            raise ValueError("remote-write: the client certificate and key go together")


def remote_watermark(db: Path) -> Path:
    """The watermark file of the root whose database is `db` (remote_catchup.py): beside it."""
    return db.with_name(db.name + "-remote-write.json")


def endpoint_name(url: str) -> str:
    """The URL as a label value: without credentials, query or fragment."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{parts.scheme}://{host}{f':{parts.port}' if parts.port else ''}{parts.path}"


@dataclass
class _Counters:
    queued: int = 0   # samples accepted into the queue
    sent: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DROP_REASONS, 0))
    retries: int = 0
    requests: int = 0
    last_success_s: float = 0.0


class _Shard:
    """One sender thread of an endpoint: its own bounded queue and HTTP connection."""

    def __init__(self, endpoint: Endpoint, index: int, capacity: int) -> None:
        self.endpoint = endpoint
        self.config = endpoint.config
        self.capacity = capacity
        self.queue: deque[Sample] = deque()
        self.cond = threading.Condition()
        self.oldest = 0.0      # monotonic time the oldest queued sample was queued (approximately)
        self.in_flight = 0     # samples of the batch being sent
        self.accepted = 0      # samples ever offered to this shard (queued, dropped at once, or refused at close)
        self.urgent = False    # flush(): send without waiting for a full batch
        self.closing = False   # close(): send what is left, then end
        self.abort = threading.Event()  # close() ran out of time: stop retrying, end now
        self.connection: http.client.HTTPConnection | None = None
        self.thread = threading.Thread(target=self._run, name=f"remote-write-{index}", daemon=True)

    def put(self, samples: list[Sample]) -> None:
        counters, offered = self.endpoint.counters, len(samples)
        with self.cond:
            self.accepted += offered
            if self.closing:
                with self.endpoint.lock:
                    counters.queued += offered
                    counters.dropped["shutdown"] += offered
                return
            if not self.queue:
                self.oldest = time.monotonic()
            over = len(self.queue) + len(samples) - self.capacity
            if over > 0:
                for _ in range(min(over, len(self.queue))):
                    self.queue.popleft()
                samples = samples[-self.capacity:]
            self.queue.extend(samples)
            self.cond.notify()
        with self.endpoint.lock:
            counters.queued += offered
            if over > 0:
                counters.dropped["queue_full"] += over

    def idle(self) -> bool:
        return not self.queue and not self.in_flight

    def resolved(self) -> int:
        """Samples of this shard sent or dropped so far (it keeps them in order: the first `resolved()` of
        those ever offered)."""
        with self.cond:
            return self.accepted - len(self.queue) - self.in_flight

    def _take(self) -> list[Sample] | None:
        """The next batch, once due; None when closing with nothing left, or aborted."""
        config = self.config
        with self.cond:
            while True:
                if self.abort.is_set():
                    return None
                n = len(self.queue)
                waited = time.monotonic() - self.oldest
                if n >= config.batch_size or (n and (self.urgent or self.closing
                                                     or waited >= config.flush_interval_s)):
                    batch = [self.queue.popleft() for _ in range(min(n, config.batch_size))]
                    self.in_flight = len(batch)
                    self.oldest = time.monotonic()
                    return batch
                if self.closing:
                    return None
                self.cond.wait(config.flush_interval_s - waited if n else None)

    def _run(self) -> None:
        while True:
            batch = self._take()
            if batch is None:
                break
            try:
                self._deliver(batch)
            except Exception:  # a bug here must not stop the shard for good: the batch is counted as rejected
                log.exception("remote-write to %s: sending a batch failed", self.endpoint.name)
                with self.endpoint.lock:
                    self.endpoint.counters.dropped["rejected"] += len(batch)
            with self.cond:
                self.in_flight = 0
                if not self.queue:
                    self.urgent = False
                self.cond.notify_all()
        if self.connection is not None:
            self.connection.close()

    def _deliver(self, batch: list[Sample]) -> None:
        series: dict[Labels, list[tuple[int, float]]] = {}
        for labels, ts, value in batch:
            series.setdefault(labels, []).append((ts, value))
        self._send(list(series.items()), time.monotonic() + self.config.retry_deadline_s)

    def _send(self, groups: list[tuple[Labels, list[tuple[int, float]]]], deadline: float) -> None:
        """POST these series, retrying until `deadline`. A refused request (4xx) is split in two by series and
        each half sent again, so that one series the store refuses (Prometheus refuses the whole request for
        one out-of-order sample) loses only its own samples."""
        n = sum(len(samples) for _, samples in groups)
        body = bytes(cramjam.snappy.compress_raw(prompb.encode(groups)))
        counters, lock = self.endpoint.counters, self.endpoint.lock
        backoff = Backoff(self.config.backoff_initial_s, self.config.backoff_max_s)
        while True:
            outcome, retry_after = self._post(body)
            with lock:
                counters.requests += 1
                if outcome == "ok":
                    counters.sent += n
                    counters.last_success_s = time.time()
                elif outcome == "rejected" and len(groups) == 1:
                    counters.dropped["rejected"] += n
            if outcome == "rejected" and len(groups) > 1:
                half = len(groups) // 2
                self._send(groups[:half], deadline)
                self._send(groups[half:], deadline)
                return
            if outcome != "retry":
                return
            wait = max(backoff.next_delay(), retry_after)
            if time.monotonic() + wait > deadline:
                log.warning("remote-write to %s: gave up a batch of %d samples after %.0f s of retries",
                            self.endpoint.name, n, self.config.retry_deadline_s)
                with lock:
                    counters.dropped["retries_exhausted"] += n
                return
            with lock:
                counters.retries += 1
            if self.abort.wait(wait):
                with lock:
                    counters.dropped["shutdown"] += n
                return

    def _post(self, body: bytes) -> tuple[str, float]:
        """One POST: ("ok" | "retry" | "rejected", seconds the receiver asked to wait)."""
        endpoint = self.endpoint
        try:
            if self.connection is None:
                self.connection = endpoint.connect()
            self.connection.request("POST", endpoint.path, body, endpoint.headers)
            reply = self.connection.getresponse()
            text = reply.read()
        except (OSError, http.client.HTTPException) as exc:
            if self.connection is not None:
                self.connection.close()
                self.connection = None
            endpoint.warn(f"cannot reach the receiver ({exc}); retrying")
            return "retry", 0.0
        if 200 <= reply.status < 300:
            return "ok", 0.0
        message = f"HTTP {reply.status}: {text[:300].decode(errors='replace').strip()}"
        if reply.status == 429 or reply.status >= 500:
            endpoint.warn(f"{message}; retrying")
            return "retry", _retry_after(reply.getheader("Retry-After"))
        endpoint.warn(f"{message}; the batch is dropped (not retried)")
        return "rejected", 0.0


def _retry_after(value: str | None) -> float:
    """Seconds from a Retry-After header (seconds form only), capped at a minute; 0 when absent or unreadable."""
    try:
        return min(60.0, max(0.0, float(value))) if value else 0.0
    except ValueError:
        return 0.0


class Endpoint:
    """One receiver URL: its shards, its counters, its connection settings."""

    WARN_EVERY_S = 30.0

    def __init__(self, url: str, config: RemoteWriteConfig) -> None:
        self.url = url
        self.config = config
        self.name = endpoint_name(url)
        parts = urllib.parse.urlsplit(url)
        self.scheme, self.host, self.port = parts.scheme, parts.hostname or "", parts.port
        self.path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.headers = {"Content-Encoding": "snappy", "Content-Type": "application/x-protobuf",
                        "User-Agent": USER_AGENT, "X-Prometheus-Remote-Write-Version": "0.1.0"}
        if config.token:
            self.headers["Authorization"] = f"Bearer {config.token}"
        self.tls: ssl.SSLContext | None = None
        if self.scheme == "https":
            self.tls = ssl.create_default_context(cafile=str(config.ca) if config.ca else None)
            if config.cert is not None and config.key is not None:
                self.tls.load_cert_chain(str(config.cert), str(config.key))
        self.lock = threading.Lock()
        self.counters = _Counters()
        self._warned = 0.0
        per_shard = config.queue_samples // config.shards
        self.shards = [_Shard(self, i, per_shard) for i in range(config.shards)]

    def connect(self) -> http.client.HTTPConnection:
        if self.tls is not None:
            return http.client.HTTPSConnection(self.host, self.port, timeout=self.config.timeout_s, context=self.tls)
        return http.client.HTTPConnection(self.host, self.port, timeout=self.config.timeout_s)

    def warn(self, message: str) -> None:
        """Logged at most every WARN_EVERY_S per endpoint (a receiver down for an hour is one line a minute)."""
        now = time.monotonic()
        with self.lock:
            if now - self._warned < self.WARN_EVERY_S:
                return
            self._warned = now
        log.warning("remote-write to %s: %s", self.name, message)

    def put(self, samples: list[Sample]) -> None:
        by_shard: dict[int, list[Sample]] = {}
        n = len(self.shards)
        for sample in samples:
            by_shard.setdefault(hash(sample[0]) % n, []).append(sample)
        for index, part in by_shard.items():
            self.shards[index].put(part)

    def queued(self) -> int:
        return sum(len(shard.queue) + shard.in_flight for shard in self.shards)


class RemoteWriter:
    """Feeds the endpoints from the root's finalised rows and events; see the module docstring."""

    def __init__(self, config: RemoteWriteConfig, reader: Callable[[], sqlite3.Connection] | None = None,
                 event_totals: Callable[[], dict[tuple[str, str], int]] | None = None,
                 watermark: Path | None = None) -> None:
        self.config = config
        self.reader = reader
        self.event_totals = event_totals
        self.endpoints = [Endpoint(url, config) for url in config.urls]
        self.maker = SeriesMaker(config.labels)
        self._lock = threading.Lock()  # the maker, the guard and the counters below
        self._last_ts: OrderedDict[Labels, int] = OrderedDict()  # series -> last timestamp queued
        self.out_of_order = 0
        self.late_rows = 0
        self._goodput_due: set[str] = set()  # job names with steps since their goodput was last written
        self._stop = threading.Event()
        self._keeper: threading.Thread | None = None
        self._started = False
        # Replay after a crash (remote_catchup.py): per commit handed over, its latest finalised_ns and how many
        # samples each shard had been offered by then; the watermark passes it once every shard resolved those.
        self.watermark = Watermark(watermark) if watermark is not None else None
        self.watermark_ns: int | None = None
        self._marks: deque[tuple[int, list[int]]] = deque()
        self.replayed_rows = 0
        self.replay_skipped_rows = 0

    # ----------------------------------------------------------------- intake (never blocks on the network)
    def on_finalised(self, rows: list[Row]) -> None:
        """Finaliser.on_finalised: the rows of one commit."""
        # A commit holds windows in no particular order: oldest first, as a store takes each series.
        fresh = sorted((row for row in rows if not row.late), key=lambda row: (row.key.width_ms, row.key.index))
        with self._lock:
            self.late_rows += len(rows) - len(fresh)
            samples = self.maker.rows(fresh)
            for row in fresh:
                if row.key.is_step and not row.key.job.startswith("_"):
                    self._goodput_due.add(row.key.job.split("@", 1)[0])
        self._put(samples, max((row.finalised_ns for row in rows), default=None))

    def on_event(self, action: str, event: Event) -> None:
        """An EventLog sink: an opened event adds one to its (job, kind) count."""
        if action != "open":
            return
        total = (self.event_totals() if self.event_totals is not None else {}).get((event.job, event.kind), 1)
        with self._lock:
            samples = self.maker.event_opened(event.job, event.kind, event.time, total)
        self._put(samples)

    def forget(self, job: str) -> None:
        """RootServer.on_job_finished: the job's step index is no longer remembered."""
        with self._lock:
            self.maker.forget(job)

    def _put(self, samples: list[Sample], finalised_ns: int | None = None) -> None:
        """Queue samples on every endpoint (past the order guard); with `finalised_ns`, the commit they came
        from, for the watermark."""
        with self._lock:
            kept = []
            for sample in sorted(samples, key=lambda sample: sample[1]):
                labels, ts = sample[0], sample[1]
                last = self._last_ts.get(labels)
                if last is not None and ts <= last:
                    self.out_of_order += 1
                    continue
                self._last_ts[labels] = ts
                self._last_ts.move_to_end(labels)
                kept.append(sample)
            while len(self._last_ts) > self.config.max_series:
                self._last_ts.popitem(last=False)
            if kept:
                for endpoint in self.endpoints:
                    endpoint.put(kept)
            if finalised_ns is not None and self.watermark is not None:
                self._marks.append((finalised_ns, [shard.accepted for shard in self._shards()]))

    def _shards(self) -> list[_Shard]:
        return [shard for endpoint in self.endpoints for shard in endpoint.shards]

    # ----------------------------------------------------------------- the watermark (remote_catchup.py)
    def _advance(self) -> None:
        """Move the watermark past every commit all shards resolved, and keep it on disk."""
        if self.watermark is None:
            return
        with self._lock:
            resolved = [shard.resolved() for shard in self._shards()]
            passed = None
            while self._marks and all(r >= a for r, a in zip(resolved, self._marks[0][1])):
                passed = self._marks.popleft()[0]
            if passed is None or passed <= (self.watermark_ns or 0):
                return
            self.watermark_ns = passed
        self.watermark.save(passed)

    def _replay(self) -> None:
        """At start: hand over, from the store, what was finalised after the watermark (a crash's loss)."""
        if self.watermark is None or self.reader is None:
            return
        after = self.watermark.load()
        try:
            with closing(self.reader()) as db:
                if after is None:  # the first start writing: from now on, the history is not re-sent
                    self.watermark_ns = latest(db)
                    self.watermark.save(self.watermark_ns)
                    return
                self.watermark_ns = after
                rows, skipped = rows_after(db, after, max(1, self.config.queue_samples // 8))
        except sqlite3.Error as exc:
            log.warning("remote-write: cannot read back what was finalised after the watermark: %s", exc)
            return
        self.replay_skipped_rows = skipped
        if skipped:
            log.warning("remote-write: %d windows finalised before the restart are past the queue's bound and are "
                        "not sent", skipped)
        for start in range(0, len(rows), 256):  # commit-sized pieces, oldest first
            self.on_finalised(rows[start:start + 256])
        self.replayed_rows = len(rows)
        if rows:
            log.info("remote-write: resending %d windows finalised after the watermark", len(rows))

    # ----------------------------------------------------------------- goodput (reads the store)
    def _goodput_once(self) -> None:
        if self.reader is None:
            return
        with self._lock:
            due, self._goodput_due = sorted(self._goodput_due), set()
        if not due:
            return
        samples: list[Sample] = []
        try:
            with closing(self.reader()) as db:
                for job in due:
                    figures = goodput(db, job)
                    with self._lock:
                        samples.extend(self.maker.goodput(figures))
        except sqlite3.Error as exc:
            log.warning("remote-write: goodput read failed: %s", exc)
        self._put(samples)

    def _keep(self) -> None:
        """The writer's own thread: the watermark every second, goodput every `goodput_interval_s`."""
        due = time.monotonic() + self.config.goodput_interval_s * random.uniform(0.9, 1.1)
        while not self._stop.wait(1.0):
            try:
                self._advance()
                if time.monotonic() >= due:
                    due = time.monotonic() + self.config.goodput_interval_s * random.uniform(0.9, 1.1)
                    self._goodput_once()
            except Exception:
                log.exception("remote-write: the watermark or goodput pass failed")

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Replay what a previous run left unsent (before any new commit), then the sender threads."""
        self._replay()
        for endpoint in self.endpoints:
            for shard in endpoint.shards:
                shard.thread.start()
        self._keeper = threading.Thread(target=self._keep, name="remote-write-keeper", daemon=True)
        self._keeper.start()
        self._started = True

    def flush(self, timeout: float) -> bool:
        """Send everything queued now; True if it all left (sent or dropped) within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        shards = [shard for endpoint in self.endpoints for shard in endpoint.shards]
        for shard in shards:
            with shard.cond:
                shard.urgent = True
                shard.cond.notify_all()
        for shard in shards:
            with shard.cond:
                if not shard.cond.wait_for(shard.idle, max(0.0, deadline - time.monotonic())):
                    return False
        return True

    def close(self, timeout: float) -> bool:
        """Write the last goodput figures, send what is queued for at most `timeout` seconds, stop. What could
        not be sent is counted as dropped (`shutdown`). True if everything left in time."""
        deadline = time.monotonic() + timeout
        before = self._shutdown_drops()
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(max(0.0, deadline - time.monotonic()))
        if self._started:
            try:
                self._goodput_once()
            except Exception:
                log.exception("remote-write: the last goodput pass failed")
        shards = [shard for endpoint in self.endpoints for shard in endpoint.shards]
        for shard in shards:
            with shard.cond:
                shard.closing = True
                shard.cond.notify_all()
        for shard in shards:
            if shard.thread.is_alive():
                shard.thread.join(max(0.0, deadline - time.monotonic()))
        self._advance()  # what was sent; what is dropped below at shutdown is replayed at the next start
        clean = True
        for endpoint in self.endpoints:
            for shard in endpoint.shards:
                shard.abort.set()
                with shard.cond:
                    left = len(shard.queue)
                    shard.queue.clear()
                    shard.cond.notify_all()
                if left:
                    clean = False
                    with endpoint.lock:
                        endpoint.counters.dropped["shutdown"] += left
                if shard.thread.is_alive():
                    shard.thread.join(0.2)
                    clean = clean and not shard.thread.is_alive()
        return clean and self._shutdown_drops() == before

    def _shutdown_drops(self) -> int:
        total = 0
        for endpoint in self.endpoints:
            with endpoint.lock:
                total += endpoint.counters.dropped["shutdown"]
        return total

    # ----------------------------------------------------------------- /metrics
    def collect(self) -> Iterable[Metric]:
        E = ["endpoint"]
        queued = CounterMetricFamily("telemetry_remote_write_samples", "Samples queued for remote-write.", labels=E)
        sent = CounterMetricFamily("telemetry_remote_write_sent_samples", "Samples the receiver accepted (2xx).",
                                   labels=E)
        dropped = CounterMetricFamily("telemetry_remote_write_dropped_samples", "Samples never delivered, by "
                                      "reason: queue_full (the oldest, past --remote-write-queue), "
                                      "retries_exhausted (past --remote-write-deadline), rejected (a 4xx other "
                                      "than 429), shutdown (left when the root stopped).", labels=[*E, "reason"])
        retries = CounterMetricFamily("telemetry_remote_write_retries", "Requests retried (5xx, 429, connection "
                                      "errors).", labels=E)
        requests = CounterMetricFamily("telemetry_remote_write_requests", "HTTP requests made.", labels=E)
        pending = GaugeMetricFamily("telemetry_remote_write_pending_samples", "Samples queued or in flight now.",
                                    labels=E)
        capacity = GaugeMetricFamily("telemetry_remote_write_queue_capacity_samples", "The queue's bound "
                                     "(--remote-write-queue).", labels=E)
        last = GaugeMetricFamily("telemetry_remote_write_last_success_timestamp_seconds", "When the receiver last "
                                 "accepted a request (Unix time; 0: never).", labels=E)
        for endpoint in self.endpoints:
            ids = [endpoint.name]
            with endpoint.lock:
                c = endpoint.counters
                queued.add_metric(ids, c.queued)
                sent.add_metric(ids, c.sent)
                for reason in DROP_REASONS:
                    dropped.add_metric([*ids, reason], c.dropped[reason])
                retries.add_metric(ids, c.retries)
                requests.add_metric(ids, c.requests)
                last.add_metric(ids, c.last_success_s)
            pending.add_metric(ids, endpoint.queued())
            capacity.add_metric(ids, self.config.queue_samples)
        with self._lock:
            order = CounterMetricFamily("telemetry_remote_write_out_of_order_samples", "Samples not sent because "
                                        "their series already had a sample at or after their time.", labels=[])
            order.add_metric([], self.out_of_order)
            late = CounterMetricFamily("telemetry_remote_write_late_rows", "Late deltas merged into windows already "
                                       "written: kept in the root's store, not re-sent.", labels=[])
            late.add_metric([], self.late_rows)
            replayed = GaugeMetricFamily("telemetry_remote_write_replayed_rows", "Windows read back from the store "
                                         "at start (finalised after the watermark, unsent when the root last "
                                         "stopped), and those left out past the queue's bound.", labels=["kind"])
            replayed.add_metric(["resent"], self.replayed_rows)
            replayed.add_metric(["skipped"], self.replay_skipped_rows)
            mark = GaugeMetricFamily("telemetry_remote_write_watermark_seconds", "Every window finalised up to this "
                                     "time (Unix) has been sent or counted as dropped by every endpoint.", labels=[])
            mark.add_metric([], (self.watermark_ns or 0) / 1e9)
        yield from (queued, sent, dropped, retries, requests, pending, capacity, last, order, late, replayed, mark)
