"""Replay a detection bench's recorded runs through the step detectors with other settings, offline.

    python bench/detection_jobs/replay.py WORKDIR [--detectors JSON] [--sweep SECTION.OPTION=V1,V2,...]

WORKDIR is a `bench/detection.py --workdir` directory: its root.db holds every step window's summary,
its detection.json (written with --out WORKDIR) every run's truth. Each job's windows are fed in the
order the root finalised them to a fresh detector suite whose event log's clock is the finalising time,
and the events are scored as the bench scores them (score.py). This is how thresholds are chosen from
the bench's figures rather than from one run: sweep an option, read the false alarms against the
faults still caught. The hang detector is left out (it needs the tree's liveness, not windows).
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs.score import aggregate, score_run, table
from collectors.common.keys import Key
from collectors.detectors.events import EventLog
from collectors.detectors.suite import Detectors, DetectorsConfig
from collectors.root.store import Row
from telemetry.summary import Summary


def stored_job(db: sqlite3.Connection, job: str) -> str:
    """The key the root stored a job's windows under: `job`, or `job@attempt` (the latest) since attempts."""
    found = [j for (j,) in db.execute("SELECT DISTINCT job FROM windows WHERE job=? OR substr(job, 1, ?)=?",
                                      (job, len(job) + 1, job + "@"))]
    return max(found, key=lambda j: (j != job, int(j.rsplit("@", 1)[1]) if j != job else 0), default=job)


def rows_of(db: sqlite3.Connection, job: str) -> list[Row]:
    found = db.execute("SELECT metric, idx, expected, summary, finalised_ns FROM windows WHERE job=? AND width_ms=0 "
                       "ORDER BY finalised_ns, idx", (job,)).fetchall()
    return [Row(Key(job, metric, idx), expected, Summary.from_bytes(blob), 0, ns)
            for metric, idx, expected, blob, ns in found]


def clocked_log() -> tuple[EventLog, list[float], dict[int, dict[str, Any]]]:
    """An event log whose clock is `now[0]` (set to each replayed window's finalising time) and the first
    sighting of each event it opens (`seen`, as the bench's poller records it)."""
    now = [0.0]
    seen: dict[int, dict[str, Any]] = {}

    def sink(action: str, event: Any) -> None:
        if action == "open":
            seen[event.id] = {"opened": now[0], "exact": True, "ranks": list(event.ranks)}

    return EventLog(None, sinks=[sink], clock=lambda: now[0]), now, seen


def replay_run(db: sqlite3.Connection, run: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """The run's record with its events replaced by those of a suite with `settings`."""
    events, now, seen = clocked_log()
    suite = Detectors(events, DetectorsConfig.from_mapping({**settings, "hang": {"enabled": False}}))
    job = stored_job(db, run["job"])
    for row in rows_of(db, job):
        now[0] = row.finalised_ns / 1e9
        suite.on_rows([row])
    stored = events.query(job, limit=10_000)
    events.close()
    return {**run, "events": [{**e, "seen": seen[e["id"]]} for e in stored]}


def merge(base: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    section, option = dotted.split(".", 1)
    return {**base, section: {**base.get(section, {}), option: value}}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workdir", type=Path)
    p.add_argument("--detectors", default="{}", help="detector settings as inline JSON (as the root's --detectors)")
    p.add_argument("--sweep", default=None, help="SECTION.OPTION=V1,V2,... (JSON values): one table per value")
    p.add_argument("--quiet", action="store_true", help="one summary line per setting instead of the tables")
    args = p.parse_args(argv)
    result = json.loads((args.workdir / "detection.json").read_text())
    db = sqlite3.connect(f"file:{args.workdir / 'root.db'}?mode=ro", uri=True)
    base = json.loads(args.detectors)
    variants = [base]
    if args.sweep:
        dotted, values = args.sweep.split("=", 1)
        variants = [merge(base, dotted, json.loads(v)) for v in values.split(",")]
    for settings in variants:
        scored = [score_run(replay_run(db, run, settings)) for run in result["runs"]]
        agg = aggregate(scored)
        if args.quiet:
            cells = [f"{k}: fa {d['false_alarms']} det {d['detected']}/{d['fault_runs']}"
                     for k, d in agg["per_detector"].items() if k != "hang"]
            print(json.dumps(settings), "|", "; ".join(cells))
        else:
            print(f"## {json.dumps(settings)}\n{table(agg)}\n")
            for s in scored:
                for e in s["false_alarms"]:
                    print(f"  false alarm {s['job']}: {e['kind']}@{e['step']} {e['ranks']} {e['summary']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
