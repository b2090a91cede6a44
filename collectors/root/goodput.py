"""Goodput: how much of a job's wall time trained, and what its restarts cost (docs/restarts.md).

Computed from the step windows already in the root's store: each step of each attempt ended when its last
rank ended it (the window's ``last_time_ns``, the latest over the step's metrics); once retention rolled a step's
raw windows into blocks, from its row in ``step_ends`` (the same end and completeness, kept by
collectors/root/retention.py until the blocks go), so the figures stay exact past the ``steps`` retention.
Within an attempt a step took the time since the attempt's previous step ended; the first step of an attempt is
part of the restart's downtime (for the first attempt, the wall time starts when it ends). So, exactly:

    wall_s = productive_s + lost_s + restart_downtime_s

* productive_s: the steps whose run stands (no later attempt ran that step again);
* lost_s: the steps a later attempt ran again (work done after the checkpoint, thrown away by the restart);
* restart_downtime_s: from the last step of attempt k to the first step of attempt k+1;
* replay_s: the part of productive_s spent re-running steps an earlier attempt had already run
  (about lost_s when step times are steady);
* goodput: productive_s / wall_s (the "effective training time ratio").

An attempt's last step, when it misses ranks (no window of it holds every rank) and the step before it does not, is
the step a crash broke into, reported by the surviving ranks only: not one the attempt reached. Trailing steps
missing ranks beyond that one are a gap in telemetry, not a crash's, and count (`_steps_reached`).

Each attempt also says why it ended (`ended_by`), when the root's `crash` event for it says so (the events
table of the same database, docs/forensics.md "When ranks die"): the cause and ranks of the first death and the
event's summary; None for an attempt that finished, still runs, or ended without a word reaching the root.

Attempts are those the job's default views read (`view_names`: the attempts adopted as the job's latest, in
the order they were, collectors/root/adoption.py; every attempt by number before any was adopted); launchers'
numbers grow with each launch (docs/restarts.md), so the two orders agree for real restarts.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from collectors.common.attempts import like_prefix, scoped, split


@dataclass
class AttemptSteps:
    """One attempt's step windows: (step, end time ns), by step."""

    attempt: int
    world_size: int
    ends: list[tuple[int, int]] = field(default_factory=list)
    order: int = 0  # where the attempt comes among the job's (adoption order); ties by attempt number


class AttemptFigures(TypedDict):
    """One attempt in `Goodput.attempts`."""

    attempt: int
    world_size: int
    first_step: int
    last_step: int
    steps: int
    start_ns: int
    end_ns: int
    downtime_s: float
    steps_replayed: int
    ended_by: dict[str, Any] | None


class Goodput(TypedDict):
    """The goodput figures of a job (the module docstring; GET /api/v1/jobs/{job}/goodput)."""

    job: str
    wall_s: float
    productive_s: float
    lost_s: float
    restart_downtime_s: float
    replay_s: float
    goodput: float | None
    restarts: int
    attempts: list[AttemptFigures]


def scoped_names(db: sqlite3.Connection, job: str) -> list[tuple[str, int]]:
    """The scoped names (and world sizes) of `job`'s attempts the store knows, oldest attempt first."""
    prefix = like_prefix(job)
    rows = db.execute("SELECT job, world_size FROM jobs WHERE job=? OR substr(job, 1, ?)=?",
                      (job, len(prefix), prefix)).fetchall()
    named = [(str(name), int(world)) for name, world in rows if split(str(name))[0] == job]
    return sorted(named, key=lambda item: split(item[0])[1])


def view_names(db: sqlite3.Connection, job: str) -> list[tuple[str, int]]:
    """The attempts the job's default views read (collectors/root/adoption.py), oldest first: those adopted as
    the job's latest, in the order they were; before any was (or in a store from before adoption), every
    attempt by number. Other attempts stay reachable by number (`?attempt=A`, `all`)."""
    stored = scoped_names(db, job)
    prefix = like_prefix(job)
    try:
        adopted = [str(name) for name, in db.execute(
            "SELECT job FROM adopted WHERE job=? OR substr(job, 1, ?)=? ORDER BY rowid", (job, len(prefix), prefix))
            if split(str(name))[0] == job]
    except sqlite3.OperationalError:  # a store without the table
        adopted = []
    if not adopted:
        return stored
    worlds = dict(stored)
    return [(name, worlds[name]) for name in adopted if name in worlds]


def load(db: sqlite3.Connection, job: str) -> list[AttemptSteps]:
    """Every attempt of `job` its views read (`view_names`) with at least one step window, oldest first."""
    out = []
    for order, (name, world) in enumerate(view_names(db, job)):
        steps = _steps(db, name)
        ends = [(int(i), int(t)) for i, t, _ in steps[:_steps_reached(steps)]]
        if ends:
            out.append(AttemptSteps(split(name)[1], world, ends, order))
    return out


def _steps(db: sqlite3.Connection, name: str) -> list[tuple[int, int, int]]:
    """(step, end ns, some window held every rank) of one attempt, raw steps and rolled-up ones alike."""
    raw = ("SELECT idx, last_time_ns AS t, sources >= expected AS c FROM windows WHERE job=? AND width_ms=0", (name,))
    try:
        return db.execute(f"SELECT idx, max(t), max(c) FROM ({raw[0]} UNION ALL SELECT idx, end_ns, complete FROM "
                          "step_ends WHERE job=?) GROUP BY idx ORDER BY idx", (name, name)).fetchall()
    except sqlite3.OperationalError:  # a store from before step_ends
        return db.execute(f"SELECT idx, max(t), max(c) FROM ({raw[0]}) GROUP BY idx ORDER BY idx", raw[1]).fetchall()


def _steps_reached(steps: list[tuple[int, int, int]]) -> int:
    """How many of an attempt's (step, end, every rank in some window) to count: all of them, but the last step
    when it is the step a crash broke into. Ranks run in lock step (each step's collectives need every rank), so
    a crash can break into one step only, the attempt's last: the surviving ranks report it alone (their windows
    sealed without the dead rank, whenever the deadline passes), while every rank ended the step before it.
    Counting that step would have the attempt reach a step it never finished, and a restart replay it, or not,
    by when its window was sealed. So the last step is dropped when it misses ranks and the step before it does
    not. A run of trailing steps missing ranks is a gap in telemetry (a rank's agent gone while training went
    on; ranks that log nothing per step): the steps were run, and they all count. (A lone last step missing a
    rank that ended every step before it is taken for a crash's: without one, the attempt loses that one step.)"""
    if len(steps) >= 2 and not steps[-1][2] and steps[-2][2]:
        return len(steps) - 1
    return len(steps)


def compute(job: str, attempts: Iterable[AttemptSteps]) -> Goodput:
    """The goodput figures of `job` (see the module docstring), with one entry per attempt."""
    ordered = sorted((a for a in attempts if a.ends), key=lambda a: (a.order, a.attempt))
    latest: dict[int, int] = {}  # step -> the last attempt that ran it
    for attempt in ordered:
        for step, _ in attempt.ends:
            latest[step] = attempt.attempt
    productive = lost = replay = downtime_total = 0
    seen: set[int] = set()
    entries: list[AttemptFigures] = []
    previous_end: int | None = None
    for attempt in ordered:
        ends = attempt.ends
        downtime = max(0, ends[0][1] - previous_end) if previous_end is not None else 0
        downtime_total += downtime
        for (_, before), (step, end) in zip(ends, ends[1:]):
            took = max(0, end - before)
            if latest[step] != attempt.attempt:
                lost += took
            else:
                productive += took
                if step in seen:
                    replay += took
        replayed = sum(1 for step, _ in ends if step in seen)
        seen.update(step for step, _ in ends)
        entries.append({"attempt": attempt.attempt, "world_size": attempt.world_size, "first_step": ends[0][0],
                        "last_step": ends[-1][0], "steps": len(ends), "start_ns": ends[0][1], "end_ns": ends[-1][1],
                        "downtime_s": downtime / 1e9, "steps_replayed": replayed, "ended_by": None})
        previous_end = ends[-1][1]
    wall = (ordered[-1].ends[-1][1] - ordered[0].ends[0][1]) if ordered else 0
    return {"job": job, "wall_s": wall / 1e9, "productive_s": productive / 1e9, "lost_s": lost / 1e9,
            "restart_downtime_s": downtime_total / 1e9, "replay_s": replay / 1e9,
            "goodput": productive / wall if wall > 0 else None, "restarts": max(0, len(ordered) - 1),
            "attempts": entries}


def ended_by(db: sqlite3.Connection, job: str, attempt: int) -> dict[str, Any] | None:
    """Why the attempt ended, from its first crash event (None: no crash event, or no events table yet)."""
    try:
        found = db.execute("SELECT id, detail FROM events WHERE job=? AND kind='crash' ORDER BY id LIMIT 1",
                           (scoped(job, attempt),)).fetchone()
    except sqlite3.OperationalError:  # a store without the event log's table
        return None
    if found is None:
        return None
    try:
        detail = json.loads(found[1])
    except ValueError:
        return None
    first = detail.get("first") or []
    return {"event_id": int(found[0]), "cause": first[0].get("cause") if first else None,
            "first_ranks": [f.get("rank") for f in first], "why": first[0].get("why") if first else None,
            "summary": detail.get("summary")}


def goodput(db: sqlite3.Connection, job: str) -> Goodput:
    figures = compute(job, load(db, job))
    for entry in figures["attempts"]:
        entry["ended_by"] = ended_by(db, job, entry["attempt"])
    return figures
