"""stage(): the CPU path, float/int pass-through and the errors (the CUDA path needs a GPU)."""

import math
import threading

import pytest

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")

from telemetry.torch import StagedValues, stage  # noqa: E402  (after the module skips without torch)


def test_floats_and_ints_pass_through_in_order() -> None:
    staged = stage({"b": 2, "a": 1.5, "flag": True, "np": np.float32(0.25)})
    assert isinstance(staged, StagedValues)
    assert staged.ready()
    out = staged.read()
    assert list(out) == ["b", "a", "flag", "np"]
    assert out == {"b": 2.0, "a": 1.5, "flag": 1.0, "np": 0.25}
    assert all(type(v) is float for v in out.values())


def test_cpu_tensors_are_read_directly() -> None:
    w = torch.tensor(3.0, requires_grad=True)
    values = {
        "zero_d": torch.tensor(1.25),
        "one_elem": torch.tensor([2.5]),
        "nested_one_elem": torch.tensor([[4.0]], dtype=torch.float64),
        "bf16": torch.tensor(0.5, dtype=torch.bfloat16),
        "int": torch.tensor(7, dtype=torch.int64),
        "needs_grad": w * 2,
    }
    staged = stage(values)
    assert staged.ready()
    assert staged.read() == {"zero_d": 1.25, "one_elem": 2.5, "nested_one_elem": 4.0, "bf16": 0.5,
                             "int": 7.0, "needs_grad": 6.0}


def test_values_are_snapshotted_at_stage_time() -> None:
    t = torch.tensor(1.0)
    staged = stage({"x": t})
    t.add_(1)
    assert staged.read() == {"x": 1.0}


def test_non_finite_values_are_kept() -> None:
    out = stage({"nan": torch.tensor(float("nan")), "inf": float("inf")}).read()
    assert math.isnan(out["nan"]) and out["inf"] == math.inf


def test_read_twice_and_from_another_thread() -> None:
    staged = stage({"a": torch.tensor(1.0), "b": 2})
    result = {}
    thread = threading.Thread(target=lambda: result.update(staged.read()))
    thread.start()
    thread.join(5)
    assert result == {"a": 1.0, "b": 2.0}
    assert staged.read() == result


def test_empty_mapping() -> None:
    staged = stage({})
    assert staged.ready() and staged.read() == {}


@pytest.mark.parametrize("value", [torch.ones(2), torch.ones(1, 3), torch.ones(0)])
def test_non_scalar_tensor_is_rejected_with_its_name_and_shape(value) -> None:
    with pytest.raises(ValueError, match=r"'activations'.*shape") as err:
        stage({"loss": 1.0, "activations": value})
    assert str(tuple(value.shape)) in str(err.value)


def test_complex_and_meta_tensors_are_rejected() -> None:
    with pytest.raises(ValueError, match="complex"):
        stage({"z": torch.tensor(1 + 2j)})
    with pytest.raises(ValueError, match="meta"):
        stage({"m": torch.empty((), device="meta")})


@pytest.mark.parametrize("value", ["1.0", None, [1.0], 1 + 2j])
def test_non_numbers_are_rejected(value) -> None:
    with pytest.raises(TypeError, match="'v'"):
        stage({"v": value})
