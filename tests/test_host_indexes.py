"""Host indexes handed out by the tree (issue 28, docs/fleet.md "Host indexes"): `telemetry agent --host-index auto`
asks its rack, which asks the root; the root gives each host its own index, the same one again after an agent's
or the root's restart, records an explicit --host-index and refuses one another host holds, and refuses a second
machine under a host name another machine holds.

Real processes: a root and a rack (`telemetry collector`), agents (`telemetry agent`, their NIC probe on generated
sysfs trees: collectors/sim/sysfs.py, a TEST DOUBLE of /sys), on loopback.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.common import fleet
from collectors.root.host_indexes import HostIndexes
from collectors.root.store import Store
from collectors.sim.procs import Proc, free_port, python_module
from collectors.sim.sysfs import write_host
from helpers_tree import api_get, wait_for
from telemetry.v1 import forward_pb2

WAIT = 40.0


def _root(work: Path, listen: str, api: str) -> Proc:
    return Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", listen,
                                      "--db", str(work / "root.db"), "--api", api), work).start()


def _agent(work: Path, rack: str, host: str, machine: str, *extra: str) -> Proc:
    sysfs = work / f"sys-{host}"
    if not sysfs.exists():
        write_host(sysfs, nics=1, hcas=2)
    name = f"agent-{host}-{machine}"
    return Proc(name, python_module("collectors.cli", "agent", "--parent", rack, "--socket",
                                    str(work / f"{name}.sock"), "--id", name, "--no-gpu-probe",
                                    "--sysfs-root", str(sysfs), "--probe-interval", "0.25", "--host-id", host,
                                    "--machine-id", machine, "-v", *extra), work).start()


def _hosts(api: str) -> dict:
    status, body = api_get(api, "/api/v1/hosts")
    assert status == 200, body
    return body


def _handed_out(api: str, want: int) -> dict[str, int]:
    def found():
        table = {held["host"]: held["index"] for held in _hosts(api)["host_indexes"]}
        return table if len(table) >= want else None
    return wait_for(found, WAIT, interval=0.2, what=f"{want} host indexes handed out")


def _log(work: Path, proc: Proc) -> str:
    return (work / f"{proc.name}.log").read_text(errors="replace")


def test_the_tree_hands_out_host_indexes_remembers_them_and_refuses_collisions(tmp_path):
    work = tmp_path
    listen, api = f"127.0.0.1:{free_port()}", f"127.0.0.1:{free_port()}"
    procs: list[Proc] = []
    try:
        root = _root(work, listen, api)
        procs.append(root)
        rack = Proc("rack", python_module("collectors.cli", "collector", "--id", "rack", "--listen", "127.0.0.1:0",
                                          "--parent", listen), work).start()
        procs.append(rack)
        address = rack.ready["address"]
        agents = {host: _agent(work, address, host, f"machine-{host}", "--host-index", "auto")
                  for host in ("node-a", "node-b", "node-c")}
        procs.extend(agents.values())
        first = _handed_out(api, 3)
        assert sorted(first.values()) == [0, 1, 2], first  # each its own, none hashed, none shared

        # Their readings reach the fleet's windows under the index each was given, named by host and device.
        def named():
            names = {name for host in _hosts(api)["hosts"] if host.get("devices")
                     for name in [host["host"]] if host["index"] == first.get(name)}
            return names if names >= set(first) else None
        wait_for(named, WAIT, interval=0.2, what="every host's devices under its index")

        # The root restarts (same file, same address): it remembers. An agent restarts: the same index again.
        # A new host that starts while the root is down asks again until it answers, and gets a new index, never
        # one handed out before.
        root.stop()
        agents["node-b"].stop()
        procs.remove(root)
        agents["node-d"] = _agent(work, address, "node-d", "machine-node-d", "--host-index", "auto")
        procs.append(agents["node-d"])
        wait_for(lambda: "no parent answered" in _log(work, agents["node-d"]), WAIT, interval=0.2,
                 what="node-d told the root is not there yet")
        root = _root(work, listen, api)
        procs.append(root)
        agents["node-b"] = _agent(work, address, "node-b", "machine-node-b", "--host-index", "auto")
        procs.append(agents["node-b"])
        second = _handed_out(api, 4)
        assert {host: second[host] for host in first} == first and second["node-d"] == 3, second
        wait_for(lambda: "as before" in _log(work, agents["node-b"]), WAIT, interval=0.2,
                 what="node-b told its index is the one it had")

        # An explicit --host-index that another host holds is refused at registration (and its windows by the
        # ledger, docs/fleet.md "Bad input"); a free one is recorded, and never handed to anyone else.
        clash = _agent(work, address, "node-x", "machine-node-x", "--host-index", str(first["node-a"]))
        procs.append(clash)
        wait_for(lambda: f"host index {first['node-a']} is held by host 'node-a'" in _log(work, clash), WAIT,
                 interval=0.2, what="the explicit index held by another host refused")
        explicit = _agent(work, address, "node-e", "machine-node-e", "--host-index", "7")
        procs.append(explicit)
        third = _handed_out(api, 5)
        assert third["node-e"] == 7 and "node-x" not in third, third
        late = _agent(work, address, "node-f", "machine-node-f", "--host-index", "auto")
        procs.append(late)
        assert _handed_out(api, 6)["node-f"] == 8  # past every index recorded, the explicit one included

        # A second machine under a name another machine holds is refused, never given node-c's index.
        clone = _agent(work, address, "node-c", "another-machine", "--host-index", "auto")
        procs.append(clone)
        wait_for(lambda: "is held by another machine" in _log(work, clone), WAIT, interval=0.2,
                 what="the clone refused")
        assert "fleet host index" not in _log(work, clone)
        assert _handed_out(api, 6)["node-c"] == first["node-c"]
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_host_indexes_table_rules(tmp_path):
    """The root's table on its own: bad input refused, indexes claimed in the ledger kept by their hosts."""
    store = Store(tmp_path / "root.db")
    claimed = {5: "node-old"}
    table = HostIndexes(store, claimed=lambda: claimed)

    def register(host: str, machine: str = "", explicit: int | None = None) -> forward_pb2.HostAssignment:
        request = forward_pb2.HostRegistration(host=host, machine_id=machine)
        if explicit is not None:
            request.explicit_index = explicit
        return table.register(request)

    assert register("node-old").index == 5  # it ran with --host-index 5 before registering: it keeps it
    assert register("node-new").index == 6  # past the claimed ones
    for bad in ("", "a:b", "x" * 300, "tab\there"):
        assert register(bad).refused
    assert register("node-y", explicit=fleet.MAX_HOST_INDEX + 1).refused
    assert register("node-new", machine="m1").index == 6  # the machine id learned, the index kept
    assert "another machine" in register("node-new", machine="m2").refused
    assert register("node-new", machine="m2", explicit=6).index == 6  # the operator's remedy for a reinstall
    assert register("node-new", machine="m2").index == 6
    store.close()
    again = HostIndexes(Store(tmp_path / "root.db"), claimed=dict)
    assert {held["host"]: held["index"] for held in again.table()} == {"node-old": 5, "node-new": 6}


@pytest.mark.parametrize("value,ok", [("auto", True), ("0", True), ("16777215", True), ("16777216", False),
                                      ("-1", False), ("x", False)])
def test_host_index_option(value, ok):
    import click

    from collectors.cli import _HostIndex
    if ok:
        assert _HostIndex().convert(value, None, None) == (value if value == "auto" else int(value))
    else:
        with pytest.raises(click.BadParameter):
            _HostIndex().convert(value, None, None)
