"""The root's side of crashes (docs/forensics.md, "When ranks die"): the rank exits family on /metrics, and the
crash event's forensics (the dead ranks' last words are its capture: nobody is left to ask).

    RankExitMetrics(lambda: detectors.crash.counts)    # telemetry_rank_exits_total{job, cause}
    last_words_capture(record, request_id, job, attempt) -> forensics_pb2.Capture
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from collectors.common.attempts import split
from telemetry.v1 import forensics_pb2

MAX_STACKS = 256 * 1024


class RankExitMetrics:
    """A Prometheus collector: ranks that ended, by job (its name, every attempt) and cause."""

    def __init__(self, counts: Callable[[], dict[tuple[str, str], int]]) -> None:
        self.counts = counts

    def describe(self) -> Iterable[Metric]:
        return [self._family()]

    @staticmethod
    def _family() -> CounterMetricFamily:
        return CounterMetricFamily("telemetry_rank_exits", "Ranks that ended without run.close(), by the cause "
                                   "their agent found (exception, fatal_signal, terminated, exit_code, exited, "
                                   "oom_killed, killed, unknown; docs/forensics.md).", labels=["job", "cause"])

    def collect(self) -> Iterable[Metric]:
        family = self._family()
        summed: dict[tuple[str, str], int] = {}
        for (job, cause), n in list(self.counts().items()):
            key = (split(job)[0], cause)
            summed[key] = summed.get(key, 0) + n
        for (job, cause), n in sorted(summed.items()):
            family.add_metric([job, cause], n)
        return [family]


def last_words_capture(record: dict[str, Any], request_id: str, job: str, attempt: int) -> forensics_pb2.Capture:
    """One dead rank's account as a capture of the crash event: its traceback and faulthandler's stacks."""
    stacks = "\n".join(part for part in (record.get("traceback") or "", record.get("stacks") or "") if part)
    facts = {key: record.get(key) for key in ("cause", "why", "signal", "exit_code", "step", "last_enqueued",
                                              "last_completed", "died_at", "died_at_source", "observed_at",
                                              "thread_exception", "pid", "consequence")}
    if record.get("facts"):
        try:
            facts["facts"] = json.loads(record["facts"])
        except ValueError:
            facts["facts"] = record["facts"][:1000]
    source = "sdk" if record.get("last_words") else "proc"
    error = "" if record.get("last_words") else f"no last words reached the agent: {record.get('why', '')}"
    captured = record.get("died_at") or time.time()
    return forensics_pb2.Capture(request_id=request_id, job=job, attempt=attempt, rank=int(record["rank"]),
                                 host=record.get("host") or "", captured_at_ns=int(captured * 1e9), source=source,
                                 stacks=stacks[-MAX_STACKS:], process=json.dumps(facts, default=str),
                                 error=error[:4096], reason="crash")
