"""Polls the root's JSON API and /metrics on a thread: what the live view, the summary and the plot show.

Only the root's public interfaces are read (the same ones Grafana and scripts use), so the demo and
`telemetry watch` (attached to any running root) show exactly what an operator would see.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from collectors.common.attempts import split
from collectors.root.forensics import CAPTURE_KINDS
from telemetry.names import HOST_JOB_PREFIX

log = logging.getLogger(__name__)

PANEL_METRICS = ("step_time", "collective_arrival", "loss", "mfu", "grad_norm")
#: Hardware gauges shown (as the max over the job's GPUs/NICs) when an agent reports them.
HARDWARE_FAMILIES = {
    "telemetry_gpu_temperature_celsius": "GPU temp °C",
    "telemetry_gpu_power_watts": "GPU power W",
    "telemetry_gpu_utilization_percent": "GPU util %",
    "telemetry_gpu_throttle_thermal": "thermal throttle",
    "telemetry_gpu_ecc_uncorrected": "ECC uncorrected",
    "telemetry_gpu_xid_errors": "XID errors",
    "telemetry_network_errors": "NIC errors",
}
#: A host's own hardware (the agents' pseudo-jobs `_host:NAME`: NICs, IB ports, GPUs no rank uses).
HOST_FAMILIES = {
    **HARDWARE_FAMILIES,
    "telemetry_nic_up": "NICs up",
    "telemetry_nic_rx_dropped": "rx dropped",
    "telemetry_nic_tx_dropped": "tx dropped",
    "telemetry_ib_port_active": "IB ports active",
    "telemetry_ib_rate_gbps": "IB Gb/s",
    "telemetry_network_errors": "NIC/IB errors",
}
#: 0/1 flags kept as both max and min over the host's devices ("label (min)"): are all, some or none up?
HOST_FLAG_FAMILIES = frozenset({"telemetry_nic_up", "telemetry_ib_port_active"})


@dataclass
class Snapshot:
    """The latest view of one job at the root."""

    job: str
    steps: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    progress: dict[str, Any] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)
    hardware: dict[str, float] = field(default_factory=dict)
    #: per host (`_host:NAME` pseudo-job) its NIC/IB/GPU figures, e.g. {"vm": {"NICs up": 0.0, ...}}
    hosts: dict[str, dict[str, float]] = field(default_factory=dict)
    status: str = "starting"
    updated: float = 0.0
    #: captures of the culprits of open hang/straggler/mismatch events (GET .../events/{id}/forensics)
    culprits: list[dict[str, Any]] = field(default_factory=list)


class RootWatcher:
    """Refreshes a `Snapshot` every `interval` seconds until `stop()`; keeps the hardware history for the plot."""

    def __init__(self, api: str, job: str, interval: float = 0.5, last: int = 200) -> None:
        self.api, self.job, self.interval, self.last = api.rstrip("/"), job, interval, last
        self._snapshot = Snapshot(job)
        self.hardware_history: list[tuple[float, dict[str, float]]] = []
        #: each event as this watcher first saw it (the root updates open events; this keeps how they were raised)
        self.first_seen: dict[int, dict[str, Any]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="root-watcher", daemon=True)

    def start(self) -> RootWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)

    def set_status(self, text: str) -> None:
        with self._lock:
            self._snapshot.status = text

    def snapshot(self) -> Snapshot:
        with self._lock:
            s = self._snapshot
            return Snapshot(s.job, dict(s.steps), dict(s.progress), list(s.events), dict(s.hardware),
                            dict(s.hosts), s.status, s.updated, list(s.culprits))

    def refresh(self) -> None:
        """One poll (also called once more after the run, so the summary sees the final state)."""
        steps = {m: self._json(f"/api/v1/jobs/{self.job}/steps?metric={m}&last={self.last}").get("steps", [])
                 for m in PANEL_METRICS}
        progress = self._json(f"/api/v1/jobs/{self.job}/progress")
        events = self._json(f"/api/v1/jobs/{self.job}/events?last=10000").get("events", [])
        hardware, hosts = self._hardware()
        culprits = self._culprits(events)
        now = time.time()
        with self._lock:
            s = self._snapshot
            # Keep the last good answer if the root was briefly unreachable.
            s.steps = {m: rows or s.steps.get(m, []) for m, rows in steps.items()}
            s.progress = progress or s.progress
            s.events = events or s.events
            s.hardware = hardware or s.hardware
            s.hosts = hosts or s.hosts
            s.culprits = culprits
            s.updated = now
            if hardware:
                self.hardware_history.append((now, hardware))
            for event in events:
                self.first_seen.setdefault(event["id"], event)

    def _culprits(self, events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The captures of the latest open culprit-naming events (at most 2 events, 2 ranks each)."""
        found = []
        kinds = (*CAPTURE_KINDS, "crash")  # a crash's captures are its dead ranks' last words
        for event in [e for e in events if e.get("status") == "open" and e.get("kind") in kinds][-2:]:
            body = self._json(f"/api/v1/jobs/{self.job}/events/{event['id']}/forensics")
            for capture in body.get("captures", [])[:2]:
                found.append({**capture, "event_id": event["id"], "kind": event["kind"]})
        return found

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.refresh()
            except Exception:  # the view must never take the demo down
                log.exception("polling the root failed")

    def _json(self, path: str) -> dict[str, Any]:
        try:
            with urllib.request.urlopen(self.api + path, timeout=5) as reply:
                return json.load(reply)
        except (OSError, ValueError, urllib.error.URLError):
            return {}

    def _hardware(self) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
        """This job's hardware gauges (max over its GPUs), and each host's own (`_host:NAME` pseudo-jobs)."""
        try:
            with urllib.request.urlopen(self.api + "/metrics", timeout=5) as reply:
                text = reply.read().decode()
        except OSError:
            return {}, {}
        job: dict[str, float] = {}
        hosts: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            name = family.name.removesuffix("_total")
            for sample in family.samples:
                owner = sample.labels.get("job")
                if sample.name.endswith("_created") or owner is None:
                    continue
                if owner.startswith(HOST_JOB_PREFIX) and name in HOST_FAMILIES:
                    stat, label = sample.labels.get("stat", "max"), HOST_FAMILIES[name]
                    if stat == "min" and name in HOST_FLAG_FAMILIES:
                        label += " (min)"
                    elif stat != "max":
                        continue
                    hosts.setdefault(owner[len(HOST_JOB_PREFIX):], {})[label] = sample.value
                elif split(owner)[0] == self.job and name in HARDWARE_FAMILIES and sample.labels.get("stat",
                                                                                                     "max") == "max":
                    label = HARDWARE_FAMILIES[name]
                    job[label] = max(job.get(label, float("-inf")), sample.value)
        return job, hosts


def list_jobs(api: str) -> list[dict[str, Any]] | None:
    """The root's jobs (`/api/v1/jobs`: job, world_size, last_step), or None when the root does not answer."""
    try:
        with urllib.request.urlopen(api.rstrip("/") + "/api/v1/jobs", timeout=5) as reply:
            return list(json.load(reply).get("jobs", []))
    except (OSError, ValueError):
        return None
