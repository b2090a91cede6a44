"""Runs the demo: a local tree, a job with faults injected, the live view, then the summary, report and plot.

Simulated mode reuses `collectors.sim` (real root, racks and agent processes; simulated ranks on the
real SDK). `--train` starts the same tree and runs examples/train_ddp.py under torchrun against it.
The view only reads the root's public API, which stays up (with /metrics) for `--linger` seconds
after the job so it can be scraped or queried by hand.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.live import Live

from collectors.demo import train
from collectors.demo.scenario import Scenario, demo_detectors
from collectors.demo.view import events_table, render
from collectors.demo.watch import RootWatcher
from collectors.sim.model import parse_injection
from collectors.sim.orchestrate import SimConfig, Simulation


@dataclass
class DemoConfig:
    ranks: int = 64
    steps: int = 60
    step_interval: float = 0.5
    train: bool = False
    train_ranks: int = 4
    api_port: int = 7600
    job: str = "demo"
    seed: int = 0
    live: bool = True
    linger: float = 0.0
    workdir: Path | None = None
    hang_observe_s: float = 14.0


class Demo:
    def __init__(self, config: DemoConfig, console: Console) -> None:
        self.config = config
        self.console = console
        world = config.train_ranks if config.train else config.ranks
        self.world = world
        self.scenario = Scenario.for_run(world, config.steps)
        injections = [] if config.train else self.scenario.sim_injections()
        self.sim = Simulation(SimConfig(
            ranks=world, ranks_per_node=world if config.train else 8, nodes_per_rack=1 if config.train else 4,
            steps=config.steps, step_interval=config.step_interval, seed=config.seed, job=config.job,
            injections=[parse_injection(text) for text in injections], inject_texts=injections,
            workdir=config.workdir, root_api_port=config.api_port, probe_agents=1,
            detectors=demo_detectors(config.train),
            hang_observe_s=config.hang_observe_s))
        self.watcher: RootWatcher | None = None
        self._live: Live | None = None
        self._during_job: list[dict[str, Any]] | None = None
        self._printed = 0.0

    def run(self) -> dict[str, Any]:
        live = Live(console=self.console, refresh_per_second=4, transient=False) if self.config.live else None
        self.sim.progress = self._status
        try:
            if live is not None:
                live.start()
            self.sim.start_tree()
            self.watcher = RootWatcher(self.sim.api, self.config.job).start()
            if live is not None:
                live.update(self._renderable(), refresh=True)
                self._live = live
            self.sim.on_job_end = self._job_ended
            report = self._run_train() if self.config.train else self._run_sim()
            if self._during_job is None:
                self._job_ended()
            # What the root had raised while the job ran (stopping the hung ranks afterwards updates the open
            # hang event: they exit and become dead), and each event as it was first raised.
            report["events_during_job"] = self._during_job
            report["events_as_raised"] = [self.watcher.first_seen[i] for i in sorted(self.watcher.first_seen)]
            if self.config.linger > 0:
                self._linger()
            return report
        finally:
            if self.watcher is not None:
                self.watcher.stop()
            if live is not None:
                live.update(self._renderable(), refresh=True)
                live.stop()
            self.sim.shutdown()

    # ------------------------------------------------------------------ modes
    def _run_sim(self) -> dict[str, Any]:
        return self.sim.run_job()

    def _run_train(self) -> dict[str, Any]:
        c = self.config
        agent = f"unix:{self.sim.workdir}/agent0.sock"
        flags = self.scenario.train_flags(hang_seconds=c.hang_observe_s)
        proc = train.launch(self.world, c.job, agent, c.steps, flags, self.sim.logs / "torchrun.log")
        try:
            while proc.poll() is None:
                self._status(f"torchrun: {self.world} ranks training ({c.steps} steps)")
                time.sleep(0.25)
        finally:
            train.kill_job(proc, c.job)
        if proc.returncode != 0:
            tail = (self.sim.logs / "torchrun.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"torchrun exited with {proc.returncode}:\n{tail}")
        self.sim.settle()
        return self.sim.report()

    def _job_ended(self) -> None:
        """Freeze the view at the job's end: the last refresh, then no more polling."""
        assert self.watcher is not None
        self.watcher.stop()
        self.watcher.refresh()
        self._during_job = self.watcher.snapshot().events

    # ------------------------------------------------------------------ view
    def _status(self, text: str) -> None:
        if self.watcher is not None:
            self.watcher.set_status(text)
        if self._live is not None:
            self._live.update(self._renderable())
        elif time.monotonic() - self._printed >= 5.0:  # not a terminal: a progress line every 5 s
            self._printed = time.monotonic()
            self.console.print(f"[{time.strftime('%H:%M:%S')}] {text}", highlight=False)

    def _renderable(self) -> Any:
        snapshot = self.watcher.snapshot() if self.watcher is not None else None
        if snapshot is None:
            return "starting the tree"
        return render(snapshot, self.world, self.config.steps, self.scenario.describe(self.config.train))

    def _linger(self) -> None:
        """Keep the tree up; Ctrl-C (which the status line invites) ends the wait, not the demo: the report and
        the plot are still written. (The terminal's SIGINT also reaches the tree's processes, in the same
        process group: they stop by themselves; the report was taken before.)"""
        end = time.time() + self.config.linger
        try:
            while time.time() < end:
                self._status(f"job done; root API {self.sim.api} and {self.sim.api}/metrics stay up "
                             f"{end - time.time():.0f} s more (Ctrl-C to stop)")
                time.sleep(0.5)
        except KeyboardInterrupt:
            self._status("Ctrl-C: stopping the tree; writing the report")

    def print_summary(self, report: dict[str, Any]) -> None:
        latency = report.get("latency_ms", {})
        self.console.print(f"[bold]{self.world} ranks, {self.config.steps} steps[/]: "
                           f"{len(report['metrics'].get('step_time', []))} step_time windows finalised; latency "
                           f"step end → root p50 {_ms(latency.get('p50'))}, p99 {_ms(latency.get('p99'))}; "
                           f"delivery {report.get('delivery')}")
        self.console.print(events_table(report.get("events_as_raised", []), limit=50,
                                        final=report.get("events_during_job") or []))
        kinds = sorted({e["kind"] for e in report.get("events", [])})
        self.console.print(f"events raised: {len(report.get('events', []))} ({', '.join(kinds) or 'none'})")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.0f} ms"
