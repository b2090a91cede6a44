"""The `telemetry` command: one entry point for every service and tool."""

from __future__ import annotations

import click

from telemetry import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="telemetry")
def main() -> None:
    """Hierarchical, mergeable telemetry for large distributed PyTorch training runs.

    Ranks log through the SDK to a node agent; agents forward per-step
    summaries up a tree of collectors; the root finalises each step, detects
    stragglers, spikes, NaNs and hangs, and serves Prometheus and a JSON API.
    """
