"""The fleet's host indexes, handed out by the root (issue 28, docs/fleet.md "Host indexes").

An agent asks for its host's index at start (`Collector.RegisterHost`, passed up by each collector); the root
answers from one table kept in its store, keyed by the host's name (the identity its devices are named by in the
fleet's windows, and the one the run ledger's claims are made with, collectors/common/fleet.py `host_claim`):

* a host seen before gets its index back (an agent restart, a root restart: the table is in the SQLite file);
* a new host gets the next index never given out (never one recorded for another host, nor one the run ledger
  saw claimed by an agent started with ``--host-index``), so two hosts never share one: no hash, no bitmap;
* an explicit ``--host-index N`` is recorded for its host, so the root never hands N to anyone else, and is
  refused when another host holds N;
* a registration naming a host that another machine holds (same name, another /etc/machine-id, both known) is
  refused: those two hosts would otherwise be merged as one.

Indexes are never given back: a host that left keeps its index, as the run ledger keeps its claim on its sources.
Thread-safe (its own lock; the store's for the writes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from collectors.common.fleet import FLEET_JOB, MAX_HOST_INDEX
from collectors.root.store import Store
from telemetry.v1 import forward_pb2

log = logging.getLogger(__name__)

_TABLE = """CREATE TABLE IF NOT EXISTS host_indexes (
    idx INTEGER PRIMARY KEY, host TEXT NOT NULL, machine_id TEXT NOT NULL, explicit INTEGER NOT NULL,
    assigned_ns INTEGER NOT NULL)"""
MAX_HOST_NAME = 256
MAX_MACHINE_ID = 128


class HostIndexes:
    """The root's table of host indexes. `claimed` maps the host indexes the tree's run ledger saw claimed (agents
    given --host-index that never registered) to the host claiming each: never handed to another host."""

    def __init__(self, store: Store, claimed: Callable[[], dict[int, str]]) -> None:
        self.store = store
        self.claimed = claimed
        self._lock = threading.Lock()
        self._by_index: dict[int, tuple[str, str, bool]] = {}  # index -> (host, machine id, explicit)
        self._by_host: dict[str, int] = {}  # host -> its latest index
        with store.transaction() as db:
            db.execute(_TABLE)
            found = db.execute("SELECT idx, host, machine_id, explicit FROM host_indexes "
                               "ORDER BY assigned_ns, idx").fetchall()
        for index, host, machine_id, explicit in found:
            self._by_index[index] = (host, machine_id, bool(explicit))
            self._by_host[host] = index

    def register(self, request: forward_pb2.HostRegistration) -> forward_pb2.HostAssignment:
        host, machine_id = request.host, request.machine_id
        if not host or len(host) > MAX_HOST_NAME or ":" in host or not host.isprintable():
            return self._refuse(host, f"host name {host[:64]!r} is not usable (1..{MAX_HOST_NAME} printable "
                                      "characters, no ':')")
        if len(machine_id) > MAX_MACHINE_ID or not machine_id.isprintable():
            return self._refuse(host, "machine id is not usable (at most 128 printable characters)")
        explicit = request.explicit_index if request.HasField("explicit_index") else None
        if explicit is not None and explicit > MAX_HOST_INDEX:
            return self._refuse(host, f"host index {explicit} is outside 0..{MAX_HOST_INDEX}")
        with self._lock:
            known = self._by_host.get(host)
            if known is not None:
                _, held_machine, _ = self._by_index[known]
                if machine_id and held_machine and machine_id != held_machine and explicit is None:
                    return self._refuse(host, f"host {host!r} (index {known}) is held by another machine "
                                              f"({held_machine[:12]}..., this one is {machine_id[:12]}...): two "
                                              "machines under one --host-id would be merged as one host; give "
                                              "this one its own --host-id (a reinstalled host: start it once "
                                              f"with --host-index {known})")
            if explicit is not None:
                holder = self._by_index.get(explicit)
                if holder is not None and holder[0] != host:
                    return self._refuse(host, f"host index {explicit} is held by host {holder[0]!r}: give each "
                                              "host its own --host-index, or leave it out (the tree assigns one)")
                if holder is None or holder[1] != machine_id or not holder[2]:
                    self._record(explicit, host, machine_id, True)
                    log.info("host %s registered with its own --host-index %d", host, explicit)
                return forward_pb2.HostAssignment(index=explicit, known=holder is not None)
            if known is not None:
                if machine_id and not self._by_index[known][1]:
                    self._record(known, host, machine_id, self._by_index[known][2])
                return forward_pb2.HostAssignment(index=known, known=True)
            taken = self.claimed()
            before = [index for index, holder in taken.items() if holder == host]
            if before:  # it ran with --host-index before it registered: it keeps that index
                self._record(before[0], host, machine_id, True)
                return forward_pb2.HostAssignment(index=before[0], known=True)
            index = max([*self._by_index, *taken], default=-1) + 1
            if index > MAX_HOST_INDEX:
                return self._refuse(host, f"every host index (0..{MAX_HOST_INDEX}) is taken")
            self._record(index, host, machine_id, False)
        log.info("host %s is fleet host index %d (handed out by the root)", host, index)
        return forward_pb2.HostAssignment(index=index, known=False)

    def _record(self, index: int, host: str, machine_id: str, explicit: bool) -> None:
        """Persist first, then remember (caller holds the lock): an index is handed out only once it is in the
        file, so a root restart can never hand it to another host."""
        with self.store.transaction() as db:
            db.execute(_TABLE)  # again: a file replaced under the root (StoreLost) is a fresh one
            db.execute("INSERT OR REPLACE INTO host_indexes VALUES (?,?,?,?,?)",
                       (index, host, machine_id, int(explicit), time.time_ns()))
        self._by_index[index] = (host, machine_id, explicit)
        self._by_host[host] = index

    def _refuse(self, host: str, reason: str) -> forward_pb2.HostAssignment:
        log.warning("host index registration of %r refused: %s", host[:64], reason)
        return forward_pb2.HostAssignment(refused=reason)

    def table(self) -> list[dict[str, object]]:
        """Every index handed out or recorded, for the API (GET /api/v1/hosts → host_indexes)."""
        with self._lock:
            return [{"index": index, "host": host, "explicit": explicit}
                    for index, (host, _, explicit) in sorted(self._by_index.items())]


def ledger_claims(store: Store) -> dict[int, str]:
    """Host index -> the host that claimed its sources, from the run claims the root's ledger recorded (the
    ``runs`` table: one row per fleet source, its host named ``host:device``)."""
    with store.transaction() as db:
        found = db.execute("SELECT rank & ?, host FROM runs WHERE job=? GROUP BY rank & ?",
                           (MAX_HOST_INDEX, FLEET_JOB, MAX_HOST_INDEX)).fetchall()
    return {index: host.partition(":")[0] for index, host in found}
