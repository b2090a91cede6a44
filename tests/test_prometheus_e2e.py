"""A real Prometheus scraping a real root during a simulated run (issue 4, item 4).

The simulator's tree (root, rack, agents, 16 simulated ranks on the real SDK) runs a job with a
straggler, a NaN, a loss spike, a hot GPU and, near the end, a hang; the ranks also report GPU and NIC
readings (tests/hw_sim_ranks.py: there is no GPU here). Prometheus (Debian's package, installed if
absent) scrapes the root's /metrics every second with `honor_labels: true`. Then:

- `promtool check metrics` passes on the root's /metrics as it was during the run;
- every PromQL expression of every committed dashboard (dashboards/*.json) returns data through
  Prometheus's HTTP API (with $job, $__rate_interval and $__range filled in as Grafana would);
- the hot GPU was raised as a hardware event naming its rank;
- the hardware row's host panels have data: one agent has a --host-index (its NICs and IB ports, on a
  generated sysfs tree, go to the fleet's windows, job `_fleet`), the other none (its own `_host:` job);
- the crash annotation has data: once the other faults were raised, the second node's rank process is
  killed (SIGKILL, a node lost).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from collectors.sim import orchestrate
from collectors.sim.model import parse_injection
from collectors.sim.orchestrate import SimConfig, Simulation
from collectors.sim.procs import free_port
from collectors.sim.sysfs import write_host
from prometheus_support import promtool_check, require, running_prometheus

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dashboards"))
import generate  # noqa: E402  (dashboards/generate.py, put on sys.path just above)

HW_RANKS = Path(__file__).resolve().parent / "hw_sim_ranks.py"
JOB = "sim"


class HardwareSimulation(Simulation):
    """The simulator, with rank processes that also report GPU/NIC readings, and /metrics sampled mid-run."""

    def __init__(self, config: SimConfig, hot_rank: int, hot_after: float) -> None:
        super().__init__(config)
        self.hot = ["--hot-rank", str(hot_rank), "--hot-after", str(hot_after)]
        self.metrics_samples: list[str] = []
        self.events: list[dict] = []
        self._done = threading.Event()
        self.on_job_end = self.lose_a_node

    def lose_a_node(self) -> None:
        """Once the other faults were raised: SIGKILL the second node's rank process (ranks 8-15) and wait
        (bounded) until the root has raised the crash, so that Prometheus scrapes its counter's increase."""
        victim = next(host for host in self.rank_hosts if host.name == "ranks8")
        victim.kill()
        deadline = time.monotonic() + 20.0
        while time.monotonic() < deadline:
            events = self.fetch(f"/api/v1/jobs/{JOB}/events?last=1000").get("events", [])
            if any(e["kind"] == "crash" for e in events):
                time.sleep(2.0)  # two scrapes of the counter at 1
                return
            time.sleep(0.2)
        raise AssertionError(f"no crash event within 20 s of killing {victim.name}")

    def start_ranks(self, *args, **kwargs):
        original = orchestrate.python_module

        def python_module(module: str, *argv: str) -> list[str]:
            if module == "collectors.sim.ranks":
                return [sys.executable, str(HW_RANKS), *self.hot, *argv]
            return original(module, *argv)

        orchestrate.python_module = python_module
        try:
            return super().start_ranks(*args, **kwargs)
        finally:
            orchestrate.python_module = original

    def sample_metrics(self) -> None:
        while not self._done.wait(2.0):
            if self.api:
                try:
                    with urllib.request.urlopen(self.api + "/metrics", timeout=10) as reply:
                        self.metrics_samples.append(reply.read().decode())
                except OSError:
                    pass

    def report(self) -> dict:
        report = super().report()
        self.events = self.fetch(f"/api/v1/jobs/{JOB}/events?last=1000").get("events", [])
        return report


def hardware_options(tmp_path: Path) -> dict[int, list[str]]:
    """The two agents' NIC probes on generated sysfs trees (collectors/sim/sysfs.py, a TEST DOUBLE of /sys: this
    machine's own NICs are virtual, excluded by default): agent 0 is host 0 of the fleet (job `_fleet`), agent 1
    has no index (the per-host layout, job `_host:sim-host-b`). No GPU probe: the ranks report their GPUs."""
    options = {}
    for agent, extra in ((0, ["--host-id", "sim-host-a", "--host-index", "0"]), (1, ["--host-id", "sim-host-b", "--host-index", "off"])):
        sysfs = tmp_path / f"sysfs{agent}"
        write_host(sysfs, nics=2, hcas=2)
        options[agent] = ["--no-gpu-probe", "--nic-probe", "--sysfs-root", str(sysfs), *extra]
    return options


def fill(expr: str, job: str, span_s: int) -> str:
    return (expr.replace("$job", job).replace("$attempt", ".*").replace("$__rate_interval", "10s")
            .replace("$__range", f"{span_s}s").replace("$__interval", "1s"))


def test_every_dashboard_query_returns_data_from_a_real_prometheus(tmp_path):
    require("prometheus")
    api_port, prom_port = free_port(), free_port()
    # faults well after the first scrapes: an event counter must be seen at 0 before it goes to 1 for
    # increase() to see the step
    injections = ("straggler:rank=3,from=10,factor=3", "nan:rank=12,step=12", "spike:step=14,factor=3",
                  "hang:rank=7,step=20")
    config = SimConfig(injections=[parse_injection(t) for t in injections], inject_texts=list(injections),
                       workdir=tmp_path / "sim", ranks=16, steps=23, step_interval=0.3, seed=31, job=JOB,
                       root_api_port=api_port, hang_observe_s=9.0, agent_deadline_floor=1.0,
                       collector_deadline_floor=1.0, root_deadline_floor=1.5,
                       # a short run's straggler persistence (production: 14 late of the last 16 steps, more
                       # than this run has after step 10), as the demo's simulator and tests/test_detectors.py
                       detectors=json.dumps({"straggler": {"persist_k": 7, "persist_n": 8}}),
                       ranks_per_process=8,  # one process per node: the second is killed at the end (a crash)
                       agent_hardware=hardware_options(tmp_path))
    sim = HardwareSimulation(config, hot_rank=5, hot_after=5.0)
    with running_prometheus(tmp_path / "prometheus", prom_port, [f"127.0.0.1:{api_port}"]) as prom:
        sampler = threading.Thread(target=sim.sample_metrics, daemon=True)
        sampler.start()
        started = time.time()
        try:
            sim.run()
        finally:
            sim._done.set()
            sampler.join(5)
        ended = time.time()
        time.sleep(2.0)  # the last scrapes
        assert prom.targets_up() or prom.api("query", query="up")["data"]["result"], "Prometheus never scraped"

        # promtool on the root's exposition as it was mid-run (every family present by then)
        assert sim.metrics_samples, "no /metrics sample taken during the run"
        richest = max(sim.metrics_samples, key=len)
        checked = promtool_check(richest)
        assert checked.returncode == 0 and not checked.stdout.strip(), checked.stdout + checked.stderr
        assert "telemetry_gpu_temperature_celsius" in richest and "telemetry_events_total" in richest

        # every expression of every committed dashboard returns data
        span = int(ended - started) + 5
        empty, errors, checked_count = [], [], 0
        for path in sorted((generate.HERE).glob("*.json")):
            dashboard = json.loads(path.read_text())
            for where, expr in generate.expressions(dashboard):
                checked_count += 1
                filled = fill(expr, JOB, span)
                if filled.startswith("label_values("):
                    metric, label = [p.strip() for p in filled[len("label_values("):-1].rsplit(",", 1)]
                    values = prom.api(f"label/{label}/values", **{"match[]": metric})["data"]
                    if (JOB if label == "job" else "0") not in values:  # the job's attempt: 0 (none)
                        empty.append(f"{path.name}: {where}: {filled} -> {values}")
                    continue
                if filled.startswith("query_result("):  # a variable's query: Grafana runs it as an instant query
                    filled = filled[len("query_result("):-1]
                try:
                    result = prom.query_range(filled, started - 5, ended + 2)
                except urllib.error.HTTPError as exc:
                    errors.append(f"{path.name}: {where}: {filled}: {exc.read().decode()[:300]}")
                    continue
                series = result["data"]["result"]
                if not any(s["values"] for s in series):
                    empty.append(f"{path.name}: {where}: {filled}")
        assert checked_count >= 40
        assert not errors, "\n".join(errors)
        if empty:  # say what Prometheus holds for the events, to tell a scrape gap from an exposition bug
            raw = prom.query_range(f'telemetry_events_total{{job="{JOB}"}}', started - 5, ended + 2)["data"]["result"]
            held = {s["metric"].get("kind"): [(round(float(t) - started, 1), v) for t, v in s["values"]][:4]
                    for s in raw}
            up = prom.query_range("up", started - 5, ended + 2)["data"]["result"]
            held["up"] = [(round(float(t) - started, 1), v) for s in up for t, v in s["values"]][:12]
            raise AssertionError("queries that returned no data:\n" + "\n".join(empty) + f"\nevents_total: {held}"
                                 f"\nevents: {[(e['kind'], round(e['time'] - started, 1)) for e in sim.events]}")

    hardware = [e for e in sim.events if e["kind"] == "hardware" and e["key"] == "gpu_temperature"]
    assert hardware and hardware[0]["ranks"] == [5], sim.events
    kinds = {e["kind"] for e in sim.events}
    assert {"straggler", "nonfinite", "loss_spike", "hang", "hardware", "crash"} <= kinds, kinds
    crash = [e for e in sim.events if e["kind"] == "crash"]
    assert crash[0]["ranks"] and set(crash[0]["ranks"]) <= set(range(8, 16)), crash
    hangs = [(e["step"], e["ranks"]) for e in sim.events if e["kind"] == "hang"]
    assert (20, [7]) in hangs, hangs
