"""The store's lifecycle (issue 28 item 3): rollups over time keep every exact field exact; each kind is deleted
past its retention, in batches, never what is not rolled up yet; the file's size is exported."""

from __future__ import annotations

import heapq
import random
from contextlib import closing

import pytest

from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.root.metrics import RootMetrics
from collectors.root.retention import (
    HOUR_MS,
    MINUTE_MS,
    Retention,
    RetentionConfig,
    merge_over_time,
    parse_duration,
    store_bytes,
)
from collectors.root.store import Store
from telemetry import Summary

T0_MS = 1_700_000_000_000 - 1_700_000_000_000 % HOUR_MS  # an hour boundary


def _second(rng: random.Random, start_ms: int, hosts: int = 6) -> tuple[Summary, list[tuple[float, int]]]:
    readings = [(float(rng.randint(0, 1000)), h << 8 | d) for h in range(hosts) for d in (64, 65)
                if rng.random() < 0.9]
    s = Summary()
    for value, src in readings:
        s.add(value, src, time_ns=start_ms * 1_000_000 + 1)
    return s, readings


def _rows(db, width: int, metric: str = "ib.symbol_error_delta"):
    return db.execute("SELECT idx, count, min, argmin, max, argmax, sources, summary FROM windows "
                      "WHERE width_ms=? AND metric=? ORDER BY idx", (width, metric)).fetchall()


def test_seconds_roll_up_into_exact_minutes_and_hours(tmp_path) -> None:
    rng = random.Random(7)
    store = Store(tmp_path / "root.db")
    raw: dict[int, list[tuple[float, int]]] = {}
    for sec in range(2 * 3600 // 20):  # two hours, one window every 20 s (sparse, with gaps)
        start = T0_MS + sec * 20_000
        s, readings = _second(rng, start)
        raw[start] = readings
        store.save([Row(Key("_fleet", "ib.symbol_error_delta", start, 1000), 0, s, False, 0)], {})
    retention = Retention(store, RetentionConfig(settle_s=60))
    retention.sweep(now_ns=(T0_MS + 2 * HOUR_MS + 120_000) * 1_000_000, max_batches=10_000)
    with closing(store.reader()) as db:
        minutes, hours = _rows(db, MINUTE_MS), _rows(db, HOUR_MS)
    assert len(minutes) == 120 and len(hours) == 2
    for width, rolled in ((MINUTE_MS, minutes), (HOUR_MS, hours)):
        for row in rolled:
            members = [r for start, rs in raw.items() if row["idx"] <= start < row["idx"] + width for r in rs]
            s = Summary.from_bytes(row["summary"])
            assert s.count == row["count"] == len(members)
            assert s.sum == pytest.approx(sum(v for v, _ in members))
            low = min(members, key=lambda p: (p[0], p[1]))
            high = min(members, key=lambda p: (-p[0], p[1]))
            assert (s.min, s.argmin, s.max, s.argmax) == (low[0], low[1], high[0], high[1])
            assert s.top() == heapq.nsmallest(s.k, members, key=lambda p: (-p[0], p[1]))
            assert s.bottom() == heapq.nsmallest(s.k, members)
            assert set(s.sources) == {src for _, src in members}
    store.close()


def _assert_exact(store: Store, raw: dict[int, list[tuple[float, int]]], metric: str) -> None:
    """Every minute and hour rollup of `metric` holds exactly the readings of `raw` (second start -> readings) in
    its period, field by field."""
    with closing(store.reader()) as db:
        rolled = {width: _rows(db, width, metric) for width in (MINUTE_MS, HOUR_MS)}
    for width, rows in rolled.items():
        for row in rows:
            members = [r for start, rs in raw.items() if row["idx"] <= start < row["idx"] + width for r in rs]
            s = Summary.from_bytes(row["summary"])
            assert s.count == row["count"] == len(members), (width, row["idx"])
            assert s.sum == pytest.approx(sum(v for v, _ in members))
            assert s.top() == heapq.nsmallest(s.k, members, key=lambda p: (-p[0], p[1]))
            assert s.bottom() == heapq.nsmallest(s.k, members)
            assert set(s.sources) == {src for _, src in members}


def test_late_seconds_are_rolled_up_again_exactly_or_dropped_and_counted(tmp_path) -> None:
    """Data that reaches the store after its minute (and hour) was rolled up: a late part merged into a stored
    second (as the root's Finaliser does after reloading it), a second never seen before (an outbox delivered
    after a long partition). Both are rolled up again, exactly; past the raw retention they are dropped, counted."""
    rng = random.Random(11)
    store = Store(tmp_path / "root.db")
    metric = "ib.symbol_error_delta"
    raw: dict[int, list[tuple[float, int]]] = {}
    summaries: dict[int, Summary] = {}
    for sec in range(2 * 3600 // 30):
        start = T0_MS + sec * 30_000
        summaries[start], raw[start] = _second(rng, start, hosts=3)
        store.save([Row(Key("_fleet", metric, start, 1000), 0, summaries[start], False, 0)], {})
    retention = Retention(store, RetentionConfig(settle_s=600, seconds_s=3 * 3600))
    now_ms = T0_MS + 2 * HOUR_MS + 15 * 60_000
    retention.sweep(now_ns=now_ms * 1_000_000, max_batches=10_000)
    _assert_exact(store, raw, metric)
    assert store.meta(f"rolled:{HOUR_MS}") == T0_MS + 2 * HOUR_MS  # both hours are rolled up too

    # a late part of a stored second in the first hour (its minute and its hour rolled up), and a new second
    stored = T0_MS + 20 * 60_000
    late = Summary()
    late.add(5000.0, 9 << 8 | 64, time_ns=stored * 1_000_000 + 7)
    merged = Summary.merge_all([summaries[stored], late])
    raw[stored] = raw[stored] + [(5000.0, 9 << 8 | 64)]
    fresh = T0_MS + 95 * 60_000 + 1000
    new, raw[fresh] = _second(rng, fresh, hosts=2)
    store.save([Row(Key("_fleet", metric, stored, 1000), 0, merged, 1, 0),
                Row(Key("_fleet", metric, fresh, 1000), 0, new, 0, 0)], {})
    retention.sweep(now_ns=(now_ms + 10_000) * 1_000_000, max_batches=10_000)
    _assert_exact(store, raw, metric)
    assert retention.stats.late_rerolled == 4 and retention.stats.late_dropped == 0  # 2 minutes, their 2 hours

    # past the raw retention (3 h): the first hour's seconds are gone, a late second there cannot be merged exactly
    later_ms = T0_MS + 4 * HOUR_MS + 15 * 60_000
    retention.sweep(now_ns=later_ms * 1_000_000, max_batches=10_000)
    too_late, _ = _second(rng, stored, hosts=1)
    store.save([Row(Key("_fleet", metric, stored, 1000), 0, too_late, 0, 0)], {})
    retention.sweep(now_ns=(later_ms + 10_000) * 1_000_000, max_batches=10_000)
    assert retention.stats.late_dropped == 1
    from prometheus_client import CollectorRegistry, generate_latest

    from collectors.root.fleet_metrics import FleetStoreMetrics
    registry = CollectorRegistry()
    registry.register(FleetStoreMetrics(lambda: (retention.stats.late_rerolled, retention.stats.late_dropped),
                                        lambda: (0, 0)))
    text = generate_latest(registry).decode()
    assert "telemetry_store_late_rerolled_total 4.0" in text and "telemetry_store_late_dropped_total 1.0" in text
    _assert_exact(store, {k: v for k, v in raw.items()}, metric)  # the rollups are as they were
    with closing(store.reader()) as db:
        assert db.execute("SELECT count(*) FROM windows WHERE width_ms=1000 AND idx<?",
                          (T0_MS + HOUR_MS,)).fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM late_rollups").fetchone()[0] == 0
    store.close()


def test_each_kind_goes_past_its_retention_and_never_before_its_rollup(tmp_path) -> None:
    store = Store(tmp_path / "root.db")
    rng = random.Random(1)
    for sec in range(0, 3 * 3600, 30):
        s, _ = _second(rng, T0_MS + sec * 1000, hosts=2)
        store.save([Row(Key("_fleet", "ib.symbol_error_delta", T0_MS + sec * 1000, 1000), 0, s, False, 0)], {})
    config = RetentionConfig(seconds_s=3600, minutes_s=7200, settle_s=60, batch=50)
    retention = Retention(store, config)
    now_ms = T0_MS + 3 * HOUR_MS + 120_000
    # A sweep with room for a few transactions only: nothing raw goes before it is rolled up.
    retention.sweep(now_ns=now_ms * 1_000_000, max_batches=3)
    with closing(store.reader()) as db:
        mark = store.meta(f"rolled:{MINUTE_MS}")
        assert mark is not None
        unrolled = db.execute("SELECT count(*) FROM windows WHERE width_ms=1000 AND idx>=?", (mark,)).fetchone()[0]
    assert mark < now_ms - 3600 * 1000  # the sweep stopped before rolling up everything due ...
    assert unrolled == len([sec for sec in range(0, 3 * 3600, 30) if T0_MS + sec * 1000 >= mark])  # ... all kept
    retention.sweep(now_ns=now_ms * 1_000_000, max_batches=10_000)
    with closing(store.reader()) as db:
        oldest_second = db.execute("SELECT min(idx) FROM windows WHERE width_ms=1000").fetchone()[0]
        oldest_minute = db.execute("SELECT min(idx) FROM windows WHERE width_ms=?", (MINUTE_MS,)).fetchone()[0]
        hours = db.execute("SELECT count(*) FROM windows WHERE width_ms=?", (HOUR_MS,)).fetchone()[0]
    assert oldest_second >= now_ms - 3600 * 1000
    cutoff = now_ms - 7200 * 1000  # raw windows go in whole periods of their rollup (late data: retention.py)
    assert cutoff - cutoff % HOUR_MS <= oldest_minute < cutoff
    assert hours == 3  # kept (400 days by default)
    store.close()


def test_old_steps_roll_into_blocks_exactly_then_go(tmp_path) -> None:
    store = Store(tmp_path / "root.db")
    rng = random.Random(3)
    day_ns = 86_400 * 10**9
    values: dict[int, list[tuple[float, int]]] = {}
    for step in range(250):
        s = Summary()
        values[step] = [(rng.random(), rank) for rank in range(16)]
        for v, rank in values[step]:
            s.add(v, rank)
        store.save([Row(Key("job", "step_time", step), 16, s, False, step * 10**9)], {"job": 16})
    retention = Retention(store, RetentionConfig(raw_steps_s=86_400, batch=40))
    retention.sweep(now_ns=2 * day_ns, max_batches=10_000)
    with closing(store.reader()) as db:
        assert db.execute("SELECT count(*) FROM windows WHERE width_ms=0").fetchone()[0] == 0
        blocks = db.execute("SELECT idx, count, max, argmax, summary FROM windows WHERE width_ms=-100 "
                            "ORDER BY idx").fetchall()
    assert [b["idx"] for b in blocks] == [0, 100, 200]
    for b in blocks:
        members = [p for step in range(b["idx"], min(250, b["idx"] + 100)) for p in values[step]]
        s = Summary.from_bytes(b["summary"])
        assert s.count == len(members)
        assert s.top() == heapq.nsmallest(s.k, members, key=lambda p: (-p[0], p[1]))
    store.close()


def test_closed_events_go_past_their_retention_open_ones_stay(tmp_path) -> None:
    from collectors.detectors.events import EventLog
    store = Store(tmp_path / "root.db")
    events = EventLog(store.path)
    events.raise_("hardware", "_fleet", step=None, key="a")
    events.raise_("hardware", "_fleet", step=None, key="b")
    events.clear("hardware", "_fleet", "a")
    retention = Retention(store, RetentionConfig(events_s=60))
    import time
    retention.sweep(now_ns=time.time_ns() + 3600 * 10**9)
    with closing(store.reader()) as db:
        left = [r["key"] for r in db.execute("SELECT key FROM events")]
    assert left == ["b"]
    store.close()


def test_store_bytes_is_exported(tmp_path) -> None:
    store = Store(tmp_path / "root.db")
    metrics = RootMetrics(store=lambda: {"writable": 1, "write_failures": 0, "files_lost": 0,
                                         "bytes": store_bytes(store.path)})
    text = metrics.render()[1].decode()
    line = next(x for x in text.splitlines() if x.startswith("telemetry_store_bytes "))
    assert float(line.split()[1]) >= 4096
    store.close()


def test_durations_and_merge_over_time() -> None:
    assert parse_duration("90s") == 90 and parse_duration("6h") == 21600 and parse_duration("off") == 0
    with pytest.raises(ValueError):
        parse_duration("soon")
    config = RetentionConfig()
    config.set("steps=30d")
    assert config.raw_steps_s == 30 * 86400
    with pytest.raises(ValueError):
        config.set("forever=1d")
    a, b = Summary(), Summary()
    a.add(1.0, 5)
    b.add(3.0, 5)  # the same source a second later: a merge over ranks would refuse it, one over time may not
    merged = merge_over_time([a, b])
    assert (merged.count, merged.max, merged.argmax, list(merged.sources)) == (2, 3.0, 5, [5])


def test_a_save_or_transaction_that_fails_midway_leaves_the_store_as_it_was(tmp_path) -> None:
    """Store.save and Store.transaction share one commit-or-roll-back: an exception inside either (here a claim
    that cannot be stored, and one raised in the caller's block) leaves no row of it behind, and raises on."""
    store = Store(tmp_path / "root.db")
    summary = Summary.from_arrays([1.0], [0], time_ns=1)
    try:
        kept = Row(Key("job", "loss", 1), 1, summary, False, 0)
        store.save([kept], {"job": 1})
        with pytest.raises(AttributeError):  # a claim without a process: fails after the windows were inserted
            store.save([Row(Key("job", "loss", 2), 1, summary, False, 0)], {"job": 1}, {"job": {0: None}})
        with pytest.raises(RuntimeError, match="caller"):
            with store.transaction() as db:
                Store.save_in(db, [Row(Key("job", "loss", 3), 1, summary, False, 0)])
                raise RuntimeError("the caller's block failed")
        assert [step for step in (1, 2, 3) if store.load(Key("job", "loss", step)) is not None] == [1]
        store.save([Row(Key("job", "loss", 4), 1, summary, False, 0)], {})  # the writer is usable after both
        assert store.load(Key("job", "loss", 4)) is not None
    finally:
        store.close()


@pytest.mark.parametrize("text", ["inf", "infd", "-inf", "nan", "1e300d", "1e12", "36501d"])
def test_parse_duration_refuses_what_no_clock_can_hold(text):
    """inf (or a duration past any clock's range) killed the root at start (an OverflowError turning it into
    nanoseconds); 'off' is how a kind is kept forever."""
    with pytest.raises(ValueError, match="off"):
        parse_duration(text)
    assert parse_duration("36500d") == 36500 * 86_400


@pytest.mark.parametrize(("tier", "option"), [("root", ["--retention", "hours=inf"]),
                                              ("root", ["--host-index-reuse-after", "inf"]),
                                              ("rack", ["--retention", "bogus=1"]),
                                              ("rack", ["--host-index-reuse-after", "nonsense"])])
def test_every_tier_refuses_a_bad_retention_option_naming_it(tmp_path, tier, option):
    """inf killed the root at start; a rack took `--retention bogus=1 --host-index-reuse-after nonsense` silently
    (root-only options, checked only at the root). Every tier refuses them at start, naming the option. A rack
    that accepts them serves instead of exiting: the timeout says so."""
    import subprocess
    import sys
    where = ["--db", str(tmp_path / "root.db"), "--api", "127.0.0.1:0"] if tier == "root" else \
        ["--parent", "127.0.0.1:9"]
    try:
        done = subprocess.run([sys.executable, "-m", "collectors.cli", "collector", "--listen", "127.0.0.1:0", *where,
                               *option], capture_output=True, text=True, timeout=30)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the {tier} started with {option} instead of refusing it")
    assert done.returncode == 2, done.stderr[-2000:]
    assert option[0] in done.stderr and "Traceback" not in done.stderr


def test_a_jobs_run_claims_go_with_its_last_window_not_before(tmp_path) -> None:
    """The `runs` table grew with uptime (a job's claims were kept as long as the file: 200 attempts of 1,024 ranks
    left 204,800 rows after a sweep 10 years on). Claims now go once the job has no window left, and not before:
    while its step blocks are kept, a stale second run of the attempt is still refused from the stored claims."""
    from collectors.delivery.runs import Claim, RunLedger
    store = Store(tmp_path / "root.db")
    day_ns = 86_400 * 10**9
    ranks = 64
    for j in range(5):
        job = f"job{j}"
        store.save_runs(job, {r: Claim(1000 + r, "h") for r in range(ranks)})
        for step in range(3):
            s = Summary()
            for r in range(ranks):
                s.add(1.0, r)
            store.save([Row(Key(job, "step_time", step), ranks, s, False, j * day_ns + step)], {job: ranks})
    store.save_runs("_fleet", {5 << 8 | 64: Claim(7, "host5:ib0")})  # a host index's: not a job's
    config = RetentionConfig(raw_steps_s=86_400, step_blocks_s=3 * 86_400, batch=50)
    retention = Retention(store, config)

    def counts() -> tuple[int, int]:
        with closing(store.reader()) as db:
            return (db.execute("SELECT count(*) FROM runs WHERE job<>'_fleet'").fetchone()[0],
                    db.execute("SELECT count(*) FROM jobs").fetchone()[0])

    retention.sweep(now_ns=2 * day_ns + 1, max_batches=10_000)  # job0's steps are blocks now: claims stay
    assert counts() == (5 * ranks, 5)
    retention.sweep(now_ns=6 * day_ns + 1, max_batches=10_000)  # blocks of job0..job2 past 3 days: gone
    assert counts() == (2 * ranks, 2)
    assert store.load_runs("job0") == {} and len(store.load_runs("job3")) == ranks
    stale = RunLedger(recall=store.load_runs)  # a second run of job3's attempt, after every tier forgot it
    stale.claim("rack", "job3", {0: Claim(99, "other")})
    assert stale.refused("rack", "job3")
    retention.sweep(now_ns=30 * day_ns, max_batches=10_000)
    assert counts() == (0, 0)
    assert len(store.load_runs("_fleet")) == 1
    assert retention.stats.jobs_forgotten == 5
    store.close()


def test_what_the_steps_retention_leaves_of_a_job(tmp_path) -> None:
    """docs/fleet.md "What the steps retention takes away": past `steps` the raw steps are gone (and with them
    /steps and last_step), goodput stays exact from `step_ends` (it went to wall_s 0 / goodput None before), the
    blocks keep each block's exact figures and times; past `step-blocks` both go."""
    from collectors.root.goodput import goodput
    store = Store(tmp_path / "root.db")
    t0 = 10 * 86_400 * 10**9
    from collectors.common.attempts import scoped
    for attempt, steps in (("job", range(250)), (scoped("job", 1), range(200, 300))):  # a restart re-runs 200..249
        for step in steps:
            s = Summary()
            for rank in range(8 if step != 299 else 7):  # attempt 1's last step missing a rank: a crash's
                s.add(1.0 + rank, rank, time_ns=t0 + (step + (60 if attempt != "job" else 0)) * 10**9)
            store.save([Row(Key(attempt, "step_time", step), 8, s, False, t0 + step * 10**9)], {attempt: 8})
            store.save([Row(Key(attempt, "loss", step), 8, s, False, t0 + step * 10**9)], {})
    with closing(store.reader()) as db:
        before = goodput(db, "job")
    assert before["restarts"] == 1 and before["lost_s"] > 0 and before["goodput"] < 1.0
    retention = Retention(store, RetentionConfig(raw_steps_s=86_400, step_blocks_s=5 * 86_400, batch=70))
    retention.sweep(now_ns=t0 + 2 * 86_400 * 10**9, max_batches=10_000)
    with closing(store.reader()) as db:
        after = goodput(db, "job")
        raw = db.execute("SELECT count(*) FROM windows WHERE width_ms=0").fetchone()[0]
        blocks = db.execute("SELECT idx, count, min, argmin, max, argmax, sources, summary FROM windows "
                            "WHERE width_ms=-100 AND job='job' AND metric='step_time' ORDER BY idx").fetchall()
    assert raw == 0
    assert after == before
    assert [tuple(b)[:7] for b in blocks] == [(0, 800, 1.0, 0, 8.0, 7, 8), (100, 800, 1.0, 0, 8.0, 7, 8),
                                              (200, 400, 1.0, 0, 8.0, 7, 8)]
    last = Summary.from_bytes(blocks[-1]["summary"])
    assert (last.first_time_ns, last.last_time_ns) == (t0 + 200 * 10**9, t0 + 249 * 10**9)
    retention.sweep(now_ns=t0 + 7 * 86_400 * 10**9, max_batches=10_000)
    with closing(store.reader()) as db:
        gone = goodput(db, "job")
        assert db.execute("SELECT count(*) FROM step_ends").fetchone()[0] == 0
    assert (gone["wall_s"], gone["goodput"], gone["attempts"]) == (0.0, None, [])
    store.close()


def test_claims_of_a_job_never_stored_go_after_a_week_unless_windows_come(tmp_path) -> None:
    """Claims with no window and no jobs row (the review's reproduction: 200 attempts of 1,024 ranks, claims only,
    204,800 rows left by a sweep 10 years on) are noted, then deleted once noted 7 days ago and still unstored; a
    job whose windows come meanwhile keeps its claims."""
    from collectors.delivery.runs import Claim
    store = Store(tmp_path / "root.db")
    day_ns = 86_400 * 10**9
    for j in range(4):
        store.save_runs(f"job{j}", {r: Claim(1000 + r, "h") for r in range(100)})
    retention = Retention(store, RetentionConfig(batch=30))

    def left() -> dict[str, int]:
        with closing(store.reader()) as db:
            return dict(db.execute("SELECT job, count(*) FROM runs GROUP BY job").fetchall())

    retention.sweep(now_ns=100 * day_ns, max_batches=10_000)  # noted
    s = Summary()
    s.add(1.0, 0)
    store.save([Row(Key("job3", "step_time", 0), 100, s, False, 100 * day_ns)], {"job3": 100})  # job3's first window
    retention.sweep(now_ns=106 * day_ns, max_batches=10_000)
    assert left() == {f"job{j}": 100 for j in range(4)}  # not 7 days yet
    retention.sweep(now_ns=108 * day_ns, max_batches=10_000)
    assert left() == {"job3": 100}
    store.close()
