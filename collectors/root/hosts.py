"""The fleet seen from the root's API (issue 28 item 2, docs/fleet.md "Looking at hosts").

GET /api/v1/hosts?metric=M&k=N         every host the root knows (fleet layout: name, index, devices; per-host
                                       layout: its `_host:` job), the worst of the latest second per metric, and
                                       the host-index collisions the root's ledger saw between its children
GET /api/v1/hosts/{host}?seconds=N     one host: its devices, its readings of the last N seconds that the fleet's
                                       windows kept (the exact top-k / bottom-k), and the events naming it

A fleet window keeps every source's membership (`reported`) and the exact k largest and smallest readings with
their sources, not every host's value: a host that was neither among the worst nor the best of a second shows
as reported, with its value bounded by the window's (k-th) values. That is the price of an input independent of
the number of hosts; the host's own agent logs and the per-host layout keep everything.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import closing
from http import HTTPStatus
from typing import Any

from collectors.common.fleet import host_index_of, slot_of, split_name
from collectors.delivery.node import Node
from collectors.root.api import ApiError
from collectors.root.store import Store
from telemetry.names import FLEET_JOB, HOST_JOB_PREFIX
from telemetry.summary import Summary

MAX_SECONDS = 600  # a host's view decodes every fleet window of the span: 3,600 s took 5.2 s at 2,000 hosts
MAX_K = 64
SECOND_MS = 1000
_HOST_JOB_END = HOST_JOB_PREFIX[:-1] + chr(ord(HOST_JOB_PREFIX[-1]) + 1)  # the first name past every `_host:` one


def _num(value: float) -> float | None:
    return value if value == value and abs(value) != float("inf") else None


class HostsView:
    """Reads the fleet's names from the root's node and its windows and events from the store."""

    def __init__(self, store: Store, node: Node,
                 host_indexes: Callable[[], list[dict[str, object]]] = list) -> None:
        self.store = store
        self.node = node
        self.host_indexes = host_indexes  # the indexes the root handed out (collectors/root/host_indexes.py)

    def handle(self, parts: list[str], query: dict[str, list[str]]) -> object:
        if not parts:
            return self.hosts(query.get("metric", [None])[0], _int(query, "k", 3, 1, MAX_K))
        if len(parts) == 1:
            return self.host(parts[0], _int(query, "seconds", 60, 1, MAX_SECONDS))
        raise ApiError(HTTPStatus.NOT_FOUND, "no such endpoint under /api/v1/hosts")

    def names(self) -> dict[int, str]:
        with self.node.lock:
            return self.node.hosts(FLEET_JOB)

    def hosts(self, metric: str | None = None, k: int = 3) -> dict[str, object]:
        names = self.names()
        hosts: dict[str, dict[str, Any]] = {}
        for src, name in sorted(names.items()):
            host, device = split_name(name)
            entry = hosts.setdefault(host, {"host": host, "layout": "fleet", "index": host_index_of(src),
                                            "devices": []})
            entry["devices"].append(device)
        handed_out = self.host_indexes()
        for held in handed_out:  # a registered host none of whose devices reported yet
            hosts.setdefault(str(held["host"]), {"host": held["host"], "layout": "fleet", "index": held["index"],
                                                 "devices": []})
        with closing(self.store.reader()) as db:
            for job in per_host_jobs(db):
                host = job[len(HOST_JOB_PREFIX):]
                hosts.setdefault(host, {"host": host, "layout": "per-host", "job": job})
            worst = self._worst(db, names, metric, k)
        with self.node.lock:
            runs = self.node.runs
            collisions = {"standing": runs.collisions(), "seen": runs.fleet_collisions,
                          "refused_windows": runs.fleet_refused_windows}
        return {"job": FLEET_JOB, "hosts": [hosts[h] for h in sorted(hosts)], "worst": worst,
                "index_collisions": collisions, "host_indexes": handed_out}

    def _worst(self, db, names: dict[int, str], metric: str | None, k: int) -> dict[str, object]:
        """Per metric, the latest fleet second: its k largest and smallest readings, named."""
        if metric is None:
            latest = db.execute("SELECT metric, max(idx) FROM windows WHERE job=? AND width_ms=? GROUP BY metric",
                                (FLEET_JOB, SECOND_MS)).fetchall()
        else:
            latest = db.execute("SELECT metric, max(idx) FROM windows WHERE job=? AND width_ms=? AND metric=?",
                                (FLEET_JOB, SECOND_MS, metric)).fetchall()
        out: dict[str, object] = {}
        for name, idx in latest:
            if idx is None:
                continue
            row = db.execute("SELECT summary FROM windows WHERE job=? AND metric=? AND width_ms=? AND idx=?",
                             (FLEET_JOB, name, SECOND_MS, idx)).fetchone()
            s = Summary.from_bytes(row[0])
            out[name] = {"time_ms": idx, "sources": len(s.sources), "mean": _num(s.mean),
                         "top": [_named(names, v, src) for v, src in distinct_sources(s.top(), k)],
                         "bottom": [_named(names, v, src) for v, src in distinct_sources(s.bottom(), k)]}
        return out

    def host(self, host: str, seconds: int) -> dict[str, object]:
        names = self.names()
        mine = {src: split_name(name)[1] for src, name in names.items() if split_name(name)[0] == host}
        with closing(self.store.reader()) as db:
            legacy = db.execute("SELECT 1 FROM windows WHERE job=? LIMIT 1", (HOST_JOB_PREFIX + host,)).fetchone()
            if not mine and legacy is None:
                raise ApiError(HTTPStatus.NOT_FOUND, f"no host {host!r} known to this root (GET /api/v1/hosts)")
            readings = self._readings(db, mine, seconds) if mine else []
            events = self._events(db, host)
        return {"host": host, "layout": "fleet" if mine else "per-host",
                "index": host_index_of(next(iter(mine))) if mine else None,
                "devices": [{"device": d, "source": src, "slot": slot_of(src)} for src, d in sorted(mine.items())],
                "readings": readings, "events": events,
                "job": FLEET_JOB if mine else HOST_JOB_PREFIX + host}

    def _readings(self, db, mine: dict[int, str], seconds: int) -> list[dict[str, object]]:
        newest = db.execute("SELECT max(idx) FROM windows WHERE job=? AND width_ms=?",
                            (FLEET_JOB, SECOND_MS)).fetchone()[0]
        if newest is None:
            return []
        found = db.execute("SELECT metric, idx, summary FROM windows WHERE job=? AND width_ms=? AND idx>? "
                           "ORDER BY metric, idx", (FLEET_JOB, SECOND_MS, newest - seconds * 1000)).fetchall()
        out = []
        for metric, idx, blob in found:
            s = Summary.from_bytes(blob)
            reported = [src for src in mine if src in s.sources]
            if not reported:
                continue
            kept = {src: v for v, src in [*s.top(), *s.bottom()] if src in mine}
            out.append({"metric": metric, "time_ms": idx,
                        "values": {mine[src]: kept.get(src) for src in reported},
                        "bounds": [_num(s.min), _num(s.max)]})
        return out

    @staticmethod
    def _events(db, host: str) -> list[dict[str, object]]:
        exists = db.execute("SELECT 1 FROM sqlite_master WHERE type='table' AND name='events'").fetchone()
        if exists is None:
            return []
        rows = db.execute("SELECT id, job, kind, key, status, severity, time, closed, hosts, detail FROM events "
                          "WHERE key LIKE ? OR job=? ORDER BY id DESC LIMIT 100",
                          (f"%@{host}", HOST_JOB_PREFIX + host)).fetchall()
        out = []
        for row in rows:
            if host not in json.loads(row["hosts"] or "[]") and row["job"] != HOST_JOB_PREFIX + host:
                continue
            out.append({"id": row["id"], "job": row["job"], "kind": row["kind"], "key": row["key"],
                        "status": row["status"], "severity": row["severity"], "time": row["time"],
                        "closed": row["closed"], "detail": json.loads(row["detail"] or "{}")})
        return out


def per_host_jobs(db: Any) -> list[str]:
    """The `_host:<host>` pseudo-jobs the store holds windows of (agents on `--host-index off`). They are in the
    windows table only: the jobs table keeps jobs with a world size, which a host's pseudo-job never has. Read as a
    skip scan of the windows' primary key (job first): one index seek per host, however many windows each holds."""
    found: list[str] = []
    after = HOST_JOB_PREFIX
    while True:
        (job,) = db.execute("SELECT min(job) FROM windows WHERE job > ? AND job < ?", (after, _HOST_JOB_END)).fetchone()
        if job is None:
            return found
        found.append(job)
        after = job


def distinct_sources(pairs: list[tuple[float, int]], k: int) -> list[tuple[float, int]]:
    """The first k pairs of distinct sources, in order: a host sampling more often than once a second (a
    --probe-interval under 1 s) puts several readings of one device into a fleet second, and the window's top-k
    would otherwise name that device k times (its most extreme reading is the one kept)."""
    seen: set[int] = set()
    out = []
    for value, src in pairs:
        if src not in seen:
            seen.add(src)
            out.append((value, src))
            if len(out) == k:
                break
    return out


def _named(names: dict[int, str], value: float, src: int) -> dict[str, object]:
    host, device = split_name(names.get(src, f"host{host_index_of(src)}:slot{slot_of(src)}"))
    return {"host": host, "device": device, "value": _num(value), "source": src}


def _int(query: dict[str, list[str]], name: str, default: int, lo: int, hi: int) -> int:
    text = query.get(name, [str(default)])[0]
    try:
        value = int(text)
    except ValueError:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name} must be an integer") from None
    if not lo <= value <= hi:
        raise ApiError(HTTPStatus.BAD_REQUEST, f"{name} must be in [{lo}, {hi}]")
    return value

