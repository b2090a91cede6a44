"""The simulator's service processes bind port 0 (no port chosen before it is bound, which another process could take
in between) and keep the bound ports across a restart, where their children still hold the first address."""

from __future__ import annotations

import urllib.request

from collectors.sim.procs import Proc, python_module


def test_a_restarted_root_comes_back_on_the_ports_it_bound_first(tmp_path):
    root = Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", "127.0.0.1:0",
                                      "--db", str(tmp_path / "root.db"), "--api", "127.0.0.1:0"), tmp_path)
    try:
        first = dict(root.start().ready)
        assert not first["address"].endswith(":0") and not first["api"].endswith(":0"), first
        root.restart()
        assert (root.ready["address"], root.ready["api"]) == (first["address"], first["api"])
        with urllib.request.urlopen(f"http://{root.ready['api']}/api/v1/jobs", timeout=10) as reply:
            assert reply.status == 200
    finally:
        root.kill()


def test_a_port_given_is_kept_as_given(tmp_path):
    """Only port 0 is replaced: a fixed port the caller chose (the demo's --api-port) stays in the command."""
    proc = Proc("rack", ["unused"], tmp_path)
    proc.argv = ["x", "--listen", "127.0.0.1:5", "--api", "127.0.0.1:0"]
    proc.ready = {"address": "127.0.0.1:5", "api": "127.0.0.1:4321"}
    proc._pin_ports()
    assert proc.argv == ["x", "--listen", "127.0.0.1:5", "--api", "127.0.0.1:4321"]


def test_the_callers_command_is_not_rewritten(tmp_path):
    """The ports bound are pinned in the Proc's own copy: a caller that builds a second service from the same list
    still asks for port 0 (else it would ask for the first one's port, taken)."""
    argv = ["x", "--listen", "127.0.0.1:0"]
    proc = Proc("rack", argv, tmp_path)
    proc.ready = {"address": "127.0.0.1:41000"}
    proc._pin_ports()
    assert proc.argv[-1] == "127.0.0.1:41000" and argv == ["x", "--listen", "127.0.0.1:0"]
