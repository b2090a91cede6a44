"""NIC and InfiniBand error counters, port state and rate, from sysfs.

Ethernet (every interface under ``<root>/class/net`` except the virtual ones, VIRTUAL_NICS, or
whatever ``exclude`` says instead)::

    class/net/IF/statistics/{rx_errors,tx_errors,rx_dropped,tx_dropped}
    class/net/IF/carrier_changes
    class/net/IF/operstate                      -> nic.up (1 when "up")

InfiniBand / RoCE (every port of every HCA under ``<root>/class/infiniband``)::

    class/infiniband/DEV/ports/N/counters/{symbol_error,link_downed,
        link_error_recovery,port_rcv_errors,port_xmit_discards}
    class/infiniband/DEV/ports/N/state          "4: ACTIVE"      -> ib.port_state 4, ib.port_active 1
    class/infiniband/DEV/ports/N/phys_state     "5: LinkUp"      -> ib.phys_state 5
    class/infiniband/DEV/ports/N/rate           "200 Gb/sec (4X HDR)" -> ib.rate_gbps 200

Counters are reported as ``X_total`` every sample and ``X_delta`` from the
second sample of a device on. Devices are rediscovered every sample, so a port
or NIC that appears later is picked up; one that disappears is forgotten.
Unreadable files are skipped (logged once per file), never fatal. The sysfs root
is a parameter so tests run on a generated tree.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

from .base import CounterTracker, HardwareEvent, Reading

LOG = logging.getLogger("collectors.probes.nic")

#: Interfaces that are no host's link to the fabric, skipped by default: loopback; container, VM and overlay
#: plumbing (veth pairs, bridges, CNI and overlay devices); traffic shapers (ifb: a healthy host shows them
#: down, which read as "NICs some down"); and the tunnel devices a kernel module creates (gre0, sit0, ...), down
#: unless configured. A bond or team of real NICs is kept (its members are read too).
VIRTUAL_NICS = ("lo", "veth*", "docker*", "br-*", "virbr*", "ifb*", "cni*", "flannel*", "cali*", "cilium*",
                "vxlan*", "genev*", "tun*", "tap*", "dummy*", "kube-*", "weave*", "vnet*", "macvtap*", "lxc*",
                "podman*", "tailscale*", "wg*", "gre*", "erspan*", "ip6tnl*", "ip6gre*", "ip_vti*", "ip6_vti*",
                "sit*", "nlmon*")

NET_STAT_COUNTERS = ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
MAX_COUNTER = 1 << 62  # no real counter gets near it (2**62 errors); a larger value is forged or corrupt
MAX_RATE_GBPS = 1_000_000.0  # a petabit port: past it, a rate file is forged
IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards")

_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*([A-Za-z_]+)")
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([GMT])b/sec", re.IGNORECASE)
_RATE_SCALE = {"M": 0.001, "G": 1.0, "T": 1000.0}


def parse_port_state(text: str) -> tuple[int, str] | None:
    """``"4: ACTIVE"`` -> ``(4, "ACTIVE")``; None when it does not parse."""
    m = _STATE_RE.match(text)
    if not m:
        return None
    return int(m.group(1)), m.group(2).upper()


def parse_rate_gbps(text: str) -> float | None:
    """``"200 Gb/sec (4X HDR)"`` -> ``200.0``; ``"2.5 Gb/sec (1X SDR)"`` -> ``2.5``."""
    m = _RATE_RE.match(text)
    if not m:
        return None
    return float(m.group(1)) * _RATE_SCALE[m.group(2).upper()]


def _read_text(path: str) -> str:
    # os.open/os.read: a third of the cost of open() for these tiny files.
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)


class NicProbe:
    """Reads NIC and IB counters from ``sysfs_root`` (``/sys`` on a host)."""

    name = "nic"

    def __init__(
        self,
        sysfs_root: str | Path = "/sys",
        *,
        exclude: tuple[str, ...] = VIRTUAL_NICS,
        log: logging.Logger = LOG,
    ) -> None:
        self.root = Path(sysfs_root)
        self._net = os.path.join(str(self.root), "class", "net")
        self._ib = os.path.join(str(self.root), "class", "infiniband")
        self._exclude = tuple(exclude)
        self._log = log
        self._counters = CounterTracker()
        self._seen: set[str] = set()
        self._unreadable: set[str] = set()
        self.skipped = 0  # values read but refused: not integers, negative, past MAX_COUNTER, absurd rates/states

    def _list(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def _read(self, path: str) -> str | None:
        try:
            return _read_text(path)
        except OSError as exc:
            # Some drivers refuse some counters (EINVAL/EOPNOTSUPP); say so once.
            if path not in self._unreadable:
                self._unreadable.add(path)
                self._log.warning("NIC probe: cannot read %s: %s (tried again each sample; not logged again)", path,
                                  exc)
            return None

    def _read_int(self, path: str) -> int | None:
        text = self._read(path)
        if text is None:
            return None
        try:
            value = int(text.strip())
        except ValueError:
            self._skip(path, f"does not hold an integer: {text[:40]!r}")
            return None
        if not 0 <= value <= MAX_COUNTER:
            self._skip(path, f"holds {str(value)[:40]}, outside 0..2**62: forged or corrupt")
            return None
        return value

    def _skip(self, path: str, why: str) -> None:
        """A value no device writes (negative, huge, not a number): skipped and counted (`skipped`), logged once
        per file, never fatal; the other files of the sample are read as usual."""
        self.skipped += 1
        if path not in self._unreadable:
            self._unreadable.add(path)
            self._log.warning("NIC probe: %s %s (skipped; counted in the probe's `skipped`)", path, why)

    def interfaces(self) -> list[str]:
        """The Ethernet (and IPoIB) interfaces it reads, after ``exclude``."""
        return [
            name
            for name in self._list(self._net)
            if not any(fnmatch.fnmatchcase(name, pat) for pat in self._exclude)
        ]

    def ib_ports(self) -> list[tuple[str, str]]:
        """(HCA, port) pairs, e.g. ("mlx5_0", "1")."""
        out = []
        for dev in self._list(self._ib):
            for port in self._list(os.path.join(self._ib, dev, "ports")):
                out.append((dev, port))
        return out

    def _emit_counters(self, out: list[Reading], folder: str, names: Iterable[str], prefix: str, device: str) -> None:
        """Each counter file of `folder` that reads as an integer, as the rate metric prefix + its name."""
        for counter in names:
            v = self._read_int(os.path.join(folder, counter))
            if v is not None:
                self._counters.emit(out, prefix + counter, v, None, device)

    def sample(self) -> list[Reading]:
        out: list[Reading] = []
        seen: set[str] = set()
        emit = self._counters.emit
        for ifname in self.interfaces():
            base = os.path.join(self._net, ifname)
            seen.add(ifname)
            self._emit_counters(out, os.path.join(base, "statistics"), NET_STAT_COUNTERS, "nic.", ifname)
            v = self._read_int(os.path.join(base, "carrier_changes"))
            if v is not None:
                emit(out, "nic.carrier_changes", v, None, ifname)
            state = self._read(os.path.join(base, "operstate"))
            if state is not None:
                out.append(Reading("nic.up", 1.0 if state.strip() == "up" else 0.0, None, ifname))
        for dev, port in self.ib_ports():
            device = f"{dev}/{port}"
            seen.add(device)
            base = os.path.join(self._ib, dev, "ports", port)
            self._emit_counters(out, os.path.join(base, "counters"), IB_COUNTERS, "ib.", device)
            text = self._read(os.path.join(base, "state"))
            parsed = self._state(os.path.join(base, "state"), text)
            if parsed is not None:
                out.append(Reading("ib.port_state", float(parsed[0]), None, device))
                out.append(Reading("ib.port_active", 1.0 if parsed[1] == "ACTIVE" else 0.0, None, device))
            text = self._read(os.path.join(base, "phys_state"))
            parsed = self._state(os.path.join(base, "phys_state"), text)
            if parsed is not None:
                out.append(Reading("ib.phys_state", float(parsed[0]), None, device))
            text = self._read(os.path.join(base, "rate"))
            rate = parse_rate_gbps(text) if text is not None else None
            if rate is not None and not rate <= MAX_RATE_GBPS:
                self._skip(os.path.join(base, "rate"), f"says {str(rate)[:40]} Gb/s")
                rate = None
            if rate is not None:
                out.append(Reading("ib.rate_gbps", rate, None, device))
        for gone in self._seen - seen:
            self._counters.forget(gone)
        self._seen = seen
        return out

    def _state(self, path: str, text: str | None) -> tuple[int, str] | None:
        parsed = parse_port_state(text) if text is not None else None
        if parsed is not None and not 0 <= parsed[0] <= 255:  # the kernel's states are small numbers
            self._skip(path, f"holds state {str(parsed[0])[:40]}")
            return None
        return parsed

    def drain_events(self) -> list[HardwareEvent]:
        return []

    def close(self) -> None:
        pass
