"""`telemetry watch --root HOST:PORT [--job JOB] [--once]`: the demo's live view, attached to any running root.

It reads only the root's public HTTP API and /metrics (what Grafana and scripts read), so it works
from any machine that reaches the root's --api address, e.g. over SSH in a plain terminal. Without
--job it lists the root's jobs; with one it shows MFU, loss, per-rank step time, hardware and
events, refreshed every --interval seconds. --once prints one frame and exits.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import click
from rich.console import Console, RenderableType
from rich.live import Live

from collectors.api_client import api_url, root_option
from collectors.demo.hosts_view import fetch, fleet_frame, host_frame, host_path
from collectors.demo.view import jobs_table, render
from collectors.demo.watch import RootWatcher, list_jobs

#: width of a frame written to a pipe or file (a terminal's own width is used on a terminal)
PLAIN_WIDTH = 120


@click.command("watch")
@root_option
@click.option("--job", help="The job to watch [default: list the root's jobs].")
@click.option("--hosts", "fleet", is_flag=True, help="Watch the fleet's hardware: the worst hosts per metric now "
              "(docs/fleet.md).")
@click.option("--host", help="Watch one host: its devices, recent readings and events.")
@click.option("--once", is_flag=True, help="Print one frame and exit (for scripts and tests).")
@click.option("--interval", type=click.FloatRange(min=0.2), default=1.0, show_default=True,
              help="Seconds between refreshes.")
@click.option("--last", type=click.IntRange(min=1, max=10_000), default=200, show_default=True,
              help="Finalised steps per metric to show (the sparklines' history).")
def watch(root: str, job: str | None, fleet: bool, host: str | None, once: bool, interval: float,
          last: int) -> None:
    """Watch a running root live: its jobs, one job's MFU, loss, step time, hardware and events, or the fleet's
    hardware (--hosts, --host)."""
    api = api_url(root)
    jobs = list_jobs(api)
    if jobs is None:
        raise click.ClickException(f"no answer from a root at {api} (is its --api address reachable from here?)")
    if sum((job is not None, fleet, host is not None)) > 1:
        raise click.UsageError("--job, --hosts and --host are alternatives: give one")
    if host is not None and once and fetch(api, host_path(host)) is None:
        raise click.ClickException(f"the root at {api} knows no host {host!r} (telemetry watch --hosts lists the "
                                   "hosts it knows)")
    console = Console(width=None if Console().is_terminal else PLAIN_WIDTH)
    frame: Callable[[], RenderableType]
    refresh: Callable[[], None]
    if fleet or host is not None:
        def frame() -> RenderableType:
            stamp = f"at {time.strftime('%H:%M:%S')}"
            if host is not None:
                return host_frame(fetch(api, host_path(host)), host, stamp)
            return fleet_frame(fetch(api, "/api/v1/hosts"), stamp)

        def refresh() -> None:
            """Nothing: each frame reads the root itself."""
    elif job is None:
        def frame() -> RenderableType:
            return jobs_table(list_jobs(api) or [])

        def refresh() -> None:
            """Nothing: the jobs table reads the root itself."""
    else:
        watcher = RootWatcher(api, job, interval=interval, last=last)
        known = [any(j.get("job") == job for j in jobs)]

        def refresh() -> None:
            watcher.refresh()
            if not known[0]:
                known[0] = any(j.get("job") == job for j in list_jobs(api) or [])
            watcher.set_status(f"root {api} at {time.strftime('%H:%M:%S')}" +
                               ("" if known[0] else f"; no job {job!r} there yet"))

        def frame() -> RenderableType:
            return render(watcher.snapshot())
        refresh()
    if once:
        console.print(frame())
        return
    try:
        with Live(frame(), console=console, refresh_per_second=4, transient=False) as live:
            while True:
                time.sleep(interval)
                refresh()
                live.update(frame())
    except KeyboardInterrupt:
        pass
