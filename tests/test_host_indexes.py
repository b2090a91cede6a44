"""Host indexes handed out by the tree (issue 28, docs/fleet.md "Host indexes"): `telemetry agent --host-index auto`
asks its rack, which asks the root; the root gives each host its own index, the same one again after an agent's
or the root's restart, records an explicit --host-index and refuses one another host holds, and refuses a second
machine under a host name another machine holds.

Real processes: a root and a rack (`telemetry collector`), agents (`telemetry agent`, their NIC probe on generated
sysfs trees: collectors/sim/sysfs.py, a TEST DOUBLE of /sys), on loopback.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from collectors.common import fleet
from collectors.root.host_indexes import TAKEOVER_AFTER_NS, HostIndexes
from collectors.root.store import Store
from collectors.sim.procs import Proc, python_module
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
                                    "--machine-id", machine, "--id-file", str(work / f"id-{host}-{machine}"), "-v",
                                    *extra), work).start()


def _hosts(api: str) -> dict:
    status, body = api_get(api, "/api/v1/hosts")
    assert status == 200, body
    return body


def _handed_out(api: str, want: int) -> dict[str, int]:
    def found():
        table = {held["host"]: held["index"] for held in _hosts(api)["host_indexes"]}
        return table if len(table) >= want else None
    return wait_for(found, WAIT, interval=0.2, what=f"{want} host indexes handed out")


def _table_with(api: str, host: str) -> dict[str, int]:
    def found():
        table = {held["host"]: held["index"] for held in _hosts(api)["host_indexes"]}
        return table if host in table else None
    return wait_for(found, WAIT, interval=0.2, what=f"{host} handed an index")


def _log(work: Path, proc: Proc) -> str:
    return (work / f"{proc.name}.log").read_text(errors="replace")


def _reusing_root(work: Path, listen: str, api: str) -> Proc:
    """A root that gives an index back 1 s after its host is reported by no tier (children forgotten after 2 s)."""
    return Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", listen, "--db",
                                      str(work / "root.db"), "--api", api, "--job-idle-timeout", "2",
                                      "--host-index-reuse-after", "1s", "-v"), work).start()


def _devices(api: str, host: str, index: int) -> list[dict] | None:
    """`host`'s entry in /api/v1/hosts when it lists devices under `index`, else None."""
    found = [h for h in _hosts(api)["hosts"] if h["host"] == host and h.get("devices")]
    return found if found and found[0]["index"] == index else None


def _node_a_gone_for_good(work: Path, api: str, parent: str, procs: list[Proc]) -> None:
    """node-c (index 0) stays under `parent` throughout, so its tiers keep the fleet's claims; node-a gets index 1
    there, reports, then leaves for good: returns once no tier reports node-a."""
    procs.append(_agent(work, parent, "node-c", "machine-c", "--host-index", "auto"))
    assert _table_with(api, "node-c") == {"node-c": 0}
    old = _agent(work, parent, "node-a", "machine-a", "--host-index", "auto")
    procs.append(old)
    assert _table_with(api, "node-a") == {"node-c": 0, "node-a": 1}
    wait_for(lambda: _devices(api, "node-a", 1), WAIT, interval=0.2, what="node-a's devices under index 1")
    old.stop()
    procs.remove(old)
    wait_for(lambda: not _devices(api, "node-a", 1), WAIT, interval=0.2, what="node-a reported by no tier")


def test_the_tree_hands_out_host_indexes_remembers_them_and_refuses_collisions(tmp_path):
    work = tmp_path
    listen, api = "127.0.0.1:0", "127.0.0.1:0"
    procs: list[Proc] = []
    try:
        root = _root(work, listen, api)
        listen, api = root.ready["address"], root.ready["api"]  # the ports bound, kept for a restart
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
        root = _root(work, listen, api)  # the same ports again
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


def test_two_machines_of_one_name_whose_machine_ids_cannot_tell_them_apart_are_told_apart_by_their_agent_ids(
        tmp_path):
    """The root's table: machine ids empty (containers) or equal (cloned with an image) cannot tell two machines of
    one host name apart; their agents' installation ids (`instance`) do. Before them, both got the same index and
    were merged as one host (review of issue 28: /work/wt/rev28/exp/machineid.py)."""
    live = {0, 1, 2}  # the host indexes some tier reports now
    now = [1_000 * 10**9]
    table = HostIndexes(Store(tmp_path / "root.db"), claimed=dict, live=lambda: live, clock=lambda: now[0])

    def register(host: str, machine: str, instance: str, explicit: int | None = None) -> forward_pb2.HostAssignment:
        request = forward_pb2.HostRegistration(host=host, machine_id=machine, instance=instance)
        if explicit is not None:
            request.explicit_index = explicit
        return table.register(request)

    assert register("worker", "", "agent-a").index == 0
    assert "another agent installation" in register("worker", "", "agent-b").refused  # no machine ids: refused
    assert register("worker", "", "agent-a").index == 0  # the same installation again (an agent restart)
    assert register("node-7", "abc", "agent-c").index == 1
    refused = register("node-7", "abc", "agent-d").refused  # a cloned machine id: refused
    assert "another agent installation" in refused and "cloned" in refused
    assert register("node-7", "abc", "agent-c").index == 1
    assert "another machine" in register("node-7", "def", "agent-c").refused  # machine ids still decide first
    assert register("old", "m", "").index == 2  # an agent without an id (or an older one): as before
    assert register("old", "m", "agent-e").index == 2  # its id learned on its next registration
    assert "another agent installation" in register("old", "m", "agent-f").refused
    assert register("old", "m", "agent-f", explicit=2).index == 2  # the remedy for a lost --id-file
    assert register("old", "m", "agent-f").index == 2 and register("old", "m", "agent-e").refused
    assert register("bad", "", "x\ty").refused and register("bad", "", "x" * 200).refused
    again = HostIndexes(Store(tmp_path / "root.db"), claimed=dict, live=lambda: live,
                        clock=lambda: now[0])  # the ids are kept in the file
    assert again.register(forward_pb2.HostRegistration(host="worker", instance="agent-b")).refused
    assert again.register(forward_pb2.HostRegistration(host="worker", instance="agent-a")).index == 0
    live.discard(0)  # no tier reports worker's agent-a any more (its container gone with its id file)
    assert again.register(forward_pb2.HostRegistration(host="worker", instance="agent-b")).refused  # seen lately
    now[0] += TAKEOVER_AFTER_NS
    assert again.register(forward_pb2.HostRegistration(host="worker", instance="agent-b")).index == 0  # taken over
    live.add(0)
    assert again.register(forward_pb2.HostRegistration(host="worker", instance="agent-a")).refused  # now b's


def test_an_agent_id_is_written_once_and_read_back(tmp_path, caplog):
    caplog.set_level("INFO", logger="collectors.common.host_index")
    from collectors.common.host_index import read_instance_id
    path = tmp_path / "state" / "agent-id"
    first = read_instance_id(path)
    assert len(first) == 32 and path.read_text() == first + "\n"
    assert read_instance_id(path) == first  # a restart: the same id
    assert read_instance_id(tmp_path / "other") != first  # another installation
    assert [p.name for p in path.parent.iterdir()] == ["agent-id"]  # no temporary left behind
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    caplog.clear()
    assert read_instance_id(blocked / "agent-id") == ""  # cannot be written: none, said
    assert "the agent id file" in caplog.text and "cannot be told apart" in caplog.text
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    caplog.clear()
    assert read_instance_id(blocked / "agent-id", needed=False) == ""  # the machine id tells: only a note
    assert [r.levelname for r in caplog.records] == ["INFO"]


@pytest.mark.parametrize("clone", ["no machine id", "cloned machine id"])
def test_two_agents_of_one_host_name_on_two_machines_are_never_merged_and_a_restart_stays_one_host(tmp_path, clone):
    """Two agents (two machines: each its own sysfs tree and --id-file), one --host-id, machine ids empty or equal,
    --host-index auto, through a real rack and root: the second is refused, its readings never merged into the
    first's (before: both were given index 0, one host shown, the rack counting their parts as duplicates: review
    of issue 28, /work/wt/rev28/exp/samename.py). The first agent restarted (the same --id-file) is the same host."""
    from collectors.sim.sysfs import set_ib
    from helpers_tree import counters, make_agent, make_collector, make_root, stop_all
    machine = "" if clone == "no machine id" else "cloned-0123456789"
    for name in ("a", "b"):
        write_host(tmp_path / f"sys-{name}", nics=2, hcas=2)
    set_ib(tmp_path / "sys-b", "mlx5_0", 1, symbol_error=777)  # machine b's port: never shown as worker's

    def agent(name: str):
        return make_agent([rack.address], tmp_path / f"{name}.sock", f"agent-{name}", nic_probe=True,
                          sysfs_root=tmp_path / f"sys-{name}", probe_interval_s=0.25, host_id="worker",
                          host_index_auto=True, machine_id=machine, id_file=tmp_path / f"id-{name}")
    root = make_root(tmp_path / "root.db")
    rack = make_collector([root.address], "rack0")
    first = agent("a")
    servers = [first]
    try:
        wait_for(lambda: first.registration.index is not None, WAIT, what="machine a registered")
        second = agent("b")
        servers.append(second)
        wait_for(lambda: "another agent installation" in second.registration.refused, WAIT,
                 what="machine b refused")
        assert second.registration.index is None and first.registration.index == 0

        def worker_seen() -> dict | None:
            status, body = api_get(root.api_address, "/api/v1/hosts?metric=ib.symbol_error_total")
            top = body.get("worst", {}).get("ib.symbol_error_total", {}).get("top") if status == 200 else None
            return body if top and len(body["hosts"]) == 1 and len(body["hosts"][0]["devices"]) == 4 else None
        body = wait_for(worker_seen, WAIT, what="worker's readings at the root")
        assert [held["host"] for held in body["host_indexes"]] == ["worker"]
        assert body["worst"]["ib.symbol_error_total"]["top"][0]["value"] != 777
        assert counters(rack)["duplicates"] == 0

        first.stop(0.2)  # machine a's agent restarts: the same installation, the same host
        first = agent("a")
        servers.append(first)
        wait_for(lambda: first.registration.index is not None, WAIT, what="machine a registered again")
        assert first.registration.index == 0 and not first.registration.refused
        assert second.registration.index is None
        assert counters(rack)["duplicates"] == 0
    finally:
        stop_all(*servers, rack, root)


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


DAY_NS = 86_400 * 10**9


def test_a_host_index_goes_back_only_once_its_host_is_gone_past_the_horizon_and_never_while_live(tmp_path):
    """Indexes given back (issue 28): thousands of short-lived hosts must not use up the index space, nor spread the
    live hosts' indexes (the fleet windows' sources bitmaps stay a few runs while they are dense). An index goes to a
    new host only when its old host was handed it by the tree, is reported by no tier now and was not seen for the
    horizon; the lowest such index first; the ledger's claims on it released first; never an explicit index; a root
    restart keeps what it saw; reuse off keeps every index."""
    store = Store(tmp_path / "root.db")
    now = [100 * DAY_NS]
    live: set[int] = set()
    released: list[int] = []
    table = HostIndexes(store, claimed=dict, live=lambda: set(live), release=released.append,
                        reuse_after_s=30 * 86_400, clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)

    def register(host: str, explicit: int | None = None) -> int:
        request = forward_pb2.HostRegistration(host=host, machine_id=f"m-{host}")
        if explicit is not None:
            request.explicit_index = explicit
        answer = table.register(request)
        assert not answer.refused, answer.refused
        return answer.index

    assert [register(f"short-{i}") for i in range(4)] == [0, 1, 2, 3]
    assert register("pinned", explicit=4) == 4
    now[0] += 29 * DAY_NS
    assert register("early") == 5  # nobody is gone for 30 days yet: a new index
    live.update({1})  # short-1 still reports (say its agent never restarted): live hosts keep theirs
    table.note_seen({3})  # short-3 was seen (a sweep) a day later than the others
    now[0] += 2 * DAY_NS
    assert register("late-a") == 0 and released == [0]  # the lowest index gone past the horizon
    assert register("late-b") == 2 and released == [0, 2]  # 1 is live, 3 seen 2 days ago
    assert register("late-c") == 6  # 3: seen 2 days ago; 4: explicit, never given back; 5: recent
    assert register("short-1") == 1  # a known host gets its own index back, as before
    assert register("short-0") == 7  # short-0 came back after its index went: an index of its own, not 0
    table.note_seen({0, 2, 6, 7})
    store.close()

    # The file keeps what was seen and what went: a root restart gives back nothing more, nothing sooner.
    store = Store(tmp_path / "root.db")
    again = HostIndexes(store, claimed=dict, live=set, release=released.append, reuse_after_s=30 * 86_400,
                        clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    assert {held["host"]: held["index"] for held in again.table()} == {
        "late-a": 0, "short-1": 1, "late-b": 2, "short-3": 3, "pinned": 4, "early": 5, "late-c": 6, "short-0": 7}
    now[0] += 29 * DAY_NS  # short-3: 31 days unseen, early: 31; the others seen (or handed) 29 days ago
    answer = again.register(forward_pb2.HostRegistration(host="next", machine_id="m-next"))
    assert answer.index == 1  # short-1: registered 31 days ago, reported by none now
    assert released == [0, 2, 1]
    store.close()

    # Off: every index kept, however long its host is gone.
    off = HostIndexes(Store(tmp_path / "root.db"), claimed=dict, live=set, release=released.append,
                      reuse_after_s=None, clock=lambda: now[0] + 1000 * DAY_NS)
    assert off.register(forward_pb2.HostRegistration(host="another", machine_id="m")).index == 8
    assert released == [0, 2, 1]


def test_a_host_index_claimed_in_the_ledger_by_another_host_is_never_given_back(tmp_path):
    """The ledger saw another host than the table's claim the index (an agent started with --host-index that never
    registered): that index stays out of reuse."""
    store = Store(tmp_path / "root.db")
    now = [10 * DAY_NS]
    claimed = {0: "stray"}
    live: set[int] = set()
    table = HostIndexes(store, claimed=lambda: claimed, live=lambda: live, reuse_after_s=86_400,
                        clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    table._record(1, "gone", "m", False)  # the table's own: handed out long ago
    claimed[1] = "gone"
    now[0] += 5 * DAY_NS
    assert table.register(forward_pb2.HostRegistration(host="new", machine_id="n")).index == 1  # its own host's claim
    claimed[1] = "new"
    live.add(1)  # "new" reports
    table._record(2, "old-2", "m", False)
    claimed[2] = "intruder"
    now[0] += 5 * DAY_NS
    assert table.register(forward_pb2.HostRegistration(host="newer", machine_id="o")).index == 3


def test_an_old_host_indexes_table_gains_its_seen_column(tmp_path):
    """A root file made before indexes went back (no seen_ns): read as seen when handed out, and written again."""
    import sqlite3
    with sqlite3.connect(tmp_path / "root.db") as db:
        db.execute("CREATE TABLE host_indexes (idx INTEGER PRIMARY KEY, host TEXT NOT NULL, machine_id TEXT NOT "
                   "NULL, explicit INTEGER NOT NULL, assigned_ns INTEGER NOT NULL)")
        db.execute("INSERT INTO host_indexes VALUES (0, 'old', 'm', 0, ?)", (DAY_NS,))
    store = Store(tmp_path / "root.db")
    now = [3 * DAY_NS]
    table = HostIndexes(store, claimed=dict, reuse_after_s=86_400, clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    now[0] += 2 * 3600 * 10**9  # past the start's quiet hour
    assert table.register(forward_pb2.HostRegistration(host="new", machine_id="n")).index == 0
    table.note_seen({0})
    assert table.register(forward_pb2.HostRegistration(host="newer", machine_id="o")).index == 1


def test_an_index_given_back_reaches_the_root_under_its_new_host_through_a_rack_that_knew_the_old_one(tmp_path):
    """End to end (a root given a 1 s horizon, a rack, agents): node-c keeps reporting throughout (so the rack and
    the root keep the fleet's claims); node-a gets index 1 and reports, then leaves for good; once no tier reports it,
    node-b is handed index 1 and its devices reach the root under it: the rack's and the root's ledgers forgot
    node-a's claims on index 1's sources (without that, the rack refuses node-b's windows as a second claimant of
    node-a's sources). node-a coming back is a new host: an index of its own."""
    work = tmp_path
    listen, api = "127.0.0.1:0", "127.0.0.1:0"
    procs: list[Proc] = []
    try:
        root = _reusing_root(work, listen, api)
        listen, api = root.ready["address"], root.ready["api"]  # the ports bound, kept for a restart
        procs.append(root)
        rack = Proc("rack", python_module("collectors.cli", "collector", "--id", "rack", "--listen", "127.0.0.1:0",
                                          "--parent", listen, "--job-idle-timeout", "2"), work).start()
        procs.append(rack)
        address = rack.ready["address"]
        devices = functools.partial(_devices, api)
        _node_a_gone_for_good(work, api, address, procs)
        assert devices("node-c", 0)
        new = _agent(work, address, "node-b", "machine-b", "--host-index", "auto")
        procs.append(new)
        assert _table_with(api, "node-b") == {"node-c": 0, "node-b": 1}
        wait_for(lambda: devices("node-b", 1), WAIT, interval=0.2, what="node-b's devices under index 1")
        assert "given back by host node-a" in _log(work, root)
        assert "already claimed" not in _log(work, rack) and "claimed twice" not in _log(work, root)
        back = _agent(work, address, "node-a", "machine-a", "--host-index", "auto")
        procs.append(back)
        assert _table_with(api, "node-a") == {"node-c": 0, "node-b": 1, "node-a": 2}
        wait_for(lambda: devices("node-a", 2), WAIT, interval=0.2, what="node-a back, under an index of its own")
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_host_index_reuse_after_option_refuses_what_is_not_a_duration(tmp_path):
    import subprocess
    import sys
    done = subprocess.run([sys.executable, "-m", "collectors.cli", "collector", "--listen", "127.0.0.1:0", "--db",
                           str(tmp_path / "root.db"), "--host-index-reuse-after", "soon"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--host-index-reuse-after" in done.stderr and "not a duration" in done.stderr


def test_the_default_reuse_horizon_is_as_long_as_the_store_keeps_fleet_windows():
    from collectors.root.retention import RetentionConfig
    config = RetentionConfig()
    assert config.fleet_kept_s() == 400 * 86_400  # the 1 h rollups outlive the raw seconds and minute rollups
    config.set("hours=30d")
    assert config.fleet_kept_s() == 30 * 86_400
    config.set("minutes=off")  # a kind kept forever: an index never goes back
    assert config.fleet_kept_s() == 0


def test_a_root_back_after_a_long_stop_gives_nothing_back_before_its_hosts_could_reconnect(tmp_path):
    """A root down for longer than the horizon sees no host live when it starts (no child has reconnected yet): it
    gives nothing back for its first hour, by when every live host has reported and been seen again."""
    store = Store(tmp_path / "root.db")
    now = [DAY_NS]
    table = HostIndexes(store, claimed=dict, reuse_after_s=86_400, clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    assert table.register(forward_pb2.HostRegistration(host="alive", machine_id="m")).index == 0
    store.close()
    now[0] += 10 * DAY_NS  # the root was down for 10 days; "alive" kept running and reconnects after the start
    live: set[int] = set()
    store = Store(tmp_path / "root.db")
    table = HostIndexes(store, claimed=dict, live=lambda: set(live), reuse_after_s=86_400,
                        clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    now[0] += 30 * 10**9  # 30 s after the start: "alive" has not reconnected yet
    assert table.register(forward_pb2.HostRegistration(host="new-1", machine_id="n1")).index == 1
    live.add(0)  # it reconnects and is seen (the root's minute sweep)
    table.note_seen()
    now[0] += 3600 * 10**9
    assert table.register(forward_pb2.HostRegistration(host="new-2", machine_id="n2")).index == 2
    live.clear()  # an hour later it is gone, but was seen an hour ago: within the day's horizon
    assert table.register(forward_pb2.HostRegistration(host="new-3", machine_id="n3")).index == 3


def test_a_returning_old_host_never_takes_its_given_back_index_over_the_new_hosts_row(tmp_path):
    """A collision on the old host's index still standing at the root (another host named it through another rack)
    kept the old host's claim in the root's memory after the index was given back; the returning old host then
    looked like "it ran with --host-index before it registered" and took the index over the new host's row."""
    from collectors.common.fleet import host_claim, source
    from collectors.delivery.runs import Claim
    from collectors.root.server import RootConfig, RootServer
    from telemetry.names import FLEET_JOB

    def claims(host: str, index: int, slots: range) -> dict[int, Claim]:
        return {source(index, slot): Claim(host_claim(host), f"{host}:dev{slot}") for slot in slots}

    server = RootServer(RootConfig(db=tmp_path / "root.db", api=None, host_index_reuse_after_s=1.0))
    try:
        table = server.host_indexes
        now = [table.clock()]
        table.clock = lambda: now[0]
        table._quiet_until = 0  # past the first hour up

        def register(host: str) -> int:
            answer = table.register(forward_pb2.HostRegistration(host=host, machine_id="m-" + host))
            assert not answer.refused, answer.refused
            return answer.index

        assert register("A") == 0
        with server.node.lock:
            server.node.runs.claim("rack0", FLEET_JOB, claims("A", 0, range(64, 66)))
            server.node.runs.claim("rack1", FLEET_JOB, claims("C", 0, range(64, 65)))  # a collision, standing
        now[0] += 10 * 10**9  # A gone (no live source), past the 1 s horizon
        assert register("B") == 0
        assert register("A") != 0  # A is back: an index of its own, never B's
        assert {row["index"]: row["host"] for row in table.table()}[0] == "B"
        with server.node.lock:  # the root's memory matches its runs table: nothing of A's is left on index 0
            left = {src: claim.host for src, claim in server.node.runs.claims(FLEET_JOB).items()
                    if src & fleet.MAX_HOST_INDEX == 0}
        assert not any(host.startswith("A:") for host in left.values()), left
    finally:
        server.store.close()


def test_a_clock_stepped_back_then_forward_never_gives_away_an_index_seen_minutes_ago(tmp_path):
    """A root started with its clock at 1970 (a bad RTC; NTP steps it later) noted its live hosts as seen at that
    wrong time, over the file's recent sight: once the clock was right, an index not live that moment looked unseen
    for decades and went to the next new host. A sight only ever moves forward."""
    day, t = 86_400 * 10**9, 1_795_000_000 * 10**9
    store = Store(tmp_path / "root.db")
    now = [t]
    table = HostIndexes(store, claimed=dict, reuse_after_s=30 * 86_400,
                        clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    assert table.register(forward_pb2.HostRegistration(host="alpha", machine_id="a")).index == 0
    table.note_seen({0})
    store.close()
    now[0] = 10**9  # the root restarts with its clock at 1970
    live = {0}
    store = Store(tmp_path / "root.db")
    table = HostIndexes(store, claimed=dict, live=lambda: set(live), reuse_after_s=30 * 86_400,
                        clock=lambda: now[0], monotonic=lambda: 10 * day)  # past the first hour up
    table._quiet_until = 0.0
    table.note_seen()  # alpha reconnected: seen "now" (1970)
    assert table.register(forward_pb2.HostRegistration(host="alpha", machine_id="a")).index == 0  # seen again
    now[0] = t + 600 * 10**9  # NTP steps the clock: 10 minutes after alpha was last seen for real
    live.clear()  # alpha's agent restarts: reported by no tier for a moment
    assert table.register(forward_pb2.HostRegistration(host="bravo", machine_id="b")).index == 1


def test_the_first_hour_up_is_measured_on_a_clock_that_never_steps(tmp_path):
    """The quiet first hour (nothing given back before live hosts reconnected) is measured on the monotonic clock:
    a wall clock stepped forward by a day right after the start does not end it."""
    day = 86_400 * 10**9
    store = Store(tmp_path / "root.db")
    now = [day]
    table = HostIndexes(store, claimed=dict, reuse_after_s=60, clock=lambda: now[0], monotonic=lambda: now[0] / 1e9)
    assert table.register(forward_pb2.HostRegistration(host="alive", machine_id="m")).index == 0
    store.close()
    store = Store(tmp_path / "root.db")
    up = [100.0]
    table = HostIndexes(store, claimed=dict, reuse_after_s=60, clock=lambda: now[0], monotonic=lambda: up[0])
    now[0] += day  # the wall clock steps a day forward 1 s after the start; "alive" has not reconnected yet
    up[0] += 1.0
    assert table.register(forward_pb2.HostRegistration(host="new-1", machine_id="n1")).index == 1
    up[0] += 61.0  # the quiet period (the horizon, shorter than an hour) is over
    assert table.register(forward_pb2.HostRegistration(host="new-2", machine_id="n2")).index == 0


def test_a_new_host_given_a_reused_index_fails_over_to_a_rack_that_knew_the_old_host(tmp_path):
    """An index given back is released by the ledgers on the new host's registration path only; a rack off that path
    that knew the old host (node-a, under rack1) forgets the old host's claims once no child has reported them for
    the job idle timeout. node-b registers through rack2 and is given node-a's index; rack2 goes, node-b fails over
    to rack1 (--fallback-parent): its devices reach the root under the index through rack1, never refused there."""
    work = tmp_path
    listen, api = "127.0.0.1:0", "127.0.0.1:0"
    procs: list[Proc] = []
    try:
        root = _reusing_root(work, listen, api)
        listen, api = root.ready["address"], root.ready["api"]  # the ports bound, kept for a restart
        procs.append(root)
        racks = {}
        for name in ("rack1", "rack2"):
            racks[name] = Proc(name, python_module("collectors.cli", "collector", "--id", name, "--listen",
                                                   "127.0.0.1:0", "--parent", listen, "--job-idle-timeout", "2",
                                                   "-v"), work).start()
            procs.append(racks[name])
        r1, r2 = racks["rack1"].ready["address"], racks["rack2"].ready["address"]
        devices = functools.partial(_devices, api)
        _node_a_gone_for_good(work, api, r1, procs)  # rack1 keeps the fleet's claims (node-c stays under it)
        # rack1, off node-b's registration path, forgot node-a's claims when it forgot node-a's agent (gone past the
        # 2 s timeout): only from then on does the root see node-a unreported and give its index back
        assert "reported by no child" in _log(work, racks["rack1"])
        new = _agent(work, r2, "node-b", "machine-b", "--host-index", "auto", "--fallback-parent", r1)
        procs.append(new)
        assert _table_with(api, "node-b") == {"node-c": 0, "node-b": 1}
        wait_for(lambda: devices("node-b", 1), WAIT, interval=0.2, what="node-b's devices under index 1 via rack2")
        racks["rack2"].stop()
        procs.remove(racks["rack2"])
        # once the root forgot rack2 (gone past the 2 s timeout), node-b's devices are named through rack1 alone
        wait_for(lambda: "child rack2 has been gone" in _log(work, root), WAIT, interval=0.2, what="rack2 forgotten")
        wait_for(lambda: devices("node-b", 1), WAIT, interval=0.2, what="node-b's devices via rack1 (its fallback)")
        assert "already claimed" not in _log(work, racks["rack1"]) and "claimed twice" not in _log(work, root)
        assert "given back by host node-a" in _log(work, root)
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_indexes_given_back_are_counted_on_the_roots_metrics(tmp_path):
    """telemetry_fleet_host_indexes_reused_total (docs/metrics.md): how many indexes the root gave back and handed
    to a new host since it started."""
    from prometheus_client import generate_latest

    from collectors.root.server import RootConfig, RootServer

    server = RootServer(RootConfig(db=tmp_path / "root.db", api=None, host_index_reuse_after_s=1.0))
    try:
        table = server.host_indexes
        now = [table.clock()]
        table.clock = lambda: now[0]
        table._quiet_until = 0  # past the first hour up

        def reused() -> str:
            text = generate_latest(server.wiring.metrics.registry).decode()
            return [line for line in text.splitlines()
                    if line.startswith("telemetry_fleet_host_indexes_reused_total ")][0]

        assert reused() == "telemetry_fleet_host_indexes_reused_total 0.0"
        assert table.register(forward_pb2.HostRegistration(host="A", machine_id="a")).index == 0
        now[0] += 10 * 10**9  # A gone past the 1 s horizon
        assert table.register(forward_pb2.HostRegistration(host="B", machine_id="b")).index == 0
        assert reused() == "telemetry_fleet_host_indexes_reused_total 1.0"
    finally:
        server.store.close()
