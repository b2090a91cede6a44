"""The demo's terminal view (rich): MFU, loss, per-rank step time, hardware, and the events as raised."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from collectors.demo.watch import Snapshot

_BLOCKS = "▁▂▃▄▅▆▇█"
_SEVERITY_STYLE = {"critical": "bold red", "error": "red", "warning": "yellow", "info": "cyan"}


def sparkline(values: Sequence[float | None], width: int = 40) -> str:
    """Unicode blocks scaled to the finite values shown; a non-finite or missing value is '×'."""
    shown = list(values)[-width:]
    finite = [v for v in shown if v is not None and math.isfinite(v)]
    if not finite:
        return ""
    low, high = min(finite), max(finite)
    span = (high - low) or 1.0
    return "".join("×" if v is None or not math.isfinite(v) else _BLOCKS[int((v - low) / span * 7.999)]
                   for v in shown)


def _num(value: Any, fmt: str = "{:.4g}") -> str:
    if value is None:
        return "—"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return fmt.format(value)


def _step_panel(title: str, style: str, rows: list[dict[str, Any]],
                fill: Callable[[Text, dict[str, Any], list[dict[str, Any]]], None]) -> Panel:
    """A panel of one metric's finalised steps: `fill` writes the latest row (and the history) into it."""
    body = Text()
    if rows:
        fill(body, rows[-1], rows)
    else:
        body.append("waiting for the first finalised step", style="dim")
    return Panel(body, title=title, border_style=style)


def _mfu(body: Text, row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    body.append(f"step {row['step']}  mean {_num(row['mean'], '{:.1%}')}  "
                f"min {_num(row['min'], '{:.1%}')} (rank {row['argmin']})\n")
    body.append(sparkline([r["mean"] for r in rows]), style="green")


def _loss(body: Text, row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    body.append(f"step {row['step']}  mean {_num(row['mean'])}  min {_num(row['min'])}  max {_num(row['max'])}\n")
    body.append(sparkline([r["mean"] for r in rows]), style="magenta")
    bad = [r for r in rows if r.get("nonfinite_count")]
    if bad:
        body.append(f"\nnon-finite: step {bad[-1]['step']}, ranks {bad[-1]['nonfinite_sources'][:8]}", style="bold red")


def _step_time(body: Text, row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    p50, high = row["p50"], row["max"]
    body.append(f"step {row['step']}  p50 {_num(p50 * 1e3, '{:.0f}')} ms  p99 {_num(row['p99'] * 1e3, '{:.0f}')} ms  "
                f"max {_num(high * 1e3, '{:.0f}')} ms (rank {row['argmax']})\n")
    body.append(f"collective wait (max − p50): {_num((high - p50) * 1e3, '{:.0f}')} ms   "
                f"ranks {row['count']}/{row['expected']}\n")
    body.append("max/p50 ")
    body.append(sparkline([r["max"] / r["p50"] if r.get("p50") else None for r in rows]), style="yellow")


def _hardware_panel(hardware: dict[str, float]) -> Panel:
    if not hardware:
        body = Text("no GPU or NIC telemetry from this host (NVML unavailable, no NIC counters); on GPU nodes "
                    "the agent samples NVML and the NICs every second", style="dim")
    else:
        body = Text("  ".join(f"{name} {_num(value)}" for name, value in sorted(hardware.items())))
    return Panel(body, title="hardware health (max over GPUs)", border_style="blue")


def events_table(events: list[dict[str, Any]], limit: int = 12, final: list[dict[str, Any]] | None = None) -> Table:
    """The events as first raised; with `final`, each one's status and last step are the final ones."""
    latest = {e["id"]: e for e in final or []}
    events = [{**e, "status": latest.get(e["id"], e).get("status"), "last_step": latest.get(e["id"], e).get("last_step")}
              for e in events]
    events += [e for e in final or [] if e["id"] not in {x["id"] for x in events}]
    events.sort(key=lambda e: e["id"])
    table = Table(title="events", expand=True, show_lines=False)
    for column in ("#", "kind", "status", "steps", "ranks", "severity", "detail"):
        table.add_column(column, overflow="fold")
    for event in events[-limit:]:
        steps = f"{event.get('step')}" + (f"–{event['last_step']}" if event.get("last_step") not in
                                         (None, event.get("step")) else "")
        detail = event.get("detail") or {}
        summary = detail.get("summary") or ", ".join(f"{k}={_short(v)}" for k, v in list(detail.items())[:4])
        table.add_row(str(event.get("id")), event.get("kind", ""), event.get("status", ""), steps,
                      _short(event.get("ranks", [])), Text(event.get("severity", ""),
                                                           style=_SEVERITY_STYLE.get(event.get("severity", ""), "")),
                      summary)
    return table


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(snapshot: Snapshot, world_size: int, steps: int, scenario: list[str]) -> RenderableType:
    progress = snapshot.progress
    header = Text()
    header.append(f"job {snapshot.job}  ", style="bold")
    header.append(f"{world_size} ranks, {steps} steps  ")
    if progress:
        header.append(f"progress: steps {progress.get('min_step', '—')}..{progress.get('max_step', '—')}  "
                      f"alive {progress.get('alive', 0)} stuck {progress.get('stuck', 0)} "
                      f"dead {progress.get('dead', 0)}  ")
    header.append(f"[{snapshot.status}]", style="dim")
    grid = Table.grid(expand=True)
    grid.add_column(ratio=1)
    grid.add_column(ratio=1)
    mfu_rows = snapshot.steps.get("mfu", [])
    mfu = (_step_panel("MFU", "green", mfu_rows, _mfu) if mfu_rows or not snapshot.steps.get("step_time")
           else Panel(Text("no MFU logged: the ranks know no peak FLOP/s for their device (a GPU in the table, "
                           "TELEMETRY_PEAK_FLOPS or --peak-flops)", style="dim"), title="MFU", border_style="green"))
    grid.add_row(mfu,
                 _step_panel("loss", "magenta", snapshot.steps.get("loss", []), _loss))
    grid.add_row(_step_panel("per-rank step time", "yellow", snapshot.steps.get("step_time", []), _step_time),
                 _hardware_panel(snapshot.hardware))
    injected = Text("injected: " + "; ".join(scenario), style="dim")
    return Group(header, grid, events_table(snapshot.events), injected)
