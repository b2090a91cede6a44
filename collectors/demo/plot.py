"""The demo's `--plot FILE.png`: loss, step time, MFU and hardware over the run, with the events marked."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

EVENT_COLOURS = {"straggler": "tab:orange", "loss_spike": "tab:red", "nonfinite": "black", "hang": "tab:purple",
                 "mfu_drop": "tab:brown", "dataloader_stall": "tab:olive", "hardware": "tab:blue"}


def _finite(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else math.nan


def plot(report: dict[str, Any], hardware_history: list[tuple[float, dict[str, float]]], path: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("--plot needs matplotlib: pip install 'treemetry[demo]'") from None
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    metrics = report["metrics"]
    fig, axes = plt.subplots(4, 1, figsize=(11, 12), sharex=False)
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

    rows = metrics.get("step_time", [])
    steps = [r["step"] for r in rows]
    for stat, colour in (("p50", "tab:green"), ("p99", "tab:orange"), ("max", "tab:red")):
        step_time.plot(steps, [_finite(r[stat]) * 1e3 for r in rows], color=colour, label=stat)
    step_time.set_ylabel("step time (ms)")

    rows = metrics.get("mfu", [])
    mfu.plot([r["step"] for r in rows], [_finite(r["mean"]) * 100 for r in rows], color="tab:green", label="mean")
    mfu.plot([r["step"] for r in rows], [_finite(r["min"]) * 100 for r in rows], color="tab:gray", label="min",
             linewidth=0.8)
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
