"""A bounded fuzz run of every untrusted entry point (issue 14 item 4); bench/fuzz.py runs the long one."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from fuzz_entry_points import (
    FuzzTree,
    api_paths,
    api_queries,
    forward_streams,
    rank_streams,
    raw_streams,
    rogue_child_streams,
    rogue_job_streams,
    rogue_rank_streams,
)

FEW = settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    made = FuzzTree(tmp_path_factory.mktemp("fuzz")).start()
    yield made
    made.stop()


def test_agent_rank_streams(tree: FuzzTree) -> None:
    @FEW
    @given(stream=rank_streams)
    def case(stream):
        tree.stream("agent", stream)
    case()
    tree.log_healthy()
    tree.check_healthy()


def test_raw_bytes_on_both_streams(tree: FuzzTree) -> None:
    @FEW
    @given(stream=raw_streams)
    def case(stream):
        tree.stream("agent", stream, raw=True)
        tree.stream("root", stream, raw=True)
    case()
    tree.log_healthy()
    tree.check_healthy()


def test_collector_forward_streams(tree: FuzzTree) -> None:
    @FEW
    @given(stream=forward_streams)
    def case(stream):
        tree.stream("root", stream)
    case()
    tree.log_healthy()
    tree.check_healthy()


def test_a_rogue_child_and_a_rogue_rank_next_to_a_healthy_job(tree: FuzzTree) -> None:
    """Issue 26: values, heartbeat buckets, fingerprints, captures and rank states about the healthy job's ranks
    from a child that does not cover them, at the job's attempt, at plausible new attempts and at attempts no tier
    takes; rank streams of the healthy job at plausible new attempts and at attempts no SDK sends, and of a job of
    their own, with heartbeats at any time and fingerprints at any sequence number. The healthy job, running, stays
    exact, its default views its own, and no event names its ranks."""
    tree.log_healthy()  # the healthy job's ranks are known (with their processes) before the rogues speak
    tree.open_healthy()  # and running while they do, and after (FuzzTree.open_healthy)

    @FEW
    @given(child=rogue_child_streams(), rank=rogue_rank_streams, own=rogue_job_streams)
    def case(child, rank, own):
        tree.stream("root", child)
        tree.stream("agent", rank)
        tree.stream("agent", own)
    case()
    tree.log_healthy()
    tree.check_healthy()


def test_api_query_strings(tree: FuzzTree) -> None:
    @FEW
    @given(path=api_paths, query=api_queries)
    def case(path, query):
        tree.api(path, query)
    case()
    tree.log_healthy()
    tree.check_healthy()
