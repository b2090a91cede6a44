"""Every bound's drop counter reaches the root's /metrics (issue 27): a tier's forensics queues, an agent's GPU
probe's event buffer, a tier's reply streams cut and its unheld releases travel up with the delivery counters
(Counters, summed at every tier) and are exported as telemetry_delivery_*_total, the root's own included. Before,
each stayed in the process that counted it (or, at the root, was exported for the root alone)."""

from __future__ import annotations

import urllib.request

import pytest

from collectors.agent.hardware import HardwareSampler
from collectors.delivery.node import COUNTER_FIELDS
from collectors.probes import HardwareEvent, open_gpu_probe
from collectors.root.exposition import DELIVERY_HELP
from helpers_tree import make_agent, make_collector, make_root, stop_all, wait_for
from nvml_double import FakeNvml
from telemetry.v1 import forensics_pb2, forward_pb2

WAIT = 20.0


def _exported(api_address: str) -> dict[str, float]:
    with urllib.request.urlopen(f"http://{api_address}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("telemetry_delivery_") and "_total " in line:
            name, value = line.split()
            out[name.removeprefix("telemetry_delivery_").removesuffix("_total")] = float(value)
    return out


def test_every_counter_field_is_on_the_wire_and_exported():
    wire = set(forward_pb2.Counters.DESCRIPTOR.fields_by_name)
    assert set(COUNTER_FIELDS) == wire, "a delivery counter that does not travel up stays in its process"
    assert set(DELIVERY_HELP) == wire


@pytest.mark.timeout(60)
def test_drops_below_the_root_are_exported_at_the_root(tmp_path):
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agent = make_agent([rack.address], tmp_path / "agent.sock", "agent0")
    probe = open_gpu_probe(nvml=FakeNvml(1), events=False)
    assert probe is not None
    try:
        # An agent's forensics queues past their bound: 2 captures and 1 exit dropped.
        with agent.node.lock:
            agent.upstream.captures.max_pending = 1
            agent.upstream.exits.max_pending = 1
            for rank in range(3):
                agent.upstream.captures.put(forensics_pb2.Capture(job="j", rank=rank))
            for rank in range(2):
                agent.upstream.exits.put(forensics_pb2.RankExit(job="j", rank=rank))
        # The GPU probe's event buffer past its bound: 3 events dropped.
        probe._events = type(probe._events)(maxlen=1)
        HardwareSampler(agent.node, agent.registry, host_id="h0", gpu=probe)
        for code in range(4):
            probe._push_event(HardwareEvent("xid", 0, "gpu0", code, 1, "XID"))
        # A release of a unit the rack does not hold (a bookkeeping error): logged, counted, never acknowledged.
        with rack.node.lock:
            rack.node.durability.release(("nobody", 1))
        # A reply stream the root cut (the cut itself: test_delivery_bounds.py).
        root.grpc.host.answers_cut += 1

        want = {"forensics_dropped": 3.0, "hardware_events_dropped": 3.0, "unheld_releases": 1.0,
                "reply_streams_cut": 1.0}

        def arrived() -> dict[str, float] | None:
            got = _exported(root.api_address)
            return got if all(got.get(name) == value for name, value in want.items()) else None
        got = wait_for(arrived, WAIT, interval=0.1, what=f"{want} at the root's /metrics")
        assert set(got) >= set(COUNTER_FIELDS)
    finally:
        probe.close()
        stop_all(agent, rack, root)
