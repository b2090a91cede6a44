"""How a rank ended, as its agent can tell (docs/forensics.md, "When ranks die").

For each registered rank the agent keeps an `ExitWatch`: its last words (LastWords, from the SDK's hooks), the
fault file it made for the rank (faulthandler writes a fatal signal's or SIGTERM's Python stacks there), the
rank's cgroup's OOM-kill count at registration, the torchrun error file its environment names
(TORCHELASTIC_ERROR_FILE), its latest collective progress, and when its stream ended. When the process is found
gone, `exit_record` turns what is known into one `RankExit` for the root, with a cause from a closed set:

  exception      an uncaught exception ended it (its last words: type, message, traceback)
  fatal_signal   SIGSEGV / SIGABRT / SIGBUS / SIGFPE / SIGILL (faulthandler's stacks, its "Fatal Python error")
  terminated     SIGTERM (the launcher stopping the job; faulthandler's stacks), or the exit status says a signal
  exit_code      it exited with a non-zero code (sys.exit(n) seen by the SDK, or the exit status when visible)
  exited         it exited with code 0 without run.close()
  oom_killed     gone without a word while the OOM-kill count of its cgroup rose (cgroup v2 memory.events, v1
                 memory.oom_control)
  killed         gone without a word: a signal it cannot catch (SIGKILL) or os._exit()

Files the agent reads for a rank are its own (the fault file, made by the agent in a directory only it writes)
or checked (the error file must be a regular file owned by the rank's uid, read without following links, JSON):
a rank cannot make the agent forward a file it could not read itself.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from google.protobuf import json_format

from collectors.common.tracebacks import WORKER_GONE, worker_signal
from telemetry.v1 import forensics_pb2

log = logging.getLogger(__name__)

CAUSES = ("exception", "fatal_signal", "terminated", "exit_code", "exited", "oom_killed", "killed")
KINDS = ("exception", "thread_exception", "exit", "signal")
MAX_FAULT_BYTES = 32 * 1024       # the tail of a fault file kept (faulthandler's stacks)
MAX_ERROR_FILE_BYTES = 64 * 1024  # a torchrun error file larger than this is not read
MAX_WORDS_TEXT = 64 * 1024        # a LastWords' traceback; its message at most MAX_WORDS_MESSAGE
MAX_WORDS_MESSAGE = 8 * 1024
MAX_WORDS_FINGERPRINTS = 64
ERROR_FILE_ENV = b"TORCHELASTIC_ERROR_FILE="
# faulthandler's first line for each fatal signal it handles.
FATAL = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
         "Floating point exception": "SIGFPE", "Illegal instruction": "SIGILL"}
_FATAL_RE = re.compile(r"Fatal Python error: ([A-Za-z ]+)")

WORDS_HEADER = "# telemetry last words (not delivered on the stream): "  # telemetry/sdk/lastwords.py writes it


def words_in(text: str) -> tuple[forensics_pb2.LastWords | None, str]:
    """Last words the SDK wrote into its fault file (its stream was down), and the rest of the text."""
    found = None
    rest = []
    for line in text.splitlines(keepends=True):
        if line.startswith(WORDS_HEADER):
            try:
                words = json_format.Parse(line[len(WORDS_HEADER):], forensics_pb2.LastWords())
            except json_format.ParseError:
                continue
            if check_words(words) is None:
                found = words
        else:
            rest.append(line)
    return found, "".join(rest)


def check_words(words: forensics_pb2.LastWords) -> str | None:
    """Why these last words cannot be an honest SDK's (None: they can)."""
    if words.kind not in KINDS:
        return f"last words of kind {words.kind[:32]!r}, not one of {KINDS}"
    if len(words.traceback) > MAX_WORDS_TEXT or len(words.message) > MAX_WORDS_MESSAGE:
        return "last words longer than their bounds"
    if len(words.fingerprints) > MAX_WORDS_FINGERPRINTS:
        return f"more than {MAX_WORDS_FINGERPRINTS} fingerprints in last words"
    if len(words.exc_type) > 256 or len(words.thread) > 256:
        return "last words' exception type or thread name longer than 256 characters"
    return None


@dataclass
class ExitWatch:
    """What the agent knows of one rank's process for the day it ends (see the module docstring)."""

    fault_file: str = ""
    words: forensics_pb2.LastWords | None = None         # the main thread's exception, or the exit
    thread_words: forensics_pb2.LastWords | None = None  # the latest other thread's exception
    oom_file: str = ""
    oom_kills: int | None = None
    error_file: str = ""
    uid: int | None = None
    last_enqueued: int = -1
    last_completed: int = -1
    last_step: int = 0  # the highest step of its batches (heartbeats may lag: one a second)
    stream_ended_ns: int = 0
    reported: bool = False
    facts: dict = field(default_factory=dict)

    def note(self, words: forensics_pb2.LastWords) -> None:
        if words.kind == "thread_exception":
            self.thread_words = words
        elif self.words is None or self.words.kind == "exit":  # an exception or a signal is not replaced
            self.words = words


# ------------------------------------------------------------------ reading /proc and files at registration


def oom_counter(pid: int, proc_root: str = "/proc", cgroup_root: str = "/sys/fs/cgroup") -> tuple[str, int | None]:
    """The file counting OOM kills in `pid`'s memory cgroup and its count now ("", None when not found)."""
    try:
        lines = Path(f"{proc_root}/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return "", None
    candidates = []
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        path = path.lstrip("/")
        if controllers == "":  # cgroup v2
            candidates.append(Path(cgroup_root) / path / "memory.events")
        elif "memory" in controllers.split(","):  # v1
            candidates.append(Path(cgroup_root) / "memory" / path / "memory.oom_control")
    for candidate in candidates:
        count = read_oom_kills(str(candidate))
        if count is not None:
            return str(candidate), count
    return "", None


def read_oom_kills(path: str) -> int | None:
    try:
        text = Path(path).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value)
    return None


def error_file_of(pid: int, proc_root: str = "/proc") -> str:
    """The TORCHELASTIC_ERROR_FILE in `pid`'s environment ("" when none or unreadable)."""
    try:
        environ = Path(f"{proc_root}/{pid}/environ").read_bytes()
    except OSError:
        return ""
    for entry in environ.split(b"\0"):
        if entry.startswith(ERROR_FILE_ENV):
            return entry[len(ERROR_FILE_ENV):].decode(errors="replace")[:4096]
    return ""


def process_uid(pid: int, proc_root: str = "/proc") -> int | None:
    try:
        return os.stat(f"{proc_root}/{pid}").st_uid
    except OSError:
        return None


def read_owned(path: str, uid: int | None, limit: int) -> bytes | None:
    """A regular file's bytes, read without following a link, only when `uid` owns it and it fits `limit`."""
    if not path:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit or (uid is not None and st.st_uid != uid):
            return None
        return os.read(fd, limit)
    finally:
        os.close(fd)


def torchrun_error(path: str, uid: int | None) -> dict | None:
    """The torchrun error file's message (torch.distributed.elastic's @record writes it), or None."""
    raw = read_owned(path, uid, MAX_ERROR_FILE_BYTES)
    if not raw:
        return None
    try:
        data = json.loads(raw)
        message = data["message"]
    except (ValueError, KeyError, TypeError):
        return None
    if isinstance(message, str):
        return {"message": message[:4096]}
    if isinstance(message, dict):
        extra = message.get("extraInfo") or {}
        return {"message": str(message.get("message", ""))[:4096],
                "traceback": str(extra.get("py_callstack", ""))[-16384:] if isinstance(extra, dict) else ""}
    return None


class FaultFiles:
    """The files faulthandler writes to, one per rank registration, in a directory only the agent writes (0711:
    a rank can open its own file by name, not list or replace the others)."""

    def __init__(self, parent: Path | None = None) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="telemetry-agent-faults-", dir=parent))
        os.chmod(self.dir, 0o711)
        self._made = 0

    def make(self, job: str, rank: int, pid: int, uid: int | None) -> str:
        """A new empty file for the rank, owned by its uid (the agent may run as root for ranks of a user)."""
        self._made += 1
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", job)[:64]
        path = self.dir / f"{safe}-r{rank}-p{pid}-{self._made}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                if uid is not None and uid != os.geteuid():
                    os.fchown(fd, uid, -1)
            finally:
                os.close(fd)
        except OSError as exc:
            log.warning("no fault file for rank %d of %s: %s", rank, job, exc)
            return ""
        return str(path)

    def read(self, path: str) -> tuple[str, int]:
        """The tail of a fault file (MAX_FAULT_BYTES) and when it was last written (ns; 0 when empty)."""
        if not path:
            return "", 0
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            return "", 0
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size == 0:
                return "", 0
            os.lseek(fd, max(0, st.st_size - MAX_FAULT_BYTES), os.SEEK_SET)
            return os.read(fd, MAX_FAULT_BYTES).decode(errors="replace"), st.st_mtime_ns
        finally:
            os.close(fd)

    def remove(self, path: str) -> None:
        if path and Path(path).parent == self.dir:
            try:
                os.unlink(path)
            except OSError:
                pass

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def watch_process(pid: int, fault_file: str) -> ExitWatch:
    """An ExitWatch for a rank just registered: its OOM counter, its error file, its uid."""
    oom_file, count = oom_counter(pid)
    return ExitWatch(fault_file=fault_file, oom_file=oom_file, oom_kills=count, error_file=error_file_of(pid),
                     uid=process_uid(pid))


# ------------------------------------------------------------------ the record


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _first_line(text: str, limit: int = 300) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line[:limit]


def exit_record(watch: ExitWatch, *, job: str, attempt: int, rank: int, host: str, pid: int,
                current_step: int, exit_status: int | None, observed_ns: int, fault: tuple[str, int]
                ) -> forensics_pb2.RankExit:
    """The RankExit for a rank found gone (see the module docstring for the causes and their order)."""
    out = forensics_pb2.RankExit(job=job, attempt=attempt, rank=rank, host=host, pid=pid, observed_at_ns=observed_ns,
                                 current_step=max(current_step, watch.last_step), last_enqueued=watch.last_enqueued,
                                 last_completed=watch.last_completed)
    stacks, fault_ns = fault
    if stacks and WORDS_HEADER in stacks:
        written, stacks = words_in(stacks)
        if written is not None and written.rank == rank and written.pid in (0, pid):
            watch.note(written)
    words, thread = watch.words, watch.thread_words
    facts = dict(watch.facts)
    if words is not None:
        out.last_words = True
        out.current_step = max(out.current_step, words.current_step)
        if words.last_enqueued >= 0:
            out.last_enqueued, out.last_completed = words.last_enqueued, words.last_completed
        out.fingerprints.extend(words.fingerprints[:16])
    if thread is not None:
        out.thread_exception = f"{thread.thread}: {thread.exc_type}: {_first_line(thread.message)}"[:1024]
    if exit_status is not None:
        out.exit_code, out.exit_code_known = exit_status, True
    fatal = _FATAL_RE.search(stacks) if stacks else None
    error = torchrun_error(watch.error_file, watch.uid)
    if error is not None:
        facts["torchrun_error_file"] = error
    if stacks:
        out.stacks = stacks
    if words is not None and words.kind == "exception":
        out.cause, out.exc_type = "exception", words.exc_type
        out.message, out.traceback = words.message, words.traceback
        out.why = f"{words.exc_type}: {_first_line(words.message)}" if words.message else words.exc_type
        out.died_at_ns, out.died_at_source = words.time_ns, "last_words"
        # The DataLoader's "exited unexpectedly" names no signal (SIGKILL, the OOM killer's, most often): its
        # direct cause does.
        worker = worker_signal(words.message, words.traceback) if WORKER_GONE in words.message else None
        if worker is not None:
            out.why += f" (its worker was killed by signal: {worker})"
        if words.thread and words.thread != "MainThread":
            out.why += f" (thread {words.thread})"
    elif words is not None and words.kind == "signal":
        out.cause, out.signal = "terminated", words.message[:32] or "SIGTERM"
        out.why = f"{out.signal} (its last words: every thread's stack at the signal)"
        out.traceback = words.traceback
        out.died_at_ns, out.died_at_source = words.time_ns, "last_words"
    elif fatal is not None:
        name = fatal.group(1).strip()
        out.cause, out.signal = "fatal_signal", FATAL.get(name, name)
        out.why = f"{out.signal} ({name}; faulthandler's stacks)"
        out.died_at_ns, out.died_at_source = fault_ns, "fault_file"
    elif stacks:
        out.cause, out.signal = "terminated", "SIGTERM"
        out.why = "SIGTERM (faulthandler's stacks at the signal)"
        out.died_at_ns, out.died_at_source = fault_ns, "fault_file"
    elif words is not None and words.kind == "exit":
        code = words.exit_code if words.exit_code_known else exit_status
        if code is not None:
            out.exit_code, out.exit_code_known = code, True
        out.cause = "exited" if code == 0 else "exit_code"
        out.why = (f"exit code {code}" if code is not None else "exited without run.close() (code not seen)")
        out.why += " without run.close()" if code is not None else ""
        out.died_at_ns, out.died_at_source = words.time_ns, "last_words"
    elif error is not None and error.get("message"):
        out.cause = "exception"
        out.why = _first_line(error["message"])
        out.message, out.traceback = error["message"], error.get("traceback", "")
    elif exit_status is not None and exit_status < 0:
        out.signal = _signal_name(-exit_status)
        out.cause = "killed" if -exit_status == signal.SIGKILL else "terminated"
        out.why = f"killed by {out.signal} (exit status)"
    elif exit_status is not None:
        out.cause = "exited" if exit_status == 0 else "exit_code"
        out.why = f"exit code {exit_status} (exit status)"
    else:
        now_kills = read_oom_kills(watch.oom_file) if watch.oom_file else None
        if now_kills is not None and watch.oom_kills is not None and now_kills > watch.oom_kills:
            out.cause, out.signal = "oom_killed", "SIGKILL"
            out.why = (f"killed by the kernel's OOM killer (its cgroup's oom_kill count rose {watch.oom_kills} -> "
                       f"{now_kills})")
            facts["oom_kill"] = [watch.oom_kills, now_kills]
        else:
            out.cause = "killed"
            out.why = "gone without a word: killed by a signal it cannot catch (SIGKILL), or os._exit()"
    if not out.died_at_ns:
        if watch.stream_ended_ns and watch.stream_ended_ns <= observed_ns:
            out.died_at_ns, out.died_at_source = watch.stream_ended_ns, "stream_end"
        else:
            out.died_at_ns, out.died_at_source = observed_ns, "observed"
    if facts:
        out.facts = json.dumps(facts, separators=(",", ":"))[:32768]
    return out
