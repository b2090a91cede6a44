"""The `--remote-write*` options of `telemetry collector` (root only), and the RemoteWriteConfig they make.

Kept apart from collectors/cli.py: `collector` takes them as `**remote_write` and hands them to
`remote_write_config`, which checks them (TLS files, token over plaintext, label names) and builds the config.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import click

LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

remote_write_options = [
    click.option("--remote-write", "remote_write_urls", multiple=True, metavar="URL",
                 help="Root only: send every finalised step (figures, hardware, events, goodput) to this "
                      "Prometheus remote-write endpoint, e.g. http://mimir:9009/api/v1/push (repeatable; "
                      "docs/metrics.md, 'Remote-write')."),
    click.option("--remote-write-ca", type=click.Path(exists=True, dir_okay=False),
                 help="CA to verify an https receiver [default: the system's]."),
    click.option("--remote-write-cert", type=click.Path(exists=True, dir_okay=False),
                 help="Client certificate for mTLS to the receiver."),
    click.option("--remote-write-key", type=click.Path(exists=True, dir_okay=False),
                 help="Key for --remote-write-cert."),
    click.option("--remote-write-token", envvar="TELEMETRY_REMOTE_WRITE_TOKEN",
                 help="Bearer token for the receiver [env: TELEMETRY_REMOTE_WRITE_TOKEN]."),
    click.option("--remote-write-token-file", type=click.Path(exists=True, dir_okay=False),
                 help="File holding the receiver's bearer token."),
    click.option("--remote-write-label", "remote_write_labels", multiple=True, metavar="NAME=VALUE",
                 help="External label on every series written, e.g. cluster=a (repeatable)."),
    click.option("--remote-write-shards", type=click.IntRange(1, 64), default=2, show_default=True,
                 help="Sender threads (and connections) per URL; a series always goes through the same one."),
    click.option("--remote-write-batch", type=click.IntRange(1, 100_000), default=2000, show_default=True,
                 help="Samples per request at most."),
    click.option("--remote-write-queue", type=click.IntRange(1), default=200_000, show_default=True,
                 help="Samples queued per URL at most; past it the oldest are dropped (counted on /metrics)."),
    click.option("--remote-write-deadline", type=click.FloatRange(min=0.1), default=120.0, show_default=True,
                 help="Seconds a batch is retried (5xx, 429, connection errors) before it is dropped (counted)."),
    click.option("--remote-write-timeout", type=click.FloatRange(min=0.1), default=10.0, show_default=True,
                 help="Seconds per HTTP request."),
]


def remote_write_config(options: dict[str, Any], root: bool, allow_insecure_token: bool) -> Any:
    """The RemoteWriteConfig of the `--remote-write*` options, or None when no URL is given."""
    urls = tuple(options["remote_write_urls"])
    if not urls:
        return None
    if not root:
        raise click.UsageError("--remote-write is for the root (a collector with no --parent)")
    from collectors.root.remote_series import RESERVED_LABELS
    from collectors.root.remote_write import RemoteWriteConfig

    token, token_file = options["remote_write_token"], options["remote_write_token_file"]
    if token_file:
        token = Path(token_file).read_text().strip()
    elif token and click.get_current_context().get_parameter_source(
            "remote_write_token") == click.core.ParameterSource.COMMANDLINE:
        click.echo("warning: --remote-write-token on the command line is visible to every user of this host "
                   "(ps); use --remote-write-token-file or the environment variable instead", err=True)
    plain = [url for url in urls if url.startswith("http://")]
    if token and plain and not allow_insecure_token:
        raise click.UsageError(f"a bearer token sent over plaintext HTTP ({', '.join(plain)}) can be read by "
                               "anyone on the path; use https, or pass --allow-insecure-token to accept that")
    labels = []
    for text in options["remote_write_labels"]:
        name, sep, value = text.partition("=")
        if not sep or not LABEL_NAME.match(name) or name.startswith("__"):
            raise click.BadParameter(f"{text!r}: want NAME=VALUE with NAME a Prometheus label name",
                                     param_hint="--remote-write-label")
        if name in RESERVED_LABELS:
            raise click.BadParameter(f"{name!r} is one of the series' own labels "
                                     f"({', '.join(sorted(RESERVED_LABELS))})", param_hint="--remote-write-label")
        labels.append((name, value))
    if len({name for name, _ in labels}) != len(labels):
        raise click.BadParameter("a label name given twice", param_hint="--remote-write-label")
    cert, key, ca = options["remote_write_cert"], options["remote_write_key"], options["remote_write_ca"]
    try:
        return RemoteWriteConfig(
            urls=urls, ca=Path(ca) if ca else None, cert=Path(cert) if cert else None,
            key=Path(key) if key else None, token=token, labels=tuple(sorted(labels)),
            shards=options["remote_write_shards"], batch_size=options["remote_write_batch"],
            queue_samples=options["remote_write_queue"], retry_deadline_s=options["remote_write_deadline"],
            timeout_s=options["remote_write_timeout"])
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--remote-write") from None
