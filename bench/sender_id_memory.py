"""What hostile oversized messages cost a root's memory (issue 26): child streams refused for a huge sender_id,
then child streams carrying a message past the size limit.

A root (`telemetry collector`, its own process, the services' GC thresholds) is sent `--streams` child streams
whose first message names a `--id-mb` MB sender_id (refused: INVALID_ARGUMENT), then `--streams` whose first
message is `--big-mb` MB (past the 16 MiB limit: RESOURCE_EXHAUSTED), one after another. Prints and writes
the root's resident memory (VmRSS) before, after each phase and settled (5 s later), and its peak (VmHWM).
Before the fix the refused streams' messages lived on in reference cycles until a rare full collection:
30 x 10 MB ids took the root from 74 to 669 MB.

    .venv/bin/python bench/sender_id_memory.py [--streams 30] [--id-mb 10] [--big-mb 60] [--out DIR]
    .venv/bin/python bench/ab.py --base main -- bench/sender_id_memory.py --out {out}
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.procstat import status_kb
from collectors.sim.procs import Proc, free_port, python_module
from telemetry.v1 import forward_pb2, forward_pb2_grpc


def refused(address: str, batch: forward_pb2.SummaryBatch) -> str:
    with grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 2**31 - 1)]) as channel:
        try:
            for _ in forward_pb2_grpc.CollectorStub(channel).Forward(iter([batch]), timeout=60):
                pass
        except grpc.RpcError as exc:
            return exc.code().name
    return "OK"


def mb(pid: int, field: str = "VmRSS") -> float:
    return round(status_kb(pid, field) / 1024, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=30, help="streams per phase")
    parser.add_argument("--id-mb", type=float, default=10.0, help="size of the huge sender_id, MB")
    parser.add_argument("--big-mb", type=float, default=60.0, help="size of the oversized message, MB")
    parser.add_argument("--out", type=Path, default=Path("bench/results"), help="folder for sender_id_memory.json")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        root = Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", "127.0.0.1:0",
                                          "--db", str(Path(work) / "root.db"), "--api",
                                          f"127.0.0.1:{free_port()}"), Path(work)).start()
        try:
            pid, address = root.popen.pid, root.ready["address"]
            time.sleep(2)
            result: dict[str, object] = {"streams": args.streams, "id_mb": args.id_mb, "big_mb": args.big_mb,
                                         "rss_start_mb": mb(pid)}
            codes = {refused(address, forward_pb2.SummaryBatch(sender_id="x" * int(args.id_mb * 1e6), seq=0))
                     for _ in range(args.streams)}
            result.update(huge_id_codes=sorted(codes), rss_after_huge_ids_mb=mb(pid))
            big = forward_pb2.SummaryBatch(sender_id="big", seq=0, windows=[forward_pb2.WindowSummary(
                summary={"sketch": {"max_centroids": 200, "means": b"\0" * int(args.big_mb * 1e6)}})])
            codes = {refused(address, big) for _ in range(args.streams)}
            result.update(big_message_codes=sorted(codes), rss_after_big_messages_mb=mb(pid))
            time.sleep(5)
            result.update(rss_settled_mb=mb(pid), rss_peak_mb=mb(pid, "VmHWM"))
        finally:
            root.stop()
    for name, value in result.items():
        print(f"{name:28} {value}")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "sender_id_memory.json").write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
