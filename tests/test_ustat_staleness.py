"""Stale tokens (grpo_train/ustat/staleness.py): the GRPO gradient's MSE at staleness k against the exact enumeration
of every group on the toy bandit with a delayed behaviour policy (issue #58 item 2)."""

import math

import pytest
import torch

from grpo_train.ustat.bandit import exact_components
from grpo_train.ustat.staleness import (
    TABLE_BUDGET,
    TABLE_STEP,
    WeightMoments,
    cap_bias_sq,
    delayed_theta,
    exact_stale_constants,
    exact_stale_mse,
    kish_ess,
    predicted_mse_ratio,
    stale_components,
    stale_prompt_moments,
    staleness_table,
    table_bandit,
    weight_moments,
)

CAPS = (None, 1.5, 1.2)


@pytest.fixture(scope="module")
def bandit():
    return table_bandit()


@pytest.fixture(scope="module")
def rows(bandit):
    settings = [(k, cap, g) for g in (2, 4) for k in (1, 2, 4) for cap in CAPS]
    return staleness_table(bandit, settings, TABLE_STEP, TABLE_BUDGET)


def _on_policy(bandit):
    return exact_components(bandit), float(bandit.prompt_gradients().square().sum(-1).mean())


# ---------------------------------------------------------------------------------------------------
# The weights, by hand
# ---------------------------------------------------------------------------------------------------
def test_kish_ess_by_hand():
    weights = torch.tensor([[1.0, 1.0, 1.0, 1.0], [2.0, 1.0, 1.0, 0.0], [3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0],
                            [0.5, 0.5, 0.5, 0.5]])
    # (2 + 1 + 1)^2 / (4 + 1 + 1) = 16 / 6; equal weights of any size give G; one weight gives 1; none gives 0
    torch.testing.assert_close(kish_ess(weights), torch.tensor([4.0, 16 / 6, 1.0, 0.0, 4.0]))


def test_weight_moments_by_hand():
    ratios = torch.tensor([0.5, 1.0, 2.5])
    capped = weight_moments(ratios, cap=2.0)
    assert capped.removed == pytest.approx(0.5 / 3)  # (2.5 - 2)_+ over three tokens
    assert capped.mean_sq == pytest.approx((0.25 + 1.0 + 4.0) / 3)
    assert capped.mean == pytest.approx(1 - 0.5 / 3)
    assert capped.ess_fraction == pytest.approx(capped.mean**2 / capped.mean_sq)
    uncapped = weight_moments(ratios, cap=None)
    assert uncapped.removed == 0.0 and uncapped.mean == 1.0
    assert uncapped.mean_sq == pytest.approx((0.25 + 1.0 + 6.25) / 3)


# ---------------------------------------------------------------------------------------------------
# No delay: nothing changes
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("cap", CAPS)
def test_no_delay_every_ratio_is_one_and_no_bias(bandit, cap):
    on_policy, grad_sq = _on_policy(bandit)
    exact = exact_stale_mse(bandit, bandit.theta, 4, cap)
    assert exact.weights == WeightMoments.on_policy()
    assert exact.bias_sq() < 1e-28
    assert exact.prompt_mse() == pytest.approx(on_policy.first_order / 4 + on_policy.second_order / 12, rel=1e-12)
    assert predicted_mse_ratio(on_policy.first_order, on_policy.second_order, grad_sq, exact.weights, 4) == 1.0
    stale = stale_components(on_policy, grad_sq, exact.weights)
    assert stale.components == on_policy and stale.bias_sq == 0.0
    assert stale.mse_ratio(on_policy, 4, TABLE_BUDGET) == 1.0
    assert stale.optimal_group_size() == on_policy.optimal_group_size()
    assert weight_moments(torch.ones(3, 8), cap) == WeightMoments.on_policy()


# ---------------------------------------------------------------------------------------------------
# The exact side: the stale estimator is the U-statistic of the weighted kernel
# ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("delay", "cap"), [(2, None), (4, 1.2)])
def test_stale_estimator_is_the_weighted_u_statistic(bandit, delay, cap):
    behaviour = delayed_theta(bandit, delay, TABLE_STEP)
    c2_k, c3_k, beta = exact_stale_constants(bandit, behaviour, cap)
    for group_size in (2, 3, 4):
        exact = exact_stale_mse(bandit, behaviour, group_size, cap)
        torch.testing.assert_close(exact.means - exact.grad_q, beta)
        law = beta.square().sum(-1) + c2_k / group_size + c3_k / (group_size * (group_size - 1))
        torch.testing.assert_close(exact.mse, law, rtol=1e-10, atol=0.0)
    if cap is None:  # uncapped: unbiased at any delay
        assert beta.abs().max() < 1e-12
    else:
        assert beta.square().sum(-1).min() > 1e-4


def test_stale_prompt_moments_estimate_the_exact_constants(bandit):
    # Monte Carlo: groups drawn from the delayed policy; the weighted kernel's U-statistics are unbiased for c2_k,
    # c3_k and beta, and cap_bias_sq for ||E_q beta||^2.
    behaviour, cap, group_size, groups = delayed_theta(bandit, 4, TABLE_STEP), 1.2, 4, 20000
    c2_k, c3_k, beta = exact_stale_constants(bandit, behaviour, cap)
    generator = torch.Generator().manual_seed(0)
    pi, mu = bandit.policy(), torch.softmax(bandit.features @ behaviour, dim=-1)
    num_prompts = pi.shape[0]
    prompts = torch.arange(num_prompts).repeat_interleave(groups)
    arms = torch.multinomial(mu[prompts], group_size, replacement=True, generator=generator)
    rows = prompts.unsqueeze(1)
    uniform = torch.rand(arms.shape, generator=generator, dtype=torch.float64)
    rewards = (uniform < bandit.success_prob[rows, arms]).to(torch.float64)
    moments, bias = stale_prompt_moments(rewards, bandit.scores()[rows, arms], (pi / mu)[rows, arms], cap)
    per_prompt = lambda x: x.view(num_prompts, groups, *x.shape[1:]).mean(1)  # noqa: E731
    torch.testing.assert_close(per_prompt(moments.first_order), c2_k, rtol=0.05, atol=0.0)
    torch.testing.assert_close(per_prompt(moments.second_order), c3_k, rtol=0.1, atol=0.0)
    torch.testing.assert_close(per_prompt(bias), beta, rtol=0.0, atol=0.15 * float(beta.norm(dim=-1).min()))
    # cap_bias_sq over sets of one group per prompt: unbiased for the mean of <beta(q), beta(q')> over pairs of
    # distinct prompts (= ||E_q beta(q)||^2 when the prompts are drawn i.i.d.; here they are the bandit's four)
    per_group = bias.view(num_prompts, groups, -1)
    pooled = sum(cap_bias_sq(per_group[:, i]) for i in range(groups)) / groups
    pairs = float((beta.sum(0).square().sum() - beta.square().sum()) / (num_prompts * (num_prompts - 1)))
    assert pooled == pytest.approx(pairs, rel=0.05)


# ---------------------------------------------------------------------------------------------------
# The prediction against the exact enumeration
# ---------------------------------------------------------------------------------------------------
def _row(rows, delay, cap, group_size):
    cap = math.inf if cap is None else cap
    return next(r for r in rows if (r["delay"], r["cap"], r["group_size"]) == (delay, cap, group_size))


@pytest.mark.parametrize("group_size", [2, 4])
@pytest.mark.parametrize("cap", CAPS)
@pytest.mark.parametrize("delay", [1, 2])
def test_prediction_within_ten_percent_at_small_delays(rows, delay, cap, group_size):
    row = _row(rows, delay, cap, group_size)
    assert row["predicted"] == pytest.approx(row["exact"], rel=0.10)
    assert row["minibatch_predicted"] == pytest.approx(row["minibatch_exact"], rel=0.10)


@pytest.mark.parametrize("group_size", [2, 4])
@pytest.mark.parametrize("cap", [1.5, 1.2])
def test_per_group_prediction_within_ten_percent_with_a_binding_cap_at_delay_four(rows, cap, group_size):
    row = _row(rows, 4, cap, group_size)
    assert row["removed"] > 0.2  # the cap binds: more than a fifth of the weight mass removed
    assert row["predicted"] == pytest.approx(row["exact"], rel=0.10)


def test_the_grid_exercises_what_it_claims(rows):
    binding = [r for r in rows if r["delay"] <= 2 and r["removed"] > 0.03]
    assert len(binding) >= 4  # binding caps inside the 10% regime
    assert max(r["exact"] for r in rows if r["delay"] <= 2) > 1.2  # an inflation well above the 10% band
    assert min(r["exact"] for r in rows if r["delay"] <= 2) < 0.9  # and a cap that lowers the MSE


def test_documented_limits_of_the_prediction(rows):
    # Outside the regime, as docs/u-statistics.md reports: uncapped at ESS / G ~ 0.54 the variance inflation is
    # underestimated; with rho > 0.2 the cap's bias is underestimated (the removed mass sits on high-advantage
    # outcomes), which dominates the minibatch MSE.
    for group_size in (2, 4):
        uncapped = _row(rows, 4, None, group_size)
        assert uncapped["ess_fraction"] < 0.6 and uncapped["predicted"] < 0.9 * uncapped["exact"]
        for cap in (1.5, 1.2):
            row = _row(rows, 4, cap, group_size)
            assert row["bias_predicted"] < 0.5 * row["bias_exact"]
            assert row["minibatch_predicted"] < 0.9 * row["minibatch_exact"]


@pytest.mark.parametrize("group_size", [2, 4])
@pytest.mark.parametrize("cap", [1.5, 1.2])
def test_minibatch_within_ten_percent_with_the_measured_bias(bandit, cap, group_size):
    on_policy, grad_sq = _on_policy(bandit)
    base = exact_stale_mse(bandit, bandit.theta, group_size, None)
    exact = exact_stale_mse(bandit, delayed_theta(bandit, 4, TABLE_STEP), group_size, cap)
    measured = float((exact.means - exact.grad_q).mean(0).square().sum())
    stale = stale_components(on_policy, grad_sq, exact.weights, bias_sq=measured)
    exact_ratio = exact.minibatch_mse(group_size, TABLE_BUDGET) / base.minibatch_mse(group_size, TABLE_BUDGET)
    assert stale.mse_ratio(on_policy, group_size, TABLE_BUDGET) == pytest.approx(exact_ratio, rel=0.10)


def test_stale_components_formulas(bandit):
    on_policy, grad_sq = _on_policy(bandit)
    weights = WeightMoments(removed=0.2, mean_sq=0.9)
    stale = stale_components(on_policy, grad_sq, weights)
    m1, m2 = 0.8, 0.9
    assert stale.components.between_prompt == pytest.approx(m1**2 * on_policy.between_prompt)
    assert stale.components.first_order == pytest.approx(m2 * on_policy.first_order + (m2 - m1**2) * grad_sq)
    assert stale.components.second_order == pytest.approx(m2 * on_policy.second_order - (m2 - m1**2) * grad_sq)
    assert stale.bias_sq == pytest.approx(0.04 * (grad_sq - on_policy.between_prompt))
    g_star = 1 + math.sqrt(stale.components.second_order / stale.components.between_prompt)
    assert stale.optimal_group_size() == pytest.approx(g_star)
