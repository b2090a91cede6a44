"""The live terminal view (rich) of `telemetry demo` and `telemetry watch`: MFU, loss, per-rank step time,
hardware, and the events as raised. Plain text panels: it works over SSH in any terminal."""

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


def _arrival(step_rows: list[dict[str, Any]]) -> Callable[[Text, dict[str, Any], list[dict[str, Any]]], None]:
    """A synchronous job: every rank's step time is the slowest one's, so the panel shows who the others wait
    for, from collective_arrival (each rank's own work between two synchronisations)."""
    walls = {r["step"]: r for r in step_rows}

    def fill(body: Text, row: dict[str, Any], rows: list[dict[str, Any]]) -> None:
        p50, high = row["p50"], row["max"]
        wall = walls.get(row["step"])
        body.append(f"step {row['step']}  step time p50 {_num(wall['p50'] * 1e3 if wall else None, '{:.0f}')} ms  "
                    f"own work p50 {_num(p50 * 1e3, '{:.0f}')} ms\n")
        body.append(f"last to the collective: rank {row['argmax']} ({_num(high * 1e3, '{:.0f}')} ms); the median "
                    f"rank waits {_num((high - p50) * 1e3, '{:.0f}')} ms   ranks {row['count']}/{row['expected']}\n")
        body.append("wait ")
        body.append(sparkline([r["max"] - r["p50"] if r.get("p50") is not None else None for r in rows]),
                    style="yellow")
    return fill


def _flags(up: float | None, up_min: float | None, what: str) -> str:
    """'NICs all up' / 'some down' / 'all down' from the max and min of 0/1 flags over a host's devices."""
    if up is None:
        return ""
    if up_min is not None and up_min >= 1:
        return f"{what} all up"
    return f"{what} some down" if up >= 1 else f"{what} all down"


def _host_line(host: str, figures: dict[str, float]) -> Text:
    line = Text(f"host {host}: ", style="bold")
    parts = [_flags(figures.get("NICs up"), figures.get("NICs up (min)"), "NICs")]
    parts += [f"{name} {_num(figures[name])}" for name in ("NIC/IB errors", "rx dropped", "tx dropped")
              if name in figures]
    if "IB ports active" in figures:
        parts.append(_flags(figures["IB ports active"], figures.get("IB ports active (min)"), "IB ports"))
        if "IB Gb/s" in figures:
            parts.append(f"IB {_num(figures['IB Gb/s'])} Gb/s")
    else:
        parts.append("no InfiniBand")
    gpus = [f"{name} {_num(value)}" for name, value in sorted(figures.items()) if name.startswith(("GPU", "ECC",
                                                                                                   "XID"))]
    parts += gpus
    line.append("  ".join(p for p in parts if p))
    return line


def _hardware_panel(hardware: dict[str, float], hosts: dict[str, dict[str, float]] | None = None) -> Panel:
    """What the agents sample, saying plainly what is absent: this job's GPUs, then each host's NICs/IB."""
    body = Text()
    if hardware:
        body.append("job GPUs (max): " + "  ".join(f"{name} {_num(value)}" for name, value in sorted(hardware.items())))
    else:
        body.append("no GPU telemetry for this job (no NVML or no GPU where its ranks run)", style="dim")
    shown = sorted(hosts or {})[:6]
    for host in shown:
        body.append("\n")
        body.append_text(_host_line(host, (hosts or {})[host]))
    if not shown:
        body.append("\nno host NIC/InfiniBand telemetry (agents started with --no-nic-probe, or not sampled yet)",
                    style="dim")
    elif len(hosts or {}) > len(shown):
        body.append(f"\n… {len(hosts or {}) - len(shown)} more hosts", style="dim")
    return Panel(body, title="hardware health", border_style="blue")


def jobs_table(jobs: list[dict[str, Any]]) -> Table:
    """The root's jobs, for `telemetry watch` without --job."""
    table = Table(title="jobs at this root (telemetry watch --job JOB)", expand=True)
    for column in ("job", "world size", "last finalised step"):
        table.add_column(column)
    for job in jobs:
        table.add_row(str(job.get("job")), _num(job.get("world_size"), "{}"), _num(job.get("last_step"), "{}"))
    if not jobs:
        table.add_row(Text("no jobs yet", style="dim"), "", "")
    return table


def events_table(events: list[dict[str, Any]], limit: int = 12, final: list[dict[str, Any]] | None = None) -> Table:
    """The events as first raised; with `final`, each one's status and last step are the final ones."""
    latest = {e["id"]: e for e in final or []}
    events = [{**e, "status": latest.get(e["id"], e).get("status"),
               "last_step": latest.get(e["id"], e).get("last_step")}
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


def top_frames(stacks: str, source: str, n: int = 3) -> list[str]:
    """The innermost `n` frames of the main thread (the first thread or traceback listed), innermost first. The SDK
    writes traceback's layout (outermost first: "File ..., line N, in f", under "Thread ..." or "Traceback ...");
    faulthandler writes innermost first ("Thread 0x... (most recent call first):"); py-spy too ("f (file:N)")."""
    lines = stacks.splitlines()
    starts = [i for i, line in enumerate(lines)
              if line.startswith(("Thread ", "Current thread ", "Traceback (most recent call last)"))]
    if not starts:
        return []
    block = lines[starts[0] + 1:starts[1] if len(starts) > 1 else len(lines)]
    if source == "py-spy":
        return [line.strip() for line in block if line.strip()][:n]
    frames = [line.strip() for line in block if line.lstrip().startswith("File ")]
    return frames[:n] if "most recent call first" in lines[starts[0]] else frames[::-1][:n]


def culprits_panel(culprits: list[dict[str, Any]]) -> Panel:
    """Where the ranks named by open hang/straggler/mismatch/crash events are (or died): their captures' top
    frames."""
    body = Text()
    for c in culprits:
        process = c.get("process") or {}
        body.append(f"#{c['event_id']} {c['kind']}: rank {c['rank']} on {c.get('host') or '?'} "
                    f"({c['source']}, state {process.get('state', '?')} {process.get('wchan') or ''})\n", style="bold")
        for frame in top_frames(c.get("stacks") or "", c["source"]):
            body.append(f"  {_short(frame, 110)}\n")
    return Panel(body, title="where the culprits are (telemetry forensics JOB EVENT_ID for everything)",
                 border_style="red")


def _short(value: Any, limit: int = 60) -> str:
    text = str(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def render(snapshot: Snapshot, world_size: int | None = None, steps: int | None = None,
           scenario: Sequence[str] = ()) -> RenderableType:
    """One frame: header, MFU, loss, per-rank step time, hardware, events (and the demo's injected faults)."""
    progress = snapshot.progress
    header = Text()
    header.append(f"job {snapshot.job}  ", style="bold")
    if world_size is not None:
        header.append(f"{world_size} ranks" + (f", {steps} steps  " if steps is not None else "  "))
    if progress:
        header.append(f"progress: steps {_num(progress.get('min_step'), '{:.0f}')}.."
                      f"{_num(progress.get('max_step'), '{:.0f}')}  "
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
    arrivals = snapshot.steps.get("collective_arrival", [])
    per_rank = (_step_panel("per-rank step time (who the others wait for)", "yellow", arrivals,
                            _arrival(snapshot.steps.get("step_time", []))) if arrivals
                else _step_panel("per-rank step time", "yellow", snapshot.steps.get("step_time", []), _step_time))
    grid.add_row(per_rank,
                 _hardware_panel(snapshot.hardware, snapshot.hosts))
    parts: list[RenderableType] = [header, grid, events_table(snapshot.events)]
    if snapshot.culprits:
        parts.append(culprits_panel(snapshot.culprits))
    if scenario:
        parts.append(Text("injected: " + "; ".join(scenario), style="dim"))
    return Group(*parts)
