"""Is a rank's process alive, stuck or dead? From ``/proc/PID/stat`` and ``waitpid``.

``process_status(pid)`` reads the process state letter from ``/proc/PID/stat``
(R running, S sleeping, D uninterruptible I/O wait, Z zombie, T stopped, t
traced, X dead, I idle kernel thread). When ``pid`` is a child of the calling
process it is reaped with ``waitpid(WNOHANG)`` so its exit status is known (and
remembered for later calls); a zombie that is *not* our child has its exit
status read from field 52 of its stat line where the kernel shows it (to root,
or to the same user).

``classify(alive, seconds_since_heartbeat, stuck_after_s)`` turns that and the
time since the rank's last heartbeat into "alive" / "stuck" / "dead".

The comm field (2) is the executable's name in parentheses and may itself
contain spaces and parentheses (``a) Z (b``), so the line is split at the
*last* ``)``, never at the first or on whitespace.
"""

from __future__ import annotations

import collections
import os
import threading
from dataclasses import dataclass
from typing import Literal

Verdict = Literal["alive", "stuck", "dead"]

_DEAD_STATES = frozenset("ZXx")
_EXIT_CACHE_MAX = 4096
# pid -> exit status of children this module reaped (bounded, oldest evicted).
_reaped: collections.OrderedDict[int, int] = collections.OrderedDict()
_reaped_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class ProcessStatus:
    alive: bool
    state: str | None  # the /proc/PID/stat state letter; None when the pid is gone
    exit_status: int | None  # exit code, or -N when killed by signal N (as subprocess reports)
    start_ticks: int | None = None  # field 22: start time in clock ticks after boot (detects pid reuse)
    comm: str | None = None


@dataclass(frozen=True, slots=True)
class StatLine:
    pid: int
    comm: str
    state: str
    ppid: int
    start_ticks: int
    exit_code: int | None  # field 52, raw wait status; None on kernels before 3.5


def parse_stat(text: str) -> StatLine:
    """Parse one ``/proc/PID/stat`` line. Raises ValueError on a malformed line."""
    lpar = text.find("(")
    rpar = text.rfind(")")
    if lpar < 0 or rpar < lpar:
        raise ValueError(f"malformed stat line: {text[:80]!r}")
    pid = int(text[:lpar].strip())
    comm = text[lpar + 1 : rpar]
    rest = text[rpar + 1 :].split()
    # rest[0] is field 3 (state); field n is rest[n - 3].
    if len(rest) < 20:
        raise ValueError(f"short stat line: {text[:80]!r}")
    exit_code = int(rest[49]) if len(rest) > 49 else None
    return StatLine(pid, comm, rest[0], int(rest[1]), int(rest[19]), exit_code)


def read_stat(pid: int, proc_root: str = "/proc") -> StatLine | None:
    """The parsed stat line of ``pid``, or None when there is no such process."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError, NotADirectoryError):
        return None
    try:
        return parse_stat(raw.decode("utf-8", "surrogateescape"))
    except (ValueError, IndexError):
        return None


def _exit_code(wait_status: int) -> int | None:
    try:
        return os.waitstatus_to_exitcode(wait_status)
    except ValueError:
        return None


def _remember(pid: int, code: int | None) -> None:
    if code is None:
        return
    with _reaped_lock:
        _reaped[pid] = code
        _reaped.move_to_end(pid)
        while len(_reaped) > _EXIT_CACHE_MAX:
            _reaped.popitem(last=False)


def _zombie_exit_visible(pid: int, proc_root: str) -> bool:
    """Whether the kernel shows us field 52 (it prints 0 to those without ptrace read access)."""
    if os.geteuid() == 0:
        return True
    try:
        return os.stat(f"{proc_root}/{pid}/stat").st_uid == os.geteuid()
    except OSError:
        return False


def process_status(pid: int, *, proc_root: str = "/proc", reap: bool = True) -> ProcessStatus:
    """Alive/state/exit status of ``pid``; never raises for a missing or foreign pid.

    With ``reap`` (the default), a child of this process that has exited is
    reaped here: do not also wait for it elsewhere (e.g. a ``subprocess.Popen``
    would then see return code 0).
    """
    if not isinstance(pid, int) or pid <= 0:
        # waitpid(0) / waitpid(-1) would reap *any* child: never pass those on.
        return ProcessStatus(False, None, None)
    st = read_stat(pid, proc_root)
    if reap:
        try:
            wpid, status = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            wpid = 0  # not our child (or already reaped)
        except OSError:
            wpid = 0
        if wpid == pid:
            code = _exit_code(status)
            _remember(pid, code)
            # It could only be reaped because it had exited: it was a zombie until now.
            return ProcessStatus(
                False, "Z", code, st.start_ticks if st else None, st.comm if st else None
            )
    if st is None:
        with _reaped_lock:
            return ProcessStatus(False, None, _reaped.get(pid))
    with _reaped_lock:
        _reaped.pop(pid, None)  # a stat line again: the pid was reused by a new process
    if st.state in _DEAD_STATES:
        code = None
        if st.state == "Z" and st.exit_code is not None and _zombie_exit_visible(pid, proc_root):
            code = _exit_code(st.exit_code)
        return ProcessStatus(False, st.state, code, st.start_ticks, st.comm)
    return ProcessStatus(True, st.state, None, st.start_ticks, st.comm)


def classify(alive: bool, seconds_since_heartbeat: float | None, stuck_after_s: float) -> Verdict:
    """"dead" when the process is gone (or a zombie); "stuck" when it is alive but
    its last heartbeat is more than ``stuck_after_s`` old; else "alive". No
    heartbeat yet (None) counts as alive: the caller decides how long a new rank
    may stay silent."""
    if not alive:
        return "dead"
    if seconds_since_heartbeat is not None and seconds_since_heartbeat > stuck_after_s:
        return "stuck"
    return "alive"
