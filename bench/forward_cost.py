#!/usr/bin/env python
"""What the Forward stream's gRPC and asyncio work alone costs a parent a step, at the root's shape (issue 29).

    python bench/forward_cost.py [--children 32] [--unit-bytes 67000,100] [--steps 200] [--rounds 2] [--out DIR]

A parent process serves `Collector/Forward` through the tiers' own machinery (`AioServer`, `serve_stream`, `Answers`,
the inline hand-over of `StreamWork`) with a handler that does nothing with a unit but answer it: RECEIVED on the event
loop as the intake does (where asked), and DURABLE from another thread once every child's unit of the step came in, as
the root's flush does after its commit. The children (this process) send one unit of --unit-bytes each a step and wait
for its DURABLE. So the parent's CPU a step is gRPC's and asyncio's per-message cost with no intake, merge or commit:
what `bench/tier_cost.py --tier root` (the whole root) and `--in-process` (the root without gRPC) leave between them.

Two answer modes, interleaved over --rounds (their order alternated round by round): `received+durable` (two acks a unit, as before skip_received) and
`durable` (one: a child that opened with skip_received, forward.proto). Per mode and size: the parent's process CPU
(every thread) per step, and per message (units in plus acks out). Writes forward_cost.json under --out.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout: when run as a script

REPO = Path(__file__).resolve().parent.parent
MODES = ("received+durable", "durable")


def serve(children: int, received: bool) -> None:
    """The parent: prints its address, serves until stdin closes."""
    import grpc

    from collectors.common.aioserve import AioServer, Answers, StreamSlots, StreamWork, serve_stream
    from telemetry.v1 import forward_pb2

    server = AioServer("forward-cost", None, (), lambda: True)
    slots = StreamSlots(children + 8, "child", "--max-children")
    arrived: list[tuple[Answers, int]] = []
    step_done = threading.Condition()

    def flush() -> None:  # the root's flush thread: every unit of the step acknowledged DURABLE after "the commit"
        while True:
            with step_done:
                step_done.wait_for(lambda: len(arrived) >= children)
                batch, arrived[:] = arrived[:children], arrived[children:]
            for answers, seq in batch:
                answers.put(forward_pb2.Ack(seq=seq, status=forward_pb2.Ack.DURABLE))

    threading.Thread(target=flush, daemon=True).start()

    def start(answers: Answers) -> StreamWork:
        def inline(unit: bytes) -> None:  # on the loop, as CollectorService._inline takes a unit in
            seq = int.from_bytes(unit[:8], "little")
            if seq == 0 or received:
                answers.put(forward_pb2.Ack(seq=seq, status=forward_pb2.Ack.RECEIVED))
            if seq:
                with step_done:
                    arrived.append((answers, seq))
                    step_done.notify()
        return StreamWork(lambda unit: None, lambda: None, inline)

    async def forward(requests: Any, context: grpc.aio.ServicerContext) -> Any:
        async for answer in serve_stream(server.host, slots, context, requests, start, lambda name: None):
            yield answer

    handler = grpc.stream_stream_rpc_method_handler(forward, request_deserializer=lambda data: data,
                                                   response_serializer=forward_pb2.Ack.SerializeToString)
    server.add(lambda grpc_server: grpc_server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("telemetry.v1.Collector", {"Forward": handler}),)))
    print(server.bind("127.0.0.1:0"), flush=True)
    server.start()
    sys.stdin.read()
    server.stop(0.2)


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Child:
    """One child's stream: pre-made units out, DURABLE acks in."""

    def __init__(self, address: str) -> None:
        import grpc

        from telemetry.v1 import forward_pb2

        self.channel = grpc.insecure_channel(address)
        self._requests: queue.Queue = queue.Queue()
        self._durable: set[int] = set()
        self._cond = threading.Condition()
        self.ended: str | None = None
        self._call = self.channel.stream_stream("/telemetry.v1.Collector/Forward", request_serializer=lambda b: b,
                                                response_deserializer=forward_pb2.Ack.FromString)(
            iter(self._requests.get, None))
        threading.Thread(target=self._read, daemon=True).start()
        self._requests.put((0).to_bytes(8, "little"))

    def _read(self) -> None:
        from telemetry.v1 import forward_pb2

        try:
            for ack in self._call:
                if ack.status == forward_pb2.Ack.DURABLE:
                    with self._cond:
                        self._durable.add(ack.seq)
                        self._cond.notify_all()
        except Exception as exc:  # the stream ended (the parent stopped at the end, or failed)
            with self._cond:
                self.ended = repr(exc)
                self._cond.notify_all()

    def send(self, seq: int, pad: bytes) -> None:
        self._requests.put(seq.to_bytes(8, "little") + pad)

    def wait(self, seq: int, timeout: float = 60.0) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: seq in self._durable or self.ended is not None, timeout):
                raise RuntimeError(f"unit {seq} not durable within {timeout} s")
            if seq not in self._durable:
                raise RuntimeError(f"stream ended: {self.ended}")

    def close(self) -> None:
        self._requests.put(None)
        self.channel.close()


def run(mode: str, children: int, unit_bytes: int, steps: int, warmup: int) -> dict[str, Any]:
    parent = subprocess.Popen([sys.executable, __file__, "_serve", str(children), mode], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=REPO)
    kids: list[Child] = []
    try:
        assert parent.stdout is not None
        address = parent.stdout.readline().strip()
        kids = [Child(address) for _ in range(children)]
        pad = os.urandom(max(unit_bytes - 8, 0))

        def step(seq: int) -> None:
            for kid in kids:
                kid.send(seq, pad)
            for kid in kids:
                kid.wait(seq)

        for seq in range(1, warmup + 1):
            step(seq)
        cpu0, wall0 = cpu_s(parent.pid), time.monotonic()
        for seq in range(warmup + 1, warmup + steps + 1):
            step(seq)
        cpu, wall = cpu_s(parent.pid) - cpu0, time.monotonic() - wall0
    finally:
        for kid in kids:
            kid.close()
        if parent.stdin is not None:
            parent.stdin.close()
        try:
            parent.wait(10)
        except subprocess.TimeoutExpired:
            parent.kill()
            parent.wait(10)
    acks = 2 if mode == "received+durable" else 1
    messages = children * (1 + acks)
    return {"mode": mode, "children": children, "unit_bytes": unit_bytes, "steps": steps,
            "acks_per_unit": acks, "messages_per_step": messages, "cpu_ms_per_step": cpu / steps * 1e3,
            "cpu_us_per_message": cpu / steps / messages * 1e6, "wall_ms_per_step": wall / steps * 1e3,
            "load_1min": os.getloadavg()[0]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--children", type=int, default=32)
    p.add_argument("--unit-bytes", default="67000,100", help="comma-separated unit sizes (the root's: ~67 KB)")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--rounds", type=int, default=2, help="each mode this many times, interleaved")
    p.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = p.parse_args(argv)
    results = []
    for size in (int(x) for x in args.unit_bytes.split(",")):
        for round_ in range(args.rounds):
            for mode in (MODES if round_ % 2 == 0 else MODES[::-1]):  # alternated: a load that drifts favours neither
                r = run(mode, args.children, size, args.steps, args.warmup)
                r["round"] = round_ + 1
                results.append(r)
                print(f"{size:>6} B units, {mode:16s} round {round_ + 1}: {r['cpu_ms_per_step']:.2f} ms CPU/step "
                      f"({r['cpu_us_per_message']:.0f} us per message, {r['messages_per_step']} a step), "
                      f"load {r['load_1min']:.1f}", flush=True)
    summary = []
    for size in sorted({r["unit_bytes"] for r in results}):
        means = {mode: sum(r["cpu_ms_per_step"] for r in results if r["unit_bytes"] == size and r["mode"] == mode)
                 / args.rounds for mode in MODES}
        ratio = means["durable"] / means["received+durable"] if means["received+durable"] else None  # None: too short
        summary.append({"unit_bytes": size, **{f"{mode}_cpu_ms_per_step": ms for mode, ms in means.items()},
                        "durable_over_both": ratio})
        print(f"{size:>6} B units: {means['received+durable']:.2f} -> {means['durable']:.2f} ms CPU/step without "
              f"RECEIVED ({'-' if ratio is None else f'{ratio:.3f}'}x)")
    args.out.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    path = args.out / "forward_cost.json"
    path.write_text(json.dumps({"argv": sys.argv[1:], "git_commit": commit, "results": results, "summary": summary},
                               indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_serve":
        serve(int(sys.argv[2]), sys.argv[3] == "received+durable")
        sys.exit(0)
    sys.exit(main())
