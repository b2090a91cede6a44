"""A minimal sd_notify(3) client: READY=1, WATCHDOG=1, STATUS=..., STOPPING=1.

systemd passes a unit of ``Type=notify`` the address of a datagram socket in
``$NOTIFY_SOCKET``: a filesystem path, or an abstract name written with a
leading ``@``. Each notification is one datagram of newline-separated
``KEY=VALUE`` lines. Without ``$NOTIFY_SOCKET`` (run by hand, in tests, under
another supervisor) every call is a no-op that returns False; a send that fails
is logged once and never raises, so telemetry never takes the agent down.
Both services use it (collectors/cli.py ``_serve``: the agent and the collector
tiers).

``WatchdogSec=`` in the unit sets ``$WATCHDOG_USEC``; :func:`watchdog_interval_s`
returns half of it, the interval systemd recommends for ``WATCHDOG=1``. A
:class:`WatchdogPinger` thread pings at that interval, but only while its
``healthy()`` callback says the agent's own loop is making progress: a thread
that pinged unconditionally would keep a wedged agent alive forever.

    notifier = Notifier()
    pinger = WatchdogPinger(notifier, healthy=lambda: time.monotonic() - loop.last_tick < 30)
    notifier.ready("listening on /run/telemetry/agent.sock")
    pinger.start()
    ...
    notifier.stopping(); pinger.stop()
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Mapping

LOG = logging.getLogger(__name__)


def _address(value: str) -> str | bytes | None:
    if not value:
        return None
    if value.startswith("@"):
        return b"\0" + value[1:].encode()  # abstract namespace
    if value.startswith("/"):
        return value
    return None  # e.g. "vsock:..." (systemd >= 253): not supported here


class Notifier:
    """Sends notifications to ``$NOTIFY_SOCKET`` (read once, at construction)."""

    def __init__(self, env: Mapping[str, str] | None = None, *, log: logging.Logger = LOG) -> None:
        env = os.environ if env is None else env
        self._raw = env.get("NOTIFY_SOCKET", "")
        self._addr = _address(self._raw)
        self._log = log
        self._sock: socket.socket | None = None
        self._lock = threading.Lock()
        self._warned = False
        if self._raw and self._addr is None:
            log.warning("sd_notify: unsupported NOTIFY_SOCKET %r; notifications disabled", self._raw)

    @property
    def enabled(self) -> bool:
        return self._addr is not None

    def notify(self, *lines: str) -> bool:
        """Send one datagram of ``lines``; True when it was sent."""
        if self._addr is None:
            return False
        payload = "\n".join(lines).encode()
        with self._lock:
            try:
                if self._sock is None:
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                    self._sock = sock
                self._sock.sendto(payload, self._addr)
                return True
            except OSError as exc:
                if not self._warned:
                    self._warned = True
                    self._log.warning("sd_notify to %s failed: %s (not logged again)", self._raw, exc)
                if self._sock is not None:
                    self._sock.close()
                    self._sock = None
                return False

    def ready(self, status: str | None = None) -> bool:
        lines = ["READY=1"]
        if status:
            lines.append("STATUS=" + _one_line(status))
        return self.notify(*lines)

    def watchdog(self) -> bool:
        return self.notify("WATCHDOG=1")

    def status(self, text: str) -> bool:
        return self.notify("STATUS=" + _one_line(text))

    def stopping(self, status: str | None = None) -> bool:
        lines = ["STOPPING=1"]
        if status:
            lines.append("STATUS=" + _one_line(status))
        return self.notify(*lines)

    def close(self) -> None:
        with self._lock:
            if self._sock is not None:
                self._sock.close()
                self._sock = None


def _one_line(text: str) -> str:
    return " ".join(str(text).splitlines())


def watchdog_interval_s(env: Mapping[str, str] | None = None) -> float | None:
    """Half of ``$WATCHDOG_USEC`` in seconds, or None when no watchdog applies.

    None too when ``$WATCHDOG_PID`` names another process (the watchdog is not ours).
    """
    env = os.environ if env is None else env
    raw = env.get("WATCHDOG_USEC", "")
    try:
        usec = int(raw)
    except ValueError:
        return None
    if usec <= 0:
        return None
    pid = env.get("WATCHDOG_PID", "")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec / 2_000_000.0


class WatchdogPinger:
    """Sends WATCHDOG=1 every ``interval_s`` from a daemon thread while ``healthy()`` holds.

    ``interval_s`` defaults to :func:`watchdog_interval_s`; with no watchdog
    configured ``start()`` does nothing. ``stop()`` returns within one interval
    at most (it wakes the thread at once).
    """

    def __init__(
        self,
        notifier: Notifier | None = None,
        *,
        interval_s: float | None = None,
        healthy: Callable[[], bool] | None = None,
        env: Mapping[str, str] | None = None,
        log: logging.Logger = LOG,
    ) -> None:
        self.notifier = notifier if notifier is not None else Notifier(env)
        self.interval_s = interval_s if interval_s is not None else watchdog_interval_s(env)
        self._healthy = healthy
        self._log = log
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.pings = 0
        self.skipped = 0

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Start pinging; False (and no thread) when there is no watchdog or no socket."""
        if self.interval_s is None or self.interval_s <= 0 or not self.notifier.enabled:
            return False
        if self.running:
            return True
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="sd-watchdog", daemon=True)
        self._thread.start()
        return True

    def _run(self) -> None:
        assert self.interval_s is not None
        unhealthy_logged = False
        while True:
            ok = True
            if self._healthy is not None:
                try:
                    ok = bool(self._healthy())
                except Exception as exc:  # a failing check counts as unhealthy
                    ok = False
                    self._log.debug("watchdog health check raised: %s", exc)
            if ok:
                if self.notifier.watchdog():
                    self.pings += 1
                unhealthy_logged = False
            else:
                self.skipped += 1
                if not unhealthy_logged:
                    unhealthy_logged = True
                    self._log.warning("agent unhealthy: withholding WATCHDOG=1 (systemd restarts it on timeout)")
            if self._stop.wait(self.interval_s):
                return

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None


_default: Notifier | None = None
_default_lock = threading.Lock()


def _notifier() -> Notifier:
    global _default
    with _default_lock:
        if _default is None:
            _default = Notifier()
        return _default


def notify(*lines: str) -> bool:
    """Module-level shortcut using ``$NOTIFY_SOCKET`` of this process."""
    return _notifier().notify(*lines)


def ready(status: str | None = None) -> bool:
    return _notifier().ready(status)


def watchdog() -> bool:
    return _notifier().watchdog()


def status(text: str) -> bool:
    return _notifier().status(text)


def stopping(status: str | None = None) -> bool:
    return _notifier().stopping(status)
