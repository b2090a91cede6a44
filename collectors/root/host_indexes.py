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
  refused: those two hosts would otherwise be merged as one. Where machine ids cannot tell (none, as in some
  containers, or one cloned with an image), the agent's installation id does (`instance`: a random id the agent
  writes once under --id-file and keeps across restarts): another installation under a held name is refused too,
  while any tier reports the holder's sources (`live`) or it was seen in the last TAKEOVER_AFTER_NS; after that,
  the new installation takes the name over (the same machine whose id file was lost with its container).

An index is given back only when nothing can tell its old host from a new one: an index handed out by the tree
(never an explicit one) whose host no tier reports any more (`live`: the fleet sources the root's children report
now) and has not been seen for `reuse_after_s` (by default as long as the store keeps the fleet's windows, their
1 h rollups included, collectors/root/retention.py: by then no stored window holds the old host's readings, so
none can merge the two hosts' readings under one source). A new host is then handed the lowest such index (dense
indexes keep the fleet windows' sources bitmaps a few runs), the old host's row and the run ledger's claims on
its sources are released (`release`), and only then the new host's row is committed. A host is seen while its
sources are live (`note_seen`, from the root's sweep; persisted at most once an hour per index, so a root
restart loses at most an hour of it). Should the old host come back after all, it is a second claimant of its
sources and refused at the first tier that sees both, never merged (docs/fleet.md "Bad input"): it registers
again at its next start and gets an index of its own.
Thread-safe (its own lock; the store's for the writes).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from collectors.common.fleet import FLEET_JOB, MAX_HOST_INDEX
from collectors.root.store import Store
from telemetry.v1 import forward_pb2

log = logging.getLogger(__name__)

_TABLE = """CREATE TABLE IF NOT EXISTS host_indexes (
    idx INTEGER PRIMARY KEY, host TEXT NOT NULL, machine_id TEXT NOT NULL, explicit INTEGER NOT NULL,
    assigned_ns INTEGER NOT NULL, seen_ns INTEGER NOT NULL DEFAULT 0, instance TEXT NOT NULL DEFAULT '')"""
SEEN_PERSIST_NS = 3600 * 10**9  # an index's last sight is written at most this often (a root restart loses < 1 h)
STARTUP_QUIET_NS = 3600 * 10**9  # after a start, how long the root gives no index back (live hosts reconnect first)
# Another agent installation takes a held name over only once its holder was not seen for this long (registered, or
# its sources reported: `live` lags a registration by the host's first readings, so "not live" alone would let a
# second machine take over a name whose first machine registered a moment ago, and merge the two).
TAKEOVER_AFTER_NS = 120 * 10**9
MAX_HOST_NAME = 256
MAX_MACHINE_ID = 128


class HostIndexes:
    """The root's table of host indexes. `claimed` maps the host indexes the tree's run ledger saw claimed (agents
    given --host-index that never registered) to the host claiming each: never handed to another host."""

    def __init__(self, store: Store, claimed: Callable[[], dict[int, str]], *,
                 live: Callable[[], set[int]] = set, release: Callable[[int], None] | None = None,
                 reuse_after_s: float | None = None, clock: Callable[[], int] = time.time_ns,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.store = store
        self.claimed = claimed
        self.live = live  # the host indexes whose sources some tier reports now
        self.release = release  # forget the run ledger's claims on an index's sources (memory and store)
        self.reuse_after_ns = None if not reuse_after_s else int(reuse_after_s * 1e9)  # None: never given back
        self.clock = clock  # wall clock (ns): sights are stored in the file and outlive a restart
        self.monotonic = monotonic  # never steps: the quiet first hour up is measured on it
        self.reused = 0  # indexes given back and handed to another host (telemetry_fleet_host_indexes_reused_total)
        # Nothing goes back until the root has been up for STARTUP_QUIET_NS (or the horizon, if shorter): after a
        # start no child has reported yet, and a live host must have reconnected and been seen before its index can
        # look unreported (a root down longer than the horizon would otherwise give live hosts' indexes away).
        # Measured on the monotonic clock: a wall clock stepped forward after the start (NTP) must not end it.
        self._quiet_until = monotonic() + min(STARTUP_QUIET_NS, self.reuse_after_ns or 0) / 1e9
        self._lock = threading.Lock()
        self._by_index: dict[int, tuple[str, str, bool]] = {}  # index -> (host, machine id, explicit)
        self._by_host: dict[str, int] = {}  # host -> its latest index
        self._seen: dict[int, int] = {}  # index -> when its host was last seen (its sources live, or registered)
        self._seen_stored: dict[int, int] = {}  # index -> the seen_ns in the file
        self._instance: dict[int, str] = {}  # index -> its host's agent installation id ("" unknown)
        with store.transaction() as db:
            self._create(db)
            found = db.execute("SELECT idx, host, machine_id, explicit, assigned_ns, seen_ns, instance FROM "
                               "host_indexes ORDER BY assigned_ns, idx").fetchall()
        for index, host, machine_id, explicit, assigned_ns, seen_ns, instance in found:
            self._by_index[index] = (host, machine_id, bool(explicit))
            self._instance[index] = instance
            self._by_host[host] = index
            self._seen[index] = self._seen_stored[index] = max(assigned_ns, seen_ns)

    @staticmethod
    def _create(db: Any) -> None:
        """The table, and its seen_ns and instance columns in a file made before indexes could be given back, or
        before agents sent an installation id."""
        db.execute(_TABLE)
        columns = {row[1] for row in db.execute("PRAGMA table_info(host_indexes)")}
        if "seen_ns" not in columns:
            db.execute("ALTER TABLE host_indexes ADD COLUMN seen_ns INTEGER NOT NULL DEFAULT 0")
        if "instance" not in columns:
            db.execute("ALTER TABLE host_indexes ADD COLUMN instance TEXT NOT NULL DEFAULT ''")

    def note_seen(self, indexes: set[int] | None = None) -> None:
        """The hosts of `indexes` (default: `live()`) are seen now: kept in memory, written when the file's sight of
        one is older than SEEN_PERSIST_NS (one transaction for all). Call it off the node's lock."""
        indexes = self.live() if indexes is None else indexes
        now = self.clock()
        with self._lock:
            known = [index for index in indexes if index in self._by_index]
            for index in known:  # a sight only moves forward: a clock stepped back never makes one older
                self._seen[index] = max(self._seen.get(index, 0), now)
            stale = [index for index in known if now - self._seen_stored.get(index, 0) >= SEEN_PERSIST_NS]
            if stale:
                with self.store.transaction() as db:
                    self._create(db)
                    db.executemany("UPDATE host_indexes SET seen_ns=? WHERE idx=?", [(now, i) for i in stale])
                for index in stale:
                    self._seen_stored[index] = now

    def _reusable(self, taken: dict[int, str]) -> int | None:
        """The lowest index that may be handed to a new host (caller holds the lock): handed out by the tree, its
        host reported by no tier now and not seen for reuse_after; None if there is none, or reuse is off."""
        now, live = self.clock(), None
        if self.reuse_after_ns is None or self.monotonic() < self._quiet_until:
            return None
        for index in sorted(self._by_index):
            host, _, explicit = self._by_index[index]
            if explicit or now - self._seen.get(index, now) < self.reuse_after_ns:
                continue
            if taken.get(index, host) != host:
                continue  # the ledger saw another host claim it: never handed out
            if live is None:
                live = self.live()
            if index not in live:
                return index
        return None

    def _give_back(self, index: int) -> str:
        """`index` leaves its old host (caller holds the lock): the ledger's claims on its sources released first,
        then its row deleted; returns the old host's name."""
        old = self._by_index[index][0]
        if self.release is not None:
            self.release(index)
        with self.store.transaction() as db:
            db.execute("DELETE FROM host_indexes WHERE idx=?", (index,))
        del self._by_index[index]
        self._seen.pop(index, None)
        self._seen_stored.pop(index, None)
        self._instance.pop(index, None)
        if self._by_host.get(old) == index:
            del self._by_host[old]
        self.reused += 1
        return old

    def register(self, request: forward_pb2.HostRegistration) -> forward_pb2.HostAssignment:
        host, machine_id, instance = request.host, request.machine_id, request.instance
        if not host or len(host) > MAX_HOST_NAME or ":" in host or not host.isprintable():
            return self._refuse(host, f"host name {host[:64]!r} is not usable (1..{MAX_HOST_NAME} printable "
                                      "characters, no ':')")
        if len(machine_id) > MAX_MACHINE_ID or not machine_id.isprintable():
            return self._refuse(host, "machine id is not usable (at most 128 printable characters)")
        if len(instance) > MAX_MACHINE_ID or not instance.isprintable():
            return self._refuse(host, "agent id is not usable (at most 128 printable characters)")
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
                held_instance = self._instance.get(known, "")
                if (instance and held_instance and instance != held_instance and explicit is None
                        and (machine_id == held_machine or not machine_id or not held_machine)
                        and (known in self.live() or self.clock() - self._seen.get(known, 0) < TAKEOVER_AFTER_NS)):
                    said = "both empty" if not machine_id and not held_machine else (
                        "equal: a machine id cloned with an image?" if machine_id == held_machine else "one empty")
                    return self._refuse(host, f"host {host!r} (index {known}) is held by another agent installation "
                                              f"({held_instance[:12]}..., this one is {instance[:12]}...; their "
                                              f"machine ids are {said}): two machines under one --host-id would be "
                                              "merged as one host; give this one its own --host-id (the same "
                                              "machine whose --id-file was lost: asked again, it takes the name "
                                              "over once no tier reports the other, or start it once with "
                                              f"--host-index {known})")
            if explicit is not None:
                holder = self._by_index.get(explicit)
                if holder is not None and holder[0] != host:
                    return self._refuse(host, f"host index {explicit} is held by host {holder[0]!r}: give each "
                                              "host its own --host-index, or leave it out (the tree assigns one)")
                if holder is None or holder[1] != machine_id or not holder[2] or \
                        self._instance.get(explicit, "") != instance:
                    self._record(explicit, host, machine_id, True, instance)
                    log.info("host %s registered with its own --host-index %d", host, explicit)
                return forward_pb2.HostAssignment(index=explicit, known=holder is not None)
            if known is not None:
                self._seen[known] = max(self._seen.get(known, 0), self.clock())
                held = self._by_index[known]
                if instance and self._instance.get(known) and instance != self._instance[known]:
                    log.warning("host %s (index %d): a new agent installation (%s..., was %s...) takes the name over: "
                                "the old one is reported by no tier (an id file lost with its container?)", host,
                                known, instance[:12], self._instance[known][:12])
                if (machine_id and not held[1]) or (instance and instance != self._instance.get(known)):
                    self._record(known, host, machine_id or held[1], held[2], instance or self._instance.get(known, ""))
                return forward_pb2.HostAssignment(index=known, known=True)
            taken = self.claimed()
            # It ran with --host-index before it registered: it keeps that index, unless the table holds it for
            # another host (the index was given back from this host: it gets an index of its own).
            before = [index for index, holder in taken.items() if holder == host
                      and self._by_index.get(index, (host,))[0] == host]
            if before:
                self._record(before[0], host, machine_id, True, instance)
                return forward_pb2.HostAssignment(index=before[0], known=True)
            index = self._reusable(taken)
            if index is not None:
                old = self._give_back(index)
                log.info("host index %d given back by host %s (not seen for %.0f days, reported by no tier) and "
                         "handed to host %s", index, old, self.reuse_after_ns / 86_400e9 if self.reuse_after_ns
                         else 0, host)
            else:
                index = max([*self._by_index, *taken], default=-1) + 1
            if index > MAX_HOST_INDEX:
                return self._refuse(host, f"every host index (0..{MAX_HOST_INDEX}) is taken")
            self._record(index, host, machine_id, False, instance)
        log.info("host %s is fleet host index %d (handed out by the root)", host, index)
        return forward_pb2.HostAssignment(index=index, known=False)

    def _record(self, index: int, host: str, machine_id: str, explicit: bool, instance: str = "") -> None:
        """Persist first, then remember (caller holds the lock): an index is handed out only once it is in the
        file, so a root restart can never hand it to another host."""
        now = self.clock()
        with self.store.transaction() as db:
            self._create(db)  # again: a file replaced under the root (StoreLost) is a fresh one
            db.execute("INSERT OR REPLACE INTO host_indexes (idx, host, machine_id, explicit, assigned_ns, seen_ns, "
                       "instance) VALUES (?,?,?,?,?,?,?)", (index, host, machine_id, int(explicit), now, now, instance))
        self._by_index[index] = (host, machine_id, explicit)
        self._instance[index] = instance
        self._by_host[host] = index
        self._seen[index] = self._seen_stored[index] = now

    def _refuse(self, host: str, reason: str) -> forward_pb2.HostAssignment:
        log.warning("host index registration of %r refused: %s", host[:64], reason)
        return forward_pb2.HostAssignment(refused=reason)

    def table(self) -> list[dict[str, object]]:
        """Every index handed out or recorded, for the API (GET /api/v1/hosts → host_indexes)."""
        with self._lock:
            return [{"index": index, "host": host, "explicit": explicit}
                    for index, (host, _, explicit) in sorted(self._by_index.items())]


def release_ledger_claims(store: Store, index: int) -> None:
    """Forget, in the file, the run ledger's claims on host index `index`'s fleet sources (given back)."""
    with store.transaction() as db:
        db.execute("DELETE FROM runs WHERE job=? AND (rank & ?)=?", (FLEET_JOB, MAX_HOST_INDEX, index))


def ledger_claims(store: Store) -> dict[int, str]:
    """Host index -> the host that claimed its sources, from the run claims the root's ledger recorded (the
    ``runs`` table: one row per fleet source, its host named ``host:device``)."""
    with store.transaction() as db:
        found = db.execute("SELECT rank & ?, host FROM runs WHERE job=? GROUP BY rank & ?",
                           (MAX_HOST_INDEX, FLEET_JOB, MAX_HOST_INDEX)).fetchall()
    return {index: host.partition(":")[0] for index, host in found}
