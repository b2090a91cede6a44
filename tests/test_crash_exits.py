"""The agent's account of a rank's end from what it can read (collectors/agent/exits.py): the cgroup's OOM-kill
count (v2 and v1 layouts), torchrun's error file (only a regular file the rank's uid owns), the fault file's
faulthandler text and written-down words, and the order of evidence."""

from __future__ import annotations

import json
import os
from pathlib import Path

from google.protobuf import json_format

from collectors.agent.exits import (
    WORDS_HEADER,
    ExitWatch,
    FaultFiles,
    exit_record,
    oom_counter,
    read_owned,
    torchrun_error,
)
from telemetry.v1 import forensics_pb2


def _record(watch: ExitWatch, fault: tuple[str, int] = ("", 0), exit_status: int | None = None):
    return exit_record(watch, job="j", attempt=1, rank=3, host="h", pid=42, current_step=7,
                       exit_status=exit_status, observed_ns=2_000_000_000, fault=fault)


def _cgroups(tmp: Path, v2: bool, kills: int) -> tuple[Path, Path]:
    proc, root = tmp / "proc", tmp / "cgroup"
    (proc / "42").mkdir(parents=True)
    if v2:
        (proc / "42" / "cgroup").write_text("0::/job.slice/rank3\n")
        events = root / "job.slice" / "rank3" / "memory.events"
        events.parent.mkdir(parents=True)
        events.write_text(f"low 0\nhigh 0\nmax 4\noom 1\noom_kill {kills}\n")
    else:
        (proc / "42" / "cgroup").write_text("5:cpu,cpuacct:/x\n4:memory:/job/rank3\n")
        control = root / "memory" / "job" / "rank3" / "memory.oom_control"
        control.parent.mkdir(parents=True)
        control.write_text(f"oom_kill_disable 0\nunder_oom 0\noom_kill {kills}\n")
    return proc, root


def test_a_silent_death_while_its_cgroup_s_oom_kills_rose_is_the_oom_killer_s(tmp_path):
    for v2 in (True, False):
        proc, root = _cgroups(tmp_path / str(v2), v2, kills=2)
        path, count = oom_counter(42, str(proc), str(root))
        assert count == 2 and path.endswith("memory.events" if v2 else "memory.oom_control")
        watch = ExitWatch(oom_file=path, oom_kills=count)
        assert _record(watch).cause == "killed"  # the count did not move: not the OOM killer (as far as it says)
        Path(path).write_text(Path(path).read_text().replace("oom_kill 2", "oom_kill 3"))
        record = _record(watch)
        assert (record.cause, record.signal) == ("oom_killed", "SIGKILL") and "2 -> 3" in record.why
        assert json.loads(record.facts)["oom_kill"] == [2, 3]
        assert (record.died_at_source, record.died_at_ns) == ("observed", 2_000_000_000)


def test_torchrun_s_error_file_is_read_only_when_the_rank_owns_it_and_never_through_a_link(tmp_path):
    error = tmp_path / "error.json"
    error.write_text(json.dumps({"message": {"message": "RuntimeError: bad shard", "extraInfo": {
        "py_callstack": "Traceback ...\nRuntimeError: bad shard\n", "timestamp": "1"}}}))
    me = os.getuid()
    assert torchrun_error(str(error), me) == {"message": "RuntimeError: bad shard",
                                              "traceback": "Traceback ...\nRuntimeError: bad shard\n"}
    assert torchrun_error(str(error), me + 1) is None, "a file the rank's uid does not own is not read"
    link = tmp_path / "link.json"
    link.symlink_to(error)
    assert read_owned(str(link), me, 1 << 16) is None, "a link is not followed"
    assert read_owned(str(tmp_path), me, 1 << 16) is None, "a directory is not a file"
    (tmp_path / "junk.json").write_text("not json")
    assert torchrun_error(str(tmp_path / "junk.json"), me) is None
    record = _record(ExitWatch(error_file=str(error), uid=me), exit_status=1)
    assert (record.cause, record.why) == ("exception", "RuntimeError: bad shard")


def test_the_fault_file_says_a_fatal_signal_a_sigterm_or_words_the_stream_did_not_carry(tmp_path):
    files = FaultFiles(tmp_path)
    path = files.make("job/1", 3, 42, None)
    assert Path(path).parent == files.dir and "job_1-r3-p42" in path
    Path(path).write_text('Fatal Python error: Aborted\n\nCurrent thread 0x7f (most recent call first):\n'
                          '  File "train.py", line 9 in step\n')
    text, written = files.read(path)
    record = _record(ExitWatch(fault_file=path), fault=(text, written))
    assert (record.cause, record.signal, record.died_at_source) == ("fatal_signal", "SIGABRT", "fault_file")
    assert record.died_at_ns == written and 'train.py", line 9' in record.stacks
    Path(path).write_text('Current thread 0x7f (most recent call first):\n  File "train.py", line 9 in step\n')
    record = _record(ExitWatch(fault_file=path), fault=files.read(path))
    assert (record.cause, record.signal) == ("terminated", "SIGTERM")
    words = forensics_pb2.LastWords(kind="exception", exc_type="KeyError", message="'x'", rank=3, pid=42,
                                    time_ns=1_500_000_000)
    Path(path).write_text(WORDS_HEADER + json_format.MessageToJson(words, indent=None) + "\n")
    record = _record(ExitWatch(fault_file=path), fault=files.read(path))
    assert (record.cause, record.why, record.died_at_ns) == ("exception", "KeyError: 'x'", 1_500_000_000)
    forged = forensics_pb2.LastWords(kind="exception", exc_type="KeyError", message="other", rank=4, pid=42)
    Path(path).write_text(WORDS_HEADER + json_format.MessageToJson(forged, indent=None) + "\n")
    assert _record(ExitWatch(fault_file=path), fault=files.read(path)).cause != "exception", "words of rank 4"
    files.remove(path)
    assert not Path(path).exists()
    files.close()
    assert not files.dir.exists()


def test_evidence_order_words_before_signals_before_exit_status():
    watch = ExitWatch()
    watch.note(forensics_pb2.LastWords(kind="exit", exit_code=3, exit_code_known=True, time_ns=5))
    assert (_record(watch).cause, _record(watch).exit_code) == ("exit_code", 3)
    watch.note(forensics_pb2.LastWords(kind="exception", exc_type="ValueError", message="m\nmore", time_ns=4))
    watch.note(forensics_pb2.LastWords(kind="signal", message="SIGTERM", time_ns=6))  # an exception stays
    watch.note(forensics_pb2.LastWords(kind="thread_exception", exc_type="OSError", message="io", thread="pin"))
    record = _record(watch, fault=('Current thread 0x1 (most recent call first):\n', 9))
    assert (record.cause, record.why, record.died_at_ns) == ("exception", "ValueError: m", 4)
    assert record.thread_exception == "pin: OSError: io"
    assert _record(ExitWatch(), exit_status=-9).why == "killed by SIGKILL (exit status)"
    assert _record(ExitWatch(), exit_status=-15).cause == "terminated"
    assert (_record(ExitWatch(), exit_status=0).cause, _record(ExitWatch(), exit_status=2).cause) == \
        ("exited", "exit_code")
    assert _record(ExitWatch(stream_ended_ns=1_900_000_000)).died_at_source == "stream_end"


def test_the_witness_shares_one_wait_among_the_runs_of_a_process_and_writes_down_what_was_not_noted(tmp_path):
    """A process with many Runs (the simulator's) waits for the agent once in all, not once per Run; words no
    agent noted go into the fault file."""
    import time
    import weakref

    from telemetry.sdk.lastwords import Witness

    class Slow:
        def __init__(self) -> None:
            self.given: list[float] = []

        def say_last_words(self, words, wait_s: float) -> bool:
            self.given.append(wait_s)
            time.sleep(wait_s)
            return False

    witness = Witness()
    speakers = [Slow() for _ in range(3)]
    witness._speakers = [weakref.ref(s) for s in speakers]
    witness.fault_file = (tmp_path / "fault").open("a")
    witness._say(forensics_pb2.LastWords(kind="exception", exc_type="E", message="m", rank=0), 0.2)
    given = [s.given[0] for s in speakers]
    assert given[0] <= 0.2 and sum(given) <= 0.2 + 0.05, given  # the later Runs get what is left
    assert (tmp_path / "fault").read_text().startswith(WORDS_HEADER)


def test_a_handler_that_raises_inside_the_sigterm_wait_does_not_cut_it_short(monkeypatch):
    """torchrun stops a job with SIGTERM to each rank's process group: a DataLoader worker dies of it too, and the
    DataLoader's SIGCHLD handler raises inside the SDK's SIGTERM handler's wait. Let out, that error was the rank's
    account ("exception: DataLoader worker exited unexpectedly", a failure of its own) ahead of its SIGTERM words.
    Here a real signal's handler raises inside the wait (on the main thread, as Python runs handlers); the wait
    must go on to its end and then end the process of SIGTERM."""
    import signal
    import threading
    import time

    from telemetry.sdk import lastwords

    ended: list[int] = []
    monkeypatch.setattr(lastwords, "_default_and_raise", ended.append)
    monkeypatch.setenv(lastwords.WAIT_ENV, "0")  # the handler's wait: wait_bound() + 1 s = 1 s
    raised: list[float] = []

    def sigchld_like(signum, frame) -> None:
        raised.append(time.monotonic())
        raise RuntimeError("DataLoader worker (pid 1) is killed by signal: Terminated.")

    previous = signal.signal(signal.SIGUSR1, sigchld_like)
    timer = threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1))
    try:
        timer.start()
        began = time.monotonic()
        lastwords.Witness()._sigterm_handler(signal.SIGTERM, None)
        waited = time.monotonic() - began
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert len(raised) == 1 and raised[0] - began < waited, (raised, waited)  # the handler ran inside the wait
    assert ended == [signal.SIGTERM], ended


def test_a_dataloader_worker_gone_says_the_signal_its_chained_cause_names():
    """A DataLoader worker SIGKILLed (the OOM killer) ends the rank with "DataLoader worker (pid(s) N) exited
    unexpectedly" when the SIGCHLD handler's error reached the DataLoader's queue read; the signal is only in the
    chained cause of the traceback. The account's why says it."""
    chained = ("Traceback (most recent call last):\nRuntimeError: DataLoader worker (pid 8554) is killed by signal: "
               "Killed. \n\nThe above exception was the direct cause of the following exception:\n\n"
               "Traceback (most recent call last):\nRuntimeError: DataLoader worker (pid(s) 8554) exited unexpectedly\n")
    watch = ExitWatch()
    watch.note(forensics_pb2.LastWords(kind="exception", exc_type="RuntimeError", time_ns=5,
                                       message="DataLoader worker (pid(s) 8554) exited unexpectedly", traceback=chained))
    record = _record(watch)
    assert record.cause == "exception" and record.why == ("RuntimeError: DataLoader worker (pid(s) 8554) exited "
                                                          "unexpectedly (its worker was killed by signal: Killed)")
    plain = ExitWatch()  # any other exception's why is its first line only, whatever its traceback quotes
    plain.note(forensics_pb2.LastWords(kind="exception", exc_type="ValueError", message="bad batch", traceback=chained))
    assert _record(plain).why == "ValueError: bad batch"


def test_a_keyboard_interrupt_inside_the_sigterm_wait_still_ends_it(monkeypatch):
    """Only Exceptions are waited through: a KeyboardInterrupt (SIGINT's handler) raised inside the wait leaves it
    at once, as before (a catch of BaseException would swallow the user's Ctrl-C for up to the wait's bound)."""
    import signal
    import threading

    import pytest

    from telemetry.sdk import lastwords

    ended: list[int] = []
    monkeypatch.setattr(lastwords, "_default_and_raise", ended.append)
    monkeypatch.setenv(lastwords.WAIT_ENV, "0")

    def interrupt(signum, frame) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGUSR1, interrupt)
    timer = threading.Timer(0.2, signal.pthread_kill, (threading.main_thread().ident, signal.SIGUSR1))
    try:
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            lastwords.Witness()._sigterm_handler(signal.SIGTERM, None)
    finally:
        timer.cancel()
        signal.signal(signal.SIGUSR1, previous)
    assert ended == [], ended
