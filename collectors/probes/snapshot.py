"""What the agent can see of a rank's process from outside, for a capture (docs/forensics.md).

``process_facts(pid)``: /proc alone - state, wchan (the kernel function a sleeping task waits in), CPU
seconds, thread count, and each thread's name, state and wchan (a rank blocked in a collective shows its
threads asleep in ``futex_wait_queue`` or ``do_epoll_wait``; a SIGSTOPped one shows state T). Works on any
process the agent may read (same user, or root), costs nothing to the rank, never sees Python frames.

``pyspy_dump(pid)``: the rank's Python stacks read from its memory by py-spy (``--nonblocking``: the rank is
not paused; a stopped or GIL-wedged rank is read all the same). Needs ptrace rights over the rank (root, or
``kernel.yama.ptrace_scope`` 0 for the same user); when py-spy is missing or refused, the error says so and
the capture falls back to /proc alone.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

MAX_THREADS = 64
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as f:
            return f.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        return None


def _stat_fields(text: str) -> tuple[str, list[str]] | None:
    """(comm, fields from field 3 on) of a stat line; comm may hold spaces and parentheses."""
    lpar, rpar = text.find("("), text.rfind(")")
    if lpar < 0 or rpar < lpar:
        return None
    rest = text[rpar + 1:].split()
    return (text[lpar + 1:rpar], rest) if len(rest) >= 18 else None


def process_facts(pid: int, proc_root: str = "/proc") -> dict[str, Any]:
    """/proc's view of `pid`: {"pid", "alive", "state", "wchan", "cpu_s", "threads", "tasks": [...]}."""
    base = f"{proc_root}/{pid}"
    stat = _read(f"{base}/stat")
    parsed = _stat_fields(stat) if stat else None
    if parsed is None:
        return {"pid": pid, "alive": False, "error": "no such process (exited)"}
    comm, rest = parsed
    facts: dict[str, Any] = {
        "pid": pid, "alive": rest[0] not in "ZXx", "comm": comm, "state": rest[0],
        "wchan": _read(f"{base}/wchan") or "",
        "cpu_s": round((int(rest[11]) + int(rest[12])) / CLOCK_TICKS, 3),
        "threads": int(rest[17]),
    }
    tasks = []
    try:
        ids = sorted(os.listdir(f"{base}/task"), key=int)
    except OSError:
        ids = []
    for tid in ids[:MAX_THREADS]:
        task_stat = _read(f"{base}/task/{tid}/stat")
        parsed_task = _stat_fields(task_stat) if task_stat else None
        if parsed_task is None:
            continue
        name, fields = parsed_task
        tasks.append({"tid": int(tid), "name": name, "state": fields[0],
                      "wchan": _read(f"{base}/task/{tid}/wchan") or "",
                      "cpu_s": round((int(fields[11]) + int(fields[12])) / CLOCK_TICKS, 3)})
    facts["tasks"] = tasks
    if len(ids) > MAX_THREADS:
        facts["tasks_not_listed"] = len(ids) - MAX_THREADS
    return facts


def pyspy_path() -> str | None:
    """py-spy next to this interpreter (the service's venv), else on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.exists():
        return str(beside)
    return shutil.which("py-spy")


def pyspy_dump(pid: int, timeout_s: float = 10.0, max_bytes: int = 64 * 1024) -> tuple[str, str]:
    """(stacks, error): py-spy's dump of every thread of `pid`; stacks "" and error set when it failed."""
    exe = pyspy_path()
    if exe is None:
        return "", "py-spy is not installed (pip install py-spy)"
    try:
        done = subprocess.run([exe, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True,
                              timeout=timeout_s, text=True, errors="replace")
    except subprocess.TimeoutExpired:
        return "", f"py-spy did not finish in {timeout_s:g} s"
    except OSError as e:
        return "", f"py-spy could not run: {e}"
    if done.returncode != 0 or not done.stdout.strip():
        why = (done.stderr or done.stdout).strip().splitlines()
        return "", f"py-spy exited {done.returncode}: {why[-1][:300] if why else 'no output'}"
    return done.stdout[:max_bytes], ""
