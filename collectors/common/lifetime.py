"""Children that die with the process that started them (the simulator's, the tests')."""

from __future__ import annotations

import ctypes
import os
import signal

PARENT_ENV = "TELEMETRY_DIE_WITH_PARENT"
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """If started with TELEMETRY_DIE_WITH_PARENT=<pid>, get SIGKILL when that parent exits.

    Done in the child at start-up rather than in a preexec_fn: a preexec_fn runs between fork and exec,
    where a multi-threaded parent (gRPC's threads) can leave locks held and the child deadlocks.
    """
    parent = os.environ.get(PARENT_ENV)
    if not parent:
        return
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        return
    if str(os.getppid()) != parent:  # the parent died before we asked
        os._exit(1)
