"""A test that runs a service's command in-process leaves pytest's own SIGTERM and SIGINT as they were
(tests/conftest.py puts them back after each test): processes forked later must still die of terminate().

The two tests run in this order (one file stays on one worker under pytest-xdist --dist loadfile)."""

from __future__ import annotations

import signal

from click.testing import CliRunner

from collectors.cli import main

BEFORE = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}  # at collection, before any test


def test_an_in_process_collector_command_installs_its_stop_signals() -> None:
    result = CliRunner().invoke(main, ["collector", "--detectors", '{"straggler": {"factr": 2}}'])
    assert result.exit_code == 2 and "factr" in result.output
    # what the next test must not see: the services' handler, here in pytest's process
    assert signal.getsignal(signal.SIGTERM) is not BEFORE[signal.SIGTERM]


def test_the_next_test_finds_the_handlers_as_they_were() -> None:
    assert {sig: signal.getsignal(sig) for sig in BEFORE} == BEFORE
