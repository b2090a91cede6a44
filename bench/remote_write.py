"""What remote-write costs the root (collectors/root/remote_write.py): on the finaliser's thread, and sending.

    .venv/bin/python bench/remote_write.py                  # 20 metrics x 300 steps, 1,024 ranks (~1 min)
    .venv/bin/python bench/remote_write.py --quick          # smoke run (a few seconds)
    .venv/bin/python bench/remote_write.py --prometheus     # also into a real Prometheus (Debian's package)

Rows are made once (not timed): one job, `--metrics` step metrics of `--ranks` values each, `--steps` steps.
Measured, in one process and one run:

* intake: thread CPU of `RemoteWriter.on_finalised(rows)` per step (the finaliser's thread pays it after
  each commit: sorting, quantiles, labels, the order guard, queueing), against `RootMetrics.observe` on the
  same rows (what /metrics already pays there) as the ratio to read;
* sending: wall time and process CPU from the first row queued until `flush()` returns, with the receiver a
  local HTTP server that decodes every request (snappy, protobuf) and answers 204, so samples/s is the
  writer's and the decoder's; bytes on the wire per sample;
* with --prometheus: the same sending into a real Prometheus (--web.enable-remote-write-receiver).

Writes bench/results/remote_write.json (--out) and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import cramjam
import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from collectors.common.keys import Key  # noqa: E402  (after the sys.path line, for a run from anywhere)
from collectors.common.rows import Row  # noqa: E402  (after the sys.path line, for a run from anywhere)
from collectors.root import prompb  # noqa: E402  (after the sys.path line, for a run from anywhere)
from collectors.root.metrics import RootMetrics  # noqa: E402  (after the sys.path line, for a run from anywhere)
from collectors.root.remote_write import RemoteWriteConfig, RemoteWriter  # noqa: E402  (after the sys.path line)
from machine import machine_facts  # noqa: E402  (bench/ is on sys.path when run as a script)
from telemetry import Summary  # noqa: E402  (after the sys.path line, for a run from anywhere)


class Receiver:
    """Decodes every request as a store would, counts samples and bytes, answers 204."""

    def __init__(self) -> None:
        self.samples = 0
        self.bytes = 0
        self.requests = 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                decoded = prompb.decode(bytes(cramjam.snappy.decompress_raw(body)))
                with outer.lock:
                    outer.samples += sum(len(s) for _, s in decoded)
                    outer.bytes += len(body)
                    outer.requests += 1
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/api/v1/write"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def make_rows(metrics: int, ranks: int, steps: int, seed: int) -> list[list[Row]]:
    rng = np.random.default_rng(seed)
    base_ns = (time.time_ns() // 1_000_000 - steps * 1000 - 60_000) * 1_000_000
    sources = np.arange(ranks, dtype=np.int64)
    out = []
    for step in range(steps):
        end = base_ns + step * 1_000_000_000
        out.append([Row(Key("bench", f"metric_{m}", step), ranks,
                        Summary.from_arrays(rng.lognormal(0.0, 1.0, ranks), sources, time_ns=end), 0, end)
                    for m in range(metrics)])
    return out


def intake(rows: list[list[Row]], url: str) -> dict:
    writer = RemoteWriter(RemoteWriteConfig(urls=(url,), queue_samples=10_000_000))  # not started: no sending
    metrics = RootMetrics()
    ours, theirs = [], []
    for step_rows in rows:
        t = time.thread_time()
        writer.on_finalised(step_rows)
        ours.append(time.thread_time() - t)
        t = time.thread_time()
        metrics.observe(step_rows)
        theirs.append(time.thread_time() - t)
    per_step_us = float(np.median(ours)) * 1e6
    baseline_us = float(np.median(theirs)) * 1e6
    samples = writer.endpoints[0].counters.queued
    writer.close(0.1)
    return {"cpu_us_per_step_p50": round(per_step_us, 1), "cpu_us_per_row_p50": round(per_step_us / len(rows[0]), 2),
            "root_metrics_observe_us_per_step_p50": round(baseline_us, 1),
            "ratio_to_root_metrics_observe": round(per_step_us / baseline_us, 2) if baseline_us else None,
            "samples_per_step": samples // len(rows)}


def sending(rows: list[list[Row]], url: str, counted: Receiver | None, shards: int, batch: int) -> dict:
    writer = RemoteWriter(RemoteWriteConfig(urls=(url,), shards=shards, batch_size=batch, queue_samples=10_000_000,
                                            flush_interval_s=0.2))
    writer.start()
    wall, cpu = time.monotonic(), time.process_time()
    for step_rows in rows:
        writer.on_finalised(step_rows)
    flushed = writer.flush(600)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    writer.close(5)
    c = writer.endpoints[0].counters
    out = {"flushed": flushed, "samples": c.sent, "dropped": dict(c.dropped), "requests": c.requests,
           "wall_s": round(wall, 3), "process_cpu_s": round(cpu, 3),
           "samples_per_s": round(c.sent / wall) if wall else None,
           "cpu_us_per_sample": round(cpu / c.sent * 1e6, 2) if c.sent else None}
    if counted is not None:
        out["wire_bytes_per_sample"] = round(counted.bytes / counted.samples, 2) if counted.samples else None
        out["receiver_samples"] = counted.samples
    return out


def prometheus_run(rows: list[list[Row]], shards: int, batch: int) -> dict:
    binary = shutil.which("prometheus")
    if not binary:
        return {"skipped": "no prometheus binary (apt-get install prometheus)"}
    with tempfile.TemporaryDirectory() as tmp:
        import socket
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        config = Path(tmp) / "prometheus.yml"
        config.write_text("global:\n  scrape_interval: 15s\n")
        proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp}/data",
                                 f"--web.listen-address=127.0.0.1:{port}", "--web.enable-remote-write-receiver",
                                 "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    time.sleep(0.2)
            return sending(rows, f"http://127.0.0.1:{port}/api/v1/write", None, shards, batch)
        finally:
            proc.terminate()
            proc.wait(30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--metrics", type=int, default=20)
    parser.add_argument("--ranks", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="5 metrics, 64 ranks, 40 steps")
    parser.add_argument("--prometheus", action="store_true", help="also send into a real Prometheus")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args(argv)
    if args.quick:
        args.metrics, args.ranks, args.steps = 5, 64, 40
    rows = make_rows(args.metrics, args.ranks, args.steps, args.seed)
    receiver = Receiver()
    result = {"benchmark": "remote_write", "machine": machine_facts(), "config": {
        k: v for k, v in vars(args).items() if k != "out"} | {"out": str(args.out)},
        "intake": intake(rows, receiver.url),
        "sending_local_receiver": sending(rows, receiver.url, receiver, args.shards, args.batch)}
    if args.prometheus:
        result["sending_prometheus"] = prometheus_run(rows, args.shards, args.batch)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / ("remote_write_quick.json" if args.quick else "remote_write.json")
    path.write_text(json.dumps(result, indent=1) + "\n")
    i, s = result["intake"], result["sending_local_receiver"]
    print(f"{args.metrics} metrics x {args.steps} steps, {args.ranks} ranks: {i['samples_per_step']} samples/step")
    print(f"intake (finaliser thread): {i['cpu_us_per_step_p50']} us/step, {i['cpu_us_per_row_p50']} us/row; "
          f"{i['ratio_to_root_metrics_observe']}x RootMetrics.observe ({i['root_metrics_observe_us_per_step_p50']} us)")
    print(f"sending (local receiver): {s['samples_per_s']} samples/s, {s['cpu_us_per_sample']} us CPU/sample "
          f"(writer and receiver), {s.get('wire_bytes_per_sample')} B/sample on the wire, {s['requests']} requests")
    if "sending_prometheus" in result:
        p = result["sending_prometheus"]
        print(f"sending (Prometheus): {p.get('samples_per_s')} samples/s, {p.get('cpu_us_per_sample')} us CPU/sample "
              f"(writer only) {p.get('skipped', '')}")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
