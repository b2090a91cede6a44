"""Scoring for bench/detection.py: what each run's events say about each detector. Pure functions over the
records the harness collects, so the rules are testable without starting a job.

A run record: `{"model", "seed", "fault", "steps", "truth": {"rank", "step", "time", ...} | None,
"events": [event as the API serves it, plus "seen": {"opened", "ranks", "exact"}], "finalised":
[[step, finalised_ns], ...]}` (the root's step_time windows). `seen.opened` is when the event opened, in
unix seconds: exact when the harness saw it before its first change (its `updated` is then its opening),
else an upper bound (the poll that first saw it); `seen.ranks` the ranks it named then.

The rules:

- clean steps: every step of a clean run, and the steps before the fault of a fault run;
- a false alarm: any event of a clean run, and any event of a fault run that opened before the fault;
- a detection: the first event of an expected kind (EXPECTED) opened at or after the fault's wall time;
  delay in seconds from the fault's start to the opening, in steps from the fault's step to the last
  step the root had finalised when it opened;
- the rank named against the truth (the injecting rank): `exact`, `includes` (it and others), `wrong`,
  `none`; not judged (`n/a`) for detectors whose event is job-wide under synchronous training (JOB_WIDE);
- anything else in a fault run after the fault is `collateral`: listed, not scored.
"""

from __future__ import annotations

import bisect
import statistics
from typing import Any

DETECTORS = ("straggler", "loss_spike", "mfu_drop", "dataloader_stall", "nonfinite", "hang")
NOISE_JUDGED = ("straggler", "loss_spike", "mfu_drop", "dataloader_stall")  # nonfinite, hang: no noise case

# Which detectors must catch each fault (any one of a group is enough for the fault to count as caught;
# each detector's own rate counts every run it is listed for).
EXPECTED: dict[str, tuple[str, ...]] = {
    "slow_rank": ("straggler", "mfu_drop"),
    "loader_stuck": ("hang", "dataloader_stall"),
    "nan": ("nonfinite",),
    "bad_batch": ("loss_spike",),
    "slow_loader": ("dataloader_stall", "mfu_drop"),
}
# Under a synchronous all-reduce every rank's MFU drops with the slow one's: the event names nobody.
JOB_WIDE = ("mfu_drop",)


def step_at(finalised: list[list[int]], wall_s: float) -> int | None:
    """The last step the root had finalised at `wall_s` (None before the first)."""
    pairs = sorted((ns, step) for step, ns in finalised if ns)
    i = bisect.bisect_right([ns for ns, _ in pairs], wall_s * 1e9)
    return max((step for _, step in pairs[:i]), default=None)


def rank_verdict(named: list[int], truth: int) -> str:
    if not named:
        return "none"
    if named == [truth]:
        return "exact"
    return "includes" if truth in named else "wrong"


def score_run(run: dict[str, Any]) -> dict[str, Any]:
    """One run: its clean steps, false alarms, detections per expected detector, collateral events."""
    truth, events = run.get("truth"), sorted(run["events"], key=lambda e: e["seen"]["opened"])
    fault = run["fault"]
    if fault == "none" or truth is None:
        clean_steps = run["steps_done"]
        false_alarms = events
        after: list[dict] = []
    else:
        clean_steps = truth["step"]
        false_alarms = [e for e in events if e["seen"]["opened"] < truth["time"]]
        after = [e for e in events if e["seen"]["opened"] >= truth["time"]]
    detections: dict[str, dict[str, Any]] = {}
    used: set[int] = set()
    for kind in EXPECTED.get(fault, ()):
        hit = next((e for e in after if e["kind"] == kind), None)
        if hit is None:
            detections[kind] = {"detected": False}
            continue
        used.add(hit["id"])
        opened = hit["seen"]["opened"]
        at = step_at(run["finalised"], opened)
        ranks = hit["seen"]["ranks"]
        detections[kind] = {
            "detected": True, "event_id": hit["id"], "event_step": hit["step"],
            "delay_s": round(opened - truth["time"], 3), "delay_exact": hit["seen"]["exact"],
            "delay_steps": (at - truth["step"]) if at is not None else None,
            "ranks": ranks, "truth_rank": truth["rank"],
            "rank": "n/a" if kind in JOB_WIDE else rank_verdict(ranks, truth["rank"]),
            "summary": hit["detail"].get("summary"),
        }
    brief = [_brief(e) for e in false_alarms]
    return {"job": run["job"], "model": run["model"], "seed": run["seed"], "fault": fault,
            "truth": truth, "clean_steps": clean_steps, "false_alarms": brief,
            "detections": detections, "collateral": [_brief(e) for e in after if e["id"] not in used]}


def _brief(event: dict[str, Any]) -> dict[str, Any]:
    return {"id": event["id"], "kind": event["kind"], "step": event["step"], "ranks": event["seen"]["ranks"],
            "summary": event["detail"].get("summary")}


def _spread(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"median": None, "max": None}
    return {"median": round(statistics.median(values), 3), "max": round(max(values), 3)}


def aggregate(scored: list[dict[str, Any]]) -> dict[str, Any]:
    """Per detector: false alarms per 1,000 clean steps, detection rate, delays, ranks named; per fault: caught."""
    clean_steps = sum(s["clean_steps"] for s in scored)
    per_detector: dict[str, Any] = {}
    for kind in DETECTORS:
        alarms = sum(1 for s in scored for e in s["false_alarms"] if e["kind"] == kind)
        judged = [s["detections"][kind] for s in scored if kind in s["detections"]]
        hits = [d for d in judged if d["detected"]]
        ranks: dict[str, int] = {}
        for d in hits:
            ranks[d["rank"]] = ranks.get(d["rank"], 0) + 1
        per_detector[kind] = {
            "false_alarms": alarms, "clean_steps": clean_steps,
            "false_alarms_per_1000_steps": round(1000 * alarms / clean_steps, 3) if clean_steps else None,
            "noise_judged": kind in NOISE_JUDGED,
            "fault_runs": len(judged), "detected": len(hits),
            "detection_rate": round(len(hits) / len(judged), 3) if judged else None,
            "delay_steps": _spread([d["delay_steps"] for d in hits if d["delay_steps"] is not None]),
            "delay_s": _spread([d["delay_s"] for d in hits]),
            "ranks": ranks,
        }
    per_fault: dict[str, Any] = {}
    for fault in sorted({s["fault"] for s in scored} - {"none"}):
        runs = [s for s in scored if s["fault"] == fault]
        caught = [s for s in runs if any(d["detected"] for d in s["detections"].values())]
        per_fault[fault] = {"runs": len(runs), "caught": len(caught), "expected": list(EXPECTED.get(fault, ())),
                            "by": {k: sum(1 for s in runs if s["detections"].get(k, {}).get("detected"))
                                   for k in EXPECTED.get(fault, ())},
                            "collateral": sorted({e["kind"] for s in runs for e in s["collateral"]})}
    return {"clean_steps": clean_steps, "clean_runs": sum(1 for s in scored if s["fault"] == "none"),
            "fault_runs": sum(1 for s in scored if s["fault"] != "none"),
            "per_detector": per_detector, "per_fault": per_fault}


def _fmt(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:g}{unit}"


def table(agg: dict[str, Any]) -> str:
    """The per-detector table (Markdown, as quoted in the README) and the per-fault one."""
    lines = [f"clean steps judged: {agg['clean_steps']:,} (clean runs: {agg['clean_runs']}; plus the steps before "
             f"the fault of the {agg['fault_runs']} fault runs)", "",
             "| detector | false alarms / 1,000 clean steps | detected | delay, steps (median / max) "
             "| delay, s (median / max) | rank named (truth: the faulty rank) |",
             "|---|---|---|---|---|---|"]
    for kind, d in agg["per_detector"].items():
        fa = f"{d['false_alarms_per_1000_steps']:g} ({d['false_alarms']})" if d["noise_judged"] or d["false_alarms"] \
            else f"{d['false_alarms_per_1000_steps']:g} (no noise case)"
        rate = f"{d['detected']}/{d['fault_runs']}" if d["fault_runs"] else "-"
        steps, secs = d["delay_steps"], d["delay_s"]
        ranks = ", ".join(f"{k} {v}" for k, v in sorted(d["ranks"].items())) or "-"
        lines.append(f"| {kind} | {fa} | {rate} | {_fmt(steps['median'])} / {_fmt(steps['max'])} "
                     f"| {_fmt(secs['median'])} / {_fmt(secs['max'])} | {ranks} |")
    lines += ["", "| fault | caught (any expected detector) | by | other events after the fault |",
              "|---|---|---|---|"]
    for fault, f in agg["per_fault"].items():
        by = ", ".join(f"{k} {v}/{f['runs']}" for k, v in f["by"].items())
        lines.append(f"| {fault} | {f['caught']}/{f['runs']} | {by} | {', '.join(f['collateral']) or '-'} |")
    return "\n".join(lines)
