"""SIGTERM/SIGINT for the long-lived services, noticed from the first instant and whatever thread takes them.

Imports nothing but the standard library (and sdnotify, which imports nothing else), so that `collectors.cli`
can install it before click, grpc or numpy are imported (`early`).
"""

from __future__ import annotations

import os
import select
import signal

from collectors.common.sdnotify import Notifier

SERVICES = ("agent", "collector")  # the long-lived commands


class StopSignals:
    """SIGTERM/SIGINT noticed whatever thread the kernel delivers them to, from the moment this is made.

    Why not `signal.signal(...)` and an Event: CPython runs a Python-level handler only on the main
    thread, when it next executes bytecode. A signal the kernel hands to one of gRPC's C threads
    leaves the main thread asleep in `Event.wait()` and the handler never runs (1-2 processes in
    90 ignored SIGTERM that way). Here the C-level handler also writes the signal number to a pipe
    (`signal.set_wakeup_fd`) that the main thread waits on, so it wakes whichever thread took it.

    Made `immediate` (by `early`, at the process's start), a signal before `hold()` (the service about to build
    what it serves) ends the process at once: exit 0 after STOPPING=1 to systemd. Until then the process holds
    nothing to close, and its remaining imports and option parsing can take longer than a stop may (5 s) on a
    loaded host: waiting for them to finish only to stop is what made stops during start-up overrun under load.
    """

    def __init__(self, immediate: bool = False) -> None:
        self.received: int | None = None
        self.immediate = immediate
        self._read, write = os.pipe()
        os.set_blocking(write, False)
        signal.set_wakeup_fd(write, warn_on_full_buffer=False)
        # SIGINT first: once SIGTERM's handler shows (/proc/PID/status SigCgt, what a supervisor or a test can see),
        # both are this one's. The other way round, a Ctrl-C in between met Python's own handler: a traceback.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._note)

    def _note(self, signum: int, _frame: object) -> None:
        self.received = signum
        if self.immediate:
            Notifier().stopping()
            os._exit(0)

    def hold(self) -> None:
        """From here on a signal is only noted (`received`, `wait`): the caller now builds what it must close."""
        self.immediate = False

    def wait(self) -> int:
        """Block until SIGTERM or SIGINT; return it. A signal that came before this call returns at once."""
        while self.received is None:
            readable, _, _ = select.select([self._read], [], [], 1.0)  # the timeout is only a safety net
            if readable:
                os.read(self._read, 512)
        return self.received


def early(argv: list[str]) -> StopSignals | None:
    """StopSignals for `telemetry agent|collector ...`, made before anything heavy is imported; else None.
    (The `telemetry` group takes no options of its own but --help/--version, so argv[1] is the command.)"""
    return StopSignals(immediate=True) if len(argv) > 1 and argv[1] in SERVICES else None
