"""`telemetry watch --hosts` and `--host NAME`: the fleet's hardware as the root's API serves it
(collectors/root/hosts.py, docs/fleet.md): the worst hosts per metric now, and one host's devices, recent
readings and events."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text


def fetch(api: str, path: str) -> dict[str, Any] | None:
    """GET a JSON body from the root's API, or None when it does not answer (or answers an error)."""
    try:
        with urllib.request.urlopen(api.rstrip("/") + path, timeout=5) as reply:
            body = json.load(reply)
    except (OSError, ValueError):
        return None
    return body if isinstance(body, dict) else None


def _value(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def fleet_frame(body: dict[str, Any] | None, status: str = "") -> RenderableType:
    """The worst of the latest second per metric, and the hosts known."""
    if body is None:
        return Text(f"no answer from the root's /api/v1/hosts {status}", style="red")
    worst = Table(title=f"the fleet's worst, latest second (telemetry watch --host HOST) {status}", expand=True)
    for column in ("metric", "reporting", "highest (host device value)", "lowest (host device value)"):
        worst.add_column(column, overflow="fold")
    for metric, entry in sorted(body.get("worst", {}).items()):
        worst.add_row(metric, str(entry.get("sources")),
                      ", ".join(f"{t['host']} {t['device']} {_value(t['value'])}" for t in entry.get("top", [])),
                      ", ".join(f"{t['host']} {t['device']} {_value(t['value'])}" for t in entry.get("bottom", [])))
    if not body.get("worst"):
        worst.add_row(Text("no fleet windows yet (agents report into them unless run with --host-index off)",
                           style="dim"), "", "", "")
    hosts = body.get("hosts", [])
    fleet = [h for h in hosts if h.get("layout") == "fleet"]
    per_host = [h["host"] for h in hosts if h.get("layout") != "fleet"]
    summary = Text(f"{len(fleet)} host(s) in the fleet layout, {len(per_host)} in the per-host layout"
                   + (f" ({', '.join(per_host[:8])}{'...' if len(per_host) > 8 else ''})" if per_host else ""))
    return Group(worst, summary)


def host_frame(body: dict[str, Any] | None, host: str, status: str = "") -> RenderableType:
    """One host: the latest kept reading per metric and device, and its events."""
    if body is None:
        return Text(f"no host {host!r} at the root's /api/v1/hosts {status}", style="red")
    latest: dict[tuple[str, str], tuple[int, object]] = {}
    for reading in body.get("readings", []):
        for device, value in reading.get("values", {}).items():
            latest[(reading["metric"], device)] = (reading["time_ms"], value)
    readings = Table(title=f"{host} (index {body.get('index')}, {len(body.get('devices', []))} devices) {status}",
                     expand=True)
    for column in ("metric", "device", "latest kept value"):
        readings.add_column(column)
    for (metric, device), (_, value) in sorted(latest.items()):
        readings.add_row(metric, device, _value(value) if value is not None else Text("reported (not in top/bottom k)",
                                                                                         style="dim"))
    events = Table(title="events naming this host", expand=True)
    for column in ("#", "job", "status", "severity", "detail"):
        events.add_column(column, overflow="fold")
    for event in body.get("events", [])[:12]:
        events.add_row(str(event["id"]), event["job"], event["status"], event["severity"],
                       str(event.get("detail", {}).get("summary", "")))
    return Group(readings, events)


def host_path(host: str, seconds: int = 60) -> str:
    return f"/api/v1/hosts/{urllib.parse.quote(host, safe='')}?seconds={seconds}"
