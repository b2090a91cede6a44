"""What every hardware probe returns, and the counter bookkeeping they share."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import NamedTuple, Protocol, runtime_checkable

#: Every ``Reading.metric`` matches this (dotted lower-case, at most 64 characters).
METRIC_NAME_RE = re.compile(r"^[a-z0-9_.]{1,64}$")


class Reading(NamedTuple):
    """One value read from one device in one sample.

    ``metric`` is e.g. ``gpu.temperature_celsius``; a counter ``X`` is reported as
    ``X_total`` (the device's own running total) and, from the second sample on,
    ``X_delta`` (the increase since the previous sample).

    A named tuple, not a frozen dataclass: a host makes ~134 a second, and a frozen dataclass's constructor (one
    ``object.__setattr__`` per field) cost 2.2x a tuple's (375 vs 169 ns).
    """

    metric: str
    value: float
    gpu: int | None  # NVML index on this host; None for NIC/IB readings
    device: str  # "gpu0", "eth0", "mlx5_0/1"


@dataclass(frozen=True, slots=True)
class HardwareEvent:
    """Something that happened rather than a value: an XID, a GPU falling off the bus."""

    kind: str  # "xid", "gpu_lost"
    gpu: int | None
    device: str
    code: int  # the XID code for kind "xid"; the NVML return code for "gpu_lost"
    time_ns: int  # time.time_ns() when the probe saw it
    detail: str


@runtime_checkable
class Probe(Protocol):
    """A source of hardware readings. ``sample()`` and ``drain_events()`` never raise."""

    name: str

    def sample(self) -> list[Reading]: ...

    def drain_events(self) -> list[HardwareEvent]: ...

    def close(self) -> None: ...


def counter_delta(previous: float, current: float) -> float:
    """Increase of a monotonic counter between two reads.

    A counter that went *down* was reset (driver reload, GPU reset, NIC reset,
    ``perfquery -x -R``); as Prometheus does for a reset, the whole new value is
    the increase since the reset.
    """
    if current >= previous:
        return current - previous
    return current


class CounterTracker:
    """Turns counter totals into ``_total`` and ``_delta`` readings, per device."""

    __slots__ = ("_prev", "_names")

    def __init__(self) -> None:
        self._prev: dict[tuple[str, str], float] = {}
        self._names: dict[str, tuple[str, str]] = {}  # base -> its _total and _delta names, made once

    def emit(self, out: list[Reading], base: str, total: float, gpu: int | None, device: str) -> None:
        total = float(total)
        names = self._names.get(base)
        if names is None:
            names = self._names[base] = (base + "_total", base + "_delta")
        out.append(Reading(names[0], total, gpu, device))
        key = (device, base)
        prev = self._prev.get(key)
        if prev is not None:
            out.append(Reading(names[1], counter_delta(prev, total), gpu, device))
        self._prev[key] = total

    def forget(self, device: str) -> None:
        """Drop the history of a device that went away (its next total starts afresh)."""
        for key in [k for k in self._prev if k[0] == device]:
            del self._prev[key]
