"""What a rank's traceback text says about the exceptions chained in it (the crash accounts read it: the agent's
`why`, the crash detector's consequences).

A DataLoader worker's death ends its rank in one of two words: its SIGCHLD handler's "DataLoader worker (pid N) is
killed by signal: Killed." raised where the main thread was, or, when that error reached the DataLoader's queue read,
"DataLoader worker (pid(s) N) exited unexpectedly" raised *from* it (the signal only in the direct cause). Only the
direct cause of the final exception counts: an error raised while handling another ("During handling of the above
exception") is the rank's own, whatever it was handling.
"""

from __future__ import annotations

import re

DIRECT = "The above exception was the direct cause of the following exception:"
DURING = "During handling of the above exception, another exception occurred:"
_LINK = re.compile(rf"\n\s*({re.escape(DIRECT)}|{re.escape(DURING)})\s*\n")
WORKER_GONE = "exited unexpectedly"
_WORKER_KILLED = re.compile(r"DataLoader worker \(pid \d+\) is killed by signal: ([^.\n]+)\.")


def direct_cause(traceback: str) -> str:
    """The text of the exception the final one was raised `from` ('' when it has no direct cause)."""
    parts = _LINK.split(traceback)  # text, link, text, ..., link, text (the final exception's)
    return parts[-3] if len(parts) >= 3 and parts[-2] == DIRECT else ""


def worker_signal(message: str, traceback: str) -> str | None:
    """The signal that killed the DataLoader worker whose death ended the rank, as its error says it ('Killed',
    'Terminated', 'Real-time signal 3'); None when the exception is not such an error."""
    found = _WORKER_KILLED.search(message)
    if found is None and WORKER_GONE in message:
        found = _WORKER_KILLED.search(direct_cause(traceback))
    return found.group(1).strip() if found else None
