"""The fleet's hardware at O(log N), and a week of the store's lifecycle (issue 28 item 5, docs/fleet.md).

    python bench/fleet.py                      # hosts 250 and 2000 (the issue's shape), both layouts
    python bench/fleet.py --hosts 32,256       # what a small machine can run at 1 Hz
    python bench/fleet.py --quick              # a development preset

Part 1, the tree (live; --racks replayed, below, feeds the fleet layout's cluster from replayed racks instead of
live hosts and racks). Simulated hosts run the agent's real hardware path: a generated sysfs tree each
(collectors/sim/sysfs.py: 2 NICs, 8 IB ports; a TEST DOUBLE of /sys), the real NicProbe reading it, the real
HardwareSampler bucketing the readings into 1 s windows, and per host its own Node, Upstream and Outbox to its
rack collector, as in `telemetry agent` (without the rank socket: no ranks here; a process's outboxes share its
client loop, collectors/delivery/clientloop.py, as any process's do), at 1 Hz, as many hosts per process as
--hosts-per-process. 2,000 hosts need about 6 free cores (docs/fleet.md, "Where this machine stops"). Racks of --rack-size hosts (`telemetry collector` processes) feed one cluster
collector, which feeds the root (`telemetry collector` without --parent): every tier merges. Each host count runs
twice, in the fleet layout (--host-index: fleet-wide windows) and in the naive per-host layout (`_host:<host>`
pseudo-jobs), with fresh processes each time. Measured over --seconds after --warmup: the root's CPU seconds per
second and RSS (/proc), and the bytes the root received on its gRPC port (the kernel's per-socket
bytes_received, `ss -tin`), per second; and the windows the root stored per second.

--racks replayed (the fleet layout at counts this machine cannot simulate): each rack's unit of one second is made
once from its hosts' real samples (sample_racks) and re-sent every second by one process (ReplayedRacks) to the live
cluster collector and root; each run's `racks_fed` says which (docs/fleet.md, "Replayed racks"), as does the top level
and every ratio's key (fleet_replayed_ratio_2000_over_250, naive_live_over_fleet_replayed_250).

--racks mixed --live-racks K (the link down at counts this machine cannot run live): the first K racks (hosts 0 to
K x --rack-size - 1) run live as above, the other racks are replayed, all into the same live cluster collector and
root; the link-down trials pick their victims among the live racks' hosts. Each run says so: `racks_fed` "mixed"
and `feed` (live and replayed racks and hosts), the table's "mixed K+R", the ratio keys
(fleet_mixed_2_live_racks_ratio_2000_over_250). Only the live racks have late hosts (docs/fleet.md, "Mixed racks").

Part 2, link downs. In the fleet layout at the largest host count, one IB port of one host goes down (its
`state` and its `link_downed` counter, as a kernel reports it); the time until the root's API serves a
hardware event naming that host and port. --link-trials times (default 5), each on another host and rack, at a
seeded point of the second: the worst trial is the one to hold to the issue's 2 s. Each trial says where its time
went, from the victim's own first sample after the write (recorded by its simulator process, SampleTimes): the
wait for it, its phase in the second, and from it to the root storing its second and to the event.

Part 3, a week of retention (no processes): a root store fed a simulated week of fleet windows (one 1 s window
of each metric every --week-step seconds of simulated time, --week-sources sources each) and step windows, swept
by the real Retention every 10 simulated minutes. Its retention is NOT the default (--week-retention, WEEK_RETENTION:
minutes 1d, hours 2d, steps 1d, step blocks 2d; seconds and events default): at the defaults hours and step blocks
are kept 400 days, so a week would show only their growth; shortened, every kind reaches its bound by day 3 and
days 4-7 show the file at it. Reported: the bound (the most rows of each kind the retention keeps at this write
rate, week_rows_kept, times the bytes a row of that kind measured in the file plus ROW_OVERHEAD, on top of the
empty file; also at the default retention), the file's size per day against it, and every minute and hour rollup
kept compared, field by field, with the raw readings it came from (count, sum, min/argmin, max/argmax, top-k,
bottom-k, sources).
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collectors.common.fleet import FLEET_JOB, source
from collectors.sim.procs import Proc, free_port, python_module, stop_process
from collectors.sim.sysfs import set_ib, write_host
from harness import BenchError, apply_quick, failure, parser, run_in_workdir, write_result
from procstat import cpu_seconds, status_kb

NAME = "fleet"
QUICK = {"hosts": "16,64", "seconds": 10.0, "warmup": 8.0, "week_step": 60}
NICS, HCAS = 2, 8
IB_METRIC = "ib.symbol_error_delta"


# ============================================================== the simulated hosts (a child process)

def simulate(argv: list[str]) -> None:
    """`fleet.py --sim FIRST COUNT LAYOUT SYSFS RACKS_JSON RACK_SIZE COUNTER`: COUNT hosts from index FIRST; the host
    samples done so far written to the file COUNTER after each round."""
    from collectors.agent.hardware import HardwareSampler, next_sample_ns
    from collectors.agent.host_index import HostIndexRegistration
    from collectors.agent.ranks import RankRegistry
    from collectors.common.gctune import tune_gc
    from collectors.common.lifetime import die_with_parent
    from collectors.delivery.node import Node, Upstream
    from collectors.delivery.outbox import Outbox
    from collectors.delivery.windows import Deadlines
    from collectors.probes import NicProbe

    die_with_parent()
    tune_gc()  # as `telemetry agent` does (collectors/common/gctune.py)
    first, count, layout, sysfs, racks_json, rack_size, counter = argv
    done = [0]
    times = SampleTimes(sample_times_path(Path(counter)), int(count), create=True)
    rounds = open(rounds_path(Path(counter)), "a", buffering=1)  # open for the process's life
    first, count, rack_size = int(first), int(count), int(rack_size)
    racks = json.loads(racks_json)
    hosts = []
    for i in range(first, first + count):
        node_id = f"agent-host-{i:05d}"
        node = Node(node_id, Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None, retain_s=30.0)
        node.complete = lambda win: True
        parent = racks[i // rack_size]
        upstream = Upstream(node, lambda on_ack, node_id=node_id, parent=parent: Outbox(node_id, [parent], None,
                                                                                          on_ack))
        node.sink = upstream
        registry = RankRegistry()
        tree = layout == "fleet:tree"  # the index handed out by the tree (--host-index auto), not i
        sampler = HardwareSampler(node, registry, host_id=f"host-{i:05d}", nic=NicProbe(Path(sysfs) / f"h{i}"),
                                  host_index=i if layout == "fleet" else None, awaiting_index=tree)
        hosts.append((node, upstream, registry, sampler))
        upstream.outbox.start()
        if tree:
            HostIndexRegistration([parent], None, f"host-{i:05d}", f"sim-machine-{i:05d}", None,
                                  sampler.set_host_index).start()
    stop = threading.Event()

    def sample_loop() -> None:
        # As HardwareSampler._run: every host's sample of a second done by the point of it a real agent samples
        # at. A real host takes ~1 ms to sample itself; here one thread samples COUNT hosts in turn, so the round
        # starts as long before that point as the last round took (at most 0.5 s), not after it, where its last
        # hosts would sample into the next second on a loaded machine.
        round_ns, last_ns = 0, 0
        while not stop.is_set():
            # never the phase point just sampled again (a round shorter than the one before would end before it)
            at_ns = max(next_sample_ns(time.time_ns() + round_ns, 1.0), next_sample_ns(last_ns, 1.0))
            last_ns = at_ns
            time.sleep(max(0.0, (at_ns - min(round_ns, 500_000_000) - time.time_ns()) / 1e9))
            started_ns = time.time_ns()
            for h, (node, _, registry, sampler) in enumerate(hosts):
                times.record(h, time.time_ns())  # before its probe reads the tree: a write before this is read
                sampler.sample_once(next_wall_ns=at_ns + 1_000_000_000)
                if registry.changed:
                    with node.lock:
                        node.own_ranks = registry.views()
                        registry.changed = False
                node.flush()  # as a real agent's flush loop, woken by the sample (AgentServer): nothing else is due
                done[0] += 1
            with open(f"{counter}.tmp", "w") as out:  # host samples done, for CPU per host sample (run_tree)
                out.write(str(done[0]))
            os.replace(f"{counter}.tmp", counter)
            ended_ns = time.time_ns()
            rounds.write(f"{at_ns} {started_ns} {ended_ns}\n")  # when the round ran against its phase point
            round_ns = ended_ns - started_ns

    threading.Thread(target=sample_loop, daemon=True).start()
    print(json.dumps({"ready": True, "role": "hosts", "hosts": count}), flush=True)
    try:
        while True:  # until SIGTERM (the bench), or the bench's death (PDEATHSIG, armed above)
            time.sleep(3600)
    finally:
        stop.set()


SAMPLE_SLOTS = 4  # a host's last samples kept: a trial that polls late (a loaded bench) still finds its sample


class SampleTimes:
    """When each host of a simulator process began its last SAMPLE_SLOTS samples (wall ns), in a file the process
    maps: a link-down trial reads when its victim really sampled after the write (_one_link_down). The simulator
    starts a round of its hosts as long before the phase point (SAMPLE_PHASE, 0.7 s) as the last round took, so a
    host samples anywhere from 0.2 to 0.7 s into the second, not at 0.7: a wait computed from the phase point was
    wrong by up to 0.5 s (sample_to_named_s came out negative once the urgent pass named a fault within 0.1-0.3 s)."""

    def __init__(self, path: Path, hosts: int, create: bool = False) -> None:
        import mmap

        self.path = path
        if create:
            with open(path, "wb") as out:
                out.truncate(hosts * SAMPLE_SLOTS * 8)
            with open(path, "r+b") as f:
                self._map: Any = mmap.mmap(f.fileno(), hosts * SAMPLE_SLOTS * 8)
            self._next = [0] * hosts

    def record(self, host: int, at_ns: int) -> None:
        import struct

        struct.pack_into("<q", self._map, (host * SAMPLE_SLOTS + self._next[host]) * 8, at_ns)
        self._next[host] = (self._next[host] + 1) % SAMPLE_SLOTS

    def of(self, host: int) -> list[int]:
        """The host's last sample starts, in no order (0: a slot not used yet)."""
        import struct

        with open(self.path, "rb") as f:
            return list(struct.unpack("<" + "q" * SAMPLE_SLOTS, os.pread(f.fileno(), SAMPLE_SLOTS * 8,
                                                                          host * SAMPLE_SLOTS * 8)))


def sample_times_path(counter: Path) -> Path:
    return counter.with_suffix(".times")


def rounds_path(counter: Path) -> Path:
    return counter.with_suffix(".rounds")


# ============================================================== replayed racks (--racks replayed)

def sample_racks(sysfs: Path, hosts: int, rack_size: int, path: Path | None = None,
                 first_host: int = 0) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """--racks replayed and mixed: what each rack of hosts `first_host`..`hosts`-1 (a multiple of `rack_size`: the
    racks before it run live in --racks mixed) would send its parent for one second, from the real hardware path.

    Per host, as bench/fleet_wire.py: its generated sysfs tree read by the real NicProbe and HardwareSampler twice
    (1 s apart: counters have deltas) into a real Node, its sealed windows of the second taken as `Upstream.ship`
    takes them; per rack of `rack_size`, each metric's window is the native merge of its hosts' parts
    (`Summary.merge_all`, as a rack merges), and its rank states of `_fleet` the union of its hosts' (sources,
    names, claims), its `name` the rack's as a live rack's (`rack<R>`, R counted from host 0). Written to `path`
    (pickle) for the replaying process; returns the racks and what it took."""
    import pickle

    from collectors.agent.hardware import HardwareSampler
    from collectors.agent.ranks import RankRegistry
    from collectors.delivery.node import Node
    from collectors.delivery.windows import Deadlines
    from collectors.probes import NicProbe
    from fleet_wire import Capture
    from telemetry import Summary

    started = time.monotonic()
    t0 = (time.time_ns() // 1_000_000_000 - 10) * 1_000_000_000 + 700_000_000
    second_ms = t0 // 1_000_000 // 1000 * 1000 + 1000
    racks: list[dict[str, Any]] = []
    if first_host % rack_size:
        raise ValueError(f"replayed racks start at a rack's first host, not host {first_host} (racks of {rack_size})")
    for first in range(first_host, hosts, rack_size):
        metrics: dict[str, list[Any]] = {}
        alive: set[int] = set()
        names: dict[int, str] = {}
        claims: dict[int, int] = {}
        for i in range(first, min(hosts, first + rack_size)):
            sink = Capture()
            node = Node(f"agent-host-{i:05d}", Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None, sink=sink)
            node.complete = lambda win: True
            registry = RankRegistry()
            probe = NicProbe(sysfs / f"h{i}")
            sampler = HardwareSampler(node, registry, host_id=f"host-{i:05d}", nic=probe, host_index=i)
            for second in (0, 1):
                at = t0 + second * 1_000_000_000
                sampler.sample_once(now_ns=at, next_wall_ns=at + 1_000_000_000)
                node.flush()
            probe.close()
            for key, summary in sink.parts.items():
                if key.index == second_ms:
                    metrics.setdefault(key.metric, []).append(summary)
            view = registry.views()[FLEET_JOB]
            alive.update(view.alive)
            names.update(view.hosts)
            claims.update(view.processes)
        racks.append({"name": f"rack{first // rack_size}",
                      "windows": {metric: Summary.merge_all(parts).to_bytes() for metric, parts in metrics.items()},
                      "alive": sorted(alive), "hosts": names, "processes": claims})
        print(f"replayed racks: sampled hosts {first_host}..{min(hosts, first + rack_size) - 1} of {hosts} "
              f"({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    if path is not None:
        with open(path, "wb") as out:
            pickle.dump(racks, out)
    return racks, {"racks": len(racks), "hosts": hosts - first_host, "windows_per_rack": len(racks[0]["windows"]) if racks else 0,
                   "sampled_in_s": round(time.monotonic() - started, 1)}


def next_second(now_ns: int, last_ns: int) -> tuple[int, int]:
    """The sampling point of the next second to send after one sent at `last_ns` (0: none yet), and how many seconds
    between them were skipped: each second once, never one twice, and a round that ran past a second's point skips
    it (counted: a replayer or simulator that skips seconds feeds the root less than it claims)."""
    from collectors.agent.hardware import next_sample_ns

    after_last = next_sample_ns(last_ns, 1.0)
    at_ns = max(next_sample_ns(now_ns, 1.0), after_last)
    return at_ns, (at_ns - after_last) // 1_000_000_000 if last_ns else 0


class ReplayedRacks:
    """Each rack of `racks` (sample_racks) as a real Node, Upstream and Outbox to the cluster collector, as a rack's
    own; every second, at the point of it the hosts sample at, the rack's windows offered to its node under that
    second's key and flushed: the cluster receives from each rack what a live rack of those hosts sends, with the
    same values every second. With a `counter` file, it logs each second's phase point and when its racks' units
    were handed to their outboxes (`<counter>.rounds`, rounds_path), as the simulator logs its rounds."""

    def __init__(self, racks: list[dict[str, Any]], cluster: str, counter: str | None = None) -> None:
        from pyroaring import BitMap

        from collectors.delivery.node import Node, RankView, Upstream
        from collectors.delivery.outbox import Outbox
        from collectors.delivery.windows import Deadlines

        self.nodes = []
        for rack in racks:
            node_id = rack["name"]
            node = Node(node_id, Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None, retain_s=30.0)
            node.complete = lambda win: True
            upstream = Upstream(node, lambda on_ack, node_id=node_id: Outbox(node_id, [cluster], None, on_ack))
            node.sink = upstream
            with node.lock:
                node.own_ranks = {FLEET_JOB: RankView(alive=BitMap(rack["alive"]), hosts=dict(rack["hosts"]),
                                                      processes=dict(rack["processes"]))}
            self.nodes.append((node, upstream, rack["windows"]))
        # seconds sent, and seconds skipped because a round ran past the next second's sampling point (the root
        # then gets less work per wall second: its CPU looks lower while every stored row is whole)
        self.sent = self.skipped = 0
        self._counter = counter
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> ReplayedRacks:
        for _, upstream, _ in self.nodes:
            upstream.outbox.start()
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        for _, upstream, _ in self.nodes:
            upstream.outbox.close()

    def _run(self) -> None:
        from pyroaring import BitMap

        from collectors.common.keys import Key
        from collectors.delivery.windows import Part
        from telemetry import Summary

        rounds = open(rounds_path(Path(self._counter)), "a", buffering=1) if self._counter else None
        last_ns = 0
        while True:
            at_ns, skipped = next_second(time.time_ns(), last_ns)
            last_ns = at_ns
            self.skipped += skipped
            if self._stop.wait(max(0.0, (at_ns - time.time_ns()) / 1e9)):
                return
            second_ms = at_ns // 1_000_000 // 1000 * 1000  # the second a host's sample at at_ns goes into
            for node, _, windows in self.nodes:
                with node.lock:
                    for metric, blob in windows.items():
                        summary = Summary.from_bytes(blob)
                        node.offer(Part(Key(FLEET_JOB, metric, second_ms, 1000), [], BitMap(summary.sources),
                                        built=summary), 0)
            for node, _, _ in self.nodes:
                node.flush()
            if rounds is not None:  # the second's phase point, and when every rack's unit of it was on its way
                rounds.write(f"{at_ns} {at_ns} {time.time_ns()}\n")
            self.sent += 1
            if self._counter is not None:  # seconds sent and skipped, for run_tree's replayed_seconds_per_s
                with open(f"{self._counter}.tmp", "w") as out:
                    out.write(f"{self.sent} {self.skipped}")
                os.replace(f"{self._counter}.tmp", self._counter)


def replay(argv: list[str]) -> None:
    """`fleet.py --replay RACKS_PICKLE CLUSTER COUNTER`: ReplayedRacks of the pickle (sample_racks) to the cluster
    collector at CLUSTER, until SIGTERM, writing the seconds it sent and skipped to COUNTER after each."""
    import pickle

    from collectors.common.gctune import tune_gc
    from collectors.common.lifetime import die_with_parent

    die_with_parent()
    tune_gc()
    path, cluster, counter = argv
    with open(path, "rb") as src:
        racks = pickle.load(src)
    ReplayedRacks(racks, cluster, counter).start()
    print(json.dumps({"ready": True, "role": "replayed racks", "racks": len(racks)}), flush=True)
    while True:  # until SIGTERM (the bench), or the bench's death (PDEATHSIG, armed above)
        time.sleep(3600)


# ============================================================== part 1 and 2: the tree

def _bytes_in(port: int) -> int:
    """Bytes the root's gRPC port received, over every connection to it (`ss -tin`: the kernel's per-socket
    bytes_received; its only child is the cluster collector)."""
    out = subprocess.run(["ss", "-tinH", "state", "established", f"( sport = :{port} )"], capture_output=True,
                         text=True, timeout=10, check=True).stdout
    return sum(int(m) for m in re.findall(r"bytes_received:(\d+)", out))


def _host_samples(where: Path) -> int:
    """Host samples the simulator processes have done so far (each writes its count after each round)."""
    return sum(int(path.read_text() or 0) for path in where.glob("hosts*.samples"))


def _replayed_seconds(where: Path) -> tuple[int, int]:
    """Seconds the replayed racks sent and skipped so far (ReplayedRacks writes both after each second)."""
    path = where / "replayed.seconds"
    if not path.exists():
        return 0, 0
    sent, skipped = path.read_text().split()
    return int(sent), int(skipped)


def _get(api: str, path: str) -> Any:
    with urllib.request.urlopen(f"http://{api}{path}", timeout=5) as reply:
        return json.load(reply)


def _late(api: str) -> float:
    """Late deltas in the tree (`telemetry_delivery_late_total` on the root's /metrics: parts that reached a tier
    after it had sealed their window, forwarded or merged as deltas)."""
    with urllib.request.urlopen(f"http://{api}/metrics", timeout=5) as reply:
        for line in reply.read().decode().splitlines():
            if line.startswith("telemetry_delivery_late_total "):
                return float(line.split()[1])
    return 0.0


def _stored(db: Path) -> int:
    import sqlite3
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        return conn.execute("SELECT count(*) FROM windows").fetchone()[0]


# the root's rows of each layout's hosts: the fleet's windows, or the naive layout's `_host:<host>` pseudo-jobs
_JOBS = {"fleet": "job='_fleet'", "naive": "job LIKE '\\_host:%' ESCAPE '\\'"}


def _coverage(db: Path, layout: str, hosts: int, since_ns: int, until_ns: int) -> float | None:
    """How much of what the hosts should have sent at 1 Hz reached the root's store, 0..1: the sources of every
    `ib.port_active` window of a second starting in [since_ns, until_ns), over hosts x HCAS x those seconds (the
    fleet's window of a second holds HCAS sources of every host; the naive layout stores one window of HCAS sources
    per host per second). A second that never reached the root (a starved simulator or replayer skipped it, a tier
    dropped it) counts as nothing: the mean sources per stored row would call a store holding every other second
    whole. Below 1: the hosts or the tiers could not keep up (starved), so the run's figures are a floor."""
    import sqlite3
    first_ms, end_ms = -(-since_ns // 1_000_000_000) * 1000, -(-until_ns // 1_000_000_000) * 1000
    seconds = (end_ms - first_ms) // 1000
    if seconds <= 0:
        return None
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        found = conn.execute(f"SELECT sum(sources) FROM windows WHERE {_JOBS[layout]} AND metric='ib.port_active' "
                             "AND width_ms=1000 AND idx >= ? AND idx < ?", (first_ms, end_ms)).fetchone()
    return round((found[0] or 0) / (hosts * HCAS * seconds), 3)


def _last_second_stored(db: Path, layout: str, until_ns: int, timeout: float) -> None:
    """Waits (at most `timeout`) until the root stored a window of the last second starting before `until_ns`: a
    second is stored after it ends and each tier's deadline passed, so coverage read at once would miss the last
    one or two of a stretch that had them all. A starved tree that never stores it costs the timeout."""
    import sqlite3
    last_ms = (until_ns - 1) // 1_000_000_000 * 1000
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
            found = conn.execute(f"SELECT max(idx) FROM windows WHERE {_JOBS[layout]} AND metric='ib.port_active' "
                                 "AND width_ms=1000").fetchone()
        if found[0] is not None and found[0] >= last_ms:
            return
        time.sleep(0.2)


def feed(hosts: int, layout: str, args: argparse.Namespace) -> dict[str, Any]:
    """How a run's racks are fed: `racks_fed` live (every rack live), replayed (none) or mixed (the first
    --live-racks racks live, the rest replayed: a naive run is always live), and how many racks and hosts of each;
    `label`, what the run's JSON, the table and the ratio keys call it, so that a mixed run is never read as a live
    one of its host count."""
    racks = -(-hosts // args.rack_size)
    fed = args.racks if layout == "fleet" else "live"
    live_racks = {"live": racks, "replayed": 0}.get(fed, args.live_racks)  # mixed: checked by check_mixed
    live_hosts = min(hosts, live_racks * args.rack_size)
    label = f"mixed_{live_racks}_live_racks" if fed == "mixed" else fed
    return {"racks_fed": fed, "label": label, "live_racks": live_racks, "live_hosts": live_hosts,
            "replayed_racks": racks - live_racks, "replayed_hosts": hosts - live_hosts}


def _phases(where: Path, pattern: str, since_ns: int, until_ns: int) -> dict[str, Any] | None:
    """The rounds logged by the simulator processes or the replayer (rounds_path: `at_ns started_ns ended_ns` a
    second) whose phase point fell in [since_ns, until_ns): when each round began and ended, in seconds into its
    second (the phase point is at SAMPLE_PHASE, 0.7): when the hosts sampled and their parts, or the replayed
    racks' units, were on their way up. None without such rounds."""
    started, ended = [], []
    for path in where.glob(pattern):
        for line in path.read_text().splitlines():
            at_ns, start_ns, end_ns = (int(x) for x in line.split())
            if since_ns <= at_ns < until_ns:
                second_ns = at_ns - at_ns % 1_000_000_000
                started.append((start_ns - second_ns) / 1e9)
                ended.append((end_ns - second_ns) / 1e9)
    if not started:
        return None
    started.sort()
    ended.sort()
    return {"rounds": len(started), "started_min": round(started[0], 3),
            "started_median": round(started[len(started) // 2], 3),
            "ended_median": round(ended[len(ended) // 2], 3), "ended_max": round(ended[-1], 3)}


def run_tree(work: Path, hosts: int, layout: str, args: argparse.Namespace, link_down: bool) -> dict[str, Any]:
    where = work / f"{layout}-{hosts}"
    where.mkdir(parents=True)
    procs: list[Proc] = []
    try:
        api_port = free_port()
        db = where / "root.db"
        root = Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", "127.0.0.1:0",
                                          "--db", str(db), "--api", f"127.0.0.1:{api_port}"), where).start()
        procs.append(root)
        cluster = Proc("cluster", python_module("collectors.cli", "collector", "--id", "cluster", "--listen",
                                                "127.0.0.1:0", "--parent", root.ready["address"]), where).start()
        procs.append(cluster)
        racks: list[str] = []
        sysfs: Path = args.sysfs
        fed = feed(hosts, layout, args)
        live_hosts = fed["live_hosts"]
        if fed["replayed_racks"]:  # the racks' units of one second, sampled from the hosts' trees, re-sent every second
            _, sampled = sample_racks(sysfs, hosts, args.rack_size, where / "racks.pickle", first_host=live_hosts)
            replayer = Proc("replayed-racks", [sys.executable, __file__, "--replay", str(where / "racks.pickle"),
                                               cluster.ready["address"], str(where / "replayed.seconds")],
                            where).start(timeout=300)
            procs.append(replayer)
        for r in range(fed["live_racks"]):
            rack = Proc(f"rack{r}", python_module("collectors.cli", "collector", "--id", f"rack{r}", "--listen",
                                                  "127.0.0.1:0", "--parent", cluster.ready["address"]), where).start()
            procs.append(rack)
            racks.append(rack.ready["address"])
        for start in range(0, live_hosts, args.hosts_per_process):
            count = min(args.hosts_per_process, live_hosts - start)
            sim_layout = "fleet:tree" if layout == "fleet" and args.indexes == "tree" else layout
            sim = Proc(f"hosts{start}", [sys.executable, __file__, "--sim", str(start), str(count), sim_layout,
                                         str(sysfs), json.dumps(racks), str(args.rack_size),
                                         str(where / f"hosts{start}.samples")], where).start(timeout=300)
            procs.append(sim)
        api = f"127.0.0.1:{api_port}"
        registered: dict[str, Any] = {}
        if layout == "fleet" and args.indexes == "tree":
            registered = _registered(api, hosts, time.monotonic(), args.warmup * 4)
        time.sleep(args.warmup)
        pid, port = root.popen.pid, int(root.ready["address"].rsplit(":", 1)[1])
        tiers = {p.name: p.popen.pid for p in procs if p.name != "root"}
        tiers0 = {name: cpu_seconds(tpid) for name, tpid in tiers.items()}
        samples0, replayed0 = _host_samples(where), _replayed_seconds(where)
        late0 = _late(api)
        cpu0, bytes0, stored0, t0 = cpu_seconds(pid), _bytes_in(port), _stored(db), time.monotonic()
        wall0 = time.time_ns()
        time.sleep(args.seconds)
        cpu1, bytes1, stored1, t1 = cpu_seconds(pid), _bytes_in(port), _stored(db), time.monotonic()
        wall = t1 - t0
        tiers1 = {name: cpu_seconds(tpid) for name, tpid in tiers.items()}
        samples = _host_samples(where) - samples0
        replayed1 = _replayed_seconds(where)
        until_ns = time.time_ns()
        _last_second_stored(db, layout, until_ns, timeout=10.0)
        late1 = _late(api)

        def tier_cpu(prefix: str) -> float:
            return round(sum(tiers1[n] - tiers0[n] for n in tiers if n.startswith(prefix)) / wall, 3)
        from collectors.root.retention import store_bytes
        result: dict[str, Any] = {
            "hosts": hosts, "layout": layout, "racks": fed["live_racks"] + fed["replayed_racks"],
            "seconds": round(wall, 1),
            # live: every host runs the agent's hardware path at 1 Hz in the simulator's processes, its rack a
            # `telemetry collector`; replayed: each rack's unit of one second, made once from the hosts' real
            # samples (sample_racks), re-sent every second by one process; mixed: the first --live-racks racks
            # live, the rest replayed (`feed`: how many of each); the cluster and the root are live
            "racks_fed": fed["racks_fed"],
            "root_cpu_per_s": round((cpu1 - cpu0) / wall, 4),
            "root_rss_mb": round(status_kb(pid, "VmRSS") / 1024, 1),
            "root_bytes_in_per_s": round((bytes1 - bytes0) / wall),
            "root_windows_stored_per_s": round((stored1 - stored0) / wall, 1),
            # bytes in per window stored: the root's input per second is one unit a second, and a measured stretch
            # takes in one unit more or fewer than its seconds (~7 % of 15 s) as it starts and ends; per window
            # stored that edge cancels (docs/fleet.md, "What grows with hosts")
            "root_bytes_in_per_window": round((bytes1 - bytes0) / max(1, stored1 - stored0)),
            "store_bytes_per_window": round(store_bytes(db) / max(1, stored1)),
            "sim_cpu_per_s": tier_cpu("hosts"), "racks_cpu_per_s": tier_cpu("rack"),
            "replay_cpu_per_s": tier_cpu("replayed"),
            # what a simulated host costs per second it sampled (all its work: sample, offer, flush, outbox), however
            # many seconds a starved simulator skipped; and the share of host-seconds it sampled at all
            "sim_cpu_ms_per_host_sample": round(1000 * wall * tier_cpu("hosts") / samples, 3) if samples else None,
            "host_samples_per_host_second": round(samples / (live_hosts * wall), 3) if live_hosts else None,
            "cluster_cpu_per_s": tier_cpu("cluster"),
            # what reached the root of what the hosts should send at 1 Hz (1.0: nothing starved)
            "coverage": _coverage(db, layout, hosts, wall0, until_ns),
            # parts that reached a tier after it sealed their window (hosts or tiers behind their second)
            "late_per_s": round((late1 - late0) / wall, 2),
            "load_average": round(os.getloadavg()[0], 1),
        }
        if registered:
            result["host_indexes"] = registered
        if fed["racks_fed"] == "mixed":
            result["feed"] = {k: fed[k] for k in ("label", "live_racks", "live_hosts", "replayed_racks",
                                                  "replayed_hosts")}
        # when, in its second, the live hosts sampled and sent, and the replayer sent its racks' units
        result["live_rounds_phase_s"] = _phases(where, "hosts*.rounds", wall0, until_ns)
        result["replayed_rounds_phase_s"] = _phases(where, "replayed.rounds", wall0, until_ns)
        if fed["replayed_racks"]:
            result["replayed_racks"] = sampled
            # seconds the replayer sent per wall second (1.0: every second), and the seconds it skipped
            result["replayed_seconds_per_s"] = round((replayed1[0] - replayed0[0]) / wall, 3)
            result["replayed_seconds_skipped"] = replayed1[1] - replayed0[1]
        if link_down and live_hosts:  # a replayed rack re-sends the second it sampled: no sysfs write reaches it
            result["link_down"] = _link_down(api, db, sysfs, hosts, live_hosts, where, args)
        return result
    finally:
        for proc in reversed(procs):
            stop_process(proc.popen)


def _registered(api: str, hosts: int, started: float, timeout: float) -> dict[str, Any]:
    """--indexes tree: until the root has handed every host its index (docs/fleet.md "Host indexes"): how long
    that took from the last host process's start, and whether the indexes are distinct and 0..hosts-1."""
    table: list[dict[str, Any]] = []
    while time.monotonic() - started < timeout:
        table = _get(api, "/api/v1/hosts")["host_indexes"]
        if len(table) >= hosts:
            break
        time.sleep(0.2)
    indexes = sorted(held["index"] for held in table)
    return {"registered": len(table), "all_after_s": round(time.monotonic() - started, 2) if len(table) >= hosts
            else None, "distinct": len(set(indexes)) == len(indexes), "dense": indexes == list(range(len(indexes)))}


def _link_down(api: str, db: Path, sysfs: Path, hosts: int, live_hosts: int, where: Path,
               args: argparse.Namespace) -> dict[str, Any]:
    """--link-trials ports going down, one after another, each on another host (and another rack while racks last)
    of the live racks (hosts 0..`live_hosts`-1: all of them but in --racks mixed) and at another point of the second
    (a seeded pause of 1-2 s before each write): the time until the root's API serves an event naming that host and
    port, per trial. One trial is one draw of where in the sampler's second the write falls (the wait is about 1 s
    longer when it lands just after the host's sample), so the bound is read on the worst."""
    rng = random.Random(f"link-down/{hosts}")
    trials = []
    for victim in link_victims(live_hosts, args.rack_size, args.link_trials, rng):
        time.sleep(1.0 + rng.random())
        start = victim - victim % args.hosts_per_process  # the simulator process of the victim (run_tree)
        times = SampleTimes(sample_times_path(where / f"hosts{start}.samples"), 0)
        trials.append(_one_link_down(api, db, sysfs, victim, "mlx5_5", args.link_timeout, hosts,
                                     lambda times=times, host=victim - start: times.of(host)))
    named = sorted(t["named_after_s"] for t in trials if t["named_after_s"] is not None)
    return {"trials": trials, "named": len(named),
            "named_after_s_max": max(named) if len(named) == len(trials) else None,
            "named_after_s_median": named[len(named) // 2] if named else None,
            "within_2s": sum(t <= 2.0 for t in named)}


def link_victims(hosts: int, rack_size: int, trials: int, rng: random.Random) -> list[int]:
    """`trials` distinct hosts, one from each of as many different racks (of `rack_size` consecutive hosts) as
    there are, drawn with `rng`: a host named twice would match its first trial's event at once (a false pass)."""
    if not 1 <= trials <= hosts:
        raise ValueError(f"--link-trials must be 1..{hosts} (the hosts), got {trials}")
    racks = [list(range(start, min(start + rack_size, hosts))) for start in range(0, hosts, rack_size)]
    rng.shuffle(racks)
    chosen: list[int] = []
    while len(chosen) < trials:  # a round takes one new host from each rack that has one left
        for rack in racks:
            left = [h for h in rack if h not in chosen]
            if left and len(chosen) < trials:
                chosen.append(rng.choice(left))
    return chosen


def first_sample_after(samples: list[int], written_ns: int, limit_s: float) -> int | None:
    """The victim's first sample that began after the write (its probe read the port down), of its recorded sample
    starts (SampleTimes); None while there is none. A start past `limit_s` after the write is no such sample (a
    slot read while being written)."""
    after = [t for t in samples if written_ns <= t <= written_ns + limit_s * 1e9]
    return min(after) if after else None


def _one_link_down(api: str, db: Path, sysfs: Path, victim: int, hca: str, timeout: float, hosts: int,
                   samples: Callable[[], list[int]] | None = None) -> dict[str, Any]:
    """One port down on `victim` (as its kernel reports it), until the root's API serves a new event naming it.
    Where the time went, with `samples` (the victim's recorded sample starts, SampleTimes): the wait for the host's
    first sample after the write, and from that sample to the root storing its second and to the event."""
    host, device = f"host-{victim:05d}", f"{hca}/1"
    try:  # the events already served: only one raised after this write counts
        before = {e.get("id") for e in _get(api, "/api/v1/jobs/_fleet/events?kind=hardware")["events"]}
    except OSError:
        before = set()
    written_ns = time.time_ns()
    set_ib(sysfs / f"h{victim}", hca, 1, active=False, link_downed=1)
    written_ns = time.time_ns()  # written by now: a sample that began after this read the port down
    started = time.monotonic()
    sampled_ns: int | None = None  # when the victim's first sample after the write began (measured, not assumed)
    stored: tuple[float, int] | None = None  # when the root first stored the sampled second, with how many sources
    found = None
    while time.monotonic() - started < timeout:
        if sampled_ns is None and samples is not None:
            sampled_ns = first_sample_after(samples(), written_ns, timeout)
        try:
            events = [e for e in _get(api, "/api/v1/jobs/_fleet/events?kind=hardware")["events"]
                      if e.get("id") not in before]
        except OSError:
            events = []
        if stored is None and sampled_ns is not None:
            sources = _second_sources(db, sampled_ns // 1_000_000_000 * 1000)
            if sources is not None:
                stored = (time.monotonic() - started, sources)
        named = [e for e in events if e["detail"].get("host") == host and e["detail"].get("device") == device]
        if named:
            found = named[0]
            break
        time.sleep(0.02)
    after_s = time.monotonic() - started
    if sampled_ns is None and samples is not None:  # named before the loop saw the sample
        sampled_ns = first_sample_after(samples(), written_ns, timeout)
    set_ib(sysfs / f"h{victim}", hca, 1, active=True)
    if found is None:
        return {"host": host, "device": device, "named_after_s": None}
    wait_s = (sampled_ns - written_ns) / 1e9 if sampled_ns is not None else None
    return {"host": host, "device": device, "named_after_s": round(after_s, 2),
            "written_at_phase_s": round(written_ns % 1_000_000_000 / 1e9, 3),
            # the victim's sample after the write: its phase in the second (the simulator starts a round of hosts
            # before SAMPLE_PHASE, SampleTimes), the wait for it, and from it to the event
            "sampled_at_phase_s": round(sampled_ns % 1_000_000_000 / 1e9, 3) if sampled_ns is not None else None,
            "wait_for_sample_s": round(wait_s, 3) if wait_s is not None else None,
            "sample_to_named_s": round(after_s - wait_s, 3) if wait_s is not None else None,
            # the sampled second at the root: when first stored after its sample, and whether whole then (a tier
            # passed it on at its cut-off without a late host: fewer sources than hosts x ports)
            "sample_to_stored_s": round(stored[0] - wait_s, 3) if stored and wait_s is not None else None,
            "stored_whole": stored[1] == hosts * HCAS if stored else None,
            "rule": found["detail"].get("rule"), "event_summary": found["detail"].get("summary")}


# ============================================================== part 3: a week of retention

def _second_sources(db: Path, second_ms: int) -> int | None:
    """The sources of the root's stored `ib.link_downed_delta` window of the fleet's second `second_ms`, None before
    it is stored."""
    import sqlite3
    with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)) as conn:
        found = conn.execute("SELECT sources FROM windows WHERE job='_fleet' AND metric='ib.link_downed_delta' "
                             "AND width_ms=1000 AND idx=?", (second_ms,)).fetchone()
    return None if found is None else int(found[0])


def _readings(metric: str, second: int, sources: int) -> list[tuple[float, int]]:
    rng = random.Random(f"{metric}/{second}")
    return [(float(rng.randint(0, 10_000)), source(h, 64 + d)) for h in range(sources // 8) for d in range(8)]


WEEK_METRICS = ("ib.symbol_error_delta", "nic.rx_errors_delta")
WEEK_RETENTION = "minutes=1d,hours=2d,steps=1d,step-blocks=2d"
SWEEP_EVERY_S = 600  # part 3's sweeps, in simulated seconds
ROW_OVERHEAD = 160  # bytes a window row costs besides its blob and text columns: 14 numbers, its key in the table
#                     and in its primary key and two indexes (an estimate, stated with the bound it enters)
STEP_END_BYTES = 40  # a step_ends row: job name, step, end, completeness, in its one B-tree (an estimate, too)


def week_rows_kept(config: Any, step_s: int, metrics: int, elapsed_s: float) -> dict[str, int]:
    """The most window rows of each kind the store may hold `elapsed_s` into part 3's write pattern (one 1 s window
    per metric every `step_s`, a step every 2 * step_s) under `config`'s retention, a sweep every SWEEP_EVERY_S:
    each kind spans at most min(elapsed, its retention) plus what the sweep keeps past it (the period it deletes
    in whole, the time to the next sweep, the rollup's settle time), one row per period holding any window. A kind
    kept forever ('off') has no bound: OverflowError at an infinite `elapsed_s`."""
    from collectors.root.retention import HOUR_MS, MINUTE_MS

    def span(keep_s: float, slack_s: float) -> float:
        return elapsed_s if not keep_s else min(elapsed_s, keep_s + slack_s)

    def periods(seconds: float, width_s: float) -> int:
        return math.ceil(seconds / max(width_s, step_s)) + 1

    sweep, minute, hour = SWEEP_EVERY_S, MINUTE_MS / 1000, HOUR_MS / 1000
    steps_every = 2 * step_s
    raw_steps = span(config.raw_steps_s, sweep)
    blocks = span(config.step_blocks_s, sweep + config.step_block * steps_every) - raw_steps
    return {
        "seconds": metrics * periods(span(config.seconds_s, minute + sweep + config.settle_s), 1),
        "minutes": metrics * periods(span(config.minutes_s, hour + sweep), minute),
        "hours": metrics * periods(span(config.hours_s, sweep), hour),
        "steps": math.ceil(raw_steps / steps_every) + 1,
        "step-blocks": math.ceil(max(0.0, blocks) / (steps_every * config.step_block)) + 1,
        # each rolled step's end (goodput, table step_ends): from its roll until the step blocks' retention
        "step-ends": math.ceil(max(0.0, span(config.step_blocks_s, sweep) - raw_steps) / steps_every) + 1,
    }


WIDTH_KIND = {1000: "seconds", 60_000: "minutes", 3_600_000: "hours", 0: "steps"}


def run_week(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    from collectors.common.keys import Key
    from collectors.common.rows import Row
    from collectors.root.retention import HOUR_MS, MINUTE_MS, Retention, RetentionConfig, store_bytes
    from collectors.root.store import WAL_LIMIT_BYTES, Store
    from telemetry import Summary

    store = Store(work / "week.db")
    with closing(store.reader()) as db:  # the schema's pages, before any row
        empty_bytes = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
    config = RetentionConfig()
    for spec in filter(None, args.week_retention.split(",")):
        config.set(spec)
    retention = Retention(store, config)
    t0_ms = 1_750_000_000_000 - 1_750_000_000_000 % HOUR_MS
    week_s = 7 * 86_400
    days, sweep_s, worst_sweep = [], [], 0.0
    next_sweep = SWEEP_EVERY_S
    step = 0
    for sec in range(0, week_s, args.week_step):
        now_ms = t0_ms + sec * 1000
        rows = []
        for metric in WEEK_METRICS:
            s = Summary()
            for value, src in _readings(metric, sec, args.week_sources):
                s.add(value, src, time_ns=now_ms * 1_000_000 + 1)
            rows.append(Row(Key("_fleet", metric, now_ms, 1000), 0, s, False, now_ms * 1_000_000))
        if sec % (args.week_step * 2) == 0:  # a job's step every other tick, 64 ranks
            s = Summary()
            rng = random.Random(step)
            for rank in range(64):
                s.add(rng.random(), rank)
            rows.append(Row(Key("job", "step_time", step), 64, s, False, now_ms * 1_000_000))
            step += 1
        store.save(rows, {"job": 64})
        if sec >= next_sweep:
            started = time.monotonic()
            retention.sweep(now_ns=now_ms * 1_000_000, max_batches=100_000)
            took = time.monotonic() - started
            sweep_s.append(took)
            worst_sweep = max(worst_sweep, took)
            next_sweep += SWEEP_EVERY_S
        if sec % 86_400 == 0 or sec + args.week_step >= week_s:
            with closing(store.reader()) as db:
                by_width = dict(db.execute("SELECT width_ms, count(*) FROM windows GROUP BY width_ms").fetchall())
                pages = db.execute("PRAGMA page_count").fetchone()[0] * db.execute("PRAGMA page_size").fetchone()[0]
                step_ends = db.execute("SELECT count(*) FROM step_ends").fetchone()[0]
            days.append({"day": round(sec / 86_400, 2), "elapsed_s": sec, "store_bytes": store_bytes(store.path),
                         "db_bytes": pages, "file_bytes": os.path.getsize(store.path),
                         "rows": {**{WIDTH_KIND.get(w, "step-blocks"): n for w, n in sorted(by_width.items())},
                                  "step-ends": step_ends}})
    # Every minute and hour rollup kept, against the raw readings it came from.
    with closing(store.reader()) as db:
        rollups = {width: db.execute("SELECT metric, idx, summary FROM windows WHERE width_ms=?", (width,)).fetchall()
                   for width in (MINUTE_MS, HOUR_MS)}
        payload = dict(db.execute(
            "SELECT width_ms, avg(length(summary) + length(top) + length(missing) + length(nonfinite_sources) + "
            "length(job) + length(metric)) FROM windows GROUP BY width_ms").fetchall())
    checked = {"minutes": 0, "hours": 0}
    mismatches: list[dict[str, Any]] = []
    for width, kept in rollups.items():
        for metric, idx, blob in kept:
            checked[WIDTH_KIND[width]] += 1
            first = (idx - t0_ms) // 1000
            members = [p for sec in range(first, first + width // 1000)
                       if sec % args.week_step == 0 and 0 <= sec < week_s
                       for p in _readings(metric, sec, args.week_sources)]
            mismatches += [{"metric": metric, "width_ms": width, "start_ms": idx, "field": name}
                           for name in _rollup_mismatches(Summary.from_bytes(blob), members)]
    store.close()
    # The bound: the most rows of each kind the retention keeps at this write rate, at their measured bytes a row
    # (+ ROW_OVERHEAD), on top of the empty file. The file is at its bound once every kind is.
    row_bytes = {WIDTH_KIND.get(w, "step-blocks"): round(b + ROW_OVERHEAD) for w, b in payload.items()}
    row_bytes["step-ends"] = STEP_END_BYTES

    def bound(config_: Any, elapsed_s: float) -> int | None:
        try:
            kept = week_rows_kept(config_, args.week_step, len(WEEK_METRICS), elapsed_s)
        except OverflowError:  # a kind kept forever: no bound
            return None
        return empty_bytes + sum(n * row_bytes.get(kind, 0) for kind, n in kept.items())

    full = bound(config, float("inf"))
    for day in days:
        day["rows_bound"] = week_rows_kept(config, args.week_step, len(WEEK_METRICS), day["elapsed_s"])
        day["bound_bytes"] = bound(config, day["elapsed_s"])
        day["db_over_bound"] = round(day["db_bytes"] / full, 3) if full else None
    # The days on which the bound no longer grows (every kind at its retention but those whose span is longer than
    # the week at this rate, e.g. step blocks of 100 steps): the database must stay level over them.
    level = [d for d in days if d["bound_bytes"] == days[-1]["bound_bytes"]]
    first_day = next((d for d in days if d["elapsed_s"] >= 86_400), None)
    return {"simulated_days": 7, "window_every_s": args.week_step, "sources_per_window": args.week_sources,
            "retention": {k: getattr(config, v) for k, v in RetentionConfig.KINDS.items()},
            "retention_is_default": {k: getattr(config, v) == getattr(RetentionConfig(), v)
                                     for k, v in RetentionConfig.KINDS.items()},
            "empty_file_bytes": empty_bytes, "row_bytes": row_bytes, "row_overhead_assumed": ROW_OVERHEAD,
            "bound_bytes": full,
            "bound_bytes_at_default_retention": bound(RetentionConfig(), float("inf")),
            "days": days,
            "level_from_day": level[0]["day"] if level else None,
            "level_db_bytes_max_over_min": round(max(d["db_bytes"] for d in level) /
                                                 min(d["db_bytes"] for d in level), 3) if level else None,
            "wal_limit_bytes": WAL_LIMIT_BYTES,
            "size_day7_over_day1": round(days[-1]["store_bytes"] / first_day["store_bytes"], 3) if first_day else None,
            "rollups_checked": checked, "rollup_mismatches": mismatches[:20],
            "sweep_s_max": round(worst_sweep, 3), "longest_lock_hold_s": round(retention.stats.longest_hold_s, 4),
            "sweep_s_median": round(sorted(sweep_s)[len(sweep_s) // 2], 4) if sweep_s else None,
            "load_average": round(os.getloadavg()[0], 2)}


def _rollup_mismatches(s: Any, members: list[tuple[float, int]]) -> list[str]:
    """The exact fields of rollup `s` that differ from the raw readings `members` it came from."""
    expect: dict[str, Any] = {
        "count": len(members), "sum": sum(v for v, _ in members),
        "min": min(members, key=lambda p: (p[0], p[1])), "max": min(members, key=lambda p: (-p[0], p[1])),
        "top": heapq.nsmallest(s.k, members, key=lambda p: (-p[0], p[1])), "bottom": heapq.nsmallest(s.k, members),
        "sources": {src for _, src in members}}
    got = {"count": s.count, "sum": s.sum, "min": (s.min, s.argmin), "max": (s.max, s.argmax), "top": s.top(),
           "bottom": s.bottom(), "sources": set(s.sources)}
    wrong = []
    for name, want in expect.items():
        ok = abs(got[name] - want) <= 1e-9 * max(1.0, abs(want)) if name == "sum" else got[name] == want
        if not ok:
            wrong.append(name)
    return wrong


# ============================================================== the run

def run(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    counts = [int(n) for n in args.hosts.split(",")]
    result: dict[str, Any] = {"complete": False, "hosts": counts, "rack_size": args.rack_size,
                              "nics_per_host": NICS, "ib_ports_per_host": HCAS, "runs": [],
                              "machine_cpus": os.cpu_count(),
                              "racks_fed": f"mixed: {args.live_racks} live racks of {args.rack_size} hosts, the rest "
                                           "replayed" if args.racks == "mixed" else args.racks}
    # The hosts' trees (78 small files a host) on /dev/shm where there is one: removing 2,000 hosts' trees from a
    # disk took 10 minutes on this loaded machine, from tmpfs about 3
    args.sysfs = Path(tempfile.mkdtemp(prefix="telemetry-fleet-sys-", dir="/dev/shm")) \
        if Path("/dev/shm").is_dir() else work / "sys"
    try:
        if not args.skip_tree:
            write_host_trees(args.sysfs, max(counts + [int(n) for n in args.naive_hosts.split(",") if n]))
            naive_counts = [int(n) for n in args.naive_hosts.split(",")] if args.naive_hosts else counts
            for layout in args.layouts.split(","):
                for hosts in naive_counts if layout == "naive" else counts:
                    one = run_tree(work, hosts, layout, args, link_down=layout == "fleet" and hosts == max(counts))
                    result["runs"].append(one)
                    print(json.dumps(one), flush=True)
            # each key names how its runs' racks were fed (live, replayed or mixed_K_live_racks: a naive run is
            # always live)
            fed = {r["layout"]: feed(r["hosts"], r["layout"], args)["label"] for r in result["runs"]}
            for layout in args.layouts.split(","):
                runs = [r for r in result["runs"] if r["layout"] == layout]
                small, large = runs[0], runs[-1]
                result[f"{layout}_{fed[layout]}_ratio_{large['hosts']}_over_{small['hosts']}"] = {
                    name: round(large[name] / small[name], 2) if small[name] else None
                    for name in ("root_cpu_per_s", "root_rss_mb", "root_bytes_in_per_s", "root_bytes_in_per_window",
                                 "root_windows_stored_per_s")}
            fleet_by_hosts = {r["hosts"]: r for r in result["runs"] if r["layout"] == "fleet"}
            for naive in (r for r in result["runs"] if r["layout"] == "naive"):
                fleet_run = fleet_by_hosts.get(naive["hosts"])
                if fleet_run is not None:  # the baseline: what the per-host layout costs the root at the same count
                    label = feed(fleet_run["hosts"], "fleet", args)["label"]
                    result[f"naive_{naive['racks_fed']}_over_fleet_{label}_{naive['hosts']}"] = {
                        name: round(naive[name] / fleet_run[name], 2) if fleet_run[name] else None
                        for name in ("root_cpu_per_s", "root_rss_mb", "root_bytes_in_per_s")}
        if not args.skip_week:
            result["week"] = run_week(work, args)
        result["complete"] = True
    except (Exception, KeyboardInterrupt) as exc:
        result["error"] = failure(exc)
    finally:
        shutil.rmtree(args.sysfs, ignore_errors=True)
    return result


def write_host_trees(sysfs: Path, hosts: int) -> None:
    for i in range(hosts):
        if not (sysfs / f"h{i}").exists():
            write_host(sysfs / f"h{i}", nics=NICS, hcas=HCAS)


def _fed(run: dict[str, Any]) -> str:
    """The table's `racks fed`: live, replayed, or mixed L+R (live and replayed racks)."""
    mixed = run.get("feed")
    return f"mixed {mixed['live_racks']}+{mixed['replayed_racks']}" if mixed else run.get("racks_fed", "live")


def report(result: dict[str, Any]) -> None:
    print(f"{'layout':<7} {'racks fed':>11} {'hosts':>6} {'racks':>5} {'root CPU/s':>10} {'RSS MB':>8} {'bytes in/s':>11} "
          f"{'windows/s':>9} {'coverage':>8} {'late/s':>6} {'hosts CPU':>9} {'racks CPU':>9} {'load':>5}")
    for r in result["runs"]:
        print(f"{r['layout']:<7} {_fed(r):>11} {r['hosts']:>6} {r['racks']:>5} {r['root_cpu_per_s']:>10.3f} {r['root_rss_mb']:>8.1f} "
              f"{r['root_bytes_in_per_s']:>11,} {r['root_windows_stored_per_s']:>9.1f} {r['coverage'] or 0:>8.3f} "
              f"{r.get('late_per_s', 0):>6.1f} "
              f"{r['sim_cpu_per_s']:>9.2f} {r['racks_cpu_per_s']:>9.2f} {r['load_average']:>5.1f}")
    for key, value in result.items():
        if "_ratio_" in key or "_over_fleet_" in key:
            print(f"{key}: {value}")
    for r in result["runs"]:
        if "feed" in r:
            f = r["feed"]
            print(f"mixed at {r['hosts']} hosts: {f['live_racks']} live racks ({f['live_hosts']} simulated hosts: "
                  f"the only late hosts and link-down victims), {f['replayed_racks']} replayed racks "
                  f"({f['replayed_hosts']} hosts' real samples re-sent every second); replayer CPU "
                  f"{r['replay_cpu_per_s']}, cluster {r['cluster_cpu_per_s']} cores")
        for name in ("live_rounds_phase_s", "replayed_rounds_phase_s"):
            if r.get(name):
                print(f"{name} ({r['layout']}, {r['hosts']} hosts): {r[name]}")
        if "host_indexes" in r:
            print(f"host indexes handed out by the tree ({r['hosts']} hosts): {r['host_indexes']}")
        if "link_down" in r:
            down = r["link_down"]
            print(f"link down at {r['hosts']} hosts ({_fed(r)}): named in {down['named']} of {len(down['trials'])} trials, "
                  f"{down['within_2s']} within 2 s; seconds {[t['named_after_s'] for t in down['trials']]} "
                  f"(median {down['named_after_s_median']}, max {down['named_after_s_max']}); sample to named "
                  f"{[t.get('sample_to_named_s') for t in down['trials']]}")
    week = result.get("week")
    if week:
        print(f"week (retention {week['retention']}, not default: "
              f"{[k for k, same in week['retention_is_default'].items() if not same]}): bound {week['bound_bytes']} "
              f"bytes ({week['days'][-1]['rows_bound']} rows at most, at {week['row_bytes']} bytes a row + the empty "
              f"file's {week['empty_file_bytes']:,}); at the default retention "
              f"{week['bound_bytes_at_default_retention']}")
        print(f"{'day':>5} {'db bytes':>11} {'bound now':>11} {'db/bound':>8} {'store bytes':>12}  rows kept")
        for d in week["days"]:
            print(f"{d['day']:>5} {d['db_bytes']:>11,} {d['bound_bytes'] or 0:>11,} {d['db_over_bound']:>8} "
                  f"{d['store_bytes']:>12,}  {d['rows']}")
        print(f"level from day {week['level_from_day']}: db bytes max/min {week['level_db_bytes_max_over_min']}; "
              "store bytes = db + its write-ahead log (SQLite checkpoints it at 1,000 pages; the root truncates it "
              f"to {week['wal_limit_bytes']:,} bytes after a checkpoint)")
        print(f"rollups checked {week['rollups_checked']}, {len(week['rollup_mismatches'])} mismatching; sweep max "
              f"{week['sweep_s_max']} s, longest lock hold {week['longest_lock_hold_s']} s")


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def check_mixed(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--racks mixed and --live-racks go together, K live racks fit every host count, and the live hosts take
    fixed indexes (the replayed racks' hosts hold theirs from host K x --rack-size on)."""
    if args.racks != "mixed":
        if args.live_racks is not None:
            p.error(f"--live-racks is for --racks mixed (got --racks {args.racks})")
        return
    if args.live_racks is None:
        p.error("--racks mixed needs --live-racks K (how many racks run live, K >= 1)")
    if args.indexes == "tree":
        p.error("--racks mixed takes --indexes fixed (its replayed racks' hosts hold fixed indexes)")
    for hosts in (int(n) for n in args.hosts.split(",")):
        racks = -(-hosts // args.rack_size)
        if args.live_racks > racks:
            p.error(f"--live-racks {args.live_racks} is more than the racks of {hosts} hosts "
                    f"({racks} of --rack-size {args.rack_size})")


def main(argv: list[str]) -> int:
    if argv[:1] == ["--sim"]:
        simulate(argv[1:])
        return 0
    if argv[:1] == ["--replay"]:
        replay(argv[1:])
        return 0
    p = parser(__doc__, NAME, QUICK)
    p.add_argument("--hosts", default="250,2000", help="host counts, comma-separated (the first is the baseline)")
    p.add_argument("--layouts", default="fleet,naive", choices=["fleet,naive", "fleet", "naive"],
                   help="which layouts to run (both by default: the naive one is the baseline)")
    p.add_argument("--naive-hosts", default="",
                   help="the naive layout's host counts, comma-separated (default: --hosts): e.g. the baseline at the "
                        "count the machine runs live beside --racks replayed at counts it cannot")
    p.add_argument("--rack-size", type=int, default=64)
    p.add_argument("--hosts-per-process", type=int, default=128)
    p.add_argument("--indexes", choices=["fixed", "tree"], default="fixed",
                   help="fleet layout: host i is --host-index i (fixed), or each host asks the tree for its index "
                        "at start (tree: --host-index auto, docs/fleet.md 'Host indexes'; the time until all have one "
                        "is reported)")
    p.add_argument("--racks", choices=["live", "replayed", "mixed"], default="live",
                   help="fleet layout: live (every host a simulated agent at 1 Hz, racks of `telemetry collector`), "
                        "replayed (each rack's unit of one second made once from its hosts' real samples and "
                        "re-sent every second by one process: the cluster and the root live at host counts the "
                        "machine cannot simulate; no link down), or mixed (the first --live-racks racks live, "
                        "the rest replayed, all into the same cluster and root; the link downs on the live racks' "
                        "hosts; docs/fleet.md 'Mixed racks')")
    p.add_argument("--live-racks", type=_positive_int, default=None,
                   help="--racks mixed: how many racks (of --rack-size hosts, from host 0) run live; at most the "
                        "racks of the smallest --hosts count")
    p.add_argument("--seconds", type=float, default=30.0, help="measured seconds per run")
    p.add_argument("--warmup", type=float, default=15.0)
    p.add_argument("--link-timeout", type=float, default=20.0, help="seconds to wait for each link down's event")
    p.add_argument("--link-trials", type=_positive_int, default=5,
                   help="link downs at the largest count, one after another on different hosts (each one a draw of "
                        "where in the second the write falls; the worst is the figure to hold to a bound)")
    p.add_argument("--week-step", type=int, default=10, help="simulated seconds between 1 s windows in part 3")
    p.add_argument("--week-sources", type=int, default=64, help="sources per window in part 3 (multiple of 8)")
    p.add_argument("--week-retention", default=WEEK_RETENTION,
                   help="--retention specs for part 3, comma-separated, on top of the defaults (by default shorter "
                        "than those for every kind but seconds and events, so that every kind reaches its bound "
                        "within the week; '' runs the defaults, under which hours and step blocks grow all week)")
    p.add_argument("--skip-tree", action="store_true")
    p.add_argument("--skip-week", action="store_true")
    p.add_argument("--workdir", type=Path, default=None)
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    check_mixed(p, args)
    result = run_in_workdir(NAME, args.workdir, lambda work: run(work, args))
    return write_result(args.out, NAME, result, "the fleet bench", report)


if __name__ == "__main__":
    try:
        raise SystemExit(main(sys.argv[1:]))
    except BenchError as exc:
        print(f"fleet bench: {exc}", file=sys.stderr)
        raise SystemExit(1) from None
