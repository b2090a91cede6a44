"""GPU probe tests.

THESE TESTS USE A TEST DOUBLE OF NVML (tests/nvml_double.py), NOT A
GPU. The double answers pynvml's calls with pynvml's own names, signatures,
ctypes structures and exception classes, from values the test sets. What is
tested is only the probe's *parsing* of those answers (units, decoding, deltas,
per-GPU per-field disabling, the XID event thread). Whether a real driver
answers the same way is not tested here.

The one test that touches the real library is the no-GPU path: on a machine
without a driver, nvmlInit() fails and open_gpu_probe() must return None with
one log line.
"""

from __future__ import annotations

import inspect
import logging
import re
import time
from pathlib import Path

import pynvml
import pytest

from collectors.probes import (
    GPU_METRICS,
    METRIC_NAME_RE,
    HardwareEvent,
    Probe,
    Reading,
    decode_clock_event_reasons,
    open_gpu_probe,
)
from collectors.probes.gpu import (
    REASON_GPU_IDLE,
    REASON_HW_POWER_BRAKE,
    REASON_HW_SLOWDOWN,
    REASON_HW_THERMAL,
    REASON_SW_POWER_CAP,
    REASON_SW_THERMAL,
    REASON_SYNC_BOOST,
    RETRY_FIRST_S,
    RETRY_MAX_S,
)
from nvml_double import FakeNvml

REPO = Path(__file__).resolve().parent.parent


def by_key(readings: list[Reading]) -> dict[tuple[int | None, str], float]:
    out = {}
    for r in readings:
        key = (r.gpu, r.metric)
        assert key not in out, f"duplicate reading {key}"
        out[key] = r.value
    return out


@pytest.fixture
def log() -> logging.Logger:
    return logging.getLogger("test.gpu_probe")


def open_double(nv: FakeNvml, log: logging.Logger, **kw):
    probe = open_gpu_probe(log=log, nvml=nv, xid_wait_ms=kw.pop("xid_wait_ms", 50), **kw)
    assert probe is not None
    return probe


def test_double_matches_real_pynvml_surface() -> None:
    """Every pynvml function the double stands in for exists in nvidia-ml-py with the same parameters."""
    nv = FakeNvml(1)
    names = [n for n in dir(FakeNvml) if n.startswith("nvml")]
    assert len(names) > 20
    for name in names:
        real = getattr(pynvml, name, None)
        assert real is not None, f"pynvml has no {name}"
        real_params = list(inspect.signature(real).parameters)
        fake_params = list(inspect.signature(getattr(nv, name)).parameters)
        assert fake_params == real_params, (name, fake_params, real_params)
    # The constants the probe decodes with are pynvml's own.
    assert nv.nvmlClocksEventReasonSwThermalSlowdown == REASON_SW_THERMAL
    assert nv.nvmlClocksEventReasonHwThermalSlowdown == REASON_HW_THERMAL
    assert nv.nvmlClocksEventReasonSwPowerCap == REASON_SW_POWER_CAP
    assert nv.nvmlClocksEventReasonHwPowerBrakeSlowdown == REASON_HW_POWER_BRAKE
    assert nv.nvmlClocksEventReasonHwSlowdown == REASON_HW_SLOWDOWN
    assert nv.nvmlClocksEventReasonGpuIdle == REASON_GPU_IDLE


def test_sample_parses_every_field_on_8_gpus(log: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    nv = FakeNvml(8)
    g5 = nv.gpus[5]
    g5.temperature, g5.memory_temperature = 83, 91.0
    g5.power_mw, g5.power_limit_mw = 699_500, 700_000
    g5.sm_clock, g5.memory_clock = 1410, 1593
    g5.clock_event_reasons = REASON_SW_THERMAL | REASON_SW_POWER_CAP
    g5.util_gpu, g5.util_memory = 100, 63
    g5.memory_used, g5.memory_total = 70 * 2**30, 80 * 2**30
    g5.ecc_corrected, g5.ecc_uncorrected = 12, 1
    g5.remapped_rows = (3, 1, 1, 0)
    g5.pcie_replay = 42
    g5.nvlink_errors = {(0, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT): 2, (17, nv.NVML_NVLINK_ERROR_DL_CRC_FLIT): 5}
    g5.energy_mj = 123_456_789
    with caplog.at_level(logging.INFO, logger=log.name):
        probe = open_double(nv, log)
        try:
            assert isinstance(probe, Probe)
            assert [g.index for g in probe.gpus] == list(range(8))
            assert probe.gpus[5].uuid.startswith("GPU-") and probe.gpus[5].device == "gpu5"
            s = by_key(probe.sample())
        finally:
            probe.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "no field should fail"

    for gpu in range(8):
        for base, spec in GPU_METRICS.items():
            if base == "gpu.xid_last_code":
                continue  # only once an XID was seen
            name = base + "_total" if spec.kind == "counter" else base
            assert (gpu, name) in s, (gpu, name)
    assert all(METRIC_NAME_RE.match(m) for _, m in s)
    assert not any(m.endswith("_delta") for _, m in s), "first sample: no deltas"

    assert s[(5, "gpu.temperature_celsius")] == 83
    assert s[(5, "gpu.memory_temperature_celsius")] == 91
    assert s[(5, "gpu.power_watts")] == pytest.approx(699.5)  # NVML reports mW
    assert s[(5, "gpu.power_limit_watts")] == pytest.approx(700.0)
    assert s[(5, "gpu.sm_clock_mhz")] == 1410 and s[(5, "gpu.memory_clock_mhz")] == 1593
    assert s[(5, "gpu.clocks_event_reasons")] == REASON_SW_THERMAL | REASON_SW_POWER_CAP
    assert (s[(5, "gpu.throttle_thermal")], s[(5, "gpu.throttle_power")], s[(5, "gpu.throttle_other")]) == (1, 1, 0)
    assert (s[(0, "gpu.throttle_thermal")], s[(0, "gpu.throttle_power")], s[(0, "gpu.throttle_other")]) == (0, 0, 0)
    assert s[(5, "gpu.utilization_percent")] == 100 and s[(5, "gpu.memory_utilization_percent")] == 63
    assert s[(5, "gpu.memory_used_bytes")] == 70 * 2**30 and s[(5, "gpu.memory_total_bytes")] == 80 * 2**30
    assert s[(5, "gpu.ecc_corrected_total")] == 12 and s[(5, "gpu.ecc_uncorrected_total")] == 1
    assert s[(5, "gpu.remapped_rows_correctable_total")] == 3
    assert s[(5, "gpu.remapped_rows_uncorrectable_total")] == 1
    assert s[(5, "gpu.row_remap_pending")] == 1 and s[(5, "gpu.row_remap_failure")] == 0
    assert s[(5, "gpu.pcie_replay_total")] == 42
    assert s[(5, "gpu.nvlink_crc_flit_errors_total")] == 7  # summed over links 0 and 17
    assert s[(5, "gpu.nvlink_crc_data_errors_total")] == 0
    assert s[(5, "gpu.energy_joules_total")] == pytest.approx(123_456.789)  # NVML reports mJ
    assert s[(5, "gpu.xid_errors_total")] == 0


def test_counters_give_deltas_and_survive_resets(log: logging.Logger) -> None:
    nv = FakeNvml(2)
    probe = open_double(nv, log)
    try:
        probe.sample()
        g = nv.gpus[1]
        g.ecc_uncorrected += 2
        g.ecc_corrected += 40
        g.pcie_replay += 5
        g.energy_mj += 700_000  # 700 J in one second: 700 W average
        g.remapped_rows = (1, 0, 1, 0)
        g.nvlink_errors[(3, nv.NVML_NVLINK_ERROR_DL_REPLAY)] = 4
        g.nvlink_errors[(9, nv.NVML_NVLINK_ERROR_DL_REPLAY)] = 6
        g.nvlink_errors[(9, nv.NVML_NVLINK_ERROR_DL_RECOVERY)] = 1
        s = by_key(probe.sample())
        assert s[(1, "gpu.ecc_uncorrected_delta")] == 2
        assert s[(1, "gpu.ecc_corrected_delta")] == 40
        assert s[(1, "gpu.pcie_replay_delta")] == 5
        assert s[(1, "gpu.energy_joules_delta")] == pytest.approx(700.0)
        assert s[(1, "gpu.remapped_rows_correctable_delta")] == 1
        assert s[(1, "gpu.nvlink_replay_errors_delta")] == 10
        assert s[(1, "gpu.nvlink_recovery_errors_delta")] == 1
        assert s[(0, "gpu.ecc_uncorrected_delta")] == 0  # the other GPU did not move
        # Volatile ECC counts reset on driver reload / GPU reset: the new count is the increase.
        g.ecc_uncorrected = 1
        s = by_key(probe.sample())
        assert s[(1, "gpu.ecc_uncorrected_delta")] == 1
        assert s[(1, "gpu.ecc_uncorrected_total")] == 1
    finally:
        probe.close()


@pytest.mark.parametrize(
    ("mask", "expected"),
    [
        (0, (0, 0, 0)),
        (REASON_GPU_IDLE, (0, 0, 0)),
        (REASON_SW_THERMAL, (1, 0, 0)),
        (REASON_HW_THERMAL, (1, 0, 0)),
        (REASON_SW_POWER_CAP, (0, 1, 0)),
        (REASON_HW_POWER_BRAKE, (0, 1, 0)),
        (REASON_HW_SLOWDOWN, (0, 0, 1)),
        (REASON_SYNC_BOOST | REASON_GPU_IDLE, (0, 0, 1)),
        (0x200, (0, 0, 1)),  # a bit newer drivers added (board limit)
        (REASON_HW_THERMAL | REASON_SW_POWER_CAP | REASON_HW_SLOWDOWN, (1, 1, 1)),
    ],
)
def test_decode_clock_event_reasons(mask: int, expected: tuple[int, int, int]) -> None:
    assert decode_clock_event_reasons(mask) == expected


def test_one_field_failing_on_one_gpu_disables_only_that(log: logging.Logger, caplog: pytest.LogCaptureFixture) -> None:
    nv = FakeNvml(4)
    nv.gpus[2].fail["nvmlDeviceGetPcieReplayCounter"] = nv.NVML_ERROR_NOT_SUPPORTED
    nv.gpus[3].memory_temperature = None  # nvmlDeviceGetFieldValues answers NOT_SUPPORTED in the value
    probe = open_double(nv, log)
    try:
        with caplog.at_level(logging.WARNING, logger=log.name):
            samples = [by_key(probe.sample()) for _ in range(3)]
        for s in samples:
            assert (2, "gpu.pcie_replay_total") not in s
            assert (2, "gpu.temperature_celsius") in s and (2, "gpu.ecc_corrected_total") in s
            assert all((g, "gpu.pcie_replay_total") in s for g in (0, 1, 3))
            assert (3, "gpu.memory_temperature_celsius") not in s
            assert all((g, "gpu.memory_temperature_celsius") in s for g in (0, 1, 2))
        assert samples[2][(3, "gpu.pcie_replay_delta")] == 0
        # Not called again once disabled.
        assert nv.gpus[2].calls["nvmlDeviceGetPcieReplayCounter"] == 1
        warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 2, warnings
        assert "pcie_replay" in warnings[0] and "gpu2" in warnings[0] and "NotSupported" in warnings[0]
        assert "memory_temperature" in warnings[1] and "gpu3" in warnings[1]
        assert probe.disabled_fields() == {0: set(), 1: set(), 2: {"pcie_replay"}, 3: {"memory_temperature"}}
    finally:
        probe.close()


def test_older_driver_function_names_are_used_when_newer_are_missing(
    log: logging.Logger, caplog: pytest.LogCaptureFixture
) -> None:
    nv = FakeNvml(2, missing_functions=("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetTemperatureV"))
    nv.gpus[0].clock_event_reasons = REASON_HW_THERMAL
    probe = open_double(nv, log)
    try:
        with caplog.at_level(logging.WARNING, logger=log.name):
            probe.sample()
            s = by_key(probe.sample())
        assert s[(0, "gpu.throttle_thermal")] == 1
        assert s[(1, "gpu.temperature_celsius")] == 45
        assert not caplog.records
        assert nv.gpus[0].calls["nvmlDeviceGetCurrentClocksThrottleReasons"] == 2
        assert nv.gpus[0].calls["nvmlDeviceGetTemperature"] == 2
    finally:
        probe.close()


def test_xid_events_from_the_event_thread(log: logging.Logger) -> None:
    nv = FakeNvml(3)
    nv.gpus[2].supported_events = 0  # this GPU cannot deliver XIDs: the others still do
    probe = open_double(nv, log, xid_wait_ms=50)
    try:
        probe.sample()
        nv.inject_xid(1, 79)
        nv.inject_xid(1, 48)
        nv.inject_xid(0, 13)
        deadline = time.monotonic() + 5.0
        events: list[HardwareEvent] = []
        while len(events) < 3 and time.monotonic() < deadline:
            events += probe.drain_events()
            time.sleep(0.01)
        assert [(e.kind, e.gpu, e.device, e.code) for e in events] == [
            ("xid", 1, "gpu1", 79),
            ("xid", 1, "gpu1", 48),
            ("xid", 0, "gpu0", 13),
        ]
        assert "fallen off the bus" in events[0].detail
        assert all(e.time_ns > 0 for e in events)
        assert probe.drain_events() == []
        s = by_key(probe.sample())
        assert s[(1, "gpu.xid_errors_delta")] == 2 and s[(1, "gpu.xid_last_code")] == 48
        assert s[(0, "gpu.xid_errors_delta")] == 1
        assert (2, "gpu.xid_errors_total") not in s  # not registered
    finally:
        t0 = time.monotonic()
        probe.close()
        closed_in = time.monotonic() - t0
    assert closed_in < 1.0, f"close() took {closed_in:.2f}s"
    assert nv.event_sets[0].freed and nv.initialised == 0
    assert probe.sample() == []


def test_event_buffer_is_bounded_and_counts_drops(log: logging.Logger) -> None:
    nv = FakeNvml(1)
    probe = open_gpu_probe(log=log, nvml=nv, xid_wait_ms=20)
    assert probe is not None
    probe._events = type(probe._events)(maxlen=4)  # a small bound for the test
    try:
        for code in range(10):
            nv.inject_xid(0, code)
        deadline = time.monotonic() + 5.0
        while nv.event_sets[0].queue.qsize() and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        events = probe.drain_events()
        assert [e.code for e in events] == [6, 7, 8, 9]  # the oldest were dropped
        assert probe.events_dropped == 6
    finally:
        probe.close()


def test_lost_gpu_emits_one_event_and_stops_only_that_gpu(log: logging.Logger,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    nv = FakeNvml(2)
    probe = open_double(nv, log)
    try:
        probe.sample()
        nv.gpus[1].fail["nvmlDeviceGetTemperatureV"] = nv.NVML_ERROR_GPU_IS_LOST
        with caplog.at_level(logging.WARNING, logger=log.name):
            s1 = by_key(probe.sample())
            s2 = by_key(probe.sample())
        for s in (s1, s2):
            assert not any(g == 1 for g, _ in s)
            assert (0, "gpu.temperature_celsius") in s
        events = probe.drain_events()
        assert [(e.kind, e.gpu, e.code) for e in events] == [("gpu_lost", 1, nv.NVML_ERROR_GPU_IS_LOST)]
        assert len(caplog.records) == 1 and "lost" in caplog.records[0].getMessage()
    finally:
        probe.close()


def test_open_with_double_init_failure_or_no_gpu_logs_one_line(caplog: pytest.LogCaptureFixture) -> None:
    log = logging.getLogger("test.gpu_probe.open")
    with caplog.at_level(logging.DEBUG, logger=log.name):
        assert open_gpu_probe(log=log, nvml=FakeNvml(2, init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)) is None
    assert len(caplog.records) == 1 and "GPU probe disabled" in caplog.records[0].getMessage()
    assert "DriverNotLoaded" in caplog.records[0].getMessage()
    caplog.clear()
    nv = FakeNvml(0)
    with caplog.at_level(logging.DEBUG, logger=log.name):
        assert open_gpu_probe(log=log, nvml=nv) is None
    assert len(caplog.records) == 1 and "no GPU" in caplog.records[0].getMessage()
    assert nv.initialised == 0  # shut down again


def test_no_gpu_path_with_real_nvml(caplog: pytest.LogCaptureFixture) -> None:
    """The real pynvml: on a machine without an NVIDIA driver nvmlInit fails."""
    log = logging.getLogger("test.gpu_probe.real")
    with caplog.at_level(logging.DEBUG, logger=log.name):
        probe = open_gpu_probe(log=log)
    if probe is not None:
        probe.close()
        pytest.skip("this machine has a working NVIDIA driver and GPU; the no-GPU path does not apply")
    records = [r for r in caplog.records if r.name == log.name]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].levelno == logging.WARNING
    assert records[0].getMessage().startswith("GPU probe disabled:")


def test_docs_list_every_metric_and_its_dcgm_field() -> None:
    doc = (REPO / "docs" / "hardware.md").read_text()
    for base, spec in GPU_METRICS.items():
        assert f"`{base}`" in doc, base
        for dcgm in re.findall(r"DCGM_FI_[A-Z0-9_]+", spec.dcgm):
            assert dcgm in doc, dcgm


def test_nvlink_counters_every_nth_sample(log: logging.Logger) -> None:
    nv = FakeNvml(1)
    probe = open_double(nv, log, nvlink_every=3)
    try:
        got = []
        for i in range(7):
            nv.gpus[0].nvlink_errors[(2, nv.NVML_NVLINK_ERROR_DL_CRC_DATA)] = i
            s = by_key(probe.sample())
            got.append((s.get((0, "gpu.nvlink_crc_data_errors_total")), s.get((0, "gpu.nvlink_crc_data_errors_delta"))))
            assert (0, "gpu.temperature_celsius") in s  # everything else every sample
        # Read on samples 0, 3, 6; the delta covers the 3 samples since the last read.
        assert got == [(0, None), (None, None), (None, None), (3, 3), (None, None), (None, None), (6, 3)]
    finally:
        probe.close()


# ---------------------------------------------------------------- transient NVML errors (issue 27)
class _Clock:
    """The probe's clock, moved by the test: retries are due when the test says time has passed."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("error", ["NVML_ERROR_UNKNOWN", "NVML_ERROR_TIMEOUT", "NVML_ERROR_INSUFFICIENT_RESOURCES",
                                   "NVML_ERROR_DRIVER_NOT_LOADED"])
def test_one_transient_error_does_not_disable_a_field_for_good(log: logging.Logger, error: str) -> None:
    """One UNKNOWN (or TIMEOUT, ...) answer used to disable the field for the agent's life: now it is tried again
    after a backoff (1 s, doubling), reads again once NVML answers, and every failure is counted and emitted."""
    nv, clock = FakeNvml(2), _Clock()
    probe = open_double(nv, log, clock=clock)
    try:
        probe.sample()
        nv.gpus[1].fail["nvmlDeviceGetPowerUsage"] = getattr(nv, error)
        s = by_key(probe.sample())
        assert (1, "gpu.power_watts") not in s and (0, "gpu.power_watts") in s
        assert s[(1, "gpu.nvml_errors.power_total")] == 1 and (0, "gpu.nvml_errors.power_total") not in s
        assert probe.disabled_fields()[1] == set() and probe.retrying_fields()[1] == {"power"}
        calls = nv.gpus[1].calls["nvmlDeviceGetPowerUsage"]
        probe.sample()  # within the backoff: not called
        assert nv.gpus[1].calls["nvmlDeviceGetPowerUsage"] == calls
        clock.now += 1.0
        probe.sample()  # the retry fails again: the next waits 2 s
        assert nv.gpus[1].calls["nvmlDeviceGetPowerUsage"] == calls + 1
        clock.now += 1.5
        probe.sample()
        assert nv.gpus[1].calls["nvmlDeviceGetPowerUsage"] == calls + 1
        del nv.gpus[1].fail["nvmlDeviceGetPowerUsage"]
        clock.now += 0.5
        s = by_key(probe.sample())
        assert s[(1, "gpu.power_watts")] == pytest.approx(310.0), "the field reads again once NVML answers"
        assert s[(1, "gpu.nvml_errors.power_total")] == 2 and s[(1, "gpu.nvml_errors.power_delta")] == 0
        assert probe.retrying_fields()[1] == set() and probe.errors()[1] == {"power": 2}
    finally:
        probe.close()


def test_the_backoff_doubles_to_its_ceiling(log: logging.Logger) -> None:
    nv, clock = FakeNvml(1), _Clock()
    nv.gpus[0].fail["nvmlDeviceGetMemoryInfo"] = nv.NVML_ERROR_UNKNOWN
    probe = open_double(nv, log, clock=clock)
    try:
        tried_at = []
        end = clock.now + 10 * RETRY_MAX_S
        while clock.now < end:
            before = nv.gpus[0].calls.get("nvmlDeviceGetMemoryInfo", 0)
            probe.sample()
            if nv.gpus[0].calls.get("nvmlDeviceGetMemoryInfo", 0) > before:
                tried_at.append(clock.now)
            clock.now += 0.25
        gaps = [b - a for a, b in zip(tried_at, tried_at[1:])]
        assert gaps[0] == RETRY_FIRST_S and gaps[1] == 2 * RETRY_FIRST_S and gaps[2] == 4 * RETRY_FIRST_S
        assert max(gaps) == RETRY_MAX_S and gaps[-1] == RETRY_MAX_S
        assert probe.errors()[0]["memory"] == len(tried_at)
    finally:
        probe.close()


@pytest.mark.parametrize("error", ["NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND",
                                   "NVML_ERROR_NO_PERMISSION"])
def test_a_permanent_error_still_disables_the_field(log: logging.Logger, error: str) -> None:
    nv, clock = FakeNvml(1), _Clock()
    nv.gpus[0].fail["nvmlDeviceGetPcieReplayCounter"] = getattr(nv, error)
    probe = open_double(nv, log, clock=clock)
    try:
        for _ in range(5):
            probe.sample()
            clock.now += 100.0
        assert nv.gpus[0].calls["nvmlDeviceGetPcieReplayCounter"] == 1
        assert probe.disabled_fields()[0] == {"pcie_replay"} and probe.retrying_fields()[0] == set()
        s = by_key(probe.sample())
        assert s[(0, "gpu.nvml_errors.pcie_replay_total")] == 1
    finally:
        probe.close()


def test_a_lost_gpu_comes_back_when_nvml_answers_again(log: logging.Logger) -> None:
    """GPU_IS_LOST: one gpu_lost event, no readings meanwhile and one NVML call per retry (not one per field);
    when the GPU answers again its readings come back, its counters afresh (it may have been reset)."""
    nv, clock = FakeNvml(2), _Clock()
    probe = open_double(nv, log, clock=clock)
    try:
        probe.sample()
        for fn in ("nvmlDeviceGetTemperatureV", "nvmlDeviceGetPowerUsage", "nvmlDeviceGetMemoryInfo"):
            nv.gpus[1].fail[fn] = nv.NVML_ERROR_GPU_IS_LOST
        assert not any(g == 1 for g, _ in by_key(probe.sample()))
        assert [(e.kind, e.gpu) for e in probe.drain_events()] == [("gpu_lost", 1)]
        assert probe.disabled_fields()[1] == {"*"}
        for _ in range(3):
            clock.now += 30.0
            calls = dict(nv.gpus[1].calls)
            assert not any(g == 1 for g, _ in by_key(probe.sample()))
            assert sum(nv.gpus[1].calls.values()) - sum(calls.values()) == 1, "one call per retry"
        assert probe.drain_events() == [], "one event per loss, not one per retry"
        nv.gpus[1].fail.clear()
        clock.now += RETRY_MAX_S
        s = by_key(probe.sample())
        assert s[(1, "gpu.temperature_celsius")] == 45 and s[(1, "gpu.power_watts")] == pytest.approx(310.0)
        assert s[(1, "gpu.ecc_corrected_total")] == 0 and (1, "gpu.ecc_corrected_delta") not in s
        assert s[(1, "gpu.nvml_errors.temperature_total")] == 4
        assert probe.disabled_fields()[1] == set()
    finally:
        probe.close()



def test_every_fields_error_counter_is_a_valid_documented_metric(log: logging.Logger) -> None:
    doc = (REPO / "docs" / "hardware.md").read_text()
    probe = open_double(FakeNvml(1), log)
    try:
        for fname, _ in probe._fields:
            assert METRIC_NAME_RE.match(f"gpu.nvml_errors.{fname}_total"), fname
            assert f"`{fname}`" in doc, f"docs/hardware.md does not name the field {fname}"
    finally:
        probe.close()
    assert "`gpu.nvml_errors.<field>`" in doc
