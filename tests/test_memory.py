"""Freed heap memory goes back to the OS after jobs are forgotten (collectors/common/memory.py)."""

from __future__ import annotations

import platform

import pytest

from collectors.common.memory import FreedMemory
from helpers_tree import make_agent, make_root, stop_all, wait_for

import telemetry


def test_release_is_rate_limited():
    freed = FreedMemory(min_interval_s=30.0)
    if freed._trim is None:  # noqa: SLF001
        pytest.skip("no glibc malloc_trim here")
    assert freed.release(100.0) and not freed.release(110.0) and freed.release(131.0)
    assert freed.trims == 2


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_agent_and_root_trim_after_forgetting_a_finished_job(tmp_path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    try:
        run = telemetry.init(job="trimmed", rank=0, world_size=1, agent=f"unix:{agent.socket_path}")
        with run.step(1):
            run.log(1, loss=1.0)
        assert run.close(10)
        assert agent.freed.trims == root.freed.trims == 0  # nothing forgotten yet (a closed job has a grace)
        wait_for(lambda: agent.freed.trims >= 1 and root.freed.trims >= 1, timeout=40,
                 what="both tiers trimmed after forgetting the job (the only job they saw)")
    finally:
        stop_all(agent, root)
