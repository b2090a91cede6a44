"""The run ledger's claims on a fleet host index given back (collectors/delivery/runs.py release_host_index): the
new host is accepted where the old one's claims stood, but never over a live or contested source."""

from __future__ import annotations

from pyroaring import BitMap

from collectors.common.fleet import host_claim, host_index_of, source
from collectors.delivery.runs import Claim, RunLedger
from telemetry.names import FLEET_JOB


def _claims(host: str, index: int, slots: range) -> dict[int, Claim]:
    return {source(index, slot): Claim(host_claim(host), f"{host}:dev{slot}") for slot in slots}


def test_a_released_index_is_claimed_by_its_new_host_and_nothing_live_or_contested_is_released() -> None:
    ledger = RunLedger()
    ledger.claim("rack0", FLEET_JOB, _claims("old", 3, range(64, 66)))
    ledger.claim("rack0", FLEET_JOB, _claims("other", 4, range(64, 66)))
    # before: a new host naming index 3 is a collision, its windows refused
    ledger.claim("rack1", FLEET_JOB, _claims("new", 3, range(64, 65)))
    assert ledger.refused("rack1", FLEET_JOB) and ledger.fleet_collisions == 1
    assert ledger.release_host_index(3, BitMap()) == 1  # the contested source (slot 64) stays claimed and refused
    ledger.claim("rack1", FLEET_JOB, _claims("new", 3, range(65, 66)))
    assert ledger.claims(FLEET_JOB)[source(3, 65)].host == "new:dev65"
    assert set(ledger.refused("rack1", FLEET_JOB)) == {source(3, 64)}
    # a live source keeps its claim; the host the index was handed to keeps its own
    assert ledger.release_host_index(4, BitMap([source(4, 64)])) == 1
    assert source(4, 64) in ledger.claims(FLEET_JOB) and source(4, 65) not in ledger.claims(FLEET_JOB)
    assert ledger.release_host_index(3, BitMap(), keep_host="new") == 0
    assert ledger.claims(FLEET_JOB)[source(3, 65)].host == "new:dev65"


def test_claims_no_child_reports_are_forgotten_after_the_timeout_but_contested_ones_stay() -> None:
    ledger = RunLedger()
    ledger.claim("rack0", FLEET_JOB, _claims("gone", 3, range(64, 66)))
    ledger.claim("rack0", FLEET_JOB, _claims("stays", 4, range(64, 65)))
    ledger.claim("rack1", FLEET_JOB, _claims("rival", 3, range(64, 65)))  # a collision on source(3, 64)
    reported = BitMap([source(4, 64)])
    assert ledger.forget_unreported(FLEET_JOB, reported, 100.0, 10.0) == 0  # first seen unreported now
    assert ledger.forget_unreported(FLEET_JOB, reported, 109.0, 10.0) == 0
    assert ledger.forget_unreported(FLEET_JOB, reported, 110.0, 10.0) == 1  # source(3, 65): 10 s unreported
    assert set(ledger.claims(FLEET_JOB)) == {source(3, 64), source(4, 64)}  # contested and reported stay
    ledger.claim("rack1", FLEET_JOB, _claims("new", 3, range(65, 66)))  # a new host there: accepted
    assert ledger.claims(FLEET_JOB)[source(3, 65)].host == "new:dev65"
    # reported again before the timeout: the clock starts over
    assert ledger.forget_unreported(FLEET_JOB, BitMap(), 200.0, 10.0) == 0
    assert ledger.forget_unreported(FLEET_JOB, BitMap([source(4, 64), source(3, 65)]), 205.0, 10.0) == 0
    assert ledger.forget_unreported(FLEET_JOB, BitMap(), 212.0, 10.0) == 0
    assert ledger.forget_unreported(FLEET_JOB, BitMap(), 222.0, 10.0) == 2


def test_claims_of_a_child_just_forgotten_go_at_once_unless_reported_or_contested() -> None:
    """The root sees a host unreported only once its rack forgot the host's agent (gone past the timeout): the
    rack forgets that agent's claims in the same sweep, so no index can be given back while a rack still holds them."""
    ledger = RunLedger()
    ledger.claim("agent-a", FLEET_JOB, _claims("a", 1, range(64, 66)))
    ledger.claim("agent-b", FLEET_JOB, _claims("b", 2, range(64, 65)))
    ledger.claim("agent-x", FLEET_JOB, _claims("x", 1, range(64, 65)))  # contests source(1, 64)
    reported = BitMap([source(2, 64)])
    assert ledger.forget_unreported(FLEET_JOB, reported, 100.0, 600.0, frozenset({"agent-a", "agent-b"})) == 1
    assert set(ledger.claims(FLEET_JOB)) == {source(1, 64), source(2, 64)}  # contested; reported


def test_sources_a_child_stopped_covering_go_at_the_next_pass_unless_reported_or_contested() -> None:
    """A tier above racks: its child rack stays, but stops naming a host's sources once it forgot the host's agent.
    Those claims go at the next pass (the rack forgot them in the same sweep), not an idle timeout later."""
    ledger = RunLedger()
    ledger.claim("rack0", FLEET_JOB, _claims("a", 1, range(64, 66)))
    ledger.claim("rack0", FLEET_JOB, _claims("b", 2, range(64, 65)))
    ledger.claim("rack1", FLEET_JOB, _claims("x", 1, range(64, 65)))  # contests source(1, 64)
    assert not ledger.dropping(FLEET_JOB)
    ledger.dropped(FLEET_JOB, BitMap([source(1, 64), source(1, 65), source(2, 64)]))
    assert ledger.dropping(FLEET_JOB)
    reported = BitMap([source(2, 64)])  # node b failed over: another child reports it
    assert ledger.forget_unreported(FLEET_JOB, reported, 100.0, 600.0) == 1  # source(1, 65)
    assert set(ledger.claims(FLEET_JOB)) == {source(1, 64), source(2, 64)}  # contested; reported
    assert not ledger.dropping(FLEET_JOB)
    assert ledger.forget_unreported(FLEET_JOB, BitMap(), 101.0, 600.0) == 0  # the rest waits for the timeout


def test_the_root_notes_no_dropped_sources() -> None:
    """The root's ledger (it recalls its claims from the store) never forgets an unreported claim: nothing noted."""
    ledger = RunLedger(recall=lambda job: {})
    ledger.claim("cluster", FLEET_JOB, _claims("a", 1, range(64, 65)))
    ledger.dropped(FLEET_JOB, BitMap([source(1, 64)]))
    assert not ledger.dropping(FLEET_JOB)


def test_a_tier_above_racks_forgets_a_hosts_claims_when_its_rack_forgets_the_host(tmp_path) -> None:
    """Real tiers on loopback: node-a and node-b report through rack0 and rack1 into one cluster collector (its
    idle timeout 600 s) and the root. node-a's agent stops; rack0 forgets it after its own 1.5 s timeout and stops
    naming its sources: the cluster forgets node-a's claims then (they failed to go for 600 s before), node-b's
    stay."""
    from collectors.sim.sysfs import write_host
    from helpers_tree import make_agent, make_collector, make_root, stop_all, wait_for

    trees = {}
    for name in ("node-a", "node-b"):
        trees[name] = tmp_path / f"sys-{name}"
        write_host(trees[name], nics=1, hcas=2)
    root = make_root(tmp_path / "root.db")
    cluster = make_collector([root.address], "cluster", job_idle_timeout_s=600.0)
    racks = [make_collector([cluster.address], f"rack{r}", job_idle_timeout_s=1.5) for r in range(2)]
    agents = [make_agent([racks[i].address], tmp_path / f"{name}.sock", f"agent-{name}", nic_probe=True,
                         sysfs_root=trees[name], probe_interval_s=0.25, host_id=name, host_index=i)
              for i, name in enumerate(("node-a", "node-b"))]
    try:
        def claimed(index: int) -> set[int]:
            with cluster.node.lock:
                return {src for src in cluster.node.runs.claims(FLEET_JOB) if host_index_of(src) == index}
        wait_for(lambda: claimed(0) and claimed(1), 30.0, what="both hosts' claims at the cluster")
        held_b = claimed(1)
        agents[0].stop(0.2)
        wait_for(lambda: not claimed(0), 20.0, what="node-a's claims forgotten at the cluster (600 s timeout)")
        assert claimed(1) == held_b
    finally:
        stop_all(*agents, *racks, cluster, root)
