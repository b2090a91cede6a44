"""Fan-in on the grpc.aio servers: a collector serves hundreds of child streams at once, an agent dozens of
ranks, every value exact at the root; past the configured cap a stream is refused, counted and reported.

Before the servers moved to grpc.aio, a collector's 32-thread pool served 32 children and left the 33rd
stream waiting forever without a word. So these tests hold every stream open at the same moment (each
child's first message is acknowledged before any child sends data) and then check that the server was
serving all of them together, not one after another.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import grpc
import pytest
from grpc import aio
from pyroaring import BitMap

import telemetry
from collectors.common.keys import Key
from collectors.delivery.node import RankView
from helpers_tree import (
    RawChild,
    api_get,
    counters,
    make_agent,
    make_collector,
    make_root,
    steps,
    stop_all,
    wait_for,
    window,
)
from telemetry.v1 import forward_pb2, forward_pb2_grpc, ingest_pb2, ingest_pb2_grpc

# Only completeness may seal a window here: a deadline that fired on a loaded machine would finalise a
# step with a child still to come, and the test would see a partial count instead of a slow one.
NEVER = {"deadline_floor_s": 600.0}
PATIENCE_S = 180.0  # bound on each wait; a 2-core machine running other work is slow, not stuck
HELLO_PATIENCE_S = 90.0  # the old failure: a stream past the 32nd never acknowledged at all


def _value(metric: str, rank: int, step: int, world: int) -> float:
    """Distinct per (rank, step) within a step (a permutation of the ranks, so argmin/argmax are unique), and
    a multiple of 1/8 of modest size: every sum of them is exact in binary floating point, in any order."""
    if metric == "loss":
        return ((rank * 37 + step * 101) % world) / 8 + step
    return ((rank * 53 + step * 7) % world) / 4 - 20.0


def _truth(metric: str, step: int, ranks: range) -> dict[str, float | int]:
    values = {rank: _value(metric, rank, step, len(ranks)) for rank in ranks}
    low = min(values, key=lambda r: (values[r], r))
    high = max(values, key=lambda r: (values[r], -r))
    return {"count": len(values), "sum": sum(values.values()), "min": values[low], "argmin": low,
            "max": values[high], "argmax": high}


def _check_root_steps(root, job: str, metrics: tuple[str, ...], step_numbers: range, world: int) -> None:
    """Every step of every metric at the root: stored once, complete, and exact against the truth."""
    assert root.store is not None
    for metric in metrics:
        rows = steps(root.api_address, job, metric)
        assert [row["step"] for row in rows] == list(step_numbers), f"{metric}: steps at the root"
        for row in rows:
            step = row["step"]
            truth = _truth(metric, step, range(world))
            assert (row["count"], row["expected"], row["missing"], row["late"]) == (world, world, [], 0), (metric, row)
            assert (row["min"], row["argmin"], row["max"], row["argmax"]) == (
                truth["min"], truth["argmin"], truth["max"], truth["argmax"]), (metric, step, row, truth)
            assert row["mean"] == pytest.approx(truth["sum"] / world, rel=1e-12, abs=1e-12), (metric, step)
            stored = root.store.load(Key(job, metric, step))
            assert stored is not None and stored.expected == world
            summary = stored.summary
            assert summary.sources == BitMap(range(world)), f"{metric} step {step}: sources"
            assert (summary.count, summary.sum) == (truth["count"], truth["sum"]), (metric, step)
            assert (summary.min, summary.argmin, summary.max, summary.argmax) == (
                truth["min"], truth["argmin"], truth["max"], truth["argmax"]), (metric, step)


def _clean(delivery: dict[str, int]) -> None:
    assert {name: delivery[name] for name in ("duplicates", "rejected_overlaps", "bad_inputs", "dropped_windows",
                                              "refused_streams", "sdk_dropped", "late")} == dict.fromkeys(
        ("duplicates", "rejected_overlaps", "bad_inputs", "dropped_windows", "refused_streams", "sdk_dropped",
         "late"), 0), delivery


# ---------------------------------------------------------------- 300 children on one collector


async def _drive_children(address: str, job: str, world: int, step_numbers: range, metrics: tuple[str, ...],
                          on_all_open) -> None:
    """`world` fake agents, each on its own connection, child i covering rank i: all say hello, and only once
    every hello is acknowledged (all streams open at once) does any of them send steps; each then waits for
    every one of its units to be acknowledged DURABLE (persisted at the root)."""
    channels = [aio.insecure_channel(address) for _ in range(world)]
    opened = 0
    all_open = asyncio.Event()

    async def next_ack(call, what: str) -> forward_pb2.Ack:
        ack = await asyncio.wait_for(call.read(), HELLO_PATIENCE_S if what.endswith("hello") else PATIENCE_S)
        if ack is aio.EOF:
            raise AssertionError(f"{what}: the stream ended: {await call.code()} {await call.details()}")
        return ack

    async def child(rank: int) -> None:
        nonlocal opened
        call = forward_pb2_grpc.CollectorStub(channels[rank]).Forward()
        sender = f"agent-{rank:03d}"
        states = [RankView(alive=BitMap([rank]), world_size=world, hosts={rank: f"node{rank:03d}"}).to_proto(job)]
        await call.write(forward_pb2.SummaryBatch(sender_id=sender, seq=0, ranks=states))
        ack = await next_ack(call, f"{sender} hello")
        assert (ack.seq, ack.status) == (0, forward_pb2.Ack.RECEIVED), ack
        opened += 1
        if opened == world:
            on_all_open()
            all_open.set()
        await asyncio.wait_for(all_open.wait(), HELLO_PATIENCE_S)
        for step in step_numbers:
            windows = [window(job, metric, step, {rank: _value(metric, rank, step, world)}, expected=world)
                       for metric in metrics]
            await call.write(forward_pb2.SummaryBatch(sender_id=sender, seq=step, windows=windows, ranks=states))
        durable: set[int] = set()
        while durable != set(step_numbers):
            ack = await next_ack(call, f"{sender} steps")
            assert ack.status != forward_pb2.Ack.REJECTED_OVERLAP, ack
            if ack.status == forward_pb2.Ack.DURABLE:
                durable.add(ack.seq)
        await call.done_writing()
        call.cancel()

    try:
        await asyncio.gather(*(child(rank) for rank in range(world)))
    finally:
        for channel in channels:
            await channel.close()


def test_collector_serves_300_concurrent_child_streams_exactly(tmp_path: Path) -> None:
    world, job, metrics, step_numbers = 300, "fanin300", ("loss", "grad_norm"), range(1, 4)
    root = make_root(tmp_path / "root.db", **NEVER)
    rack = make_collector([root.address], "rack", **NEVER)
    try:
        seen_open: list[int] = []
        started = time.monotonic()
        asyncio.run(_drive_children(rack.address, job, world, step_numbers, metrics,
                                    lambda: seen_open.append(rack.service.slots.active)))
        elapsed = time.monotonic() - started
        assert seen_open == [world], f"when every hello was acknowledged the rack served {seen_open} streams"
        _check_root_steps(root, job, metrics, step_numbers, world)
        _clean(counters(root))
        assert rack.service.slots.refused == 0
        wait_for(lambda: rack.service.slots.active == 0, PATIENCE_S, what="the rack to let every stream go")
        print(f"{world} child streams, {len(step_numbers)} steps x {len(metrics)} metrics: {elapsed:.1f} s")
    finally:
        stop_all(rack, root)


# ---------------------------------------------------------------- 64 SDK ranks on one agent


def test_agent_serves_64_concurrent_sdk_ranks_exactly(tmp_path: Path) -> None:
    world, job, metrics, step_numbers = 64, "fanin64", ("loss", "grad_norm"), range(1, 5)
    sock = tmp_path / "agent.sock"
    root = make_root(tmp_path / "root.db", **NEVER)
    agent = make_agent([root.address], sock, "agent-64", **NEVER)
    runs: list = []
    try:
        runs = [telemetry.init(job=job, rank=rank, world_size=world, agent=f"unix:{sock}") for rank in range(world)]
        deadline = time.monotonic() + PATIENCE_S
        for run in runs:
            assert run.wait_connected(max(0.1, deadline - time.monotonic())), f"rank {run.rank} never registered"
        assert agent.service.slots.active == world, "every rank's stream is open at once"
        for step in step_numbers:
            for run in runs:
                run.log(step, **{metric: _value(metric, run.rank, step, world) for metric in metrics})
                run.end_step(step)
        deadline = time.monotonic() + PATIENCE_S
        for run in runs:
            assert run.close(timeout=max(0.1, deadline - time.monotonic())), f"rank {run.rank}: not durable"
            assert not any(run.stats.values()), run.stats  # nothing dropped, refused or unacknowledged
        _check_root_steps(root, job, metrics, step_numbers, world)
        _clean(counters(root))
        assert agent.service.slots.refused == 0
    finally:
        for run in runs:
            run.close(timeout=1)
        stop_all(agent, root)


# ---------------------------------------------------------------- the caps


def _progress_counters(root, job: str) -> dict[str, int]:
    status, body = api_get(root.api_address, f"/api/v1/jobs/{job}/progress")
    assert status == 200, body
    return body["counters"]


def test_collector_refuses_the_stream_past_max_children_counts_it_and_takes_the_next_after_one_closes(
        tmp_path: Path) -> None:
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack", max_children=3)
    children: list[RawChild] = []
    try:
        children = [RawChild(rack.address, f"agent-{i}") for i in range(3)]
        for child in children:
            child.ack_for(0, forward_pb2.Ack.RECEIVED, timeout=PATIENCE_S)
        assert rack.service.slots.active == 3

        extra = RawChild(rack.address, "agent-3")
        children.append(extra)
        assert extra.ack(timeout=PATIENCE_S) is None, "the fourth stream is refused, not served"
        assert extra.error is not None and extra.error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, extra.error
        assert "--max-children" in extra.error.details() and "3" in extra.error.details(), extra.error.details()
        assert counters(rack)["refused_streams"] == 1
        # ... and the refusal travels up with the rack's counters to the root's progress view.
        wait_for(lambda: _progress_counters(root, "anyjob")["refused_streams"] == 1, PATIENCE_S,
                 what="refused_streams == 1 in the root's progress counters")

        children[0].close()
        wait_for(lambda: rack.service.slots.active == 2, PATIENCE_S, what="the closed stream's slot to come back")
        again = RawChild(rack.address, "agent-0")
        children.append(again)
        again.ack_for(0, forward_pb2.Ack.RECEIVED, timeout=PATIENCE_S)
        assert rack.service.slots.active == 3 and counters(rack)["refused_streams"] == 1
    finally:
        for child in children:
            child.close()
        stop_all(rack, root)


def _hello(job: str, rank: int, world: int) -> ingest_pb2.RankMessage:
    return ingest_pb2.RankMessage(hello=ingest_pb2.RankHello(job=job, rank=rank, world_size=world, host="test",
                                                             pid=os.getpid()))


def test_agent_refuses_the_rank_past_max_ranks_counts_it_and_takes_it_after_one_closes(tmp_path: Path) -> None:
    job, sock = "capjob", tmp_path / "agent.sock"
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], sock, "agent-cap", max_ranks=2)
    runs: list = []
    try:
        runs = [telemetry.init(job=job, rank=rank, world_size=3, agent=f"unix:{sock}") for rank in range(2)]
        for run in runs:
            assert run.wait_connected(PATIENCE_S)
        assert agent.service.slots.active == 2

        with grpc.insecure_channel(f"unix:{sock}") as channel:
            call = ingest_pb2_grpc.AgentStub(channel).Stream(iter([_hello(job, 2, 3)]), timeout=PATIENCE_S)
            with pytest.raises(grpc.RpcError) as refused:
                list(call)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
        assert "--max-ranks" in refused.value.details() and "2" in refused.value.details(), refused.value.details()
        assert counters(agent)["refused_streams"] == 1
        wait_for(lambda: _progress_counters(root, job)["refused_streams"] >= 1, PATIENCE_S,
                 what="refused_streams in the root's progress counters")

        # The SDK retries a refusal (RESOURCE_EXHAUSTED) with backoff; it gets in once a slot frees up.
        third = telemetry.init(job=job, rank=2, world_size=3, agent=f"unix:{sock}")
        runs.append(third)
        wait_for(lambda: counters(agent)["refused_streams"] >= 2, PATIENCE_S, what="the SDK's attempt to be refused")
        assert not third.connected
        assert runs[0].close(timeout=PATIENCE_S)
        assert third.wait_connected(PATIENCE_S), "the third rank is served once the first one left"
        assert agent.service.slots.active == 2
    finally:
        for run in runs:
            run.close(timeout=1)
        stop_all(agent, root)


def test_refused_streams_are_exported_on_metrics(tmp_path: Path) -> None:
    """A root's own refusal shows as telemetry_delivery_refused_streams_total on /metrics."""
    root = make_root(tmp_path / "root.db", max_children=1)
    children: list[RawChild] = []
    try:
        children = [RawChild(root.address, "agent-0")]
        children[0].ack_for(0, forward_pb2.Ack.RECEIVED, timeout=PATIENCE_S)
        children.append(RawChild(root.address, "agent-1"))
        assert children[1].ack(timeout=PATIENCE_S) is None
        assert children[1].error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

        def exported() -> str | None:
            import urllib.error
            import urllib.request
            try:
                with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
                    body = reply.read().decode()
            except urllib.error.HTTPError as exc:
                raise AssertionError(f"GET /metrics answered {exc.code}: {exc.read()[:300]!r}") from None
            lines = [line for line in body.splitlines() if line.startswith("telemetry_delivery_refused_streams_total")]
            return lines[0] if lines and float(lines[0].split()[-1]) == 1 else None

        line = wait_for(exported, PATIENCE_S, what="telemetry_delivery_refused_streams_total 1 on /metrics")
        assert line.split()[0] == "telemetry_delivery_refused_streams_total"
    finally:
        for child in children:
            child.close()
        stop_all(root)
