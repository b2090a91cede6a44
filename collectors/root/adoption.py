"""Which attempt of a job is its latest: an attempt is adopted only when it has the ranks to be one (issue 26 item 2).

Attempt numbers come from the launcher (docs/restarts.md) and nothing checks them: any process can say
`telemetry.init(job="train", rank=0, world_size=1, attempt=N)`. Were the highest number the job's latest, that
one process would become every default view of the job (`/jobs`, `/steps`, `/progress`, `/goodput`, the
`restart` event, `POST /forensics`). So the root *adopts* an attempt as its job's latest only when:

1. **its world is whole**: every rank of its world size registered through the tree (named by some child's rank
   states: alive, stuck, dead or closed), and
2. **the current latest no longer runs with as many ranks**: the job has no adopted attempt yet, or the adopted
   latest has fewer ranks alive (alive or stuck) than the new attempt registered.

A real restart passes both: its launcher starts every rank of the new world, and the ranks of the attempt before
have died or been killed (torchrun stops every worker before it restarts them), so few or none of them are
still alive, also when the new world is smaller (an elastic resize). A rogue process with a world of its own
passes 1 but not 2 while the job runs: one rank is not more than the job's live ranks. Where a failed host's
ranks still read alive (its agent gone, until the tier forgets it), a new attempt with more ranks than those
is adopted at once, one with fewer waits until they are forgotten.

The numbers themselves order nothing: attempts are read in the order they were adopted, so a huge number
adopted in a gap (between a crash and the restart, when the job has no live rank) is superseded by the next real
attempt, whatever its number. Adoption is kept in the store (table `adopted`), in order; before any attempt of a
job was adopted (its ranks still registering, or a store from before adoption) the views read every attempt
by number. Attempts not adopted are stored like any other and reachable by number (`?attempt=A`, `all`).

Not thread-safe on its own: `consider` runs on the finaliser's callback and the periodic check; both call it
under `self.lock`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing

from prometheus_client.core import GaugeMetricFamily, Metric
from pyroaring import BitMap

from collectors.common.attempts import like_prefix, split
from collectors.delivery.node import RankView
from collectors.root.store import Store

log = logging.getLogger(__name__)

MAX_CACHED_JOBS = 4096  # job names whose adopted attempts are kept in memory (the store has them all)


class Adoption:
    """The adopted attempts of each job, in order; `states(scoped)`: the root's rank states of an attempt."""

    def __init__(self, store: Store, states: Callable[[str], RankView]) -> None:
        self.store = store
        self.states = states
        self.lock = threading.Lock()
        self._order: OrderedDict[str, list[str]] = OrderedDict()  # job -> its adopted scoped names, in order
        self.waiting: dict[str, str] = {}  # scoped -> why it is not adopted yet: "registering" or "outrun"

    def adopted(self, job: str) -> list[str]:
        """`job`'s adopted attempts (scoped names), oldest first."""
        with self.lock:
            return list(self._adopted(job))

    def latest(self, job: str) -> str | None:
        """The scoped name of `job`'s latest adopted attempt (None: none yet)."""
        with self.lock:
            order = self._adopted(job)
            return order[-1] if order else None

    def consider(self, names: Iterable[str]) -> list[str]:
        """Adopt every attempt of `names` (scoped) that now has the ranks to be its job's latest; returns those
        adopted by this call."""
        adopted = []
        with self.lock:
            for name in sorted(set(names)):
                if name.startswith("_"):
                    continue  # the root's own and the fleet's pseudo-jobs
                job, _ = split(name)
                order = self._adopted(job)
                if name in order:
                    continue
                why = self._why_not(name, order[-1] if order else None)
                if why is not None:
                    if why[0] == "outrun" and self.waiting.get(name) != why[0]:
                        log.warning("attempt %s is not adopted as the latest of job %s: %s", name, job, why[1])
                    self.waiting[name] = why[0]
                    continue
                self.waiting.pop(name, None)
                self.store.save_adopted(name, time.time_ns())
                order.append(name)
                adopted.append(name)
                log.info("attempt %s adopted as the latest of job %s", name, job)
        return adopted

    def forget(self, name: str) -> None:
        """An attempt the tier forgot: what is kept about it waiting goes (its adoption stays in the store)."""
        with self.lock:
            self.waiting.pop(name, None)

    def _why_not(self, name: str, latest: str | None) -> tuple[str, str] | None:
        """None, or why `name` is not adopted: ("registering", ...) or ("outrun", ...)."""
        view = self.states(name)
        world = view.world_size
        registered = (view.alive | view.stuck | view.dead | view.closed) & BitMap(range(world))
        if world < 1 or len(registered) < world:
            return "registering", f"{len(registered)} of its {world} rank(s) registered"
        if latest is None:
            return None
        current = self.states(latest)
        live = len(current.alive | current.stuck)
        if live >= len(registered):
            return "outrun", (f"the latest attempt {latest} still runs {live} rank(s), this one has "
                              f"{len(registered)}: an attempt takes over with more ranks than the latest still runs")
        return None

    def _adopted(self, job: str) -> list[str]:
        order = self._order.get(job)
        if order is None:
            prefix = like_prefix(job)
            with closing(self.store.reader()) as db:
                order = [str(name) for name, in db.execute(
                    "SELECT job FROM adopted WHERE job=? OR substr(job, 1, ?)=? ORDER BY rowid",
                    (job, len(prefix), prefix)) if split(str(name))[0] == job]
            self._order[job] = order
            while len(self._order) > MAX_CACHED_JOBS:
                self._order.popitem(last=False)
        self._order.move_to_end(job)
        return order


class LatestAttempts:
    """A Prometheus collector: `telemetry_attempt_latest{job, attempt}`, 1 for the attempt adopted as its job's
    latest and 0 for the job's other live attempts, so the dashboard opens on the adopted attempt rather than on
    the highest number (which any process can claim). A job none of whose attempts is adopted yet has every live
    attempt at 0."""

    NAME = "telemetry_attempt_latest"
    HELP = ("1 for the attempt adopted as its job's latest (docs/restarts.md), 0 for the job's other live attempts.")

    def __init__(self, adoption: Adoption, jobs: Callable[[], Iterable[str]]) -> None:
        self.adoption = adoption
        self.jobs = jobs

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.NAME, self.HELP, labels=["job", "attempt"])

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(self.NAME, self.HELP, labels=["job", "attempt"])
        live: dict[str, list[tuple[int, str]]] = {}
        for name in self.jobs():
            if not name.startswith("_"):
                job, attempt = split(name)
                live.setdefault(job, []).append((attempt, name))
        for job, attempts in sorted(live.items()):
            latest = self.adoption.latest(job)
            for attempt, name in sorted(attempts):
                family.add_metric([job, str(attempt)], 1 if name == latest else 0)
        yield family
