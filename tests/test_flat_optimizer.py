"""FlatAdamW (grpo_train/flat_optimizer.py), the learner's optimizer at ZeRO-0, against torch's per-tensor AdamW with
`clip_grad_norm_`: the same steps over micro-batch folds, a few operations per step whatever the number of tensors,
fp32 master weights under bf16, a skipped non-finite step, and its state round trip."""

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grpo_train.flat_optimizer import FlatAdamW

ADAM = {"lr": 1e-2, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}


def model(layers: int = 3, dtype=torch.float32) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Linear(8, 8) for _ in range(layers)]).to(dtype)


def backward(net: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(5, 8, generator=g).to(next(net.parameters()).dtype)
    (net(x).float() ** 2).sum().mul(3.0).backward()


def test_steps_equal_per_tensor_adamw_with_clipping_over_micro_batches():
    net, ref = model(), model()
    flat = FlatAdamW(net.parameters(), **ADAM, max_grad_norm=0.5)
    plain = torch.optim.AdamW(ref.parameters(), **ADAM, foreach=False)
    assert all(p.untyped_storage().data_ptr() == flat.flat.untyped_storage().data_ptr() for p in net.parameters())
    for step in range(3):
        for micro in range(3):  # three folds: the first copies, the next add
            backward(net, 10 * step + micro)
            flat.fold()
            backward(ref, 10 * step + micro)
        norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5, foreach=False)
        flat.step()
        plain.step()
        plain.zero_grad()
        assert float(flat._global_grad_norm) == pytest.approx(float(norm), rel=1e-6)
        assert float(norm) > 0.5  # the clipping is in force
        for a, b in zip(net.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_step_dispatches_the_same_operations_at_any_depth(dtype):
    """A fold and a step cost a handful of operations on the flat buffer, not a few per tensor."""
    counts = []
    for layers in (2, 6):
        net = model(layers, dtype)
        flat = FlatAdamW(net.parameters(), **ADAM, max_grad_norm=1.0)
        backward(net, 0)
        flat.fold()
        flat.step()  # Adam's state is created in the first step
        backward(net, 1)
        with Ops() as ops:
            flat.fold()
            flat.step()
        counts.append(ops.count)
    assert counts[0] == counts[1] and counts[0] <= 12, counts  # profiler markers included


def test_bf16_weights_step_from_fp32_master_weights_and_sums():
    """bf16 weights, fp32 master: many small steps add up where bf16 weights alone would round each one away,
    and micro-batch gradients are summed in fp32."""
    net = model(1, torch.bfloat16)
    flat = FlatAdamW(net.parameters(), lr=1e-4, betas=(0.9, 0.99), eps=1e-8, weight_decay=0.0, max_grad_norm=0.0)
    assert flat.master.dtype == torch.float32 and flat.flat.dtype == torch.bfloat16
    start = flat.master.detach().clone()
    for step in range(20):
        backward(net, step)
        flat.fold()
        flat.step()
    moved = flat.master - start
    assert moved.abs().min() > 0  # every weight moved in fp32 (1e-4 per step is below bf16's resolution near 0.3)
    torch.testing.assert_close(flat.flat, flat.master.to(torch.bfloat16), rtol=0, atol=0)
    assert next(net.parameters()).data_ptr() == flat.flat.data_ptr()


def test_a_non_finite_gradient_skips_the_step_and_the_next_one_trains():
    net = model()
    flat = FlatAdamW(net.parameters(), **ADAM, max_grad_norm=1.0)
    before = flat.master.detach().clone()
    backward(net, 0)
    next(net.parameters()).grad[0, 0] = float("nan")
    flat.fold()
    flat.step()
    assert flat.overflow and torch.equal(flat.master, before)
    backward(net, 1)
    flat.fold()
    flat.step()
    assert not flat.overflow and not torch.equal(flat.master, before) and torch.isfinite(flat.master).all()


def test_state_round_trip_carries_the_master_weights():
    net = model(2, torch.bfloat16)
    flat = FlatAdamW(net.parameters(), **ADAM, max_grad_norm=1.0)
    for step in range(2):
        backward(net, step)
        flat.fold()
        flat.step()
    state = copy.deepcopy(flat.state_dict())
    other_net = model(2, torch.bfloat16)
    other = FlatAdamW(other_net.parameters(), **ADAM, max_grad_norm=1.0)
    other_net.load_state_dict(net.state_dict())
    other.load_state_dict(state)
    torch.testing.assert_close(other.master, flat.master, rtol=0, atol=0)
    for opt, n in ((flat, net), (other, other_net)):
        backward(n, 7)
        opt.fold()
        opt.step()
    torch.testing.assert_close(other.master, flat.master, rtol=0, atol=0)


def test_mixed_dtypes_are_refused():
    net = model(2)
    net[0].to(torch.bfloat16)
    with pytest.raises(ValueError, match="share one dtype"):
        FlatAdamW(net.parameters(), **ADAM, max_grad_norm=1.0)
