"""`run`: subprocess.run for a command that starts processes of its own (a build: pip, setup.py, the compilers).

Why: subprocess.run's timeout kills only the process it started; a wheel build that ran past its bound left its
compilers running, beside the rest of the suite, for minutes. Here the command gets a process group of its own
(a new session) and a time-out, an interrupt or pytest-timeout's exception kills the whole group before it
propagates.

Not a test module: tests import it by name (pytest puts tests/ on sys.path).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any


def run(cmd: list[Any], timeout: float, cwd: Path | str | None = None, env: dict[str, str] | None = None
        ) -> subprocess.CompletedProcess[str]:
    """Run `cmd` to its end (text output captured); past `timeout` seconds its whole process group is killed and
    subprocess.TimeoutExpired raised, as subprocess.run would, with what it had printed."""
    argv = [str(part) for part in cmd]
    with subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          start_new_session=True) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except BaseException:
            kill_group(process)
            raise
    return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)


def kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL `process`'s group (it leads one: start_new_session) and reap the leader."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # the whole group already ended
        pass
    process.communicate()
