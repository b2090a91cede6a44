"""The agent's hardware sampler (issue 7 items 1, 2, 4 in the running agent): probe readings reach the root.

No GPU here: NVML is the labelled TEST DOUBLE (tests/nvml_double.py), passed in through
AgentConfig.nvml -> open_gpu_probe(nvml=...); sysfs is a tree generated under tmp_path. What is checked
is the wiring (which window, which source, deltas, XIDs, the no-GPU path), not what a real driver says.
"""

from __future__ import annotations

import logging
import os
import select
import socket
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pynvml
import pytest
from click.testing import CliRunner

import telemetry
from collectors.agent.hardware import HardwareSampler, host_job
from collectors.agent.ranks import RankRegistry
from collectors.common.validation import BadInput
from collectors.delivery.node import Node
from collectors.delivery.windows import Deadlines
from collectors.probes import NicProbe, open_gpu_probe
from collectors.probes.nic import IB_COUNTERS, NET_STAT_COUNTERS, VIRTUAL_NICS
from helpers_tree import make_agent, make_root, steps, stop_all, wait_for
from nvml_double import FakeNvml
from telemetry import Summary

JOB = "hw"
UNITS = Path(__file__).resolve().parent.parent / "collectors" / "systemd"
WAIT = 30.0  # bounded waits; generous for a loaded CI machine (a passing run needs 1-2 s each)


# ---------------------------------------------------------------- a generated sysfs tree

def write_nic(root: Path, name: str, ifindex: int, rx_errors: int = 0, operstate: str = "up") -> None:
    base = root / "class" / "net" / name
    (base / "statistics").mkdir(parents=True, exist_ok=True)
    for counter in NET_STAT_COUNTERS:
        (base / "statistics" / counter).write_text(f"{rx_errors if counter == 'rx_errors' else 0}\n")
    (base / "carrier_changes").write_text("1\n")
    (base / "operstate").write_text(operstate + "\n")
    (base / "ifindex").write_text(f"{ifindex}\n")


def write_ib(root: Path, dev: str, port: int, symbol_error: int = 0) -> None:
    base = root / "class" / "infiniband" / dev / "ports" / str(port)
    (base / "counters").mkdir(parents=True, exist_ok=True)
    for counter in IB_COUNTERS:
        (base / "counters" / counter).write_text(f"{symbol_error if counter == 'symbol_error' else 0}\n")
    (base / "state").write_text("4: ACTIVE\n")
    (base / "phys_state").write_text("5: LinkUp\n")
    (base / "rate").write_text("400 Gb/sec (4X NDR)\n")


def windows(root, job: str, metric: str) -> list[tuple[dict, Summary]]:
    """The root's persisted time-bucket windows of (job, metric), oldest first, with their summaries."""
    with closing(root.store.reader()) as db:
        rows = db.execute("SELECT * FROM windows WHERE job=? AND metric=? AND width_ms>0 ORDER BY idx",
                          (job, metric)).fetchall()
    return [(dict(row), Summary.from_bytes(row["summary"])) for row in rows]


# ---------------------------------------------------------------- one tree for the module

@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hw")
    sysfs = tmp / "sys"
    write_nic(sysfs, "eth0", ifindex=2, rx_errors=10)
    write_ib(sysfs, "mlx5_0", 1, symbol_error=3)
    nv = FakeNvml(4)
    nv.gpus[3].temperature = 83  # rank 1's GPU is the hot one
    root = make_root(tmp / "root.db")
    agent = make_agent([root.address], tmp / "a.sock", "agent0", gpu_probe=True, nic_probe=True, nvml=nv,
                       sysfs_root=sysfs, probe_interval_s=0.25, xid_wait_ms=50, host_id="node-a")
    address = f"unix:{agent.socket_path}"
    runs = [telemetry.Run(JOB, 0, 2, local_rank=0, agent=address, device=nv.gpus[2].uuid.decode(),
                          heartbeat_interval_s=0.2),  # by NVML UUID
            telemetry.Run(JOB, 1, 2, local_rank=1, agent=address, device="cuda:3",
                          heartbeat_interval_s=0.2)]  # by index, the fallback
    try:
        def registered() -> bool:
            with agent.node.lock:
                return len(agent.registry.ranks) == 2
        wait_for(registered, WAIT, what="both ranks registered")
        yield {"root": root, "agent": agent, "nv": nv, "sysfs": sysfs, "runs": runs}
    finally:
        for run in runs:
            run.close(2)
        stop_all(agent, root)


def test_gpu_readings_go_to_the_job_with_the_rank_as_source(tree):
    root, agent = tree["root"], tree["agent"]
    assert agent.hardware is not None and agent.hardware.gpu is not None

    def both_ranks():
        return [(row, s) for row, s in windows(root, JOB, "gpu.temperature_celsius") if list(s.sources) == [0, 1]]
    row, summary = wait_for(both_ranks, WAIT, what="a gpu.temperature_celsius window of ranks 0 and 1")[-1]
    assert row["width_ms"] == 1000 and row["expected"] == 2 and row["idx"] % 1000 == 0
    assert (summary.max, summary.argmax, summary.min, summary.argmin) == (83.0, 1, 45.0, 0)
    power = [s for _, s in windows(root, JOB, "gpu.power_watts") if list(s.sources) == [0, 1]]
    assert power and power[-1].max == 310.0
    # Never a GPU index as a source in the job's windows: only rank ids of the job.
    for _, s in windows(root, JOB, "gpu.temperature_celsius"):
        assert set(s.sources) <= {0, 1}


def test_unused_gpus_stay_under_the_host_pseudo_job(tree):
    root = tree["root"]
    host = host_job("node-a")
    assert host == "_host:node-a" == tree["agent"].hardware.host_job

    def unused_only():
        return [s for _, s in windows(root, host, "gpu.temperature_celsius") if list(s.sources) == [0, 1]]
    wait_for(unused_only, WAIT, what="host windows with only the unused GPUs 0 and 1")
    # The pseudo-job is no training job: the root lists it nowhere, and it has no world to miss ranks from.
    with closing(root.store.reader()) as db:
        jobs = [r[0] for r in db.execute("SELECT job FROM jobs")]
        expected = {r[0] for r in db.execute("SELECT DISTINCT expected FROM windows WHERE job=?", (host,))}
    assert host not in jobs and JOB in jobs and expected == {0}


def test_nic_and_ib_deltas_reach_the_root_exactly(tree):
    root, sysfs = tree["root"], tree["sysfs"]
    host = host_job("node-a")
    wait_for(lambda: windows(root, host, "nic.rx_errors_delta"), WAIT, what="a first nic delta window")
    write_nic(sysfs, "eth0", ifindex=2, rx_errors=17)  # +7
    write_ib(sysfs, "mlx5_0", 1, symbol_error=8)  # +5

    def totals():
        nic = windows(root, host, "nic.rx_errors_delta")
        ib = windows(root, host, "ib.symbol_error_delta")
        return sum(s.sum for _, s in nic), sum(s.sum for _, s in ib), nic, ib
    wait_for(lambda: totals()[:2] == (7.0, 5.0), WAIT, what="deltas summing to the counters' increase")
    _, _, nic, ib = totals()
    assert all(list(s.sources) == [2] for _, s in nic), "a NIC's source is its ifindex"
    assert all(list(s.sources) == [0] for _, s in ib), "the first IB port is source 0"
    totals_now = windows(root, host, "nic.rx_errors_total")
    assert totals_now[-1][1].max == 17.0
    state = windows(root, host, "ib.rate_gbps")
    assert state[-1][1].max == 400.0


def test_an_xid_is_a_metric_of_the_rank_and_a_log_line(tree, caplog):
    root, nv = tree["root"], tree["nv"]
    with caplog.at_level(logging.WARNING, logger="collectors.agent.hardware"):
        nv.inject_xid(2, 79)  # rank 0's GPU
        codes = wait_for(lambda: windows(root, JOB, "gpu.xid_code"), WAIT, what="a gpu.xid_code window")
        wait_for(lambda: sum(s.sum for _, s in windows(root, JOB, "gpu.xid_errors_delta")) == 1.0, WAIT,
                 what="gpu.xid_errors_delta summing to 1")
        last = wait_for(lambda: windows(root, JOB, "gpu.xid_last_code"), WAIT, what="gpu.xid_last_code")
    _, summary = codes[-1]
    assert (summary.count, summary.max, list(summary.sources)) == (1, 79.0, [0])
    assert last[-1][1].max == 79.0 and list(last[-1][1].sources) == [0]
    lines = [r.getMessage() for r in caplog.records if "XID 79" in r.getMessage()]
    assert len(lines) == 1, lines
    assert "gpu2" in lines[0] and "fallen off the bus" in lines[0] and "rank 0 of job 'hw'" in lines[0]


def test_a_lost_gpu_is_flagged_under_its_owner(tree):
    root, nv = tree["root"], tree["nv"]
    host = host_job("node-a")
    nv.gpus[1].fail["nvmlDeviceGetTemperatureV"] = pynvml.NVML_ERROR_GPU_IS_LOST  # an unused GPU
    flagged = wait_for(lambda: [s for _, s in windows(root, host, "gpu.lost") if s.max == 1.0], WAIT,
                       what="gpu.lost = 1 for gpu1")
    assert flagged[-1].argmax == 1 and list(flagged[-1].sources) == [0, 1]


# ---------------------------------------------------------------- without a GPU

def test_no_gpu_one_log_line_and_everything_else_works(tmp_path, caplog):
    root = make_root(tmp_path / "root.db")
    agent = None
    run = None
    try:
        with caplog.at_level(logging.INFO):
            agent = make_agent([root.address], tmp_path / "a.sock", "agent0", gpu_probe=True, nic_probe=False,
                               nvml=FakeNvml(2, init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
            gpu_lines = [r for r in caplog.records if "GPU probe" in r.getMessage()]
        assert len(gpu_lines) == 1 and gpu_lines[0].levelno == logging.WARNING, [r.getMessage() for r in gpu_lines]
        assert "GPU probe disabled" in gpu_lines[0].getMessage()
        assert agent.hardware is None  # no probe left: no sampler thread
        assert agent.host_id == socket.gethostname(), "the pseudo-job is named after the host the ranks report"
        run = telemetry.Run("nogpu", 0, 1, agent=f"unix:{agent.socket_path}")
        for step in (1, 2):
            with run.step(step):
                run.log(step, loss=float(step))
        assert run.close(10)
        assert [row["step"] for row in steps(root.api_address, "nogpu", "loss")] == [1, 2]
    finally:
        stop_all(agent, root)


def test_cli_agent_without_nvml_logs_one_line(tmp_path):
    """The real `telemetry agent` with the real pynvml on a machine without a GPU."""
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has NVML and a GPU: the no-GPU path does not apply")
    root = make_root(tmp_path / "root.db")
    try:
        proc = subprocess.Popen([sys.executable, "-m", "collectors.cli", "agent", "--socket", str(tmp_path / "a.sock"),
                                 "--parent", root.address, "--sysfs-root", str(tmp_path / "nosys")],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready, _, _ = select.select([proc.stdout], [], [], WAIT)
        assert ready and proc.stdout.readline(), "no ready line"  # it runs
        time.sleep(0.5)  # a few samples of the (empty) sysfs tree
        proc.terminate()
        _, err = proc.communicate(timeout=15)
        assert proc.returncode == 0, err
        lines = [line for line in err.splitlines() if "GPU probe" in line]
        assert len(lines) == 1 and "GPU probe disabled" in lines[0], err
    finally:
        stop_all(root)


def test_cli_agent_options_and_the_example_config_reach_the_agent(monkeypatch, tmp_path):
    from collectors import cli
    seen = {}

    class Captured:
        def __init__(self, config):
            seen["config"] = config
    monkeypatch.setattr("collectors.agent.server.AgentServer", Captured)
    monkeypatch.setattr(cli, "StopSignals", lambda: None)  # leave this process's signal handlers alone
    monkeypatch.setattr(cli, "_serve", lambda signals, make, describe: make())
    monkeypatch.setattr(cli, "_logging", lambda verbose: None)
    result = CliRunner().invoke(cli.main, ["agent", "--config", str(UNITS / "agent.toml")])
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.gpu_probe, config.nic_probe, config.probe_interval_s, str(config.sysfs_root)) == \
        (True, True, 1.0, "/sys")
    assert config.nic_exclude == VIRTUAL_NICS and "ifb*" in VIRTUAL_NICS  # the shipped config keeps the default
    result = CliRunner().invoke(cli.main, ["agent", "--parent", "x:1", "--no-gpu-probe", "--no-nic-probe",
                                           "--probe-interval", "0.5", "--sysfs-root", "/tmp/s", "--nic-exclude",
                                           "eth9", "--nvlink-every", "4", "--host-id", "sim-node-3"])
    assert result.exit_code == 0, result.output
    config = seen["config"]
    assert (config.gpu_probe, config.nic_probe, config.probe_interval_s, config.sysfs_root, config.nic_exclude,
            config.nvlink_every, config.host_id) == (False, False, 0.5, "/tmp/s", ("eth9",), 4, "sim-node-3")
    # The host index, from the command line or the config file: "auto" (the tree hands one out; the default), a
    # number, or "off" (the per-host layout, _host:NAME).
    for args, want in ((["--host-index", "auto"], (None, True)), (["--host-index", "7"], (7, False)),
                       ([], (None, True)), (["--host-index", "off"], (None, False))):
        result = CliRunner().invoke(cli.main, ["agent", "--parent", "x:1", *args])
        assert result.exit_code == 0, result.output
        assert (seen["config"].host_index, seen["config"].host_index_auto) == want
    config_file = tmp_path / "agent.toml"
    config_file.write_text('parents = ["x:1"]\nhost_index = "off"\n')
    result = CliRunner().invoke(cli.main, ["agent", "--config", str(config_file)])
    assert result.exit_code == 0, result.output
    assert seen["config"].host_index_auto is False and seen["config"].host_index is None
    registry = tmp_path / "hosts.txt"
    registry.write_text("sim-node-2\nsim-node-3\n")
    result = CliRunner().invoke(cli.main, ["agent", "--parent", "x:1", "--host-id", "sim-node-3", "--host-registry",
                                           str(registry)])
    assert result.exit_code == 0, result.output
    assert (seen["config"].host_index, seen["config"].host_index_auto) == (1, False)
    for given in ("auto", "off", "2"):
        result = CliRunner().invoke(cli.main, ["agent", "--parent", "x:1", "--host-registry", str(registry),
                                               "--host-index", given])
        assert result.exit_code != 0 and "alternatives" in result.output


# ---------------------------------------------------------------- the sampler on its own

def _node() -> Node:
    return Node("test", Deadlines(), ack_down=lambda *a, **k: None)


def test_buckets_are_offered_once_complete_and_a_clock_step_back_stays_put(tmp_path):
    write_nic(tmp_path, "eth0", ifindex=7, rx_errors=1)
    node = _node()
    sampler = HardwareSampler(node, RankRegistry(), host_id="h", nic=NicProbe(tmp_path), interval_s=0.25)
    second = 1_700_000_000_000  # ms

    def ns(ms: int) -> int:
        return ms * 1_000_000

    def key(metric: str, ms: int) -> tuple[str, str, int, int]:
        return ("_host:h", metric, ms, 1000)

    for offset in (0, 250, 500):  # three samples in one second: the bucket stays open
        sampler.sample_once(now_ns=ns(second + offset), next_wall_ns=ns(second + offset + 250))
        assert key("nic.up", second) not in node.table.windows
    sampler.sample_once(now_ns=ns(second + 750), next_wall_ns=ns(second + 1000))  # the next is in a later bucket
    win = node.table.windows[key("nic.up", second)]
    (part,) = win.pending
    assert list(part.sources) == [7] and part.summary.count == 4
    # The wall clock steps back by 3 s: samples stay in the next bucket, never re-open a finished one.
    sampler.sample_once(now_ns=ns(second - 3000), next_wall_ns=ns(second - 2750))
    sampler.flush()
    later = node.table.windows[key("nic.up", second + 1000)]
    assert later.pending[0].summary.count == 1 and len(win.pending) == 1
    assert sampler.stats.not_accepted == 0


class _SteppedClock:
    """The sampler's `time` and stop event, faked: waiting advances the wall and monotonic clocks alike; at
    `step_at` (a monotonic second) the wall clock alone steps by `step_s` (NTP stepping it back or forward)."""

    def __init__(self, step_at: float, step_s: float) -> None:
        self.wall, self.mono = 1_700_000_000.2, 1000.0
        self.step_at, self.step_s, self.stepped = 1000.0 + step_at, step_s, False
        self.samples: list[float] = []  # the wall time of each sample

    def time_ns(self) -> int:
        return round(self.wall * 1e9)

    def monotonic_ns(self) -> int:
        return round(self.mono * 1e9)

    def monotonic(self) -> float:
        return self.mono

    def thread_time(self) -> float:
        return 0.0

    def wait(self, seconds: float) -> bool:
        if not self.stepped and self.mono + seconds >= self.step_at:
            seconds -= self.step_at - self.mono
            self.wall += self.step_at - self.mono + self.step_s
            self.mono, self.stepped = self.step_at, True
        self.wall += max(seconds, 0.0) + 0.001  # and the sample takes a millisecond
        self.mono += max(seconds, 0.0) + 0.001
        return len(self.samples) >= 12


@pytest.mark.parametrize("step_s", [-0.2, -0.5, -0.9, -1.0, -1.2, -1.5, -1.9, -2.0, -2.5, -30.0, 0.4, 5.0])
def test_a_wall_clock_step_never_samples_a_second_twice_nor_stops_the_sampling(monkeypatch, step_s):
    """The sampler's schedule runs on the monotonic clock too (it used the wall clock alone: a step back of part of
    a second sampled that second again). Samples stay at least half an interval apart and never revisit a wall time
    already sampled: a step back of up to two intervals is waited out (one interval plus the step between two
    samples; a step of one to two intervals sampled a second twice before), and otherwise the host is never left
    unsampled for more than two intervals. Each sample's readings are filed at the time it was planned for, so a
    step during the wait files them in a later second than the last sample's too. A step back of more than two
    intervals may file several samples in one second (the one after the last offered: HardwareSampler's floor): the
    host keeps being sampled."""
    import collectors.agent.hardware as hardware

    clock = _SteppedClock(step_at=3.4, step_s=step_s)
    monkeypatch.setattr(hardware, "time", clock)
    sampler = HardwareSampler(_node(), RankRegistry(), host_id="h", interval_s=1.0)
    sampler._stop = clock  # type: ignore[assignment]  # the fake clock's wait is the stop event's
    monotonic: list[float] = []

    def sample_once(now_ns: int | None = None, next_wall_ns: int | None = None) -> int:
        clock.samples.append(clock.wall if now_ns is None else now_ns / 1e9)  # the time the readings are filed at
        monotonic.append(clock.mono)
        return 0

    sampler.sample_once = sample_once  # type: ignore[method-assign]  # record when the schedule samples
    sampler._run()
    seconds = [int(wall) for wall in clock.samples]
    before = [int(wall) for wall, mono in zip(clock.samples, monotonic) if mono < clock.step_at]
    after = [int(wall) for wall, mono in zip(clock.samples, monotonic) if mono >= clock.step_at]
    assert not set(before) & set(after) or step_s < -2, (step_s, seconds)  # no second sampled again
    assert len(set(seconds)) == len(seconds) or step_s < -2, (step_s, seconds)
    gaps = [b - a for a, b in zip(monotonic, monotonic[1:])]
    waited_out = -2.0 <= step_s < 0
    assert min(gaps) >= 0.5 and max(gaps) <= (1.0 - step_s if waited_out else 2.0) + 0.01, (step_s, gaps)


def test_rank_devices_map_to_gpus_by_uuid_then_index():
    nv = FakeNvml(4)
    gpu = open_gpu_probe(nvml=nv, events=False)
    assert gpu is not None
    try:
        sampler = HardwareSampler(_node(), RankRegistry(), host_id="h", gpu=gpu)
        uuid = nv.gpus[2].uuid.decode()
        assert sampler._gpu_of(uuid) == 2
        assert sampler._gpu_of(uuid.lower()) == 2
        assert sampler._gpu_of(uuid[len("GPU-"):].upper()) == 2  # torch's uuid has no "GPU-" prefix
        assert sampler._gpu_of("3") == 3 and sampler._gpu_of("cuda:1") == 1
        for unknown in ("", "9", "cuda:9", "MIG-0a1b2c3d-0000-0000-0000-000000000000", "GPU-nope"):
            assert sampler._gpu_of(unknown) is None, unknown
    finally:
        gpu.close()


def test_host_pseudo_job_names_are_valid_and_reserved():
    assert host_job("node017.rack3") == "_host:node017.rack3"
    assert host_job("we!rd host/name") == "_host:we_rd_host_name"
    assert len(host_job("x" * 300)) == 128

    class Hello:
        job, rank, world_size, local_rank, host, pid, device = "_host:node017", 0, 1, 0, "h", os.getpid(), ""
    with pytest.raises(BadInput, match="reserved"):
        RankRegistry().register(Hello(), None)
