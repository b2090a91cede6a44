"""A generated sysfs tree of one host's NICs and InfiniBand ports, in the layout the NIC probe reads
(collectors/probes/nic.py): for tests and bench/fleet.py, which run many simulated hosts on one machine.

It is a TEST DOUBLE of /sys, not /sys: the files hold what a healthy host's would, and `set_ib` / `set_nic`
change one port as a fault would (a link down, symbol errors rising).
"""

from __future__ import annotations

from pathlib import Path

NET_STATS = ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped")
IB_COUNTERS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards")


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_host(root: Path, nics: int = 2, hcas: int = 8, ports_per_hca: int = 1) -> list[str]:
    """Interfaces eth0.. and HCAs mlx5_0.. (each with `ports_per_hca` ports) under `root`; returns their names."""
    names = []
    for i in range(nics):
        set_nic(root, f"eth{i}", ifindex=2 + i)
        names.append(f"eth{i}")
    for h in range(hcas):
        for p in range(1, ports_per_hca + 1):
            set_ib(root, f"mlx5_{h}", p)
            names.append(f"mlx5_{h}/{p}")
    return names


def set_nic(root: Path, name: str, ifindex: int | None = None, up: bool = True, **stats: int | str) -> None:
    base = root / "class" / "net" / name
    for counter in NET_STATS:
        if counter in stats or not (base / "statistics" / counter).exists():
            _write(base / "statistics" / counter, f"{stats.get(counter, 0)}\n")
    if not (base / "carrier_changes").exists():
        _write(base / "carrier_changes", "1\n")
    _write(base / "operstate", "up\n" if up else "down\n")
    if ifindex is not None:
        _write(base / "ifindex", f"{ifindex}\n")


def set_ib(root: Path, hca: str, port: int, active: bool = True, **counters: int | str) -> None:
    """A port's state, and any counters given (an int, or any text: a forged value)."""
    base = root / "class" / "infiniband" / hca / "ports" / str(port)
    for counter in IB_COUNTERS:
        if counter in counters or not (base / "counters" / counter).exists():
            _write(base / "counters" / counter, f"{counters.get(counter, 0)}\n")
    _write(base / "state", "4: ACTIVE\n" if active else "1: DOWN\n")
    _write(base / "phys_state", "5: LinkUp\n" if active else "3: Disabled\n")
    if not (base / "rate").exists():
        _write(base / "rate", "400 Gb/sec (4X NDR)\n")
