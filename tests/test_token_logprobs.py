"""Token log-probs and entropy from logits, chunk by chunk (logprob_kernels.token_logprobs_from_logits)."""

import math

import pytest
import torch

from grpo_train import logprob_kernels
from grpo_train.logprob_kernels import token_logprobs_from_logits


def test_worked_example_values_and_gradient():
    # logits [0, ln 3]: softmax [1/4, 3/4]. Token 1: logp = ln 0.75 = -0.287682;
    # entropy = -(0.25 ln 0.25 + 0.75 ln 0.75) = 0.346574 + 0.215762 = 0.562335;
    # d logp / d logits = onehot(1) - softmax = [-0.25, 0.25].
    logits = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)
    logp, entropy = token_logprobs_from_logits(logits, torch.tensor([1]), with_entropy=True)
    assert logp.item() == pytest.approx(-0.287682, abs=1e-6)
    assert entropy.item() == pytest.approx(0.562335, abs=1e-6)
    assert not entropy.requires_grad  # only logged
    logp.sum().backward()
    torch.testing.assert_close(logits.grad, torch.tensor([[-0.25, 0.25]]))


def test_worked_example_at_temperature_two():
    # logits / 2 = [0, ln 3 / 2]: softmax [1, sqrt 3] / (1 + sqrt 3) = [0.366025, 0.633975].
    # Token 0: logp = ln 0.366025 = -1.005053; its gradient is (onehot(0) - softmax) / 2 = [0.316987, -0.316987].
    logits = torch.tensor([[0.0, math.log(3.0)]], requires_grad=True)
    logp, entropy = token_logprobs_from_logits(logits, torch.tensor([0]), temperature=2.0)
    assert entropy is None
    assert logp.item() == pytest.approx(-1.005053, abs=1e-6)
    logp.sum().backward()
    torch.testing.assert_close(logits.grad, torch.tensor([[0.316987, -0.316987]]))


@pytest.mark.parametrize("chunk_rows", [4, 15])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_equals_the_full_log_softmax_across_chunk_boundaries(monkeypatch, dtype, temperature, chunk_rows):
    # 3 x 5 = 15 rows of 1000 logits in chunks of 4 rows: three full chunks and a remainder of 3; or in one chunk
    # (whose gradient is returned as it is, in the logits' dtype)
    monkeypatch.setattr(logprob_kernels, "CHUNK_ELEMENTS", chunk_rows * 1000)
    generator = torch.Generator().manual_seed(0)
    logits = (3 * torch.randn(3, 5, 1000, generator=generator)).to(dtype).requires_grad_()
    tokens = torch.randint(0, 1000, (3, 5), generator=generator)
    upstream = torch.randn(3, 5, generator=generator)  # a loss that weights every token differently

    log_probs = torch.log_softmax(logits.float() / temperature, -1)
    ref_logp = log_probs.gather(-1, tokens[..., None]).squeeze(-1)
    ref_entropy = -(log_probs.exp() * log_probs).sum(-1)
    (ref_grad,) = torch.autograd.grad((ref_logp * upstream).sum(), logits)

    logp, entropy = token_logprobs_from_logits(logits, tokens, temperature, with_entropy=True)
    (grad,) = torch.autograd.grad((logp * upstream).sum(), logits)

    assert logp.dtype == entropy.dtype == torch.float32 and logp.shape == tokens.shape
    torch.testing.assert_close(logp, ref_logp, atol=2e-5, rtol=1e-6)
    torch.testing.assert_close(entropy, ref_entropy.detach(), atol=2e-5, rtol=1e-6)
    assert grad.dtype == dtype
    # bf16 gradients: both round the same fp32 values to bf16, so they agree to bf16's last bit at most
    tolerance = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-4, "rtol": 8e-3}
    torch.testing.assert_close(grad.float(), ref_grad.float(), **tolerance)


def test_non_contiguous_logits_as_the_learner_slices_them():
    # The unshared forward keeps the logits of positions [:, :-1]: a strided view.
    generator = torch.Generator().manual_seed(1)
    full = torch.randn(4, 7, 50, generator=generator)
    logits, tokens = full[:, :-1], torch.randint(0, 50, (4, 6), generator=generator)
    logp, _ = token_logprobs_from_logits(logits, tokens)
    expected = torch.log_softmax(logits, -1).gather(-1, tokens[..., None]).squeeze(-1)
    torch.testing.assert_close(logp, expected)
