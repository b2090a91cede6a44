"""Which ranks of which job each child covers, so that a child speaks only for those (issue 26 item 1).

A child's coverage of a job (its scoped name, with the attempt) is every rank its rank states ever named for
it - alive, stuck, dead or closed - since this tier first heard of the child: sticky, because a child forgets
a finished job before the last of its windows (or a resend of them) is through, and a window must not be
refused then. A rank the tier's run ledger (runs.py) already knows to run in some process counts for a child
only when that child names the same process, or when no other child covers it: a child that merely lists a rank
another child covers (without its process, or with another one) does not come to cover it. (Processes travel as
deltas, so a unit resent to a restarted parent names its ranks without them: it covers them then, as nobody else
does; tests/test_tree_e2e.py's chaos run restarts the root and the racks.)

First come is not for ever: a child that names a rank with the process the run ledger accepted for it (the real
agent, or the rack it is under) takes that rank from every other child that covers it without having named that
process (a child that named the rank first, before any agent registered it, or names it without a process):
those no longer speak for it. `CollectorService` counts each such loss in `bad_inputs` and logs it, naming both
children. What the first child sent before that stands (windows already taken in are not taken back).

Everything a child sends about ranks is checked against its coverage by `CollectorService`: windows (their
sources), captures (their rank), fingerprints (the ranks in their bitmaps). What is not covered is refused,
counted (`bad_inputs`) and logged, rate-limited. Jobs under HOST_JOB_PREFIX are a host's own hardware, whose
sources are its devices, not ranks: not checked here.

Bounded: at most `max_entries` (child, job) entries, the least recently noted forgotten first. Not
thread-safe: callers hold the node's lock.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from pyroaring import BitMap

from collectors.delivery.node import RankView
from telemetry.names import HOST_JOB_PREFIX

DEFAULT_MAX_ENTRIES = 65_536


@dataclass(frozen=True)
class Revoked:
    """Coverage of `ranks` of `job` taken from `child` because `claimant` named their accepted processes."""

    job: str
    child: str
    claimant: str
    ranks: BitMap


class Coverage:
    """Per (child, scoped job): the ranks the child covers."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        self.max_entries = max_entries
        self._covered: OrderedDict[tuple[str, str], BitMap] = OrderedDict()
        self._proven: dict[tuple[str, str], BitMap] = {}  # ranks the child named with the ledger's process

    def note(self, child: str, views: dict[str, RankView], processes: Callable[[str], Mapping[int, int]]
             ) -> list[Revoked]:
        """A child's rank states (by scoped job); `processes(job)`: the ledger's accepted process per rank.
        Returns the coverage this took from other children (`Revoked`), for the caller to count and log."""
        revoked: list[Revoked] = []
        for job, view in views.items():
            named = view.alive | view.stuck | view.dead | view.closed
            if not named:
                continue
            key = (child, job)
            covered = self._covered.get(key)
            if covered is None:
                covered = self._covered[key] = BitMap()
            new = named - covered
            known: Mapping[int, int] | None = None
            if new:
                known = processes(job)
                doubtful = BitMap(rank for rank in new if rank in known and view.processes.get(rank) != known[rank])
                if doubtful:
                    # Named without the process the ledger knows: taken only if no other child covers the rank.
                    # A child's rank states carry processes as deltas, so a unit resent to a restarted parent
                    # names its ranks without them; a child listing ranks another child covers must name them.
                    others = BitMap.union(BitMap(), *(ranks for (who, name), ranks in self._covered.items()
                                                      if name == job and who != child))
                    new -= doubtful & others
                covered |= new
            self._covered.move_to_end(key)
            if view.processes:
                known = processes(job) if known is None else known
                proven = BitMap(rank for rank, process in view.processes.items()
                                if rank in covered and known.get(rank) == process)
                if proven:
                    self._proven[key] = self._proven.get(key, BitMap()) | proven
                    revoked += self._revoke(child, job, proven)
        while len(self._covered) > self.max_entries:
            gone, _ = self._covered.popitem(last=False)
            self._proven.pop(gone, None)
        return revoked

    def _revoke(self, child: str, job: str, proven: BitMap) -> list[Revoked]:
        """`child` named the accepted process of the ranks `proven`: another child that covers them without having
        named that process (first come, before any agent registered them, or with no process) no longer does."""
        revoked = []
        for (who, name), ranks in self._covered.items():
            if name != job or who == child:
                continue
            taken = (ranks & proven) - self._proven.get((who, name), BitMap())
            if taken:
                ranks -= taken
                revoked.append(Revoked(job, who, child, taken))
        return revoked

    def uncovered(self, child: str, job: str, ranks: BitMap) -> BitMap:
        """The ranks of `ranks` that `child` does not cover for `job` (empty: it may speak for all)."""
        if job.startswith(HOST_JOB_PREFIX) or not ranks:
            return BitMap()
        covered = self._covered.get((child, job))
        return ranks - covered if covered is not None else BitMap(ranks)
