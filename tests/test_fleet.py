"""The fleet's hardware (issue 28 item 1): every host's NICs and IB ports in one window per metric and second,
merged at every tier, the exact top-k naming the worst host and port; host ids from a registry, a host id
claimed twice refused; a link down named by host and port.

Real agents (their NIC probe on generated sysfs trees: collectors/sim/sysfs.py, a TEST DOUBLE of /sys), a real
rack collector and root on loopback.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from pyroaring import BitMap

from collectors.common import fleet
from collectors.sim.sysfs import set_ib, write_host
from helpers_tree import api_get, counters, make_agent, make_collector, make_root, stop_all, wait_for
from telemetry import Summary
from telemetry.v1 import forward_pb2

WAIT = 30.0
HOSTS = 3


def _fleet_windows(root, metric: str) -> list[tuple[dict, Summary]]:
    with closing(root.store.reader()) as db:
        rows = db.execute("SELECT * FROM windows WHERE job=? AND metric=? ORDER BY idx",
                          (fleet.FLEET_JOB, metric)).fetchall()
    return [(dict(row), Summary.from_bytes(row["summary"])) for row in rows]


def _agent(tmp: Path, parent: str, name: str, index: int, sysfs: Path):
    return make_agent([parent], tmp / f"{name}.sock", f"agent-{name}", nic_probe=True, sysfs_root=sysfs,
                      probe_interval_s=0.25, host_id=name, host_index=index)


@pytest.fixture(scope="module")
def fleet_tree(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet")
    trees = []
    for h in range(HOSTS):
        sysfs = tmp / f"sys{h}"
        write_host(sysfs, nics=2, hcas=4)
        trees.append(sysfs)
    set_ib(trees[1], "mlx5_2", 1, symbol_error=500)  # the worst port of the fleet: node-1's mlx5_2/1
    root = make_root(tmp / "root.db")
    rack = make_collector([root.address], "rack0")
    agents = [_agent(tmp, rack.address, f"node-{h}", h, trees[h]) for h in range(HOSTS)]
    try:
        yield {"root": root, "rack": rack, "agents": agents, "trees": trees, "tmp": tmp}
    finally:
        stop_all(*agents, rack, root)


def _complete(root, metric: str, hosts: int = HOSTS) -> tuple[dict, Summary]:
    def found():
        done = [(row, s) for row, s in _fleet_windows(root, metric)
                if {fleet.host_index_of(src) for src in s.sources} >= set(range(hosts))]
        return done[-1] if done else None
    return wait_for(found, WAIT, what=f"a fleet window of {metric} with every host")


def test_one_window_per_metric_and_second_names_the_worst_host_and_port(fleet_tree):
    root = fleet_tree["root"]
    row, s = _complete(root, "ib.symbol_error_total")
    assert len(s.sources) == HOSTS * 4 and s.max == 500.0
    names = root.node.hosts(fleet.FLEET_JOB)
    assert names[s.argmax] == "node-1:mlx5_2/1"
    assert fleet.host_index_of(s.argmax) == 1 and fleet.slot_of(s.argmax) >= fleet.FAMILIES["ib."][0]
    # NICs go to the nic.* windows with their own slots: two per host.
    _, nic = _complete(root, "nic.rx_errors_total")
    assert len(nic.sources) == HOSTS * 2
    assert {fleet.slot_of(src) for src in nic.sources} == {16, 17}
    # Nothing went to the per-host pseudo-jobs: the root's input does not grow with the hosts.
    with closing(root.store.reader()) as db:
        assert db.execute("SELECT count(*) FROM windows WHERE job LIKE '\\_host:%' ESCAPE '\\'").fetchone()[0] == 0


def test_the_rack_sends_the_root_one_merged_window_per_metric_and_second(fleet_tree):
    root = fleet_tree["root"]
    _complete(root, "ib.port_active")
    # The root's window of a second holds one part from the one rack (its origins), not one per host.
    with root.node.lock:  # a native table's window holds its sources in the table (WindowTable.sources)
        table = root.node.table
        wins = [w for k, w in table.windows.items() if k.job == fleet.FLEET_JOB
                and k.metric == "ib.port_active" and len(table.sources(w)) == HOSTS * 4]
    assert wins
    assert counters(root)["rejected_overlaps"] == 0 and counters(root)["duplicates"] == 0


def test_a_host_index_claimed_by_a_second_host_is_refused_never_merged(fleet_tree):
    tmp, rack, root = fleet_tree["tmp"], fleet_tree["rack"], fleet_tree["root"]
    _complete(root, "ib.symbol_error_total")
    sysfs = tmp / "sys-impostor"
    write_host(sysfs, nics=2, hcas=4)
    set_ib(sysfs, "mlx5_0", 1, symbol_error=99999)  # would be the fleet's max if it were merged
    before = counters(rack)["bad_inputs"]
    impostor = _agent(tmp, rack.address, "node-x", 1, sysfs)  # node-1's index
    try:
        wait_for(lambda: counters(rack)["bad_inputs"] > before, WAIT, what="the impostor's windows refused")
        row, s = _complete(root, "ib.symbol_error_total")
        newest = max(idx for idx in [row["idx"]])
        wait_for(lambda: any(r["idx"] > newest + 2000 and len(s2.sources) == HOSTS * 4
                             for r, s2 in _fleet_windows(root, "ib.symbol_error_total")), WAIT,
                 what="more seconds with the impostor running")
        for _, summary in _fleet_windows(root, "ib.symbol_error_total"):
            assert summary.max < 99999
        names = root.node.hosts(fleet.FLEET_JOB)
        assert not any(name.startswith("node-x:") for name in names.values())
    finally:
        stop_all(impostor)


def test_a_host_index_claimed_in_two_racks_is_refused_at_the_tier_above_both_logged_and_counted(tmp_path, caplog):
    """Rack 0 has node-a (index 0) and node-b (index 1); rack 1 has node-c (index 2) and node-x, wrongly given
    index 1. Neither rack can tell; the root sees both: it refuses rack 1's fleet windows holding index 1, logs the
    collision naming both hosts and both racks, counts it (GET /api/v1/hosts `index_collisions`), and tells rack 1
    which sources it refuses: rack 1 refuses them from node-x from then on, so node-c's readings reach the root
    again. node-x's readings are never merged as node-b's."""
    import logging
    trees = {}
    for name in ("node-a", "node-b", "node-c", "node-x"):
        trees[name] = tmp_path / f"sys-{name}"
        write_host(trees[name], nics=1, hcas=2)
    set_ib(trees["node-x"], "mlx5_0", 1, symbol_error=99999)  # the fleet's max if it were merged
    root = make_root(tmp_path / "root.db")
    racks = [make_collector([root.address], f"rack{r}") for r in range(2)]
    agents = []
    try:
        with caplog.at_level(logging.WARNING, logger="collectors.delivery.runs"):
            agents.append(_agent(tmp_path, racks[0].address, "node-a", 0, trees["node-a"]))
            agents.append(_agent(tmp_path, racks[0].address, "node-b", 1, trees["node-b"]))
            _complete(root, "ib.symbol_error_total", hosts=2)  # node-b holds index 1 at the root first
            agents.append(_agent(tmp_path, racks[1].address, "node-c", 2, trees["node-c"]))
            agents.append(_agent(tmp_path, racks[1].address, "node-x", 1, trees["node-x"]))

            def counted():
                status, body = api_get(root.api_address, "/api/v1/hosts")
                seen = body.get("index_collisions", {}) if status == 200 else {}
                return seen if seen.get("seen") and seen.get("refused_windows") else None
            seen = wait_for(counted, WAIT, what="the collision counted at the root")
        (standing,) = seen["standing"]
        assert (standing["index"], standing["host"], standing["held_by"]) == (1, "node-x", "node-b")
        assert standing["devices"] == 3 and "rack1" in standing["via"] and "rack0" in standing["held_via"]
        (line,) = [r.getMessage() for r in caplog.records if "claimed twice" in r.getMessage()]
        assert "node-x" in line and "node-b" in line and "rack1" in line and "rack0" in line
        import urllib.request
        with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        exposed = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
                   if line.startswith("telemetry_fleet_")}
        assert exposed["telemetry_fleet_index_collisions_total"] >= 1
        assert exposed["telemetry_fleet_refused_windows_total"] >= 1
        below = [r.getMessage() for r in caplog.records if "the parent refuses" in r.getMessage()]
        assert below and all("node-x" in line for line in below)  # rack 1 refuses node-x's sources itself now
        after = max(row["idx"] for row, _ in _fleet_windows(root, "ib.symbol_error_total"))
        wait_for(lambda: any(row["idx"] > after + 2000 and {0, 1, 2} <= {fleet.host_index_of(src) for src in s.sources}
                             for row, s in _fleet_windows(root, "ib.symbol_error_total")), WAIT,
                 what="node-c's readings (rack 1) at the root again, beside node-a's and node-b's")
        for _, summary in _fleet_windows(root, "ib.symbol_error_total"):
            assert summary.max < 99999
        assert not any(name.startswith("node-x:") for name in root.node.hosts(fleet.FLEET_JOB).values())
    finally:
        stop_all(*agents, *racks, root)


def test_a_link_down_is_an_event_naming_host_and_port(fleet_tree):
    root, trees = fleet_tree["root"], fleet_tree["trees"]
    _complete(root, "ib.port_active")
    set_ib(trees[2], "mlx5_3", 1, active=False)
    try:
        def opened():
            status, body = api_get(root.api_address, f"/api/v1/jobs/{fleet.FLEET_JOB}/events")
            if status != 200:
                return None
            found = [e for e in body["events"]
                     if e["kind"] == "hardware" and e["detail"].get("rule") == "ib_port_down"]
            return found[0] if found else None
        event = wait_for(opened, WAIT, what="the link-down event")
        assert event["hosts"] == ["node-2"]
        assert event["detail"]["host"] == "node-2" and event["detail"]["device"] == "mlx5_3/1"
        # The host's own view lists it; another host's does not.
        status, one = api_get(root.api_address, "/api/v1/hosts/node-2")
        assert status == 200 and [e["id"] for e in one["events"] if e["kind"] == "hardware"
                                  and e["detail"].get("rule") == "ib_port_down"] == [event["id"]], one["events"]
        status, other = api_get(root.api_address, "/api/v1/hosts/node-0")
        assert status == 200 and event["id"] not in [e["id"] for e in other["events"]]
    finally:
        set_ib(trees[2], "mlx5_3", 1, active=True)


def test_the_dashboards_fleet_series_are_on_the_roots_metrics(fleet_tree):
    """The Grafana hardware row's fleet panels (dashboards/training-run.json, job="_fleet") query series the root
    exports: each metric and label set an expression names is on /metrics."""
    import json
    import re
    import urllib.request
    root = fleet_tree["root"]
    _complete(root, "ib.port_active")
    _complete(root, "nic.rx_errors_total")
    board = (Path(__file__).resolve().parent.parent / "dashboards" / "training-run.json").read_text()
    wanted = {(name, labels) for expr in re.findall(r'"expr": "((?:[^"\\]|\\.)*)"', board)
              for name, labels in re.findall(r"(telemetry_\w+)\{([^}]*)\}", json.loads(f'"{expr}"'))
              if 'job="_fleet"' in labels}
    assert {name for name, _ in wanted} >= {"telemetry_network_errors_total", "telemetry_ib_port_active"}

    def exported() -> set[tuple[str, str]] | None:
        with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
            text = reply.read().decode()
        missing = {(name, labels) for name, labels in wanted
                   if not any(line.startswith(name + "{") and all(pair in line for pair in labels.split(","))
                              for line in text.splitlines())}
        return None if missing else wanted
    wait_for(exported, WAIT, what=f"the dashboard's fleet series {sorted(wanted)} on /metrics")


def test_a_ranks_gpu_stays_in_its_job_and_the_idle_gpus_go_to_the_fleet(tmp_path):
    """Fleet layout with GPUs (issue 28 item 1: "GPU readings of a rank's GPU stay in that rank's job"): of 4 GPUs,
    the 2 that ranks use report into their job with the rank as source, the 2 idle ones into `_fleet`, slots 0-1."""
    import telemetry
    from nvml_double import FakeNvml
    nv = FakeNvml(4)
    nv.gpus[3].temperature = 83  # rank 1's GPU: its job's max, never a fleet reading
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0", gpu_probe=True, nic_probe=False, nvml=nv,
                       probe_interval_s=0.25, xid_wait_ms=50, host_id="node-a", host_index=0)
    address = f"unix:{agent.socket_path}"
    runs = [telemetry.Run("hw", 0, 2, local_rank=0, agent=address, device=nv.gpus[2].uuid.decode(),
                          heartbeat_interval_s=0.2),
            telemetry.Run("hw", 1, 2, local_rank=1, agent=address, device="cuda:3", heartbeat_interval_s=0.2)]

    def rows(job: str, after: int = -1) -> list[Summary]:
        with closing(root.store.reader()) as db:
            return [Summary.from_bytes(r["summary"]) for r in db.execute(
                "SELECT summary FROM windows WHERE job=? AND metric='gpu.temperature_celsius' AND width_ms=1000 "
                "AND idx>? ORDER BY idx", (job, after))]

    def both_ranks() -> int | None:  # the first second in which both ranks' GPUs reported into their job
        with closing(root.store.reader()) as db:
            for idx, blob in db.execute("SELECT idx, summary FROM windows WHERE job='hw' AND width_ms=1000 AND "
                                        "metric='gpu.temperature_celsius' ORDER BY idx"):
                if sorted(Summary.from_bytes(blob).sources) == [0, 1]:
                    return int(idx)
        return None
    try:
        since = wait_for(both_ranks, WAIT, what="both ranks' GPUs in their job")
        # Before the ranks started, their GPUs were idle, and went to the fleet: only the seconds after count.
        wait_for(lambda: len(rows(fleet.FLEET_JOB, since)) >= 2, WAIT, what="fleet GPU windows after that")
        job = rows("hw")
        assert set().union(*[set(s.sources) for s in job]) == {0, 1}
        assert max(s.max for s in job) == 83.0
        in_fleet = rows(fleet.FLEET_JOB, since)
        assert {(fleet.host_index_of(src), fleet.slot_of(src)) for s in in_fleet for src in s.sources} == {(0, 0),
                                                                                                           (0, 1)}
        assert max(s.max for s in in_fleet) < 83.0
        names = root.node.hosts(fleet.FLEET_JOB)
        assert sorted(names[fleet.source(0, slot)] for slot in (0, 1)) == ["node-a:gpu0", "node-a:gpu1"]
    finally:
        for run in runs:
            run.close(2)
        stop_all(agent, root)


def test_fleet_sources_and_the_registry_file(tmp_path):
    assert fleet.source(3, 70) == 70 << 24 | 3 and fleet.host_index_of(70 << 24 | 3) == 3
    assert fleet.slot_of(fleet.source(3, 70)) == 70
    with pytest.raises(ValueError):
        fleet.source(fleet.MAX_HOST_INDEX + 1, 0)
    covered = BitMap([fleet.source(h, s) for h in (0, 5) for s in (0, 1, 16, 17, 64, 65, 66)])
    assert fleet.family_mask(covered, "ib.port_active") == BitMap(
        [fleet.source(h, s) for h in (0, 5) for s in (64, 65, 66)])
    registry = tmp_path / "hosts"
    registry.write_text("# the fleet\nnode-a\n\nnode-b  # rack 2\nnode-c\n")
    assert fleet.index_from_registry(registry, "node-b") == 1
    with pytest.raises(ValueError, match="does not list"):
        fleet.index_from_registry(registry, "node-z")
    registry.write_text("node-a\nnode-b\nnode-a\n")
    with pytest.raises(ValueError, match="listed twice"):
        fleet.index_from_registry(registry, "node-b")


@pytest.mark.parametrize("forged", ["-5", "99999999999999999999999", "NaN", "1e9", "", "0x10", "\x00\xff"])
def test_a_forged_sysfs_value_is_skipped_and_counted_never_fatal(tmp_path, forged):
    from collectors.probes import NicProbe
    write_host(tmp_path, nics=1, hcas=2)
    set_ib(tmp_path, "mlx5_0", 1, symbol_error=forged)
    (tmp_path / "class/infiniband/mlx5_1/ports/1/rate").write_text(f"{forged or '1e400'} Gb/sec\n")
    (tmp_path / "class/infiniband/mlx5_1/ports/1/state").write_text("99999999999: ACTIVE\n")
    probe = NicProbe(tmp_path)
    for _ in range(2):
        readings = {(r.device, r.metric): r.value for r in probe.sample()}
    assert ("mlx5_0/1", "ib.symbol_error_total") not in readings
    assert ("mlx5_1/1", "ib.port_state") not in readings
    assert readings[("mlx5_1/1", "ib.symbol_error_total")] == 0  # the rest of the sample is read as usual
    assert readings[("mlx5_0/1", "ib.port_active")] == 1
    assert probe.skipped >= 4  # two samples, the counter and the state each (and the rate where it parses)


def test_skipped_sysfs_values_are_counted_up_the_tree_and_exported_at_the_root(tmp_path):
    """NicProbe.skipped travels up with the agent's delivery counters (Counters.probe_skipped), summed at every
    tier, and the root exports it: a host writing garbage is seen from the root, not only in its agent's log."""
    import urllib.request
    trees = []
    for h in range(2):
        write_host(tmp_path / f"sys{h}", nics=1, hcas=2)
        trees.append(tmp_path / f"sys{h}")
    set_ib(trees[0], "mlx5_0", 1, symbol_error="-5")  # one forged file on one host, one on the other
    (trees[1] / "class/infiniband/mlx5_1/ports/1/state").write_text("99999999999: ACTIVE\n")
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    agents = [_agent(tmp_path, rack.address, f"node-{h}", h, trees[h]) for h in range(2)]
    try:
        def exported() -> float | None:
            with urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=10) as reply:
                for line in reply.read().decode().splitlines():
                    if line.startswith("telemetry_delivery_probe_skipped_total "):
                        value = float(line.split()[1])
                        return value if value >= 4 else None  # both hosts, two samples each at least
            return None
        wait_for(exported, WAIT, interval=0.1, what="the skipped values exported at the root")
        skipped = [agent.hardware.nic.skipped for agent in agents]
        assert all(skipped), skipped
        assert counters(rack)["probe_skipped"] >= 4 and counters(root)["probe_skipped"] <= sum(
            agent.hardware.nic.skipped for agent in agents)  # never more than the agents counted
    finally:
        stop_all(*agents, rack, root)


def test_the_api_lists_hosts_and_shows_one(fleet_tree):
    root = fleet_tree["root"]
    _complete(root, "ib.symbol_error_total")
    status, body = api_get(root.api_address, "/api/v1/jobs")
    assert status == 200 and body["hosts"] == "/api/v1/hosts"
    status, body = api_get(root.api_address, "/api/v1/hosts?metric=ib.symbol_error_total&k=2")
    assert status == 200, body
    fleet_hosts = {h["host"]: h for h in body["hosts"] if h["layout"] == "fleet"}
    assert {f"node-{h}" for h in range(HOSTS)} <= set(fleet_hosts)
    assert fleet_hosts["node-1"]["index"] == 1 and len(fleet_hosts["node-1"]["devices"]) == 6
    worst = body["worst"]["ib.symbol_error_total"]["top"][0]
    assert (worst["host"], worst["device"], worst["value"]) == ("node-1", "mlx5_2/1", 500.0)
    status, one = api_get(root.api_address, "/api/v1/hosts/node-1?seconds=30")
    assert status == 200 and one["index"] == 1
    assert {d["device"] for d in one["devices"]} == {"eth0", "eth1", "mlx5_0/1", "mlx5_1/1", "mlx5_2/1", "mlx5_3/1"}
    kept = [r for r in one["readings"] if r["metric"] == "ib.symbol_error_total"]
    assert kept and kept[-1]["values"]["mlx5_2/1"] == 500.0
    assert api_get(root.api_address, "/api/v1/hosts/nowhere")[0] == 404
    assert api_get(root.api_address, "/api/v1/hosts?k=0")[0] == 400
    assert api_get(root.api_address, "/api/v1/hosts/node-1?seconds=600")[0] == 200
    status, body = api_get(root.api_address, "/api/v1/hosts/node-1?seconds=601")
    assert status == 400 and "600" in str(body)


def test_the_fleet_view_without_fleet_windows_says_what_is_true_now():
    """`--host-index auto` is the default: the empty view no longer says agents need --host-index (review)."""
    from rich.console import Console

    from collectors.demo.hosts_view import fleet_frame
    console = Console(width=200, record=True)
    console.print(fleet_frame({"worst": {}, "hosts": []}))
    text = console.export_text()
    assert "no fleet windows yet" in text and "need --host-index" not in text and "--host-index off" in text


def test_the_worst_of_a_second_names_each_device_once_when_hosts_sample_more_often_than_once_a_second():
    """A host on --probe-interval under 1 s puts several readings of one device into a fleet second: the worst k
    are k devices, each at its most extreme reading (before: one device named k times, review of issue 28)."""
    import sqlite3

    import numpy as np

    from collectors.root.hosts import HostsView
    hot, warm, cool = fleet.source(0, 64), fleet.source(1, 64), fleet.source(2, 64)
    values = {hot: [90.0, 91.0, 92.0, 93.0], warm: [80.0, 81.0], cool: [10.0, 11.0, 12.0]}
    s = Summary.from_arrays(np.array([v for vs in values.values() for v in vs], dtype=np.float64),
                            np.array([src for src, vs in values.items() for _ in vs], dtype=np.int64), 10**9)
    assert [src for _, src in s.top(3)] == [hot, hot, hot]  # the window's own top-k: one device
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE windows (job TEXT, metric TEXT, width_ms INTEGER, idx INTEGER, summary BLOB)")
    db.execute("INSERT INTO windows VALUES (?,?,?,?,?)", (fleet.FLEET_JOB, "ib.symbol_error_total", 1000, 1000,
                                                          s.to_bytes()))
    names = {hot: "a:mlx5_0/1", warm: "b:mlx5_0/1", cool: "c:mlx5_0/1"}
    worst = HostsView._worst(HostsView.__new__(HostsView), db, names, None, 3)["ib.symbol_error_total"]
    assert [(t["host"], t["value"]) for t in worst["top"]] == [("a", 93.0), ("b", 81.0), ("c", 12.0)]
    assert [(t["host"], t["value"]) for t in worst["bottom"]] == [("c", 10.0), ("b", 80.0), ("a", 90.0)]


def test_a_host_on_the_per_host_layout_is_listed_and_shown_beside_the_fleets(tmp_path):
    """An agent on `--host-index off` (its readings under `_host:<host>`) beside one in the fleet layout: both are
    found through /api/v1/hosts. The per-host pseudo-jobs live in the windows table only (the jobs table keeps
    jobs with a world size); read from the jobs table, `old-host` was missing from the list and 404 (review)."""
    from click.testing import CliRunner

    from collectors.watch_cli import watch
    for name in ("old", "new"):
        write_host(tmp_path / f"sys-{name}", nics=2, hcas=2)
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    old = make_agent([rack.address], tmp_path / "old.sock", "agent-old", nic_probe=True,
                     sysfs_root=tmp_path / "sys-old", probe_interval_s=0.25, host_id="old-host")  # index off
    new = _agent(tmp_path, rack.address, "new-host", 0, tmp_path / "sys-new")
    try:
        def stored() -> bool:
            with closing(root.store.reader()) as db:
                jobs = {job for job, in db.execute("SELECT DISTINCT job FROM windows")}
            return {"_host:old-host", fleet.FLEET_JOB} <= jobs
        wait_for(stored, WAIT, what="windows of both layouts stored")
        status, body = api_get(root.api_address, "/api/v1/hosts")
        assert status == 200, body
        layouts = {h["host"]: h for h in body["hosts"]}
        assert layouts["old-host"] == {"host": "old-host", "layout": "per-host", "job": "_host:old-host"}
        assert layouts["new-host"]["layout"] == "fleet" and layouts["new-host"]["index"] == 0
        status, one = api_get(root.api_address, "/api/v1/hosts/old-host")
        assert status == 200 and one["layout"] == "per-host" and one["job"] == "_host:old-host", one
        status, jobs = api_get(root.api_address, "/api/v1/jobs")  # pseudo-jobs are not jobs: pointed at
        assert status == 200 and jobs == {"jobs": [], "hosts": "/api/v1/hosts"}
        result = CliRunner().invoke(watch, ["--root", root.api_address, "--hosts", "--once"])
        assert result.exit_code == 0, result.output
        assert "1 host(s) in the fleet layout, 1 in the per-host layout (old-host)" in result.output
    finally:
        stop_all(old, new, rack, root)


def test_telemetry_watch_shows_the_fleet_and_one_host(fleet_tree):
    from click.testing import CliRunner

    from collectors.watch_cli import watch
    root = fleet_tree["root"]
    _complete(root, "ib.symbol_error_total")
    result = CliRunner().invoke(watch, ["--root", root.api_address, "--hosts", "--once"])
    assert result.exit_code == 0, result.output
    assert "ib.symbol_error_total" in result.output and "node-1 mlx5_2/1 500" in result.output
    result = CliRunner().invoke(watch, ["--root", root.api_address, "--host", "node-1", "--once"])
    assert result.exit_code == 0, result.output
    assert "mlx5_2/1" in result.output and "index 1" in result.output
    result = CliRunner().invoke(watch, ["--root", root.api_address, "--host", "node-1", "--hosts", "--once"])
    assert result.exit_code != 0 and "alternatives" in result.output
    result = CliRunner().invoke(watch, ["--root", root.api_address, "--host", "nowhere", "--once"])
    assert result.exit_code != 0 and "knows no host 'nowhere'" in result.output


# ------------------------------------------------------------------ the hardware detector over fleet windows
def _fleet_detector():
    from collectors.detectors.base import Context
    from collectors.detectors.events import EventLog
    from collectors.detectors.hardware import HardwareDetector
    names = {fleet.source(h, slot): f"host-{h}:{dev}" for h in range(4)
             for slot, dev in ((0, "gpu0"), (64, "mlx5_0/1"), (65, "mlx5_1/1"))}
    log = EventLog(None)
    return log, HardwareDetector(log, Context(hosts_of=lambda job: names if job == fleet.FLEET_JOB else {}))


def _fleet_row(metric: str, second: int, values: dict[tuple[int, int], float]):
    import numpy as np

    from collectors.common.keys import Key
    from collectors.common.rows import Row
    items = list(values.items())
    s = Summary.from_arrays(np.array([v for _, v in items], dtype=np.float64),
                            np.array([fleet.source(h, slot) for (h, slot), _ in items], dtype=np.int64),
                            second * 1_000_000_000)
    return Row(Key(fleet.FLEET_JOB, metric, second * 1000, 1000), 0, s, 0, second * 1_000_000_000)


def _temps(hot: dict[int, float]) -> dict[tuple[int, int], float]:
    return {(h, 0): hot.get(h, 60.0) for h in range(4)}


def _events(log) -> dict[str, dict]:
    return {e["key"]: e for e in log.query(None)}


def test_hardware_streaks_are_per_host_and_device_one_hosts_flapping_never_triggers_anothers():
    """gpu_temperature holds for 5 s: host 1 hot for 3 s then host 2 hot for 3 s is no host hot for 5 s (one
    streak per rule fleet-wide called it 6); hosts 1 and 2 hot on alternate seconds is not either."""
    log, det = _fleet_detector()
    for second in range(100, 106):
        det.observe(_fleet_row("gpu.temperature_celsius", second, _temps({1 if second < 103 else 2: 95.0})))
    for second in range(106, 126):
        det.observe(_fleet_row("gpu.temperature_celsius", second, _temps({1 + second % 2: 95.0})))
    assert log.query(None) == []
    for second in range(126, 131):  # host 3 hot for 5 s: its own event, from its own first second
        det.observe(_fleet_row("gpu.temperature_celsius", second, _temps({3: 95.0, 1 + second % 2: 95.0})))
    (event,) = log.query(None)
    assert (event["key"], event["hosts"], event["time"]) == ("gpu_temperature@host-3", ["host-3"], 126.0)
    assert event["detail"]["devices"] == ["gpu0"]


def test_hardware_two_hosts_faults_are_told_apart_and_close_on_their_own():
    """Host 0's port goes down at 200, host 2's at 210: two events, each with its own start; host 0's closes
    `quiet_s` (30 s) after it came back although host 2's port is still down (one fleet-wide streak kept it open),
    and host 2's readings never hold up or break host 0's."""
    log, det = _fleet_detector()
    for second in range(190, 260):
        ports = {(h, slot): 1.0 for h in range(4) for slot in (64, 65)}
        if 200 <= second < 215:
            ports[(0, 64)] = 0.0
        if second >= 210:
            ports[(2, 65)] = 0.0
        det.observe(_fleet_row("ib.port_active", second, ports))
        if second == 212:
            events = _events(log)
            assert set(events) == {"ib_port_down@host-0", "ib_port_down@host-2"}
            assert events["ib_port_down@host-0"]["time"] == 200.0 and events["ib_port_down@host-2"]["time"] == 210.0
            assert events["ib_port_down@host-2"]["detail"]["device"] == "mlx5_1/1"
    events = _events(log)
    assert events["ib_port_down@host-0"]["status"] == "closed"
    assert events["ib_port_down@host-2"]["status"] == "open" and events["ib_port_down@host-2"]["hosts"] == ["host-2"]


def test_hardware_a_silent_port_keeps_its_streak_while_others_report():
    """Host 1's port is down from 302 and misses 303 (its agent's part came late), when host 2's port is down for
    that one second: no verdict on host 1's port that second, so its own streak goes on (ib_port_down holds for
    2 s: one event, host 1, from 302); host 2's one second is not a fault of 2 s (a fleet-wide streak, 302-303,
    named host 2)."""
    log, det = _fleet_detector()
    for second in range(300, 306):
        ports = {(h, 64): 1.0 for h in range(4)}
        if second >= 302:
            ports[(1, 64)] = 0.0
        if second == 303:
            del ports[(1, 64)]
            ports[(2, 64)] = 0.0
        det.observe(_fleet_row("ib.port_active", second, ports))
    (event,) = log.query(None)
    assert event["key"] == "ib_port_down@host-1" and event["time"] == 302.0


def test_hardware_rising_total_is_the_hosts_own():
    """A rising counter's event total counts its host's increase, not the fleet's."""
    log, det = _fleet_detector()
    det.observe(_fleet_row("ib.link_downed_delta", 400, {(0, 64): 2.0, (3, 65): 5.0, (1, 64): 0.0}))
    events = _events(log)
    assert events["ib_link_downed@host-0"]["detail"]["total"] == 2.0
    assert events["ib_link_downed@host-3"]["detail"]["total"] == 5.0


def test_hardware_a_seconds_late_readings_are_judged_once_never_twice():
    """A second judged without a late host, then again with its readings merged in (the stored row rewritten): the
    late host's link down is named, with its own increase as the total; the hosts judged before are not judged
    again (host 0's increase counted once, not twice), and a rewrite that brings nothing new changes nothing."""
    log, det = _fleet_detector()
    det.observe(_fleet_row("ib.link_downed_delta", 500, {(0, 64): 2.0, (3, 64): 1.0}))
    det.observe(_fleet_row("ib.link_downed_delta", 501, {(0, 64): 0.0, (3, 64): 0.0}))
    det.observe(_fleet_row("ib.link_downed_delta", 500, {(0, 64): 2.0, (3, 64): 1.0, (1, 65): 4.0}))
    events = _events(log)
    assert set(events) == {"ib_link_downed@host-0", "ib_link_downed@host-3", "ib_link_downed@host-1"}
    assert events["ib_link_downed@host-1"]["detail"]["device"] == "mlx5_1/1"
    assert events["ib_link_downed@host-1"]["detail"]["total"] == 4.0
    assert events["ib_link_downed@host-0"]["detail"]["total"] == 2.0
    before = log.query(None)
    det.observe(_fleet_row("ib.link_downed_delta", 500, {(0, 64): 2.0, (3, 64): 1.0, (1, 65): 4.0}))
    assert log.query(None) == before


def _ports(second: int, down: dict[int, range], hosts: range = range(4)) -> dict[tuple[int, int], float]:
    """Each host's IB port at `second`: down (0) in its host's range of seconds, else up (1)."""
    return {(h, 64): 0.0 if second in down.get(h, ()) else 1.0 for h in hosts}


def _observe_with_host_late(det, late: int, seconds: range, down: dict[int, range]) -> None:
    """Each second judged on time without host `late` (the tiers passed it on), then, after the next second's
    on-time row, again with host `late`'s reading merged in (the stored row rewritten: Finaliser.ship)."""
    on_time = [h for h in range(4) if h != late]
    for second in seconds:
        det.observe(_fleet_row("ib.port_active", second, _ports(second, down, on_time)))
        if second > seconds[0]:
            det.observe(_fleet_row("ib.port_active", second - 1, _ports(second - 1, down)))


def test_hardware_a_host_whose_readings_always_come_late_builds_its_streak_from_its_late_seconds():
    """Host 1's port down for 10 s, its readings late every second: each late second stretches its streak (not
    only one that ends where the streak starts), so ib_port_down (2 s) names host 1 from its first second down;
    each late second is counted once (a rewrite bringing nothing new counts nothing)."""
    log, det = _fleet_detector()
    _observe_with_host_late(det, 1, range(600, 616), {1: range(603, 613)})
    (event,) = log.query(None)
    assert (event["key"], event["time"], event["status"]) == ("ib_port_down@host-1", 603.0, "open")
    assert event["detail"]["buckets"] == 10
    det.observe(_fleet_row("ib.port_active", 612, _ports(612, {1: range(603, 613)})))
    assert log.query(None)[0]["detail"]["buckets"] == 10


def test_hardware_an_event_closes_while_its_hosts_recovery_readings_come_late():
    """Host 2's port down for 5 s on time, then its readings late from the second it came back: the late readings
    under the threshold end its streak, and the event closes `quiet_s` (30 s) after the port was last down."""
    log, det = _fleet_detector()
    down = {2: range(700, 705)}
    for second in range(698, 705):
        det.observe(_fleet_row("ib.port_active", second, _ports(second, down)))
    (event,) = log.query(None)
    assert (event["key"], event["status"]) == ("ib_port_down@host-2", "open")
    _observe_with_host_late(det, 2, range(705, 745), down)
    (event,) = log.query(None)
    assert (event["key"], event["status"]) == ("ib_port_down@host-2", "closed")


def test_hardware_a_late_reading_of_an_earlier_second_does_not_end_a_later_streak():
    """Host 3's port is down at 802-803 on time; its reading of 801 (up) comes late after them: that second is
    older than the streak's last second down, so the streak goes on and the event stays open."""
    log, det = _fleet_detector()
    down = {3: range(802, 810)}
    for second in range(800, 804):
        hosts = range(4) if second != 801 else range(3)
        det.observe(_fleet_row("ib.port_active", second, _ports(second, down, hosts)))
    det.observe(_fleet_row("ib.port_active", 801, _ports(801, down)))
    for second in range(804, 840):
        det.observe(_fleet_row("ib.port_active", second, _ports(second, down, range(3))))
    (event,) = log.query(None)
    assert (event["key"], event["time"], event["status"]) == ("ib_port_down@host-3", 802.0, "open")


def test_hardware_a_seconds_sources_judged_accumulate_over_its_late_rows():
    """A late row that holds only the late host's readings, then one with every host's: the sources judged before
    are remembered with the late one's (not replaced by them), so host 0's increase is counted once."""
    log, det = _fleet_detector()
    det.observe(_fleet_row("ib.link_downed_delta", 900, {(0, 64): 2.0, (3, 64): 0.0}))
    det.observe(_fleet_row("ib.link_downed_delta", 901, {(0, 64): 0.0, (3, 64): 0.0}))
    det.observe(_fleet_row("ib.link_downed_delta", 900, {(1, 65): 4.0}))
    det.observe(_fleet_row("ib.link_downed_delta", 900, {(0, 64): 2.0, (3, 64): 0.0, (1, 65): 4.0}))
    events = _events(log)
    assert set(events) == {"ib_link_downed@host-0", "ib_link_downed@host-1"}
    assert events["ib_link_downed@host-0"]["detail"]["total"] == 2.0
    assert events["ib_link_downed@host-1"]["detail"]["total"] == 4.0


def test_a_devices_fleet_source_is_kept_once_per_device_and_past_its_kinds_slots_skipped_and_counted():
    """One cache of device -> fleet source for GPUs, NICs and IB ports (HardwareSampler._fleet_source): a kind's
    slots in order of first sight, the same source on every later look, and a device past its kind's slots (48
    NICs, 16 GPUs) skipped and counted each time it reports; a new host index starts the devices afresh."""
    from collectors.agent.hardware import HardwareSampler
    from collectors.agent.ranks import RankRegistry
    from collectors.delivery.node import Node
    from collectors.delivery.windows import Deadlines
    sampler = HardwareSampler(Node("t", Deadlines(), ack_down=lambda *a, **k: None), RankRegistry(), host_id="h",
                              host_index=3)
    nics = [sampler._fleet_source(f"eth{i}", "nic.") for i in range(49)]
    assert nics[:48] == [fleet.source(3, 16 + i) for i in range(48)] and nics[48] is None
    assert sampler._fleet_source("eth0", "nic.") == fleet.source(3, 16)
    assert sampler._fleet_source("mlx5_0/1", "ib.") == fleet.source(3, 64)
    assert sampler._fleet_source("gpu2", "gpu.", 2) == fleet.source(3, 2)
    assert sampler._fleet_source("gpu16", "gpu.", 16) is None
    assert sampler._fleet_source("eth48", "nic.") is None
    assert sampler.stats.no_slot == 3
    sampler.set_host_index(5)
    assert sampler._fleet_source("mlx5_0/1", "ib.") == fleet.source(5, 64)


class _SimHost:
    """One host's real hardware path in this process (as bench/fleet.py's simulator): its NicProbe on a generated
    sysfs tree, HardwareSampler, Node, Upstream and Outbox to its rack, sampled and flushed when the test says, so
    that a host can be made late on purpose."""

    def __init__(self, index: int, sysfs: Path, rack: str) -> None:
        from collectors.agent.hardware import HardwareSampler
        from collectors.agent.ranks import RankRegistry
        from collectors.delivery.node import Node, Upstream
        from collectors.delivery.outbox import Outbox
        from collectors.delivery.windows import Deadlines
        from collectors.probes import NicProbe

        self.name = f"node-{index}"
        self.node = Node(f"agent-{self.name}", Deadlines(0.5, 3.0), ack_down=lambda *a, **k: None)
        self.node.complete = lambda win: True
        self.node.sink = upstream = Upstream(self.node, lambda on_ack: Outbox(f"agent-{self.name}", [rack], None,
                                                                             on_ack))
        self.registry = RankRegistry()
        self.sampler = HardwareSampler(self.node, self.registry, host_id=self.name, nic=NicProbe(sysfs),
                                       host_index=index)
        self.outbox = upstream.outbox
        self.outbox.start()

    def sample(self, second_ms: int) -> None:
        self.sampler.sample_once(now_ns=(second_ms + 500) * 1_000_000, next_wall_ns=(second_ms + 1500) * 1_000_000)
        with self.node.lock:
            if self.registry.changed:
                self.node.own_ranks = self.registry.views()
                self.registry.changed = False

    def flush(self) -> None:
        self.node.flush()

    def stop(self) -> None:
        self.outbox.close(0.5)


def _next_second(after_ms: int) -> int:
    """The start (ms) of the current wall-clock second, once it is later than `after_ms` and 0.4 s of it is left."""
    while time.time() % 1 > 0.6 or time.time() * 1000 < after_ms + 1000:
        time.sleep(0.02)
    return int(time.time()) * 1000


@contextmanager
def _link_down_with_a_late_host(tmp_path: Path, down: int, **tier: float) -> Iterator[tuple[object, list[_SimHost], int]]:
    """Three hosts' real hardware path (node-0 and node-1 under rack0, node-2 under rack1) into a real root, the
    tiers made with `tier`'s options: two whole seconds (the tiers learn which hosts each child covers), then host
    `down`'s IB port mlx5_2/1 goes down and every host samples the next second, of which node-1's part is held back
    (late) until the test flushes hosts[1]. Yields (root, hosts, that second's start in ms)."""
    trees = []
    for h in range(3):
        trees.append(tmp_path / f"sys{h}")
        write_host(trees[-1], nics=2, hcas=4)
    root = make_root(tmp_path / "root.db", **tier)
    racks = [make_collector([root.address], f"rack{r}", **tier) for r in range(2)]
    hosts = [_SimHost(h, trees[h], racks[0 if h < 2 else 1].address) for h in range(3)]
    try:
        second = 0
        for _ in range(2):
            second = _next_second(second)
            for host in hosts:
                host.sample(second)
                host.flush()
            _complete(root, "ib.port_active")
        set_ib(trees[down], "mlx5_2", 1, active=False, link_downed=1)
        second = _next_second(second)
        for host in hosts:
            host.sample(second)
        hosts[0].flush()
        hosts[2].flush()  # node-1, under rack0 with node-0, is late
        yield root, hosts, second
    finally:
        for host in hosts:
            host.stop()
        stop_all(*racks, root)


def _stored_second(root, metric: str, second: int) -> tuple[dict, Summary] | None:
    return next(((row, s) for row, s in _fleet_windows(root, metric) if row["idx"] == second), None)


def _link_down_event(root) -> dict | None:
    status, body = api_get(root.api_address, f"/api/v1/jobs/{fleet.FLEET_JOB}/events?kind=hardware")
    found = [e for e in body.get("events", []) if e["detail"].get("rule") == "ib_link_downed"]
    return found[0] if status == 200 and found else None


def test_a_fleet_second_is_passed_on_without_a_late_host_whose_readings_are_merged_exactly_after(tmp_path):
    """Issue 28: a tier passes a fleet second on `fleet_grace_s` after it ended without a host not in yet (the racks
    above it once every rack sent its part), instead of holding it until its deadline (10 s here); the late host's
    readings follow as a late delta, merged into the stored window exactly, and a link down among them is still
    named (the detector judges a second's late sources)."""
    with _link_down_with_a_late_host(tmp_path, 1, deadline_floor_s=10.0) as (root, hosts, second):
        row, early = wait_for(lambda: _stored_second(root, "ib.link_downed_delta", second), 6.0,
                              what="the fleet second stored without its late host")
        assert {fleet.host_index_of(src) for src in early.sources} == {0, 2}
        assert row["late"] == 0
        hosts[1].flush()

        def merged() -> tuple[dict, Summary] | None:
            found = _stored_second(root, "ib.link_downed_delta", second)
            return found if found and len(found[1].sources) == 12 else None
        row, whole = wait_for(merged, WAIT, what="the late host's readings merged into the stored second")
        assert row["late"] >= 1
        assert whole.count == 12 and whole.sum == 1.0 and whole.max == 1.0
        assert fleet.host_index_of(whole.argmax) == 1
        assert whole.sources == early.sources | BitMap(fleet.source(1, 64 + p) for p in range(4))
        event = wait_for(lambda: _link_down_event(root), WAIT, what="the late host's link down named")
        assert event["detail"]["host"] == "node-1" and event["detail"]["device"] == "mlx5_2/1"


def test_an_agent_under_a_parent_without_host_registration_says_the_way_back_and_asks_again(monkeypatch, caplog):
    """A parent older than host registration answers UNIMPLEMENTED: the agent (--host-index auto) logs one error
    that says how to get the host's fleet readings flowing again, and asks again (it used to stop asking until it
    restarted): once the tree is upgraded, the host gets its index without an agent restart."""
    import threading

    import grpc

    from collectors.agent import host_index

    class Unimplemented(grpc.RpcError):
        def code(self):
            return grpc.StatusCode.UNIMPLEMENTED

        def details(self):
            return "Method not found!"

    asked = []

    def ask(*args):
        asked.append(time.monotonic())
        if len(asked) <= 3:  # an old tree, for three asks; then upgraded
            raise Unimplemented()
        return forward_pb2.HostAssignment(index=5)
    monkeypatch.setattr(host_index, "ask", ask)
    given = []
    registration = host_index.HostIndexRegistration(["127.0.0.1:1"], None, "node-7", "m7", None, given.append,
                                                    retry_s=0.05)
    with caplog.at_level("INFO", logger=host_index.__name__):
        runner = threading.Thread(target=registration._run, daemon=True)
        runner.start()
        runner.join(10)
    assert not runner.is_alive() and len(asked) == 4
    errors = [r.getMessage() for r in caplog.records if r.name == host_index.__name__ and r.levelname == "ERROR"]
    assert len(errors) == 1, errors  # said once, not per ask
    assert "UNIMPLEMENTED" in errors[0] and "upgrade the tree" in errors[0] and "--host-index off" in errors[0]
    assert "asking again" in errors[0]
    assert registration.index == 5 and given == [5] and registration.unable == ""


def test_a_tier_without_a_fleet_grace_holds_a_fleet_second_for_its_late_host(monkeypatch):
    """fleet_grace_s=None (--fleet-grace all): a rack holds a fleet second one host is late for, long past the cut-off a
    grace would set, until that host's part comes (or the window's deadline); with a grace (0.5 s) the same second is
    passed on. Judged on the Node: covered_complete, and next_due (no wake-up at a cut-off that does not exist)."""
    from types import SimpleNamespace

    from collectors.common.keys import Key
    from collectors.delivery import node as node_module
    from collectors.delivery.node import Node, RankView
    from collectors.delivery.windows import Deadlines, Part
    from helpers_tree import summary_of

    second_ms = 999_999_000
    wall_s = second_ms / 1000 + 1 + 5.0  # 5 s after the second ended: ten graces of 0.5 s, well before the deadline
    monkeypatch.setattr(node_module, "time", SimpleNamespace(time=lambda: wall_s, monotonic=time.monotonic))
    ports = {h: fleet.source(h, 64) for h in range(2)}
    key = Key(fleet.FLEET_JOB, "ib.port_active", second_ms, 1000)
    for grace in (0.5, None):
        rack = Node("rack", Deadlines(floor_s=30.0), ack_down=lambda *a, **k: None, fleet_grace_s=grace)
        for h in range(2):  # two hosts, one port each
            rack.child_ranks[f"agent-{h}"] = {fleet.FLEET_JOB: RankView(alive=BitMap([ports[h]]))}
        part = Part(key, [("agent-0", 1)], BitMap([ports[0]]), built=summary_of({ports[0]: 1.0}))
        assert rack.offer(part, 1)[0] == "accepted"
        (win,) = rack.table.pending_windows()
        now = time.monotonic()
        if grace is not None:
            assert rack.covered_complete(win)  # passed on without host 1
            assert rack.next_due(now) < now  # its cut-off long past
            continue
        assert not rack.covered_complete(win), "a fleet second passed on without its late host, with no grace"
        assert rack.next_due(now) == pytest.approx(win.deadline)  # nothing to wake for before the deadline
        late = Part(key, [("agent-1", 1)], BitMap([ports[1]]), built=summary_of({ports[1]: 0.0}))
        assert rack.offer(late, 1)[0] == "accepted"
        assert rack.covered_complete(win)  # every host in


@pytest.mark.parametrize("grace", [0.05, 0.2, 0.5, 2.0])
@pytest.mark.parametrize("tier, grace_times", [("rack", 1), ("above racks", 2)])
def test_a_fleet_seconds_cut_off_counts_the_grace_from_the_hosts_sample_not_from_the_seconds_end(monkeypatch, tier,
                                                                                                 grace_times, grace):
    """A fleet second one child never sends (a permanently late host; a rack cut off) is passed on `fleet_grace_s`
    after every host sampled it (fleet.SAMPLE_PHASE into the second) at a rack, twice that above racks: not counted
    from the second's end, which added 0.3 s at every rack with a late host (a link down named in up to 2.27 s at
    2,000 hosts, docs/fleet.md). Judged on a real Node at a mocked wall clock, just before and at the cut-off, for
    the flush (covered_complete) and for its wake-up (next_due), at graces below and above the default (0.5 s): a
    lowered `--fleet-grace` moves the cut-off with it. Failed before: the rack held the second until 1.5 s after it
    began, the tier above until 2.0 s."""
    from types import SimpleNamespace

    from collectors.common.keys import Key
    from collectors.delivery import node as node_module
    from collectors.delivery.node import Node, RankView
    from collectors.delivery.windows import Deadlines, Part
    from helpers_tree import summary_of

    second_ms = 999_999_000
    cutoff_ms = second_ms + fleet.SAMPLE_PHASE * 1000 + grace * 1000 * grace_times
    wall = {"s": 0.0}
    monkeypatch.setattr(node_module, "time", SimpleNamespace(time=lambda: wall["s"], monotonic=time.monotonic))
    key = Key(fleet.FLEET_JOB, "ib.port_active", second_ms, 1000)
    node = Node(tier, Deadlines(floor_s=30.0), ack_down=lambda *a, **k: None, fleet_grace_s=grace)
    # two children: one host each under a rack; two hosts each (racks) above racks; the second never sends
    per_child = 1 if tier == "rack" else 2
    sources = {c: BitMap(fleet.source(c * per_child + h, 64) for h in range(per_child)) for c in range(2)}
    for c in range(2):
        node.child_ranks[f"child-{c}"] = {fleet.FLEET_JOB: RankView(alive=sources[c])}
    part = Part(key, [("child-0", 1)], sources[0], built=summary_of({src: 1.0 for src in sources[0]}))
    assert node.offer(part, 1)[0] == "accepted"
    (win,) = node.table.pending_windows()
    mono = time.monotonic()
    for before_ms in (min(300.0, grace * 1000 / 2), 1.0):
        wall["s"] = (cutoff_ms - before_ms) / 1000
        assert not node.covered_complete(win), f"passed on {before_ms} ms before its cut-off"
        assert node.next_due(mono) == pytest.approx(mono + before_ms / 1000, abs=1e-6)  # wakes at the cut-off
    wall["s"] = cutoff_ms / 1000
    assert node.covered_complete(win), "held past its cut-off"
    assert cutoff_ms < second_ms + 1000 + grace * 1000 * grace_times  # before the second's end + grace(s)


@pytest.mark.parametrize("role", ["collector", "root"])
def test_fleet_grace_all_reaches_the_tier_as_no_grace_and_bad_values_are_refused(monkeypatch, role):
    """`--fleet-grace all` says "wait for every host": the tier's config gets None (that the tier then holds a fleet
    second for a late host: test_a_tier_without_a_fleet_grace_holds_a_fleet_second_for_its_late_host); before, the
    option took only seconds. A negative, infinite or non-numeric grace is a usage error."""
    from click.testing import CliRunner

    from collectors import cli
    seen = {}

    class Captured:
        def __init__(self, config):
            seen["config"] = config
    monkeypatch.setattr("collectors.root.server.RootServer", Captured)
    monkeypatch.setattr("collectors.collector.server.CollectorServer", Captured)
    monkeypatch.setattr(cli, "StopSignals", lambda: None)  # leave this process's signal handlers alone
    monkeypatch.setattr(cli, "_serve", lambda signals, make, describe: make())
    monkeypatch.setattr(cli, "_logging", lambda verbose: None)
    where = ["--parent", "127.0.0.1:1"] if role == "collector" else ["--db", ":memory:"]
    for given, want in (("all", None), ("0", 0.0), ("1.5", 1.5), (None, fleet.DEFAULT_FLEET_GRACE_S)):
        seen.clear()
        result = CliRunner().invoke(cli.main, ["collector", *where, *(["--fleet-grace", given] if given else [])])
        assert result.exit_code == 0, result.output
        assert seen["config"].fleet_grace_s == want, given
    for bad in ("-1", "inf", "nan", "soon", ""):
        result = CliRunner().invoke(cli.main, ["collector", *where, "--fleet-grace", bad])
        assert result.exit_code == 2 and "--fleet-grace" in result.output, (bad, result.output)


SECOND_MS = 999_999_000


def _fleet_node(monkeypatch, tier: str, metric: str, grace: float | None, children: int):
    """A real Node (the Python table; the native one is driven through real servers below) as a rack (one host per
    child) or a tier above racks (two hosts per child) over `children` children of the fleet, at a mocked wall clock
    ({"s": seconds}) set just after the hosts sampled second SECOND_MS. Returns (node, key, sources by child, wall)."""
    from types import SimpleNamespace

    from collectors.common.keys import Key
    from collectors.delivery import node as node_module
    from collectors.delivery.node import Node, RankView
    from collectors.delivery.windows import Deadlines

    wall = {"s": (SECOND_MS + fleet.SAMPLE_PHASE * 1000 + 20) / 1000}
    monkeypatch.setattr(node_module, "time", SimpleNamespace(time=lambda: wall["s"], monotonic=time.monotonic))
    slots = fleet.family_of(metric)
    assert slots is not None
    key = Key(fleet.FLEET_JOB, metric, SECOND_MS, 1000)
    node = Node(tier, Deadlines(floor_s=30.0), ack_down=lambda *a, **k: None, fleet_grace_s=grace)
    per_child = 1 if tier == "rack" else 2
    sources = {c: BitMap(fleet.source(c * per_child + h, slots[0]) for h in range(per_child)) for c in range(children)}
    for c in range(children):
        node.child_ranks[f"child-{c}"] = {fleet.FLEET_JOB: RankView(alive=sources[c])}
    return node, key, sources, wall


def _offer(node, key, sources: BitMap, child: int, value: float) -> None:
    """Child `child`'s part of the second: `value` from its first source, 0 from the others."""
    from collectors.delivery.windows import Part
    from helpers_tree import summary_of

    values = {src: (value if src == sources.min() else 0.0) for src in sources}
    assert node.offer(Part(key, [(f"child-{child}", 1)], sources, built=summary_of(values)), 1)[0] == "accepted"


def _ship(node, now: float) -> int:
    """The windows due now, taken and put in flight as the sink does; how many."""
    due = node.table.due(now, node.covered_complete)
    for win in due:
        win.dispatch(len(win.inflight) + 1, win.take(late=win.forwarded))
    return len(due)


@pytest.mark.parametrize("tier", ["rack", "above racks"])
@pytest.mark.parametrize("metric, value, grace, at_once", [
    ("ib.link_downed_delta", 1.0, 0.5, True),     # a link down: passed on with the hosts that are in
    ("gpu.xid_errors_delta", 3.0, 0.5, True),
    ("gpu.lost", 1.0, 0.5, True),
    ("ib.link_downed_delta", 0.0, 0.5, False),    # the same counter without a fault waits for its late host
    ("ib.symbol_error_delta", 500.0, 0.5, False),  # not a fault on one reading (a warning rule): waits
    ("ib.link_downed_delta", 1.0, None, False),   # --fleet-grace all: every second waits for every host
])
def test_a_fleet_second_holding_a_fault_is_passed_on_at_once(monkeypatch, tier, metric, value, grace, at_once):
    """A second of an URGENT_METRICS metric whose parts in hold a value above 0 (a link down, an XID, a GPU off the
    bus) is passed on as soon as such a part is in, not at its cut-off (`fleet_grace_s` after the hosts sampled it;
    twice that above racks): a late host elsewhere in the rack, or a late rack, would otherwise hold a link down back
    by the grace at every tier, and the 2 s bound at 2,000 hosts has no margin for it (docs/fleet.md). What comes
    after it, faults included, goes on together LATE_BATCH_S later. Failed before: every case waited for its cut-off."""
    from collectors.delivery.windows import LATE_BATCH_S

    node, key, sources, _ = _fleet_node(monkeypatch, tier, metric, grace, 3)
    _offer(node, key, sources[0], 0, value)
    (win,) = node.table.pending_windows()
    assert node.covered_complete(win) is at_once
    if not at_once:
        return
    now = time.monotonic()
    assert _ship(node, now) == 1
    _offer(node, key, sources[1], 1, 0.0)
    _offer(node, key, sources[2], 2, value)
    assert _ship(node, now) == 0, "a late part went on alone after the second's fault had gone"
    assert _ship(node, now + LATE_BATCH_S) == 1


def test_a_late_hosts_fault_goes_on_at_once_when_its_second_went_without_one(monkeypatch):
    """The second was passed on at its cut-off without a fault (the faulty host was the late one): the first late
    part holding a fault goes on at once, not LATE_BATCH_S later; a second fault after it waits with the rest."""
    from collectors.delivery.windows import LATE_BATCH_S

    node, key, sources, wall = _fleet_node(monkeypatch, "rack", "ib.link_downed_delta", 0.5, 3)
    _offer(node, key, sources[0], 0, 0.0)
    now = time.monotonic()
    assert _ship(node, now) == 0, "passed on before its cut-off without a fault"
    wall["s"] = (SECOND_MS + (fleet.SAMPLE_PHASE + 0.5) * 1000) / 1000
    assert _ship(node, now) == 1, "held past its cut-off"
    _offer(node, key, sources[1], 1, 1.0)
    assert _ship(node, now) == 1, "the late host's fault waited"
    _offer(node, key, sources[2], 2, 1.0)
    assert _ship(node, now) == 0
    assert _ship(node, now + LATE_BATCH_S) == 1


@pytest.mark.parametrize("faulty", [1, 2, 8, 64])
def test_many_faulty_hosts_in_one_second_cost_a_tier_two_units_of_it(monkeypatch, faulty):
    """64 hosts' parts of one second arriving one by one, `faulty` of them with a link down (every 64/faulty-th,
    the first at the fifth): the rack sends the second up in two units (up to the first fault, then the rest
    together), not one per fault (review: faults after the first went on at once each, 9 units at 8 faulty hosts,
    64 at 64), and every host's part goes up exactly once."""
    from collectors.delivery.windows import LATE_BATCH_S

    node, key, sources, _ = _fleet_node(monkeypatch, "rack", "ib.link_downed_delta", 0.5, 64)
    bad = {(4 + i * (64 // faulty)) % 64 for i in range(faulty)}
    now = time.monotonic()
    units = 0
    for c in range(64):
        _offer(node, key, sources[c], c, 1.0 if c in bad else 0.0)
        units += _ship(node, now)
    units += _ship(node, now + LATE_BATCH_S)
    assert units == 2
    (win,) = node.table.windows.values()
    sent = [out.summary for out in win.inflight.values()]
    assert sum(s.count for s in sent) == 64 and BitMap.union(*(s.sources for s in sent)) == BitMap.union(*sources.values())
    assert sum(s.sum for s in sent) == faulty


def test_the_urgent_metrics_are_the_critical_hardware_rules_that_fire_on_one_reading():
    """URGENT_METRICS (collectors/common/fleet.py, the transport's list) is written out by hand: kept equal to the
    metrics of the default critical rules with sustain 1 that fire on a value above their threshold (not `below`,
    whose rules hold over 2 s) (review: gpu.row_remap_failure was missing)."""
    from collectors.detectors.hardware import DEFAULT_RULES

    want = {r.metric for r in DEFAULT_RULES if r.severity == "critical" and r.sustain == 1 and r.mode != "below"}
    assert fleet.URGENT_METRICS == want
    assert all(r.threshold < 1 for r in DEFAULT_RULES if r.metric in want), "a value of 1 is a fault for each"


def test_a_link_down_is_stored_and_named_without_waiting_for_a_late_host_or_the_cut_off(tmp_path):
    """The native tables of real racks and root, through real servers: one host's link down (node-0, rack0) while
    its rack neighbour (node-1) is late, at a fleet grace of 30 s (cut-offs 30.7 s at the racks and 60.7 s at the
    root after the second began): the link down's second is stored, and the port named, at once; the same second of
    a metric without a fault (`ib.port_active`, whose drop is judged over 2 s) is still held for the late host; the
    late host's readings are merged in exactly after. Failed before: the link down waited for the cut-off."""
    with _link_down_with_a_late_host(tmp_path, 0, deadline_floor_s=90.0, fleet_grace_s=30.0) as (root, hosts, second):
        row, early = wait_for(lambda: _stored_second(root, "ib.link_downed_delta", second), 20.0,
                              what="the link down's second stored")
        assert 0 in {fleet.host_index_of(src) for src in early.sources}
        assert 1 not in {fleet.host_index_of(src) for src in early.sources}, "it waited for the late host"
        assert early.max == 1.0 and fleet.host_index_of(early.argmax) == 0
        event = wait_for(lambda: _link_down_event(root), 20.0, what="the link down named")
        assert event["detail"]["host"] == "node-0" and event["detail"]["device"] == "mlx5_2/1"
        assert _stored_second(root, "ib.port_active", second) is None, \
            "a second without a fault did not wait for its late host"
        hosts[1].flush()

        def merged() -> tuple[dict, Summary] | None:
            found = _stored_second(root, "ib.link_downed_delta", second)
            return found if found and len(found[1].sources) == 12 else None
        row, whole = wait_for(merged, WAIT, what="the late host's readings merged into the stored second")
        assert row["late"] >= 1
        assert whole.count == 12 and whole.sum == 1.0 and fleet.host_index_of(whole.argmax) == 0
        wait_for(lambda: _stored_second(root, "ib.port_active", second), WAIT,
                 what="the second without a fault, once its host came")
