"""A rank's last words (docs/forensics.md, "When ranks die"): why it ended, told to its agent on the way out.

The first Run of a process installs, once, chained to whatever was there before (never on import):

* ``sys.excepthook``: an uncaught exception of the main thread ends the rank: its type, message and traceback
  go to the agent before the previous hook prints them;
* ``threading.excepthook``: another thread died of an exception (the rank may live on): said too, as
  context for a later end;
* ``atexit``: the interpreter exits without ``run.close()`` (``sys.exit(3)``, the end of the script): the exit
  code when the SDK saw it (``sys.exit`` is wrapped to note its argument; ``raise SystemExit(n)`` is not seen);
* SIGTERM (what a launcher sends the other ranks once one failed), when nothing handles it (SIG_DFL) and the
  Run is made on the main thread: a Python handler plus ``signal.set_wakeup_fd`` on a pipe a thread of ours
  reads, so that the words (every thread's stack, the step, the newest collective fingerprints) go out at once
  even while the main thread is blocked inside a collective, which a Python handler alone would wait for. Then
  the default disposition is put back and the signal raised again: the process dies of SIGTERM as it would
  have. When the wakeup descriptor is someone else's (asyncio's), faulthandler dumps the stacks instead;
* ``faulthandler``, pointed at a file the agent made for this rank (``RankAck.fault_file``): a fatal signal
  (SIGSEGV, SIGABRT, SIGBUS, SIGFPE, SIGILL) writes every thread's Python stack there from its C handler; the
  agent reads the file once the process is gone. When the process had faulthandler on already (``-X
  faulthandler``, ``PYTHONFAULTHANDLER``) it is left writing where it was: the agent then sees no stacks.

Each message is bounded (``MAX_MESSAGE``, ``MAX_TRACEBACK``, ``MAX_FINGERPRINTS``) and carries the rank's step,
its flight-recorder progress and its newest collective fingerprints. A hook waits for the agent's NOTED at most
``wait_s`` (``TELEMETRY_LAST_WORDS_WAIT_S``, default 0.5 s; 0 when no stream is up), so dying is never
delayed by more than that (bench/crash.py measures it). ``TELEMETRY_LAST_WORDS=0`` or
``telemetry.init(last_words=False)``: none of this is installed for that Run.
"""

from __future__ import annotations

import atexit
import ctypes
import faulthandler
import logging
import os
import signal
import sys
import threading
import time
import traceback
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, NoReturn, Protocol

from google.protobuf import json_format

from telemetry.v1 import forensics_pb2

log = logging.getLogger("telemetry.sdk")

MAX_MESSAGE = 2048
MAX_TRACEBACK = 16 * 1024
MAX_FINGERPRINTS = 16
DEFAULT_WAIT_S = 0.5
WAIT_ENV = "TELEMETRY_LAST_WORDS_WAIT_S"
WORDS_HEADER = "# telemetry last words (not delivered on the stream): "  # then the LastWords as one JSON line


class Speaker(Protocol):
    """What a Run gives the witness: its words filled in, then sent (True once the agent noted them)."""

    def say_last_words(self, words: forensics_pb2.LastWords, wait_s: float) -> bool: ...


def bounded_traceback(exc_type: type[BaseException], exc: BaseException | None, tb: TracebackType | None,
                      max_bytes: int = MAX_TRACEBACK) -> str:
    """traceback's text of the exception; over max_bytes, the innermost part (where it was raised) is kept."""
    try:
        text = "".join(traceback.format_exception(exc_type, exc, tb))
    except Exception as e:  # a broken __str__ must not lose the words
        text = f"(traceback not formattable: {type(e).__name__})\n"
    if len(text) > max_bytes:
        keep = text[-(max_bytes - 40):]
        text = f"... {len(text) - len(keep)} characters cut ...\n{keep}"
    return text


def type_name(exc_type: type[BaseException]) -> str:
    module = getattr(exc_type, "__module__", "builtins")
    name = getattr(exc_type, "__qualname__", getattr(exc_type, "__name__", "?"))
    return name if module in ("builtins", "__main__") else f"{module}.{name}"


def exception_words(kind: str, exc_type: type[BaseException], exc: BaseException | None,
                    tb: TracebackType | None, thread: str) -> forensics_pb2.LastWords:
    try:
        message = str(exc) if exc is not None else ""
    except Exception:
        message = "(str() of the exception failed)"
    return forensics_pb2.LastWords(time_ns=time.time_ns(), kind=kind, exc_type=type_name(exc_type)[:256],
                                   message=message[:MAX_MESSAGE], traceback=bounded_traceback(exc_type, exc, tb),
                                   thread=thread[:256], pid=os.getpid())


def wait_bound() -> float:
    try:
        return min(5.0, max(0.0, float(os.environ.get(WAIT_ENV, DEFAULT_WAIT_S))))
    except ValueError:
        return DEFAULT_WAIT_S


class Witness:
    """The process's hooks (installed once), and the Runs that speak when they fire."""

    def __init__(self) -> None:
        self._speakers: list[weakref.ref[Any]] = []
        self._lock = threading.Lock()
        self._installed = False
        self.said_exception = False  # the main thread's exception was said: atexit says nothing more
        self.exit_code: int | None = None
        self._previous_excepthook: Callable[..., Any] | None = None
        self._previous_threading_hook: Callable[..., Any] | None = None
        self._previous_exit: Callable[..., Any] | None = None
        self.fault_file: Any = None  # the open file faulthandler writes to (kept open for the process's life)
        self.fault_path: str | None = None
        self.term_watched = False  # SIGTERM words via the wakeup pipe (else faulthandler's stacks only)
        self._term_once = threading.Lock()
        self._term_done = threading.Event()  # never set while the process lives: the wakeup thread ends it

    # ------------------------------------------------------------ speakers
    def add(self, speaker: Speaker) -> None:
        with self._lock:
            self._speakers = [ref for ref in self._speakers if ref() is not None]
            self._speakers.append(weakref.ref(speaker))
            if not self._installed:
                self._install()

    def remove(self, speaker: Speaker) -> None:
        with self._lock:
            self._speakers = [ref for ref in self._speakers if ref() not in (None, speaker)]

    def _say(self, words: forensics_pb2.LastWords, wait_s: float) -> None:
        with self._lock:
            speakers = [ref() for ref in self._speakers]
        noted = False
        copy = words
        deadline = time.monotonic() + wait_s  # one bound for the process, however many Runs it holds
        for speaker in speakers:
            if speaker is None:
                continue
            copy = forensics_pb2.LastWords()
            copy.CopyFrom(words)
            try:
                noted = speaker.say_last_words(copy, max(0.0, deadline - time.monotonic())) or noted
            except Exception:  # dying must go on whatever telemetry does
                log.debug("telemetry: last words not sent", exc_info=True)
        if not noted and speakers and words.kind != "thread_exception":
            self._write_down(copy)

    def _write_down(self, words: forensics_pb2.LastWords) -> None:
        """Words the agent did not note (no stream just then): into the fault file, which the agent reads once
        the process is gone (collectors/agent/exits.py, WORDS_HEADER)."""
        f = self.fault_file
        if f is None:
            return
        try:
            f.write(WORDS_HEADER + json_format.MessageToJson(words, indent=None) + "\n")
            f.flush()
        except (OSError, ValueError):
            pass

    # ------------------------------------------------------------ hooks
    def _install(self) -> None:
        self._installed = True
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._previous_threading_hook = threading.excepthook
        threading.excepthook = self._threading_hook
        self._previous_exit = sys.exit
        sys.exit = self._exit
        atexit.register(self._atexit)
        os.register_at_fork(after_in_child=self._forked)
        self._watch_sigterm()

    def _forked(self) -> None:
        """In a forked child (a DataLoader worker): nothing of the parent's speaks. Its Runs are the parent's, the
        wakeup pipe is shared with the parent (a SIGTERM to the child must not end the parent), and faulthandler's
        file is the parent rank's."""
        self._speakers = []
        self._lock = threading.Lock()
        self._term_once = threading.Lock()
        if self.term_watched:
            self.term_watched = False
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGTERM, signal.SIG_DFL)
            except (ValueError, OSError):
                pass
        if self.fault_file is not None:
            self.fault_file = self.fault_path = None
            faulthandler.disable()

    # ------------------------------------------------------------ SIGTERM
    def _watch_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        try:
            if signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
                return  # the program handles it: not ours to change
            read, write = os.pipe()
            os.set_blocking(write, False)
            previous = signal.set_wakeup_fd(write, warn_on_full_buffer=False)
            if previous != -1:  # someone else's (asyncio's): leave it theirs
                signal.set_wakeup_fd(previous)
                os.close(read)
                os.close(write)
                return
            signal.signal(signal.SIGTERM, self._sigterm_handler)
        except (ValueError, OSError, AttributeError) as e:
            log.debug("telemetry: SIGTERM not watched: %s", e)
            return
        self.term_watched = True
        threading.Thread(target=self._wakeups, args=(read,), name="telemetry-last-words", daemon=True).start()

    def _wakeups(self, read: int) -> None:
        """Reads the signal numbers Python's C handler writes: SIGTERM is acted on here, at once."""
        while True:
            try:
                got = os.read(read, 64)
            except InterruptedError:
                continue
            except OSError:
                return
            if not got:
                return
            if signal.SIGTERM in got:
                self._terminated()

    def _sigterm_handler(self, signum: int, frame: Any) -> None:
        """Python's handler, on the main thread between two bytecodes (maybe inside our own hooks, holding their
        locks): the words are the wakeup thread's to say; this only makes sure the process ends.

        Other Python handlers run inside this wait, and one that raises must not end it: a launcher stops a job
        with SIGTERM to each rank's process group, so a DataLoader worker dies of the same signal and the
        DataLoader's SIGCHLD handler raises here ("DataLoader worker ... is killed by signal: Terminated"). Let
        out, that error became the rank's account of its end, a failure of its own ahead of its SIGTERM words
        (tests/test_crash_torchrun.py's cascade, one run in twenty). The process is ending of SIGTERM either way."""
        deadline = time.monotonic() + wait_bound() + 1.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                if self._term_done.wait(left):
                    return
            except Exception:  # another handler's, run inside the wait (BaseException, e.g. SIGINT's, still ends it)
                continue
        _default_and_raise(signal.SIGTERM)

    def _terminated(self) -> None:
        """Say why (SIGTERM, every thread's stack), then die of SIGTERM as the process would have."""
        if self._term_once.acquire(blocking=False):
            try:
                from telemetry.sdk.capture import thread_stacks
                words = forensics_pb2.LastWords(time_ns=time.time_ns(), kind="signal", message="SIGTERM",
                                                pid=os.getpid(), thread=threading.current_thread().name,
                                                traceback=thread_stacks(MAX_TRACEBACK, skip=threading.get_ident()))
                self._say(words, wait_bound())
            finally:
                _default_and_raise(signal.SIGTERM)

    def _excepthook(self, exc_type: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        try:
            self.said_exception = True
            self._say(exception_words("exception", exc_type, exc, tb, threading.current_thread().name),
                      wait_bound())
        finally:
            previous = self._previous_excepthook or sys.__excepthook__
            previous(exc_type, exc, tb)

    def _threading_hook(self, args: threading.ExceptHookArgs) -> None:
        try:
            if args.exc_type is not SystemExit:
                name = args.thread.name if args.thread is not None else "?"
                self._say(exception_words("thread_exception", args.exc_type, args.exc_value, args.exc_traceback,
                                          name), wait_bound())
        finally:
            previous = self._previous_threading_hook or threading.__excepthook__
            previous(args)

    def _exit(self, code: str | int | None = None) -> NoReturn:
        """sys.exit, noting the code for the atexit words."""
        if code is None:
            self.exit_code = 0
        elif isinstance(code, int):
            self.exit_code = code
        else:
            self.exit_code = 1  # sys.exit("message") prints it and exits 1
        if self._previous_exit is not None:
            self._previous_exit(code)
        raise SystemExit(code)  # what sys.exit does, should the previous one have returned

    def _atexit(self) -> None:
        if self.said_exception:
            return
        words = forensics_pb2.LastWords(time_ns=time.time_ns(), kind="exit", pid=os.getpid(),
                                        thread=threading.current_thread().name)
        if self.exit_code is not None:
            words.exit_code, words.exit_code_known = self.exit_code, True
        self._say(words, wait_bound())

    # ------------------------------------------------------------ faulthandler
    def use_fault_file(self, path: str) -> bool:
        """Point faulthandler (fatal signals, and SIGTERM chained to what it did before) at the agent's file for
        this rank; once per process (the first Run's file), and not over a faulthandler already on."""
        with self._lock:
            if self.fault_file is not None or not path:
                return False
            if faulthandler.is_enabled():
                log.debug("telemetry: faulthandler already enabled by the program; the agent gets no stacks")
                return False
            try:
                f = open(path, "a", encoding="utf-8")  # kept open for the process's life
                faulthandler.enable(file=f, all_threads=True)
            except (OSError, ValueError, RuntimeError) as e:
                log.debug("telemetry: fault file %s not usable: %s", path, e)
                return False
            self.fault_file, self.fault_path = f, path
            try:
                if not self.term_watched and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                    faulthandler.register(signal.SIGTERM, file=f, all_threads=True, chain=True)
            except (ValueError, RuntimeError, AttributeError) as e:
                log.debug("telemetry: SIGTERM stacks not registered: %s", e)
            return True


def _default_and_raise(signum: int) -> None:
    """Put back the default disposition (libc's signal(): callable from any thread, unlike signal.signal) and
    raise the signal again: the process ends of it, its exit status saying so."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.signal.restype = ctypes.c_void_p
        libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
        libc.signal(signum, None)  # SIG_DFL is 0
    except (OSError, AttributeError):
        os._exit(128 + signum)  # no libc to call: end as a shell reports a signal's death
    os.kill(os.getpid(), signum)
    time.sleep(5.0)  # delivered at once to this process; should it not be, end anyway
    os._exit(128 + signum)


WITNESS = Witness()
