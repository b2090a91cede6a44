"""Rank liveness: /proc/PID/stat parsing, reaping our own children, classify()."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from collectors.probes import ProcessStatus, classify, parse_stat, process_status
from collectors.probes.process import read_stat

SLEEP = shutil.which("sleep") or "/bin/sleep"
SH = shutil.which("sh") or "/bin/sh"


def spawn(path: str, *args: str) -> int:
    return os.posix_spawn(path, [path, *args], os.environ)


def wait_for_state(pid: int, states: str, timeout: float = 5.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = read_stat(pid)
        if st is not None and st.state in states:
            return st.state
        time.sleep(0.005)
    raise AssertionError(f"pid {pid} never reached a state in {states!r}")


def cleanup(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def test_live_child() -> None:
    pid = spawn(SLEEP, "30")
    try:
        wait_for_state(pid, "S")
        st = process_status(pid)
        assert st.alive and st.state == "S" and st.exit_status is None
        assert st.comm == "sleep" and st.start_ticks is not None and st.start_ticks > 0
        os.kill(pid, signal.SIGSTOP)
        wait_for_state(pid, "T")
        st = process_status(pid)
        assert st.alive and st.state == "T"  # stopped is alive (and not reaped: WNOHANG without WUNTRACED)
        os.kill(pid, signal.SIGCONT)
    finally:
        cleanup(pid)


def test_zombie_child_seen_without_reaping() -> None:
    pid = spawn(SH, "-c", "exit 7")
    try:
        wait_for_state(pid, "Z")
        st = process_status(pid, reap=False)
        assert (st.alive, st.state) == (False, "Z")
        if os.geteuid() == 0:
            assert st.exit_status == 7  # field 52 of the stat line, shown to root
        assert read_stat(pid) is not None, "reap=False must leave the zombie in place"
        # Now reap it through process_status: exit status from waitpid.
        st = process_status(pid)
        assert (st.alive, st.state, st.exit_status) == (False, "Z", 7)
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
    finally:
        cleanup(pid)


def test_exited_child_exit_status_and_signal() -> None:
    pid = spawn(SH, "-c", "exit 3")
    pid2 = spawn(SLEEP, "30")
    try:
        wait_for_state(pid, "Z")
        st = process_status(pid)
        assert (st.alive, st.exit_status) == (False, 3)
        # Gone from /proc now; the status is remembered.
        assert read_stat(pid) is None
        assert process_status(pid) == ProcessStatus(False, None, 3)

        os.kill(pid2, signal.SIGKILL)
        wait_for_state(pid2, "Z")
        st = process_status(pid2)
        assert (st.alive, st.exit_status) == (False, -signal.SIGKILL)
    finally:
        cleanup(pid)
        cleanup(pid2)


def test_zombie_that_is_not_our_child() -> None:
    """A grandchild zombie: not reapable by us; its exit status comes from /proc (root/same user)."""
    code = "import os, sys, time\npid = os.fork()\nif pid == 0:\n    os._exit(5)\nprint(pid, flush=True)\ntime.sleep(30)\n"
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        grandchild = int(line)
        wait_for_state(grandchild, "Z")
        st = process_status(grandchild)
        assert not st.alive and st.state == "Z"
        assert st.exit_status == 5  # visible: we are root or the same user
        assert read_stat(grandchild) is not None, "must not (and cannot) reap someone else's child"
    finally:
        parent.kill()
        parent.wait(timeout=10)


def test_nonexistent_and_invalid_pids() -> None:
    pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
    assert process_status(pid_max + 1) == ProcessStatus(False, None, None)
    child = spawn(SH, "-c", "exit 9")
    try:
        wait_for_state(child, "Z")
        # 0 and -1 would mean "any child" to waitpid: they must never reap anything.
        for bad in (0, -1, -child):
            assert process_status(bad) == ProcessStatus(False, None, None)
        assert read_stat(child) is not None and read_stat(child).state == "Z"
    finally:
        cleanup(child)


def test_comm_with_spaces_and_parentheses(tmp_path: Path) -> None:
    # A naive split on whitespace, or at the first ')', reads state "Z" from this name.
    name = "a) Z (b c"
    link = tmp_path / name
    link.symlink_to(SLEEP)
    pid = spawn(str(link), "30")
    try:
        wait_for_state(pid, "S")
        st = process_status(pid)
        assert st.alive and st.state == "S" and st.comm == name
    finally:
        cleanup(pid)


def test_parse_stat_edge_cases() -> None:
    tail = " ".join(["0"] * 49)
    line = f"4242 (x) (y)) R 17 {' '.join(['0'] * 17)} 987654 {tail}"
    st = parse_stat(line)
    assert (st.pid, st.comm, st.state, st.ppid, st.start_ticks) == (4242, "x) (y)", "R", 17, 987654)
    short = "1 (init) S 0 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 5"
    st = parse_stat(short)  # an old kernel: no exit_code field
    assert st.state == "S" and st.start_ticks == 5 and st.exit_code is None
    with pytest.raises(ValueError):
        parse_stat("garbage")
    with pytest.raises(ValueError):
        parse_stat("1 (x) S 0")


@pytest.mark.parametrize(
    ("alive", "since", "stuck_after", "expected"),
    [
        (True, 1.0, 60.0, "alive"),
        (True, None, 60.0, "alive"),
        (True, 60.0, 60.0, "alive"),
        (True, 60.5, 60.0, "stuck"),
        (False, 1.0, 60.0, "dead"),
        (False, None, 60.0, "dead"),
        (False, 999.0, 60.0, "dead"),
    ],
)
def test_classify(alive: bool, since: float | None, stuck_after: float, expected: str) -> None:
    assert classify(alive, since, stuck_after) == expected
