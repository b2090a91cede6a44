"""flops_per_step: FlopCounterMode on the meta device, checked against hand-computed counts."""

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402  (after the module skips without torch)
from torch.nn import functional as F  # noqa: E402  (after the module skips without torch)

from telemetry.torch import flops_per_step  # noqa: E402  (after the module skips without torch)

B, IN, HID, OUT = 4, 16, 32, 8


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(IN, HID), nn.ReLU(), nn.Linear(HID, OUT))


def linear_fwd(b: int, i: int, o: int) -> int:
    return 2 * b * i * o  # one multiply-add per (row, in, out)


def test_mlp_forward_backward_matches_hand_count() -> None:
    fwd = linear_fwd(B, IN, HID) + linear_fwd(B, HID, OUT)
    # Backward: every Linear computes its weight gradient (same FLOPs as its forward); the
    # input gradient is computed for the second Linear only, as the batch does not require grad.
    bwd = linear_fwd(B, IN, HID) + 2 * linear_fwd(B, HID, OUT)
    assert flops_per_step(mlp(), torch.randn(B, IN)) == fwd + bwd


def test_backward_is_twice_forward_when_inputs_require_grad() -> None:
    fwd = linear_fwd(B, IN, HID) + linear_fwd(B, HID, OUT)
    x = torch.randn(B, IN, requires_grad=True)
    assert flops_per_step(mlp(), x) == 3 * fwd


def test_forward_only_when_nothing_requires_grad() -> None:
    model = mlp().requires_grad_(False)
    assert flops_per_step(model, torch.randn(B, IN)) == linear_fwd(B, IN, HID) + linear_fwd(B, HID, OUT)


def test_meta_and_cpu_agree_on_matmul_models() -> None:
    model, x = mlp(), torch.randn(B, IN)
    assert flops_per_step(model, x, device="meta") == flops_per_step(model, x, device="cpu")


def test_model_and_inputs_are_not_modified() -> None:
    model, x = mlp(), torch.randn(B, IN)
    before = [p.detach().clone() for p in model.parameters()]
    flops_per_step(model, x)
    flops_per_step(model, x, device="cpu")
    assert all(p.grad is None for p in model.parameters())
    assert all(p.device.type == "cpu" for p in model.parameters())
    assert all(torch.equal(a, p) for a, p in zip(before, model.parameters()))
    assert x.device.type == "cpu" and x.grad is None


def test_batchnorm_running_stats_untouched() -> None:
    model = nn.Sequential(nn.Linear(IN, HID), nn.BatchNorm1d(HID))
    stats = model[1].running_mean.clone()
    flops_per_step(model, torch.randn(B, IN), device="cpu")
    assert torch.equal(model[1].running_mean, stats)


class Attention(nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(x).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def test_attention_counted_on_meta_but_not_on_cpu() -> None:
    """The caveat the default device exists for (torch 2.13): SDPA's CPU kernel has no formula."""
    b, s, d, h = 2, 8, 64, 4
    model, x = Attention(d, h), torch.randn(b, s, d)
    projection = linear_fwd(b * s, d, 3 * d) * 2  # forward + weight gradient (x needs no grad)
    attention_fwd = 2 * (2 * b * h * s * s * (d // h))  # Q @ K^T and P @ V, causal not discounted
    on_meta = flops_per_step(model, x)
    on_cpu = flops_per_step(model, x, device="cpu")
    assert on_cpu == projection  # attention counted as 0
    assert on_meta == projection + 3 * attention_fwd  # backward of the two bmms = 2x forward


def test_dict_inputs_and_loss_fn_with_targets_on_output_device() -> None:
    class Model(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(50, IN)
            self.head = nn.Linear(IN, 50)

        def forward(self, tokens):
            return self.head(self.emb(tokens))

    tokens = torch.randint(0, 50, (B, 6))

    def loss_fn(logits):
        targets = torch.zeros(logits.shape[0] * logits.shape[1], dtype=torch.long, device=logits.device)
        return F.cross_entropy(logits.flatten(0, 1), targets)

    got = flops_per_step(Model(), {"tokens": tokens}, loss_fn=loss_fn)
    # head forward + weight grad + input grad (the embedding output requires grad)
    assert got == 3 * linear_fwd(B * 6, IN, 50)


def test_tied_weights_stay_tied() -> None:
    emb = nn.Embedding(20, IN)
    head = nn.Linear(IN, 20, bias=False)
    head.weight = emb.weight
    model = nn.Sequential(emb, head)
    assert flops_per_step(model, torch.randint(0, 20, (B, 3))) == 3 * linear_fwd(B * 3, IN, 20)


def test_meta_incompatible_model_gets_a_clear_error() -> None:
    class DataDependent(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = nn.Linear(IN, OUT)

        def forward(self, x):
            return self.lin(x) * float(x.abs().max().item())

    with pytest.raises(NotImplementedError, match="device='cpu'"):
        flops_per_step(DataDependent(), torch.randn(B, IN))
    assert flops_per_step(DataDependent(), torch.randn(B, IN), device="cpu") > 0
