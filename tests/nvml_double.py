"""A TEST DOUBLE of nvidia-ml-py's ``pynvml`` module. Not NVML.

It answers the subset of ``pynvml`` calls the GPU probe makes, with the same
names, signatures, return types (the real ctypes structures where pynvml
returns one) and exception classes (the real ``pynvml.NVMLError_*``), from
values a test or benchmark sets. It exists so the probe's *parsing* of NVML's
answers can be checked, and its CPU cost measured, on machines without a GPU.
It says nothing about what a real driver returns, or how long NVML takes.
It lives with the tests (it was collectors/probes/nvml_double.py, shipped in the
package): the tests and bench/probe_cost.py use it; nothing the package runs does.

    nv = FakeNvml(gpus=8)
    nv.gpus[3].fail["nvmlDeviceGetTotalEccErrors"] = nv.NVML_ERROR_NOT_SUPPORTED
    probe = open_gpu_probe(nvml=nv)
"""

from __future__ import annotations

import ctypes
import queue
import threading
from dataclasses import dataclass, field
from typing import Any

import pynvml

_COPIED_PREFIXES = ("NVML_", "NVMLError", "nvmlClocksEventReason", "nvmlClocksThrottleReason", "nvmlEventType")


@dataclass
class FakeGpu:
    """What the double reports for one GPU. Tests change these between samples."""

    index: int
    name: bytes = b"NVIDIA H100 80GB HBM3 (double)"
    temperature: int = 45
    memory_temperature: float = 52.0
    power_mw: int = 310_000
    power_limit_mw: int = 700_000
    sm_clock: int = 1980
    memory_clock: int = 2619
    clock_event_reasons: int = 0
    util_gpu: int = 97
    util_memory: int = 41
    memory_used: int = 61 * 2**30
    memory_total: int = 80 * 2**30
    ecc_corrected: int = 0
    ecc_uncorrected: int = 0
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # correctable, uncorrectable, pending, failure
    pcie_replay: int = 0
    nvlinks: int = 18
    #: per (link, counter) value; missing = 0
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)
    energy_mj: int = 1_000_000
    supported_events: int = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
    #: pynvml function name -> NVML error code that call raises on this GPU
    fail: dict[str, int] = field(default_factory=dict)
    #: pynvml function name -> number of times it was called for this GPU
    calls: dict[str, int] = field(default_factory=dict)

    @property
    def uuid(self) -> bytes:
        return f"GPU-00000000-0000-0000-0000-{self.index:012d}".encode()


class _EventSet:
    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()
        self.devices: dict[int, int] = {}  # handle address -> registered mask
        self.freed = False


class FakeNvml:
    """Stands in for the ``pynvml`` module (see the module docstring)."""

    def __init__(
        self,
        gpus: int = 8,
        *,
        init_error: int | None = None,
        missing_functions: tuple[str, ...] = (),
    ) -> None:
        for name in dir(pynvml):
            if name.startswith(_COPIED_PREFIXES):
                setattr(self, name, getattr(pynvml, name))
        self.gpus = [FakeGpu(i) for i in range(gpus)]
        # Real ctypes handles (distinct addresses), as nvmlDeviceGetHandleByIndex returns.
        self._structs = [pynvml.struct_c_nvmlDevice_t() for _ in range(gpus)]
        self._handles = [ctypes.pointer(s) for s in self._structs]
        self._by_addr = {ctypes.addressof(s): g for s, g in zip(self._structs, self.gpus)}
        self.init_error = init_error
        #: functions the "driver" lacks: they raise NVMLError_FunctionNotFound
        self.missing_functions = set(missing_functions)
        self.initialised = 0
        self.event_sets: list[_EventSet] = []
        self.lock = threading.Lock()

    # -- helpers for tests -------------------------------------------------

    def inject_xid(self, gpu: int, code: int) -> None:
        """Deliver an XID event for GPU ``gpu`` to every event set it is registered in."""
        handle = self._handles[gpu]
        addr = ctypes.addressof(handle.contents)
        for es in self.event_sets:
            mask = es.devices.get(addr, 0)
            if mask & pynvml.nvmlEventTypeXidCriticalError:
                data = pynvml.c_nvmlEventData_t()
                # A fresh pointer object to the same device, as NVML hands back.
                data.device = ctypes.cast(ctypes.c_void_p(addr), pynvml.c_nvmlDevice_t)
                data.eventType = pynvml.nvmlEventTypeXidCriticalError
                data.eventData = code
                data.gpuInstanceId = 0xFFFFFFFF
                data.computeInstanceId = 0xFFFFFFFF
                es.queue.put(data)

    def _gpu(self, handle: Any, fn: str) -> FakeGpu:
        if fn in self.missing_functions:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        g = self._by_addr[ctypes.addressof(handle.contents)]
        g.calls[fn] = g.calls.get(fn, 0) + 1
        code = g.fail.get(fn)
        if code is not None:
            raise pynvml.NVMLError(code)
        return g

    def _check(self, fn: str) -> None:
        if fn in self.missing_functions:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    # -- the pynvml surface the probe uses (same names and parameters) ------

    def nvmlInit(self):
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self):
        self.initialised -= 1

    def nvmlDeviceGetCount(self):
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        if not 0 <= index < len(self._handles):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self._gpu(self._handles[index], "nvmlDeviceGetHandleByIndex")
        return self._handles[index]

    def nvmlDeviceGetUUID(self, handle):
        return self._gpu(handle, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, handle):
        return self._gpu(handle, "nvmlDeviceGetName").name

    def nvmlDeviceGetTemperatureV(self, handle, sensor, version=pynvml.nvmlTemperature_v1):
        g = self._gpu(handle, "nvmlDeviceGetTemperatureV")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature

    def nvmlDeviceGetTemperature(self, handle, sensor):
        g = self._gpu(handle, "nvmlDeviceGetTemperature")
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.temperature

    def nvmlDeviceGetFieldValues(self, handle, fieldIds):
        g = self._gpu(handle, "nvmlDeviceGetFieldValues")
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        for i, fid in enumerate(fieldIds):
            values[i].fieldId = fid
            if fid == pynvml.NVML_FI_DEV_MEMORY_TEMP and g.memory_temperature is not None:
                values[i].nvmlReturn = pynvml.NVML_SUCCESS
                values[i].valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
                values[i].value.uiVal = int(g.memory_temperature)
            else:
                values[i].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    def nvmlDeviceGetPowerUsage(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return self._gpu(handle, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle, type):
        g = self._gpu(handle, "nvmlDeviceGetClockInfo")
        if type == pynvml.NVML_CLOCK_SM:
            return g.sm_clock
        if type == pynvml.NVML_CLOCK_MEM:
            return g.memory_clock
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksEventReasons").clock_event_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle):
        return self._gpu(handle, "nvmlDeviceGetCurrentClocksThrottleReasons").clock_event_reasons

    def nvmlDeviceGetUtilizationRates(self, handle):
        g = self._gpu(handle, "nvmlDeviceGetUtilizationRates")
        u = pynvml.c_nvmlUtilization_t()
        u.gpu, u.memory = g.util_gpu, g.util_memory
        return u

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        g = self._gpu(handle, "nvmlDeviceGetMemoryInfo")
        m = pynvml.c_nvmlMemory_t()
        m.total, m.used, m.free = g.memory_total, g.memory_used, g.memory_total - g.memory_used
        return m

    def nvmlDeviceGetTotalEccErrors(self, handle, errorType, counterType):
        g = self._gpu(handle, "nvmlDeviceGetTotalEccErrors")
        if counterType != pynvml.NVML_VOLATILE_ECC:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED:
            return g.ecc_corrected
        if errorType == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED:
            return g.ecc_uncorrected
        raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    def nvmlDeviceGetRemappedRows(self, device):
        return tuple(self._gpu(device, "nvmlDeviceGetRemappedRows").remapped_rows)

    def nvmlDeviceGetPcieReplayCounter(self, handle):
        return self._gpu(handle, "nvmlDeviceGetPcieReplayCounter").pcie_replay

    def nvmlDeviceGetNvLinkState(self, device, link):
        g = self._gpu(device, "nvmlDeviceGetNvLinkState")
        if link >= g.nvlinks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkErrorCounter(self, device, link, counter):
        g = self._gpu(device, "nvmlDeviceGetNvLinkErrorCounter")
        if link >= g.nvlinks:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return g.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        return self._gpu(handle, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlEventSetCreate(self):
        self._check("nvmlEventSetCreate")
        es = _EventSet()
        self.event_sets.append(es)
        return es

    def nvmlDeviceGetSupportedEventTypes(self, handle):
        return self._gpu(handle, "nvmlDeviceGetSupportedEventTypes").supported_events

    def nvmlDeviceRegisterEvents(self, handle, eventTypes, eventSet):
        g = self._gpu(handle, "nvmlDeviceRegisterEvents")
        if eventTypes & ~g.supported_events:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        addr = ctypes.addressof(handle.contents)
        eventSet.devices[addr] = eventSet.devices.get(addr, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet, timeoutms):
        self._check("nvmlEventSetWait_v2")
        try:
            return eventSet.queue.get(timeout=timeoutms / 1000.0)
        except queue.Empty:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, eventSet):
        eventSet.freed = True
