"""The agent's hardware sampler: GPU (NVML) and NIC/InfiniBand (sysfs) readings into 1-second windows.

A daemon thread calls ``sample()`` on the GPU probe (when ``open_gpu_probe()``
found one) and on the NIC probe every ``interval_s`` (1 s by default), drains
the GPU probe's events (XIDs, lost GPUs: each is logged, and each XID also
becomes a ``gpu.xid_code`` value), and offers the readings to the agent's
window table as time-bucket parts, exactly as heartbeats are offered
(``node.offer(Part(...))`` of raw values, under ``node.lock``). From there they
travel like every other window: forwarded, merged, retained until the root has
persisted them.

Which window and which source (the source-id scheme; docs/hardware.md says why):

* A reading of a GPU that a live (or stuck) rank registered on this agent uses
  (``RankInfo.device`` is that GPU's NVML UUID, with or without ``GPU-``; failing
  that a bare index ``3`` or ``cuda:3``, taken as the NVML index) goes to
  ``Key(job, metric, bucket, 1000)`` of that rank's job, with the **rank** as
  its source and the job's world size as ``expected``. Every host's ranks merge
  into one job-wide window per metric and second: ``argmax`` of
  ``gpu.temperature_celsius`` is the rank on the hottest GPU of the whole job.
  Two ranks on one GPU both get its reading.
* Every other reading (a GPU no live rank uses, every NIC and IB port) goes to
  the host's own pseudo-job ``_host:<host id>`` (the hostname, which is also what
  the ranks' hellos report as their host, so the root can tie the two; ``--host-id``
  overrides it) with a host-local device id as its source:
  the NVML index for a GPU, the kernel's ifindex (``/sys/class/net/IF/ifindex``,
  what ``ip link`` prints) for a NIC, a first-seen ordinal for an IB port (logged
  when assigned). ``expected`` is 0 there (no world to be missing from).

Rank ids and device ids never share a window: no rank can register a job named
``_host:...`` (RankRegistry refuses it), and each host has its own pseudo-job,
so two hosts' ``gpu0`` never meet in one sources bitmap.

With a host index (``--host-index`` / ``--host-registry``; docs/fleet.md) the host's readings go instead to the
fleet's windows, ``Key(FLEET_JOB, metric, bucket, 1000)``, merged across every host of the tree, with source
``slot << 24 | host_index`` (collectors/common/fleet.py): the root's input then no longer grows with the number of
hosts. The host's devices travel up as the rank states of FLEET_JOB (``RankRegistry.pseudo``): which sources report,
their names (``host:device``) and the host's claim on them, which the tree's run ledger checks.
"""

from __future__ import annotations

import logging
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from pyroaring import BitMap

from collectors.agent.intake import HEARTBEAT_WIDTH_MS
from collectors.agent.ranks import RankInfo, RankRegistry
from collectors.common import fleet
from collectors.common.keys import Key, bucket_of
from collectors.delivery.node import Node, RankView
from collectors.delivery.windows import Part, RawValues
from collectors.probes import HardwareEvent, NicProbe, Reading, open_gpu_probe
from collectors.probes.gpu import XID_DESCRIPTIONS, GpuProbe
from collectors.probes.nic import VIRTUAL_NICS
from telemetry.names import HOST_JOB_PREFIX

log = logging.getLogger(__name__)

WIDTH_MS = HEARTBEAT_WIDTH_MS  # hardware windows are the same 1 s buckets as heartbeats
DEFAULT_PROBE_INTERVAL_S = 1.0
MAX_STEP_WAITED_OUT = 2  # intervals: a wall clock stepped back by up to this is waited out (next_sample_after)
DEFAULT_NIC_EXCLUDE = VIRTUAL_NICS
NIC_FALLBACK_BASE = 1 << 24  # NIC source ids when an interface's ifindex cannot be read
_JOB_UNSAFE = re.compile(r"[^A-Za-z0-9_.:-]")
_INDEX = re.compile(r"(?:cuda:)?(\d+)")


def next_sample_ns(now_ns: int, interval_s: float) -> int:
    """The wall time of the next sample after `now_ns`: every `interval_s`, fleet.SAMPLE_PHASE of the way into it
    (of the second, for intervals past one). Every host samples a second at the same point of it, and sends its part
    at once, so that a fleet second is complete at each tier right after that point, and the tiers' cut-off for a
    late host counts from it (Node._fleet_cutoff_ms: the link down named within 2 s at the root, docs/fleet.md).
    A sample that ran long is followed by the next due one, never by a burst."""
    period_ns = max(1, round(interval_s * 1e9))
    offset_ns = round(fleet.SAMPLE_PHASE * min(interval_s, 1.0) * 1e9)
    return ((now_ns - offset_ns) // period_ns + 1) * period_ns + offset_ns


def next_sample_after(now_ns: int, mono_ns: int, last: tuple[int, int] | None, interval_s: float) -> int:
    """The wall time of the next sample (next_sample_ns's phase point), scheduled against the monotonic clock too:
    at least half an interval after the last sample in monotonic time, and never a phase point at or before the last
    sample's (a wall clock stepped back would sample that second twice, its readings counted twice). A step back of
    up to two intervals is waited out (the next sample comes one interval plus the step after the last: at most
    three intervals); a longer one is not (the host would go unsampled for its length): the host is sampled every
    interval again at once, and its readings go to the bucket after the last one offered (HardwareSampler's floor)
    until the wall clock catches up. `last`: the last sample's (wall, monotonic) ns, None before the first."""
    period_ns = max(1, round(interval_s * 1e9))
    at_ns = next_sample_ns(now_ns, interval_s)
    if last is None:
        return at_ns
    last_wall_ns, last_mono_ns = last

    def after_last(wall_ns: int) -> int:  # how long after the last sample, in monotonic time, wall_ns comes
        return mono_ns + wall_ns - now_ns - last_mono_ns

    fresh_ns = max(at_ns, next_sample_ns(last_wall_ns, interval_s))  # the first phase point past the last sample's
    while after_last(fresh_ns) < period_ns // 2:
        fresh_ns = next_sample_ns(fresh_ns, interval_s)
    if after_last(fresh_ns) <= MAX_STEP_WAITED_OUT * period_ns + period_ns:
        return fresh_ns
    while after_last(at_ns) < period_ns // 2:  # a long step back: sample on, in the floor bucket
        at_ns = next_sample_ns(at_ns, interval_s)
    return at_ns


def host_job(host_id: str) -> str:
    """The pseudo-job a host's own hardware windows live under: ``_host:<host_id>`` (a valid job name)."""
    return (HOST_JOB_PREFIX + _JOB_UNSAFE.sub("_", host_id or "unknown"))[:128]


def offer_values(node: Node, key: Key, values: dict[int, list[float]], expected: int,
                 first_ns: int, last_ns: int) -> str:
    """Offer {source: [values]} as one raw part of window ``key``; the caller holds ``node.lock``.

    A part whose sources the window already holds (a resend cannot happen here; a wall clock that
    stepped back, or a second death report in one second, can) is cut down to its new sources.
    """
    flat = [value for vals in values.values() for value in vals]
    if len(flat) == len(values):  # the usual case: one value a source (a hardware reading a second)
        sources = np.fromiter(values, dtype=np.int64, count=len(values))
    else:
        sources = np.array([source for source, vals in values.items() for _ in vals], dtype=np.int64)
    # no origins: a sampler's or an exit's values come from no unit (Part.split gives each piece none)
    raw = RawValues(np.array(flat, dtype=np.float64), sources, first_ns, last_ns, {})
    cut, offered = node.offer_split(Part(key, [], BitMap(values), raw=raw), expected)
    if not cut:
        return offered[0][1]
    return "partial" if offered else "duplicate"


@dataclass
class _Bucket:
    key: Key
    expected: int
    first_ns: int
    last_ns: int
    values: dict[int, list[float]] = field(default_factory=dict)


@dataclass
class SamplerStats:
    samples: int = 0
    readings: int = 0
    events: int = 0
    offered_windows: int = 0
    not_accepted: int = 0
    no_slot: int = 0  # fleet readings of a device past its kind's slots (collectors/common/fleet.py), skipped
    awaiting_index: int = 0  # host readings not sent: the tree has not yet given this host its index (auto)
    cpu_s: float = 0.0  # this thread's CPU time in sample_once (time.thread_time)
    last_sample_s: float = 0.0  # wall seconds the last sample took


class HardwareSampler:
    """Samples the probes every ``interval_s`` on a daemon thread and offers the readings as windows."""

    def __init__(self, node: Node, registry: RankRegistry, *, host_id: str, gpu: GpuProbe | None = None,
                 nic: NicProbe | None = None, interval_s: float = DEFAULT_PROBE_INTERVAL_S,
                 host_index: int | None = None, awaiting_index: bool = False) -> None:
        if interval_s <= 0:
            raise ValueError("the probe interval must be > 0")
        if host_index is not None:
            fleet.source(host_index, 0)  # raises for an index out of range
        self.host_index = host_index
        # The fleet layout: with an index, or waiting for the tree to hand one out (--host-index auto): host
        # readings are then not sent until it came (set_host_index), never to _host:<host>.
        self.fleet = host_index is not None or awaiting_index
        self.host_name = host_id
        # fleet layout: device (a GPU's "gpuN", a NIC, an IB port) -> its fleet source (None: past its kind's slots)
        self._sources: dict[str, int | None] = {}
        self._fleet_names: dict[int, str] = {}  # fleet source -> "host:device"
        self._fleet_reporting = BitMap()  # the fleet sources the last sample read
        self.node = node
        self.registry = registry
        self.gpu = gpu
        if gpu is not None:  # its event buffer's drops go up the tree with the node's counters
            node.counter_sources["hardware_events_dropped"] = lambda: gpu.events_dropped
        self.nic = nic
        self.interval_s = float(interval_s)
        self.host_job = host_job(host_id)
        self.stats = SamplerStats()
        self._open: dict[tuple[str, str, int], _Bucket] = {}  # (job, metric, bucket start ms)
        self._floor_ms = 0  # no bucket may start before this one (the last one offered ended here)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on_sampled: Callable[[], None] = lambda: None  # after each sample (AgentServer: wakes its flush loop)
        self._uuids: dict[str, int] = {}
        if gpu is not None:
            for info in gpu.gpus:
                if info.uuid:
                    self._uuids[_norm_uuid(info.uuid)] = info.index
        self._gpu_indexes = {info.index for info in gpu.gpus} if gpu is not None else set()
        self._gpu_names = {info.index: f"{info.device} ({info.uuid or 'no uuid'})"
                           for info in (gpu.gpus if gpu is not None else [])}
        self._device_cache: dict[str, int | None] = {}
        self._mapped: set[tuple[str, int, int, str]] = set()  # (job, rank, pid, device) already logged
        self._nic_ids: dict[str, int] = {}
        self._nic_used: set[int] = set()
        self._ib_ids: dict[str, int] = {}

    @classmethod
    def open(cls, node: Node, registry: RankRegistry, *, host_id: str, gpu_probe: bool = True,
             nic_probe: bool = True, interval_s: float = DEFAULT_PROBE_INTERVAL_S, sysfs_root: str | Path = "/sys",
             nic_exclude: Iterable[str] = DEFAULT_NIC_EXCLUDE, nvml: Any = None, nvlink_every: int = 1,
             xid_wait_ms: int = 500, host_index: int | None = None,
             awaiting_index: bool = False) -> HardwareSampler | None:
        """Open the enabled probes; None when neither is enabled or available (the agent runs without)."""
        gpu = None
        if gpu_probe:
            # open_gpu_probe logs the one line that says why when there is no NVML, driver or GPU.
            gpu = open_gpu_probe(nvml=nvml, nvlink_every=nvlink_every, xid_wait_ms=xid_wait_ms)
        else:
            log.info("GPU probe off (--no-gpu-probe)")
        nic = NicProbe(sysfs_root, exclude=tuple(nic_exclude)) if nic_probe else None
        if gpu is None and nic is None:
            log.info("hardware sampler not started: no probe enabled or available")
            return None
        sampler = cls(node, registry, host_id=host_id, gpu=gpu, nic=nic, interval_s=interval_s,
                      host_index=host_index, awaiting_index=awaiting_index)
        log.info("hardware sampler: every %g s; GPU probe %s; NIC probe %s; host windows under job %r",
                 interval_s, f"on ({len(gpu.gpus)} GPU(s))" if gpu is not None else "off",
                 f"on ({sysfs_root})" if nic is not None else "off",
                 sampler.host_job if not sampler.fleet else f"{fleet.FLEET_JOB} as host {host_index}"
                 if host_index is not None else f"{fleet.FLEET_JOB} once the tree gave this host its index")
        return sampler

    # ------------------------------------------------------------ thread
    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="agent-hardware", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop sampling and close the probes (the GPU probe's XID thread stops within ~xid_wait_ms)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():  # e.g. an NVML call hung in the driver: leave it, it is a daemon thread
                log.warning("hardware sampler did not stop within %.1f s; probes left open", timeout)
                return
        for probe in (self.gpu, self.nic):
            if probe is not None:
                try:
                    probe.close()
                except Exception:  # closing must never take the agent's stop down
                    log.exception("closing the %s probe failed", probe.name)

    def _run(self) -> None:
        last: tuple[int, int] | None = None  # the last sample's (wall, monotonic) time
        while True:
            now_ns, mono_ns = time.time_ns(), time.monotonic_ns()
            at_ns = next_sample_after(now_ns, mono_ns, last, self.interval_s)
            if self._stop.wait(max(0.0, (at_ns - now_ns) / 1e9)):
                return
            last = (at_ns, mono_ns + at_ns - now_ns)
            try:
                # labelled with the planned time: a clock stepped during the wait, or a late wake-up, leaves the
                # reading in the second it was planned for (each sample in a later one than the last)
                self.sample_once(now_ns=at_ns, next_wall_ns=next_sample_ns(at_ns, self.interval_s))
            except Exception:  # a bug here must not stop the sampling for good
                log.exception("hardware sample failed")
            self.on_sampled()

    # ------------------------------------------------------------ one sample
    def sample_once(self, now_ns: int | None = None, next_wall_ns: int | None = None) -> int:
        """Sample every probe once and offer what is due; returns the number of readings.

        Buckets are offered as soon as no later sample can fall into them: at once when the next
        sample (at ``next_wall_ns``, default now + interval) lies in a later bucket, which is always
        the case at the default 1 s; otherwise at the first sample in a later bucket.
        """
        cpu0, wall0 = time.thread_time(), time.monotonic()
        gpu_readings: list[Reading] = self.gpu.sample() if self.gpu is not None else []
        events: list[HardwareEvent] = self.gpu.drain_events() if self.gpu is not None else []
        lost = self._lost_gpus() if self.gpu is not None else set()
        nic_readings: list[Reading] = self.nic.sample() if self.nic is not None else []
        now_ns = time.time_ns() if now_ns is None else now_ns
        if next_wall_ns is None:
            next_wall_ns = now_ns + int(self.interval_s * 1e9)
        start_ms = max(bucket_of(now_ns, WIDTH_MS), self._floor_ms)  # a wall clock stepping back stays put
        with self.node.lock:
            reporting = BitMap()
            owners = self._gpu_owners() if self.gpu is not None else {}
            for r in gpu_readings:
                self._add_gpu(owners, r.metric, r.gpu, r.value, start_ms, now_ns, reporting)
            for index in sorted(self._gpu_indexes):
                self._add_gpu(owners, "gpu.lost", index, 1.0 if index in lost else 0.0, start_ms, now_ns, reporting)
            for ev in events:
                if ev.kind == "xid" and ev.gpu is not None:
                    self._add_gpu(owners, "gpu.xid_code", ev.gpu, float(ev.code), start_ms, now_ns, reporting)
            if not self.fleet:
                for r in nic_readings:
                    self._add(self.host_job, r.metric, self._nic_source(r.device), 0, r.value, start_ms, now_ns)
            elif self.host_index is None:
                self.stats.awaiting_index += len(nic_readings)
            else:
                self._add_fleet(nic_readings, start_ms, now_ns, reporting)
            if self.host_index is not None:
                self._publish(reporting)
            self._offer_due(start_ms, next_wall_ns)
            if self.nic is not None:  # up the tree with the node's counters (the latest total wins)
                self.node.counters["probe_skipped"] = self.nic.skipped
            names = {ev.gpu: self._owner_names(owners, ev.gpu) for ev in events}
        for ev in events:
            self._log_event(ev, names.get(ev.gpu, ""))
        stats = self.stats
        stats.samples += 1
        stats.readings += len(gpu_readings) + len(nic_readings)
        stats.events += len(events)
        stats.cpu_s += time.thread_time() - cpu0
        stats.last_sample_s = time.monotonic() - wall0
        return len(gpu_readings) + len(nic_readings)

    def flush(self) -> None:
        """Offer every open bucket now (e.g. before a test reads the windows)."""
        with self.node.lock:
            self._offer_due(1 << 62, 1 << 62)

    def _add_gpu(self, owners: dict[int, list[RankInfo]], metric: str, index: int | None, value: float,
                 start_ms: int, now_ns: int, reporting: BitMap) -> None:
        ranks = owners.get(index) if index is not None else None
        if ranks:
            for info in ranks:
                self._add(info.job, metric, info.rank, info.world_size, value, start_ms, now_ns)
        elif not self.fleet:
            self._add(self.host_job, metric, index if index is not None else 0, 0, value, start_ms, now_ns)
        elif self.host_index is None:
            self.stats.awaiting_index += 1
        else:
            src = self._fleet_source(f"gpu{index if index is not None else 0}", "gpu.", index or 0)
            if src is not None:
                reporting.add(src)
                self._add(fleet.FLEET_JOB, metric, src, 0, value, start_ms, now_ns)

    def set_host_index(self, index: int) -> None:
        """The tree gave (or confirmed) this host's index (collectors/agent/host_index.py): from the next sample
        on its readings go to the fleet's windows as this index; another index than before starts its devices'
        sources afresh."""
        fleet.source(index, 0)  # raises for an index out of range
        with self.node.lock:
            if index == self.host_index:
                return
            self.host_index, self.fleet = index, True
            self._sources.clear()
            self._fleet_names.clear()
            self._fleet_reporting = BitMap()

    def _fleet_source(self, device: str, kind: str, gpu_index: int | None = None) -> int | None:
        """The fleet source of one of this host's devices, kept per device (the one cache, GPUs and NICs alike): its
        slot is its kind's next free one, in order of first sight (a GPU's: its NVML index); None (skipped,
        counted each time, logged once) past its kind's slots."""
        src = self._sources.get(device, -1)
        if src == -1:
            lo, hi = fleet.FAMILIES[kind]
            if gpu_index is not None:
                slot = lo + gpu_index if lo + gpu_index < hi else None
            else:
                used = sum(1 for s in self._sources.values() if s is not None and lo <= fleet.slot_of(s) < hi)
                slot = lo + used if lo + used < hi else None
            if slot is None:
                src = None
                log.warning("%s: no fleet slot left for %s devices (%d); its readings are skipped", device,
                            kind.rstrip("."), hi - lo)
            else:
                src = fleet.source(self.host_index or 0, slot)
                self._fleet_names[src] = f"{self.host_name}:{device}"
                log.info("%s is source %d (host %d, slot %d) of the fleet's %s* windows", device, src,
                         self.host_index, slot, kind)
            self._sources[device] = src
        if src is None:
            self.stats.no_slot += 1
        return src

    def _publish(self, reporting: BitMap) -> None:
        """The fleet's view of this host (caller holds the lock): the sources that report, their names and the
        host's claim on them; a new view object when it changed, so that the node sends the change up."""
        if reporting == self._fleet_reporting:
            return
        self._fleet_reporting = reporting
        claim = fleet.host_claim(self.host_name)
        view = RankView(alive=BitMap(reporting), hosts={src: self._fleet_names[src] for src in reporting},
                        processes=dict.fromkeys(reporting, claim))
        self.registry.pseudo[fleet.FLEET_JOB] = view
        self.registry.changed = True

    def _add(self, job: str, metric: str, source: int, expected: int, value: float, start_ms: int,
             now_ns: int) -> None:
        values = self._bucket(job, metric, expected, start_ms, now_ns).values.get(source)
        if values is None:
            self._open[(job, metric, start_ms)].values[source] = [value]
        else:
            values.append(value)

    def _bucket(self, job: str, metric: str, expected: int, start_ms: int, now_ns: int) -> _Bucket:
        ident = (job, metric, start_ms)  # a plain tuple: building a Key per reading costs more than the rest
        bucket = self._open.get(ident)
        if bucket is None:
            bucket = self._open[ident] = _Bucket(Key(job, metric, start_ms, WIDTH_MS), expected, now_ns, now_ns)
        else:
            if now_ns > bucket.last_ns:
                bucket.last_ns = now_ns
            if expected > bucket.expected:
                bucket.expected = expected
        return bucket

    def _add_fleet(self, readings: list[Reading], start_ms: int, now_ns: int, reporting: BitMap) -> None:
        """The NIC probe's readings into the fleet's buckets of second `start_ms` (caller holds the lock): a bucket
        looked up once per metric and a source once per run of one device's readings, not each per reading (a
        host's ~134 readings a second are 10 devices' 13-14 each, in ~25 metrics). A device past its kind's slots
        is skipped and counted per reading (SamplerStats.no_slot), as `_fleet_source` says."""
        sources = self._sources
        buckets: dict[str, dict[int, list[float]]] = {}
        device: str | None = None
        src: int | None = None
        for metric, value, _, dev in readings:
            if dev != device:
                device = dev
                src = sources.get(dev, -1)
                if src is None or src == -1:  # new, or past its kind's slots: _fleet_source says (and counts)
                    src = self._fleet_source(dev, "ib." if "/" in dev else "nic.")
                if src is not None:
                    reporting.add(src)
            elif src is None:
                self.stats.no_slot += 1
            if src is None:
                continue
            values = buckets.get(metric)
            if values is None:
                values = buckets[metric] = self._bucket(fleet.FLEET_JOB, metric, 0, start_ms, now_ns).values
            held = values.get(src)
            if held is None:
                values[src] = [value]
            else:
                held.append(value)

    def _offer_due(self, start_ms: int, next_wall_ns: int) -> None:
        """Offer buckets before ``start_ms``, and those the next sample (at next_wall_ns) cannot reach."""
        next_ms = next_wall_ns // 1_000_000
        for ident, bucket in list(self._open.items()):
            key = bucket.key
            end_ms = key.index + key.width_ms
            if key.index < start_ms or end_ms <= next_ms:
                del self._open[ident]
                self._floor_ms = max(self._floor_ms, end_ms)
                verdict = offer_values(self.node, key, bucket.values, bucket.expected, bucket.first_ns,
                                       bucket.last_ns)
                self.stats.offered_windows += 1
                if verdict != "accepted":
                    self.stats.not_accepted += 1
                    log.debug("hardware window %s: %s", key, verdict)

    # ------------------------------------------------------------ sources
    def _gpu_owners(self) -> dict[int, list[RankInfo]]:
        """GPU index -> the live or stuck ranks registered on this agent that use it (caller holds the lock)."""
        owners: dict[int, list[RankInfo]] = {}
        for info in self.registry.ranks.values():
            if info.verdict == "dead":
                continue
            index = self._gpu_of(info.device)
            mark = (info.job, info.rank, info.pid, info.device)
            if mark not in self._mapped:
                self._mapped.add(mark)
                if index is not None:
                    log.info("rank %d of job %r uses %s: its readings go to job %r with source %d",
                             info.rank, info.job, self._gpu_names.get(index, f"gpu{index}"), info.job, info.rank)
                else:
                    log.info("rank %d of job %r reported device %r, which names no GPU here; GPU readings stay "
                             "under %r", info.rank, info.job, info.device, self.host_job)
            if index is not None:
                owners.setdefault(index, []).append(info)
        return owners

    def _gpu_of(self, device: str) -> int | None:
        """The NVML index a rank's reported device names: by UUID, else a bare (CUDA) index."""
        if device in self._device_cache:
            return self._device_cache[device]
        text = device.strip()
        index = self._uuids.get(_norm_uuid(text)) if text else None
        if index is None:
            m = _INDEX.fullmatch(text)
            if m and int(m.group(1)) in self._gpu_indexes:
                index = int(m.group(1))
        if len(self._device_cache) < 4096:
            self._device_cache[device] = index
        return index

    def _owner_names(self, owners: dict[int, list[RankInfo]], index: int | None) -> str:
        ranks = owners.get(index) if index is not None else None
        if not ranks:
            return f"no rank on it; window job {self.host_job!r}, source {index}"
        return ", ".join(f"rank {i.rank} of job {i.job!r}" for i in ranks)

    def _lost_gpus(self) -> set[int]:
        assert self.gpu is not None
        return {index for index, fields in self.gpu.disabled_fields().items() if "*" in fields}

    def _nic_source(self, device: str) -> int:
        """ifindex for a network interface, a first-seen ordinal for an IB port (``mlx5_0/1``)."""
        if "/" in device:
            sid = self._ib_ids.get(device)
            if sid is None:
                sid = self._ib_ids[device] = len(self._ib_ids)
                log.info("IB port %s is source %d of ib.* windows in job %r", device, sid, self.host_job)
            return sid
        sid = self._nic_ids.get(device)
        if sid is None:
            sid = self._ifindex(device)
            if sid is None or sid in self._nic_used:
                sid = NIC_FALLBACK_BASE + len(self._nic_ids)
            self._nic_ids[device] = sid
            self._nic_used.add(sid)
            log.info("interface %s is source %d of nic.* windows in job %r", device, sid, self.host_job)
        return sid

    def _ifindex(self, ifname: str) -> int | None:
        assert self.nic is not None
        try:
            with open(os.path.join(str(self.nic.root), "class", "net", ifname, "ifindex"), "rb") as f:
                value = int(f.read().strip())
        except (OSError, ValueError):
            return None
        return value if 0 < value < NIC_FALLBACK_BASE else None

    # ------------------------------------------------------------ events
    def _log_event(self, ev: HardwareEvent, who: str) -> None:
        gpu = self._gpu_names.get(ev.gpu, ev.device) if ev.gpu is not None else ev.device
        if ev.kind == "xid":
            meaning = XID_DESCRIPTIONS.get(ev.code)
            log.warning("XID %d on %s of %s%s (%s)", ev.code, gpu, socket.gethostname(),
                        f": {meaning}" if meaning else "", who)
        elif ev.kind == "gpu_lost":
            log.error("%s of %s is lost: %s (%s)", gpu, socket.gethostname(), ev.detail, who)
        else:
            log.warning("hardware event %s on %s: %s (%s)", ev.kind, gpu, ev.detail, who)


def _norm_uuid(text: str) -> str:
    text = text.strip().lower()
    return text[4:] if text.startswith("gpu-") else text


def offer_exits(node: Node, registry: RankRegistry, now_ns: int | None = None) -> int:
    """Offer each newly known exit status as a ``rank.exit_status`` value of its job (source: the rank).

    The caller holds ``node.lock``. Returns how many were offered.
    """
    exits = registry.drain_exits()
    if not exits:
        return 0
    now_ns = time.time_ns() if now_ns is None else now_ns
    start_ms = bucket_of(now_ns, WIDTH_MS)
    by_job: dict[str, tuple[int, dict[int, list[float]]]] = {}
    for info, code in exits:
        world, values = by_job.setdefault(info.job, (info.world_size, {}))
        values.setdefault(info.rank, []).append(float(code))
    for job, (world, values) in by_job.items():
        offer_values(node, Key(job, "rank.exit_status", start_ms, WIDTH_MS), values, world, now_ns, now_ns)
    return len(exits)
