"""How long a service takes to stop on SIGTERM, on an idle machine and with background CPU load (issue 23 §4).

Each cycle starts a service (`telemetry collector` as root, as rack, `telemetry agent`), waits for its ready
line, sends SIGTERM and times the exit from the signal. The same cycles run twice in one go: unloaded, then with
--hogs busy-looping processes (`while True: pass`, the load a shared CI machine has), so the two are compared
on one machine in one run. A stop that overran the services' 4.5 s deadline shows as its thread dump on
stderr ("stop took longer"); its first lines are kept in the JSON.

    .venv/bin/python bench/stop_time.py                     # 10 cycles per service, 2 hogs
    .venv/bin/python bench/stop_time.py --cycles 30 --hogs 4 --out bench/results/stop_time.json
    .venv/bin/python bench/ab.py --base REV -- $PWD/bench/stop_time.py --tree . --cycles 5 --out {out}/s.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))  # shared with tests/test_service_signals.py
from service_argv import service_argv

REPO = Path(__file__).resolve().parents[1]
SERVICES = ("root", "rack", "agent")
HOG = "while True:\n    pass\n"


TREE = REPO  # the checkout whose services are started (--tree)


def _start(argv: list[str], workdir: Path) -> tuple[subprocess.Popen, dict]:
    workdir.mkdir(parents=True, exist_ok=True)
    stderr = open(workdir / "stderr", "wb")  # the child keeps its own copy: closed here once it started
    proc = subprocess.Popen([sys.executable, "-m", "collectors.cli", *argv], cwd=TREE, stdout=subprocess.PIPE,
                            stderr=stderr, stdin=subprocess.DEVNULL)
    stderr.close()
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if not line.startswith(b"{"):
        proc.kill()
        raise RuntimeError(f"{argv[0]} did not start: {(workdir / 'stderr').read_text()[-2000:]}")
    return proc, json.loads(line)


def _one_stop(service: str, workdir: Path, parent: str | None) -> dict:
    proc, _ = _start(service_argv(service, workdir, parent), workdir)
    time.sleep(0.2)  # past the ready line: the flush loop and the gRPC server running
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(30)
    stop_s = time.monotonic() - sent
    err = (workdir / "stderr").read_text(errors="replace")
    return {"service": service, "stop_s": round(stop_s, 4), "exit": code,
            "overran": "stop took longer" in err, "dump": err[:1500] if "stop took longer" in err else ""}


def _cycles(n: int, base: Path, parent: str, label: str) -> list[dict]:
    out = []
    for i in range(n):
        for service in SERVICES:
            out.append({**_one_stop(service, base / f"{label}-{service}-{i}", parent), "load": label})
    return out


def _summary(rows: list[dict]) -> dict:
    times = sorted(r["stop_s"] for r in rows)
    return {"n": len(times), "median_s": round(statistics.median(times), 3),
            "p90_s": round(times[min(len(times) - 1, int(0.9 * len(times)))], 3), "max_s": round(times[-1], 3),
            "over_1s": sum(t > 1.0 for t in times), "over_5s": sum(t > 5.0 for t in times),
            "overran": sum(r["overran"] for r in rows), "nonzero_exit": sum(r["exit"] != 0 for r in rows)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cycles", type=int, default=10, help="stops per service and load")
    p.add_argument("--hogs", type=int, default=2, help="busy-looping processes during the loaded half")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "stop_time.json")
    p.add_argument("--tree", type=Path, default=REPO, help="the checkout whose services are started (bench/ab.py: "
                   "give --tree . to compare revisions)")
    args = p.parse_args()
    global TREE
    TREE = args.tree.resolve()
    with tempfile.TemporaryDirectory(prefix="stop-time-") as tmp:
        base = Path(tmp)
        root, ready = _start(service_argv("root", base / "parent", None), base / "parent")  # the rack's and agent's
        try:
            rows = _cycles(args.cycles, base, ready["address"], "idle")
            hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
            try:
                rows += _cycles(args.cycles, base, ready["address"], f"{args.hogs}_hogs")
            finally:
                for hog in hogs:
                    hog.kill()
                    hog.wait()
        finally:
            root.terminate()
            root.wait(30)
    loads = sorted({r["load"] for r in rows}, key=lambda load: load != "idle")
    table = {load: {service: _summary([r for r in rows if r["load"] == load and r["service"] == service])
                    for service in SERVICES} for load in loads}
    print(f"{'load':<8} {'service':<7} {'n':>3} {'median s':>9} {'p90 s':>7} {'max s':>7} {'>1 s':>5} {'>5 s':>5}")
    for load, by_service in table.items():
        for service, s in by_service.items():
            print(f"{load:<8} {service:<7} {s['n']:>3} {s['median_s']:>9.3f} {s['p90_s']:>7.3f} {s['max_s']:>7.3f} "
                  f"{s['over_1s']:>5} {s['over_5s']:>5}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
        "cycles": args.cycles, "hogs": args.hogs, "summary": table, "stops": rows}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
