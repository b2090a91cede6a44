"""`telemetry forensics`: read, or ask for, the captures the root keeps (docs/forensics.md).

    telemetry forensics --root HOST:PORT JOB EVENT_ID          an event's captures
    telemetry forensics --root HOST:PORT JOB --ranks 2,5       ask for captures of ranks 2 and 5 now, wait, print

Prints, per rank: where the capture came from (the rank itself, py-spy, or /proc), the process's state,
every thread's stack, and the flight recorder's newest entries. --json prints the API's answer as is.
"""

from __future__ import annotations

import json
import time
from typing import Any

import click
from rich.console import Console

from collectors.api_client import api_url, call, root_option, token_option

FR_SHOWN = 8  # newest flight-recorder entries printed per rank


def _fr_lines(fr: Any) -> list[str]:
    entries = (fr or {}).get("entries") or [] if isinstance(fr, dict) else []
    lines = []
    for e in entries[-FR_SHOWN:]:
        sizes = e.get("input_sizes")
        lines.append(f"  #{e.get('collective_seq_id')} {e.get('profiling_name')} in={sizes} "
                     f"{e.get('input_dtypes')} state={e.get('state')} retired={e.get('retired')}")
    return lines


def show(console: Console, answer: dict) -> None:
    console.print(f"[bold]{answer.get('request_id')}[/] job {answer.get('job')} attempt {answer.get('attempt')}: "
                  f"{answer.get('reason')}; ranks asked {answer.get('ranks')}, waiting for {answer.get('pending')}")
    if answer.get("fr_dir"):
        console.print(f"flight-recorder dumps for torchfrtrace: {answer['fr_dir']}")
    for c in answer.get("captures", []):
        process = c.get("process") or {}
        console.rule(f"rank {c['rank']} on {c.get('host') or '?'}: source {c['source']}, "
                     f"{c.get('seconds_to_store')} s after asking")
        if c.get("error"):
            console.print(f"[yellow]{c['error']}[/]")
        if process:
            console.print(f"process {process.get('pid')}: state {process.get('state')} wchan "
                          f"{process.get('wchan') or '-'}, {process.get('cpu_s')} CPU s, {process.get('threads')} "
                          "threads", markup=False)
        console.print(c.get("stacks") or "(no stacks)", markup=False, highlight=False)
        lines = _fr_lines(c.get("flight_recorder"))
        if lines:
            console.print("flight recorder, newest entries:")
            for line in lines:
                console.print(line, markup=False, highlight=False)


@click.command("forensics")
@root_option
@token_option
@click.argument("job")
@click.argument("event_id", required=False, type=click.IntRange(min=0))
@click.option("--ranks", help="Ask for captures of these ranks now (comma-separated) instead of reading an event's.")
@click.option("--attempt", type=click.IntRange(min=0), help="With --ranks: the job's attempt [default: the latest].")
@click.option("--wait", type=click.FloatRange(min=0), default=15.0, show_default=True,
              help="Seconds to wait for every rank asked to answer.")
@click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer.")
def forensics(root: str, token: str | None, job: str, event_id: int | None, ranks: str | None,
              attempt: int | None, wait: float, as_json: bool) -> None:
    """Show the captures (stacks, flight recorder, process state) of an event's culprits, or ask for some."""
    api = api_url(root)
    if (event_id is None) == (ranks is None):
        raise click.UsageError("give either an EVENT_ID or --ranks")
    if ranks is not None:
        try:
            wanted = sorted({int(r) for r in ranks.split(",") if r.strip()})
        except ValueError:
            raise click.UsageError(f"--ranks must be comma-separated integers, got {ranks!r}") from None
        body: dict[str, Any] = {"ranks": wanted}
        if attempt is not None:
            body["attempt"] = attempt
        asked = call(f"{api}/api/v1/jobs/{job}/forensics", token, body)
        url = f"{api}{asked['url']}"
    else:
        url = f"{api}/api/v1/jobs/{job}/events/{event_id}/forensics"
    deadline = time.monotonic() + wait
    answer = call(url, token)
    while answer.get("pending") and time.monotonic() < deadline:
        time.sleep(0.5)
        answer = call(url, token)
    if as_json:
        click.echo(json.dumps(answer, indent=1))
    else:
        show(Console(), answer)
