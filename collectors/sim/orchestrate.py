"""Start a real tree (root, racks, one agent per node) on loopback, drive simulated ranks, report.

With chaos, a non-root collector and an agent are SIGKILLed at random
moments and restarted on the same address, and the root is killed and
restarted once; nothing that a retained buffer held may be lost or counted
twice, which `verify.compare` checks against the ground truth.

With a `restart:step=S,resume=K[,world=W]` injection the job runs as two
attempts (1 and 2): the first attempt's ranks run steps 1..S and crash (their
processes exit without closing, once what they logged is durable); after
`restart_pause_s` the second attempt starts at step K on W ranks (default: as
many as before) and runs to the last step, so steps K..S are run twice
(docs/restarts.md).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from collectors.sim.model import Injection, check_injections, metrics, restart_of
from collectors.sim.procs import Proc, python_module

log = logging.getLogger(__name__)


@dataclass
class SimConfig:
    ranks: int = 64
    ranks_per_node: int = 8
    nodes_per_rack: int = 4
    steps: int = 30
    step_interval: float = 0.5
    seed: int = 0
    job: str = "sim"
    injections: list[Injection] = field(default_factory=list)
    inject_texts: list[str] = field(default_factory=list)
    chaos: bool = False
    workdir: Path | None = None
    ranks_per_process: int = 32  # simulated ranks share processes: 2 cores cannot host an interpreter per node
    sdk_flush_interval: float = 0.1
    hang_observe_s: float = 12.0  # how long to keep hung ranks alive after the hang step
    settle_timeout_s: float = 90.0
    root_api_port: int = 0
    agent_deadline_floor: float = 2.0
    collector_deadline_floor: float = 3.0
    root_deadline_floor: float = 4.0
    probe_agents: int = 0  # the first N agents sample this host's hardware (GPU/NIC); the rest share the host
    #: agent N's hardware options in place of the default ones (e.g. a generated sysfs tree, --host-index)
    agent_hardware: dict[int, list[str]] = field(default_factory=dict)
    detectors: str | None = None  # the root's --detectors (JSON text or file); None: its defaults
    #: ranks synchronise through collectives each step (model.RankModel); False: they never wait for each other
    sync_collectives: bool = True
    restart_pause_s: float = 2.0  # with a restart injection: from the first attempt's crash to the second's start


@dataclass
class Attempt:
    """One launch of the simulated job: its attempt number (None: the SDK's default), ranks and steps."""

    attempt: int | None
    world: int
    first_step: int
    last_step: int
    crash: bool = False
    seed_offset: int = 0  # a later attempt's figures differ from the earlier's at the steps it replays

    @property
    def tag(self) -> str:
        return "" if self.attempt is None else f"a{self.attempt}-"


class Simulation:
    def __init__(self, config: SimConfig, progress: Callable[[str], None] = lambda msg: None) -> None:
        check_injections(config.injections, config.ranks, config.steps)
        self.config = config
        self.progress = progress
        self.attempts = plan_attempts(config)
        self.own_workdir = config.workdir is None
        self.workdir = Path(config.workdir or tempfile.mkdtemp(prefix="telemetry-sim-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.logs = self.workdir / "logs"
        self.logs.mkdir(exist_ok=True)
        self.root: Proc | None = None
        self.racks: list[Proc] = []
        self.agents: list[Proc] = []
        self.rank_hosts: list[Proc] = []
        self.chaos_log: list[dict] = []
        self.start_file = self.workdir / "start"
        self.api = ""
        #: called once every step has been driven (and any hang observed), before the ranks are stopped
        self.on_job_end: Callable[[], None] = lambda: None

    # ------------------------------------------------------------------ tree
    def start_tree(self) -> None:
        c = self.config
        nodes = -(-max(a.world for a in self.attempts) // c.ranks_per_node)
        racks = -(-nodes // c.nodes_per_rack)
        self.root = Proc("root", python_module(
            "collectors.cli", "collector", "--id", "root", "--listen", "127.0.0.1:0",
            "--db", str(self.workdir / "root.db"), "--api", f"127.0.0.1:{c.root_api_port}",
            "--deadline-floor", str(c.root_deadline_floor),
            *(["--detectors", c.detectors] if c.detectors else [])), self.logs).start()
        self.api = f"http://{self.root.ready['api']}"
        root_addr = self.root.ready["address"]
        for r in range(racks):
            self.racks.append(Proc(f"rack{r}", python_module(
                "collectors.cli", "collector", "--id", f"rack{r}", "--listen", "127.0.0.1:0",
                "--parent", root_addr, "--deadline-floor", str(c.collector_deadline_floor)), self.logs).start())
        for n in range(nodes):
            rack = self.racks[n // c.nodes_per_rack]
            self.agents.append(Proc(f"agent{n}", python_module(
                "collectors.cli", "agent", "--id", f"agent{n}", "--socket", str(self.workdir / f"agent{n}.sock"),
                "--parent", rack.ready["address"], "--deadline-floor", str(c.agent_deadline_floor),
                # Every simulated agent shares this one host: its hardware would be sampled once per agent.
                *c.agent_hardware.get(n, [] if n < c.probe_agents else ["--no-gpu-probe", "--no-nic-probe"])),
                self.logs).start())
        self.progress(f"tree up: root, {racks} racks, {nodes} agents")

    def start_ranks(self, attempt: Attempt | None = None, start_file: Path | None = None) -> list[Proc]:
        """Start the rank hosts of one attempt (several nodes' ranks to a process; by default the job's only
        attempt) and wait until every rank is connected."""
        c = self.config
        attempt = attempt or self.attempts[0]
        start_file = start_file or self.start_file
        dead = {int(i["rank"]) for i in c.injections if i.kind == "dead"}
        per_process = max(c.ranks_per_node, c.ranks_per_process)
        started = []
        for first in range(0, attempt.world, per_process):
            ranks = list(range(first, min(attempt.world, first + per_process)))
            groups = [[r for r in ranks if r not in dead]] + [[r] for r in ranks if r in dead]
            for group in (g for g in groups if g):
                name = f"{attempt.tag}ranks{first}" + (f"-{group[0]}" if group[0] in dead else "")
                argv = python_module(
                    "collectors.sim.ranks", "--job", c.job, "--ranks", ",".join(map(str, group)),
                    "--world-size", str(attempt.world), "--ranks-per-node", str(c.ranks_per_node),
                    "--agent", f"unix:{self.workdir}/agent{{node}}.sock", "--steps", str(attempt.last_step),
                    "--first-step", str(attempt.first_step),
                    "--interval", str(c.step_interval), "--start-file", str(start_file),
                    "--seed", str(c.seed + attempt.seed_offset),
                    "--truth", str(self.workdir / f"{name}.truth"), "--hold", str(c.hang_observe_s + 3600),
                    "--flush-interval", str(c.sdk_flush_interval),
                    *([] if attempt.attempt is None else ["--attempt", str(attempt.attempt)]),
                    *(["--crash"] if attempt.crash else []),
                    *([] if c.sync_collectives else ["--no-sync-collectives"]))
                for text, inj in zip(c.inject_texts, c.injections):
                    if inj.kind != "restart":  # the orchestrator runs restarts (attempts), not the ranks
                        argv += ["--inject", text]
                self.progress(f"starting {name} ({len(group)} ranks)")
                started.append(Proc(name, argv, self.logs).start(timeout=180))
                self.rank_hosts.append(started[-1])
        return started

    # ------------------------------------------------------------------ chaos
    # Runs on the main thread: PR_SET_PDEATHSIG kills a child when the *thread* that started it ends.
    def _chaos_plan(self, start_at: float, end_at: float) -> list[tuple[float, str, float]]:
        rng = random.Random(self.config.seed + 7919)
        span = max(1.0, end_at - start_at)
        plan = [(start_at + span * rng.uniform(0.15, 0.85), kind, rng.uniform(0.3, 1.0))
                for kind in ("rack", "agent", "rack", "agent")]
        plan.append((start_at + span * rng.uniform(0.3, 0.7), "root", rng.uniform(0.3, 1.0)))
        self._chaos_rng = rng
        return sorted(plan)

    def _chaos_tick(self, plan: list[tuple[float, str, float]], down: list[tuple[float, Proc]]) -> None:
        now = time.time()
        for restart_at, proc in list(down):
            if now >= restart_at:
                proc.start()
                down.remove((restart_at, proc))
        while plan and now >= plan[0][0]:
            when, kind, pause = plan.pop(0)
            pools: dict[str, Sequence[Proc | None]] = {"rack": self.racks, "agent": self.agents, "root": [self.root]}
            pool = pools[kind]
            target = self._chaos_rng.choice([p for p in pool if p is not None and p.alive()] or [None])
            if target is None:
                continue
            self.progress(f"chaos: SIGKILL {target.name}")
            target.kill()
            down.append((now + pause, target))
            self.chaos_log.append({"time": now, "killed": target.name, "down_s": round(pause, 3)})

    # ------------------------------------------------------------------ run
    def run(self) -> dict:
        try:
            self.start_tree()
            return self.run_job()
        finally:
            self.shutdown()

    def run_job(self) -> dict:
        """On a started tree: start the ranks, drive every step, observe any hang, settle, report. With a
        restart, the first attempt's ranks crash after its last step and the next attempt starts after a pause."""
        c = self.config
        for attempt in self.attempts[:-1]:
            start_file = self.workdir / f"{attempt.tag}start"
            hosts = self.start_ranks(attempt, start_file)
            start_at = time.time() + 1.0
            start_file.write_text(repr(start_at))
            self._wait_steps(start_at, start_at + (attempt.last_step - attempt.first_step + 1) * c.step_interval,
                             attempt.last_step, attempt.first_step, chaos=False)  # chaos in the last attempt
            self._wait_ranks(hosts, "crash after its last step")  # they exit once their steps are durable
            self._sleep_progress(c.restart_pause_s, f"attempt {attempt.attempt} crashed; restarting")
        last = self.attempts[-1]
        start_file = self.start_file if len(self.attempts) == 1 else self.workdir / f"{last.tag}start"
        self.start_ranks(last, start_file)
        start_at = time.time() + 1.0
        start_file.write_text(repr(start_at))
        end_at = start_at + (last.last_step - last.first_step + 1) * c.step_interval
        self._wait_steps(start_at, end_at, last.last_step, last.first_step)
        if any(i.kind in ("hang", "dead") for i in c.injections):
            self._sleep_progress(c.hang_observe_s, "observing the hang")
        self.on_job_end()
        for host in self.rank_hosts:
            (self.workdir / f"{host.name}.stop").touch()
        self._wait_ranks()
        self.settle()
        return self.report()

    def _wait_steps(self, start_at: float, end_at: float, last_step: int | None = None, first_step: int = 1,
                    chaos: bool = True) -> None:
        c = self.config
        last_step = c.steps if last_step is None else last_step
        plan = self._chaos_plan(start_at, end_at) if c.chaos and chaos else []
        down: list[tuple[float, Proc]] = []
        while time.time() < end_at + c.step_interval or down:
            step = int((time.time() - start_at) / c.step_interval) + first_step
            self.progress(f"step {max(0, min(step, last_step))}/{c.steps}")
            self._chaos_tick(plan, down)
            time.sleep(0.05)

    def _sleep_progress(self, seconds: float, what: str) -> None:
        end = time.time() + seconds
        while time.time() < end:
            self.progress(f"{what}: {end - time.time():.0f} s")
            time.sleep(min(1.0, end - time.time()) if end > time.time() else 0)

    def _wait_ranks(self, hosts: list[Proc] | None = None, what: str = "deliver everything") -> None:
        deadline = time.time() + self.config.settle_timeout_s
        for host in self.rank_hosts if hosts is None else hosts:
            while host.alive() and time.time() < deadline:
                self.progress(f"waiting for {host.name} to {what}")
                time.sleep(0.2)
            if host.alive():
                log.warning("%s did not finish; killing it", host.name)
                host.kill()

    def settle(self) -> None:
        """Wait until the root has finalised every step it will: its last steps and its late-delta count stay
        the same over two polls a second apart (deadlines are a few seconds; late deltas may follow)."""
        job = self.config.job
        deadline = time.time() + self.config.root_deadline_floor + 15
        seen: list[object] = []
        while time.time() < deadline:
            rows = self.fetch(f"/api/v1/jobs/{job}/steps?metric=step_time&last=3").get("steps", [])
            counters = self.fetch(f"/api/v1/jobs/{job}/progress").get("counters", {})
            seen.append(([(r["step"], r["count"], r["late"]) for r in rows], counters.get("late")))
            if rows and len(seen) >= 3 and seen[-1] == seen[-2] == seen[-3]:
                break
            time.sleep(1.0)

    def fetch(self, path: str) -> dict:
        try:
            with urllib.request.urlopen(self.api + path, timeout=10) as reply:
                return json.load(reply)
        except OSError:
            return {}

    # ------------------------------------------------------------------ report
    def report(self) -> dict:
        c = self.config
        # every attempt's run of each step (a single-attempt job: the same rows as the default timeline)
        steps = {m: self.fetch(f"/api/v1/jobs/{c.job}/steps?metric={m}&last={c.steps + 5}&attempt=all")
                 .get("steps", []) for m in metrics(c.sync_collectives)}
        progress = self.fetch(f"/api/v1/jobs/{c.job}/progress")
        events = self.fetch(f"/api/v1/jobs/{c.job}/events?last=10000").get("events", [])
        latencies = [(row["finalised_ns"] - row["last_time_ns"]) / 1e6 for row in steps["step_time"]
                     if not row["late"] and not row["missing"] and row["last_time_ns"]]
        counters = progress.get("counters", {})
        truth = self.workdir / "truth.jsonl"
        with truth.open("w") as out:
            for host in self.rank_hosts:
                part = self.workdir / f"{host.name}.truth"
                if part.exists():
                    out.write(part.read_text())
        return {
            "world_size": c.ranks, "world_sizes": self.world_sizes(), "job": c.job, "steps": c.steps, "seed": c.seed,
            "chaos": c.chaos,
            "injections": c.inject_texts, "metrics": steps, "progress": progress, "events": events,
            "delivery": {name: counters.get(name, 0) for name in
                         ("sdk_dropped", "dropped_windows", "rejected_overlaps", "duplicates", "resent", "late",
                          "bad_inputs")},
            "latency_ms": {"p50": float(np.percentile(latencies, 50)) if latencies else None,
                           "p99": float(np.percentile(latencies, 99)) if latencies else None,
                           "samples": len(latencies)},
            "chaos_log": self.chaos_log, "truth_file": str(truth), "workdir": str(self.workdir),
        }

    def world_sizes(self) -> dict[int, int]:
        """Attempt -> world size, from what the ranks logged (an attempt the SDK chose is known from its truth)."""
        sizes: dict[int, int] = {}
        worlds = {a.attempt: a.world for a in self.attempts}
        for host in self.rank_hosts:
            part = self.workdir / f"{host.name}.truth"
            if not part.exists():
                continue
            for line in part.read_text().splitlines():
                if line.strip():
                    attempt = int(json.loads(line).get("attempt", 0))
                    sizes[attempt] = worlds.get(attempt, self.attempts[0].world)
                    break
        return sizes

    def shutdown(self) -> None:
        for proc in [*self.rank_hosts, *self.agents, *self.racks, *([self.root] if self.root else [])]:
            proc.stop()

    def cleanup(self) -> None:
        if self.own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def plan_attempts(config: SimConfig) -> list[Attempt]:
    """The job's launches: one (the SDK's attempt), or with a restart injection attempt 1 (steps 1..S, crashing)
    then attempt 2 (steps K..the last, on `world` ranks)."""
    restart = restart_of(config.injections)
    if restart is None:
        return [Attempt(None, config.ranks, 1, config.steps)]
    world = int(restart.args.get("world", config.ranks))
    return [Attempt(1, config.ranks, 1, int(restart["step"]), crash=True),
            Attempt(2, world, int(restart["resume"]), config.steps, seed_offset=1_000_003)]
