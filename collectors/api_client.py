"""What every command that asks the root's HTTP API shares (`telemetry watch`, `forensics`, `detectors`): its
--root and --token options, the URL an address names, and one JSON call whose failures are the user's errors
(a ClickException naming the URL and why), never a traceback."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import click

root_option = click.option("--root", required=True, metavar="HOST:PORT", envvar="TELEMETRY_ROOT_API",
                           help="The root's HTTP API address (its `collector --api`, default 127.0.0.1:7600) "
                                "[env: TELEMETRY_ROOT_API].")
token_option = click.option("--token", envvar="TELEMETRY_API_TOKEN",
                            help="The root API's bearer token, if it has one [env: TELEMETRY_API_TOKEN].")


def api_url(root: str) -> str:
    """The root API's base URL: `root` as given where it names its scheme, else http://HOST:PORT."""
    return root.rstrip("/") if root.startswith(("http://", "https://")) else f"http://{root}"


def call(url: str, token: str | None, body: dict | None = None) -> Any:
    """GET `url` (POST `body` as JSON, if given) with the bearer token, and its JSON answer."""
    request = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None,
                                     method="POST" if body is not None else "GET",
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {token}"} if token else {})})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        try:
            why = json.loads(exc.read()).get("error", "")
        except ValueError:
            why = ""
        raise click.ClickException(f"{url}: HTTP {exc.code} {why}".strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"no answer from the root at {url}: {exc}") from None
