"""The root's HTTP JSON API (loopback by default): jobs, per-step figures, progress.

GET /api/v1/jobs
GET /api/v1/jobs/{job}/steps?metric=NAME&last=N&attempt=latest|all|A
GET /api/v1/jobs/{job}/progress
GET /api/v1/jobs/{job}/goodput
GET /api/v1/jobs/{job}/events?status=open|closed&kind=K&since_id=N&last=N (when detectors are attached)
GET /api/v1/jobs/{job}/events/{id}/forensics      the captures an event asked for (docs/forensics.md)
GET /api/v1/jobs/{job}/forensics/{request_id}     the captures an on-demand request asked for
POST /api/v1/jobs/{job}/forensics                 {"ranks": [...], "attempt": N}: ask for captures now
GET /api/v1/hosts?metric=M&k=N                     the fleet's hosts, the worst of the latest second (hosts.py)
GET /api/v1/hosts/{host}?seconds=N                 one host's devices, recent readings and events
GET /api/v1/detectors                              the detectors' settings: all jobs' override, each job's, in force
POST /api/v1/detectors                             {"section": {"option": value or null}}: change them for all jobs
GET|POST /api/v1/jobs/{job}/detectors              the same for one job (docs/detectors.md, runtime settings)
GET /healthz

With a token (`--api-token-file`), every path but /healthz (which says nothing but "up") needs
`Authorization: Bearer TOKEN`, /metrics included (Prometheus sends it with `authorization:
credentials_file:`); a request without it is answered 401.

Hostile clients (docs/reliability.md): a request must arrive whole (request line, headers and body) within
REQUEST_DEADLINE_S of its connection, else it is closed (with a 408 when its body is what was late); at most
MAX_CONNECTIONS connections at once and PER_CLIENT_CONNECTIONS (--api-client-connections) from one address
(more are answered 503 at once; behind a proxy or NAT every client is the proxy's address: docs/reliability.md);
a connection holds one of MAX_WORKERS workers only once its request has arrived, and /metrics and /healthz
have workers of their own (SCRAPE_WORKERS), so a busy JSON API never starves Prometheus; a POST body is at
most MAX_BODY_BYTES and MAX_JSON_DEPTH deep (413/400, never 500), and one shorter than its
Content-Length is a 400.
"""

from __future__ import annotations

import hmac
import io
import json
import logging
import socket
import sqlite3
import threading
import time
from collections.abc import Callable
from contextlib import closing
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from collectors.common.attempts import split
from collectors.common.transport import CannotListen, listen_problem
from collectors.root.goodput import Goodput, goodput, scoped_names, view_names
from collectors.root.store import Store
from telemetry.names import PROGRESS_METRIC

log = logging.getLogger(__name__)

MAX_LAST = 10_000
MAX_BODY_BYTES = 64 * 1024  # a POST body past this is refused (413) before it is read
MAX_WORKERS = 16          # JSON requests served at once; one more is answered 503 at once, not queued
SCRAPE_WORKERS = 4        # /metrics and /healthz served at once, apart from the JSON API's workers
MAX_CONNECTIONS = 128     # connections open at once (each has a thread while its request arrives)
PER_CLIENT_CONNECTIONS = 32  # of them from one client address
REQUEST_TIMEOUT_S = 5.0   # a connection idle this long (reading the request, or the answer) is closed
REQUEST_DEADLINE_S = 10.0  # the whole request (line, headers, body) must arrive within this of the connection
MAX_JSON_DEPTH = 32       # nesting of a POST body
SCRAPE_PATHS = frozenset({"/metrics", "/healthz"})


class ApiError(Exception):
    def __init__(self, status: HTTPStatus, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers or {}  # e.g. Retry-After with a 429


class RootApi:
    """Answers API requests from the store and the root's live view (`live(job)` gives liveness)."""

    def __init__(self, store: Store, live: Callable[[str], dict[str, object]], *,
                 events: Callable[[str, dict[str, list[str]]], object] | None = None,
                 forensics: Callable[[str, str], object] | None = None,
                 ask_forensics: Callable[[str, object], object] | None = None,
                 hosts: Callable[[list[str], dict[str, list[str]]], object] | None = None,
                 detector_settings: Callable[[str | None, object | None], object] | None = None) -> None:
        """The routes beyond the store's own, each None when this root serves none (RootServer passes Wiring's
        and HostsView's): GET /api/v1/jobs/{job}/events, GET .../events/{id}/forensics and .../forensics/{rid},
        POST /api/v1/jobs/{job}/forensics, GET /api/v1/hosts[/{host}], GET/POST [jobs/{job}/]detectors."""
        self.store = store
        self.live = live
        self.events = events
        self.forensics = forensics
        self.ask_forensics = ask_forensics
        self.hosts = hosts
        self.detector_settings = detector_settings

    def jobs(self) -> list[dict[str, object]]:
        """One entry per job (its attempts together): its latest attempt (the last adopted, adoption.py) and that
        attempt's world size, the last step of any attempt, how many attempts the store holds."""
        with closing(self.store.reader()) as db:
            rows = db.execute("SELECT j.job, j.world_size, (SELECT max(idx) FROM windows w WHERE w.job=j.job "
                              "AND w.width_ms=0) AS last_step FROM jobs j ORDER BY j.job").fetchall()
            try:
                adopted = [str(name) for name, in db.execute("SELECT job FROM adopted ORDER BY rowid")]
            except sqlite3.OperationalError:  # a store without the table
                adopted = []
        order = {name: i for i, name in enumerate(adopted)}  # later adopted: later
        jobs: dict[str, dict[str, Any]] = {}  # JSON-bound entries: numbers and None
        rank: dict[str, tuple[int, int]] = {}
        for row in rows:
            job, attempt = split(row["job"])
            entry = jobs.setdefault(job, {"job": job, "world_size": 0, "last_step": None, "attempt": -1, "attempts": 0})
            entry["attempts"] += 1
            standing = (order.get(row["job"], -1), attempt)  # adopted before any other: by number
            if job not in rank or standing > rank[job]:
                rank[job] = standing
                entry["attempt"], entry["world_size"] = attempt, row["world_size"]
            if row["last_step"] is not None and (entry["last_step"] is None or row["last_step"] > entry["last_step"]):
                entry["last_step"] = row["last_step"]
        return [jobs[job] for job in sorted(jobs)]

    def steps(self, job: str, metric: str, last: int, attempt: str = "latest") -> list[dict[str, object]]:
        """The last `last` steps of `metric`, each with its `attempt`: by default, per step, the latest attempt
        that ran it (a resumed job reads as one timeline); `all`: every attempt's run of each step (by step,
        then attempt); a number: that attempt only."""
        with closing(self.store.reader()) as db:
            if attempt == "latest":  # the attempts the job's views read, in their order (adoption.py)
                names = [name for name, _ in view_names(db, job)] or [job]
            else:
                names = [name for name, _ in scoped_names(db, job)] or [job]
            if attempt not in ("latest", "all"):
                names = [name for name in names if str(split(name)[1]) == attempt]
            found = []
            for name in names:
                found += [(split(name)[1], row) for row in db.execute(
                    "SELECT idx AS step, count, expected, missing, mean, stddev, min, argmin, max, argmax, top, "
                    "p50, p90, p99, p999, nonfinite_count, nonfinite_sources, late, sources, last_time_ns, "
                    "finalised_ns FROM windows WHERE job=? AND metric=? AND width_ms=0 ORDER BY idx DESC LIMIT ?",
                    (name, metric, last)).fetchall()]
        if attempt == "latest":
            later = {split(name)[1]: i for i, name in enumerate(names)}  # view_names' order: oldest first
            best: dict[int, tuple[int, object]] = {}
            for number, row in found:
                if row["step"] not in best or later[number] > later[best[row["step"]][0]]:
                    best[row["step"]] = (number, row)
            found = list(best.values())
        found.sort(key=lambda item: (item[1]["step"], item[0]))
        wanted = set(sorted({row["step"] for _, row in found})[-last:])
        out = []
        for number, row in found:
            if row["step"] not in wanted:
                continue
            item = dict(row)
            for name in ("missing", "top", "nonfinite_sources"):
                item[name] = json.loads(item[name])
            item["attempt"] = number
            out.append(item)
        return out

    def goodput(self, job: str) -> Goodput:
        with closing(self.store.reader()) as db:
            return goodput(db, job)

    def progress(self, job: str) -> dict[str, object]:
        with closing(self.store.reader()) as db:
            names = view_names(db, job)
        scoped = names[-1][0] if names else job  # the latest attempt's (adoption.py)
        result = self._progress(scoped)
        result["job"], result["attempt"] = split(scoped)
        return result

    def _progress(self, job: str) -> dict[str, object]:
        with closing(self.store.reader()) as db:
            row = db.execute(
                "SELECT idx, min, max, summary FROM windows WHERE job=? AND metric=? AND width_ms>0 "
                "ORDER BY idx DESC LIMIT 1", (job, PROGRESS_METRIC)).fetchone()
            last_step = db.execute("SELECT max(idx) FROM windows WHERE job=? AND width_ms=0", (job,)).fetchone()[0]
        result: dict[str, object] = {"job": job, "last_finalised_step": last_step}
        if row is not None:
            from telemetry.summary import Summary
            summary = Summary.from_bytes(row["summary"])
            low = summary.min
            result.update({
                "time_ms": row["idx"], "min_step": row["min"], "max_step": row["max"],
                "ranks_at_min": [s for v, s in summary.bottom() if v == low],
                "ranks_reporting": len(summary.sources),
            })
        result.update(self.live(job))
        return result

    def handle(self, path: str, query: dict[str, list[str]]) -> object:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts == ["healthz"]:
            return {"ok": True}
        if parts[:3] == ["api", "v1", "hosts"] and self.hosts is not None:
            return self.hosts(parts[3:], query)
        if parts == ["api", "v1", "detectors"] and self.detector_settings is not None:
            return self.detector_settings(None, None)
        if parts[:2] != ["api", "v1"] or len(parts) < 3 or parts[2] != "jobs":
            raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}")
        if len(parts) == 3:
            # Hosts' hardware lives under the pseudo-jobs _fleet (or _host:NAME): listed, and pointed at.
            return {"jobs": self.jobs(), "hosts": "/api/v1/hosts"}
        job = parts[3]
        if len(parts) == 5 and parts[4] == "steps":
            metric = query.get("metric", ["step_time"])[0]
            try:
                last = int(query.get("last", ["100"])[0])
            except ValueError:
                raise ApiError(HTTPStatus.BAD_REQUEST, "last must be an integer") from None
            if not 1 <= last <= MAX_LAST:
                raise ApiError(HTTPStatus.BAD_REQUEST, f"last must be in [1, {MAX_LAST}]")
            attempt = query.get("attempt", ["latest"])[0]
            if attempt not in ("latest", "all") and not (attempt.isdigit() and int(attempt) < 2**63):
                raise ApiError(HTTPStatus.BAD_REQUEST, "attempt must be latest, all or an attempt number")
            return {"job": job, "metric": metric, "steps": self.steps(job, metric, last, attempt)}
        if len(parts) == 5 and parts[4] == "progress":
            return self.progress(job)
        if len(parts) == 5 and parts[4] == "goodput":
            return self.goodput(job)
        if len(parts) == 5 and parts[4] == "events" and self.events is not None:
            return self.events(job, query)
        if len(parts) == 5 and parts[4] == "detectors" and self.detector_settings is not None:
            return self.detector_settings(job, None)
        if self.forensics is not None:
            if len(parts) == 7 and parts[4] == "events" and parts[6] == "forensics":
                if not parts[5].isdigit() or len(parts[5]) > 19:
                    raise ApiError(HTTPStatus.BAD_REQUEST, "an event id is a non-negative integer")
                return self.forensics(job, f"event-{int(parts[5])}")
            if len(parts) == 6 and parts[4] == "forensics":
                return self.forensics(job, parts[5])
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint: {path}")

    def handle_post(self, path: str, body: bytes) -> tuple[HTTPStatus, object]:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if (len(parts) == 5 and parts[:3] == ["api", "v1", "jobs"] and parts[4] == "forensics"
                and self.ask_forensics is not None):
            return HTTPStatus.ACCEPTED, self.ask_forensics(parts[3], parse_json_body(body))
        if self.detector_settings is not None:  # changed now: 200, with what the detectors run with
            if parts == ["api", "v1", "detectors"]:
                return HTTPStatus.OK, self.detector_settings(None, parse_json_body(body))
            if len(parts) == 5 and parts[:3] == ["api", "v1", "jobs"] and parts[4] == "detectors":
                return HTTPStatus.OK, self.detector_settings(parts[3], parse_json_body(body))
        raise ApiError(HTTPStatus.NOT_FOUND, f"no such endpoint: POST {path}")


OPEN_PATHS = frozenset({"/healthz"})  # answered without the token: liveness probes carry none


def parse_json_body(body: bytes, max_depth: int = MAX_JSON_DEPTH) -> object:
    """A POST body as JSON, or ApiError 400: not JSON, or nested deeper than `max_depth` (a 30,000-deep body
    raised RecursionError, a 500, before)."""
    depth = deepest = 0
    in_string = escaped = False
    for byte in body:  # bounded by MAX_BODY_BYTES; strings skipped so that "[[[" inside one counts nothing
        if in_string:
            if escaped:
                escaped = False
            elif byte == 0x5C:  # backslash
                escaped = True
            elif byte == 0x22:  # quote
                in_string = False
        elif byte == 0x22:
            in_string = True
        elif byte in (0x5B, 0x7B):  # [ {
            depth += 1
            deepest = max(deepest, depth)
        elif byte in (0x5D, 0x7D):
            depth -= 1
    if deepest > max_depth:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"the body is nested {deepest} deep; at most {max_depth}")
    try:
        return json.loads(body or b"{}")
    except (ValueError, RecursionError):
        raise ApiError(HTTPStatus.BAD_REQUEST, "the body must be JSON") from None


class _DeadlineReader(io.RawIOBase):
    """A connection's reading side that gives up at a deadline for the whole request, not per recv: a client
    trickling one byte every 2 s held a worker for ever under a per-recv timeout (issue 26)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the request did not arrive within {REQUEST_DEADLINE_S:g} s")
        self.sock.settimeout(min(left, REQUEST_TIMEOUT_S))
        return self.sock.recv_into(buffer)


def serve(api: RootApi, host: str, port: int, extra: dict[str, Callable[[], tuple[str, bytes]]] | None = None,
          token: str | None = None, per_client: int = PER_CLIENT_CONNECTIONS) -> BoundedHTTPServer:
    """Start the API on a daemon thread; `extra` maps paths (e.g. /metrics) to (content type, body) makers;
    with `token`, requests need it as a bearer token (see the module docstring); `per_client`: connections one
    client address may hold (--api-client-connections)."""
    routes = extra or {}
    if token is not None and not token.strip():
        raise ValueError("the API's token is empty: refusing to serve without authentication (give a token, or none)")
    expected = f"Bearer {token}".encode() if token else None

    class Handler(BaseHTTPRequestHandler):
        timeout = REQUEST_TIMEOUT_S
        server: BoundedHTTPServer

        def setup(self) -> None:
            super().setup()
            self.rfile.close()  # the socket's own reader; the socket stays open
            self.rfile = io.BufferedReader(_DeadlineReader(self.connection, time.monotonic() + REQUEST_DEADLINE_S))

        def _arrived(self, path: str) -> threading.BoundedSemaphore | None:
            """The request has arrived: the answer gets the socket's ordinary timeout, and a worker (of the
            scrapes' or the JSON API's); None (answered 503) when none is free."""
            self.connection.settimeout(REQUEST_TIMEOUT_S)
            slots = self.server.scrape_slots if path in SCRAPE_PATHS else self.server.slots
            if slots.acquire(blocking=False):
                return slots
            self.server.refused += 1
            self._send(HTTPStatus.SERVICE_UNAVAILABLE, "application/json", b'{"error": "too many requests at once"}',
                       {"Connection": "close", "Retry-After": "1"})
            self.close_connection = True
            return None

        def _authorised(self, path: str) -> bool:
            if expected is not None and path not in OPEN_PATHS and not hmac.compare_digest(
                    self.headers.get("Authorization", "").encode(errors="replace"), expected):
                self._send(HTTPStatus.UNAUTHORIZED, "application/json",
                           b'{"error": "missing or wrong bearer token"}', {"WWW-Authenticate": "Bearer"})
                return False
            return True

        def do_POST(self) -> None:
            url = urlparse(self.path)
            try:
                length = int(self.headers.get("Content-Length") or 0)
            except ValueError:
                length = -1
            if not 0 <= length <= MAX_BODY_BYTES:
                self.close_connection = True
                self._send(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, "application/json",
                           json.dumps({"error": f"the body must be 0 to {MAX_BODY_BYTES} bytes with a "
                                                "Content-Length"}).encode(), {"Connection": "close"})
                return
            try:
                body = self.rfile.read(length)
            except (TimeoutError, OSError):
                self.close_connection = True
                self._send(HTTPStatus.REQUEST_TIMEOUT, "application/json", json.dumps(
                    {"error": f"the body did not arrive within {REQUEST_DEADLINE_S:g} s"}).encode(),
                    {"Connection": "close"})
                return
            slots = self._arrived(url.path)
            if slots is None:
                return
            try:
                self._post(url.path, length, body)
            finally:
                slots.release()

        def _post(self, path: str, length: int, body: bytes) -> None:
            if not self._authorised(path):
                return
            try:
                if len(body) < length:
                    raise ApiError(HTTPStatus.BAD_REQUEST, f"the body has {len(body)} bytes; its Content-Length "
                                                           f"said {length}")
                status, payload = api.handle_post(path, body)
                self._send(status, "application/json", json.dumps(payload).encode())
            except ApiError as exc:
                self._send(exc.status, "application/json", json.dumps({"error": str(exc)}).encode(), exc.headers)
            except Exception:
                log.exception("API error on POST %s", path)
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "application/json",
                           json.dumps({"error": "internal error (logged by the root)"}).encode())

        def do_GET(self) -> None:
            url = urlparse(self.path)
            slots = self._arrived(url.path)
            if slots is None:
                return
            try:
                self._get(url.path, url.query)
            finally:
                slots.release()

        def _get(self, path: str, query: str) -> None:
            if not self._authorised(path):
                return
            try:
                if path in routes:
                    ctype, body = routes[path]()
                    self._send(HTTPStatus.OK, ctype, body)
                    return
                payload = api.handle(path, parse_qs(query))
                self._send(HTTPStatus.OK, "application/json", json.dumps(payload).encode())
            except ApiError as exc:
                self._send(exc.status, "application/json", json.dumps({"error": str(exc)}).encode(), exc.headers)
            except Exception:  # a bug must answer 500, not kill the server (the details go to the log only)
                log.exception("API error on %s", self.path)
                self._send(HTTPStatus.INTERNAL_SERVER_ERROR, "application/json",
                           json.dumps({"error": "internal error (logged by the root)"}).encode())

        def _send(self, status: HTTPStatus, ctype: str, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, fmt: str, *args: object) -> None:
            log.debug("api: " + fmt, *args)

    try:
        server = BoundedHTTPServer((host, port), Handler, per_client=per_client)
    except OSError:  # the probe in listen_problem says why, with the fix
        raise CannotListen(f"cannot serve the HTTP API on {host}:{port} (--api): "
                           f"{listen_problem(f'{host}:{port}')}") from None
    threading.Thread(target=server.serve_forever, name="root-api", daemon=True).start()
    return server


class BoundedHTTPServer(HTTPServer):
    """A thread per connection, at most MAX_CONNECTIONS at once and PER_CLIENT_CONNECTIONS per client address:
    past that a connection is answered 503 at once. A connection takes a worker (MAX_WORKERS for the JSON API,
    SCRAPE_WORKERS for /metrics and /healthz) only once its request has arrived (the handler's `_arrived`).

    Why: ThreadingHTTPServer starts a thread for every connection and never times one out, so a thousand
    idle connections held every thread and file descriptor the root had; and with workers taken at the
    connection, 16 clients trickling their headers held every worker, /metrics included (issue 26)."""

    request_queue_size = MAX_CONNECTIONS  # listen()'s backlog: 5 made a burst of connections wait for SYN retries

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler],
                 workers: int = MAX_WORKERS, per_client: int = PER_CLIENT_CONNECTIONS) -> None:
        if not 1 <= per_client <= MAX_CONNECTIONS:
            raise ValueError(f"connections per client must be in [1, {MAX_CONNECTIONS}], got {per_client}")
        super().__init__(address, handler)
        self.per_client = per_client
        self.slots = threading.BoundedSemaphore(workers)
        self.scrape_slots = threading.BoundedSemaphore(SCRAPE_WORKERS)
        self._open: dict[str, int] = {}  # client address -> connections open
        self._open_lock = threading.Lock()
        self.refused = 0

    def _admit(self, client: str) -> bool:
        with self._open_lock:
            if sum(self._open.values()) >= MAX_CONNECTIONS or self._open.get(client, 0) >= self.per_client:
                return False
            self._open[client] = self._open.get(client, 0) + 1
            return True

    def _leave(self, client: str) -> None:
        with self._open_lock:
            self._open[client] -= 1
            if not self._open[client]:
                del self._open[client]

    def process_request(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any) -> None:
        client = str(client_address[0])
        if not self._admit(client):
            self.refused += 1
            body = b'{"error": "too many connections at once"}'
            try:
                sock = request if isinstance(request, socket.socket) else request[1]  # TCP: always the socket
                sock.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                             b"Retry-After: 1\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
            except OSError:
                pass
            self.shutdown_request(request)
            return
        threading.Thread(target=self._serve_one, args=(request, client_address, client), daemon=True).start()

    def _serve_one(self, request: socket.socket | tuple[bytes, socket.socket], client_address: Any,
                   client: str) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self.shutdown_request(request)
            self._leave(client)
