"""What the SDK's flight-recorder readers cost a step (issue 12: <= 1 % of a step), for bench/sdk_overhead.py.

The readers (telemetry.torch.collective: the ArrivalClock behind `collective_arrival`, and the
heartbeat's collective progress and collective fingerprints, telemetry.torch.flight_recorder) are on by
default under torch.distributed. Their costs:

* the training thread reads the recorder's status once at step entry (first step only) and once at
  exit: one status-only dump, which must not grow with the recorder's ring (2,000 entries by default);
* a daemon thread polls that dump while a step is open, every 1/20 of the last step (10-100 ms), taking
  the GIL from the training thread for each poll;
* the heartbeat thread (1 s) fingerprints the collectives enqueued since its last dump (issue 13): a full
  dump of the ring, taken at most every 2 s and no more than 0.5 % of the wall time; its dumps and their
  seconds are reported apart (they are inside the readers-on blocks' figures too).

Measured here in one process with a one-rank gloo group (HashStore, no ports) whose ring is first
filled: the status dump at an almost empty and at a full ring; then steps of CPU-bound *Python*
work (the case where the poller's GIL requests hurt most: a training thread in C kernels releases
the GIL) plus one all_reduce, with the readers on and off (`collectives=` on two Runs against the
same agent), in interleaved blocks; the overhead is the paired difference of the blocks' median
step times over the readers-off median.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import telemetry


def _busy(seconds: float) -> None:
    """Pure-Python work holding the GIL, like a training loop's Python side."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        for i in range(200):
            x += i * i


def _status_us(progress: Any, repeats: int = 2000) -> float:
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            progress.status()
        samples.append((time.perf_counter() - start) / repeats * 1e6)
    return statistics.median(samples)


def measure(agent: str, rounds: int, steps: int, work_ms: float, note: Callable[[str], None],
            ring: int = 2100) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from telemetry.torch.collective import CollectiveProgress

    if dist.is_initialized():
        raise RuntimeError("a process group is already initialised in this process")
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        tensor = torch.ones(16)
        dist.all_reduce(tensor)
        progress = CollectiveProgress()
        if progress.read() is None:
            raise RuntimeError("the flight recorder cannot be read (TORCH_FR_BUFFER_SIZE=0?)")
        status_small = _status_us(progress)
        for _ in range(ring):  # fill the ring (2,000 entries by default) with the default `ring`
            dist.all_reduce(tensor)
        status_full = _status_us(progress)
        note(f"  flight-recorder status read: {status_small:.1f} µs (ring nearly empty), "
             f"{status_full:.1f} µs (after {ring} more collectives)")

        runs = {on: telemetry.init(job=f"arrival-cost-{'on' if on else 'off'}-{time.time_ns()}", rank=0,
                                   world_size=1, agent=agent, collectives=on) for on in (True, False)}
        for run in runs.values():
            run.wait_connected(10.0)
        work_s = work_ms / 1e3
        blocks: dict[bool, list[float]] = {True: [], False: []}
        cpu: dict[bool, list[float]] = {True: [], False: []}
        step = 0
        measured_from = time.perf_counter()
        for r in range(rounds):
            for on in ((True, False) if r % 2 == 0 else (False, True)):
                run = runs[on]
                times = []
                cpu_start = time.process_time()
                for _ in range(steps):
                    start = time.perf_counter()
                    with run.step(step):
                        _busy(work_s)
                        dist.all_reduce(tensor)
                    times.append(time.perf_counter() - start)
                    step += 1
                cpu[on].append((time.process_time() - cpu_start) / steps)
                blocks[on].append(statistics.median(times))
        measured_s = time.perf_counter() - measured_from
        clock = runs[True]._clock  # the bench reads the clock's own counters
        fingerprinter = runs[True]._fingerprints
        polls, period = (clock.polls, clock.period_s) if clock is not None else (0, None)
        durable = {("on" if on else "off"): run.close(10.0) for on, run in runs.items()}
    finally:
        dist.destroy_process_group()
    paired = [on / off - 1 for on, off in zip(blocks[True], blocks[False])]
    cpu_paired = [on / off - 1 for on, off in zip(cpu[True], cpu[False])]
    median_off = statistics.median(blocks[False])
    result = {
        "method": "one-rank gloo group, ring filled; steps of CPU-bound Python work + one all_reduce; readers on "
                  "vs off in interleaved blocks; overhead = paired block medians",
        "work_ms": work_ms, "rounds": rounds, "steps_per_block": steps,
        "status_read_us": {"ring_nearly_empty": status_small, "ring_full": status_full},
        "collectives_before_full_read": ring,
        "step_ms": {"readers_on": statistics.median(blocks[True]) * 1e3, "readers_off": median_off * 1e3},
        "overhead_percent": {"median": statistics.median(paired) * 100,
                             "stdev": statistics.stdev(paired) * 100 if len(paired) > 1 else None,
                             "min": min(paired) * 100, "max": max(paired) * 100},
        "process_cpu_overhead_percent": statistics.median(cpu_paired) * 100,
        "poll_period_ms": period * 1e3 if period is not None else None,
        "polls_per_step": polls / (rounds * steps) if rounds else 0.0,
        "close_durable": durable,
        "fingerprints": {
            "dumps": fingerprinter.dumps if fingerprinter is not None else 0,
            "seconds_per_dump": (fingerprinter.dump_seconds / fingerprinter.dumps
                                 if fingerprinter is not None and fingerprinter.dumps else None),
            "share_of_wall_percent": (fingerprinter.dump_seconds / measured_s * 100
                                      if fingerprinter is not None else None),
            "measured_s": measured_s,
        },
    }
    return result


def report_lines(res: dict[str, Any]) -> list[str]:
    o = res["overhead_percent"]
    sd = f" ± {o['stdev']:.2f}" if o["stdev"] is not None else ""
    return ["", f"flight-recorder readers (collective_arrival + heartbeat progress), one-rank gloo group, "
                f"{res['rounds']} interleaved rounds x {res['steps_per_block']} steps of {res['work_ms']:g} ms "
                "CPU-bound Python + one all_reduce", "",
            f"  status read, ring nearly empty / full: {res['status_read_us']['ring_nearly_empty']:.1f} / "
            f"{res['status_read_us']['ring_full']:.1f} µs",
            f"  step, readers off / on: {res['step_ms']['readers_off']:.3f} / {res['step_ms']['readers_on']:.3f} ms; "
            f"overhead {o['median']:+.3f}{sd} % [{o['min']:+.2f}..{o['max']:+.2f}] (target <= 1 %)",
            f"  process CPU overhead {res['process_cpu_overhead_percent']:+.2f} %; poller every "
            f"{res['poll_period_ms']:.1f} ms, {res['polls_per_step']:.1f} polls per step",
            _fingerprint_line(res["fingerprints"])]


def _fingerprint_line(f: dict[str, Any]) -> str:
    if not f["dumps"]:
        return f"  collective fingerprints: no dump in {f['measured_s']:.1f} s"
    return (f"  collective fingerprints (heartbeat thread): {f['dumps']} full dumps in {f['measured_s']:.1f} s, "
            f"{f['seconds_per_dump'] * 1e3:.1f} ms each, {f['share_of_wall_percent']:.2f} % of the wall time")
