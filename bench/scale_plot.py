"""bench/scale.py's plot, scale.png: the root's bytes and CPU per step against N for the tree and the baseline (and
the tree at realistic fan-ins, the racks' and agents' CPU, the crossover), log-log."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot(path: Path, tree: list[dict], base: list[dict], cross: dict[str, Any], wide: list[dict]) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    panels = (("root_bytes_per_step", "root: bytes received per step", 1 / 1024, "KiB / step"),
              ("root_cpu_ms_per_step", "root: process CPU per step (net of idle background)", 1.0, "CPU ms / step"))
    for ax, (key, title, scale, unit) in zip(axes, panels):
        for rows, label, style, color in ((tree, "aggregation tree", "o-", "C0"),
                                          (base, "gather everything", "s--", "C3")):
            pts = [(r["ranks"], r[key] * scale) for r in rows if r.get(key)]
            if pts:
                ax.plot(*zip(*pts), style, color=color, label=label)
        pts = [(r["ranks"], r[key] * scale) for r in wide]
        if pts:
            shape = wide[0]["plan"]
            ax.plot(*zip(*pts), "D", color="C2", label=f"tree, {shape['fanin']['rack']} agents/rack, "
                                                        f"{shape['root_fanin']} racks/root")
        if key == "root_cpu_ms_per_step":
            pts = [(r["ranks"], r["tiers"]["root"]["own_code_ms_per_step"]) for r in tree]
            if pts:
                ax.plot(*zip(*pts), "o:", color="C0", alpha=0.6, markersize=4, label="tree root, own code only")
            for tier, style, color in (("rack", "^:", "C1"), ("agent", "v:", "C4")):
                pts = [(r["ranks"], r["tiers"][tier]["cpu_ms_per_step"]) for r in tree
                       if r["tiers"][tier]["cpu_ms_per_step"] > 0]
                if pts:
                    ax.plot(*zip(*pts), style, color=color, alpha=0.6, markersize=4, label=f"tree, one {tier}")
            ax.axhline(20, color="grey", linewidth=0.8, linestyle="--")
            ax.annotate("target: root, rack <= 20 ms", xy=(1.0, 20), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=7, color="grey")
        c = cross.get(key)
        if c and c.get("ranks"):
            ax.axvline(c["ranks"], color="k", linestyle=":", linewidth=1)
            ax.annotate(f"crossover ≈ {c['ranks']:,.0f} ranks" + (" (extrapolated)" if c["extrapolated"] else ""),
                        xy=(c["ranks"], 0.03), xycoords=("data", "axes fraction"), rotation=90, fontsize=7,
                        ha="right", va="bottom")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("ranks (N)")
        ax.set_ylabel(unit)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle("aggregation tree vs gather-everything: 20 metrics per rank per step, loopback gRPC, 2 cores",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

