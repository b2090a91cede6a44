"""Hardware: rules over the hardware time-bucket metrics (docs/hardware.md), linked to the rank and host.

Hardware readings reach the root as 1-second time buckets (`gpu.*`, `nic.*`, `ib.*`) whose sources are
the ranks using that GPU (or host). Each rule watches one metric of a bucket:

- `above`: some source's value > threshold (temperatures; throttle flags with threshold 0.5);
- `below`: some source's value < threshold after it was seen at or above it (a link that went down:
  `nic.up`, `ib.port_active`; a port that was never up is not an event);
- `rising`: a counter's per-sample increase (`X_delta`) > threshold anywhere (ECC, XID, PCIe replays,
  NVLink, NIC and IB error counters).

Each source (a rank's GPU; one device of one host) keeps its own streak: a rule fires once one source has
held for `sustain` seconds of bucket time (a second in which that source did not report, or was not among the
exact top-k / bottom-k while more sources were over than they hold, neither breaks nor extends its streak), so
two hosts' faults are told apart and one's flapping can neither make nor break another's streak. An event
closes `quiet_s` seconds (bucket time) after the last of its sources was over, once each of them reported
back under the threshold. One event per (job, rule) for a job's ranks: its key is the rule's name; the ranks
are the sources over the threshold, the hosts theirs. A host's own readings (NICs, IB ports, GPUs no rank
uses) arrive under the agent's pseudo-job `_host:<host>` with device ids as sources, or in the fleet's windows
(`_fleet`, sources (host, device)): one event per host, in every job with ranks on that host (naming those
ranks; key `<rule>@<host>`), or under the pseudo-job (the fleet's) when no job is known there. XID codes
(`gpu.xid_code`) seen within 5 s are attached to the XID event. Rules are configurable: give `rules`
to replace the defaults, or `overrides` {name: {field: value}} to tune some.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pyroaring import BitMap

from collectors.common.fleet import host_index_of, slot_of, split_name
from collectors.common.rows import Row
from collectors.detectors.base import Detector, fnum
from telemetry.names import FLEET_JOB, HOST_JOB_PREFIX


@dataclass(frozen=True)
class Rule:
    name: str
    metric: str
    mode: str  # above | below | rising
    threshold: float
    severity: str = "warning"
    sustain: int = 1
    quiet_s: float = 30.0
    what: str = ""


XID_CODES = ("gpu.xid_code", "gpu.xid_last_code")  # one value per XID event / the probe's last code

DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("gpu_temperature", "gpu.temperature_celsius", "above", 87.0, "warning", 5, 30, "GPU hot"),
    Rule("gpu_memory_temperature", "gpu.memory_temperature_celsius", "above", 95.0, "warning", 5, 30, "HBM hot"),
    Rule("gpu_thermal_throttle", "gpu.throttle_thermal", "above", 0.5, "warning", 3, 30, "thermal slowdown"),
    Rule("gpu_power_throttle", "gpu.throttle_power", "above", 0.5, "info", 30, 60, "power capping"),
    Rule("gpu_hw_slowdown", "gpu.throttle_other", "above", 0.5, "info", 30, 60, "other clock slowdown"),
    Rule("gpu_ecc_uncorrected", "gpu.ecc_uncorrected_delta", "rising", 0, "critical", 1, 300,
         "uncorrectable ECC errors"),
    Rule("gpu_ecc_corrected", "gpu.ecc_corrected_delta", "rising", 100, "warning", 1, 300,
         "many correctable ECC errors"),
    Rule("gpu_remap_uncorrectable", "gpu.remapped_rows_uncorrectable_delta", "rising", 0, "critical", 1, 300,
         "rows remapped after uncorrectable errors"),
    Rule("gpu_row_remap_failure", "gpu.row_remap_failure", "above", 0.5, "critical", 1, 300, "row remap failed"),
    Rule("gpu_row_remap_pending", "gpu.row_remap_pending", "above", 0.5, "warning", 1, 300,
         "row remap waits for a GPU reset"),
    Rule("gpu_xid", "gpu.xid_errors_delta", "rising", 0, "critical", 1, 300, "XID error"),
    Rule("gpu_lost", "gpu.lost", "above", 0.5, "critical", 1, 300, "GPU fell off the bus"),
    Rule("gpu_pcie_replay", "gpu.pcie_replay_delta", "rising", 0, "warning", 1, 120, "PCIe replays"),
    Rule("gpu_nvlink_crc_flit", "gpu.nvlink_crc_flit_errors_delta", "rising", 0, "warning", 1, 120,
         "NVLink CRC flit errors"),
    Rule("gpu_nvlink_crc_data", "gpu.nvlink_crc_data_errors_delta", "rising", 0, "warning", 1, 120,
         "NVLink CRC data errors"),
    Rule("gpu_nvlink_replay", "gpu.nvlink_replay_errors_delta", "rising", 0, "warning", 1, 120,
         "NVLink replays"),
    Rule("gpu_nvlink_recovery", "gpu.nvlink_recovery_errors_delta", "rising", 0, "warning", 1, 120,
         "NVLink recoveries"),
    Rule("nic_rx_errors", "nic.rx_errors_delta", "rising", 0, "warning", 1, 120, "NIC receive errors"),
    Rule("nic_tx_errors", "nic.tx_errors_delta", "rising", 0, "warning", 1, 120, "NIC transmit errors"),
    Rule("nic_carrier_changes", "nic.carrier_changes_delta", "rising", 0, "warning", 1, 120, "NIC link flapping"),
    Rule("nic_down", "nic.up", "below", 0.5, "critical", 2, 30, "NIC down"),
    Rule("ib_symbol_errors", "ib.symbol_error_delta", "rising", 0, "warning", 1, 120, "IB symbol errors"),
    Rule("ib_link_downed", "ib.link_downed_delta", "rising", 0, "critical", 1, 300, "IB link went down"),
    Rule("ib_link_recovery", "ib.link_error_recovery_delta", "rising", 0, "warning", 1, 120, "IB link retrained"),
    Rule("ib_rcv_errors", "ib.port_rcv_errors_delta", "rising", 0, "warning", 1, 120, "IB receive errors"),
    Rule("ib_xmit_discards", "ib.port_xmit_discards_delta", "rising", 0, "warning", 1, 120, "IB transmit discards"),
    Rule("ib_port_down", "ib.port_active", "below", 0.5, "critical", 2, 30, "IB port not active"),
)


@dataclass
class HardwareConfig:
    enabled: bool = True
    rules: list[dict] | None = None  # replaces the defaults when given (each: Rule's fields)
    overrides: dict[str, dict] = field(default_factory=dict)  # {rule name: {field: value}}
    top: int = 8

    def build_rules(self) -> list[Rule]:
        rules = [Rule(**r) for r in self.rules] if self.rules is not None else list(DEFAULT_RULES)
        names = {r.name for r in rules}
        unknown = sorted(set(self.overrides) - names)
        if unknown:
            raise ValueError(f"hardware overrides for unknown rules: {', '.join(unknown)}")
        return [replace(r, **self.overrides.get(r.name, {})) for r in rules]


LATE_SECONDS = 30  # a second's late readings (a host passed over, then merged in) are judged up to this long after
MAX_STREAKS = 4096  # sources over a threshold tracked per (job, rule); past it the longest-silent is dropped


@dataclass
class _Streak:
    """One source's (one rank's GPU, one host's port) run of seconds over a rule's threshold."""

    start_ms: int
    last_over_ms: int
    buckets: int = 1


def _stretch(streaks: dict[int, _Streak], over: dict[int, float], bucket: int) -> None:
    """Each source over in second `bucket` starts its streak or stretches it to that second: on time (the newest
    second) its end moves up; late (an earlier second) its start may move down."""
    for src in over:
        streak = streaks.get(src)
        if streak is None:
            streaks[src] = _Streak(bucket, bucket)
        else:
            streak.start_ms, streak.last_over_ms = min(streak.start_ms, bucket), max(streak.last_over_ms, bucket)
            streak.buckets += 1


@dataclass
class _Group:
    """The sources one event speaks for: a job's ranks (one event per rule), or one host's devices (one event per
    host, key `<rule>@<host>`). It opens when one of its sources has held for `sustain` seconds, and closes
    `quiet_s` after the last of its sources was over, once each of them has reported back under the threshold."""

    last_over_ms: int | None = None
    start_ms: int = 0  # when the streak that opened it began: the event's time
    targets: set[tuple[str, str]] = field(default_factory=set)  # (job, key) of the events it opened


@dataclass
class _State:
    """One rule over one job's (or the fleet's) windows: a streak per source, so that two hosts' (or two GPUs')
    faults are told apart and one source's flapping can neither hold up nor break another's streak."""

    last_bucket: int = -1
    # the sources each recent second reported when it was judged (LATE_SECONDS back): a late delta's new sources
    seen: dict[int, BitMap] = field(default_factory=dict)
    seen_up: BitMap = field(default_factory=BitMap)  # `below` rules: sources seen at/above the threshold
    streaks: dict[int, _Streak] = field(default_factory=dict)
    groups: dict[str, _Group] = field(default_factory=dict)


def _op(rule: Rule) -> str:
    return "+" if rule.mode == "rising" else "="


def _over(rule: Rule, s, seen_up: BitMap) -> tuple[dict[int, float], dict[int, float], bool]:
    """The sources over the threshold this second with their worst value and the sum of their readings over it
    (a source may read more than once a second), and whether that list is complete (every reading over is among
    the exact top-k / bottom-k; if not, an unlisted source has no verdict this second)."""
    if rule.mode == "below":
        listed, hit = s.bottom(), (lambda v: v < rule.threshold)
    else:
        listed, hit = s.top(), (lambda v: v > rule.threshold)
    complete = len(listed) < s.k or any(not hit(v) for v, _ in listed)
    over: dict[int, float] = {}
    sums: dict[int, float] = {}
    for value, src in listed:
        if hit(value):
            over.setdefault(src, value)
            sums[src] = sums.get(src, 0.0) + value
    if rule.mode == "below":
        # A link that goes down, not one that never was up (an unused port, a virtual interface): only sources
        # seen at or above the threshold before count.
        if complete:
            seen_up |= s.sources - BitMap(over)
        else:
            seen_up |= BitMap(r for v, r in s.top() if v >= rule.threshold)
        over = {src: v for src, v in over.items() if src in seen_up}
    return over, sums, complete


class HardwareDetector(Detector):
    kind = "hardware"
    prefixes = ("gpu.", "nic.", "ib.")

    def __init__(self, events, context=None,
                 config: HardwareConfig | None = None) -> None:
        super().__init__(events, context)
        self.config = config or HardwareConfig()
        self.rules: dict[str, list[Rule]] = {}
        for rule in self.config.build_rules():
            self.rules.setdefault(rule.metric, []).append(rule)
        self.metrics = frozenset(self.rules)
        self._state: dict[tuple[str, str], _State] = {}
        self._codes: dict[str, tuple[int, set[int]]] = {}  # job -> (bucket ms, XID codes seen in it)

    def wants(self, row: Row) -> bool:
        return not row.key.is_step and (row.key.metric in self.rules or row.key.metric in XID_CODES)

    def observe(self, row: Row) -> None:
        if row.key.is_step:
            return
        if row.key.metric in XID_CODES:
            self.observe_code(row)
            return
        for rule in self.rules.get(row.key.metric, ()):
            self._apply(rule, row)

    def _group_of(self, job: str):
        """source -> the group (event) it belongs to: the job's one group, its host's (a `_host:` job), or, in
        the fleet's windows, the host named by the source's `host:device`."""
        if job == FLEET_JOB:
            names = self.context.hosts_of(FLEET_JOB)
            return lambda src: split_name(names.get(src, f"host{host_index_of(src)}:slot{slot_of(src)}"))[0]
        if job.startswith(HOST_JOB_PREFIX):
            host = job[len(HOST_JOB_PREFIX):]
            return lambda src: host
        return lambda src: ""

    def _apply(self, rule: Rule, row: Row) -> None:
        job, bucket, s = row.key.job, row.key.index, row.summary
        state = self._state.setdefault((job, rule.name), _State())
        if not s.count:
            return
        if bucket <= state.last_bucket:
            self._apply_late(rule, row, state)
            return
        state.last_bucket = bucket
        state.seen[bucket] = s.sources
        horizon = bucket - LATE_SECONDS * max(1, row.key.width_ms)
        for old in [b for b in state.seen if b < horizon]:
            del state.seen[old]
        over, sums, complete = _over(rule, s, state.seen_up)
        # Each source's own streak: over extends it (or starts one); reported and known not over ends it; not
        # reported (or not listed while the list is incomplete) neither breaks nor extends it (heartbeat-borne
        # readings may skip a second).
        for src in list(state.streaks):
            if src not in over and complete and src in s.sources:
                del state.streaks[src]
        _stretch(state.streaks, over, bucket)
        if len(state.streaks) > MAX_STREAKS:
            for src in sorted(state.streaks, key=lambda r: state.streaks[r].last_over_ms)[:-MAX_STREAKS]:
                del state.streaks[src]
        by_group = self._raise_over(rule, row, state, over, sums, whole=True)
        self._close_quiet(rule, job, bucket, state, by_group)

    def _close_quiet(self, rule: Rule, job: str, bucket: int, state: _State, by_group: dict[str, list[int]]) -> None:
        """Close the events of the groups none of whose sources is over (this second) or holds a streak, once
        `quiet_s` of bucket time has passed since the last of them was over."""
        group_of = self._group_of(job)
        still = {group_of(src) for src in state.streaks}
        for name in [n for n in state.groups if n not in by_group and n not in still]:
            group = state.groups[name]
            if group.last_over_ms is None or bucket - group.last_over_ms >= rule.quiet_s * 1000:
                for target_job, key in sorted(group.targets):
                    self.events.clear(self.kind, target_job, key, step=self.context.latest_step_of(target_job))
                del state.groups[name]

    def _apply_late(self, rule: Rule, row: Row, state: _State) -> None:
        """A second judged before, again with readings that came late (a tier passed the fleet's second on without
        a late host: Node._fleet_passed; the root merged them in, Finaliser.ship): only the sources it did not hold
        when judged are judged now, each once, as on time: one over starts its streak or stretches it to this
        second (a host whose readings always come late builds its streak from its late seconds), one reported and
        known not over ends a streak that was last over no later than this second (its recovery came late), and
        the events of groups left quiet close. A counter's increase counts only their readings. Seconds older than
        LATE_SECONDS are not judged again."""
        bucket, s, width = row.key.index, row.summary, max(1, row.key.width_ms)
        if bucket < state.last_bucket - LATE_SECONDS * width:
            return
        before = state.seen.get(bucket)
        state.seen[bucket] = before | s.sources if before is not None else s.sources
        new = s.sources - before if before is not None else s.sources
        if not new:
            return
        over, sums, complete = _over(rule, s, state.seen_up)
        over = {src: value for src, value in over.items() if src in new}
        if complete:
            for src in [r for r, streak in state.streaks.items()
                        if r in new and r not in over and streak.last_over_ms <= bucket]:
                del state.streaks[src]
        _stretch(state.streaks, over, bucket)
        by_group = self._raise_over(rule, row, state, over, sums, whole=False)
        self._close_quiet(rule, row.key.job, bucket, state, by_group)

    def _raise_over(self, rule: Rule, row: Row, state: _State, over: dict[int, float], sums: dict[int, float],
                    whole: bool) -> dict[str, list[int]]:
        """Raise (or update) the event of each group with a source over that held for `sustain` seconds; returns the
        sources over by group. `whole`: the second's readings are all new (its total is the window's sum)."""
        bucket, s = row.key.index, row.summary
        group_of = self._group_of(row.key.job)  # "" for a job's ranks (one event), else the host
        by_group: dict[str, list[int]] = {}
        for src in sorted(over, key=lambda r: over[r], reverse=rule.mode != "below"):
            by_group.setdefault(group_of(src), []).append(src)
        width = max(1, row.key.width_ms)
        for name, srcs in by_group.items():
            group = state.groups.setdefault(name, _Group())
            group.last_over_ms = max(bucket, group.last_over_ms or bucket)
            # sustained for `sustain` seconds of bucket time by one source of the group
            lasted = max((state.streaks[r].last_over_ms - state.streaks[r].start_ms) // width + 1 for r in srcs)
            if lasted < rule.sustain and not group.targets:
                continue
            if not group.targets:
                group.start_ms = min(state.streaks[r].start_ms for r in srcs
                                     if (state.streaks[r].last_over_ms - state.streaks[r].start_ms) // width + 1
                                     >= rule.sustain)
            # a rising counter's increase: the job's whole window, or (one host's event) that host's readings
            total = s.sum if not name and whole else sum(sums[r] for r in srcs)
            self._raise_group(rule, row, name, srcs[: self.config.top], over, total, state, group)
        return by_group

    def _raise_group(self, rule: Rule, row: Row, name: str, sources: list[int], over: dict[int, float],
                     total: float, state: _State, group: _Group) -> None:
        job, bucket = row.key.job, row.key.index
        worst_source = sources[0]
        worst = over[worst_source]
        base = {
            "rule": rule.name, "metric": rule.metric, "mode": rule.mode, "threshold": rule.threshold,
            "value": fnum(worst), "buckets": max(state.streaks[r].buckets for r in sources), "bucket_ms": bucket,
        }
        if job == FLEET_JOB:
            # The fleet's windows (collectors/common/fleet.py): sources are (host, device) pairs, named by the
            # rank states the agents sent up (`host:device`). One event per host, naming the host and its devices:
            # in every job with ranks on that host (naming them), else in the fleet's.
            names = self.context.hosts_of(FLEET_JOB)
            devices = [split_name(names.get(src, f":slot{slot_of(src)}"))[1] for src in sources]
            what = (f"{rule.what or rule.name} on {name}: {rule.metric} {_op(rule)}{worst:.4g} "
                    f"(device {devices[0]})")
            detail = {**base, "host": name, "device": devices[0], "devices": devices, "sources": sources,
                      "summary": what}
            for target_job, ranks in (self.context.ranks_on_host(name) or {FLEET_JOB: []}).items():
                self._raise(rule, target_job, f"{rule.name}@{name}", ranks, [name], dict(detail), total, group)
            return
        if job.startswith(HOST_JOB_PREFIX):
            # A host's own reading (a NIC, an IB port, a GPU no rank uses): sources are device ids. The
            # event goes to every job with ranks on that host, naming those ranks; else to the host's job.
            base.update(host=name, devices=sources, device=worst_source)
            what = (f"{rule.what or rule.name} on {name}: {rule.metric} {_op(rule)}{worst:.4g} "
                    f"(device {worst_source})")
            for target_job, ranks in (self.context.ranks_on_host(name) or {job: []}).items():
                key = rule.name if target_job == job else f"{rule.name}@{name}"
                self._raise(rule, target_job, key, ranks, [name], {**base, "summary": what}, total, group)
            return
        what = f"{rule.what or rule.name}: {rule.metric} {_op(rule)}{worst:.4g} on rank {worst_source}"
        base.update(rank=worst_source, sources_over=len(over))
        self._raise(rule, job, rule.name, sources, self.context.hosts(job, sources), {**base, "summary": what},
                    total, group)

    def _raise(self, rule: Rule, job: str, key: str, ranks: list[int], hosts: list[str], detail: dict,
               total: float, group: _Group) -> None:
        event = self.events.get_open(self.kind, job, key)
        if rule.mode == "rising":
            detail["total"] = fnum((event.detail.get("total") or 0 if event is not None else 0) + total)
        if rule.name == "gpu_xid":
            recent = self._codes.get(job, (0, set()))
            codes = set(event.detail.get("xid_codes", [])) if event is not None else set()
            if detail["bucket_ms"] - recent[0] <= 5000:
                codes |= recent[1]
            detail["xid_codes"] = sorted(codes)
        self.events.raise_(self.kind, job, step=self.context.latest_step_of(job), ranks=ranks, hosts=hosts,
                           detail=detail, severity=rule.severity, key=key, time=group.start_ms / 1000.0)
        group.targets.add((job, key))

    def observe_code(self, row: Row) -> None:
        """`gpu.xid_last_code` buckets: attach the codes to an open XID event."""
        if not row.summary.count:
            return
        seen = {int(v) for v, _ in row.summary.top() if math.isfinite(v)}
        self._codes[row.key.job] = (row.key.index, seen)
        event = self.events.get_open(self.kind, row.key.job, "gpu_xid")
        if event is None:
            return
        codes = sorted(seen | set(event.detail.get("xid_codes", [])))
        if codes != event.detail.get("xid_codes"):
            self.events.raise_(self.kind, row.key.job, step=None, ranks=event.ranks, hosts=event.hosts,
                               detail={**event.detail, "xid_codes": codes}, severity=event.severity, key="gpu_xid")
