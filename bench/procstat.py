"""What the kernel says of one process, for the benches: CPU seconds from /proc/PID/stat (utime, stime: 10 ms
resolution) and lines of /proc/PID/status (VmHWM, VmRSS, Threads). The process must be alive."""

from __future__ import annotations

import os
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_times(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, every thread's, from /proc/PID/stat."""
    # The command name (field 2, in parentheses) may hold spaces: the fields counted are those after its ")".
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) / CLK_TCK, int(fields[12]) / CLK_TCK


def cpu_seconds(*pids: int) -> float:
    """User + system CPU seconds of these processes, together."""
    return sum(sum(cpu_times(pid)) for pid in pids)


def status(pid: int) -> dict[str, str]:
    """/proc/PID/status as {field: value}: "VmRSS" -> "123 kB", "Threads" -> "4"."""
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {name: value.strip() for name, value in (line.split(":", 1) for line in lines if ":" in line)}


def status_kb(pid: int, field: str) -> int:
    """A kB field of /proc/PID/status (VmHWM: peak RSS; VmRSS), in kB; 0 when the kernel does not give it."""
    value = status(pid).get(field)
    return int(value.split()[0]) if value else 0
