"""`telemetry watch --once` against a real root: the jobs list, then one job's frame with its figures, events and
the hardware of the host its agent probes (a generated sysfs tree: one NIC, one InfiniBand port)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import telemetry
from helpers_tree import api_get, make_agent, make_root, stop_all, wait_for

REPO = Path(__file__).resolve().parents[1]
JOB, WORLD, STEPS = "watched", 2, 12


def _sysfs(root: Path) -> Path:
    """class/net/eth7 (up) and class/infiniband/mlx5_0/ports/1 (active, 200 Gb/s), as the NIC probe reads them."""
    net = root / "class" / "net" / "eth7"
    (net / "statistics").mkdir(parents=True)
    for name in ("rx_errors", "tx_errors", "rx_dropped", "tx_dropped"):
        (net / "statistics" / name).write_text("0\n")
    (net / "carrier_changes").write_text("1\n")
    (net / "operstate").write_text("up\n")
    (net / "ifindex").write_text("7\n")  # the interface's source id at the root
    port = root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True)
    for name in ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "port_xmit_discards"):
        (port / "counters" / name).write_text("0\n")
    (port / "state").write_text("4: ACTIVE\n")
    (port / "phys_state").write_text("5: LinkUp\n")
    (port / "rate").write_text("200 Gb/sec (4X HDR)\n")
    return root


@pytest.fixture(scope="module")
def root_api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    tmp = tmp_path_factory.mktemp("watch")
    root = make_root(tmp / "root.db")
    agent = make_agent([root.address], tmp / "agent.sock", "agent0", nic_probe=True, gpu_probe=False,
                       sysfs_root=str(_sysfs(tmp / "sys")), host_id="node7", probe_interval_s=0.2)
    runs = [telemetry.init(job=JOB, rank=r, world_size=WORLD, agent=f"unix:{agent.socket_path}") for r in range(WORLD)]
    try:
        for step in range(STEPS):
            for rank, run in enumerate(runs):
                nan = step == STEPS - 2 and rank == 1
                run.log(step, loss=float("nan") if nan else 3.0 - 0.1 * step, mfu=0.41 + 0.01 * rank,
                        step_time=0.2 + 0.05 * rank)
                run.end_step(step)
        assert all(run.close(10) for run in runs)
        wait_for(lambda: [e for e in api_get(root.api_address, f"/api/v1/jobs/{JOB}/events")[1]["events"]
                          if e["kind"] == "nonfinite"], 15, what="the NaN's event")
        wait_for(lambda: all(f'telemetry_{name}{{attempt="0",job="_host:node7",stat="min"}}'.encode()
                             in _metrics(root.api_address) for name in ("nic_up", "ib_port_active")), 10,
                 what="node7's NIC figures in /metrics")
        yield root.api_address
    finally:
        stop_all(agent, root)


def _metrics(api: str) -> bytes:
    import urllib.request
    with urllib.request.urlopen(f"http://{api}/metrics", timeout=5) as reply:
        return reply.read()


def _watch(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "collectors.cli", "watch", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_watch_once_lists_the_jobs(root_api: str) -> None:
    out = _watch("--root", root_api, "--once")
    assert "jobs at this root" in out and JOB in out and f"{STEPS - 1}" in out


def test_watch_once_shows_one_job_with_its_hosts_hardware(root_api: str) -> None:
    out = _watch("--root", root_api, "--job", JOB, "--once")
    assert f"job {JOB}" in out
    assert f"step {STEPS - 1}" in out and "mean 41.5%" in out, out  # MFU
    assert "non-finite: step 10, ranks [1]" in out, out  # the loss panel names the NaN's rank
    assert "max 250 ms (rank 1)" in out, out  # per-rank step time
    assert "nonfinite" in out  # the events table
    assert "no GPU telemetry for this job" in out  # says plainly what is absent
    assert "host node7: NICs all up" in out and "IB ports all up" in out and "IB 200 Gb/s" in out, out


def test_watch_says_when_no_root_answers() -> None:
    done = subprocess.run([sys.executable, "-m", "collectors.cli", "watch", "--root", "127.0.0.1:1", "--once"],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "no answer from a root at http://127.0.0.1:1" in done.stderr
