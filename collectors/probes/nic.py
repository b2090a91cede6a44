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
Unreadable files are skipped (logged once per file), never fatal. A value no kernel writes (a counter that is not
decimal digits or is past 2^62, a port state or rate that does not parse or is absurd, an operstate outside
OPERSTATES) is skipped and counted in ``skipped``, logged once per file (docs/fleet.md "Bad input"). The sysfs root
is a parameter so tests run on a generated tree.

Each file is opened once and re-read with ``pread`` at offset 0, which makes sysfs call the attribute's
``show()`` again (Documentation/filesystems/sysfs.rst): a sample costs one system call per file instead of
three. A read that fails on a kept descriptor (a device removed under it) is tried once more on a fresh open;
the descriptors of a device that disappears are closed, and at most MAX_OPEN_FILES are kept (past them a file
is opened, read and closed as before).

An HCA's ports are listed when the HCA is first seen, again when its ``ports`` folder's (inode, ctime) changed (one
stat of it per sample: a port folder added or removed changes its ctime, a driver reload makes it another folder),
while it has none yet, and every PORTS_RELIST_EVERY samples whatever happens (a kernel need not change a folder's
times when a port folder appears); each time they are listed, each port folder's own identity is checked too (a
port folder deleted and made again, as a generated tree rewritten is, has its kept descriptors closed: they would
read the deleted files' last values for ever). The ports' listings were most of a sample's folder work (8 of 10
listings and 8 of 10 stats on a host of 8 single-port HCAs); this keeps 2 listings and 10 stats a sample.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import re
import weakref
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

# "4: ACTIVE", "5: LinkUp", "7: Phy Test", "0: <unknown>" (drivers/infiniband/core/sysfs.c state_show, phys_state_show)
_STATE_RE = re.compile(r"^\s*(\d+)\s*:\s*(\S+)")
_RATE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([GMT])b/sec", re.IGNORECASE)
_RATE_SCALE = {"M": 0.001, "G": 1.0, "T": 1000.0}
#: what the kernel writes to class/net/IF/operstate (net/core/net-sysfs.c operstates[], RFC 2863); nic.up is 1 for "up"
OPERSTATES = frozenset(("unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"))


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


MAX_OPEN_FILES = 1024  # descriptors one probe keeps (a host with 2 NICs and 8 IB ports reads 76 files)
PORTS_RELIST_EVERY = 60  # samples: an HCA's ports are listed again at least this often (module docstring)


def _open_and_read(path: str) -> tuple[int, str]:
    """The file opened and read once: its descriptor (left open: the caller keeps or closes it) and its text.
    os.open/os.read: a third of the cost of open() for these tiny files."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fd, os.read(fd, 4096).decode("ascii", "replace")
    except OSError:
        os.close(fd)
        raise


def _identity(folder: str) -> tuple[int, int]:
    """A folder's (inode, ctime): another folder under the same name (a device gone and back) differs in one of
    them (the ctime too: a folder made again may reuse the inode number); (-1, -1) when it cannot be read."""
    try:
        st = os.stat(folder)
    except OSError:
        return (-1, -1)
    return (st.st_ino, st.st_ctime_ns)


def _read_text(path: str) -> str:
    fd, text = _open_and_read(path)
    os.close(fd)
    return text


def _close_all(fds: dict[str, int]) -> None:
    """Close every descriptor of `fds` and forget it: at NicProbe.close(), and when a probe that was never closed is
    collected (its finaliser holds `fds`, not the probe)."""
    while fds:
        _, fd = fds.popitem()
        try:
            os.close(fd)
        except OSError:
            pass


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
        # Per device, its files' paths and the metric names they feed, made once at first sight (a sample reads
        # ~80 files a host: joining their paths again each second cost as much as reading them).
        self._excluded: dict[str, bool] = {}
        self._nic_files: dict[str, tuple[tuple[tuple[str, str], ...], str]] = {}
        self._ib_files: dict[tuple[str, str], tuple[str, tuple[tuple[str, str], ...], str, str, str]] = {}
        self._unreadable: set[str] = set()
        self._fds: dict[str, int] = {}  # path -> a descriptor kept open, re-read with pread at 0
        # A probe dropped without close() (a simulated host going away, a test failing before its close()) closes
        # its descriptors when it is collected: 76 a host, a process making many probes would run out of them.
        weakref.finalize(self, _close_all, self._fds)
        # device -> its folder's (inode, ctime) when its descriptors were opened
        self._inodes: dict[str, tuple[int, int]] = {}
        # HCA -> its ports folder's (inode, ctime) and its ports, as last listed; samples until the next listing of all
        self._hcas: dict[str, tuple[tuple[int, int], list[str]]] = {}
        self._relist_in = PORTS_RELIST_EVERY
        self.skipped = 0  # values read but refused: not decimal digits, past MAX_COUNTER, bad or absurd rates,
        # states and operstates

    def _list(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return []

    def _read(self, path: str) -> str | None:
        fd = self._fds.get(path)
        if fd is not None:
            try:
                return os.pread(fd, 4096, 0).decode("ascii", "replace")
            except OSError:  # the device went away under the descriptor (or was replaced): open it afresh
                self._close(path)
        try:
            if len(self._fds) >= MAX_OPEN_FILES:
                return _read_text(path)
            fd, text = _open_and_read(path)
            self._fds[path] = fd
            return text
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
        digits = text.strip()
        # The kernel writes a counter as decimal digits (%llu); int() would also take "+5", "1_000", " -5" (the text
        # is ASCII, each other byte decoded as U+FFFD: isdigit() is true for ASCII digits alone).
        if not digits.isdigit():
            self._skip(path, f"does not hold a decimal integer: {text[:40]!r}")
            return None
        value = int(digits)
        if value > MAX_COUNTER:
            self._skip(path, f"holds {digits[:40]}, past 2**62: forged or corrupt")
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
        names = self._list(self._net)
        excluded = self._excluded
        if len(excluded) > 4096:  # interfaces come and go (veth pairs): keep the verdicts bounded
            excluded.clear()
        for name in names:
            if name not in excluded:
                excluded[name] = any(fnmatch.fnmatchcase(name, pat) for pat in self._exclude)
        return [name for name in names if not excluded[name]]

    def ib_ports(self) -> list[tuple[str, str]]:
        """(HCA, port) pairs, e.g. ("mlx5_0", "1"). An HCA's ports are listed again when its ``ports`` folder is
        another one or changed (a port added, removed or re-created; the HCA re-created), and then each port whose
        folder is another one has its descriptors closed (module docstring)."""
        out: list[tuple[str, str]] = []
        self._relist_in -= 1
        relist_all = self._relist_in <= 0
        if relist_all:
            self._relist_in = PORTS_RELIST_EVERY
        hcas = self._list(self._ib)
        for dev in hcas:
            folder = os.path.join(self._ib, dev, "ports")
            ident = _identity(folder)
            known = self._hcas.get(dev)
            if known is None or known[0] != ident or relist_all or not known[1]:
                ports = self._list(folder)
                for port in ports:
                    self._same_device(f"{dev}/{port}", os.path.join(folder, port))
                self._hcas[dev] = (ident, ports)
            else:
                ports = known[1]
            out.extend((dev, port) for port in ports)
        if len(self._hcas) > len(hcas):
            for dev in self._hcas.keys() - set(hcas):
                del self._hcas[dev]
        return out

    def _emit_counters(self, out: list[Reading], files: Iterable[tuple[str, str]], device: str) -> None:
        """Each counter file (path, metric) that reads as an integer, as that metric's total and delta."""
        emit = self._counters.emit
        for path, metric in files:
            v = self._read_int(path)
            if v is not None:
                emit(out, metric, v, None, device)

    def _nic_paths(self, ifname: str) -> tuple[tuple[tuple[str, str], ...], str]:
        files = self._nic_files.get(ifname)
        if files is None:
            base = os.path.join(self._net, ifname)
            stats = os.path.join(base, "statistics")
            counters = (*((os.path.join(stats, name), "nic." + name) for name in NET_STAT_COUNTERS),
                        (os.path.join(base, "carrier_changes"), "nic.carrier_changes"))
            files = self._nic_files[ifname] = (counters, os.path.join(base, "operstate"))
        return files

    def _ib_paths(self, dev: str, port: str) -> tuple[str, tuple[tuple[str, str], ...], str, str, str]:
        files = self._ib_files.get((dev, port))
        if files is None:
            base = os.path.join(self._ib, dev, "ports", port)
            folder = os.path.join(base, "counters")
            files = self._ib_files[(dev, port)] = (
                f"{dev}/{port}", tuple((os.path.join(folder, name), "ib." + name) for name in IB_COUNTERS),
                os.path.join(base, "state"), os.path.join(base, "phys_state"), os.path.join(base, "rate"))
        return files

    def sample(self) -> list[Reading]:
        out: list[Reading] = []
        seen: set[str] = set()
        for ifname in self.interfaces():
            seen.add(ifname)
            self._same_device(ifname, os.path.join(self._net, ifname))  # first: it drops the paths of a replaced
            counters, operstate = self._nic_paths(ifname)  # folder, which are listed (and their files opened) anew
            self._emit_counters(out, counters, ifname)
            state = self._read(operstate)
            if state is not None:
                state = state.strip()
                if state in OPERSTATES:
                    out.append(Reading("nic.up", 1.0 if state == "up" else 0.0, None, ifname))
                else:
                    self._skip(operstate, f"holds {state[:40]!r}, no operstate")
        for dev, port in self.ib_ports():
            device, counters, state_path, phys_path, rate_path = self._ib_paths(dev, port)
            seen.add(device)  # its folder's identity is checked when its HCA's ports are listed (ib_ports)
            self._emit_counters(out, counters, device)
            parsed = self._state(state_path, self._read(state_path))
            if parsed is not None:
                out.append(Reading("ib.port_state", float(parsed[0]), None, device))
                out.append(Reading("ib.port_active", 1.0 if parsed[1] == "ACTIVE" else 0.0, None, device))
            parsed = self._state(phys_path, self._read(phys_path))
            if parsed is not None:
                out.append(Reading("ib.phys_state", float(parsed[0]), None, device))
            text = self._read(rate_path)
            if text is not None:
                rate = parse_rate_gbps(text)
                if rate is None:
                    self._skip(rate_path, f"holds {text[:40]!r}, no rate")
                elif not rate <= MAX_RATE_GBPS:
                    self._skip(rate_path, f"says {str(rate)[:40]} Gb/s")
                else:
                    out.append(Reading("ib.rate_gbps", rate, None, device))
        for device in self._seen - seen:
            self._counters.forget(device)
            self._inodes.pop(device, None)
            self._close_device(device)
        self._seen = seen
        return out

    def _same_device(self, device: str, folder: str) -> None:
        """Close the kept descriptors of a device whose folder is another one than when they were opened (a
        driver reload between two samples; a generated tree rewritten): one stat per device, not per file (an IB
        port's only when its HCA's ports are listed: ib_ports)."""
        inode = _identity(folder)
        if self._inodes.get(device, inode) != inode:
            self._close_device(device)
        self._inodes[device] = inode

    def _close_device(self, device: str) -> None:
        if "/" in device:
            dev, _, port = device.partition("/")
            files = self._ib_files.pop((dev, port), None)
            paths = [] if files is None else [*(path for path, _ in files[1]), *files[2:]]
        else:
            nic = self._nic_files.pop(device, None)
            paths = [] if nic is None else [*(path for path, _ in nic[0]), nic[1]]
        for path in paths:
            self._close(path)

    def _close(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def _state(self, path: str, text: str | None) -> tuple[int, str] | None:
        """A port's state or physical state, ``N: NAME`` with N a small number; anything else skipped and counted
        (None, as for a file that cannot be read)."""
        if text is None:
            return None
        parsed = parse_port_state(text)
        if parsed is None:
            self._skip(path, f"holds {text[:40]!r}, no port state")
        elif not 0 <= parsed[0] <= 255:  # the kernel's states are small numbers
            self._skip(path, f"holds state {str(parsed[0])[:40]}")
            return None
        return parsed

    def drain_events(self) -> list[HardwareEvent]:
        return []

    def close(self) -> None:
        """Close the kept descriptors now (a later sample opens its files again; those are closed when the probe is
        collected, if not by another close())."""
        _close_all(self._fds)
