"""What a long bench does around its measurement: a --quick development preset that explicit options override,
SIGTERM acting as Ctrl-C, the work in a directory of its own (a temporary one, removed after, unless one is given),
and the JSON result written even when incomplete."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


class BenchError(RuntimeError):
    """A service, a driver or a job failed: the figures after it would mean nothing."""


def failure(exc: BaseException) -> str:
    """A stopped bench's `error`: "interrupted" for Ctrl-C or SIGTERM, else what went wrong."""
    return "interrupted" if isinstance(exc, KeyboardInterrupt) else str(exc)


class Progress:
    """Progress lines on stderr (stdout keeps the table), each with the seconds since it was made (the bench's
    start)."""

    def __init__(self) -> None:
        self.start = time.monotonic()

    def __call__(self, text: str) -> None:
        print(f"[{time.monotonic() - self.start:7.1f} s] {text}", file=sys.stderr, flush=True)


def parser(doc: str | None, name: str, quick: dict[str, Any], writes: str | None = None) -> argparse.ArgumentParser:
    """A bench's argument parser with its `--out` (for NAME.json, or what `writes` says) and `--quick` (the `quick`
    preset) options."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter,
                                allow_abbrev=False)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results",
                   help=f"directory for {writes or name + '.json'}")
    preset = ", ".join(f"--{k.replace('_', '-')} {format(v, 'g') if isinstance(v, float) else v}"
                       for k, v in quick.items())
    p.add_argument("--quick", action="store_true", help=f"development preset: {preset} (explicit options still win)")
    return p


def apply_quick(args: argparse.Namespace, argv: list[str], quick: dict[str, Any]) -> None:
    """With --quick, each option of the `quick` preset that `argv` does not give takes the preset's value."""
    if args.quick:
        given = {a.split("=", 1)[0] for a in argv}
        for key, value in quick.items():
            if f"--{key.replace('_', '-')}" not in given:
                setattr(args, key, value)


def interrupt(*_: object) -> None:
    """SIGTERM acts as Ctrl-C (a shell's background job ignores SIGINT): the bench stops its jobs, drivers and
    services, writes what was measured and removes its work directory."""
    raise KeyboardInterrupt


def run_in_workdir(name: str, workdir: Path | None, run: Callable[[Path], dict[str, Any]]) -> dict[str, Any]:
    """`run(workdir)` with SIGTERM as Ctrl-C, in `workdir` (else a temporary directory, removed after); its result
    with the run's wall time (`run_time_s`)."""
    signal.signal(signal.SIGTERM, interrupt)
    where = workdir or Path(tempfile.mkdtemp(prefix=f"telemetry-{name}-"))
    where.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        result = run(where)
    finally:
        if workdir is None:
            shutil.rmtree(where, ignore_errors=True)
    result["run_time_s"] = round(time.monotonic() - started, 1)
    return result


def write_json(path: Path, result: dict[str, Any], indent: int = 2) -> None:
    """A short bench's last words: its figures written to `path` as JSON (the folder made if need be), and where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=indent) + "\n")
    print(f"wrote {path}")


def write_result(out: Path, name: str, result: dict[str, Any], what: str,
                 report: Callable[[dict[str, Any]], None] | None = None) -> int:
    """Write `result` to OUT/NAME.json; an incomplete one is said on stderr (exit status 1), a complete one is
    reported (`report`) before the path (0)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}.json"
    path.write_text(json.dumps(result, indent=1))
    if not result["complete"]:
        print(f"{what} failed: {result.get('error')}", file=sys.stderr)
        print(f"wrote {path} (incomplete)", file=sys.stderr)
        return 1
    if report is not None:
        report(result)
    print(f"wrote {path}")
    return 0
