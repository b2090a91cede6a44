"""The torchrun command lines the demo, the tests and the benches start: the rendezvous store binds its own port.

A port chosen beforehand (bind port 0, close, hand the number to torchrun) can be taken before torchrun binds it,
and torchrun that finds its endpoint taken joins whatever listens there as a client: two of the crash test's jobs
once shared one rendezvous that way (CI, 2026-11-27)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.torchrun_jobs import torchrun_argv as bench_argv
from collectors.demo.train import torchrun_argv as demo_argv


@pytest.mark.parametrize("argv", [demo_argv(2, "job"), bench_argv(2, Path("x.py"), ["--a"], ("--rdzv-id", "j"))],
                         ids=["demo", "bench"])
def test_the_rendezvous_endpoint_is_port_0_on_loopback(argv: list[str]) -> None:
    assert argv[argv.index("--rdzv-endpoint") + 1] == "127.0.0.1:0", argv
    assert argv[argv.index("--local-addr") + 1] == "127.0.0.1", argv
