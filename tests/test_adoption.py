"""Issue 26 item 2: a new attempt becomes its job's latest only when it has the ranks to be one.

The hostile matrix first, on `Adoption` with the root's real store and rank states given by hand: a rogue single
rank with a huge or a plausible attempt, a rogue with a world of 1 next to the job's world (of 4, and of 1), a
rogue that claims the job's world but registers one rank, against real restarts (the same world, fewer ranks
after a resize, ranks of a lost host still reading alive) and a rogue adopted in the gap of a restart. Then the
issue's repro end to end (a real root and agent, ranks through the SDK): `telemetry.init(job="train", rank=0,
world_size=1, attempt=2**63-1)` (and attempt=5) beside a live job takes none of its default views (`/jobs`,
`/steps`, `/progress`, `/goodput`, a `restart` event, `POST /forensics`), while `?attempt=` still reaches the
rogue's steps; a real resized restart after the job ends is adopted with its `restart` event. Before: every view
was the rogue's.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from contextlib import closing
from pathlib import Path

import pytest
from pyroaring import BitMap

import telemetry
from collectors.common.attempts import scoped
from collectors.delivery.node import RankView
from collectors.root.adoption import Adoption, LatestAttempts
from collectors.root.goodput import view_names
from collectors.root.store import Store
from helpers_tree import api_get, make_agent, make_root, stop_all, wait_for

pytestmark = pytest.mark.timeout(120)

HUGE = 2**63 - 1


def view(world: int, alive: range | list[int] = (), dead: range | list[int] = (),
         closed: range | list[int] = ()) -> RankView:
    return RankView(alive=BitMap(alive), dead=BitMap(dead), world_size=world, closed=BitMap(closed))


class Ranks:
    """The root's rank states by scoped job, set by hand."""

    def __init__(self) -> None:
        self.views: dict[str, RankView] = {}

    def __call__(self, job: str) -> RankView:
        return self.views.get(job, RankView())


@pytest.fixture
def adoption(tmp_path: Path):
    store = Store(tmp_path / "root.db")
    ranks = Ranks()
    try:
        yield Adoption(store, ranks), ranks, store
    finally:
        store.close()


def latest(adoption: Adoption) -> str | None:
    return adoption.latest("train")


def live_job(adoption: Adoption, ranks: Ranks, attempt: int = 1, world: int = 4) -> str:
    name = scoped("train", attempt)
    ranks.views[name] = view(world, alive=range(world))
    assert adoption.consider([name]) == [name]
    return name


@pytest.mark.parametrize("attempt", [HUGE, 5, 0], ids=["huge", "plausible", "zero"])
@pytest.mark.parametrize("world", [4, 1], ids=["job-world-4", "job-world-1"])
def test_a_rogue_single_rank_beside_a_live_job_is_not_adopted(adoption, attempt: int, world: int) -> None:
    chooser, ranks, _ = adoption
    job = live_job(chooser, ranks, attempt=1 if attempt != 1 else 2, world=world)
    rogue = scoped("train", attempt)
    ranks.views[rogue] = view(1, alive=[0])  # whole: its world of 1 registered
    assert chooser.consider([rogue, job]) == []
    assert latest(chooser) == job and chooser.waiting[rogue] == "outrun"


def test_the_adopted_attempt_is_the_one_exported_as_latest_not_the_highest_number(adoption) -> None:
    """The dashboard's Attempt variable opens on `telemetry_attempt_latest`'s 1 (sorted first), so a rogue's
    higher attempt number must read 0 there; before any adoption every live attempt reads 0."""
    chooser, ranks, _ = adoption
    live = [scoped("train", 1), scoped("train", HUGE), scoped("other", 0), "_host:h1"]

    def exported() -> dict[tuple[str, str], float]:
        [family] = LatestAttempts(chooser, lambda: live).collect()
        return {(s.labels["job"], s.labels["attempt"]): s.value for s in family.samples}

    assert exported() == {("train", "1"): 0, ("train", str(HUGE)): 0, ("other", "0"): 0}
    live_job(chooser, ranks, attempt=1)
    ranks.views[scoped("train", HUGE)] = view(1, alive=[0])
    assert chooser.consider([scoped("train", HUGE)]) == []
    assert exported() == {("train", "1"): 1, ("train", str(HUGE)): 0, ("other", "0"): 0}


def test_a_rogue_claiming_the_jobs_world_with_one_rank_is_not_adopted(adoption) -> None:
    chooser, ranks, _ = adoption
    job = live_job(chooser, ranks)
    rogue = scoped("train", HUGE)
    ranks.views[rogue] = view(4, alive=[0])
    ranks.views[job] = view(4, dead=range(4))  # even once the job's ranks died: 1 of 4 is not an attempt
    assert chooser.consider([rogue]) == [] and chooser.waiting[rogue] == "registering"
    assert latest(chooser) == job


def test_a_job_is_adopted_once_its_world_registered(adoption) -> None:
    chooser, ranks, _ = adoption
    name = scoped("train", 3)
    ranks.views[name] = view(4, alive=[0, 1, 2])
    assert chooser.consider([name]) == [] and latest(chooser) is None
    ranks.views[name] = view(4, alive=[0, 1, 2], dead=[3])  # a rank that died still registered
    assert chooser.consider([name]) == [name] and latest(chooser) == name
    assert chooser.consider([name]) == []  # once


@pytest.mark.parametrize("old_ranks", ["dead", "closed"])
def test_a_real_restart_with_fewer_ranks_after_a_resize_is_adopted(adoption, old_ranks: str) -> None:
    chooser, ranks, _ = adoption
    job = live_job(chooser, ranks, attempt=1, world=4)
    ranks.views[job] = view(4, **{old_ranks: range(4)})
    resumed = scoped("train", 2)
    ranks.views[resumed] = view(2, alive=range(2))
    assert chooser.consider([resumed]) == [resumed] and latest(chooser) == resumed


def test_a_restart_while_a_lost_hosts_ranks_still_read_alive(adoption) -> None:
    """A host died with its agent: its ranks read alive until the tier forgets it. A new attempt with more ranks
    than those is adopted at once; one with fewer waits until they are forgotten."""
    chooser, ranks, _ = adoption
    job = live_job(chooser, ranks, attempt=1, world=8)
    ranks.views[job] = view(8, alive=range(6, 8), dead=range(6))
    bigger = scoped("train", 2)
    ranks.views[bigger] = view(6, alive=range(6))
    assert chooser.consider([bigger]) == [bigger]
    ranks.views[bigger] = view(6, dead=range(6))
    ranks.views[job] = view(8, alive=range(2, 8), dead=range(2))
    smaller = scoped("train", 3)
    ranks.views[smaller] = view(2, alive=range(2))
    ranks.views[bigger] = view(6, alive=range(2, 6), dead=range(2))
    assert chooser.consider([smaller]) == [] and chooser.waiting[smaller] == "outrun"
    ranks.views[bigger] = RankView()  # forgotten
    assert chooser.consider([smaller]) == [smaller] and latest(chooser) == smaller


def test_a_rogue_adopted_in_a_restarts_gap_is_superseded_by_the_real_attempt(adoption) -> None:
    """Between a crash and the restart the job has no live rank: a rogue with a huge number, whole, is adopted
    then. The real attempt (a smaller number) has more ranks than the rogue runs, so it takes over, and the
    views read attempts in the order they were adopted, not by number."""
    chooser, ranks, store = adoption
    job = live_job(chooser, ranks, attempt=100, world=4)
    ranks.views[job] = view(4, dead=range(4))
    rogue = scoped("train", HUGE)
    ranks.views[rogue] = view(1, alive=[0])
    assert chooser.consider([rogue]) == [rogue]
    real = scoped("train", 101)
    ranks.views[real] = view(4, alive=range(4))
    assert chooser.consider([real]) == [real]
    assert chooser.adopted("train") == [job, rogue, real] and latest(chooser) == real
    store.save([], {job: 4, rogue: 1, real: 4})
    with closing(store.reader()) as db:
        assert [name for name, _ in view_names(db, "train")] == [job, rogue, real]


def test_adoption_is_kept_in_the_store(adoption) -> None:
    chooser, ranks, store = adoption
    first = live_job(chooser, ranks, attempt=1)
    ranks.views[first] = view(4, closed=range(4))
    second = scoped("train", 2)
    ranks.views[second] = view(4, alive=range(4))
    chooser.consider([second])
    assert Adoption(store, Ranks()).adopted("train") == [first, second]


def test_views_read_every_attempt_by_number_before_any_is_adopted(tmp_path: Path) -> None:
    store = Store(tmp_path / "root.db")
    store.save([], {"train@2": 1, "train@1": 2, "other@3": 1})
    with closing(store.reader()) as db:
        assert view_names(db, "train") == [("train@1", 2), ("train@2", 1)]
    store.close()


# ------------------------------------------------------------------------ end to end


def _ranks(agent: str, attempt: int, world: int) -> list:
    return [telemetry.init(job="train", rank=r, world_size=world, agent=agent, attempt=attempt) for r in range(world)]


def _log(runs: list, first: int, last: int, offset: float) -> None:
    for step in range(first, last + 1):
        for rank, run in enumerate(runs):
            run.log(step, loss=offset + step + rank / 10)
            run.end_step(step)


def _post_forensics(api: str, job: str, ranks: list[int]) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{api}/api/v1/jobs/{job}/forensics", method="POST",
                                     data=json.dumps({"ranks": ranks}).encode())
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


@pytest.mark.parametrize("rogue_attempt", [HUGE, 5], ids=["huge", "plausible"])
def test_a_rogue_rank_takes_none_of_a_live_jobs_views(tmp_path: Path, rogue_attempt: int) -> None:
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    address = f"unix:{agent.socket_path}"
    api = root.api_address
    job = None
    try:
        job = _ranks(address, 2, 2)
        _log(job, 1, 3, 0.0)

        def steps(query: str = "") -> list[dict]:
            status, body = api_get(api, f"/api/v1/jobs/train/steps?metric=loss{query}")
            assert status == 200, body
            return body["steps"]

        wait_for(lambda: len(steps()) == 3, 15, what="the job's steps at the root")
        rogue = telemetry.init(job="train", rank=0, world_size=1, agent=address, attempt=rogue_attempt)
        _log([rogue], 1, 10, 1000.0)
        assert rogue.close(15)
        wait_for(lambda: len(steps(f"&attempt={rogue_attempt}")) == 10, 15, what="the rogue's steps stored")
        _log(job, 4, 5, 0.0)
        wait_for(lambda: len(steps()) == 5, 15, what="the job's later steps")

        assert [(s["step"], s["attempt"]) for s in steps()] == [(step, 2) for step in range(1, 6)]
        assert len(steps("&attempt=all")) == 15  # every stored attempt is still reachable
        [entry] = api_get(api, "/api/v1/jobs")[1]["jobs"]
        assert (entry["attempt"], entry["world_size"], entry["attempts"]) == (2, 2, 2)
        progress = api_get(api, "/api/v1/jobs/train/progress")[1]
        assert progress["attempt"] == 2 and progress["last_finalised_step"] == 5
        figures = api_get(api, "/api/v1/jobs/train/goodput")[1]
        assert [a["attempt"] for a in figures["attempts"]] == [2] and figures["restarts"] == 0
        assert api_get(api, "/api/v1/jobs/train/events?kind=restart")[1]["events"] == []
        status, asked = _post_forensics(api, "train", [0])
        assert status == 202 and asked["attempt"] == 2, asked
        with urllib.request.urlopen(f"http://{api}/metrics", timeout=10) as reply:
            assert 'telemetry_attempt_latest{attempt="2",job="train"} 1.0' in reply.read().decode()

        # The job ends; a real restart, resized to one rank, is adopted as the latest, with its restart event.
        assert all(run.close(15) for run in job)
        job = _ranks(address, 7, 1)
        _log(job, 4, 6, 100.0)
        wait_for(lambda: [s["attempt"] for s in steps()][-3:] == [7, 7, 7], 15, what="the restart adopted")
        assert [(s["step"], s["attempt"]) for s in steps()] == [(1, 2), (2, 2), (3, 2), (4, 7), (5, 7), (6, 7)]
        [event] = wait_for(lambda: api_get(api, "/api/v1/jobs/train/events?kind=restart")[1]["events"], 10,
                           what="the restart event")
        assert event["attempt"] == 7 and event["detail"]["previous_attempt"] == 2
        assert api_get(api, "/api/v1/jobs")[1]["jobs"][0]["attempt"] == 7
    finally:
        for run in job or []:
            run.close(5)
        stop_all(agent, root)
