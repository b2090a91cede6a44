"""What the project claims about GPUs, checked on a real one: one command on a GPU node, a JSON of facts.

CI has no GPU, so everything below is otherwise designed from docs and source. Each check runs in its own
process under its own timeout (a hung NCCL init or a crashing driver call costs that check, not the run),
and every check writes what it saw, failures included, into one JSON:

* ``env``: torch, CUDA, NCCL and driver versions, the GPU's name.
* ``nvml``: the agent's real GPU probe (collectors.probes.open_gpu_probe) sampled 10 times: every metric it
  reads on this GPU, the fields the driver refuses, the XID events, the cost of one ``sample()``.
* ``peak``: the MFU peak the SDK picks for this GPU (telemetry.torch.peak) against a measured bf16 matmul.
* ``device_values``: ``stage()`` of CUDA scalars (what ``run.log(loss=tensor)`` does) under
  ``torch.cuda.set_sync_debug_mode("error")``: any host-device sync raises; values read back exactly.
* ``nccl``: a one-rank NCCL group with ``TORCH_NCCL_ENABLE_TIMING=1``: what the host-side wait signal
  (telemetry.torch.waits) measures on NCCL, whether ``Work._get_duration()`` answers in the future's
  callback, the flight recorder's status and full-dump costs and its entries' timing fields.
* ``nccl_timing``: the SDK's GPU-side wait signal (telemetry.torch.nccl_timing): every NCCL group hooked,
  per-step GPU collective time against the durations c10d reports per work, with GPU work queued ahead of
  the collectives (the host far ahead of the GPU, as in training); the step-time cost of the hook (timing on
  and hooked vs off, 200 all-reduces a step); a process that exits without ``destroy_process_group``.
* ``nccl_two_ranks``: two ranks on this one GPU (NCCL refuses a GPU shared by two ranks of a communicator:
  the check records what this NCCL does).
* ``e2e``: a real root and agent (processes) and ``examples/train_ddp.py`` on the GPU under torchrun: the
  root's view of the job (steps, MFU, the GPU's readings in the rank's job).

    python bench/gpu_check.py --out bench/results/gpu_check.json      # ~3 min on an H100
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

SECTIONS: dict[str, Callable[[], dict[str, Any]]] = {}
TIMEOUTS = {"env": 60, "nvml": 60, "peak": 90, "device_values": 60, "nccl": 150, "nccl_timing": 150,
            "nccl_two_ranks": 60,
            "e2e": 200}


def section(fn: Callable[[], dict[str, Any]]) -> Callable[[], dict[str, Any]]:
    SECTIONS[fn.__name__] = fn
    return fn


def _us(samples: list[float]) -> dict[str, float]:
    return {"median_us": round(statistics.median(samples) * 1e6, 1), "max_us": round(max(samples) * 1e6, 1),
            "n": len(samples)}


@section
def env() -> dict[str, Any]:
    import torch

    out: dict[str, Any] = {"python": sys.version.split()[0], "torch": torch.__version__,
                           "cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available()}
    if torch.cuda.is_available():
        out["device"] = torch.cuda.get_device_name(0)
        out["capability"] = list(torch.cuda.get_device_capability(0))
        out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    import pynvml

    pynvml.nvmlInit()
    out["driver"] = pynvml.nvmlSystemGetDriverVersion()
    out["nvml_gpus"] = pynvml.nvmlDeviceGetCount()
    pynvml.nvmlShutdown()
    return out


@section
def nvml() -> dict[str, Any]:
    from collectors.probes import open_gpu_probe

    probe = open_gpu_probe()
    if probe is None:
        return {"error": "open_gpu_probe() returned None"}
    costs: list[float] = []
    first: dict[str, float] = {}
    last: dict[str, float] = {}
    for i in range(10):
        t0 = time.perf_counter()
        readings = probe.sample()
        costs.append(time.perf_counter() - t0)
        values = {r.metric: r.value for r in readings if getattr(r, "gpu", 0) == 0}
        if i == 0:
            first = values
        last = values
        time.sleep(0.3)
    out = {"gpus": [str(g) for g in probe.gpus], "metrics_first": first, "metrics_last": last,
           "disabled_fields": {str(k): sorted(v) for k, v in probe.disabled_fields().items()},
           "retrying_fields": {str(k): sorted(v) for k, v in probe.retrying_fields().items()},
           "errors": {str(k): v for k, v in probe.errors().items()},
           "events": [str(e) for e in probe.drain_events()], "sample_cost": _us(costs)}
    probe.close()
    return out


@section
def peak() -> dict[str, Any]:
    import torch

    from telemetry.torch.peak import peak_flops, table_key_for_name

    name = torch.cuda.get_device_name(0)
    chosen = peak_flops(0, torch.bfloat16)
    n = 8192
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(20):
        a @ b
    torch.cuda.synchronize()
    achieved = 20 * 2 * n**3 / (time.perf_counter() - t0)
    return {"device": name, "table_key": table_key_for_name(name), "peak_bf16_flops": chosen,
            "matmul_bf16_flops": achieved, "matmul_over_peak": achieved / chosen if chosen else None}


@section
def device_values() -> dict[str, Any]:
    import torch

    from telemetry.torch.device_values import stage

    values = {"loss": torch.tensor(2.5, device="cuda"), "grad_norm": torch.tensor(0.125, device="cuda"),
              "tokens": torch.tensor(4096, device="cuda"), "lr": 3e-4,
              "half": torch.tensor(1.5, device="cuda", dtype=torch.bfloat16)}
    x = torch.randn(4096, 4096, device="cuda")
    costs: list[float] = []
    synced_error = None
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(50):
            y = x @ x  # queued GPU work ahead of the copy: stage() must not wait for it
            values["loss"] = y[0, 0] * 0 + 2.5
            t0 = time.perf_counter()
            staged = stage(values)
            costs.append(time.perf_counter() - t0)
    except Exception as exc:  # a sync under "error" mode raises RuntimeError
        synced_error = f"{type(exc).__name__}: {exc}"
    finally:
        torch.cuda.set_sync_debug_mode(0)
    deadline = time.monotonic() + 10
    while not staged.ready() and time.monotonic() < deadline:
        time.sleep(0.001)
    read = staged.read() if staged.ready() else None
    return {"sync_raised": synced_error, "stage_cost": _us(costs), "read": read,
            "exact": read == {"loss": 2.5, "grad_norm": 0.125, "tokens": 4096.0, "lr": 3e-4, "half": 1.5}}


def _init_nccl_one_rank() -> Any:
    import torch
    import torch.distributed as dist

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    from collectors.sim.procs import free_port

    os.environ["MASTER_PORT"] = str(free_port())
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    return dist


@section
def nccl() -> dict[str, Any]:
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"
    os.environ["TORCH_NCCL_TRACE_BUFFER_SIZE"] = "2000"
    import pickle

    import torch

    from telemetry.torch.collective import CollectiveProgress
    from telemetry.torch.waits import timer

    t = timer()
    installed = t.install()
    dist = _init_nccl_one_rank()
    out: dict[str, Any] = {"timer_installed": installed}
    x = torch.randn(1 << 20, device="cuda")
    w = torch.randn(2048, 2048, device="cuda")
    # Host-side wait per step, as the SDK measures it: 10 steps of 200 all_reduces + compute.
    waits, steps = [], []
    for _ in range(10):
        s0 = time.monotonic_ns()
        for _ in range(200):
            dist.all_reduce(x)
            w = w @ w * 1e-3
        torch.cuda.synchronize()
        s1 = time.monotonic_ns()
        wait_s, taken = t.measure(s0, s1)
        waits.append(wait_s)
        steps.append((s1 - s0) / 1e9)
    out["host_wait"] = {"step_s": steps, "collective_wait_s": waits, "collectives_per_step": taken}
    # Device-side durations: in the future's callback and after completion.
    from_callback: list[Any] = []
    works = []
    for _ in range(20):
        work = dist.all_reduce(x, async_op=True)
        works.append(work)

        def done(fut: Any, work: Any = work) -> None:
            try:
                from_callback.append(work._get_duration())
            except Exception as exc:
                from_callback.append(f"{type(exc).__name__}: {exc}")

        work.get_future().then(done)
    for work in works:
        work.wait()
    torch.cuda.synchronize()
    time.sleep(0.5)
    after: list[Any] = []
    for work in works:
        try:
            after.append(work._get_duration())
        except Exception as exc:
            after.append(f"{type(exc).__name__}: {exc}")
    out["duration_ms_in_callback"] = from_callback
    out["duration_ms_after_sync"] = after
    # The flight recorder: status (what the SDK reads per step) and the full dump.
    progress = CollectiveProgress()
    out["progress_read"] = progress.read()
    costs = []
    for _ in range(50):
        t0 = time.perf_counter()
        status = progress.status()
        costs.append(time.perf_counter() - t0)
    out["status"] = status
    out["status_cost"] = _us(costs)
    import torch._C._distributed_c10d as c10d_c

    dump_fn = getattr(c10d_c, "_dump_nccl_trace", None)
    if dump_fn is not None:
        for stacks in (False, True):
            t0 = time.perf_counter()
            data = pickle.loads(dump_fn(includeCollectives=True, includeStackTraces=stacks, onlyActive=False))
            out[f"full_dump_s_stacks_{stacks}"] = time.perf_counter() - t0
        entries = data.get("entries") or []
        out["dump_entries"] = len(entries)
        if entries:
            e = entries[-1]
            out["entry_keys"] = sorted(e)
            out["entry_timing"] = {k: e.get(k) for k in e if "time" in k or "duration" in k or k == "state"}
            durations = [x.get("duration_ms") for x in entries[-20:]]
            out["last_20_duration_ms"] = durations
    else:
        out["full_dump"] = "torch has no _dump_nccl_trace"
    dist.destroy_process_group()
    return out


_TIMING_CHILD = r"""
import os, sys, time, json, statistics
sys.path.insert(0, os.getcwd())
mode = sys.argv[1]
if mode != "off":
    os.environ["TORCH_NCCL_ENABLE_TIMING"] = "1"
import torch, torch.distributed as dist
from telemetry.torch.waits import timer
from collectors.sim.procs import free_port
t = timer(); t.install()
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
sub = dist.new_group([0])
x = torch.ones(1 << 20, device="cuda"); w = torch.randn(4096, 4096, device="cuda")
steps, waits, hooked = [], [], None
for i in range(25):
    s0 = time.perf_counter_ns()
    for _ in range(8):
        w = torch.tanh(w @ w)  # GPU work queued ahead: the host runs far ahead of the GPU
    for j in range(200):
        dist.all_reduce(x, group=sub if j % 4 == 0 else None)
    float(w[0, 0])  # the step's one host-device sync (loss.item())
    s1 = time.perf_counter_ns()
    wait_s, _ = t.measure(s0, s1)
    hooked = t.device.hooked_groups
    steps.append((s1 - s0) / 1e9); waits.append(wait_s)
time.sleep(0.5)
late = t.device.late
out = {"mode": mode, "hooked_groups": hooked, "median_step_s": statistics.median(steps[5:]),
       "waits_s": waits[:12], "late_take": late}
print("CHILD", json.dumps(out), flush=True)
if mode == "hook_no_destroy":
    sys.exit(0)
dist.destroy_process_group()
"""


@section
def nccl_timing() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in ("off", "hook", "off", "hook", "hook_no_destroy"):
        t0 = time.monotonic()
        try:
            done = subprocess.run([sys.executable, "-c", _TIMING_CHILD, mode], capture_output=True, text=True,
                                  timeout=40, cwd=REPO)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("CHILD ")), None)
            result: dict[str, Any] = json.loads(line[6:]) if line else {"stderr": done.stderr[-1500:]}
            result["rc"] = done.returncode
        except subprocess.TimeoutExpired:
            result = {"timeout": True}
        result["wall_s"] = round(time.monotonic() - t0, 2)
        out.setdefault(mode, []).append(result)
    return out


_TWO_RANKS = r"""
import os, sys, torch, torch.distributed as dist
rank = int(sys.argv[1]); os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=sys.argv[2])
torch.cuda.set_device(0)
dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", 0))
x = torch.ones(4, device="cuda"); dist.all_reduce(x); torch.cuda.synchronize()
print("RESULT", rank, x.tolist(), flush=True)
dist.destroy_process_group()
"""


@section
def nccl_two_ranks() -> dict[str, Any]:
    from collectors.sim.procs import free_port

    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", _TWO_RANKS, str(r), port], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True) for r in range(2)]
    out: dict[str, Any] = {}
    for r, p in enumerate(procs):
        try:
            text, _ = p.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            p.kill()
            text, _ = p.communicate()
            out[f"rank{r}_timeout"] = True
        out[f"rank{r}_rc"] = p.returncode
        out[f"rank{r}_tail"] = text[-1500:]
    return out


@section
def e2e() -> dict[str, Any]:
    import urllib.request

    import torch

    from bench.torchrun_jobs import root_and_agent, torchrun_argv

    gpu = torch.cuda.is_available()  # without one (developing this check) the same path on gloo, smaller

    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        with root_and_agent(tmp, agent_args=("--probe-interval", "1")) as svc:
            env = {**os.environ, "TELEMETRY_AGENT": svc["agent"], "MASTER_ADDR": "127.0.0.1",
                   "TORCH_NCCL_ENABLE_TIMING": "1",
                   "PYTHONPATH": f"{REPO}:{os.environ.get('PYTHONPATH', '')}"}
            # The example under --sync-debug (any synchronising CUDA call on the training thread raises), a NaN
            # injected at step 150, 300 steps: the job must finish, every step stored, the NaN named.
            argv = torchrun_argv(1, REPO / "examples" / "train_ddp.py",
                                 ["--steps", "300", "--backend", "nccl" if gpu else "gloo", "--job", "gpujob",
                                  "--nan-step", "150", "--nan-rank", "0", "--linger", "3",
                                  *(["--sync-debug", "--sync-debug-from", "2", "--d-model", "512", "--layers", "4", "--batch-size", "32",
                                     "--seq-len", "256"] if gpu else [])])
            api = f"http://{svc['api']}"

            def get(path: str) -> Any:
                with urllib.request.urlopen(api + path, timeout=10) as r:
                    return json.loads(r.read())

            def gpu_lines() -> list[str]:
                with urllib.request.urlopen(api + "/metrics", timeout=10) as r:
                    return [ln for ln in r.read().decode().splitlines() if ln.startswith("telemetry_gpu_")]

            t0 = time.monotonic()
            train = subprocess.Popen(argv, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
            while train.poll() is None and time.monotonic() - t0 < 150:  # the rank's GPU in its job, while it runs
                time.sleep(2)
                in_job = [ln for ln in gpu_lines() if 'job="gpujob"' in ln]
                if in_job:
                    out["gpu_lines_in_job_while_training"] = in_job[:30]
                    break
            try:
                text, _ = train.communicate(timeout=max(1.0, 150 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                train.kill()
                text, _ = train.communicate()
            out["train_rc"] = train.returncode
            out["train_s"] = time.monotonic() - t0
            out["train_tail"] = text[-2500:]
            out["sync_errors"] = text.count("synchronizing CUDA")
            time.sleep(3)
            out["jobs"] = get("/api/v1/jobs")
            for metric in ("step_time", "mfu", "loss", "collective_wait", "work_time"):
                try:
                    rows = get(f"/api/v1/jobs/gpujob/steps?metric={metric}&last=3")
                    out[f"steps_{metric}"] = rows
                except Exception as exc:
                    out[f"steps_{metric}"] = f"{type(exc).__name__}: {exc}"
            out["events"] = get("/api/v1/jobs/gpujob/events")
            try:
                out["hosts"] = get("/api/v1/hosts")
            except Exception as exc:
                out["hosts"] = f"{type(exc).__name__}: {exc}"
            out["gpu_metric_lines"] = gpu_lines()[:40]
        out["agent_log_tail"] = (tmp / "agent.log").read_text(errors="replace")[-3000:]
        out["root_log_tail"] = (tmp / "root.log").read_text(errors="replace")[-1500:]
    return out


def run_one(name: str) -> None:
    try:
        result = SECTIONS[name]()
    except Exception:
        result = {"error": traceback.format_exc()[-3000:]}
    print("GPUCHECK_JSON " + json.dumps(result, default=str), flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_check.json")
    p.add_argument("--only", nargs="*", choices=sorted(SECTIONS), help="run these checks only")
    p.add_argument("--section", help=argparse.SUPPRESS)  # one check, in a child process
    args = p.parse_args()
    if args.section:
        run_one(args.section)
        return 0
    results: dict[str, Any] = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name in args.only or list(SECTIONS):
        t0 = time.monotonic()
        print(f"== {name}", file=sys.stderr, flush=True)
        try:
            done = subprocess.run([sys.executable, __file__, "--section", name], capture_output=True, text=True,
                                  timeout=TIMEOUTS[name], cwd=REPO)
            line = next((ln for ln in done.stdout.splitlines() if ln.startswith("GPUCHECK_JSON ")), None)
            result = json.loads(line.split(" ", 1)[1]) if line else {"error": "no result", "rc": done.returncode}
            if line is None or "error" in result:
                result["stderr_tail"] = done.stderr[-2500:]
        except subprocess.TimeoutExpired as exc:
            result = {"error": f"timed out after {TIMEOUTS[name]} s",
                      "stderr_tail": (exc.stderr or b"")[-2500:].decode(errors="replace")
                      if isinstance(exc.stderr, bytes) else str(exc.stderr)[-2500:]}
        result["seconds"] = round(time.monotonic() - t0, 1)
        results[name] = result
        print(json.dumps(result, default=str)[:1500], file=sys.stderr, flush=True)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
