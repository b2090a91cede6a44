"""`telemetry detectors`: read or change the root's detector settings while it runs (docs/detectors.md).

    telemetry detectors show [--job JOB]                          what the detectors run with, and the overrides
    telemetry detectors set [--job JOB] mfu_drop.noise_k=3 hang.grace_s=30 straggler.enabled=false
    telemetry detectors unset [--job JOB] mfu_drop.noise_k hang   back to the start-up settings (an option, a section)

Without --job a change is for every job; with it, for that job (every attempt of it), over the all-jobs settings.
A VALUE is read as JSON when it parses (3, 0.5, true, [[0.15, 0.6], [0.04, 1.2]]), else as a string
(severity=critical). The root checks every value and refuses the whole change naming the field (HTTP 400); it
keeps the settings in its database, so a restarted root applies them again.
"""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console

from collectors.api_client import api_url, call, root_option, token_option


def _url(root: str, job: str | None) -> str:
    api = api_url(root)
    return f"{api}/api/v1/jobs/{job}/detectors" if job else f"{api}/api/v1/detectors"


def _value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _patch(items: tuple[str, ...], assign: bool) -> dict[str, Any]:
    patch: dict[str, Any] = {}
    for item in items:
        name, equals, text = item.partition("=")
        if assign and not equals:
            raise click.UsageError(f"{item!r}: give SECTION.OPTION=VALUE")
        if not assign and equals:
            raise click.UsageError(f"{item!r}: give SECTION or SECTION.OPTION (no value)")
        section, dot, option = name.strip().partition(".")
        if not section or (assign and not option) or (dot and not option):
            raise click.UsageError(f"{item!r}: give SECTION.OPTION{'=VALUE' if assign else ''}")
        if not option:
            patch[section] = None
            continue
        target = patch.setdefault(section, {})
        if target is None:
            raise click.UsageError(f"{item!r}: section {section} is already removed whole")
        target[option] = _value(text) if assign else None
    return patch


def _show(answer: dict[str, Any], job: str | None) -> None:
    console = Console()
    console.print(f"settings version {answer.get('version')}")
    all_jobs = answer.get("all_jobs")
    console.print("all jobs: " + (json.dumps(all_jobs) if all_jobs else "start-up settings"), markup=False,
                  highlight=False)
    if job:
        this = answer.get("this_job")
        console.print(f"job {job}: " + (json.dumps(this) if this else "no overrides of its own"), markup=False,
                      highlight=False)
    else:
        for name, override in (answer.get("jobs") or {}).items():
            console.print(f"job {name}: {json.dumps(override)}", markup=False, highlight=False)


def _print(answer: dict[str, Any], job: str | None, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(answer, indent=1))
    else:
        _show(answer, job)


job_option = click.option("--job", help="One job (every attempt of it) [default: every job].")
json_option = click.option("--json", "as_json", is_flag=True,
                           help="Print the API's JSON answer (with every option in force, under `effective`).")


@click.group("detectors")
def detectors() -> None:
    """Read or change the root's detector settings while it runs: thresholds, on/off per detector, per job."""


@detectors.command("show")
@root_option
@token_option
@job_option
@json_option
def show(root: str, token: str | None, job: str | None, as_json: bool) -> None:
    """The overrides (all jobs, each job's) over the start-up settings; --json: every option in force."""
    answer = call(_url(root, job), token)
    _print(answer, job, as_json)


@detectors.command("set")
@root_option
@token_option
@job_option
@json_option
@click.argument("assignments", nargs=-1, required=True, metavar="SECTION.OPTION=VALUE...")
def set_(root: str, token: str | None, job: str | None, as_json: bool, assignments: tuple[str, ...]) -> None:
    """Change options (e.g. mfu_drop.noise_k=3 hang.grace_s=30 dataloader_stall.enabled=false)."""
    answer = call(_url(root, job), token, _patch(assignments, assign=True))
    _print(answer, job, as_json)


@detectors.command("unset")
@root_option
@token_option
@job_option
@json_option
@click.argument("names", nargs=-1, required=True, metavar="SECTION[.OPTION]...")
def unset(root: str, token: str | None, job: str | None, as_json: bool, names: tuple[str, ...]) -> None:
    """Drop overrides: an option (mfu_drop.noise_k) or a whole section (mfu_drop) goes back to what is under it."""
    answer = call(_url(root, job), token, _patch(names, assign=False))
    _print(answer, job, as_json)
