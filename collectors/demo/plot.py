"""The demo's `--plot FILE.png`: loss, step time, MFU and hardware over the run, with the events marked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from telemetry.names import ARRIVAL_METRIC as ARRIVAL

EVENT_COLOURS = {"straggler": "tab:orange", "loss_spike": "tab:red", "nonfinite": "black", "hang": "tab:purple",
                 "mfu_drop": "tab:brown", "dataloader_stall": "tab:olive", "hardware": "tab:blue"}


def _finite(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def _step_time_panel(axis: Any, metrics: dict[str, list[dict[str, Any]]], events: list[dict[str, Any]]) -> None:
    """Step time, and who the others wait for. Under synchronous collectives every rank's wall step time is the
    slowest rank's, so p50, p99 and max of `step_time` lie on one line; what tells the straggler is each rank's
    arrival at the step's last collective (`collective_arrival`): the gap from the median rank to the last one
    (the arrival lag) and which rank was last (argmax)."""
    rows = metrics.get("step_time", [])
    steps = [r["step"] for r in rows]
    arrival = metrics.get(ARRIVAL, [])
    if not arrival:  # ranks that do not synchronise: their own step times differ, p50 / p99 / max apart
        for stat, colour, style in (("p50", "tab:green", "-"), ("p99", "tab:orange", "--"), ("max", "tab:red", ":")):
            axis.plot(steps, [_finite(r[stat]) * 1e3 for r in rows], color=colour, linestyle=style, label=stat,
                      linewidth=2 if stat == "p50" else 1.5, marker="." if stat == "max" else None)
    else:
        axis.plot(steps, [_finite(r["p50"]) * 1e3 for r in rows], color="tab:green", linewidth=2,
                  label="step time (every rank waits for the slowest)")
        a_steps = [r["step"] for r in arrival]
        median = [_finite(r["p50"]) * 1e3 for r in arrival]
        last = [_finite(r["max"]) * 1e3 for r in arrival]
        axis.plot(a_steps, median, color="tab:blue", linestyle="--", label="arrival at the collective: median rank")
        axis.plot(a_steps, last, color="tab:red", linestyle=":", marker=".", label="arrival: last rank")
        axis.fill_between(a_steps, median, last, color="tab:red", alpha=0.15, label="arrival lag (last - median)")
    for event in events:
        if event.get("kind") != "straggler" or event.get("step") is None or not event.get("ranks"):
            continue
        at = next((r for r in (arrival or rows) if r["step"] == event["step"]), None)
        y = _finite(at["max"]) * 1e3 if at else math.nan
        if math.isfinite(y):
            named = ", ".join(str(rank) for rank in event["ranks"][:3])
            axis.annotate(f"straggler: rank {named}", xy=(event["step"], y), xytext=(30, -45),
                          textcoords="offset points", color="tab:red", fontweight="bold",
                          arrowprops={"arrowstyle": "->", "color": "tab:red"})
    axis.set_ylabel("ms")
    axis.set_title("step time, and arrival at each step's last collective")


def plot(report: dict[str, Any], hardware_history: list[tuple[float, dict[str, float]]], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'treemetry[demo]'") from None
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    metrics = report["metrics"]
    # Without hardware readings (no GPU, no NIC counters) that panel is one line of text: keep it small.
    ratios = [3, 3, 3, 3 if hardware_history else 0.6]
    fig, axes = plt.subplots(4, 1, figsize=(11, 12 if hardware_history else 10), sharex=False,
                             gridspec_kw={"height_ratios": ratios})
    loss, step_time, mfu, hardware = axes

    rows = metrics.get("loss", [])
    steps = [r["step"] for r in rows]
    loss.plot(steps, [_finite(r["mean"]) for r in rows], color="tab:purple", label="mean")
    loss.fill_between(steps, [_finite(r["min"]) for r in rows], [_finite(r["max"]) for r in rows],
                      color="tab:purple", alpha=0.2, label="min–max")
    for r in rows:
        if r.get("nonfinite_count"):
            loss.axvline(r["step"], color="black", linestyle=":", linewidth=1)
    loss.set_ylabel("loss")

    _step_time_panel(step_time, metrics, report.get("events", []))

    rows = metrics.get("mfu", [])
    mfu.plot([r["step"] for r in rows], [_finite(r["mean"]) * 100 for r in rows], color="tab:green", label="mean",
             linewidth=2)
    mfu.plot([r["step"] for r in rows], [_finite(r["min"]) * 100 for r in rows], color="tab:gray", label="min",
             linewidth=1, linestyle="--")
    mfu.set_ylabel("MFU (%)")
    mfu.set_xlabel("step")

    if hardware_history:
        start = hardware_history[0][0]
        names = sorted({name for _, values in hardware_history for name in values})
        for name in names:
            hardware.plot([t - start for t, values in hardware_history if name in values],
                          [values[name] for _, values in hardware_history if name in values], label=name)
        hardware.set_xlabel("seconds since the first sample")
        hardware.legend(loc="upper left", fontsize="small")
    else:
        hardware.text(0.5, 0.5, "no hardware telemetry from this host (no NVML / NIC counters)",
                      ha="center", va="center", transform=hardware.transAxes)
        hardware.set_xticks([])
        hardware.set_yticks([])
    hardware.set_title("hardware health (max over GPUs)")

    seen: set[str] = set()
    for event in report.get("events", []):
        if event.get("step") is None:
            continue
        kind = event["kind"]
        for axis in (loss, step_time, mfu):
            axis.axvline(event["step"], color=EVENT_COLOURS.get(kind, "gray"), alpha=0.6, linestyle="--",
                         label=kind if axis is loss and kind not in seen else None)
        seen.add(kind)
    for axis in (loss, step_time, mfu):
        axis.legend(loc="upper right", fontsize="small")
        axis.grid(alpha=0.3)
    fig.suptitle(f"job {report.get('job')}: {report.get('world_size')} ranks, events marked")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
