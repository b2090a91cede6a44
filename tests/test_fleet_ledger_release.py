"""The run ledger's claims on a fleet host index given back (collectors/delivery/runs.py release_host_index): the
new host is accepted where the old one's claims stood, but never over a live or contested source."""

from __future__ import annotations

from pyroaring import BitMap

from collectors.common.fleet import host_claim, source
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
