"""The root's view of restarts (docs/restarts.md): a `restart` event per new attempt, goodput on /metrics.

RestartWatch sees every finalised row; the first step window of an attempt adopted as its job's latest
(adoption.py) whose job has an earlier adopted attempt opens an info event `restart` on the new attempt, with
the downtime (the previous attempt's last step to this one's first) and the steps it will replay (the
previous attempt's last step, down to this one's first). GoodputMetrics exports each live job's goodput
(collectors/root/goodput.py) to Prometheus, labelled by the job's name only (goodput is the job's, all its
attempts together), computed from the store at most every `refresh_s` per job (it reads every step window of
the job).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from contextlib import closing

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from collectors.common.attempts import split
from collectors.common.rows import Row
from collectors.detectors.events import EventLog
from collectors.root.adoption import Adoption
from collectors.root.goodput import Goodput, goodput
from collectors.root.store import Store

log = logging.getLogger(__name__)

KIND = "restart"
REFRESH_S = 10.0


class RestartWatch:
    """Opens a `restart` event for each new attempt of a job adopted as its latest (adoption.py): call `on_rows`
    after each commit and `check` with the attempts adopted outside one."""

    def __init__(self, store: Store, events: EventLog, adoption: Adoption) -> None:
        self.store = store
        self.events = events
        self.adoption = adoption
        self._seen: set[str] = set()  # scoped jobs already looked at (forgotten with the attempt)
        self._lock = threading.Lock()

    def on_rows(self, rows: Iterable[Row]) -> None:
        self.check({row.key.job for row in rows if row.key.is_step})

    def check(self, names: Iterable[str]) -> None:
        """Look at those of `names` (scoped) not looked at yet that are adopted: an attempt not adopted (yet)
        opens no event, and is looked at again when it is."""
        new = []
        with self._lock:
            for name in names:
                if name not in self._seen and name in self.adoption.adopted(split(name)[0]):
                    self._seen.add(name)
                    new.append(name)
        for scoped in new:
            job, attempt = split(scoped)
            with closing(self.store.reader()) as db:
                figures = goodput(db, job)
            attempts = figures["attempts"]
            mine = [i for i, a in enumerate(attempts) if a["attempt"] == attempt]
            if not mine:
                with self._lock:  # adopted before its first step was stored: looked at again with its rows
                    self._seen.discard(scoped)
                continue
            if mine[0] == 0:
                continue  # the job's first attempt: no restart
            now, before = attempts[mine[0]], attempts[mine[0] - 1]
            replay = max(0, before["last_step"] - now["first_step"] + 1)
            self.events.raise_(KIND, scoped, step=now["first_step"], severity="info", detail={
                "summary": f"attempt {attempt} of job {job} started at step {now['first_step']} after "
                           f"{now['downtime_s']:.1f} s down; {replay} step(s) of attempt {before['attempt']} "
                           "to replay",
                "attempt": attempt, "previous_attempt": before["attempt"], "downtime_s": now["downtime_s"],
                "steps_replayed": replay, "world_size": now["world_size"],
                "previous_world_size": before["world_size"], "previous_last_step": before["last_step"],
                "previous_ended_by": before.get("ended_by")})

    def forget(self, scoped: str) -> None:
        with self._lock:
            self._seen.discard(scoped)


class GoodputMetrics:
    """A Prometheus collector: goodput figures per live job (by the job's name, all attempts together)."""

    def __init__(self, store: Store, jobs: Callable[[], Iterable[str]], refresh_s: float = REFRESH_S) -> None:
        self.store = store
        self.jobs = jobs
        self.refresh_s = refresh_s
        self._cache: dict[str, tuple[float, Goodput]] = {}
        self._lock = threading.Lock()

    def _figures(self, job: str, now: float) -> Goodput:
        cached = self._cache.get(job)
        if cached is not None and now - cached[0] < self.refresh_s:
            return cached[1]
        with closing(self.store.reader()) as db:
            figures = goodput(db, job)
        self._cache[job] = (now, figures)
        return figures

    def collect(self) -> Iterable[Metric]:
        ratio = GaugeMetricFamily("telemetry_goodput_ratio", "Productive step time over wall time since the job's "
                                  "first step, all attempts (docs/restarts.md).", labels=["job"])
        seconds = CounterMetricFamily("telemetry_goodput_seconds", "Wall time since the job's first step by what "
                                      "it went to (kind: productive, lost, restart_downtime; docs/restarts.md).",
                                      labels=["job", "kind"])
        restarts = CounterMetricFamily("telemetry_restarts", "Attempts of the job after its first.", labels=["job"])
        replay = GaugeMetricFamily("telemetry_goodput_replay_seconds", "The part of the productive time spent "
                                   "running again steps an earlier attempt had run (docs/restarts.md).",
                                   labels=["job"])
        replayed = CounterMetricFamily("telemetry_goodput_steps_replayed", "Steps run again by a later attempt, "
                                       "summed over the job's attempts (docs/restarts.md).", labels=["job"])
        now = time.monotonic()
        live = sorted({split(name)[0] for name in self.jobs() if not name.startswith("_")})
        with self._lock:
            self._cache = {job: entry for job, entry in self._cache.items() if job in live}
            for job in live:
                try:
                    figures = self._figures(job, now)
                except Exception:  # a scrape must not fail on one job's store read
                    log.exception("goodput of job %r", job)
                    continue
                if not figures["attempts"]:
                    continue
                if figures["goodput"] is not None:
                    ratio.add_metric([job], figures["goodput"])
                for kind, value in (("productive", figures["productive_s"]), ("lost", figures["lost_s"]),
                                    ("restart_downtime", figures["restart_downtime_s"])):
                    seconds.add_metric([job, kind], value)
                restarts.add_metric([job], figures["restarts"])
                replay.add_metric([job], figures["replay_s"])
                replayed.add_metric([job], sum(a["steps_replayed"] for a in figures["attempts"]))
        return [ratio, seconds, restarts, replay, replayed]
