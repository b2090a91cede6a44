"""NIC / InfiniBand probe on a generated sysfs tree (a real temporary directory)."""

from __future__ import annotations

import gc
import logging
import os
from pathlib import Path

import pytest

from collectors.probes import METRIC_NAME_RE, NicProbe, parse_port_state, parse_rate_gbps
from collectors.probes.nic import IB_COUNTERS, NET_STAT_COUNTERS


def write_nic(root: Path, name: str, counters: dict[str, int], carrier_changes: int = 0, operstate: str = "up") -> None:
    base = root / "class" / "net" / name
    (base / "statistics").mkdir(parents=True, exist_ok=True)
    for c in NET_STAT_COUNTERS:
        (base / "statistics" / c).write_text(f"{counters.get(c, 0)}\n")
    (base / "carrier_changes").write_text(f"{carrier_changes}\n")
    (base / "operstate").write_text(operstate + "\n")


def write_ib(
    root: Path,
    dev: str,
    port: int,
    counters: dict[str, int],
    state: str = "4: ACTIVE",
    phys: str = "5: LinkUp",
    rate: str = "200 Gb/sec (4X HDR)",
) -> None:
    base = root / "class" / "infiniband" / dev / "ports" / str(port)
    (base / "counters").mkdir(parents=True, exist_ok=True)
    for c in IB_COUNTERS:
        (base / "counters" / c).write_text(f"{counters.get(c, 0)}\n")
    (base / "state").write_text(state + "\n")
    (base / "phys_state").write_text(phys + "\n")
    (base / "rate").write_text(rate + "\n")


def by_key(readings):
    out = {}
    for r in readings:
        key = (r.device, r.metric)
        assert key not in out, f"duplicate reading {key}"
        out[key] = r.value
    return out


def test_deltas_between_samples(tmp_path: Path) -> None:
    write_nic(tmp_path, "lo", {"rx_errors": 5})
    write_nic(tmp_path, "eth0", {"rx_errors": 10, "tx_errors": 1, "rx_dropped": 100, "tx_dropped": 0},
              carrier_changes=2)
    write_nic(tmp_path, "ib0", {}, operstate="down")
    write_ib(tmp_path, "mlx5_0", 1, {"symbol_error": 3, "link_downed": 0, "port_rcv_errors": 7})
    write_ib(tmp_path, "mlx5_1", 1, {}, state="1: DOWN", phys="3: Disabled", rate="10 Gb/sec (4X SDR)")

    probe = NicProbe(tmp_path)
    first = by_key(probe.sample())
    assert not any(k[0] == "lo" for k in first), "lo must be skipped"
    assert not any(k[1].endswith("_delta") for k in first), "first sample has no deltas"
    assert first[("eth0", "nic.rx_errors_total")] == 10
    assert first[("eth0", "nic.carrier_changes_total")] == 2
    assert first[("eth0", "nic.up")] == 1 and first[("ib0", "nic.up")] == 0
    assert first[("mlx5_0/1", "ib.symbol_error_total")] == 3
    assert first[("mlx5_0/1", "ib.port_state")] == 4 and first[("mlx5_0/1", "ib.port_active")] == 1
    assert first[("mlx5_0/1", "ib.phys_state")] == 5
    assert first[("mlx5_0/1", "ib.rate_gbps")] == 200.0
    assert first[("mlx5_1/1", "ib.port_state")] == 1 and first[("mlx5_1/1", "ib.port_active")] == 0
    assert first[("mlx5_1/1", "ib.rate_gbps")] == 10.0

    # Counters move; one resets (driver reload): its delta is the new value.
    write_nic(tmp_path, "eth0", {"rx_errors": 13, "tx_errors": 1, "rx_dropped": 150, "tx_dropped": 4},
              carrier_changes=3)
    write_ib(tmp_path, "mlx5_0", 1,
             {"symbol_error": 10, "link_downed": 1, "port_rcv_errors": 2, "port_xmit_discards": 9})
    second = by_key(probe.sample())
    assert second[("eth0", "nic.rx_errors_delta")] == 3
    assert second[("eth0", "nic.tx_errors_delta")] == 0
    assert second[("eth0", "nic.rx_dropped_delta")] == 50
    assert second[("eth0", "nic.tx_dropped_delta")] == 4
    assert second[("eth0", "nic.carrier_changes_delta")] == 1
    assert second[("eth0", "nic.rx_errors_total")] == 13
    assert second[("mlx5_0/1", "ib.symbol_error_delta")] == 7
    assert second[("mlx5_0/1", "ib.link_downed_delta")] == 1
    assert second[("mlx5_0/1", "ib.link_error_recovery_delta")] == 0
    assert second[("mlx5_0/1", "ib.port_rcv_errors_delta")] == 2  # 7 -> 2: reset, count the 2 since
    assert second[("mlx5_0/1", "ib.port_xmit_discards_delta")] == 9
    assert second[("mlx5_1/1", "ib.symbol_error_delta")] == 0

    third = by_key(probe.sample())
    assert third[("mlx5_0/1", "ib.symbol_error_delta")] == 0
    assert third[("eth0", "nic.rx_errors_delta")] == 0

    for r in probe.sample():
        assert METRIC_NAME_RE.match(r.metric), r.metric
        assert r.gpu is None


def test_devices_come_and_go(tmp_path: Path) -> None:
    write_nic(tmp_path, "eth0", {"rx_errors": 1})
    probe = NicProbe(tmp_path)
    probe.sample()
    write_ib(tmp_path, "mlx5_0", 1, {"symbol_error": 4})
    s = by_key(probe.sample())
    assert s[("mlx5_0/1", "ib.symbol_error_total")] == 4
    assert ("mlx5_0/1", "ib.symbol_error_delta") not in s, "a new port starts without a delta"
    # The port goes away and comes back with a lower count: no bogus delta from stale history.
    import shutil

    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_0")
    assert not any(r.device == "mlx5_0/1" for r in probe.sample())
    write_ib(tmp_path, "mlx5_0", 1, {"symbol_error": 1})
    s = by_key(probe.sample())
    assert s[("mlx5_0/1", "ib.symbol_error_total")] == 1
    assert ("mlx5_0/1", "ib.symbol_error_delta") not in s


def test_kept_descriptors_read_fresh_values_and_follow_a_recreated_device(tmp_path: Path) -> None:
    """The probe keeps each file open and re-reads it at offset 0 (as sysfs regenerates it): a value written
    since is read; a device removed and created again between two samples (a driver reload) is read from its new
    files, not from the descriptors of the old ones, and its descriptors are closed when it goes."""
    import shutil

    write_ib(tmp_path, "mlx5_0", 1, {"symbol_error": 4})
    write_nic(tmp_path, "eth0", {"rx_errors": 1})
    probe = NicProbe(tmp_path)
    probe.sample()
    write_ib(tmp_path, "mlx5_0", 1, {"symbol_error": 9})  # rewritten in place: the kept descriptor sees it
    assert by_key(probe.sample())[("mlx5_0/1", "ib.symbol_error_delta")] == 5
    kept = len(probe._fds)
    assert kept >= 10
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_0")
    write_ib(tmp_path, "mlx5_0", 1, {"symbol_error": 2})  # gone and back within one interval
    s = by_key(probe.sample())
    assert s[("mlx5_0/1", "ib.symbol_error_total")] == 2
    assert len(probe._fds) == kept
    shutil.rmtree(tmp_path / "class" / "net" / "eth0")
    probe.sample()
    assert len(probe._fds) < kept and not any("eth0" in path for path in probe._fds)
    probe.close()
    assert not probe._fds


def test_virtual_interfaces_are_skipped_by_default(tmp_path: Path) -> None:
    """A healthy host's ifb (traffic shaping), veth, bridges and kernel tunnels are down or meaningless: reading
    them showed "NICs some down" (issue 23). Real NICs, IPoIB and bonds are read."""
    virtual = ("lo", "ifb0", "ifb1", "veth12ab", "docker0", "br-3f2a", "virbr0", "cni0", "flannel.1", "cali1a2b",
               "vxlan.calico", "tunl0", "gre0", "gretap0", "erspan0", "sit0", "ip6tnl0", "ip_vti0", "dummy0",
               "tailscale0", "wg0", "kube-ipvs0", "cilium_host", "genev_sys_6081", "nlmon0", "tap0", "vnet3")
    real = ("bond0", "enp65s0f0", "eth0", "ib0", "ens1f1np1")
    for name in (*virtual, *real):
        write_nic(tmp_path, name, {})
    assert NicProbe(tmp_path).interfaces() == sorted(real)


def test_exclude_patterns_and_missing_tree(tmp_path: Path) -> None:
    for name in ("eth0", "veth12ab", "docker0"):
        write_nic(tmp_path, name, {})
    probe = NicProbe(tmp_path, exclude=("lo", "veth*", "docker*"))
    assert probe.interfaces() == ["eth0"]
    assert NicProbe(tmp_path / "nonexistent").sample() == []


def test_unreadable_counter_skipped_and_logged_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    write_nic(tmp_path, "eth0", {"rx_errors": 1})
    bad = tmp_path / "class" / "net" / "eth0" / "statistics" / "tx_errors"
    bad.unlink()
    bad.mkdir()  # reading a directory fails with an OSError, like a driver refusing a counter
    (tmp_path / "class" / "net" / "eth0" / "carrier_changes").write_text("garbage\n")
    probe = NicProbe(tmp_path)
    with caplog.at_level(logging.WARNING, logger="collectors.probes.nic"):
        for _ in range(3):
            s = by_key(probe.sample())
    assert ("eth0", "nic.tx_errors_total") not in s
    assert ("eth0", "nic.carrier_changes_total") not in s
    assert s[("eth0", "nic.rx_errors_total")] == 1
    msgs = [r.getMessage() for r in caplog.records]
    assert sum("tx_errors" in m for m in msgs) == 1
    assert sum("carrier_changes" in m for m in msgs) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("200 Gb/sec (4X HDR)\n", 200.0),
        ("400 Gb/sec (4X NDR)", 400.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("100 Gb/sec (2X HDR)", 100.0),
        ("garbage", None),
        ("", None),
    ],
)
def test_parse_rate(text: str, expected: float | None) -> None:
    assert parse_rate_gbps(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4: ACTIVE\n", (4, "ACTIVE")),
        ("1: DOWN", (1, "DOWN")),
        ("2: INIT", (2, "INIT")),
        ("5: LinkUp", (5, "LINKUP")),
        ("0: <unknown>", (0, "<UNKNOWN>")),  # the kernel's phys_state_show for a state it does not name
        ("7: Phy Test", (7, "PHY")),
        ("ACTIVE", None),
        ("4:", None),
    ],
)
def test_parse_state(text: str, expected: tuple[int, str] | None) -> None:
    assert parse_port_state(text) == expected


def test_an_hcas_ports_are_listed_again_only_when_it_changed_or_every_relist(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """A sample lists class/net and class/infiniband, not each HCA's ports folder again: those are listed at an
    HCA's first sight, when its ports folder is another one or changed (gone and back: test above; a port added,
    removed or re-created: tests below), while it has none, and every PORTS_RELIST_EVERY samples."""
    import os

    from collectors.probes import nic

    for hca in range(4):
        write_ib(tmp_path, f"mlx5_{hca}", 1, {})
    write_nic(tmp_path, "eth0", {})
    (tmp_path / "class" / "infiniband" / "mlx5_9" / "ports").mkdir(parents=True)  # an HCA without ports yet
    listed: list[str] = []
    real_listdir = os.listdir

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return real_listdir(path)

    monkeypatch.setattr(nic.os, "listdir", listdir)
    probe = NicProbe(tmp_path)
    probe.sample()
    assert len(listed) == 2 + 5, listed  # the two classes, then each HCA's ports once
    listed.clear()
    probe.sample()
    assert sorted(listed) == sorted([str(tmp_path / "class" / "net"), str(tmp_path / "class" / "infiniband"),
                                     str(tmp_path / "class" / "infiniband" / "mlx5_9" / "ports")]), listed
    write_ib(tmp_path, "mlx5_9", 1, {"symbol_error": 3})  # its port came: read at the next sample
    assert ("mlx5_9/1", "ib.symbol_error_total") in by_key(probe.sample())
    write_ib(tmp_path, "mlx5_0", 2, {"symbol_error": 5})  # a second port in an HCA whose folder is the same
    samples = 1
    while ("mlx5_0/2", "ib.symbol_error_total") not in by_key(probe.sample()):
        samples += 1
        assert samples <= nic.PORTS_RELIST_EVERY, "a port of a kept HCA was never listed"
    listed.clear()
    probe.sample()
    assert len(listed) == 2, listed


def _ports_folder_changes(tmp_path: Path, change: str) -> None:
    """What `change` does to a host of four HCAs with two ports each (collectors.sim's generated tree, the one
    bench/fleet.py and the agent tests rewrite) after a first sample: a port folder re-created with the link down
    (a generated tree rewritten; a port re-registered), a port removed, a port added, to an HCA kept."""
    import shutil

    from collectors.sim.sysfs import set_ib

    ports = tmp_path / "class" / "infiniband" / "mlx5_1" / "ports"
    if change == "rewritten":
        shutil.rmtree(ports / "2")
        set_ib(tmp_path, "mlx5_1", 2, active=False, symbol_error=7)
    elif change == "removed":
        shutil.rmtree(ports / "2")
    else:
        set_ib(tmp_path, "mlx5_1", 3, active=False, symbol_error=7)


@pytest.mark.parametrize("change", ["rewritten", "removed", "added"])
@pytest.mark.parametrize("samples_before", [1, 2, 59, 60])
def test_a_port_folder_rewritten_removed_or_added_in_a_kept_hca_is_read_at_the_next_sample(
        tmp_path: Path, change: str, samples_before: int) -> None:
    """The ports of an HCA kept between two samples are not listed each sample (the HCA's `ports` folder is
    stat'ed instead): a port folder deleted and made again must not be read through the descriptors of its deleted
    files (they keep the old values: a link down read ACTIVE for ever), a removed port must not keep its last
    values, and an added one must be read, each at the next sample, wherever in the relisting period it falls."""
    from collectors.sim.sysfs import set_ib, write_host

    write_host(tmp_path, nics=2, hcas=4, ports_per_hca=2)
    set_ib(tmp_path, "mlx5_1", 2, symbol_error=3)
    probe = NicProbe(tmp_path)
    try:
        _check_the_next_sample_after(tmp_path, probe, change, samples_before)
    finally:
        probe.close()  # its ~70 kept descriptors: a later test's select() takes none past FD_SETSIZE


def _check_the_next_sample_after(tmp_path: Path, probe: NicProbe, change: str, samples_before: int) -> None:
    for _ in range(samples_before):
        s = by_key(probe.sample())
    assert s[("mlx5_1/2", "ib.port_active")] == 1 and s[("mlx5_1/2", "ib.symbol_error_total")] == 3
    kept = len(probe._fds)
    _ports_folder_changes(tmp_path, change)
    s = by_key(probe.sample())
    if change == "rewritten":
        assert s[("mlx5_1/2", "ib.port_active")] == 0, "a link down re-created in the folder was not read"
        assert s[("mlx5_1/2", "ib.phys_state")] == 3
        assert s[("mlx5_1/2", "ib.symbol_error_total")] == 7
        assert len(probe._fds) == kept, "the deleted files' descriptors were kept beside the new ones"
    elif change == "removed":
        assert not any(device == "mlx5_1/2" for device, _ in s), "a removed port kept its last values"
        assert not any("mlx5_1/ports/2" in path for path in probe._fds)
    else:
        assert s[("mlx5_1/3", "ib.port_active")] == 0 and s[("mlx5_1/3", "ib.symbol_error_total")] == 7
    # The HCA's other port and the other HCAs read as before, and the change holds over later samples.
    assert s[("mlx5_1/1", "ib.port_active")] == 1 and s[("mlx5_0/1", "ib.port_active")] == 1
    for _ in range(3):
        again = by_key(probe.sample())
        assert {k: v for k, v in again.items() if not k[1].endswith("_delta")} == \
            {k: v for k, v in s.items() if not k[1].endswith("_delta")}


def test_a_port_rewritten_where_the_ports_folder_keeps_its_times_is_read_afresh_at_the_relisting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel need not change a folder's times when a folder in it is made again (sysfs is no disk): where the
    `ports` folder looks the same, the listing every PORTS_RELIST_EVERY samples checks each port folder's own
    identity, so a re-created port is read from its new files by then, not from the deleted ones for ever."""
    import shutil

    from collectors.probes import nic
    from collectors.sim.sysfs import set_ib, write_host

    real_identity = nic._identity

    def identity(folder: str) -> tuple[int, int]:
        ino, ctime = real_identity(folder)
        return (ino, 0) if folder.endswith("ports") else (ino, ctime)

    monkeypatch.setattr(nic, "_identity", identity)
    write_host(tmp_path, nics=1, hcas=2, ports_per_hca=1)
    probe = NicProbe(tmp_path)
    assert by_key(probe.sample())[("mlx5_1/1", "ib.port_active")] == 1
    shutil.rmtree(tmp_path / "class" / "infiniband" / "mlx5_1" / "ports" / "1")
    set_ib(tmp_path, "mlx5_1", 1, active=False)
    samples = 1
    try:
        while by_key(probe.sample())[("mlx5_1/1", "ib.port_active")] != 0:
            samples += 1
            assert samples <= nic.PORTS_RELIST_EVERY, "a re-created port was read from its deleted files for ever"
        assert by_key(probe.sample())[("mlx5_1/1", "ib.port_active")] == 0
    finally:
        probe.close()


def _descriptors_open_under(root: Path) -> int:
    """This process's open descriptors onto files under `root` (/proc/self/fd: other tests' descriptors, and
    other threads', are not counted)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between the listing and the readlink (the listing's own descriptor, for one)
            continue
        count += target.startswith(str(root) + os.sep)
    return count


@pytest.mark.parametrize("held", ["alone", "by a sampler", "closed then sampled again"])
def test_a_probe_dropped_without_close_closes_its_descriptors(tmp_path: Path, held: str) -> None:
    """A probe keeps each file it reads open (76 on a host of 2 NICs and 8 IB ports). One dropped without close()
    (a simulated host of bench/fleet.py or bench/host_cost.py going away, a test that fails before its close())
    must not leave them open: a process that makes many probes would run out of descriptors, and a later
    select() of the process takes none past FD_SETSIZE. Counted in /proc/self/fd."""
    from collectors.agent.hardware import HardwareSampler
    from collectors.agent.ranks import RankRegistry
    from collectors.delivery.node import Node
    from collectors.delivery.windows import Deadlines
    from collectors.sim.sysfs import write_host

    write_host(tmp_path, nics=2, hcas=8)
    probe = NicProbe(tmp_path)
    probe.sample()
    assert _descriptors_open_under(tmp_path) == 76
    if held == "by a sampler":  # what the simulator drops: a host's sampler, node and probe together
        node = Node("agent-h", Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None)
        sampler = HardwareSampler(node, RankRegistry(), host_id="h", nic=probe, host_index=0)
        sampler.sample_once()
        del node, sampler
    elif held == "closed then sampled again":  # close() is no end of the probe: a later sample opens files again
        probe.close()
        assert _descriptors_open_under(tmp_path) == 0
        probe.sample()
        assert _descriptors_open_under(tmp_path) == 76
    del probe
    gc.collect()
    assert _descriptors_open_under(tmp_path) == 0
