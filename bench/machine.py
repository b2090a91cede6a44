"""Facts about the machine a benchmark ran on, for its JSON: one reading of /proc and git for every bench."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def cpu_model() -> str:
    """The first "model name" of /proc/cpuinfo (else platform.processor())."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def memory_bytes() -> int | None:
    """MemTotal of /proc/meminfo, in bytes."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def git_head() -> str | None:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def git_dirty() -> list[str]:
    """Tracked files with uncommitted changes: the code measured may not be git HEAD's."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True,
                             text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line[3:] for line in out.splitlines() if line.strip()]


def machine_facts() -> dict[str, Any]:
    """The machine, the Python and the code a bench ran on, and when it started (UTC)."""
    memory = memory_bytes()
    return {"platform": platform.platform(), "python": platform.python_version(), "cpu_model": cpu_model(),
            "cpus": os.cpu_count(), "memory_gib": round(memory / 2**30, 1) if memory else None,
            "git_head": git_head(), "git_dirty_files": git_dirty(),
            "started_utc": datetime.now(UTC).isoformat(timespec="seconds")}
