"""Which process ran each rank of each job attempt, as far as one tier knows (issue 17, docs/restarts.md).

Above the agent a part is told from a resend only by its window key and its sources (DESIGN §5): a part
whose sources a window already holds is absorbed as a duplicate and acknowledged durable. A second run that
reuses a job's name and attempt after the agents forgot the first one (an explicit attempt given twice, a
launcher that sets none) sends parts with the same keys and sources, so every tier would absorb its steps
as resends of the first run's and its ranks' `close()` would say True.

So each rank's process travels up with the rank states (`RankStates.processes`: a digest of host, pid and
process start time, made by the rank's agent), and every collector tier keeps, per (scoped job, rank), the
first process it heard of. A child that says another process runs an already-claimed rank has that rank's
windows refused (`CollectorService`), with a reason that travels down to the ranks, whose `close()` is then
False. The same process reconnecting (through another agent or parent, after a restart of either) claims
the same digest and is accepted. The root gives its ledger `recall` and `record` backed by its store, so it
remembers a job's processes for as long as it keeps the job; the other tiers forget a job with the rest of
what they keep for it, and their parent, which still knows, refuses in their place.

Not thread-safe: callers hold the node's lock.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace

from pyroaring import BitMap

from collectors.common.fleet import host_index_of, split_name
from telemetry.names import FLEET_JOB

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Claim:
    """One rank's process: its digest and the host it runs on (for the refusal's message), and the child that
    named it first here (for the warning; "" when recalled from the root's store)."""

    process: int
    host: str
    sender: str = field(default="", compare=False)


def process_digest(host: str, pid: int, start_ticks: int | None) -> int:
    """A rank process's identity across the tree: unlike a pid, it differs between two runs on one host
    (the start time) and between hosts. Never 0 (0 means unknown)."""
    text = f"{host}\0{pid}\0{start_ticks if start_ticks is not None else ''}".encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "little") or 1


class AcceptedProcesses(Mapping[int, int]):
    """The accepted process of each rank of a job, read through from the ledger's claims, not copied: a child's unit
    asks it for the few ranks its rank states name (collectors/delivery/coverage.py), and a copy of every rank's
    (`known` made one per unit: 16,384 entries at 16,384 ranks) cost O(world) per unit. Valid while the caller holds
    the node's lock, as the ledger."""

    __slots__ = ("_claims",)

    def __init__(self, claims: dict[int, Claim]) -> None:
        self._claims = claims

    def __getitem__(self, rank: int) -> int:
        return self._claims[rank].process

    def __contains__(self, rank: object) -> bool:
        return rank in self._claims

    def get(self, rank: int, default: int | None = None) -> int | None:  # type: ignore[override]  # Mapping.get's overloads, one lookup
        claim = self._claims.get(rank)
        return default if claim is None else claim.process

    def __iter__(self) -> Iterator[int]:
        return iter(self._claims)

    def __len__(self) -> int:
        return len(self._claims)


class RunLedger:
    """The first process heard of per (job, rank), and per child the ranks it claims for another process."""

    def __init__(self, recall: Callable[[str], dict[int, Claim]] | None = None,
                 record: Callable[[str, dict[int, Claim]], None] | None = None) -> None:
        self._recall = recall
        self._record = record
        self._runs: dict[str, dict[int, Claim]] = {}
        self._conflicts: dict[tuple[str, str], dict[int, tuple[Claim, Claim]]] = {}
        #: the fleet's host-index collisions seen here (a child naming, for a host index, another host than the one
        #: that holds it) and the fleet windows refused for them (collectors/common/fleet.py, docs/fleet.md)
        self.fleet_collisions = 0
        self.fleet_refused_windows = 0
        #: sources the parent refuses from this tier (another host holds them above), refused here from the child
        #: that named them: (child, job) -> source -> (the holder as far as known here, the child's claim)
        self._above: dict[tuple[str, str], dict[int, tuple[Claim, Claim]]] = {}
        #: claims on sources no child reports, by job: source -> when it was first seen unreported
        #: (forget_unreported)
        self._unreported: dict[str, dict[int, float]] = {}
        #: sources a child stopped covering since the last forget_unreported pass, by job (`dropped`): a child tier
        #: that forgot the host reporting them (its own agent gone past the timeout) no longer names them
        self._dropped: dict[str, BitMap] = {}

    def claim(self, sender: str, job: str, claims: dict[int, Claim]) -> bool:
        """A child's word on which process runs some ranks of `job` (a delta: ranks not named keep their
        standing). A rank already claimed by another process becomes refused from this child. True when a
        rank was claimed for the first time (the parent is to hear of it)."""
        if not claims:
            return False
        known = self._runs.get(job)
        if known is None:
            known = self._runs[job] = dict(self._recall(job)) if self._recall is not None else {}
        new: dict[int, Claim] = {}
        newly_refused: list[int] = []
        conflicts = self._conflicts.get((sender, job))
        for rank, claim in claims.items():
            if not claim.process:
                continue  # an agent that cannot tell: nothing to check
            first = known.get(rank)
            if first is None:
                known[rank] = new[rank] = replace(claim, sender=sender)
            elif first.process != claim.process:
                if conflicts is None:
                    conflicts = self._conflicts[(sender, job)] = {}
                if rank not in conflicts:
                    newly_refused.append(rank)
                conflicts[rank] = (first, claim)
                continue
            if conflicts:
                conflicts.pop(rank, None)
        if newly_refused and conflicts is not None and job == FLEET_JOB:
            self._fleet_collision(sender, newly_refused, conflicts)
        elif newly_refused and conflicts is not None:
            # One line per child and job, not per rank: a refused run of 16,384 ranks is one event.
            first, claim = conflicts[newly_refused[0]]
            log.warning("job %s: %s says %d rank(s) (e.g. rank %d, process %x on %s) run in other processes than "
                        "the ones that already ran them (rank %d: process %x on %s, named by %s); their windows are "
                        "refused", job, sender, len(newly_refused), newly_refused[0], claim.process,
                        claim.host or "?", newly_refused[0], first.process, first.host or "?",
                        first.sender or "an earlier child (the root's store)")
        if new and self._record is not None:
            try:
                self._record(job, new)
            except Exception:  # the store's own trouble is reported by its commits; memory still holds these
                log.exception("could not record the processes of job %s", job)
        return bool(new)

    def claims(self, job: str) -> dict[int, Claim]:
        """The accepted claims of `job` known here (a copy), hosts included."""
        return dict(self._runs.get(job, {}))

    def needs_recall(self, job: str) -> bool:
        """`job`'s remembered claims (the root's store) are still to be read before a claim about it is judged:
        the root reads them off its lock (collectors/root/reads.py) and hands them to `recalled`."""
        return self._recall is not None and job not in self._runs

    def recalled(self, job: str, claims: dict[int, Claim]) -> None:
        """The remembered claims of `job`, read without the node's lock: kept unless the job is known already."""
        self._runs.setdefault(job, dict(claims))

    def _fleet_collision(self, sender: str, sources: list[int], conflicts: dict[int, tuple[Claim, Claim]]) -> None:
        """A child names, for some host indexes, another host than the one holding them: one warning per index,
        naming both hosts and the children (racks) each came through, counted."""
        by_index: dict[int, list[int]] = {}
        for src in sources:
            by_index.setdefault(host_index_of(src), []).append(src)
        for index, srcs in by_index.items():
            first, claim = conflicts[srcs[0]]
            self.fleet_collisions += 1
            log.warning("fleet host index %d claimed twice: %s says host %s has it (%d device(s)), but host %s "
                        "holds it (named by %s); every fleet window from %s holding those devices is refused, with "
                        "the readings of %s's other hosts merged into it, until the two hosts have their own "
                        "--host-index", index, sender, split_name(claim.host)[0] or "?", len(srcs),
                        split_name(first.host)[0] or "?", first.sender or "an earlier child (the root's store)",
                        sender, sender)

    def collisions(self) -> list[dict[str, object]]:
        """The fleet's host-index collisions standing at this tier: one entry per (child, index)."""
        out: dict[tuple[str, int], tuple[Claim, Claim, int]] = {}
        for (sender, job), conflicts in sorted(self._conflicts.items()):
            if job != FLEET_JOB:
                continue
            for src, (first, claim) in sorted(conflicts.items()):
                key = (sender, host_index_of(src))
                out[key] = (first, claim, out[key][2] + 1 if key in out else 1)
        return [{"index": index, "host": split_name(claim.host)[0], "via": sender,
                 "held_by": split_name(first.host)[0], "held_via": first.sender or None, "devices": devices}
                for (sender, index), (first, claim, devices) in out.items()]

    def refused_above(self, job: str, sources: list[int]) -> None:
        """The parent refused these sources of `job` from this tier because another host holds them further up (a
        fleet host index claimed in two racks): refuse them here from the child that named them, so that this
        tier's merged windows leave them out and its other children's readings reach the parent again."""
        known = self._runs.get(job, {})
        named: dict[str, list[int]] = {}
        for src in sources:
            claim = known.get(src)
            if claim is None or not claim.sender:
                continue
            above = self._above.setdefault((claim.sender, job), {})
            if src not in above:
                above[src] = (Claim(0, "a host under another child of the parent", sender="the parent"), claim)
                named.setdefault(claim.sender, []).append(src)
        for child, srcs in named.items():
            log.warning("job %s: the parent refuses %d source(s) that %s named (e.g. %d, %s): another host holds "
                        "them further up; refused here from %s from now on", job, len(srcs), child, srcs[0],
                        known[srcs[0]].host or "?", child)

    def refused(self, sender: str, job: str) -> dict[int, tuple[Claim, Claim]]:
        """Ranks of `job` whose windows from `sender` are refused: rank -> (the first claim, the child's)."""
        own, above = self._conflicts.get((sender, job)), self._above.get((sender, job))
        if not above:
            return own or {}
        return {**above, **own} if own else above

    def known(self, job: str) -> AcceptedProcesses:
        """The accepted process of each rank of `job`, remembered ones included (the root's store): what a child
        must name to cover a rank (collectors/delivery/coverage.py), also after this tier forgot the job. A view of
        the ledger (no copy): read it under the node's lock, before the ledger changes."""
        known = self._runs.get(job)
        if known is None:
            known = self._runs[job] = dict(self._recall(job)) if self._recall is not None else {}
        return AcceptedProcesses(known)

    def processes(self, job: str) -> dict[int, int]:
        """The accepted process of each rank of `job` known here (what this tier tells its parent)."""
        return {rank: claim.process for rank, claim in self._runs.get(job, {}).items()}

    def release_host_index(self, index: int, live: BitMap, keep_host: str = "", contested: bool = False) -> int:
        """The fleet host index `index` was handed to another host (collectors/root/host_indexes.py gives an index
        back only once its old host is gone): forget the claims on its sources, but those of sources in `live` (a
        host reported here now keeps its claim: should two live hosts name one index, the ledger still refuses the
        second), those contested (a collision standing here stays refused) and those by `keep_host` (the host it was
        handed to). With `contested` (the root, whose stored claims are all released with the index: its memory must
        match them) contested claims are forgotten too; the collision's refusal itself stands until its child names
        the source again. Returns how many claims were forgotten."""
        known = self._runs.get(FLEET_JOB)
        if not known:
            return 0
        kept = set() if contested else {src for table in (self._conflicts, self._above)
                                         for (_, job), conflicts in table.items() if job == FLEET_JOB
                                         for src in conflicts}
        gone = [src for src, claim in known.items() if host_index_of(src) == index and src not in live
                and src not in kept and split_name(claim.host)[0] != keep_host]
        for src in gone:
            del known[src]
        return len(gone)

    def holds(self, job: str) -> bool:
        """Some claim on `job` is known here."""
        return bool(self._runs.get(job))

    def dropped(self, job: str, sources: BitMap) -> None:
        """A child stopped covering `sources` of `job` (Node.child_states: they left its rank states). A rack drops a
        host's sources when it forgets the host's agent (gone past its timeout), so a tier above racks learns there
        that the host went, not an idle timeout later: `forget_unreported` forgets such a claim at its next pass
        when no child reports the source then. Not noted at the root (the ledger that recalls its claims from the
        store): its stored claims are the authority and are never forgotten for being unreported."""
        if self._recall is None and job in self._runs:
            self._dropped.setdefault(job, BitMap()).update(sources)

    def dropping(self, job: str) -> bool:
        """Some source of `job` was dropped by a child since the last `forget_unreported` pass."""
        return bool(self._dropped.get(job))

    def forget_unreported(self, job: str, reported: BitMap, now: float, after_s: float,
                          departed: frozenset[str] = frozenset()) -> int:
        """Forget the claims on sources of `job` that no child has reported (`reported`: the sources this tier's
        children name now) for `after_s` seconds, but contested ones (a collision standing here stays refused).

        Below the root only (the fleet's job): a host index given back is released on its new host's registration
        path only, and a rack off that path that knew the old host would refuse the new host as a second claimant
        (its agent failing over to --fallback-parent). A claim forgotten here is still held by the root's ledger
        (its stored claims are the authority): a second claimant of a live host's index is refused there. Claims
        made by a child in `departed` (forgotten just now, gone past the same timeout), and claims on sources a child
        stopped covering (`dropped`: a rack that forgot the host's agent), go at once when no child reports their
        source: the root sees such a host unreported only from that moment on, so it can give the index back no
        sooner. Returns how many claims were forgotten."""
        known = self._runs.get(job)
        dropped = self._dropped.pop(job, BitMap())
        if not known:
            self._unreported.pop(job, None)
            return 0
        unseen = self._unreported.setdefault(job, {})
        for src in known:
            if src in reported:
                unseen.pop(src, None)
            else:
                unseen.setdefault(src, now)
        for src in [src for src in unseen if src not in known]:
            del unseen[src]
        due = [src for src, since in unseen.items()
               if now - since >= after_s or known[src].sender in departed or src in dropped]
        if not due:
            return 0
        contested = {src for table in (self._conflicts, self._above) for (_, name), conflicts in table.items()
                     if name == job for src in conflicts}
        gone = [src for src in due if src not in contested]
        for src in gone:
            del known[src]
            del unseen[src]
        return len(gone)

    def forget_job(self, job: str) -> None:
        self._runs.pop(job, None)
        self._unreported.pop(job, None)
        self._dropped.pop(job, None)
        for key in [key for key in self._conflicts if key[1] == job]:
            del self._conflicts[key]
        for key in [key for key in self._above if key[1] == job]:
            del self._above[key]

    def forget_child(self, sender: str) -> None:
        for key in [key for key in self._conflicts if key[0] == sender]:
            del self._conflicts[key]
        for key in [key for key in self._above if key[0] == sender]:
            del self._above[key]


def refusal_reason(job: str, attempt: int, rank: int, first: Claim) -> str:
    """What the ranks of a refused run are told (it reaches their run.close() and its log); for the fleet's
    hardware, what a host claiming another's index is told (collectors/common/fleet.py)."""
    if job == FLEET_JOB:
        return (f"fleet source {rank} (host index {host_index_of(rank)}) is already claimed by {first.host or '?'}: "
                "give each host its own --host-index (or one --host-registry file to all agents)")
    return (f"rank {rank} of job {job!r} attempt {attempt} already ran in another process (on host "
            f"{first.host or '?'}): a new run under the same job name needs a new attempt "
            "(telemetry.init(attempt=...) or TELEMETRY_ATTEMPT; docs/restarts.md)")
