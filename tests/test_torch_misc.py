"""peak_flops / mfu, grad_norm, TimedLoader, and the package surface of telemetry.torch."""

import math
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402  (after the module skips without torch)

import telemetry.torch as tt  # noqa: E402  (after the module skips without torch)
from telemetry.torch import TimedLoader, grad_norm, mfu, peak_flops  # noqa: E402  (after the module skips without torch)
from telemetry.torch.peak import ENV_VAR, PEAK_FLOPS, dtype_key, peak_flops_for_name  # noqa: E402  (after the module skips without torch)

REPO = Path(__file__).resolve().parent.parent


# -- package surface --------------------------------------------------------------------------

def test_exports() -> None:
    assert sorted(tt.__all__) == sorted([
        "flops_per_step", "peak_flops", "mfu", "grad_norm", "CollectiveProgress", "stage",
        "StagedValues", "TimedLoader"])
    for name in tt.__all__:
        assert getattr(tt, name) is not None


def test_importing_telemetry_does_not_import_torch() -> None:
    code = "import sys, telemetry; assert 'torch' not in sys.modules, 'telemetry imported torch'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


# -- peak_flops / mfu ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, dtype, expected", [
    ("NVIDIA H100 80GB HBM3", torch.bfloat16, 989.5e12),
    ("NVIDIA H100 80GB HBM3", torch.float8_e4m3fn, 1979e12),
    ("NVIDIA H100 PCIe", torch.float16, 756.5e12),
    ("NVIDIA H100 NVL", "bf16", 835.5e12),
    ("NVIDIA A100-SXM4-80GB", torch.bfloat16, 312e12),
    ("NVIDIA A100-PCIE-40GB", "tf32", 156e12),
    ("NVIDIA A100 80GB PCIe", "fp32", 19.5e12),
    ("NVIDIA H200", torch.bfloat16, 989.5e12),
    ("NVIDIA H200 NVL", "fp8", 1670.5e12),
    ("NVIDIA GH200 480GB", "bf16", 989.5e12),
    ("NVIDIA B200", torch.bfloat16, 2250e12),
    ("NVIDIA GB200", torch.bfloat16, 2500e12),
    ("NVIDIA L40S", torch.float16, 362.05e12),
    ("AMD Instinct MI300X", torch.bfloat16, 1307.4e12),
])
def test_table_lookup_by_device_name(name, dtype, expected) -> None:
    assert peak_flops_for_name(name, dtype) == pytest.approx(expected)


def test_unknown_device_and_missing_dtype_give_none() -> None:
    assert peak_flops_for_name("NVIDIA GeForce RTX 4090", "bf16") is None
    assert peak_flops_for_name("NVIDIA A100-SXM4-80GB", "fp8") is None  # A100 has no FP8


def test_table_is_dense_and_consistent() -> None:
    for key, row in PEAK_FLOPS.items():
        assert set(row) <= {"fp32", "tf32", "bf16", "fp16", "fp8"}, key
        assert row["bf16"] == row["fp16"], key
        assert row["fp32"] < row["tf32"] < row["bf16"], key
        if "fp8" in row:
            # datasheets round (L40S prints BF16 362.05 and FP8 733): equal to within 2 %
            assert row["fp8"] == pytest.approx(2 * row["bf16"], rel=0.02), key


def test_float32_maps_to_tf32_only_when_enabled() -> None:
    previous = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert dtype_key(torch.float32) == "fp32"
        torch.set_float32_matmul_precision("high")
        assert dtype_key(torch.float32) == "tf32"
    finally:
        torch.set_float32_matmul_precision(previous)
    with pytest.raises(ValueError):
        dtype_key(torch.int8)
    with pytest.raises(ValueError):
        dtype_key("fp4")


def test_cpu_gives_none_unless_overridden(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert peak_flops("cpu") is None
    if not torch.cuda.is_available():
        assert peak_flops() is None
    assert peak_flops("cpu", override=1e12) == 1e12
    monkeypatch.setenv(ENV_VAR, "123e12")
    assert peak_flops("cpu") == 123e12
    assert peak_flops(override=5.0) == 5.0  # the argument beats the environment
    monkeypatch.setenv(ENV_VAR, "not-a-number")
    assert peak_flops("cpu") is None
    monkeypatch.setenv(ENV_VAR, "-1")
    assert peak_flops("cpu") is None
    with pytest.raises(ValueError):
        peak_flops(override=0)


def test_mfu() -> None:
    assert mfu(4e14, 0.5, 1e15) == pytest.approx(0.8)
    assert mfu(0, 1.0, 1e15) == 0.0
    for bad in [(1e12, 0.0, 1e15), (1e12, -1.0, 1e15), (1e12, 1.0, 0.0), (-1.0, 1.0, 1e15),
                (1e12, math.nan, 1e15)]:
        with pytest.raises(ValueError):
            mfu(*bad)


# -- grad_norm ----------------------------------------------------------------------------------

def model_with_grads() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Linear(4, 4))
    model[3].requires_grad_(False)  # no grads here: skipped
    model(torch.randn(5, 8)).pow(2).sum().backward()
    return model


def test_grad_norm_matches_clip_grad_norm() -> None:
    model = model_with_grads()
    got = grad_norm(model)
    assert isinstance(got, torch.Tensor) and got.dim() == 0 and got.dtype == torch.float32
    flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(got, flat.norm())
    expected = nn.utils.clip_grad_norm_(model.parameters(), max_norm=float("inf"))
    assert torch.allclose(got, expected)


def test_grad_norm_other_norms_and_inputs() -> None:
    model = model_with_grads()
    flat = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    assert torch.allclose(grad_norm(model, math.inf), flat.abs().max())
    assert torch.allclose(grad_norm(model, 1.0), flat.abs().sum())
    params = [p for p in model.parameters() if p.grad is not None]
    assert torch.allclose(grad_norm(params), flat.norm())
    assert torch.allclose(grad_norm(params[0]), params[0].grad.norm())
    with pytest.raises(ValueError):
        grad_norm(model, 0)


def test_grad_norm_without_grads_is_zero() -> None:
    got = grad_norm(nn.Linear(3, 3))
    assert got.dim() == 0 and got.item() == 0.0


def test_grad_norm_mixed_dtypes_accumulates_in_float32() -> None:
    a = nn.Parameter(torch.zeros(1000, dtype=torch.bfloat16))
    b = nn.Parameter(torch.zeros(3))
    a.grad = torch.full((1000,), 0.01, dtype=torch.bfloat16)
    b.grad = torch.tensor([3.0, 4.0, 0.0])
    expected = math.sqrt(1000 * float(a.grad[0]) ** 2 + 25.0)
    assert grad_norm([a, b]).item() == pytest.approx(expected, rel=1e-5)


# -- TimedLoader --------------------------------------------------------------------------------

class SlowIterable:
    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay
        self.sampler = "the sampler"

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        for i in range(self.n):
            time.sleep(self.delay)
            yield i


def test_timed_loader_measures_each_wait() -> None:
    waits: list[float] = []
    loader = TimedLoader(SlowIterable(3, 0.02), on_wait=waits.append)
    seen = []
    for batch in loader:
        seen.append(batch)
        assert loader.last_wait_s == waits[-1]
        time.sleep(0.03)  # time in the loop body is not waiting
    assert seen == [0, 1, 2]
    assert len(waits) == 3 and all(0.015 < w < 0.03 + 0.2 for w in waits)
    assert loader.total_wait_s == pytest.approx(sum(waits))
    assert loader.batches == 3


def test_timed_loader_is_reiterable_and_delegates() -> None:
    loader = TimedLoader(SlowIterable(2, 0.0))
    assert list(loader) == [0, 1] and list(loader) == [0, 1]  # one pass per epoch
    assert len(loader) == 2 and loader.sampler == "the sampler"
    assert loader.last_wait_s is not None and loader.batches == 4
    with pytest.raises(TypeError):
        len(TimedLoader(iter([1])))


def test_timed_loader_fake_clock_and_failing_callback() -> None:
    ticks = iter([0.0, 1.5, 10.0, 10.25])
    calls = []

    def broken(seconds: float) -> None:
        calls.append(seconds)
        raise RuntimeError("telemetry down")

    loader = TimedLoader([1, 2], on_wait=broken, clock=lambda: next(ticks, 99.0))
    assert list(loader) == [1, 2]  # the callback's failure does not reach the training loop
    assert calls == [1.5, 0.25]


def test_timed_loader_propagates_loader_errors() -> None:
    def failing():
        yield 1
        raise OSError("disk gone")

    with pytest.raises(OSError):
        list(TimedLoader(failing()))
