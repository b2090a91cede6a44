"""The fleet's hardware windows (DESIGN §12): every host's NICs, IB ports and rank-less GPUs in one window per
metric and second, merged up the tree like a job's ranks (docs/fleet.md).

A source of the pseudo-job `FLEET_JOB` is one device of one host: ``slot << HOST_BITS | host_index``. The host
index comes from a registry (``telemetry agent --host-index N``, or ``--host-registry FILE``: the host's line in
a list every agent is given), never from a hash, so two hosts never share a source by accident; two agents that
claim one index are told apart by the tree's run ledger (collectors/delivery/runs.py: each source's claim is
the host's name, and a second host naming the same source has its windows refused). A device's slot is fixed
by its kind, so that a window of one kind's metric knows which sources to wait for (`family_mask`); the slot is
the high byte, so that one slot of every host is one contiguous range of sources: the sources bitmap of a fleet
window (run-length encoded on the wire) stays a few runs, whatever the number of hosts:

* GPUs no rank uses: slot = NVML index, ``0 .. 15``;
* network interfaces: ``16 .. 63``, in name order of first sight;
* InfiniBand ports: ``64 .. 255``, in name order of first sight.

Each source's name (``host:device``) travels up with the rank states (``RankStates.hosts``), so the root can
name the worst host and port of every second from the exact top-k.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pyroaring import BitMap

from telemetry.names import FLEET_JOB

__all__ = ["FLEET_JOB", "DEFAULT_FLEET_GRACE_S", "DEFAULT_ID_FILE", "SAMPLE_PHASE", "URGENT_METRICS",
           "SLOT_BITS", "HOST_BITS", "MAX_HOST_INDEX", "FAMILIES", "source", "host_index_of", "slot_of",
           "family_of", "family_mask", "family_mask_of", "extent", "host_claim", "index_from_registry", "split_name"]

SLOT_BITS = 8
HOST_BITS = 32 - SLOT_BITS
MAX_HOST_INDEX = (1 << HOST_BITS) - 1  # sources are uint32 in a summary's bitmap
#: where in its second every host samples (collectors/agent/hardware.py next_sample_ns), and so when each host's part
#: of a fleet second is due at its rack: the tiers' cut-off counts its grace from this point (Node._fleet_cutoff_ms)
SAMPLE_PHASE = 0.7
# Where `telemetry agent` keeps its installation id (--id-file; collectors/common/host_index.py read_instance_id).
DEFAULT_ID_FILE = "/var/lib/telemetry/agent-id"
DEFAULT_FLEET_GRACE_S = 0.5  # a tier passes a fleet second on this long after its hosts sampled it (Node._fleet_passed)
#: fleet metrics whose any value above 0 is a fault: the metrics of the default critical rules of
#: collectors/detectors/hardware.py that fire on one reading (an IB link that went down, an XID, an uncorrectable ECC
#: error or row remap, a failed row remap, a GPU off the bus; tests/test_fleet.py keeps the two in step). A tier
#: passes a second of one of them on as soon as a part holding such a value is in, not at its cut-off, so that a slow
#: host elsewhere in the rack or a slow rack does not hold the fault back (its part comes after as a late delta).
#: Fixed for the transport: a site's rule overrides at the root do not change it.
URGENT_METRICS: frozenset[str] = frozenset({
    "ib.link_downed_delta", "gpu.xid_errors_delta", "gpu.ecc_uncorrected_delta",
    "gpu.remapped_rows_uncorrectable_delta", "gpu.row_remap_failure", "gpu.lost"})
#: metric prefix -> the slots of its device kind [lo, hi)
FAMILIES: dict[str, tuple[int, int]] = {"gpu.": (0, 16), "nic.": (16, 64), "ib.": (64, 256)}


def source(host_index: int, slot: int) -> int:
    if not 0 <= host_index <= MAX_HOST_INDEX:
        raise ValueError(f"host index {host_index} is outside 0..{MAX_HOST_INDEX}")
    if not 0 <= slot < 1 << SLOT_BITS:
        raise ValueError(f"device slot {slot} is outside 0..{(1 << SLOT_BITS) - 1}")
    return slot << HOST_BITS | host_index


def host_index_of(src: int) -> int:
    return src & MAX_HOST_INDEX


def slot_of(src: int) -> int:
    return src >> HOST_BITS


def family_of(metric: str) -> tuple[int, int] | None:
    for prefix, slots in FAMILIES.items():
        if metric.startswith(prefix):
            return slots
    return None


def _slots_mask(lo: int, hi: int) -> BitMap:
    mask = BitMap()
    mask.add_range(lo << HOST_BITS, hi << HOST_BITS)
    return mask


_MASKS = {slots: _slots_mask(*slots) for slots in FAMILIES.values()}  # every source of each device kind


def family_mask_of(slots: tuple[int, int]) -> BitMap:
    """Every source of the device kind of these slots (shared: not to be modified)."""
    return _MASKS[slots]


def family_mask(covered: BitMap, metric: str) -> BitMap:
    """The sources of `covered` whose device kind reports `metric` (all of them for a metric of no kind)."""
    slots = family_of(metric)
    if slots is None:
        return covered
    return covered & _MASKS[slots]


def extent(job: str, sources: BitMap) -> int:
    """What a bitmap of `job`'s sources counts against the world-size cap (DESIGN §7: no work may grow with a size
    an input declares): a rank's id implies a world of id + 1; the fleet's ids are sparse by construction
    (collectors/common/fleet.py), so there it is how many sources there are."""
    return len(sources) if job == FLEET_JOB else sources.max() + 1


def host_claim(host: str) -> int:
    """The run-ledger digest an agent claims its sources with: the host's name, so that the same host coming
    back (an agent restart) is the same claimant, and another host naming its index is not. Never 0."""
    return int.from_bytes(hashlib.blake2b(f"fleet\0{host}".encode(), digest_size=8).digest(), "little") or 1


def split_name(name: str) -> tuple[str, str]:
    """``"host:device"`` -> (host, device)."""
    host, _, device = name.partition(":")
    return host, device


def index_from_registry(path: str | Path, host: str) -> int:
    """The host's index in a registry file: one host name a line (blank lines and ``#`` comments skipped; the
    index is the position among the names, from 0). Refuses a file naming a host twice, or not naming this one:
    every agent must be given the same file."""
    names: dict[str, int] = {}
    for lineno, line in enumerate(Path(path).read_text().splitlines(), start=1):
        name = line.split("#", 1)[0].strip()
        if not name:
            continue
        if name in names:
            raise ValueError(f"{path}:{lineno}: host {name!r} is listed twice (first as index {names[name]})")
        names[name] = len(names)
    if host not in names:
        raise ValueError(f"{path} does not list this host ({host!r})")
    if names[host] > MAX_HOST_INDEX:
        raise ValueError(f"{path}: host {host!r} is number {names[host]}, past {MAX_HOST_INDEX}")
    return names[host]
