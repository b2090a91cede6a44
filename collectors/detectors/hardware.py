"""Hardware: rules over the hardware time-bucket metrics (docs/hardware.md), linked to the rank and host.

Hardware readings reach the root as 1-second time buckets (`gpu.*`, `nic.*`, `ib.*`) whose sources are
the ranks using that GPU (or host). Each rule watches one metric of a bucket:

- `above`: some source's value > threshold (temperatures; throttle flags with threshold 0.5);
- `below`: some source's value < threshold after it was seen at or above it (a link that went down:
  `nic.up`, `ib.port_active`; a port that was never up is not an event);
- `rising`: a counter's per-sample increase (`X_delta`) > threshold anywhere (ECC, XID, PCIe replays,
  NVLink, NIC and IB error counters).

A rule fires once it has held for `sustain` seconds of bucket time (a second in which the sources
that were over did not report neither breaks nor extends that), and closes after `quiet_s` seconds
(bucket time) without. One event per (job, rule): its key is the rule's name; the ranks are the sources over
the threshold (exact top-k / bottom-k of the bucket), the hosts theirs. A host's own readings (NICs,
IB ports, GPUs no rank uses) arrive under the agent's pseudo-job `_host:<host>` with device ids as
sources: their events go to every job with ranks on that host (naming those ranks; key
`<rule>@<host>`), or stay under the pseudo-job when no job is known there. XID codes
(`gpu.xid_code`) seen within 5 s are attached to the XID event. Rules are configurable: give `rules`
to replace the defaults, or `overrides` {name: {field: value}} to tune some.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from pyroaring import BitMap

from collectors.common.fleet import host_index_of, slot_of, split_name
from collectors.common.rows import Row
from collectors.detectors.base import Detector, distinct, fnum
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


@dataclass
class _State:
    streak: int = 0
    last_over_ms: int | None = None
    start_ms: int = 0
    last_bucket: int = -1
    targets: set[tuple[str, str]] = field(default_factory=set)  # (job, key) of the events it opened
    seen_up: BitMap = field(default_factory=BitMap)  # `below` rules: sources seen at/above the threshold
    hot: BitMap = field(default_factory=BitMap)  # the sources over the threshold in the last bucket over


def _op(rule: Rule) -> str:
    return "+" if rule.mode == "rising" else "="


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

    def _apply(self, rule: Rule, row: Row) -> None:
        job, bucket, s = row.key.job, row.key.index, row.summary
        state = self._state.setdefault((job, rule.name), _State())
        if bucket <= state.last_bucket or not s.count:
            return
        state.last_bucket = bucket
        if rule.mode == "below":
            # A link that goes down, not one that never was up (an unused port, a virtual interface):
            # only sources seen at or above the threshold before count.
            below = distinct(s.bottom(), lambda v: v < rule.threshold, s.k)
            if len(below) < s.k:  # every source below is listed: the others are up
                state.seen_up |= s.sources - BitMap(below)
            else:
                state.seen_up |= BitMap(r for v, r in s.top() if v >= rule.threshold)
            sources = [r for r in below if r in state.seen_up][: self.config.top]
            over = bool(sources)
            worst = min((v for v, r in s.bottom() if r in sources), default=s.min)
            worst_source = sources[0] if sources else s.argmin
        else:
            over = s.max > rule.threshold
            sources = distinct(s.top(), lambda v: v > rule.threshold, self.config.top)
            worst, worst_source = s.max, s.argmax
        if not over:
            if state.hot and not (state.hot & s.sources):
                return  # the sources that were over did not report this second: no verdict either way
            state.streak, state.hot = 0, BitMap()
            if state.last_over_ms is not None and bucket - state.last_over_ms >= rule.quiet_s * 1000:
                for target_job, key in sorted(state.targets):
                    self.events.clear(self.kind, target_job, key, step=self.context.latest_step_of(target_job))
                state.targets.clear()
                state.last_over_ms = None
            return
        if state.streak == 0:
            state.start_ms = bucket
        state.streak += 1
        state.hot = BitMap(sources)
        state.last_over_ms = bucket
        # sustained for `sustain` seconds of bucket time (a second in which the source did not report
        # neither breaks nor extends the run: heartbeat-borne readings may skip a bucket)
        lasted = (bucket - state.start_ms) // max(1, row.key.width_ms) + 1
        if lasted < rule.sustain and not state.targets:
            return
        base = {
            "rule": rule.name, "metric": rule.metric, "mode": rule.mode, "threshold": rule.threshold,
            "value": fnum(worst), "buckets": state.streak, "bucket_ms": bucket,
        }
        if job == FLEET_JOB:
            self._raise_fleet(rule, sources, worst_source, s, base, state)
            return
        if job.startswith(HOST_JOB_PREFIX):
            # A host's own reading (a NIC, an IB port, a GPU no rank uses): sources are device ids. The
            # event goes to every job with ranks on that host, naming those ranks; else to the host's job.
            host = job[len(HOST_JOB_PREFIX):]
            base.update(host=host, devices=sources, device=worst_source)
            targets = self.context.ranks_on_host(host) or {job: []}
            for target_job, ranks in targets.items():
                key = rule.name if target_job == job else f"{rule.name}@{host}"
                what = (f"{rule.what or rule.name} on {host}: {rule.metric} {_op(rule)}{worst:.4g} "
                        f"(device {worst_source})")
                self._raise(rule, target_job, key, ranks, [host], {**base, "summary": what}, s, state)
            return
        what = f"{rule.what or rule.name}: {rule.metric} {_op(rule)}{worst:.4g} on rank {worst_source}"
        base.update(rank=worst_source, sources_over=len(sources))
        self._raise(rule, job, rule.name, sources, self.context.hosts(job, sources), {**base, "summary": what}, s,
                    state)

    def _raise_fleet(self, rule: Rule, sources: list[int], worst_source: int | None, s, base: dict,
                     state: _State) -> None:
        """The fleet's windows (collectors/common/fleet.py): sources are (host, device) pairs, named by the rank
        states the agents sent up (`host:device`). One event per host over the threshold, key `<rule>@<host>`,
        naming the host and its devices: in every job with ranks on that host (naming them), else in the fleet's."""
        names = self.context.hosts_of(FLEET_JOB)
        by_host: dict[str, list[int]] = {}
        for src in sources or ([] if worst_source is None else [worst_source]):
            host, _ = split_name(names.get(src, f"host{host_index_of(src)}:slot{slot_of(src)}"))
            by_host.setdefault(host, []).append(src)
        for host, srcs in by_host.items():
            devices = [split_name(names.get(src, f":slot{slot_of(src)}"))[1] for src in srcs]
            values = dict((r, v) for v, r in [*s.top(), *s.bottom()])
            worst = values.get(srcs[0], s.max if rule.mode != "below" else s.min)
            what = (f"{rule.what or rule.name} on {host}: {rule.metric} {_op(rule)}{worst:.4g} "
                    f"(device {devices[0]})")
            detail = {**base, "host": host, "device": devices[0], "devices": devices, "sources": srcs,
                      "value": fnum(worst), "summary": what}
            targets = self.context.ranks_on_host(host) or {FLEET_JOB: []}
            for target_job, ranks in targets.items():
                self._raise(rule, target_job, f"{rule.name}@{host}", ranks, [host], dict(detail), s, state)

    def _raise(self, rule: Rule, job: str, key: str, ranks: list[int], hosts: list[str], detail: dict,
               s, state: _State) -> None:
        event = self.events.get_open(self.kind, job, key)
        if rule.mode == "rising":
            detail["total"] = fnum((event.detail.get("total") or 0 if event is not None else 0) + s.sum)
        if rule.name == "gpu_xid":
            recent = self._codes.get(job, (0, set()))
            codes = set(event.detail.get("xid_codes", [])) if event is not None else set()
            if detail["bucket_ms"] - recent[0] <= 5000:
                codes |= recent[1]
            detail["xid_codes"] = sorted(codes)
        self.events.raise_(self.kind, job, step=self.context.latest_step_of(job), ranks=ranks, hosts=hosts,
                           detail=detail, severity=rule.severity, key=key, time=state.start_ms / 1000.0)
        state.targets.add((job, key))

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
