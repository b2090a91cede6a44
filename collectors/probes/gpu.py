"""GPU health from NVML (``nvidia-ml-py``, imported as ``pynvml``).

``open_gpu_probe()`` initialises NVML and returns a :class:`GpuProbe`, or ``None``
with one log line when there is no NVML library, no driver or no GPU: the agent
then runs without it. ``GpuProbe.sample()`` reads every field of every GPU once;
a field whose NVML call fails on a GPU for good (``NVMLError_NotSupported`` on a
GPU without HBM temperature, ECC turned off, an older architecture without row
remapping, ...: :data:`PERMANENT_ERRORS`) is disabled for that GPU only, with one
warning, and the other fields and GPUs go on. Any other NVML error (``UNKNOWN``,
``TIMEOUT``, ``GPU_IS_LOST``, a driver busy resetting, ...) is taken as transient:
the field (for a lost GPU, the whole GPU) is tried again after a backoff that
doubles from :data:`RETRY_FIRST_S` to :data:`RETRY_MAX_S`, and reads again once
NVML answers (one bad answer used to disable the field for the agent's life).
Every failed NVML call is counted per GPU and field (``errors()``) and emitted as
the counter ``gpu.nvml_errors.<field>`` of that GPU once it failed. XID errors
arrive through an NVML event set waited on by a daemon thread with a bounded
wait, so ``close()`` returns within about ``xid_wait_ms``.

The metric names, their units and the dcgm-exporter field each corresponds to
are listed in :data:`GPU_METRICS` and in docs/hardware.md.
"""

from __future__ import annotations

import collections
import ctypes
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .base import CounterTracker, HardwareEvent, Reading

LOG = logging.getLogger("collectors.probes.gpu")

#: NVML return codes that mean "this GPU will never answer this call" (the hardware, driver or configuration
#: lacks it): the field is disabled for the probe's life. Every other NVML error is retried with a backoff.
PERMANENT_ERRORS = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_INVALID_ARGUMENT",
                    "NVML_ERROR_NO_PERMISSION", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH", "NVML_ERROR_DEPRECATED",
                    "NVML_ERROR_FREQ_NOT_SUPPORTED", "NVML_ERROR_VGPU_ECC_NOT_SUPPORTED",
                    "NVML_ERROR_RESET_TYPE_NOT_SUPPORTED")
#: The first retry of a field (or a lost GPU) after a transient error, and the longest wait between retries. No
#: jitter: a host's one agent retries its own driver, there is no crowd of clients to spread out.
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
#: The counter of failed NVML calls per GPU and field, emitted as ``gpu.nvml_errors.<field>_total``/``_delta``.
NVML_ERRORS_METRIC = "gpu.nvml_errors"

# Clock-event ("throttle") reason bits, as in nvml.h (nvmlClocksEventReason*;
# the same values as the deprecated nvmlClocksThrottleReason* names).
REASON_GPU_IDLE = 0x0001
REASON_APPLICATIONS_CLOCKS = 0x0002
REASON_SW_POWER_CAP = 0x0004
REASON_HW_SLOWDOWN = 0x0008
REASON_SYNC_BOOST = 0x0010
REASON_SW_THERMAL = 0x0020
REASON_HW_THERMAL = 0x0040
REASON_HW_POWER_BRAKE = 0x0080
REASON_DISPLAY_CLOCKS = 0x0100

#: Bits that mean "slowed down because it is hot".
THERMAL_REASONS = REASON_SW_THERMAL | REASON_HW_THERMAL
#: Bits that mean "slowed down to stay within a power limit".
POWER_REASONS = REASON_SW_POWER_CAP | REASON_HW_POWER_BRAKE
#: Bits that are not a slowdown at all (an idle GPU drops its clocks).
NOT_THROTTLE_REASONS = REASON_GPU_IDLE


def decode_clock_event_reasons(mask: int) -> tuple[int, int, int]:
    """(thermal, power, other) as 0/1 from an NVML clock-event reasons bitmask.

    *other* is any remaining bit except GPU idle: HW slowdown (which NVML raises
    for over-temperature, an external power brake or fast-trigger power
    protection without saying which), sync boost, applications or display clock
    settings, and bits newer drivers add (board limit, reliability).
    """
    mask = int(mask)
    thermal = 1 if mask & THERMAL_REASONS else 0
    power = 1 if mask & POWER_REASONS else 0
    other = 1 if mask & ~(THERMAL_REASONS | POWER_REASONS | NOT_THROTTLE_REASONS) else 0
    return thermal, power, other


#: Short meanings of the XID codes that matter most in training fleets (from
#: NVIDIA's XID catalogue); any other code is still reported, with no text.
XID_DESCRIPTIONS: dict[int, str] = {
    8: "GPU stopped processing (timeout)",
    13: "graphics engine exception",
    31: "GPU memory page fault",
    32: "invalid or corrupted push buffer stream",
    38: "driver firmware error",
    43: "GPU stopped processing",
    45: "preemptive cleanup, due to previous errors",
    48: "double-bit ECC error",
    61: "internal micro-controller breakpoint/warning",
    62: "internal micro-controller halt",
    63: "ECC page retirement or row remapping recording event",
    64: "ECC page retirement or row remapper recording failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


@dataclass(frozen=True, slots=True)
class MetricSpec:
    unit: str
    kind: str  # "gauge", "counter" (exported as _total and _delta), "flag" (0/1)
    dcgm: str  # the dcgm-exporter field with the same meaning, "" when none
    help: str


#: Every metric the GPU probe can emit, by base name (a counter ``X`` is emitted
#: as ``X_total`` and ``X_delta``). docs/hardware.md carries the same table.
GPU_METRICS: dict[str, MetricSpec] = {
    "gpu.temperature_celsius": MetricSpec("C", "gauge", "DCGM_FI_DEV_GPU_TEMP", "GPU core temperature"),
    "gpu.memory_temperature_celsius": MetricSpec("C", "gauge", "DCGM_FI_DEV_MEMORY_TEMP", "HBM temperature"),
    "gpu.power_watts": MetricSpec("W", "gauge", "DCGM_FI_DEV_POWER_USAGE", "power draw"),
    "gpu.power_limit_watts": MetricSpec(
        "W", "gauge", "DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "enforced power limit"
    ),
    "gpu.sm_clock_mhz": MetricSpec("MHz", "gauge", "DCGM_FI_DEV_SM_CLOCK", "SM clock"),
    "gpu.memory_clock_mhz": MetricSpec("MHz", "gauge", "DCGM_FI_DEV_MEM_CLOCK", "memory clock"),
    "gpu.clocks_event_reasons": MetricSpec(
        "bitmask",
        "gauge",
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS (was DCGM_FI_DEV_CLOCK_THROTTLE_REASONS)",
        "raw clock-event (throttle) reasons mask",
    ),
    "gpu.throttle_thermal": MetricSpec("0/1", "flag", "", "SW or HW thermal slowdown active"),
    "gpu.throttle_power": MetricSpec("0/1", "flag", "", "SW power cap or HW power brake active"),
    "gpu.throttle_other": MetricSpec("0/1", "flag", "", "any other slowdown reason except idle"),
    "gpu.utilization_percent": MetricSpec("%", "gauge", "DCGM_FI_DEV_GPU_UTIL", "time a kernel was running"),
    "gpu.memory_utilization_percent": MetricSpec(
        "%", "gauge", "DCGM_FI_DEV_MEM_COPY_UTIL", "time device memory was read or written"
    ),
    "gpu.memory_used_bytes": MetricSpec(
        "bytes", "gauge", "DCGM_FI_DEV_FB_USED (MiB there)", "framebuffer memory used"
    ),
    "gpu.memory_total_bytes": MetricSpec(
        "bytes", "gauge", "DCGM_FI_DEV_FB_TOTAL (MiB there)", "framebuffer memory size"
    ),
    "gpu.ecc_corrected": MetricSpec(
        "errors", "counter", "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "corrected ECC errors since driver load"
    ),
    "gpu.ecc_uncorrected": MetricSpec(
        "errors", "counter", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "uncorrected ECC errors since driver load"
    ),
    "gpu.remapped_rows_correctable": MetricSpec(
        "rows", "counter", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "rows remapped for correctable errors"
    ),
    "gpu.remapped_rows_uncorrectable": MetricSpec(
        "rows", "counter", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "rows remapped for uncorrectable errors"
    ),
    "gpu.row_remap_pending": MetricSpec(
        "0/1", "flag", "DCGM_FI_DEV_ROW_REMAP_PENDING", "a remap waits for the next GPU reset"
    ),
    "gpu.row_remap_failure": MetricSpec(
        "0/1", "flag", "DCGM_FI_DEV_ROW_REMAP_FAILURE", "a remap failed: the GPU needs service"
    ),
    "gpu.pcie_replay": MetricSpec("replays", "counter", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "PCIe replays"),
    "gpu.nvlink_crc_flit_errors": MetricSpec(
        "errors",
        "counter",
        "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL",
        "NVLink flow-control CRC errors, summed over links",
    ),
    "gpu.nvlink_crc_data_errors": MetricSpec(
        "errors",
        "counter",
        "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL",
        "NVLink data CRC errors, summed over links",
    ),
    "gpu.nvlink_replay_errors": MetricSpec(
        "errors", "counter", "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL", "NVLink replays, summed over links"
    ),
    "gpu.nvlink_recovery_errors": MetricSpec(
        "errors",
        "counter",
        "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL",
        "NVLink link recoveries, summed over links",
    ),
    "gpu.energy_joules": MetricSpec(
        "J", "counter", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ there)", "energy since driver load"
    ),
    "gpu.xid_errors": MetricSpec("events", "counter", "", "XID events seen by this probe since it started"),
    "gpu.xid_last_code": MetricSpec(
        "code", "gauge", "DCGM_FI_DEV_XID_ERRORS", "code of the last XID (emitted once one was seen)"
    ),
}


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """Identity of one GPU. Map a rank to its GPU by ``uuid``: CUDA's device
    order (FASTEST_FIRST by default, renumbered by CUDA_VISIBLE_DEVICES) need not
    match NVML's PCI-bus order."""

    index: int
    uuid: str
    name: str

    @property
    def device(self) -> str:
        return f"gpu{self.index}"


@dataclass(slots=True)
class _Retry:
    """A field (or a lost GPU's, under ``"*"``) failing transiently: how many times in a row, when to try again."""

    failures: int
    at: float  # clock() from which to try again


@dataclass(slots=True, eq=False)
class _Gpu:
    info: GpuInfo
    handle: Any
    disabled: set[str] = field(default_factory=set)
    nvlinks: tuple[int, ...] = ()
    retry: dict[str, _Retry] = field(default_factory=dict)  # fields failing transiently ("*": the lost GPU)
    errors: dict[str, int] = field(default_factory=dict)  # failed NVML calls per field, for the probe's life
    xid_registered: bool = False
    xid_count: int = 0

    @property
    def lost(self) -> bool:
        """NVML said the GPU is lost, and it has not answered since (its retry is kept under "*")."""
        return "*" in self.retry
    xid_last: int | None = None


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _handle_key(handle: Any) -> Any:
    """A hashable identity for an NVML device handle (a ctypes pointer)."""
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return handle


# nvmlValue_t is a union: which member holds the number, by nvmlFieldValue_t.valueType.
_VALUE_MEMBERS = (("NVML_VALUE_TYPE_DOUBLE", "dVal"), ("NVML_VALUE_TYPE_UNSIGNED_INT", "uiVal"),
                  ("NVML_VALUE_TYPE_UNSIGNED_LONG", "ulVal"), ("NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", "ullVal"),
                  ("NVML_VALUE_TYPE_SIGNED_LONG_LONG", "sllVal"), ("NVML_VALUE_TYPE_SIGNED_INT", "siVal"),
                  ("NVML_VALUE_TYPE_UNSIGNED_SHORT", "usVal"))


def _field_value(nv: Any, fv: Any) -> float:
    """The number in one nvmlFieldValue_t, or raise its NVML error."""
    if fv.nvmlReturn != nv.NVML_SUCCESS:
        raise nv.NVMLError(fv.nvmlReturn)
    vt = fv.valueType
    for value_type, member in _VALUE_MEMBERS:
        if vt == getattr(nv, value_type):
            return float(getattr(fv.value, member))
    raise ValueError(f"unknown NVML value type {vt}")


# One field: (name, reader). A reader returns (metric, value, is_counter) triples.
_Values = list[tuple[str, float, bool]]


class GpuProbe:
    """Samples every GPU NVML sees. Build it with :func:`open_gpu_probe`."""

    name = "gpu"

    def __init__(
        self,
        nvml: Any,
        gpus: list[tuple[GpuInfo, Any]],
        *,
        log: logging.Logger = LOG,
        xid_wait_ms: int = 500,
        max_events: int = 1024,
        events: bool = True,
        nvlink_every: int = 1,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._nv = nvml
        self._clock = clock  # when a field failing transiently is tried again (tests pass their own)
        self._permanent = {getattr(nvml, name) for name in PERMANENT_ERRORS if hasattr(nvml, name)}
        # NVLink error counters cost 4 NVML calls per active link (72 on an
        # 18-link H100); read them on every Nth sample only when that matters.
        self._nvlink_every = max(1, int(nvlink_every))
        self._samples = 0
        self._log = log
        self._gpus = [_Gpu(info, handle) for info, handle in gpus]
        self._by_handle = {_handle_key(g.handle): g for g in self._gpus}
        self._counters = CounterTracker()
        self._fn_choice: dict[tuple[str, ...], int] = {}
        self._lock = threading.Lock()
        self._events: collections.deque[HardwareEvent] = collections.deque(maxlen=max_events)
        self.events_dropped = 0
        self._xid_wait_ms = int(xid_wait_ms)
        self._stop = threading.Event()
        self._event_set: Any = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._fields: list[tuple[str, Callable[[_Gpu], _Values]]] = [
            ("temperature", self._read_temperature),
            ("memory_temperature", self._read_memory_temperature),
            ("power", self._read_power),
            ("power_limit", self._read_power_limit),
            ("sm_clock", self._read_sm_clock),
            ("memory_clock", self._read_memory_clock),
            ("clocks_event_reasons", self._read_clock_event_reasons),
            ("utilization", self._read_utilization),
            ("memory", self._read_memory),
            ("ecc_corrected", self._read_ecc_corrected),
            ("ecc_uncorrected", self._read_ecc_uncorrected),
            ("remapped_rows", self._read_remapped_rows),
            ("pcie_replay", self._read_pcie_replay),
            ("nvlink_crc_flit", self._nvlink_reader("gpu.nvlink_crc_flit_errors", "NVML_NVLINK_ERROR_DL_CRC_FLIT")),
            ("nvlink_crc_data", self._nvlink_reader("gpu.nvlink_crc_data_errors", "NVML_NVLINK_ERROR_DL_CRC_DATA")),
            ("nvlink_replay", self._nvlink_reader("gpu.nvlink_replay_errors", "NVML_NVLINK_ERROR_DL_REPLAY")),
            ("nvlink_recovery", self._nvlink_reader("gpu.nvlink_recovery_errors", "NVML_NVLINK_ERROR_DL_RECOVERY")),
            ("energy", self._read_energy),
        ]
        for g in self._gpus:
            g.nvlinks = self._discover_nvlinks(g)
        if events:
            self._start_event_thread()

    # ----------------------------------------------------------------- public

    @property
    def gpus(self) -> list[GpuInfo]:
        return [g.info for g in self._gpus]

    def disabled_fields(self) -> dict[int, set[str]]:
        """{gpu index: names of the fields disabled on it for good} (``"*"`` for a GPU lost now)."""
        return {g.info.index: set(g.disabled) | ({"*"} if g.lost else set()) for g in self._gpus}

    def retrying_fields(self) -> dict[int, set[str]]:
        """{gpu index: names of the fields failing transiently, tried again after a backoff} (``"*"``: lost)."""
        return {g.info.index: set(g.retry) for g in self._gpus}

    def errors(self) -> dict[int, dict[str, int]]:
        """{gpu index: {field: failed NVML calls}} since the probe opened (a lost GPU's under its first field)."""
        return {g.info.index: dict(g.errors) for g in self._gpus}

    def sample(self) -> list[Reading]:
        out: list[Reading] = []
        if self._closed:
            return out
        skip_nvlink = self._samples % self._nvlink_every != 0
        self._samples += 1
        now = self._clock()
        for g in self._gpus:
            if g.lost and now < g.retry["*"].at:
                continue
            dev = g.info.device
            idx = g.info.index
            for fname, reader in self._fields:
                if fname in g.disabled or (skip_nvlink and fname.startswith("nvlink_")):
                    continue
                waiting = g.retry.get(fname)
                if waiting is not None and now < waiting.at:
                    continue
                try:
                    values = reader(g)
                except Exception as exc:  # a failure backs off or disables the field, never the probe
                    self._field_failed(g, fname, exc, now)
                    if g.lost:
                        break
                    continue
                if g.lost:
                    self._found_again(g)
                if waiting is not None:
                    del g.retry[fname]
                    self._log.warning("GPU probe: field %r on %s reads again after %d failed tr%s", fname, dev,
                                      waiting.failures, "y" if waiting.failures == 1 else "ies")
                for metric, value, is_counter in values:
                    if is_counter:
                        self._counters.emit(out, metric, value, idx, dev)
                    else:
                        out.append(Reading(metric, float(value), idx, dev))
            if g.xid_registered and not g.lost:
                with self._lock:
                    count, last = g.xid_count, g.xid_last
                self._counters.emit(out, "gpu.xid_errors", count, idx, dev)
                if last is not None:
                    out.append(Reading("gpu.xid_last_code", float(last), idx, dev))
            if not g.lost:
                for fname, count in g.errors.items():
                    self._counters.emit(out, f"{NVML_ERRORS_METRIC}.{fname}", count, idx, dev)
        return out

    def drain_events(self) -> list[HardwareEvent]:
        out: list[HardwareEvent] = []
        while True:
            try:
                out.append(self._events.popleft())
            except IndexError:
                return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout=self._xid_wait_ms / 1000.0 + 2.0)
            if thread.is_alive():
                # Freeing the set or shutting NVML down under a waiting thread is
                # unsafe; leave both to process exit.
                self._log.warning("GPU probe: XID event thread did not stop; leaving NVML initialised")
                return
        nv = self._nv
        if self._event_set is not None:
            try:
                nv.nvmlEventSetFree(self._event_set)
            except Exception as exc:
                self._log.debug("nvmlEventSetFree failed: %s", exc)
            self._event_set = None
        try:
            nv.nvmlShutdown()
        except Exception as exc:
            self._log.debug("nvmlShutdown failed: %s", exc)

    def __enter__(self) -> GpuProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---------------------------------------------------------------- fields

    def _call(self, names: tuple[str, ...], *args: Any) -> Any:
        """Call the first of ``names`` the driver has (newest first), remembering the choice."""
        nv = self._nv
        i = self._fn_choice.get(names, 0)
        while True:
            try:
                return getattr(nv, names[i])(*args)
            except nv.NVMLError_FunctionNotFound:
                if i + 1 >= len(names):
                    raise
                i += 1
                self._fn_choice[names] = i

    def _read_temperature(self, g: _Gpu) -> _Values:
        t = self._call(
            ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetTemperature"), g.handle, self._nv.NVML_TEMPERATURE_GPU
        )
        return [("gpu.temperature_celsius", t, False)]

    def _read_memory_temperature(self, g: _Gpu) -> _Values:
        nv = self._nv
        (fv,) = nv.nvmlDeviceGetFieldValues(g.handle, [nv.NVML_FI_DEV_MEMORY_TEMP])
        return [("gpu.memory_temperature_celsius", _field_value(nv, fv), False)]

    def _read_power(self, g: _Gpu) -> _Values:
        return [("gpu.power_watts", self._nv.nvmlDeviceGetPowerUsage(g.handle) / 1000.0, False)]

    def _read_power_limit(self, g: _Gpu) -> _Values:
        return [("gpu.power_limit_watts", self._nv.nvmlDeviceGetEnforcedPowerLimit(g.handle) / 1000.0, False)]

    def _read_sm_clock(self, g: _Gpu) -> _Values:
        return [("gpu.sm_clock_mhz", self._nv.nvmlDeviceGetClockInfo(g.handle, self._nv.NVML_CLOCK_SM), False)]

    def _read_memory_clock(self, g: _Gpu) -> _Values:
        return [("gpu.memory_clock_mhz", self._nv.nvmlDeviceGetClockInfo(g.handle, self._nv.NVML_CLOCK_MEM), False)]

    def _read_clock_event_reasons(self, g: _Gpu) -> _Values:
        mask = int(
            self._call(
                ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"), g.handle
            )
        )
        thermal, power, other = decode_clock_event_reasons(mask)
        return [
            ("gpu.clocks_event_reasons", mask, False),
            ("gpu.throttle_thermal", thermal, False),
            ("gpu.throttle_power", power, False),
            ("gpu.throttle_other", other, False),
        ]

    def _read_utilization(self, g: _Gpu) -> _Values:
        u = self._nv.nvmlDeviceGetUtilizationRates(g.handle)
        return [("gpu.utilization_percent", u.gpu, False), ("gpu.memory_utilization_percent", u.memory, False)]

    def _read_memory(self, g: _Gpu) -> _Values:
        m = self._nv.nvmlDeviceGetMemoryInfo(g.handle)
        return [("gpu.memory_used_bytes", m.used, False), ("gpu.memory_total_bytes", m.total, False)]

    def _read_ecc_corrected(self, g: _Gpu) -> _Values:
        nv = self._nv
        n = nv.nvmlDeviceGetTotalEccErrors(g.handle, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC)
        return [("gpu.ecc_corrected", n, True)]

    def _read_ecc_uncorrected(self, g: _Gpu) -> _Values:
        nv = self._nv
        n = nv.nvmlDeviceGetTotalEccErrors(g.handle, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        return [("gpu.ecc_uncorrected", n, True)]

    def _read_remapped_rows(self, g: _Gpu) -> _Values:
        corr, unc, pending, failure = self._nv.nvmlDeviceGetRemappedRows(g.handle)
        return [
            ("gpu.remapped_rows_correctable", corr, True),
            ("gpu.remapped_rows_uncorrectable", unc, True),
            ("gpu.row_remap_pending", 1 if pending else 0, False),
            ("gpu.row_remap_failure", 1 if failure else 0, False),
        ]

    def _read_pcie_replay(self, g: _Gpu) -> _Values:
        return [("gpu.pcie_replay", self._nv.nvmlDeviceGetPcieReplayCounter(g.handle), True)]

    def _read_energy(self, g: _Gpu) -> _Values:
        return [("gpu.energy_joules", self._nv.nvmlDeviceGetTotalEnergyConsumption(g.handle) / 1000.0, True)]

    def _nvlink_reader(self, metric: str, counter_const: str) -> Callable[[_Gpu], _Values]:
        def read(g: _Gpu) -> _Values:
            if not g.nvlinks:
                return []
            nv = self._nv
            counter = getattr(nv, counter_const)
            total = 0
            for link in g.nvlinks:
                total += nv.nvmlDeviceGetNvLinkErrorCounter(g.handle, link, counter)
            return [(metric, total, True)]

        return read

    def _discover_nvlinks(self, g: _Gpu) -> tuple[int, ...]:
        """Links whose state NVML reports as active. No NVLink: an empty tuple, no log."""
        nv = self._nv
        links = []
        for link in range(int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))):
            try:
                if nv.nvmlDeviceGetNvLinkState(g.handle, link) == nv.NVML_FEATURE_ENABLED:
                    links.append(link)
            except Exception:  # NotSupported / InvalidArgument past the last link
                continue
        return tuple(links)

    def _field_failed(self, g: _Gpu, fname: str, exc: BaseException, now: float) -> None:
        """Count the failure; disable the field for good (PERMANENT_ERRORS, or not an NVML error: the probe could
        not make sense of the answer), or try again later: the field, or the whole GPU when NVML says it is lost
        (its other fields would only fail the same way meanwhile)."""
        nv = self._nv
        g.errors[fname] = g.errors.get(fname, 0) + 1
        nvml_error = getattr(nv, "NVMLError", None)
        code = getattr(exc, "value", None) if nvml_error is not None and isinstance(exc, nvml_error) else None
        if code is None or code in self._permanent:
            g.retry.pop(fname, None)
            g.disabled.add(fname)
            self._log.warning(
                "GPU probe: field %r disabled on %s: %s: %s", fname, g.info.device, type(exc).__name__, exc
            )
            return
        lost = code == getattr(nv, "NVML_ERROR_GPU_IS_LOST", None)
        key = "*" if lost else fname
        previous = g.retry.get(key)
        failures = 1 if previous is None else previous.failures + 1
        g.retry[key] = _Retry(failures, now + min(RETRY_MAX_S, RETRY_FIRST_S * 2.0 ** (failures - 1)))
        if lost and previous is None:
            self._log.error(
                "GPU probe: %s (%s) is lost (%s); no readings from it until NVML answers again (tried from %.0f s "
                "on, backing off to %.0f s)", g.info.device, g.info.uuid, exc, RETRY_FIRST_S, RETRY_MAX_S
            )
            self._push_event(
                HardwareEvent(
                    kind="gpu_lost",
                    gpu=g.info.index,
                    device=g.info.device,
                    code=int(getattr(exc, "value", 0) or 0),
                    time_ns=time.time_ns(),
                    detail=f"NVML: {exc}",
                )
            )
        elif previous is None and not lost:
            self._log.warning(
                "GPU probe: field %r on %s failed (%s: %s); trying again in %.0f s, backing off to %.0f s",
                fname, g.info.device, type(exc).__name__, exc, RETRY_FIRST_S, RETRY_MAX_S
            )

    def _found_again(self, g: _Gpu) -> None:
        """A lost GPU answered: sample it again (its counters start afresh: it may have been reset)."""
        failures = g.retry.pop("*").failures
        self._counters.forget(g.info.device)
        self._log.warning("GPU probe: %s (%s) answers again after %d failed tr%s", g.info.device, g.info.uuid,
                          failures, "y" if failures == 1 else "ies")

    # ---------------------------------------------------------------- events

    def _push_event(self, ev: HardwareEvent) -> None:
        with self._lock:
            if self._events.maxlen is not None and len(self._events) >= self._events.maxlen:
                self.events_dropped += 1
                if self.events_dropped == 1:
                    self._log.warning("GPU probe: event buffer full; dropping the oldest events (counted)")
            self._events.append(ev)

    def _start_event_thread(self) -> None:
        nv = self._nv
        try:
            es = nv.nvmlEventSetCreate()
        except Exception as exc:
            self._log.warning("GPU probe: XID events unavailable: nvmlEventSetCreate: %s", exc)
            return
        xid = nv.nvmlEventTypeXidCriticalError
        for g in self._gpus:
            try:
                supported = nv.nvmlDeviceGetSupportedEventTypes(g.handle)
                if not int(supported) & xid:
                    self._log.warning("GPU probe: XID events not supported on %s", g.info.device)
                    continue
                nv.nvmlDeviceRegisterEvents(g.handle, xid, es)
                g.xid_registered = True
            except Exception as exc:
                self._log.warning("GPU probe: XID events disabled on %s: %s: %s", g.info.device, type(exc).__name__,
                                  exc)
        if not any(g.xid_registered for g in self._gpus):
            try:
                nv.nvmlEventSetFree(es)
            except Exception:
                pass
            return
        self._event_set = es
        self._thread = threading.Thread(target=self._event_loop, name="nvml-xid-events", daemon=True)
        self._thread.start()

    def _event_loop(self) -> None:
        nv = self._nv
        es = self._event_set
        timeout_cls = nv.NVMLError_Timeout
        logged: set[str] = set()
        while not self._stop.is_set():
            try:
                data = nv.nvmlEventSetWait_v2(es, self._xid_wait_ms)
            except timeout_cls:
                continue
            except Exception as exc:  # keep waiting, but do not spin
                key = type(exc).__name__
                if key not in logged:
                    logged.add(key)
                    self._log.warning("GPU probe: waiting for XID events failed: %s: %s", key, exc)
                self._stop.wait(1.0)
                continue
            try:
                self._on_event(data)
            except Exception as exc:
                self._log.warning("GPU probe: could not decode an NVML event: %s", exc)

    def _on_event(self, data: Any) -> None:
        nv = self._nv
        if not int(data.eventType) & nv.nvmlEventTypeXidCriticalError:
            return
        code = int(data.eventData)
        g = self._by_handle.get(_handle_key(data.device))
        detail = f"XID {code}"
        if code in XID_DESCRIPTIONS:
            detail += f": {XID_DESCRIPTIONS[code]}"
        gi = int(getattr(data, "gpuInstanceId", 0xFFFFFFFF))
        ci = int(getattr(data, "computeInstanceId", 0xFFFFFFFF))
        if gi != 0xFFFFFFFF:
            detail += f" (MIG GPU instance {gi}" + (f", compute instance {ci})" if ci != 0xFFFFFFFF else ")")
        if g is not None:
            with self._lock:
                g.xid_count += 1
                g.xid_last = code
            gpu, device = g.info.index, g.info.device
        else:
            gpu, device = None, "gpu?"
        self._push_event(HardwareEvent("xid", gpu, device, code, time.time_ns(), detail))


def open_gpu_probe(
    log: logging.Logger = LOG,
    *,
    nvml: Any = None,
    xid_wait_ms: int = 500,
    events: bool = True,
    nvlink_every: int = 1,
    clock: Callable[[], float] = time.monotonic,
) -> GpuProbe | None:
    """Initialise NVML and return a probe over every GPU it sees.

    Returns ``None`` with exactly one log line when nvidia-ml-py is missing, NVML
    cannot initialise (no library, no driver), or it sees no GPU. ``nvml`` replaces
    the ``pynvml`` module (tests and the benchmark pass a double). ``nvlink_every``
    reads the NVLink error counters on every Nth sample only (their deltas then
    cover N samples).
    """
    if nvml is None:
        try:
            import pynvml  # an optional dependency: imported only when no double is given
        except ImportError as exc:
            log.warning("GPU probe disabled: nvidia-ml-py (pynvml) is not installed (%s)", exc)
            return None
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:
        log.warning(
            "GPU probe disabled: NVML could not initialise (%s: %s); no NVIDIA driver or GPU on this host?",
            type(exc).__name__,
            exc,
        )
        return None
    gpus: list[tuple[GpuInfo, Any]] = []
    skipped: list[str] = []
    try:
        count = int(nvml.nvmlDeviceGetCount())
        for i in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
            except Exception as exc:  # e.g. NoPermission when a cgroup hides it
                skipped.append(f"gpu{i} ({type(exc).__name__})")
                continue
            try:
                uuid = _text(nvml.nvmlDeviceGetUUID(handle))
            except Exception:
                uuid = ""
            try:
                name = _text(nvml.nvmlDeviceGetName(handle))
            except Exception:
                name = ""
            gpus.append((GpuInfo(i, uuid, name), handle))
    except Exception as exc:
        _shutdown_quietly(nvml)
        log.warning("GPU probe disabled: NVML could not list GPUs (%s: %s)", type(exc).__name__, exc)
        return None
    if not gpus:
        _shutdown_quietly(nvml)
        why = (f"none of its {len(skipped)} GPU(s) could be opened: {', '.join(skipped)}" if skipped
               else "it sees no GPU")
        log.warning("GPU probe disabled: NVML initialised but %s", why)
        return None
    probe = GpuProbe(nvml, gpus, log=log, xid_wait_ms=xid_wait_ms, events=events, nvlink_every=nvlink_every,
                     clock=clock)
    log.info(
        "GPU probe: %d GPU(s): %s%s",
        len(gpus),
        ", ".join(f"{info.device}={info.name or '?'} {info.uuid}" for info, _ in gpus),
        f"; skipped {', '.join(skipped)}" if skipped else "",
    )
    return probe


def _shutdown_quietly(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass
