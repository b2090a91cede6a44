"""`telemetry doctor`: check this node the way a rank's values travel, and say what to fix (collectors/doctor.py).

Run it on a training node, as the user the training runs as: it finds the agent as the SDK would
(TELEMETRY_AGENT, else the default socket), and the agent's parents from --parent or the agent's config file
(/etc/telemetry/agent.toml when it is there). Exit status 1 when a check fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from collectors.doctor import FAIL, OK, SKIP, WARN, config_parents, run_checks

DEFAULT_CONFIG = Path("/etc/telemetry/agent.toml")
_MARK = {OK: "ok  ", WARN: "WARN", FAIL: "FAIL", SKIP: "skip"}


@click.command("doctor")
@click.option("--agent", metavar="ADDR", help="The agent's address (unix:PATH or HOST:PORT) [default: as the SDK "
              "finds it: TELEMETRY_AGENT, else the default socket].")
@click.option("--parent", "parents", multiple=True, metavar="ADDR",
              help="A parent collector to check (repeatable) [default: the --config file's parents].")
@click.option("--config", type=click.Path(dir_okay=False, path_type=Path),
              help=f"The agent's config file, for its parents and TLS [default: {DEFAULT_CONFIG} if readable].")
@click.option("--root-api", metavar="HOST:PORT", envvar="TELEMETRY_ROOT_API",
              help="The root's HTTP API: compare this host's clock with the root's [env: TELEMETRY_ROOT_API].")
@click.option("--timeout", type=click.FloatRange(min=0.1), default=2.0, show_default=True,
              help="Seconds each network check waits.")
@click.option("--nvml/--no-nvml", default=True, show_default=True, help="Check NVML and the GPUs.")
@click.option("--json", "as_json", is_flag=True, help="Print the findings as JSON.")
def doctor(agent: str | None, parents: tuple[str, ...], config: Path | None, root_api: str | None,
           timeout: float, nvml: bool, as_json: bool) -> None:
    """Check this node: agent reachable, its parent reachable, socket permissions, NVML, clock."""
    security = None
    wanted = list(parents)
    path = config or (DEFAULT_CONFIG if DEFAULT_CONFIG.is_file() else None)
    if path is not None and not parents:
        try:
            wanted, security = config_parents(path)
        except (OSError, ValueError) as exc:
            raise click.BadParameter(f"cannot read {path}: {exc}", param_hint="--config") from None
    findings = run_checks(agent, wanted, security, root_api, timeout, nvml=nvml)
    if as_json:
        click.echo(json.dumps([f.as_dict() for f in findings], indent=1))
    else:
        width = max(len(f.check) for f in findings)
        for f in findings:
            click.echo(f"{_MARK[f.status]}  {f.check:<{width}}  {f.detail}")
    failed = [f for f in findings if f.status == FAIL]
    if failed:
        if not as_json:
            click.echo(f"{len(failed)} check(s) failed: ranks on this node would deliver nothing", err=True)
        raise SystemExit(1)
