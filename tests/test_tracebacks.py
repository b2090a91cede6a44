"""collectors/common/tracebacks.py on the texts torch 2.13 writes when a DataLoader worker dies (seen from a real
worker killed under the crash test; torch/utils/data/dataloader.py and torch/csrc/DataLoader.cpp)."""

from __future__ import annotations

import pytest

from collectors.common.tracebacks import DIRECT, DURING, direct_cause, worker_signal

GONE = "DataLoader worker (pid(s) 8554) exited unexpectedly"


def chained(cause: str, link: str = DIRECT, final: str = f"RuntimeError: {GONE}") -> str:
    return (f"Traceback (most recent call last):\n  File \"x.py\", line 1, in handler\nRuntimeError: {cause}\n\n"
            f"{link}\n\nTraceback (most recent call last):\n  File \"x.py\", line 9, in main\n{final}\n")


@pytest.mark.parametrize("cause, signal", [
    ("DataLoader worker (pid 8554) is killed by signal: Killed. ", "Killed"),
    ("DataLoader worker (pid 8554) is killed by signal: Terminated. ", "Terminated"),
    ("DataLoader worker (pid 8554) is killed by signal: Real-time signal 3. ", "Real-time signal 3"),
    ("DataLoader worker (pid 8554) exited unexpectedly with exit code 1. ", None),
])
def test_the_worker_s_signal_is_read_from_the_direct_cause(cause: str, signal: str | None) -> None:
    assert worker_signal(GONE, chained(cause)) == signal


def test_the_signal_said_by_the_error_itself_is_read_from_its_message() -> None:
    assert worker_signal("DataLoader worker (pid 8554) is killed by signal: Killed. ", "") == "Killed"


def test_an_error_raised_while_handling_another_has_no_direct_cause() -> None:
    text = chained("DataLoader worker (pid 8554) is killed by signal: Terminated. ", link=DURING)
    assert direct_cause(text) == "" and worker_signal(GONE, text) is None


def test_only_the_final_exception_s_direct_cause_counts() -> None:
    """A worker's SIGTERM two links up, then a `raise ... from` of another error: not the final one's cause."""
    inner = chained("DataLoader worker (pid 8554) is killed by signal: Terminated. ")
    text = f"{inner}\n{DIRECT}\n\nTraceback (most recent call last):\nValueError: {GONE}\n"
    assert "killed by signal" not in direct_cause(text)
    assert worker_signal(GONE, text) is None


def test_another_exception_s_text_is_not_read() -> None:
    assert worker_signal("CUDA out of memory", chained("DataLoader worker (pid 1) is killed by signal: Killed. ")) is None
