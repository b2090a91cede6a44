"""The fleet's hardware (issue 28 item 1): every host's NICs and IB ports in one window per metric and second,
merged at every tier, the exact top-k naming the worst host and port; host ids from a registry, a host id
claimed twice refused; a link down named by host and port.

Real agents (their NIC probe on generated sysfs trees: collectors/sim/sysfs.py, a TEST DOUBLE of /sys), a real
rack collector and root on loopback.
"""

from __future__ import annotations

from contextlib import closing
from pathlib import Path

import pytest
from pyroaring import BitMap

from collectors.common import fleet
from collectors.sim.sysfs import set_ib, write_host
from helpers_tree import api_get, counters, make_agent, make_collector, make_root, stop_all, wait_for
from telemetry import Summary

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
    with root.node.lock:
        wins = [w for k, w in root.node.table.windows.items() if k.job == fleet.FLEET_JOB
                and k.metric == "ib.port_active" and len(w.sources) == HOSTS * 4]
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
    finally:
        set_ib(trees[2], "mlx5_3", 1, active=True)


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
