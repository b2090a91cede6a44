"""Hardware probes for the node agent: GPU (NVML), NIC/InfiniBand (sysfs), process liveness.

    from collectors.probes import open_gpu_probe, NicProbe, process_status, classify

    probes = [p for p in (open_gpu_probe(), NicProbe("/sys")) if p is not None]
    readings = [r for p in probes for r in p.sample()]      # once per interval
    events = [e for p in probes for e in p.drain_events()]  # XIDs, lost GPUs
    ...
    for p in probes: p.close()

See docs/hardware.md for every metric, its unit and its dcgm-exporter meaning.
"""

from .base import METRIC_NAME_RE, HardwareEvent, Probe, Reading, counter_delta
from .gpu import GPU_METRICS, GpuInfo, GpuProbe, decode_clock_event_reasons, open_gpu_probe
from .nic import NicProbe, parse_port_state, parse_rate_gbps
from .process import ProcessStatus, classify, parse_stat, process_status

__all__ = [
    "GPU_METRICS",
    "METRIC_NAME_RE",
    "GpuInfo",
    "GpuProbe",
    "HardwareEvent",
    "NicProbe",
    "Probe",
    "ProcessStatus",
    "Reading",
    "classify",
    "counter_delta",
    "decode_clock_event_reasons",
    "open_gpu_probe",
    "parse_port_state",
    "parse_rate_gbps",
    "parse_stat",
    "process_status",
]
