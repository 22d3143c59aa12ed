"""GRPO loss math on CPU: advantages, KL estimators, the clipped surrogate, and the paper's Lemma 1."""

import math
from itertools import combinations

import pytest
import torch

from grpo_train.algorithms import (
    LOG_RATIO_CLAMP,
    LossSpec,
    agg_loss,
    group_advantages,
    kl_estimate,
    policy_loss,
    zero_variance_fraction,
)

# ---------------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------------
# Three groups of G = 4:
#   [1, 0, 0, 0]: mean 0.25, centred [0.75, -0.25, -0.25, -0.25], unbiased var (0.5625 + 3 * 0.0625) / 3
#                 = 0.25, std 0.5 -> grpo [1.5, -0.5, -0.5, -0.5];
#                 rloo = 4/3 * centred = [1, -1/3, -1/3, -1/3]
#                 (1 - mean(0, 0, 0) = 1 and 0 - mean(1, 0, 0) = -1/3)
#   [1, 1, 1, 1]: all equal -> 0 in every centred mode
#   [0, 1, 1, 0]: mean 0.5, centred [-0.5, 0.5, 0.5, -0.5], unbiased std sqrt(1 / 3) = 0.57735
#                 -> grpo +-0.866025; rloo +-2/3 (0 - mean(1, 1, 0) = -2/3)
WORKED_REWARDS = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0])
WORKED_EXPECTED = {
    "grpo": [1.5, -0.5, -0.5, -0.5, 0, 0, 0, 0, -0.866025, 0.866025, 0.866025, -0.866025],
    "dr_grpo": [0.75, -0.25, -0.25, -0.25, 0, 0, 0, 0, -0.5, 0.5, 0.5, -0.5],
    "rloo": [1, -1 / 3, -1 / 3, -1 / 3, 0, 0, 0, 0, -2 / 3, 2 / 3, 2 / 3, -2 / 3],
    "none": [1, 0, 0, 0, 1, 1, 1, 1, 0, 1, 1, 0],
}


@pytest.mark.parametrize("mode", list(WORKED_EXPECTED))
def test_group_advantages_worked_example(mode):
    advantages = group_advantages(WORKED_REWARDS, 4, mode, 1e-6)
    assert advantages.shape == (12,)
    torch.testing.assert_close(
        advantages, torch.tensor(WORKED_EXPECTED[mode], dtype=torch.float32), atol=1e-5, rtol=0
    )


def test_group_advantages_group_of_two():
    # [1, 0]: unbiased std sqrt(0.5) -> grpo +-0.5 / 0.7071 = +-0.7071; dr +-0.5; rloo 1 - 0 = 1, 0 - 1 = -1.
    # [0.5, 0.5]: all equal -> 0.  [0.2, 0.8]: centred -+0.3, std sqrt(0.18) = 0.4243 -> grpo -+0.7071;
    # rloo 0.2 - 0.8 = -0.6 and +0.6.
    rewards = torch.tensor([1.0, 0.0, 0.5, 0.5, 0.2, 0.8])
    expected = {
        "grpo": [0.707107, -0.707107, 0, 0, -0.707107, 0.707107],
        "dr_grpo": [0.5, -0.5, 0, 0, -0.3, 0.3],
        "rloo": [1, -1, 0, 0, -0.6, 0.6],
        "none": [1, 0, 0.5, 0.5, 0.2, 0.8],
    }
    for mode, values in expected.items():
        torch.testing.assert_close(
            group_advantages(rewards, 2, mode, 1e-6), torch.tensor(values), atol=1e-5, rtol=0
        )


def test_all_equal_groups_get_zero_not_nan_even_without_eps():
    # eps = 0 makes (r - mean) / std a 0 / 0 for the flat group; it must still come out as exactly 0.
    rewards = torch.tensor([0.3, 0.3, 0.3, 1.0, 0.0, 0.0])
    advantages = group_advantages(rewards, 3, "grpo", 0.0)
    assert torch.isfinite(advantages).all()
    assert advantages[:3].eq(0).all()
    assert zero_variance_fraction(rewards, 3).item() == 0.5
    assert zero_variance_fraction(WORKED_REWARDS, 4).item() == pytest.approx(1 / 3)


def test_rloo_is_leave_one_out_and_scaled_group_mean():
    generator = torch.Generator().manual_seed(0)
    group_size = 5
    rewards = torch.rand(4 * group_size, generator=generator, dtype=torch.float64)
    rloo = group_advantages(rewards, group_size, "rloo", 1e-6)
    groups = rewards.view(-1, group_size)
    loop = torch.tensor(
        [[g[i] - (g.sum() - g[i]) / (group_size - 1) for i in range(group_size)] for g in groups],
        dtype=torch.float64,
    ).flatten()
    torch.testing.assert_close(rloo, loop)
    centred = group_advantages(rewards, group_size, "dr_grpo", 1e-6)
    torch.testing.assert_close(rloo, centred * group_size / (group_size - 1))
    # grpo = centred / (unbiased std + eps)
    std = groups.std(dim=1, unbiased=True).repeat_interleave(group_size)
    torch.testing.assert_close(group_advantages(rewards, group_size, "grpo", 1e-3), centred / (std + 1e-3))


def test_group_advantages_rejects_bad_input():
    with pytest.raises(ValueError, match="multiple of 4"):
        group_advantages(torch.zeros(6), 4, "grpo", 1e-6)
    with pytest.raises(ValueError, match="unknown advantage mode"):
        group_advantages(torch.zeros(4), 4, "ppo", 1e-6)
    with pytest.raises(ValueError, match="group_size >= 2"):
        group_advantages(torch.zeros(4), 1, "rloo", 1e-6)


# ---------------------------------------------------------------------------------------------------
# KL estimators
# ---------------------------------------------------------------------------------------------------
def test_kl_estimators_worked_example():
    # pi = 0.5, pi_ref = 0.25: x = log(pi_ref / pi) = -ln 2 = -0.693147
    # k1 = 0.693147, k2 = 0.5 * 0.480453 = 0.240227, k3 = 0.5 + 0.693147 - 1 = 0.193147
    logp, ref_logp = torch.tensor([math.log(0.5)]), torch.tensor([math.log(0.25)])
    assert kl_estimate(logp, ref_logp, "k1").item() == pytest.approx(0.693147, abs=1e-6)
    assert kl_estimate(logp, ref_logp, "k2").item() == pytest.approx(0.240227, abs=1e-6)
    assert kl_estimate(logp, ref_logp, "k3").item() == pytest.approx(0.193147, abs=1e-6)
    with pytest.raises(ValueError, match="unknown KL estimator"):
        kl_estimate(logp, ref_logp, "k4")


@pytest.mark.parametrize("kind", ["k1", "k3"])
def test_unbiased_kl_estimators_match_exact_kl_by_monte_carlo(kind):
    generator = torch.Generator().manual_seed(0)
    pi_logits = torch.tensor([1.0, 0.2, -0.5, 0.0, -1.5], dtype=torch.float64)
    ref_logits = torch.tensor([0.3, 0.6, -0.2, -0.8, 0.1], dtype=torch.float64)
    log_pi, log_ref = pi_logits.log_softmax(0), ref_logits.log_softmax(0)
    exact = (log_pi.exp() * (log_pi - log_ref)).sum().item()  # KL(pi || ref) ~ 0.33
    samples = torch.multinomial(log_pi.exp(), 200_000, replacement=True, generator=generator)
    estimates = kl_estimate(log_pi[samples], log_ref[samples], kind)
    standard_error = estimates.std().item() / math.sqrt(samples.numel())
    assert abs(estimates.mean().item() - exact) < 3 * standard_error
    if kind == "k3":
        # and k3 is the low-variance one: its spread is smaller than k1's on the same samples
        assert estimates.std() < kl_estimate(log_pi[samples], log_ref[samples], "k1").std()


def test_k3_is_nonnegative_finite_and_fp32():
    generator = torch.Generator().manual_seed(1)
    logp = torch.randn(4, 50, generator=generator) * 5
    ref_logp = torch.randn(4, 50, generator=generator) * 5
    logp[0, 0], ref_logp[0, 0] = -1000.0, 0.0  # log-ratio +1000: exp would overflow without the clamp
    logp[0, 1], ref_logp[0, 1] = 0.0, -1000.0  # log-ratio -1000
    k3 = kl_estimate(logp.bfloat16(), ref_logp.bfloat16(), "k3")
    assert k3.dtype == torch.float32
    assert torch.isfinite(k3).all() and (k3 >= 0).all()
    # saturates at the documented bound: exp(20) - 20 - 1
    assert k3[0, 0].item() == pytest.approx(math.exp(LOG_RATIO_CLAMP) - LOG_RATIO_CLAMP - 1, rel=1e-6)


# ---------------------------------------------------------------------------------------------------
# Clipped surrogate
# ---------------------------------------------------------------------------------------------------
def leaf_logp(old_logp: torch.Tensor, ratios: list[list[float]]) -> torch.Tensor:
    """logp = old_logp + log(ratio), as a leaf so d loss / d logp can be read off."""
    return (old_logp + torch.tensor(ratios, dtype=torch.float64).log()).requires_grad_()


def test_clipped_surrogate_worked_example_and_zero_gradient_where_clipped():
    # clip_low 0.2, clip_high 0.28 (clip-higher). Per token: loss = -min(rho A, clip(rho, 0.8, 1.28) A);
    # where the unclipped term is the min, d loss / d logp = -rho A.
    #   seq 0, A = +2: rho 1.5 > 1.28 -> -min(3.0, 2.56) = -2.56, clipped, grad 0
    #                  rho 1.1        -> -2.2, grad -2.2
    #   seq 1, A = -1: rho 0.5 < 0.8  -> -min(-0.5, -0.8) = 0.8, clipped, grad 0
    #                  rho 1.5        -> -min(-1.5, -1.28) = 1.5, grad +1.5 (no upper clip for A < 0)
    #   seq 2, A = +1: rho 0.5        -> -min(0.5, 0.8) = -0.5, grad -0.5 (no lower clip for A > 0)
    #                  padding, with a log-ratio of 1e4 that must not leak inf/NaN
    old_logp = torch.full((3, 2), -1.0, dtype=torch.float64)
    logp = leaf_logp(old_logp, [[1.5, 1.1], [0.5, 1.5], [0.5, 1.0]])
    with torch.no_grad():
        logp[2, 1] = 1e4
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    advantages = torch.tensor([2.0, -1.0, 1.0], dtype=torch.float64)
    loss, stats, _ = policy_loss(logp, old_logp, advantages, mask, LossSpec(clip_low=0.2, clip_high=0.28))
    torch.testing.assert_close(
        loss, torch.tensor([[-2.56, -2.2], [0.8, 1.5], [-0.5, 0.0]], dtype=torch.float64)
    )
    loss.sum().backward()
    torch.testing.assert_close(
        logp.grad, torch.tensor([[0.0, -2.2], [0.0, 1.5], [-0.5, 0.0]], dtype=torch.float64)
    )
    # 5 valid tokens: one clipped high, one clipped low; mean ratio (1.5 + 1.1 + 0.5 + 1.5 + 0.5) / 5 = 1.02
    assert stats["clip_frac_high"].item() == pytest.approx(0.2)
    assert stats["clip_frac_low"].item() == pytest.approx(0.2)
    assert stats["ratio_mean"].item() == pytest.approx(1.02)
    assert all(value.dim() == 0 and not value.requires_grad for value in stats.values())


def test_dual_clip_caps_the_loss_of_negative_advantages():
    # dual_clip c = 3, clip 0.2 both sides:
    #   A = -1, rho 4: -min(-4, -1.2) = 4 > c = 3 -> capped at 3, grad 0
    #   A = -1, rho 2: 2 < 3 -> stays 2, grad -rho A = 2
    #   A = +1, rho 4: -min(4, 1.2) = -1.2, the usual upper clip; dual-clip only touches A < 0
    old_logp = torch.zeros(3, 1, dtype=torch.float64)
    logp = leaf_logp(old_logp, [[4.0], [2.0], [4.0]])
    advantages = torch.tensor([-1.0, -1.0, 1.0], dtype=torch.float64)
    loss, stats, _ = policy_loss(logp, old_logp, advantages, torch.ones(3, 1), LossSpec(dual_clip=3.0))
    torch.testing.assert_close(loss, torch.tensor([[3.0], [2.0], [-1.2]], dtype=torch.float64))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[0.0], [2.0], [0.0]], dtype=torch.float64))
    assert stats["dual_clip_frac"].item() == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="dual_clip"):
        policy_loss(logp, old_logp, advantages, torch.ones(3, 1), LossSpec(dual_clip=1.0))


def test_truncated_importance_weight_and_kl_term():
    # Two tokens, A = +1, rho = 1.1 -> pg = -1.1, d pg / d logp = -1.1.
    # TIS weights min(pi_old / pi_sampler, 2): token 0 ratio 3 -> 2, token 1 ratio 0.5 -> 0.5 (mean 1.25).
    # KL (k3) with kl_coef 0.1: pi = 0.5 * 1.1 = 0.55 vs pi_ref = 0.25 -> x = ln(0.25 / 0.55) = -0.788457,
    #   k3 = 0.454545 + 0.788457 - 1 = 0.243003, d k3 / d logp = 1 - pi_ref / pi = 0.545455.
    # loss = w * (-1.1) + 0.1 * 0.243003: [-2.2 + 0.0243003, -0.55 + 0.0243003]
    # grad = w * (-1.1) + 0.1 * 0.545455:  [-2.2 + 0.0545455, -0.55 + 0.0545455]
    old_logp = torch.full((1, 2), math.log(0.5), dtype=torch.float64)
    logp = leaf_logp(old_logp, [[1.1, 1.1]])
    sampler_logp = old_logp - torch.tensor([[math.log(3.0), math.log(0.5)]], dtype=torch.float64)
    ref_logp = torch.full((1, 2), math.log(0.25), dtype=torch.float64)
    entropy = torch.tensor([[0.7, 0.3]], dtype=torch.float64)
    loss, stats, weight = policy_loss(
        logp,
        old_logp,
        torch.tensor([1.0], dtype=torch.float64),
        torch.ones(1, 2),
        LossSpec(kl_coef=0.1, kl_ratio_correction=False, tis_cap=2.0),
        ref_logp=ref_logp,
        sampler_logp=sampler_logp,
        entropy=entropy,
    )
    torch.testing.assert_close(loss, torch.tensor([[-2.1756997, -0.5256997]], dtype=torch.float64))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.1454545, -0.4954545]], dtype=torch.float64))
    assert stats["tis_weight_mean"].item() == pytest.approx(1.25)
    torch.testing.assert_close(weight, torch.tensor([[2.0, 0.5]], dtype=torch.float64))  # the TIS weights it applied
    assert stats["kl"].item() == pytest.approx(0.243003, abs=1e-6)
    assert stats["entropy"].item() == pytest.approx(0.5)
    with pytest.raises(ValueError, match="sampler_logp"):
        policy_loss(logp, old_logp, torch.tensor([1.0]), torch.ones(1, 2), LossSpec(tis_cap=2.0))


# ---------------------------------------------------------------------------------------------------
# Lemma 1 of the U-statistic paper, with autograd on a small categorical policy
# ---------------------------------------------------------------------------------------------------
def test_leave_one_out_gradient_is_the_u_statistic():
    generator = torch.Generator().manual_seed(0)
    num_arms, group_size = 5, 6
    theta = torch.randn(num_arms, generator=generator, dtype=torch.float64, requires_grad=True)
    outputs = torch.multinomial(theta.detach().softmax(0), group_size, replacement=True, generator=generator)
    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 0.25], dtype=torch.float64)
    logp = theta.log_softmax(0)[outputs]  # [G]
    scores = torch.stack(
        [torch.autograd.grad(logp[i], theta, retain_graph=True)[0] for i in range(group_size)]
    )

    leave_one_out = (
        sum(
            (rewards[i] - (rewards.sum() - rewards[i]) / (group_size - 1)) * scores[i]
            for i in range(group_size)
        )
        / group_size
    )
    u_statistic = sum(
        0.5 * (rewards[i] - rewards[j]) * (scores[i] - scores[j])
        for i, j in combinations(range(group_size), 2)
    ) / math.comb(group_size, 2)
    torch.testing.assert_close(leave_one_out, u_statistic, atol=1e-6, rtol=0)

    # The trainer's advantages give the same gradients through autograd:
    # grad of (1/G) sum_i A_i log pi(o_i) with rloo advantages is the U-statistic ...
    rloo = group_advantages(rewards, group_size, "rloo", 1e-6)
    (rloo_gradient,) = torch.autograd.grad((rloo * logp).mean(), theta, retain_graph=True)
    torch.testing.assert_close(rloo_gradient, u_statistic, atol=1e-6, rtol=0)
    # ... and with group-mean-centred advantages it is (G - 1) / G times it.
    centred = group_advantages(rewards, group_size, "dr_grpo", 1e-6)
    (mean_gradient,) = torch.autograd.grad((centred * logp).mean(), theta, retain_graph=True)
    torch.testing.assert_close(mean_gradient, (group_size - 1) / group_size * u_statistic, atol=1e-6, rtol=0)

    # The full loss path at ratio 1 (first step on fresh rollouts): clipped surrogate, one token per
    # completion, aggregated per sequence -> its negative gradient is the U-statistic again.
    per_token, _, _ = policy_loss(
        logp.unsqueeze(1), logp.detach().unsqueeze(1), rloo, torch.ones(group_size, 1), LossSpec()
    )
    loss = agg_loss(per_token, torch.ones(group_size, 1), "seq_mean_token_mean", group_size)
    (loss_gradient,) = torch.autograd.grad(loss, theta)
    torch.testing.assert_close(-loss_gradient, u_statistic, atol=1e-6, rtol=0)
