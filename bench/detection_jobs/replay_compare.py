"""Replay the recorded matrix sets with a baseline and candidate settings, and say what each candidate changed.

    python bench/detection_jobs/replay_compare.py RESULT.json [RESULT.json ...] --candidate NAME=JSON [...]
        [--baseline JSON] [--out PATH]

Why: a pre-registered candidate rule is judged against the current one over every recorded set, per shape (its
false alarms in clean steps must not rise in any shape, its in-time cells must not fall in any shape or severity:
bench/detection_jobs/prereg_*.md; from s44 on, the false alarms not on an uninjected slow rank, in each shape and in
total). replay_matrix.py prints totals per setting; this prints and writes, per setting,
the false alarms and in-time cells by shape and by severity, and for each candidate the alarms it added and removed
and the fault cells whose naming moved, as the baseline replayed them in the same run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the checkout: when run as a script only its folder is on sys.path

from bench.detection_jobs.matrix import is_uninjected_slow
from bench.detection_jobs.replay_matrix import evaluate
from bench.recordings import read_json, recording_name


def _alarms(scored: list[dict[str, Any]]) -> set[str]:
    return {f"{s['cell']} ({s['job']}): step {a['step']} (raised on {a['raised_at']}) ranks {a['ranks']}"
            for s in scored for a in s["false_alarms"]}


def _cells(scored: list[dict[str, Any]]) -> dict[str, str]:
    out = {}
    for s in scored:
        det = s.get("detection")
        if det is not None:
            out[f"{s['set']} {s['job']}"] = (f"{s['cell']}: named after {det.get('delay_steps')} steps "
                                             f"({det.get('rank')}), in time {bool(det.get('in_time'))}")
    return out


def _by_cpu_work(alarm: dict[str, Any]) -> str:
    """A false alarm's named ranks by their own recorded on-CPU work over the other ranks' (matrix.uninjected_slowness,
    the 30 steps up to the alarm): `cpu_slow` at 1.05x or more, `not_cpu_slow` under, `not_judged` where the run
    recorded no on-CPU times for enough of those steps."""
    judged = alarm.get("uninjected_slow")
    if not judged:
        return "not_judged"
    return "cpu_slow" if judged["slow"] else "not_cpu_slow"


def summarise(scored: list[dict[str, Any]]) -> dict[str, Any]:
    """False alarms and clean steps by shape; in-time fault cells by shape and by severity; the false alarms by
    shape split by the named rank's own CPU work (information, not the criterion)."""
    shapes: dict[str, dict[str, int]] = {}
    factors: dict[str, list[int]] = {}
    by_work: dict[str, dict[str, int]] = {}  # information, not the criterion (_by_cpu_work)
    for s in scored:
        row = shapes.setdefault(s["shape"], {"clean_steps": 0, "false_alarms": 0, "other_false_alarms": 0, "cells": 0,
                                             "in_time": 0})
        row["clean_steps"] += s["clean_steps"]
        row["false_alarms"] += len(s["false_alarms"])
        # not on an uninjected slow rank (an alarm that cannot be judged counts here): prereg_heldout_s44.md's criterion
        row["other_false_alarms"] += sum(not is_uninjected_slow(a) for a in s["false_alarms"])
        work = by_work.setdefault(s["shape"], {"cpu_slow": 0, "not_cpu_slow": 0, "not_judged": 0})
        for alarm in s["false_alarms"]:
            work[_by_cpu_work(alarm)] += 1
        det = s.get("detection")
        if det is not None:
            row["cells"] += 1
            row["in_time"] += int(bool(det.get("in_time")))
            cell = factors.setdefault(f"{s['factor']:g}x", [0, 0])
            cell[0] += 1
            cell[1] += int(bool(det.get("in_time")))
    return {"false_alarms": sum(r["false_alarms"] for r in shapes.values()),
            "other_false_alarms": sum(r["other_false_alarms"] for r in shapes.values()),
            "in_time": sum(r["in_time"] for r in shapes.values()), "by_shape": shapes,
            "false_alarms_by_cpu_work": by_work,
            "in_time_by_factor": {k: f"{hit}/{n}" for k, (n, hit) in sorted(factors.items())}}


def passes(base: dict[str, Any], cand: dict[str, Any], alarms: str = "false_alarms") -> dict[str, Any]:
    """The pre-registered criterion: false alarms up in no shape and not in total (where no shape is up the total
    cannot be: the check only names it), no shape's or severity's in-time cells down, in time up in total. `alarms`:
    which false alarms count - every one (the s42/s43 pre-registrations) or those not on an uninjected slow rank
    (s44's)."""
    shapes = sorted(set(base["by_shape"]) | set(cand["by_shape"]))
    zero = {alarms: 0, "in_time": 0}
    fa_up = [s for s in shapes if cand["by_shape"].get(s, zero)[alarms] > base["by_shape"].get(s, zero)[alarms]]
    if cand[alarms] > base[alarms]:
        fa_up.append("total")
    shape_down = [s for s in shapes if cand["by_shape"].get(s, zero)["in_time"]
                  < base["by_shape"].get(s, zero)["in_time"]]
    factor_down = [f for f, v in base["in_time_by_factor"].items()
                   if int(cand["in_time_by_factor"].get(f, "0/0").split("/")[0]) < int(v.split("/")[0])]
    return {"false_alarms_up_in": fa_up, "in_time_down_in_shapes": shape_down, "in_time_down_in_factors": factor_down,
            "in_time_up": cand["in_time"] > base["in_time"],
            "passes": not fa_up and not shape_down and not factor_down and cand["in_time"] > base["in_time"]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", type=Path, nargs="+", help="detection_matrix.json files (or .json.gz)")
    p.add_argument("--baseline", default="{}", help="the current rule's straggler settings (inline JSON)")
    p.add_argument("--candidate", action="append", default=[], help="NAME=JSON straggler settings (repeatable)")
    p.add_argument("--out", type=Path, default=None, help="write the figures here as JSON")
    args = p.parse_args(argv)
    runs = []
    for path in args.results:
        for run in read_json(path)["runs"]:
            runs.append({**run, "set": recording_name(path)})
    settings = {"baseline": json.loads(args.baseline)}
    for spec in args.candidate:
        name, _, text = spec.partition("=")
        settings[name] = json.loads(text)
    started = time.monotonic()
    out: dict[str, Any] = {"sets": [recording_name(path) for path in args.results], "runs": len(runs), "settings": {}}
    scored_by: dict[str, list[dict[str, Any]]] = {}
    for name, values in settings.items():
        scored = evaluate(runs, values)["scored"]
        for s, run in zip(scored, [r for r in runs if r.get("waits")], strict=True):
            s["set"] = run["set"]
        scored_by[name] = scored
        entry: dict[str, Any] = {"settings": values, **summarise(scored)}
        if name != "baseline":
            base = scored_by["baseline"]
            entry["criterion"] = passes(out["settings"]["baseline"], entry)
            entry["criterion_not_uninjected"] = passes(out["settings"]["baseline"], entry, "other_false_alarms")
            entry["alarms_new"] = sorted(_alarms(scored) - _alarms(base))
            entry["alarms_gone"] = sorted(_alarms(base) - _alarms(scored))
            before, after = _cells(base), _cells(scored)
            entry["cells_changed"] = [{"cell": k, "baseline": before[k], "candidate": after[k]}
                                      for k in sorted(after) if after[k] != before.get(k)]
        out["settings"][name] = entry
        print(f"{name} {json.dumps(values)}: false alarms {entry['false_alarms']} ({entry['other_false_alarms']} not on "
              f"an uninjected slow rank; by the named rank's own CPU work: "
              f"{json.dumps(entry['false_alarms_by_cpu_work'])}), in time {entry['in_time']} "
              f"{entry['in_time_by_factor']}; by shape "
              + ", ".join(f"{k} {v['false_alarms']} FA / {v['in_time']} of {v['cells']} in time"
                          for k, v in sorted(entry["by_shape"].items()))
              + (f"; criterion {json.dumps(entry['criterion'])}; not on an uninjected slow rank "
                 f"{json.dumps(entry['criterion_not_uninjected'])}" if "criterion" in entry else ""))
        for key in ("alarms_new", "alarms_gone"):
            for line in entry.get(key, []):
                print(f"  {key[7:]}: {line}")
        for cell in entry.get("cells_changed", []):
            print(f"  cell {cell['cell']}: {cell['baseline']} -> {cell['candidate']}")
    out["seconds"] = round(time.monotonic() - started, 1)
    if args.out is not None:
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
