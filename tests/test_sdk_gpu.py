"""telemetry.sdk.gpu: the rank's GPU named for its agent, without ever initialising CUDA.

On a GPU (bench/gpu_check.py, e2e) the real path reads the current device's UUID; here CUDA is absent, so the
torch calls are stand-ins: which source wins, that nothing CUDA is called before the script initialised it,
and that init() passes the result to the agent (what the agent does with it: tests/test_agent_hardware.py).
"""

from __future__ import annotations

import logging
import sys
from types import SimpleNamespace
from typing import Any

import pytest

import telemetry
from telemetry.sdk.gpu import rank_device


class _Cuda:
    def __init__(self, initialized: bool, uuid: str = "e1597864-240c-575a-40bd-8dd485e99a03", current: int = 3,
                 count: int = 8) -> None:
        self.initialized, self.uuid, self.current, self.count, self.calls = initialized, uuid, current, count, []

    def is_initialized(self) -> bool:
        return self.initialized

    def current_device(self) -> int:
        self.calls.append("current_device")
        return self.current

    def device_count(self) -> int:
        return self.count

    def get_device_properties(self, index: int) -> Any:
        self.calls.append(f"properties:{index}")
        return SimpleNamespace(uuid=self.uuid)


@pytest.fixture
def fake_torch(monkeypatch: pytest.MonkeyPatch) -> Any:
    def install(cuda: _Cuda | None) -> None:
        if cuda is None:
            monkeypatch.delitem(sys.modules, "torch", raising=False)
        else:
            monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(cuda=cuda))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return install


def test_the_current_devices_uuid_once_the_script_initialised_cuda(fake_torch: Any) -> None:
    cuda = _Cuda(initialized=True)
    fake_torch(cuda)
    assert rank_device(3) == "GPU-e1597864-240c-575a-40bd-8dd485e99a03"
    assert cuda.calls == ["current_device", "properties:3"]
    assert rank_device(11) == "GPU-e1597864-240c-575a-40bd-8dd485e99a03"  # local rank 11 of 8 GPUs: cuda:3
    fake_torch(_Cuda(initialized=True, uuid="MIG-1234", current=0, count=1))
    assert rank_device(5) == "MIG-1234"  # one visible GPU: every rank's


def test_a_current_device_that_is_not_the_ranks_names_nothing(fake_torch: Any,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    # A script that never calls set_device and uses .to(f"cuda:{local_rank}"): current device 0 everywhere.
    names = []
    with caplog.at_level(logging.INFO, logger="telemetry.sdk.gpu"):
        for local_rank in range(4):
            fake_torch(_Cuda(initialized=True, current=0, count=4))
            names.append(rank_device(local_rank))
    assert names == ["GPU-e1597864-240c-575a-40bd-8dd485e99a03", "", "", ""]
    assert sum("pass telemetry.init(device=...)" in r.getMessage() for r in caplog.records) == 3


def test_cuda_is_never_touched_before_the_script_initialised_it(fake_torch: Any,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    cuda = _Cuda(initialized=False)
    fake_torch(cuda)
    assert rank_device(0) == "" and cuda.calls == []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-aaaa, GPU-bbbb")
    assert rank_device(1) == "GPU-bbbb" and cuda.calls == []
    assert rank_device(2) == ""  # more local ranks than visible GPUs
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5")  # CUDA's numbering, not NVML's: not guessed
    assert rank_device(0) == ""


def test_no_torch_or_a_broken_one_gives_nothing(fake_torch: Any) -> None:
    fake_torch(None)
    assert rank_device(0) == ""
    broken = _Cuda(initialized=True)
    broken.get_device_properties = None  # type: ignore[assignment]  # a torch whose properties call fails
    fake_torch(broken)
    assert rank_device(0) == ""


def test_init_gives_the_device_to_the_run_unless_one_is_passed(fake_torch: Any,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    fake_torch(_Cuda(initialized=True, current=0))
    seen: list[str] = []

    def run(*args: Any, **options: Any) -> str:
        seen.append(options["device"])
        return "run"

    monkeypatch.setattr("telemetry.sdk.run.Run", run)
    telemetry.init(job="j", rank=0, world_size=1)
    telemetry.init(job="j", rank=0, world_size=1, device="cuda:7")
    assert seen == ["GPU-e1597864-240c-575a-40bd-8dd485e99a03", "cuda:7"]
