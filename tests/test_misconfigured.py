"""A misconfigured node says why nothing arrives (issue 23 §2), the way a new user meets it.

Before: no agent running, `TELEMETRY_AGENT=localhost` or a socket path without `unix:`, and `init()` + `log()` +
`close()` printed nothing at all (close() only returned False); a job name with a space was refused later, out
of sight. Now: a malformed address or job name is a ValueError at init(); an agent that does not answer or that
refuses the rank is one warning (per address, rate-limited) naming the address and the fix; close() says why it
returns False. The agent's side (a parent that does not answer, a busy port) is in
tests/test_misconfigured_services.py.
"""

from __future__ import annotations

import logging
import socket

import pytest

import telemetry
from helpers_tree import dead_address, make_agent, make_root, stop_all
from telemetry.sdk.address import check_address

MALFORMED = [
    ("localhost", "neither HOST:PORT nor unix:PATH"),
    ("node7", "e.g. node7:7400"),
    ("/run/telemetry/agent.sock", "write unix:/run/telemetry/agent.sock"),
    ("./agent.sock", "looks like a socket path"),
    ("agent.sock", "looks like a socket path"),
    ("unix:", "no socket path"),
    ("unix://run/agent.sock", "absolute path"),
    ("127.0.0.1:99999", "not in 1-65535"),
    ("127.0.0.1:", "neither HOST:PORT"),
    (" 127.0.0.1:7400", "padded"),
    ("http://127.0.0.1:7400", "neither HOST:PORT"),
]
WELL_FORMED = ["unix:/run/telemetry/agent.sock", "unix:///tmp/a.sock", "unix:relative.sock", "127.0.0.1:7400",
               "localhost:7400", "[::1]:7400", "node-7.rack3.example:7400", "dns:///agent:7400",
               "unix-abstract:telemetry"]


@pytest.mark.parametrize("address,says", MALFORMED, ids=[a for a, _ in MALFORMED])
def test_a_malformed_agent_address_is_refused_at_init(monkeypatch, address, says):
    monkeypatch.setenv("TELEMETRY_AGENT", address)
    with pytest.raises(ValueError, match="TELEMETRY_AGENT") as raised:
        telemetry.init(job="j", rank=0, world_size=1)
    assert says in str(raised.value), raised.value
    monkeypatch.delenv("TELEMETRY_AGENT")
    with pytest.raises(ValueError, match="agent="):
        telemetry.init(job="j", rank=0, world_size=1, agent=address)


@pytest.mark.parametrize("address", WELL_FORMED)
def test_well_formed_agent_addresses_pass(address):
    assert check_address(address, "TELEMETRY_AGENT") == address


@pytest.mark.parametrize("job", ["my job", "a/b", "x" * 129, "_host:node7", "naïve"])
def test_a_job_name_the_tree_would_refuse_is_refused_at_init(job):
    with pytest.raises(ValueError, match="job name"):
        telemetry.init(job=job, rank=0, world_size=1, agent=dead_address())


def test_a_job_name_from_torchrun_names_the_variable(monkeypatch):
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "my run")
    with pytest.raises(ValueError, match="TORCHELASTIC_RUN_ID"):
        telemetry.init(rank=0, world_size=1, agent=dead_address())


def _warnings(caplog, what: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and what in r.getMessage()]


def test_no_agent_at_a_tcp_address_is_one_warning_naming_it(caplog):
    caplog.set_level(logging.WARNING, logger="telemetry.sdk")
    address = dead_address()
    runs = [telemetry.init(job="lonely", rank=r, world_size=2, agent=address) for r in range(2)]
    for run in runs:
        run.log(0, loss=1.0)
    assert [run.close(timeout=2.5) for run in runs] == [False, False]
    said = _warnings(caplog, "cannot reach the node agent")
    # Two ranks in one process, both retrying for 2.5 s: one warning a minute for the address, not one per try.
    assert len(said) == 1 and address in said[0] and "TELEMETRY_AGENT" in said[0], said
    closes = _warnings(caplog, "close(timeout=2.5)")
    assert len(closes) == 2 and all("never answered" in c and address in c for c in closes), closes


def test_no_socket_says_which_path_and_how_to_start_the_agent(caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="telemetry.sdk")
    sock = tmp_path / "nobody-home.sock"
    run = telemetry.init(job="lonely", rank=0, world_size=1, agent=f"unix:{sock}")
    run.log(0, loss=1.0)
    assert run.close(timeout=1.5) is False
    (said,) = _warnings(caplog, "cannot reach the node agent")
    assert f"no socket at {sock}" in said and "telemetry agent" in said, said


def test_a_stale_socket_says_the_agent_stopped(caplog, tmp_path):
    """A socket file left by an agent that was killed: it exists, nothing accepts on it."""
    sock = tmp_path / "agent.sock"
    with socket.socket(socket.AF_UNIX) as stale:
        stale.bind(str(sock))  # bound, never listening: what a killed agent leaves behind
        caplog.set_level(logging.WARNING, logger="telemetry.sdk")
        run = telemetry.init(job="lonely", rank=0, world_size=1, agent=f"unix:{sock}")
        run.log(0, loss=1.0)
        assert run.close(timeout=1.5) is False
    (said,) = _warnings(caplog, "cannot reach the node agent")
    assert f"{sock} exists but nothing accepts on it" in said, said


def test_an_agent_that_refuses_the_rank_is_one_warning_with_its_reason(caplog, tmp_path):
    caplog.set_level(logging.WARNING, logger="telemetry.sdk")
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "agent.sock", "agent-0", max_world_size=2)
    try:
        runs = [telemetry.init(job="big", rank=r, world_size=8, agent=f"unix:{tmp_path / 'agent.sock'}")
                for r in range(3)]
        for run in runs:
            run.log(0, loss=1.0)
        assert [run.close(timeout=3) for run in runs] == [False] * 3
    finally:
        stop_all(agent, root)
    said = _warnings(caplog, "refused job 'big'")
    assert len(said) == 1 and "INVALID_ARGUMENT" in said[0] and "world size" in said[0].lower(), said
    assert all("refused this rank" in c for c in _warnings(caplog, "close(timeout=3)"))
