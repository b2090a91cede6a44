"""A rank that forks a worker after telemetry.init() while its sender thread holds the stream's lock (and
another thread the channel table's): run by tests/test_sdk_fork.py. Prints one JSON line: how the child ended
and what the rank's close() said.

    python tests/fork_job.py AGENT_ADDRESS
"""

from __future__ import annotations

import json
import os
import sys
import time

import telemetry
from telemetry.sdk import sender as sender_module

CHILD_WAIT_S = 10.0


def child(run: telemetry.Run) -> None:
    """A DataLoader worker's life: it logs (the user's code does not know it is a fork), closes, exits."""
    start = time.monotonic()
    run.log(2, x=99.0)
    run.end_step(2)
    closed = run.close(5)
    with sender_module._channels_lock:  # a new init() here would take it: it must not be the parent's, held
        channels = len(sender_module._channels)
    took = time.monotonic() - start
    sys.exit(0 if (closed is False and channels == 0 and took < 2.0) else 3)  # through the SDK's exit hooks


def main() -> None:
    run = telemetry.init(job="fork", rank=0, world_size=1, agent=sys.argv[1])
    run.log(1, x=1.0)
    run.end_step(1)
    assert run.wait_connected(10)
    # What a parent thread may hold at the moment of a fork: the sender's stream lock (it adds a batch every
    # flush) and the channel table's (another Run starting).
    with run._sender._kept.lock, sender_module._channels_lock:
        pid = os.fork()
        if pid == 0:
            child(run)
    deadline = time.monotonic() + CHILD_WAIT_S
    status = None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        status = None
    closed = run.close(15)
    print(json.dumps({"child": "hung" if status is None else os.waitstatus_to_exitcode(status), "closed": closed}),
          flush=True)


if __name__ == "__main__":
    main()
