"""Crash: ranks of a job died. Names the first rank(s) to fail, why, and the cascade that followed.

Input: one `RankExit` per dead rank (collectors/agent/exits.py: its agent's account, with the rank's last words
when they reached it), up the tree; and, periodically, the root's liveness view (ranks dead without any account
reaching the root are listed with cause "unknown").

The first rank(s): the earliest to die among the ranks whose end is not a consequence of another's. A consequence is
an exception that says a peer went away (connection reset or closed by peer, broken pipe, a collective timeout, a
communicator aborted) or that its DataLoader worker was stopped by SIGTERM, or a SIGTERM (what a launcher sends the
other ranks once one failed). Among those, ranks dying within `simultaneous_s` of the earliest are all first. When
every end is a consequence, the earliest is first. When is a rank's death? Its own clock at its exception or exit
(last words), the time faulthandler wrote its stacks, the time its stream to the agent closed, or when the agent
found it gone, in that order of preference: exact on one host (one clock); across hosts each agent's clock, said so
in the event.

A collective mismatch: when the ranks' last words carry fingerprints that disagree at one sequence number, the
rank(s) on the minority side (on a tie: the side whose collective appears at no other sequence number the ranks
reported, the odd one out) are named as the collective's culprits, whichever rank the backend killed first.

One event per job attempt, critical, never closed by the detector (a crash does not heal; the job's end closes
it). It opens at once when the first account names a primary cause; an account that is only a consequence waits
`settle_s` for the rank that caused it. Every later account updates it (the cascade grows).
"""

from __future__ import annotations

import heapq
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from collectors.common.rows import Row
from collectors.common.tracebacks import worker_signal
from collectors.detectors.base import Detector
from telemetry.v1 import forensics_pb2

CONSEQUENCES = (
    (re.compile(r"connection (reset|closed) by peer|broken pipe|connection refused|socket closed|"
                r"connection (was )?(lost|aborted)", re.I), "a peer went away (connection reset)"),
    (re.compile(r"timed? ?out|timeout|watchdog", re.I), "a collective timed out waiting for peers"),
    (re.compile(r"communicator was aborted|NCCL.*abort|ProcessGroup\w*.*(abort|shut ?down|destroyed)", re.I),
     "a peer's abort reached it"),
)
FAILURES = ("exception", "fatal_signal", "terminated", "exit_code", "oom_killed", "killed", "unknown")
MAX_RECORDS_PER_JOB = 1 << 17  # ranks' accounts kept per job (a 16,384-rank job fits 8 times over)
MAX_FULL_RECORDS = 256  # of them, kept with their traceback and stacks (the rest: one line each, ~0.5 KB)
MAX_SEQS = 4096  # collective sequence numbers compared per job
MAX_LISTED = 64
LIVE_KEYS = ("alive", "stuck", "dead", "dead_ranks")  # what of the root's liveness view the detector reads


@dataclass
class CrashConfig:
    enabled: bool = True
    settle_s: float = 1.0
    simultaneous_s: float = 0.05
    severity: str = "critical"


def consequence_of(record: dict[str, Any]) -> str | None:
    """Why this rank's end is the consequence of another's (None: it is not, as far as its account says)."""
    if record["cause"] == "terminated":
        return "stopped by a signal (SIGTERM: the launcher stopping the job after a failure)"
    if record["cause"] == "exception":
        text = f"{record.get('exc_type', '')} {record.get('message', '')}"
        for pattern, what in CONSEQUENCES:
            if pattern.search(text):
                return what
        # A launcher stops a rank with SIGTERM to its whole process group: the rank may raise the DataLoader's
        # error before its own SIGTERM ends it. A worker SIGKILLed (the OOM killer's) stays the rank's own failure.
        if worker_signal(record.get("message") or "", record.get("traceback") or "") == "Terminated":
            return "its DataLoader worker was stopped by SIGTERM (the launcher stopping the job after a failure)"
    return None


def record_of(exit_: forensics_pb2.RankExit) -> dict[str, Any]:
    """A RankExit as the detector keeps it (JSON-ready; times in seconds since the epoch)."""
    return {"rank": exit_.rank, "host": exit_.host or None, "pid": exit_.pid, "cause": exit_.cause, "why": exit_.why,
            "signal": exit_.signal or None, "exit_code": exit_.exit_code if exit_.exit_code_known else None,
            "step": exit_.current_step,
            "last_enqueued": exit_.last_enqueued if exit_.last_enqueued >= 0 else None,
            "last_completed": exit_.last_completed if exit_.last_completed >= 0 else None,
            "died_at": exit_.died_at_ns / 1e9 if exit_.died_at_ns else None,
            "died_at_source": exit_.died_at_source or None, "observed_at": exit_.observed_at_ns / 1e9,
            "last_words": exit_.last_words, "exc_type": exit_.exc_type, "message": exit_.message,
            "traceback": exit_.traceback, "stacks": exit_.stacks, "thread_exception": exit_.thread_exception or None,
            "facts": exit_.facts, "fingerprints": [(f.seq, f.hash, f.what) for f in exit_.fingerprints]}


Table = dict[int, dict[int, tuple[str, list[int]]]]  # seq -> hash -> (what, ranks that issued it)


def add_fingerprints(by_seq: Table, rank: int, fingerprints: list[tuple[int, int, str]]) -> None:
    for seq, digest, what in fingerprints:
        if len(by_seq) >= MAX_SEQS and seq not in by_seq:
            continue
        side = by_seq.setdefault(seq, {}).setdefault(digest, (what, []))
        side[1].append(rank)


def mismatch(records: dict[int, dict[str, Any]]) -> dict[str, Any] | None:
    """The first sequence number at which the ranks' newest fingerprints disagree, and the ranks who differ."""
    by_seq: Table = {}
    for rank, record in records.items():
        add_fingerprints(by_seq, rank, record.get("fingerprints", ()))
    return mismatch_in(by_seq)


def mismatch_in(by_seq: Table) -> dict[str, Any] | None:
    for seq in sorted(by_seq):
        sides = by_seq[seq]
        if len(sides) < 2:
            continue
        ordered = sorted(sides.items(), key=lambda item: len(item[1][1]))
        fewest = len(ordered[0][1][1])
        minority = [item for item in ordered if len(item[1][1]) == fewest]
        rule = "minority"
        if len(minority) == len(ordered):  # a tie: the collective no other seq shows is the odd one out
            elsewhere = {digest for other, found in by_seq.items() if other != seq for digest in found}
            novel = [item for item in ordered if item[0] not in elsewhere]
            if len(novel) == len(ordered) or not novel:
                minority, rule = ordered, "tie"
            else:
                minority, rule = novel, "tie broken: the only collective seen at no other seq"
        culprits = sorted({r for _, (_, ranks) in minority for r in ranks})[:MAX_LISTED]
        return {"seq": seq, "ranks": culprits, "rule": rule,
                "sides": [{"what": what, "ranks": sorted(ranks)[:MAX_LISTED], "count": len(ranks)}
                          for _, (what, ranks) in ordered]}
    return None


@dataclass
class _Job:
    records: dict[int, dict[str, Any]] = field(default_factory=dict)
    first_seen: float = 0.0
    live: dict[str, Any] = field(default_factory=dict)
    said: str = ""  # what the event last said (it is raised again only when that changes)
    by_seq: Table = field(default_factory=dict)  # the accounts' fingerprints, merged as they come
    dirty: bool = False  # accounts came since the last judgement
    settled: bool = False  # judged once settle_s after the first account (dead ranks without one are listed)
    unkept: list[int] = field(default_factory=list)  # full accounts not yet handed to forensics (take_new)


class CrashDetector(Detector):
    kind = "crash"

    def __init__(self, events, context=None, config: CrashConfig | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(events, context)
        self.config = config or CrashConfig()
        self.clock = clock
        self._jobs: dict[str, _Job] = {}
        self.counts: dict[tuple[str, str], int] = {}  # (job name with attempt, cause) -> rank exits seen

    def wants(self, row: Row) -> bool:
        return False  # it reads accounts of exits (observe_exits) and liveness (check), not windows

    def observe(self, row: Row) -> None:  # pragma: no cover - wants() takes no row
        return None

    def jobs(self) -> list[str]:
        return list(self._jobs)

    def records(self, job: str) -> dict[int, dict[str, Any]]:
        state = self._jobs.get(job)
        return dict(state.records) if state is not None else {}

    def take_new(self, job: str) -> list[dict[str, Any]]:
        """The full accounts (traceback and stacks) that came since the last call: the event's forensics."""
        state = self._jobs.get(job)
        if state is None:
            return []
        ranks, state.unkept = state.unkept, []
        return [state.records[r] for r in ranks if r in state.records]

    def forget(self, job: str) -> None:
        super().forget(job)
        self._jobs.pop(job, None)

    def observe_exits(self, job: str, records: list[dict[str, Any]]) -> None:
        """Accounts of ranks' exits for `job` (scoped name); one per rank is kept (the first: a resend is equal)."""
        state = self._jobs.get(job)
        if state is None:
            state = self._jobs[job] = _Job(first_seen=self.clock())
        for record in records:
            if record["rank"] in state.records or len(state.records) >= MAX_RECORDS_PER_JOB:
                continue
            record["consequence"] = consequence_of(record)
            if len(state.records) >= MAX_FULL_RECORDS:  # the cascade of a large job: why, not every stack
                record.update(traceback="", stacks="", facts="", fingerprints=record["fingerprints"][-4:],
                              message=record.get("message", "")[:300])
            else:
                state.unkept.append(record["rank"])
            state.records[record["rank"]] = record
            add_fingerprints(state.by_seq, record["rank"], record["fingerprints"])
            state.dirty = True
            key = (job, record["cause"])
            self.counts[key] = self.counts.get(key, 0) + 1
        # Judged at once while the job is small or its event not yet open (the first account's latency is the
        # point); a large cascade is judged by check(), at most once per check interval, not once per unit.
        if len(state.records) <= MAX_FULL_RECORDS or not self.is_open(job):
            self._judge(job, state)

    def check(self, live: dict[str, dict]) -> None:
        """Periodic: ranks dead without an account; consequence-only crashes whose settle time passed."""
        for job, state in list(self._jobs.items()):
            found = live.get(job)
            view = state.live if found is None else {key: found.get(key) for key in LIVE_KEYS}
            settling = not state.settled and self.clock() - state.first_seen >= self.config.settle_s
            if state.dirty or settling or view != state.live or not self.is_open(job):
                state.live = view
                self._judge(job, state)
        for job, view in live.items():
            if job in self._jobs or not view or not view.get("dead"):
                continue
            if int(view.get("alive", 0) or 0) == 0 and not view.get("stuck"):  # all dead, no account: judged next
                self._jobs[job] = _Job(first_seen=self.clock(), live={key: view.get(key) for key in LIVE_KEYS})

    def _judge(self, job: str, state: _Job) -> None:
        c = self.config
        state.dirty = False
        records = state.records
        waited = self.clock() - state.first_seen
        state.settled = state.settled or waited >= c.settle_s
        missing = [rank for rank in state.live.get("dead_ranks") or () if rank not in records]
        if missing and waited >= c.settle_s:
            records = dict(records)
        for rank in missing:
            if waited >= c.settle_s:
                records[rank] = {"rank": rank, "cause": "unknown", "why": "dead, but no account of its end reached "
                                 "the root", "died_at": None, "consequence": None, "host": None}
        failed = {r: rec for r, rec in records.items() if rec["cause"] in FAILURES}
        if not failed:
            return
        primaries = {r: rec for r, rec in failed.items() if rec["consequence"] is None}
        if not primaries and waited < c.settle_s and not self.is_open(job):
            return  # only consequences so far: wait a little for the rank that caused them
        pool = primaries or failed
        timed = [rec["died_at"] for rec in pool.values() if rec.get("died_at") is not None]
        earliest = min(timed) if timed else None
        if earliest is None:
            first = sorted(pool)
        else:
            first = sorted(r for r, rec in pool.items()
                           if rec.get("died_at") is not None and rec["died_at"] - earliest <= c.simultaneous_s)
        lead = pool[first[0]]
        culprit = mismatch_in(state.by_seq)
        named = sorted(set(first) | set(culprit["ranks"] if culprit else ()))
        hosts = sorted({rec["host"] for rec in failed.values() if rec.get("host")})
        cascade = []
        firsts = set(first)
        for rank, rec in heapq.nsmallest(MAX_LISTED + len(firsts), failed.items(),
                                         key=lambda item: (item[1].get("died_at") or 0.0, item[0])):
            if rank in firsts:
                continue
            after = (rec["died_at"] - earliest if rec.get("died_at") is not None and earliest is not None else None)
            cascade.append({**_brief(rec), "after_s": None if after is None else round(after, 3),
                            "consequence": rec.get("consequence")})
        live = state.live
        alive = int(live.get("alive", 0) or 0) + int(live.get("stuck", 0) or 0) if live else None
        step = lead.get("step")
        where = f" in collective #{lead['last_enqueued']}" if (lead.get("last_enqueued") or -1) >= 0 else ""
        summary = (f"rank{'s' if len(first) > 1 else ''} {', '.join(map(str, first))} died first"
                   f"{f' at step {step}' if step is not None else ''}{where}: {lead.get('why', lead['cause'])}")
        if cascade:
            later = [x["after_s"] for x in cascade if x["after_s"] is not None]
            consequences = sorted({x["consequence"] or x["cause"] for x in cascade})
            when = f"up to {max(later):.1f} s later" if later else "after"
            summary += (f"; rank{'s' if len(cascade) > 1 else ''} {', '.join(str(x['rank']) for x in cascade[:16])}"
                        f" died {when} ({'; '.join(consequences)})")
        if culprit is not None:
            summary += (f"; collective #{culprit['seq']} differed on rank(s) {culprit['ranks']} "
                        f"({' vs '.join(side['what'] for side in culprit['sides'])})")
        detail = {
            "summary": summary[:2000],
            "first": [_brief(pool[r]) for r in first],
            "cascade": cascade[:MAX_LISTED],
            "mismatch": culprit,
            "ranks_dead": len(failed), "ranks_alive": alive,
            "all_dead": alive == 0 if alive is not None else None,
            "ordering": ("one host: deaths ordered by one clock" if len(hosts) <= 1 else
                         f"{len(hosts)} hosts: deaths ordered by each agent's own clock (and the ranks' own), "
                         "not synchronised: order across hosts is approximate"),
        }
        said = repr((named, detail))
        if said != state.said or not self.is_open(job):
            state.said = said
            self.raise_(job, step=step, ranks=named, detail=detail, severity=c.severity, time=earliest)


def _brief(rec: dict[str, Any]) -> dict[str, Any]:
    return {key: rec.get(key) for key in ("rank", "host", "cause", "why", "signal", "exit_code", "step",
                                          "last_enqueued", "last_completed", "died_at", "died_at_source",
                                          "thread_exception")}
