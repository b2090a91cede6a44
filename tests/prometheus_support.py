"""Prometheus for the tests: Debian's `prometheus` package (it ships `promtool`), installed if absent.

The install is what scripts/test should do before the suite (one line):

    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends prometheus

`require(binary)` does it here when it can (root and apt-get present), and otherwise skips the test
saying why.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from collectors.sim.procs import stop_process

APT_LINE = ("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "
            "prometheus")


def require(binary: str) -> str:
    """Path of `promtool` or `prometheus`, installing Debian's package first if needed; else skip."""
    found = shutil.which(binary)
    if found:
        return found
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip(f"{binary} is not installed and cannot be installed here (needs root and apt-get): "
                    f"run `{APT_LINE}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "--no-install-recommends", "prometheus"]
    result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:  # the package lists may be missing or stale
        subprocess.run(["apt-get", "update"], env=env, capture_output=True, text=True, timeout=600)
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=600)
    found = shutil.which(binary)
    if not found:
        pytest.skip(f"could not install Debian's prometheus package (apt-get exit {result.returncode}: "
                    f"{result.stderr.strip()[-300:]})")
    return found


def promtool_check(text: str) -> subprocess.CompletedProcess:
    return subprocess.run([require("promtool"), "check", "metrics"], input=text, capture_output=True, text=True,
                          timeout=60)


def get_json(url: str, timeout: float = 10.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as reply:
        return json.load(reply)


class Prometheus:
    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: object) -> dict:
        query = urllib.parse.urlencode(params, doseq=True)
        return get_json(f"{self.url}/api/v1/{path}?{query}")

    def query_range(self, expr: str, start: float, end: float, step: float = 1.0) -> dict:
        return self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=step)

    def scraped_once(self) -> bool:
        try:
            active = self.api("targets")["data"]["activeTargets"]
        except OSError:
            return False
        return any(not t.get("lastScrape", "").startswith("0001-") for t in active) if active else False

    def targets_up(self) -> bool:
        try:
            data = self.api("targets")
        except OSError:
            return False
        return any(t.get("health") == "up" for t in data["data"]["activeTargets"])


@contextmanager
def running_prometheus(workdir: Path, port: int, targets: list[str], scrape_interval: str = "1s",
                       receiver: bool = False):
    """A real Prometheus on 127.0.0.1:port scraping `targets` (honor_labels: true), storage in workdir; with
    `receiver`, it also accepts remote-write on /api/v1/write. Started again on the same workdir, it keeps
    what it held (its WAL)."""
    binary = require("prometheus")
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "prometheus.yml"
    scrape = ("scrape_configs:\n"
              "  - job_name: telemetry-root\n"
              "    honor_labels: true\n"
              "    static_configs:\n"
              f"      - targets: [{', '.join(repr(t) for t in targets)}]\n") if targets else ""
    config.write_text(
        "global:\n"
        f"  scrape_interval: {scrape_interval}\n"
        f"  evaluation_interval: {scrape_interval}\n" + scrape)
    check = subprocess.run([require("promtool"), "check", "config", str(config)], capture_output=True, text=True,
                           timeout=60)
    assert check.returncode == 0, check.stdout + check.stderr
    log = open(workdir / "prometheus.log", "ab")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--storage.tsdb.retention.time=1h",
                             "--log.level=warn", *(["--web.enable-remote-write-receiver"] if receiver else [])],
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    prom = Prometheus(f"http://127.0.0.1:{port}")
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"prometheus exited: {(workdir / 'prometheus.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{prom.url}/-/ready", timeout=2) as reply:
                    if reply.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        else:
            raise RuntimeError("prometheus did not become ready in 60 s")
        # Prometheus hands discovered targets to its scrapers at most every 5 s: wait until the first
        # scrape happened (even a failed one), so that scraping covers everything that follows.
        deadline = time.monotonic() + (30 if targets else 0)
        while time.monotonic() < deadline and not prom.scraped_once():
            time.sleep(0.2)
        yield prom
    finally:
        stop_process(proc)
        log.close()
