"""The SDK's run-queue wait (telemetry/sdk/runqueue.py): the step thread's time runnable but not running.

Real kernel counters, no mock: a thread that shares one CPU with a spinning process waits on the run queue
for a good part of its own spin; alone on an idle CPU far less. The figure must follow the calling thread (a
step run on another thread), a forked child (its own thread, not the parent's descriptor), and be None, once
and for good, where the kernel does not count it."""

from __future__ import annotations

import multiprocessing
import os
import sys
import threading
import time
from collections.abc import Callable

import pytest

from telemetry.sdk.runqueue import PATH, RunQueueClock

pytestmark = pytest.mark.skipif(not os.path.exists(PATH), reason="the kernel does not count run-queue waits")


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _spinner(cpu: int, seconds: float) -> None:
    os.sched_setaffinity(0, {cpu})
    _spin(seconds)


def _beside_a_spinner(measured: Callable[[], None]) -> None:
    """Run `measured` on a thread pinned to one CPU while a process spins on that CPU."""
    cpu = min(os.sched_getaffinity(0))
    neighbour = multiprocessing.get_context("fork").Process(target=_spinner, args=(cpu, 3.0))
    saved = os.sched_getaffinity(0)

    def pinned() -> None:
        os.sched_setaffinity(0, {cpu})  # this thread only
        measured()

    neighbour.start()
    try:
        time.sleep(0.2)  # the neighbour is spinning on the CPU
        thread = threading.Thread(target=pinned)
        thread.start()
        thread.join(10)
    finally:
        neighbour.terminate()
        neighbour.join(5)
        os.sched_setaffinity(0, saved)


def test_a_thread_sharing_its_cpu_with_a_spinner_waits_on_the_run_queue() -> None:
    got: list[int | None] = []

    def measured() -> None:
        clock = RunQueueClock()
        before = clock.read_ns()
        _spin(0.6)
        got.extend([before, clock.read_ns()])
    _beside_a_spinner(measured)
    before, after = got
    assert before is not None and after is not None
    # Sharing one CPU with a spinner, a spinning thread is on the run queue about half the time it spins for.
    assert (after - before) / 1e9 > 0.1, (after - before) / 1e9


def test_the_clock_follows_the_calling_thread() -> None:
    """A step run on another thread reads that thread's counter (not the descriptor the first thread opened)."""
    clock = RunQueueClock()
    assert clock.read_ns() is not None
    seen: list[tuple[int | None, int]] = []

    def other() -> None:
        ours = clock.read_ns()
        with open(PATH, "rb") as f:  # this thread's own counter, read after ours
            seen.append((ours, int(f.read().split()[1])))
    for _ in range(3):
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(5)
    mine = clock.read_ns()
    with open(PATH, "rb") as f:
        truth = int(f.read().split()[1])
    assert all(ours is not None and ours <= own for ours, own in seen), seen
    assert mine is not None and mine <= truth and clock.available


def test_a_forked_child_reads_its_own_thread() -> None:
    clock = RunQueueClock()
    assert clock.read_ns() is not None
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its own (fresh) thread's counter, not its parent's
        try:
            ours = clock.read_ns()
            with open(PATH, "rb") as f:
                truth = int(f.read().split()[1])
            os.write(write, b"ok" if ours is not None and ours <= truth else f"{ours} {truth}".encode())
        finally:
            os._exit(0)
    os.close(write)
    answer = os.read(read, 100)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"ok", answer


def test_where_the_kernel_does_not_count_nothing_is_read_again(tmp_path) -> None:
    clock = RunQueueClock(str(tmp_path / "missing"))
    assert clock.read_ns() is None and not clock.available
    (tmp_path / "missing").write_text("1 2 3\n")
    assert clock.read_ns() is None  # given up for good: no open per step on a machine without it
    bad = tmp_path / "bad"
    bad.write_text("nothing\n")
    assert RunQueueClock(str(bad)).read_ns() is None


def test_off_linux_or_without_o_cloexec_nothing_is_read_and_nothing_raises(monkeypatch) -> None:
    """Off Linux the clock is off from the start; where os.O_CLOEXEC is missing reading gives None, not an
    AttributeError out of Run.step. Before: the AttributeError escaped."""
    monkeypatch.setattr(sys, "platform", "win32")
    assert RunQueueClock().read_ns() is None
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.delattr(os, "O_CLOEXEC")
    clock = RunQueueClock()
    assert clock.read_ns() is None and not clock.available


def test_a_step_exited_on_another_thread_logs_nothing() -> None:
    """mark() at a step's entry, since(mark) at its exit: on the same thread the wait in seconds; on another
    thread None (the counters are of two threads). Before: no mark; the difference of two threads' counters."""
    clock = RunQueueClock()
    mark = clock.mark()
    assert mark is not None
    got: list = []
    thread = threading.Thread(target=lambda: got.append(clock.since(mark)))
    thread.start()
    thread.join()
    assert got == [None]
    since = clock.since(mark)
    assert since is not None and since >= 0.0
    assert clock.since(None) is None


def test_each_thread_keeps_its_own_descriptor(monkeypatch) -> None:
    """Two threads reading in turn open the file once each (a descriptor shared between threads was reopened by
    each in turn, and one thread could read the other's while it was being swapped). Before: 4 opens."""
    opened: list[str] = []
    real_open = os.open

    def counting_open(path: str, flags: int, *args: int) -> int:
        opened.append(path)
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", counting_open)
    clock = RunQueueClock()
    go = [threading.Event(), threading.Event()]

    def other() -> None:
        for _ in range(2):
            go[1].wait()
            go[1].clear()
            assert clock.read_ns() is not None
            go[0].set()

    thread = threading.Thread(target=other)
    thread.start()
    for _ in range(2):
        assert clock.read_ns() is not None
        go[1].set()
        go[0].wait()
        go[0].clear()
    thread.join()
    assert len(opened) == 2, opened
    clock.close()


def test_one_read_gives_the_threads_time_on_a_cpu_too() -> None:
    """`spent(mark)`: (run-queue wait, time on a CPU) since the mark, from the same read (the SDK logs both per
    step: `runqueue_wait`, `oncpu_time`). A thread that spins sharing its CPU with a spinner is on the run queue
    or on the CPU for the whole of its spin; one that sleeps hardly runs."""
    got: list = []

    def measured() -> None:
        clock = RunQueueClock()
        mark = clock.mark()
        started = time.monotonic()
        _spin(0.6)
        got.append((clock.spent(mark), time.monotonic() - started))
        mark = clock.mark()
        time.sleep(0.3)
        got.append((clock.spent(mark), 0.3))
    _beside_a_spinner(measured)
    (spun, wall), (slept, _) = got
    assert spun is not None and slept is not None
    queued, oncpu = spun
    # sharing its CPU with a spinner (and whatever else runs on this machine): queued for a good part of it, on
    # the CPU for the rest; runnable the whole spin, so the two add up to it
    assert oncpu > 0.0 and queued > 0.1, spun
    assert abs(queued + oncpu - wall) < 0.15, (spun, wall)
    # blocked: hardly on a CPU (its wait for one once it woke, on a CPU shared with a spinner, can be long)
    assert slept[1] < 0.05 and slept[1] < oncpu, (slept, spun)

