"""Soak: does the tree stay the same size and cost after many jobs and a long steady run?

    .venv/bin/python bench/soak.py                        # 1,000 jobs, then 64 ranks for 20 min (~35 min)
    .venv/bin/python bench/soak.py --quick --out /tmp/soak   # ~5 minutes, for development

Real service processes started with the CLI: a root (`telemetry collector --db --api`), a rack
(`telemetry collector --parent ROOT`) and one agent (`telemetry agent --parent RACK`). Ranks are
driver subprocesses of this script that use the real SDK (`telemetry.init`, `run.step`, `run.log`,
`run.close`), as threads, so that a 2-core machine is not swamped by hundreds of interpreters.

Phase 1, "jobs": --jobs short jobs in a row, each a distinct job name of --job-ranks ranks and
--job-steps steps; every Run of a job is closed (durable at the root, close() returned True) before
the next job starts. The services are sampled between jobs (none in flight) every --sample-every
jobs, at the baseline job (100, or half of --jobs when there are fewer than 200) and after the last.
Before the first job, at the baseline job and after the last, the bench also waits --idle-s seconds
with no job, measuring the services' idle CPU (a service that keeps re-scanning finished jobs burns
CPU while nothing happens), and then takes a "settled" sample: what the services keep of finished
jobs once the jobs of the last seconds are past the services' 10 s grace after a close.

Phase 2, "steady": one job of --steady-ranks ranks (--ranks-per-process threads per driver process)
stepping every --step-interval seconds for --steady-minutes, sampled every --steady-sample-s with the
steps completed so far, so CPU per step is known per interval. At the end the root's JSON API says
how many steps are complete (count == world size).

A sample is, per service process from /proc: RSS (VmRSS), CPU seconds (utime + stime), threads,
open file descriptors; and the root's /metrics: its size in bytes, the distinct job="..." label
values and the time the scrape took.

Targets (the project's soak issue), each reported met or not met as measured, never adjusted:
- RSS growth of every service from the baseline job to the last job <= 5 % (settled samples);
- CPU per step flat: per service, the last third of phase 2 <= 1.10 x the first third;
- /metrics independent of the number of finished jobs: its bytes at the last job <= 1.05 x at the
  baseline job (settled samples; how many jobs sit in the grace period right after a job depends on
  the pace of the jobs, which a loaded machine changes: those "in flight" figures are reported too).
Threads, fds, idle CPU, CPU per job and the steady run's RSS are reported too, without targets.

The command exits 0 when the run completed (targets met or not), 1 when a service or a driver
failed (the JSON then says what, with "complete": false), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import signal
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# bench/ is this script's folder (first on sys.path): its neighbours import as they are
from harness import BenchError, Progress, apply_quick, failure, parser, run_in_workdir, write_result
from machine import machine_facts
from procstat import cpu_seconds, status

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

SERVICES = ("root", "rack", "agent")
PARENT_ENV = "TELEMETRY_DIE_WITH_PARENT"  # the services arm PDEATHSIG for this pid (collectors.common.lifetime)
TARGETS = {"rss_growth_percent_max": 5.0, "cpu_per_step_last_over_first_max": 1.10,
           "metrics_bytes_last_over_baseline_max": 1.05}
QUICK = {"jobs": 200, "steady_minutes": 1.0, "steady_ranks": 16, "steady_sample_s": 10.0}
STEADY_JOB = "soak-steady"


# ---------------------------------------------------------------- /proc and /metrics


def proc_figures(pid: int) -> dict[str, float]:
    """RSS, CPU seconds, threads and open fds of one process, read from /proc (the process must be alive)."""
    fields = status(pid)
    return {"rss_bytes": int(fields["VmRSS"].split()[0]) * 1024,
            "cpu_s": cpu_seconds(pid),
            "threads": int(fields["Threads"]),
            "fds": len(os.listdir(f"/proc/{pid}/fd"))}


def scrape_metrics(api: str, timeout: float) -> dict[str, Any]:
    """The root's /metrics: size, distinct job label values, and how long the scrape took.

    A failed scrape is recorded ({"error": ...}), not raised: the process figures are still worth having.
    """
    start = time.perf_counter()
    try:
        with urllib.request.urlopen(f"http://{api}/metrics", timeout=timeout) as response:
            body = response.read()
    except OSError as exc:  # URLError, HTTPError (a 500 from the root), timeouts
        return {"error": str(exc)}
    elapsed = time.perf_counter() - start
    return {"bytes": len(body), "job_labels": len(job_label_values(body.decode(errors="replace"))),
            "scrape_s": round(elapsed, 4)}


def job_label_values(text: str) -> set[str]:
    """Every value of a job="..." label in a Prometheus exposition."""
    values = set()
    for part in text.split('job="')[1:]:
        values.add(part.split('"', 1)[0])
    return values


def get_json(api: str, path: str, timeout: float) -> Any:
    with urllib.request.urlopen(f"http://{api}{path}", timeout=timeout) as response:
        return json.loads(response.read())


# ---------------------------------------------------------------- processes


@dataclass
class Service:
    """One service process started with the CLI; it prints one JSON ready line on stdout."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen | None = None
    ready: dict[str, Any] = field(default_factory=dict)

    def start(self, timeout: float) -> Service:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", PARENT_ENV: str(os.getpid())}
        with open(self.log_path, "ab") as log:
            self.popen = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                          env=env, cwd=REPO)
        lines: queue.Queue[bytes] = queue.Queue()
        stdout = self.popen.stdout
        assert stdout is not None  # stdout=PIPE
        threading.Thread(target=lambda: lines.put(stdout.readline()), daemon=True).start()
        try:
            self.ready = json.loads(lines.get(timeout=timeout))
        except queue.Empty:
            self.stop()
            raise BenchError(f"{self.name} did not print its ready line within {timeout:.0f} s: {self.log_tail()}") from None
        except ValueError:  # EOF (it exited) or not a JSON line
            self.stop()
            raise BenchError(f"{self.name} did not start (status {self.popen.poll()}): {self.log_tail()}") from None
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def check(self) -> None:
        """Raise if the process has exited: every figure after that would be meaningless."""
        if self.popen is None or self.popen.poll() is not None:
            code = None if self.popen is None else self.popen.returncode
            raise BenchError(f"service {self.name} exited (status {code}): {self.log_tail()}")

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM, wait, then SIGKILL: the services stop cleanly on SIGTERM."""
        if self.popen is None or self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)


class Driver:
    """A rank driver subprocess (this script, `_jobs` or `_steady`): commands on stdin, JSON lines on stdout.

    A reader thread puts (index, message) on a queue shared by all drivers, and (index, None) when the
    driver's stdout closes. The driver stops when its stdin closes, so it never outlives the bench.
    """

    def __init__(self, index: int, argv: list[str], log_path: Path, messages: queue.Queue) -> None:
        self.index, self.log_path = index, log_path
        with open(log_path, "ab") as log:
            self.popen = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), *argv], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=log, cwd=REPO, text=True,
                                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
        threading.Thread(target=self._read, args=(messages,), daemon=True).start()

    def _read(self, messages: queue.Queue) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            try:
                messages.put((self.index, json.loads(line)))
            except ValueError:
                pass  # not ours (a library printing to stdout): ignore
        messages.put((self.index, None))

    def send(self, message: dict[str, Any]) -> None:
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(message) + "\n")
        self.popen.stdin.flush()

    def failure(self) -> str:
        self.popen.poll()
        tail = self.log_path.read_text(errors="replace")[-1500:] if self.log_path.exists() else ""
        return f"driver {self.index} stopped (status {self.popen.returncode}): {tail}"

    def stop(self, timeout: float = 10.0) -> None:
        """Close stdin (the driver's signal to stop), wait, then kill."""
        try:
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        except OSError:
            pass
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait(timeout)


def next_message(messages: queue.Queue, drivers: list[Driver], services: dict[str, Service],
                 timeout: float) -> tuple[int, dict[str, Any]] | None:
    """The next driver message, or None after `timeout`; raises if a driver stopped or a service exited."""
    deadline = time.monotonic() + timeout
    while True:
        for service in services.values():
            service.check()
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        try:
            index, message = messages.get(timeout=min(1.0, left))
        except queue.Empty:
            continue
        if message is None:
            drivers[index].popen.wait(10)
            raise BenchError(drivers[index].failure())
        return index, message


def expect_message(messages: queue.Queue, drivers: list[Driver], services: dict[str, Service],
                   timeout: float) -> tuple[int, dict[str, Any]]:
    """The next driver message; its absence after `timeout` is a failure (a hung driver or service)."""
    got = next_message(messages, drivers, services, timeout)
    if got is None:
        raise BenchError(f"no message from the drivers for {timeout:.0f} s")
    return got


def start_services(args: argparse.Namespace, workdir: Path, services: dict[str, Service]) -> None:
    """Root, rack and agent, each started once the one before it is ready; into `services` as they start,
    so that the caller stops those that did if a later one fails."""
    cli = [sys.executable, "-m", "collectors.cli"]
    extra = ["--job-idle-timeout", str(args.job_idle_timeout)] if args.job_idle_timeout is not None else []
    root = Service("root", [*cli, "collector", "--listen", "127.0.0.1:0", "--db", str(workdir / "root.db"),
                            "--api", "127.0.0.1:0", *extra, *args.collector_arg], workdir / "root.log")
    services["root"] = root
    root.start(args.start_timeout)
    rack = Service("rack", [*cli, "collector", "--listen", "127.0.0.1:0", "--parent", root.ready["address"],
                            *extra, *args.collector_arg], workdir / "rack.log")
    services["rack"] = rack
    rack.start(args.start_timeout)
    agent = Service("agent", [*cli, "agent", "--socket", str(workdir / "agent.sock"), "--parent",
                              rack.ready["address"], "--no-gpu-probe", "--no-nic-probe", *extra, *args.agent_arg],
                    workdir / "agent.log")
    services["agent"] = agent
    agent.start(args.start_timeout)


# ---------------------------------------------------------------- sampling


def sample(services: dict[str, Service], api: str, args: argparse.Namespace, **context: Any) -> dict[str, Any]:
    """One reading of every service and of the root's /metrics, tagged with `context` (job count, steps...)
    and the load average (other work on the machine shows in CPU per step and job time)."""
    figures = {}
    for name, service in services.items():
        service.check()
        figures[name] = proc_figures(service.pid)
    return {"t": round(time.monotonic(), 3), **context, "services": figures,
            "metrics": scrape_metrics(api, args.http_timeout), "load_1m": os.getloadavg()[0]}


def idle_cpu(services: dict[str, Service], seconds: float) -> dict[str, float]:
    """CPU % of each service over `seconds` with no rank connected (100 = one core)."""
    before = {name: proc_figures(s.pid)["cpu_s"] for name, s in services.items()}
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    out = {}
    for name, service in services.items():
        service.check()
        out[name] = round((proc_figures(service.pid)["cpu_s"] - before[name]) / elapsed * 100, 2)
    return out


def describe(s: dict[str, Any]) -> str:
    rss = ", ".join(f"{name} {s['services'][name]['rss_bytes'] / 2**20:.1f}" for name in SERVICES)
    m = s["metrics"]
    if "error" in m:
        return f"RSS MiB {rss}; /metrics failed: {m['error']}"
    return f"RSS MiB {rss}; /metrics {m['bytes'] / 1024:.1f} KiB, {m['job_labels']} jobs, {m['scrape_s'] * 1000:.0f} ms"


# ---------------------------------------------------------------- phase 1: jobs


def checkpoints(jobs: int, every: int, baseline: int) -> list[int]:
    """Job counts after which to sample: every `every` jobs, the baseline job and the last job."""
    points = set(range(every, jobs + 1, every)) | {jobs}
    if baseline > 0:
        points.add(baseline)
    return sorted(points)


def baseline_job(jobs: int) -> int:
    """Job 100, the issue's reference point; with fewer than 200 jobs, the middle one (jobs >= 2: >= 1)."""
    return min(100, jobs // 2)


def phase_jobs(args: argparse.Namespace, services: dict[str, Service], api: str, workdir: Path,
               progress: Progress, result: dict[str, Any]) -> None:
    """Run --jobs jobs in a row through one driver, sampling between jobs at every checkpoint."""
    messages: queue.Queue = queue.Queue()
    agent = "unix:" + str(workdir / "agent.sock")
    driver = Driver(0, ["_jobs", "--agent", agent, "--ranks", str(args.job_ranks), "--steps", str(args.job_steps),
                        "--step-interval", str(args.job_step_interval), "--close-timeout", str(args.close_timeout)],
                    workdir / "jobs-driver.log", messages)
    phase: dict[str, Any] = {"baseline_job": baseline_job(args.jobs), "samples": [], "jobs": []}
    result["jobs_phase"] = phase

    def settle(job: int) -> None:
        """Idle for --idle-s (its CPU measured), then a sample: what the services keep of finished jobs."""
        idle = idle_cpu(services, args.idle_s)
        s = sample(services, api, args, job=job, settled=True, idle_cpu_percent=idle,
                   driver=proc_figures(driver.popen.pid))
        phase["samples"].append(s)
        progress(f"job {job}, after {args.idle_s:g} s idle: idle CPU % {idle}; {describe(s)}")

    try:
        settle(0)
        done = 0
        for point in checkpoints(args.jobs, args.sample_every, phase["baseline_job"]):
            driver.send({"run": point - done})
            while done < point:
                _, message = expect_message(messages, [driver], services, args.close_timeout * 2 + 60)
                phase["jobs"].append(message)
                done += 1
            s = sample(services, api, args, job=done, settled=False, driver=proc_figures(driver.popen.pid))
            phase["samples"].append(s)
            failed = sum(not j["ok"] for j in phase["jobs"])
            progress(f"jobs {done}/{args.jobs} ({failed} failed): {describe(s)}")
            if done in (phase["baseline_job"], args.jobs):
                settle(done)
    finally:
        driver.stop()


# ---------------------------------------------------------------- phase 2: steady


def rank_groups(ranks: int, per_process: int) -> list[list[int]]:
    return [list(range(first, min(ranks, first + per_process))) for first in range(0, ranks, per_process)]


def phase_steady(args: argparse.Namespace, services: dict[str, Service], api: str, workdir: Path,
                 progress: Progress, result: dict[str, Any]) -> None:
    """One job of --steady-ranks ranks for --steady-minutes; a sample every --steady-sample-s with the steps done."""
    steps = max(1, round(args.steady_minutes * 60 / args.step_interval))
    agent = "unix:" + str(workdir / "agent.sock")
    messages: queue.Queue = queue.Queue()
    groups = rank_groups(args.steady_ranks, args.ranks_per_process)
    phase: dict[str, Any] = {"job": STEADY_JOB, "world_size": args.steady_ranks, "steps": steps,
                             "driver_processes": len(groups), "samples": []}
    result["steady_phase"] = phase
    drivers = [Driver(i, ["_steady", "--agent", agent, "--job", STEADY_JOB, "--ranks", ",".join(map(str, group)),
                          "--world-size", str(args.steady_ranks), "--steps", str(steps),
                          "--step-interval", str(args.step_interval), "--close-timeout", str(args.close_timeout)],
                      workdir / f"steady-driver-{i}.log", messages) for i, group in enumerate(groups)]
    try:
        ready = 0
        phase["ranks_connected"] = 0
        while ready < len(drivers):
            _, message = expect_message(messages, drivers, services, args.start_timeout)
            ready += bool(message.get("ready"))
            phase["ranks_connected"] += message.get("connected", 0)
        start_at = time.time() + 1.0
        for d in drivers:
            d.send({"start": start_at})
        time.sleep(max(0.0, start_at - time.time()))
        step_of = [0] * len(drivers)
        closed: dict[int, dict[str, Any]] = {}
        phase["samples"].append(sample(services, api, args, steps=0))
        next_sample = time.monotonic() + args.steady_sample_s
        deadline = time.monotonic() + args.steady_minutes * 60 + args.close_timeout + 120
        sampled_end = False
        while len(closed) < len(drivers):
            if time.monotonic() > deadline:
                raise BenchError(f"the steady run did not finish in time (drivers at steps {step_of})")
            wait = 1.0 if sampled_end else max(0.05, next_sample - time.monotonic())
            got = next_message(messages, drivers, services, wait)
            if got is not None:
                index, message = got
                step_of[index] = message.get("step", step_of[index])
                if "closed" in message:
                    closed[index] = message
            if sampled_end:
                continue  # the ranks are closing: CPU spent now is not per step
            at_end = min(step_of) >= steps
            if time.monotonic() >= next_sample or at_end:
                s = sample(services, api, args, steps=min(step_of))
                phase["samples"].append(s)
                sampled_end = at_end
                next_sample = time.monotonic() + args.steady_sample_s
                progress(f"steady step {min(step_of)}/{steps}: {describe(s)}")
        phase["closed_ok"] = sum(c["closed"] for c in closed.values())
        phase["close_failed"] = sum(c["failed"] for c in closed.values())
        phase["completeness"] = steady_completeness(api, steps, args)
    finally:
        for d in drivers:
            d.stop()


def steady_completeness(api: str, steps: int, args: argparse.Namespace) -> dict[str, Any]:
    """How many of the steady job's steps the root holds with every rank counted (its JSON API)."""
    try:
        got = get_json(api, f"/api/v1/jobs/{STEADY_JOB}/steps?metric=step_time&last={min(steps, 10_000)}",
                       args.http_timeout)["steps"]
    except (OSError, ValueError, KeyError) as exc:
        return {"steps_expected": steps, "error": f"{type(exc).__name__}: {exc}"}
    complete = sum(1 for s in got if s["count"] == args.steady_ranks)
    return {"steps_expected": steps, "steps_at_root": len(got), "steps_complete": complete,
            "checked_last": min(steps, 10_000)}


# ---------------------------------------------------------------- figures


def growth_percent(before: float, after: float) -> float | None:
    return None if not before else round((after - before) / before * 100, 2)


def scrape_ms(s: dict[str, Any]) -> float | None:
    return round(s["metrics"]["scrape_s"] * 1000, 1) if "scrape_s" in s["metrics"] else None


def jobs_figures(phase: dict[str, Any]) -> dict[str, Any]:
    """RSS growth, /metrics, idle CPU and CPU per job of phase 1, from its samples.

    The targets compare the settled samples (taken after --idle-s seconds without a job) at the baseline
    and the last job: both then hold only what the services keep of finished jobs, whatever the pace of
    the jobs (a loaded machine) put inside their grace period. The samples taken right after a job are
    reported as "in flight".
    """
    samples = phase["samples"]
    base_job = phase["baseline_job"]
    settled = {s["job"]: s for s in samples if s["settled"]}
    in_flight = {s["job"]: s for s in samples if not s["settled"]}
    start, base, last = settled[0], settled[base_job], samples[-1]
    first_after = next(s for s in samples if s["job"] > base_job)  # the jobs after the baseline's idle period

    def cpu_ms_per_job(a: dict, b: dict, name: str) -> float | None:
        jobs = b["job"] - a["job"]
        return None if jobs <= 0 else round((b["services"][name]["cpu_s"] - a["services"][name]["cpu_s"]) / jobs * 1000, 2)

    per_service = {}
    for name in SERVICES:
        b, e = base["services"][name], last["services"][name]
        per_service[name] = {
            "rss_mib_baseline": round(b["rss_bytes"] / 2**20, 2), "rss_mib_last": round(e["rss_bytes"] / 2**20, 2),
            "rss_growth_percent": growth_percent(b["rss_bytes"], e["rss_bytes"]),
            "cpu_ms_per_job_after_baseline": cpu_ms_per_job(base, first_after, name),
            "cpu_ms_per_job_last_interval": cpu_ms_per_job(samples[-3], samples[-2], name),  # no idle period between
        }
    jobs = phase["jobs"]
    seconds = [j["seconds"] for j in jobs]
    window = min(100, max(1, len(seconds) // 2))
    points = (("baseline", base), ("last", last))
    return {
        "jobs_run": len(jobs), "jobs_completed": sum(j["ok"] for j in jobs),
        "jobs_failed": sum(not j["ok"] for j in jobs), "baseline_job": base_job, "last_job": last["job"],
        "services": per_service,
        "metrics": {"bytes_baseline": base["metrics"].get("bytes"), "bytes_last": last["metrics"].get("bytes"),
                    "job_labels_baseline": base["metrics"].get("job_labels"),
                    "job_labels_last": last["metrics"].get("job_labels"),
                    "scrape_ms_baseline": scrape_ms(base), "scrape_ms_last": scrape_ms(last),
                    "in_flight_bytes_baseline": in_flight[base_job]["metrics"].get("bytes"),
                    "in_flight_bytes_last": in_flight[last["job"]]["metrics"].get("bytes"),
                    "in_flight_job_labels_baseline": in_flight[base_job]["metrics"].get("job_labels"),
                    "in_flight_job_labels_last": in_flight[last["job"]]["metrics"].get("job_labels"),
                    "scrape_errors": sum("error" in s["metrics"] for s in samples)},
        "idle_cpu_percent": {"start": start["idle_cpu_percent"], "baseline": base["idle_cpu_percent"],
                             "last": last["idle_cpu_percent"]},
        "job_seconds_median_first": round(statistics.median(seconds[:window]), 4) if seconds else None,
        "job_seconds_median_last": round(statistics.median(seconds[-window:]), 4) if seconds else None,
        "job_seconds_window": window, "load_1m_max": max(s["load_1m"] for s in samples),
        "driver": {**{f"rss_mib_{at}": round(s["driver"]["rss_bytes"] / 2**20, 2) for at, s in points},
                   **{f"{what}_{at}": s["driver"][what] for at, s in points for what in ("threads", "fds")}},
    }


def steady_figures(phase: dict[str, Any]) -> dict[str, Any]:
    """CPU per step per sample interval, first third against last third, and RSS over the run."""
    samples = phase["samples"]
    intervals = []
    for a, b in zip(samples, samples[1:]):
        steps = b["steps"] - a["steps"]
        intervals.append({"steps": steps, "seconds": round(b["t"] - a["t"], 3),
                          "cpu_s": {n: round(b["services"][n]["cpu_s"] - a["services"][n]["cpu_s"],
                                             3) for n in SERVICES}})
    third = max(1, len(intervals) // 3)

    def cpu_ms_per_step(part: list[dict], name: str) -> float | None:
        steps = sum(i["steps"] for i in part)
        return None if steps <= 0 else round(sum(i["cpu_s"][name] for i in part) / steps * 1000, 3)

    per_service = {}
    for name in SERVICES:
        first, last = cpu_ms_per_step(intervals[:third], name), cpu_ms_per_step(intervals[-third:], name)
        b, e = samples[0]["services"][name], samples[-1]["services"][name]
        per_service[name] = {"cpu_ms_per_step_first_third": first, "cpu_ms_per_step_last_third": last,
                             "cpu_per_step_ratio": round(last / first, 3) if first and last is not None else None,
                             "rss_mib_start": round(b["rss_bytes"] / 2**20, 2),
                             "rss_mib_end": round(e["rss_bytes"] / 2**20, 2),
                             "rss_growth_percent": growth_percent(b["rss_bytes"], e["rss_bytes"])}
    return {"intervals": intervals, "intervals_per_third": third, "services": per_service,
            "steps_completed": samples[-1]["steps"], "load_1m_max": max(s["load_1m"] for s in samples)}


def lifetime_figures(result: dict[str, Any]) -> dict[str, Any]:
    """Threads and fds of each service at the start, after phase 1 and at the end."""
    points = {"start": result["jobs_phase"]["samples"][0], "after_jobs": result["jobs_phase"]["samples"][-1],
              "end": result["steady_phase"]["samples"][-1]}
    return {name: {f"{what}_{p}": points[p]["services"][name][what] for p in points for what in ("threads", "fds")}
            for name in SERVICES}


def verdicts(figures: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each target: the measured values, the limit and met or not, with the services that missed it."""
    jobs, steady = figures["jobs"], figures["steady"]
    rss = {n: jobs["services"][n]["rss_growth_percent"] for n in SERVICES}
    rss_limit = TARGETS["rss_growth_percent_max"]
    ratio = {n: steady["services"][n]["cpu_per_step_ratio"] for n in SERVICES}
    ratio_limit = TARGETS["cpu_per_step_last_over_first_max"]
    m = jobs["metrics"]
    measured = None not in (m["bytes_baseline"], m["bytes_last"])
    bytes_ratio = round(m["bytes_last"] / m["bytes_baseline"], 3) if measured and m["bytes_baseline"] else None
    bytes_limit = TARGETS["metrics_bytes_last_over_baseline_max"]
    return {
        "rss_growth": {"values": rss, "limit": rss_limit,
                       "missed_by": [n for n, v in rss.items() if v is None or v > rss_limit]},
        "cpu_per_step_flat": {"values": ratio, "limit": ratio_limit,
                              "missed_by": [n for n, v in ratio.items() if v is None or v > ratio_limit]},
        "metrics_independent_of_jobs": {
            "values": {"bytes_ratio": bytes_ratio, "job_labels_baseline": m["job_labels_baseline"],
                       "job_labels_last": m["job_labels_last"]},
            "limit": bytes_limit,
            "missed_by": (["root: /metrics failed"] if bytes_ratio is None else
                          [] if bytes_ratio <= bytes_limit else ["root"])},
    }


# ---------------------------------------------------------------- report


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "–" if value is None else format(value, spec)


def verdict_text(v: dict[str, Any]) -> str:
    return "met" if not v["missed_by"] else "NOT met (" + ", ".join(v["missed_by"]) + ")"


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """[figure, root, rack, agent, target, verdict] rows."""
    f, v = result["figures"], result["verdicts"]
    jobs, steady, life = f["jobs"], f["steady"], f["lifetime"]
    js, ss = jobs["services"], steady["services"]
    b, last = jobs["baseline_job"], jobs["last_job"]

    def per(fn: Callable[[str], str]) -> list[str]:
        return [fn(n) for n in SERVICES]

    m = jobs["metrics"]
    idle = jobs["idle_cpu_percent"]
    return [
        [f"RSS MiB, job {b} → job {last} (growth)",
         *per(lambda n: f"{fmt(js[n]['rss_mib_baseline'])} → {fmt(js[n]['rss_mib_last'])} "
                        f"({fmt(js[n]['rss_growth_percent'], '+.1f')} %)"),
         f"≤ {TARGETS['rss_growth_percent_max']:g} %", verdict_text(v["rss_growth"])],
        [f"/metrics, job {b} → job {last}",
         f"{fmt(m['bytes_baseline'], ',')} → {fmt(m['bytes_last'], ',')} B; {fmt(m['job_labels_baseline'], 'd')} → "
         f"{fmt(m['job_labels_last'], 'd')} jobs; scrape {fmt(m['scrape_ms_baseline'], '.0f')} → "
         f"{fmt(m['scrape_ms_last'], '.0f')} ms; in flight {fmt(m['in_flight_bytes_baseline'], ',')} → "
         f"{fmt(m['in_flight_bytes_last'], ',')} B, {fmt(m['in_flight_job_labels_baseline'], 'd')} → "
         f"{fmt(m['in_flight_job_labels_last'], 'd')} jobs"
         + (f"; {m['scrape_errors']} scrapes failed" if m["scrape_errors"] else ""),
         "–", "–",
         f"bytes ≤ {TARGETS['metrics_bytes_last_over_baseline_max']:g}×",
         verdict_text(v["metrics_independent_of_jobs"])],
        ["CPU ms per step, steady first → last third (ratio)",
         *per(lambda n: f"{fmt(ss[n]['cpu_ms_per_step_first_third'], '.2f')} → "
                        f"{fmt(ss[n]['cpu_ms_per_step_last_third'], '.2f')} ({fmt(ss[n]['cpu_per_step_ratio'], '.2f')}×)"),
         f"≤ {TARGETS['cpu_per_step_last_over_first_max']:g}×", verdict_text(v["cpu_per_step_flat"])],
        [f"CPU ms per job, after job {b} → last interval",
         *per(lambda n: f"{fmt(js[n]['cpu_ms_per_job_after_baseline'])} → {fmt(js[n]['cpu_ms_per_job_last_interval'])}"),
         "–", ""],
        [f"idle CPU %, start → job {b} → job {last}",
         *per(lambda n: f"{fmt(idle['start'][n], '.2f')} → {fmt(idle['baseline'][n], '.2f')} → "
                        f"{fmt(idle['last'][n], '.2f')}"), "–", ""],
        ["threads, start → after jobs → end",
         *per(lambda n: f"{life[n]['threads_start']} → {life[n]['threads_after_jobs']} → {life[n]['threads_end']}"),
         "–", ""],
        ["open fds, start → after jobs → end",
         *per(lambda n: f"{life[n]['fds_start']} → {life[n]['fds_after_jobs']} → {life[n]['fds_end']}"), "–", ""],
        ["RSS MiB, steady start → end (growth)",
         *per(lambda n: f"{fmt(ss[n]['rss_mib_start'])} → {fmt(ss[n]['rss_mib_end'])} "
                        f"({fmt(ss[n]['rss_growth_percent'], '+.1f')} %)"), "–", ""],
    ]


def print_report(result: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 200)
    f = result["figures"]
    jobs, steady = f["jobs"], f["steady"]
    c = result["config"]
    table = Table(title=f"soak: {jobs['jobs_run']:,} jobs of {c['job_ranks']} ranks, then {c['steady_ranks']} ranks "
                        f"for {c['steady_minutes']:g} min (root, rack, agent on one machine)")
    for column in ("figure", *SERVICES, "target", "verdict"):
        table.add_column(column, overflow="fold")
    for row in table_rows(result):
        table.add_row(*row)
    console.print(table)
    done = result["steady_phase"]["completeness"]
    at_root = (f"root holds {done['steps_complete']} of the last {done['checked_last']} complete "
               f"({c['steady_ranks']} ranks counted)" if "error" not in done else f"root's API failed: {done['error']}")
    console.print(f"jobs: {jobs['jobs_completed']:,} completed (every close() True), {jobs['jobs_failed']} failed; "
                  f"median job time {fmt(jobs['job_seconds_median_first'], '.3f')} s (first "
                  f"{jobs['job_seconds_window']}) → {fmt(jobs['job_seconds_median_last'], '.3f')} s (last); "
                  f"load average up to {jobs['load_1m_max']:.1f} (jobs), {steady['load_1m_max']:.1f} (steady) "
                  f"on {os.cpu_count()} CPUs")
    d = jobs["driver"]
    console.print(f"jobs driver (the SDK, {c['job_ranks']} Runs per job in one process), job {jobs['baseline_job']} → "
                  f"{jobs['last_job']}: RSS {d['rss_mib_baseline']:.1f} → {d['rss_mib_last']:.1f} MiB, "
                  f"threads {d['threads_baseline']} → {d['threads_last']}, fds {d['fds_baseline']} → {d['fds_last']}")
    console.print(f"steady: {result['steady_phase']['ranks_connected']}/{c['steady_ranks']} ranks connected, "
                  f"{steady['steps_completed']}/{done['steps_expected']} steps run; {at_root}; "
                  f"{result['steady_phase']['close_failed']} ranks' close() failed")


# ---------------------------------------------------------------- drivers (subprocesses of this script)


def driver_jobs(argv: list[str]) -> int:
    """Run jobs in a row, `{"run": N}` on stdin at a time; one JSON line per job; stop at stdin's end."""
    import telemetry

    p = argparse.ArgumentParser(prog="soak.py _jobs")
    p.add_argument("--agent", required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-interval", type=float, required=True)
    p.add_argument("--close-timeout", type=float, required=True)
    args = p.parse_args(argv)

    def rank(job: str, r: int, out: list) -> None:
        try:
            run = telemetry.init(job=job, rank=r, world_size=args.ranks, local_rank=r, agent=args.agent)
            for s in range(1, args.steps + 1):
                if s > 1:
                    time.sleep(args.step_interval)
                with run.step(s):
                    run.log(s, loss=1.0 / s + 0.01 * r, grad_norm=0.5 + 0.001 * s)
            out[r] = run.close(timeout=args.close_timeout)
        except Exception as exc:  # reported as this job's failure; the soak goes on
            out[r] = f"{type(exc).__name__}: {exc}"

    index = 0
    for line in sys.stdin:
        for _ in range(json.loads(line)["run"]):
            index += 1
            job = f"soak-{index:05d}"
            out: list = [None] * args.ranks
            start = time.perf_counter()
            threads = [threading.Thread(target=rank, args=(job, r, out)) for r in range(args.ranks)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            errors = [x for x in out if x is not True]
            print(json.dumps({"job": job, "ok": not errors, "seconds": round(time.perf_counter() - start, 4),
                              "errors": [str(e) for e in errors]}), flush=True)
    return 0


def driver_steady(argv: list[str]) -> int:
    """Some ranks of the steady job: connect, say ready, start at the time given on stdin, report the step."""
    import telemetry

    p = argparse.ArgumentParser(prog="soak.py _steady")
    p.add_argument("--agent", required=True)
    p.add_argument("--job", required=True)
    p.add_argument("--ranks", required=True, help="comma-separated rank ids")
    p.add_argument("--world-size", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--step-interval", type=float, required=True)
    p.add_argument("--close-timeout", type=float, required=True)
    args = p.parse_args(argv)
    ranks = [int(r) for r in args.ranks.split(",")]
    runs = {r: telemetry.init(job=args.job, rank=r, world_size=args.world_size, local_rank=i, agent=args.agent)
            for i, r in enumerate(ranks)}
    connected = sum(run.wait_connected(60) for run in runs.values())
    print(json.dumps({"ready": True, "connected": connected}), flush=True)
    line = sys.stdin.readline()
    if not line:
        return 1
    start = json.loads(line)["start"]
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()  # stdin closed: stop
    done = dict.fromkeys(ranks, 0)

    def rank(r: int) -> None:
        run = runs[r]
        for s in range(1, args.steps + 1):
            if stop.wait(max(0.0, start + (s - 1) * args.step_interval - time.time())):
                return
            with run.step(s):
                run.log(s, loss=1.0 / s + 0.01 * r, grad_norm=0.5 + 0.001 * s)
            done[r] = s

    threads = [threading.Thread(target=rank, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    reported = 0
    while any(t.is_alive() for t in threads):
        if min(done.values()) > reported:
            reported = min(done.values())
            print(json.dumps({"step": reported}), flush=True)
        time.sleep(0.05)
    if min(done.values()) > reported:
        print(json.dumps({"step": min(done.values())}), flush=True)
    results: dict[int, bool] = {}
    closers = [threading.Thread(target=lambda r=r: results.__setitem__(r, runs[r].close(args.close_timeout)))
               for r in ranks]
    for t in closers:
        t.start()
    for t in closers:
        t.join()
    ok = sum(results.values())
    print(json.dumps({"closed": ok, "failed": len(ranks) - ok}), flush=True)
    return 0


# ---------------------------------------------------------------- main


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = parser(__doc__, "soak", QUICK)
    p.add_argument("--jobs", type=int, default=1000, help="short jobs in phase 1 (default 1000)")
    p.add_argument("--job-ranks", type=int, default=2, help="ranks per short job, threads of one driver (default 2)")
    p.add_argument("--job-steps", type=int, default=5, help="steps per short job (default 5)")
    p.add_argument("--job-step-interval", type=float, default=0.05,
                   help="seconds between a short job's steps (default 0.05: a job lasts ~0.25 s, so 100 jobs span "
                        "more than the services' 10 s grace after a job closes)")
    p.add_argument("--sample-every", type=int, default=50, help="sample every N jobs (default 50)")
    p.add_argument("--idle-s", type=float, default=15.0,
                   help="seconds of idle CPU measured before and after phase 1 (default 15: longer than the services' "
                        "10 s grace, so the sample after it shows what they still hold of finished jobs)")
    p.add_argument("--steady-ranks", type=int, default=64, help="world size of the steady job (default 64)")
    p.add_argument("--ranks-per-process", type=int, default=16, help="steady ranks per driver process (default 16)")
    p.add_argument("--step-interval", type=float, default=0.5, help="seconds between steady steps (default 0.5)")
    p.add_argument("--steady-minutes", type=float, default=20.0, help="length of phase 2 (default 20)")
    p.add_argument("--steady-sample-s", type=float, default=30.0, help="seconds between steady samples (default 30)")
    p.add_argument("--job-idle-timeout", type=float, default=None,
                   help="passed to all three services as --job-idle-timeout, only when given (the services' "
                        "default otherwise)")
    p.add_argument("--collector-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the root and the rack (repeatable; write --collector-arg=--flag=value)")
    p.add_argument("--agent-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for the agent (repeatable; write --agent-arg=--flag=value)")
    p.add_argument("--close-timeout", type=float, default=60.0, help="run.close(timeout=) of every rank (default 60)")
    p.add_argument("--start-timeout", type=float, default=120.0,
                   help="seconds a service or a driver may take to say it is ready (default 120)")
    p.add_argument("--http-timeout", type=float, default=30.0, help="timeout of a /metrics or API request (default 30)")
    p.add_argument("--workdir", type=Path,
                   help="keep logs, the agent's socket and the root's DB here (else a temp dir, removed)")
    args = p.parse_args(argv)
    apply_quick(args, argv, QUICK)
    if args.jobs < 2:
        p.error("--jobs must be at least 2 (a baseline job and a last one)")
    for name in ("job_ranks", "job_steps", "sample_every", "steady_ranks", "ranks_per_process"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("steady_minutes", "step_interval", "steady_sample_s", "idle_s", "close_timeout"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    return args


def run(args: argparse.Namespace, workdir: Path, progress: Progress) -> dict[str, Any]:
    """Both phases; `result` is filled as they go so that a failure still leaves what was measured."""
    config = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    result: dict[str, Any] = {"benchmark": "soak", "complete": False, "machine": machine_facts(), "config": config,
                              "targets": TARGETS, "loadavg_start": os.getloadavg()}
    services: dict[str, Service] = {}
    try:
        start_services(args, workdir, services)
        api = services["root"].ready["api"]
        progress(f"services up (root {services['root'].pid}, rack {services['rack'].pid}, agent "
                 f"{services['agent'].pid})")
        phase_jobs(args, services, api, workdir, progress, result)
        phase_steady(args, services, api, workdir, progress, result)
        result["figures"] = {"jobs": jobs_figures(result["jobs_phase"]),
                             "steady": steady_figures(result["steady_phase"]), "lifetime": lifetime_figures(result)}
        result["verdicts"] = verdicts(result["figures"])
        result["complete"] = True
    except (BenchError, KeyboardInterrupt) as exc:
        result["error"] = failure(exc)
    finally:
        for name in reversed(SERVICES):
            if name in services:
                services[name].stop()
        result["service_exit_status"] = {n: s.popen.returncode for n, s in services.items() if s.popen is not None}
        result["loadavg_end"] = os.getloadavg()
    return result


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_jobs"]:
        return driver_jobs(argv[1:])
    if argv[:1] == ["_steady"]:
        return driver_steady(argv[1:])
    args = parse_args(argv)
    progress = Progress()
    result = run_in_workdir("soak", args.workdir, lambda workdir: run(args, workdir, progress))
    return write_result(args.out, "soak", result, "soak", print_report)


if __name__ == "__main__":
    raise SystemExit(main())
