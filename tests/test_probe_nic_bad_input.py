"""Bad input on the hardware path (issue 28, docs/fleet.md "Bad input"): forged sysfs values, a file or folder that
vanishes between the probe's listing and its reads, a port folder replaced in the middle of a sample.

The matrix: every kind of file the NIC probe reads (a NIC counter, carrier_changes, operstate, an IB counter, an IB
port's state, phys_state and rate) against what no kernel writes there (negative, past 2^62, not a number, NaN and
inf text, empty, binary, Python-only spellings such as ``1_000``); and every level of the tree (a counter file, a NIC
folder, an IB port folder, an HCA) vanishing at first sight and once its descriptors are kept, and each folder
replaced, then gone, then back with a new value. The probe must skip
and count a forged value (``NicProbe.skipped``, logged once per file), never raise, read the rest of the sample as
usual, read the file again once it holds a value again, keep no more descriptors than a fresh probe of the same
tree, and never read a removed file's values for ever.

The trees are generated (collectors/sim/sysfs.py, a TEST DOUBLE of /sys) on the test's temporary folder. Where the
point is what sysfs does to a descriptor of a file removed under it (kernfs deactivates the node: a read fails with
ENODEV, fs/kernfs/file.c), the ``kernfs`` fixture makes ``os.pread`` say so for a deleted file, which a plain file
system would read on from the deleted inode.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from collectors.agent.hardware import HardwareSampler
from collectors.agent.ranks import RankRegistry
from collectors.common import fleet
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines
from collectors.probes import NicProbe
from collectors.probes import nic as nic_module
from collectors.sim.sysfs import set_ib, write_host
from test_probe_nic import by_key

IB = "class/infiniband/mlx5_0/ports/1"
NET = "class/net/eth0"

#: kind -> (its file, the readings it feeds)
KINDS: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "nic counter": (f"{NET}/statistics/rx_errors", (("eth0", "nic.rx_errors_total"), ("eth0", "nic.rx_errors_delta"))),
    "nic carrier_changes": (f"{NET}/carrier_changes",
                            (("eth0", "nic.carrier_changes_total"), ("eth0", "nic.carrier_changes_delta"))),
    "nic operstate": (f"{NET}/operstate", (("eth0", "nic.up"),)),
    "ib counter": (f"{IB}/counters/symbol_error",
                   (("mlx5_0/1", "ib.symbol_error_total"), ("mlx5_0/1", "ib.symbol_error_delta"))),
    "ib state": (f"{IB}/state", (("mlx5_0/1", "ib.port_state"), ("mlx5_0/1", "ib.port_active"))),
    "ib phys_state": (f"{IB}/phys_state", (("mlx5_0/1", "ib.phys_state"),)),
    "ib rate": (f"{IB}/rate", (("mlx5_0/1", "ib.rate_gbps"),)),
}

NUMBERS = ("-5", "99999999999999999999999", "9" * 5000, "abc", "NaN", "nan", "inf", "-inf", "", "1_000", "+5",
           "0x10", "1e9", "5 6", "5.5", "\x00\xff")
FORGED: dict[str, tuple[str, ...]] = {
    "nic counter": NUMBERS,
    "nic carrier_changes": NUMBERS,
    "nic operstate": ("-5", "NaN", "", "garbage", "up down", "\x00\xff", "9" * 5000),
    "ib counter": NUMBERS,
    "ib state": ("-1: ACTIVE", "99999999999: ACTIVE", "9" * 5000 + ": ACTIVE", "NaN: ACTIVE", "inf: ACTIVE",
                 "ACTIVE", "4:", "", "garbage", "\x00\xff"),
    "ib phys_state": ("-1: LinkUp", "99999999999: LinkUp", "NaN: LinkUp", "LinkUp", "", "garbage", "\x00\xff"),
    "ib rate": ("-5 Gb/sec (4X HDR)", "1e400 Gb/sec", "99999999999 Gb/sec", "9" * 5000 + " Gb/sec", "NaN Gb/sec",
                "inf Gb/sec", "", "garbage", "0x10 Gb/sec", "\x00\xff"),
}
#: a value each kind holds again after the forged one (a counter higher than the tree's first value)
GOOD = {"nic counter": ("7", 7.0), "nic carrier_changes": ("4", 4.0), "nic operstate": ("down", 0.0),
        "ib counter": ("9", 9.0), "ib state": ("1: DOWN", 1.0), "ib phys_state": ("3: Disabled", 3.0),
        "ib rate": ("100 Gb/sec (4X EDR)", 100.0)}


def descriptors_open_under(root: Path) -> int:
    """This process's open descriptors onto files under `root` (/proc/self/fd)."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        count += target.startswith(str(root) + os.sep)
    return count


def what_a_fresh_probe_keeps(root: Path) -> int:
    fresh = NicProbe(root)
    try:
        fresh.sample()
        return len(fresh._fds)
    finally:
        fresh.close()


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A host of 2 NICs and 2 HCAs of one port each, with counters that are not 0 (so a total read is a total)."""
    root = tmp_path / "sys"
    write_host(root, nics=2, hcas=2)
    set_ib(root, "mlx5_0", 1, symbol_error=3)
    (root / NET / "statistics" / "rx_errors").write_text("2\n")
    return root


@pytest.fixture
def kernfs(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of a descriptor whose file was removed fails with ENODEV, as sysfs's does (module docstring)."""
    _kernfs(monkeypatch)


def _kernfs(monkeypatch: pytest.MonkeyPatch) -> None:
    real = os.pread

    def pread(fd: int, length: int, offset: int) -> bytes:
        if os.fstat(fd).st_nlink == 0:
            raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
        return real(fd, length, offset)

    monkeypatch.setattr(nic_module.os, "pread", pread)


# ---------------------------------------------------------------- forged values

@pytest.mark.parametrize(("kind", "forged"), [(kind, value) for kind, values in FORGED.items() for value in values])
def test_a_forged_value_is_skipped_counted_logged_once_and_the_file_read_again_once_it_is_sane(
        host: Path, kind: str, forged: str, caplog: pytest.LogCaptureFixture) -> None:
    path, keys = KINDS[kind]
    probe = NicProbe(host)
    try:
        clean = by_key(probe.sample())
        clean = by_key(probe.sample())  # the second sample has every counter's delta too
        assert all(key in clean for key in keys), (kind, sorted(clean))
        (host / path).write_text(forged + "\n")
        with caplog.at_level(logging.WARNING, logger="collectors.probes.nic"):
            for n in range(1, 4):
                s = by_key(probe.sample())
                assert not [key for key in keys if key in s], f"{kind} {forged[:20]!r} read as {s.get(keys[0])}"
                assert probe.skipped == n, f"{kind} {forged[:20]!r}: skipped {probe.skipped} after {n} samples"
                # the rest of the sample as usual: every other reading, at the value it had
                assert {k: v for k, v in s.items()} == {k: v for k, v in clean.items() if k not in keys}
        logged = [r.getMessage() for r in caplog.records if path in r.getMessage()]
        assert len(logged) == 1, logged
        good_text, good_value = GOOD[kind]
        (host / path).write_text(good_text + "\n")
        s = by_key(probe.sample())
        assert s[keys[0]] == good_value and probe.skipped == 3
        if keys[0][1].endswith("_total"):  # the increase since the last total read, the forged ones left out
            assert s[keys[1]] == good_value - clean[keys[0]]
    finally:
        probe.close()


def test_every_file_forged_at_once_leaves_nothing_in_the_windows_but_counts_every_file(host: Path) -> None:
    """Through the hardware path (the real HardwareSampler into a real Node, fleet layout): with every file of one
    NIC and one IB port forged, the host's windows hold only the other devices' values, all finite and in range,
    and the node's `probe_skipped` counter (what goes up the tree) is the probe's count."""
    forged = {kind: values[0] for kind, values in FORGED.items()}
    node = Node("agent-h", Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None)
    probe = NicProbe(host)
    sampler = HardwareSampler(node, RankRegistry(), host_id="h", nic=probe, host_index=5)
    second = 1_700_000_000_000_000_000
    try:
        sampler.sample_once(now_ns=second, next_wall_ns=second + 10**9)
        for kind, value in forged.items():
            (host / KINDS[kind][0]).write_text(value + "\n")
        sampler.sample_once(now_ns=second + 10**9, next_wall_ns=second + 2 * 10**9)
        sampler.flush()
    finally:
        probe.close()
    assert probe.skipped == len(forged) and node.counters["probe_skipped"] == len(forged)
    names = {src: name for src, name in sampler._fleet_names.items()}
    seen = 0
    for key, win in node.table.windows.items():
        if key[0] != fleet.FLEET_JOB or key[2] != (second + 10**9) // 10**6:
            continue
        for part in win.pending:
            summary = part.summary
            assert 0 <= summary.min <= summary.max <= 2**62, (key, summary.min, summary.max)
            for src in part.sources:
                device = names[src].split(":", 1)[1]
                forged_keys = {k for kind in forged for k in KINDS[kind][1]}
                assert (device, key[1]) not in forged_keys, f"{device} {key[1]} holds a forged file's value"
                seen += 1
    # every other reading is there: a NIC's 11 (5 counters' totals and deltas, nic.up) and a port's 14 (5
    # counters', port_state, port_active, phys_state, rate) for 2 NICs and 2 ports, less the forged files' 11
    assert seen == 2 * 11 + 2 * 14 - sum(len(KINDS[kind][1]) for kind in forged)


# ---------------------------------------------------------------- vanishing between the listing and the reads

VANISHING = {
    "a NIC counter file": f"{NET}/statistics/rx_errors",
    "a NIC folder": NET,
    "an IB counter file": f"{IB}/counters/symbol_error",
    "an IB port folder": IB,
    "an HCA": "class/infiniband/mlx5_0",
}


def _after_listing(probe: NicProbe, what: str, action: Callable[[], None]) -> None:
    """Run `action` once, right after the probe listed the interfaces (NIC paths) or the IB ports (IB paths) of the
    next sample, before it reads their files."""
    name = "interfaces" if what.startswith("class/net") else "ib_ports"
    listing = getattr(probe, name)
    done = [False]

    def listed() -> list:
        out = listing()
        if not done[0]:
            done[0] = True
            action()
        return out

    setattr(probe, name, listed)


@pytest.mark.parametrize("kept", [False, True], ids=["at first sight", "with its descriptors kept"])
@pytest.mark.parametrize("gone", list(VANISHING))
def test_a_file_or_folder_vanishing_between_the_listing_and_the_reads_is_skipped_never_fatal(
        host: Path, kernfs: None, gone: str, kept: bool) -> None:
    what = VANISHING[gone]
    target = host / what
    saved = host.parent / "saved"  # a copy to put back: the original is deleted (a rename would keep it readable)
    if target.is_dir():
        shutil.copytree(target, saved)
    else:
        shutil.copy(target, saved)
    probe = NicProbe(host)
    try:
        if kept:
            clean = by_key(probe.sample())
        else:
            other = NicProbe(host)
            clean = by_key(other.sample())
            other.close()

        def vanish() -> None:
            if target.is_dir():
                shutil.rmtree(target)
            else:
                target.unlink()

        _after_listing(probe, what, vanish)
        s = by_key(probe.sample())
        device = "eth0" if what.startswith("class/net") else "mlx5_0/1"
        if what.endswith(("rx_errors", "symbol_error")):
            lost = {key for key in clean if key[0] == device and key[1].startswith(("nic.rx_errors", "ib.symbol"))}
        else:
            lost = {key for key in clean if key[0] == device}
        assert not lost & set(s), f"{gone} read after it went: {sorted(lost & set(s))}"
        assert {k: v for k, v in s.items() if not k[1].endswith("_delta")} == \
            {k: v for k, v in clean.items() if k not in lost and not k[1].endswith("_delta")}
        assert probe.skipped == 0  # gone is not forged
        again = by_key(probe.sample())
        assert not lost & set(again)
        assert descriptors_open_under(host) == len(probe._fds) == what_a_fresh_probe_keeps(host)
        if saved.is_dir():  # back: read at the next sample
            shutil.copytree(saved, target)
        else:
            shutil.copy(saved, target)
        back = by_key(probe.sample())
        assert {k: v for k, v in back.items() if not k[1].endswith("_delta")} == \
            {k: v for k, v in clean.items() if not k[1].endswith("_delta")}
        assert descriptors_open_under(host) == len(probe._fds) == what_a_fresh_probe_keeps(host)
    finally:
        probe.close()


#: a folder of the VANISHING matrix -> the counter file under it written with a new value when it comes back, and
#: the reading that shows it
REPLACED_THEN_GONE = {
    "a NIC folder": ("statistics/rx_errors", ("eth0", "nic.rx_errors_total")),
    "an IB port folder": ("counters/symbol_error", ("mlx5_0/1", "ib.symbol_error_total")),
    "an HCA": ("ports/1/counters/symbol_error", ("mlx5_0/1", "ib.symbol_error_total")),
}


@pytest.mark.parametrize("fs", ["sysfs", "tmpfs"])
@pytest.mark.parametrize("gone", list(REPLACED_THEN_GONE))
def test_a_folder_replaced_then_gone_keeps_no_descriptor_and_is_read_anew_when_back(
        host: Path, monkeypatch: pytest.MonkeyPatch, gone: str, fs: str) -> None:
    """The VANISHING matrix's folders, replaced (another folder of the same name: a driver reload) between two
    samples, then removed, then back with a new value: once gone the probe keeps no more descriptors than a fresh
    probe (the replaced folder's descriptors are not reopened with nothing to close them by), and once back it reads
    the new value, not a deleted file's (tmpfs: a kept descriptor of a deleted file reads its old value for ever)."""
    if fs == "sysfs":
        _kernfs(monkeypatch)
    target = host / VANISHING[gone]
    saved = host.parent / "saved"
    shutil.copytree(target, saved)
    probe = NicProbe(host)
    try:
        probe.sample()
        probe.sample()
        shutil.rmtree(target)
        shutil.copytree(saved, target)  # replaced: same contents, another folder
        probe.sample()
        shutil.rmtree(target)  # then gone
        probe.sample()
        probe.sample()
        assert descriptors_open_under(host) == len(probe._fds) == what_a_fresh_probe_keeps(host)
        shutil.copytree(saved, target)  # back, with a new value
        counter, key = REPLACED_THEN_GONE[gone]
        (target / counter).write_text("123\n")
        assert by_key(probe.sample())[key] == 123.0
        assert descriptors_open_under(host) == len(probe._fds) == what_a_fresh_probe_keeps(host)
        assert probe.skipped == 0
    finally:
        probe.close()


# ---------------------------------------------------------------- a port folder replaced mid-sample

PORT_FILES = ("counters/symbol_error", "counters/link_downed", "counters/port_xmit_discards", "state", "phys_state",
              "rate")
OLD = {"ib.symbol_error_total": 9.0, "ib.link_downed_total": 0.0, "ib.port_state": 4.0, "ib.port_active": 1.0,
       "ib.phys_state": 5.0, "ib.rate_gbps": 400.0}
NEW = {"ib.symbol_error_total": 2.0, "ib.link_downed_total": 1.0, "ib.port_state": 1.0, "ib.port_active": 0.0,
       "ib.phys_state": 3.0, "ib.rate_gbps": 400.0}


@pytest.mark.parametrize("fs", ["sysfs", "tmpfs"])
@pytest.mark.parametrize("at", PORT_FILES)
def test_a_port_folder_replaced_in_the_middle_of_a_sample_is_read_whole_from_the_new_folder_after(
        host: Path, monkeypatch: pytest.MonkeyPatch, at: str, fs: str) -> None:
    """The port folder deleted and made again (a driver reload; a generated tree rewritten) while the probe reads
    it, just before it reads `at`. That sample holds each reading of the old port or of the new one (a sample was
    never atomic across files); the next sample (sysfs: its removed files' descriptors fail; tmpfs: the ports
    folder changed, so its ports are listed and checked again) reads the new port whole, through no more
    descriptors than a fresh probe keeps. (tmpfs: where the ports folder's times did not change within the clock's
    tick, by the relisting at the latest: test_probe_nic.py's fallback test.)"""
    if fs == "sysfs":
        pread = os.pread

        def kernfs_pread(fd: int, length: int, offset: int) -> bytes:
            if os.fstat(fd).st_nlink == 0:
                raise OSError(errno.ENODEV, os.strerror(errno.ENODEV))
            return pread(fd, length, offset)

        monkeypatch.setattr(nic_module.os, "pread", kernfs_pread)
    set_ib(host, "mlx5_0", 1, symbol_error=9)
    probe = NicProbe(host)
    read = probe._read
    trigger = str(host / IB / at)

    def replace_then_read(path: str) -> str | None:
        if path == trigger:
            probe._read = read  # once
            shutil.rmtree(host / IB)
            set_ib(host, "mlx5_0", 1, active=False, symbol_error=2, link_downed=1)
        return read(path)

    try:
        for _ in range(2):
            s = by_key(probe.sample())
        assert {m: s[("mlx5_0/1", m)] for m in OLD} == OLD
        probe._read = replace_then_read
        mid = by_key(probe.sample())
        for metric in OLD:
            if ("mlx5_0/1", metric) in mid:
                assert mid[("mlx5_0/1", metric)] in (OLD[metric], NEW[metric]), metric
        assert all(v >= 0 for (_, m), v in mid.items() if m.endswith("_delta"))
        for n in range(nic_module.PORTS_RELIST_EVERY + 1):
            after = by_key(probe.sample())
            if {m: after.get(("mlx5_0/1", m)) for m in NEW} == NEW:
                break
            assert fs == "tmpfs", f"sample {n + 1} after the replacement read {after}"
        else:
            raise AssertionError("the replaced port was never read from its new folder")
        assert all(v >= 0 for (_, m), v in after.items() if m.endswith("_delta"))
        assert descriptors_open_under(host) == len(probe._fds) == what_a_fresh_probe_keeps(host)
    finally:
        probe.close()
