"""The U-statistic analysis on the toy bandit: exact formulas, Monte-Carlo MSE of the three estimators
(paper Corollaries 4 and 5) and the group-size advisor (Proposition 3, Theorem 7)."""

import math
from itertools import pairwise, permutations

import pytest
import torch

from grpo_train.ustat.bandit import (
    GROUP_SIZES,
    exact_components,
    exact_estimator_mse,
    make_toy_bandit,
    monte_carlo_estimator_mse,
    monte_carlo_minibatch_mse,
    sample_groups,
)
from grpo_train.ustat.estimators import (
    VarianceComponents,
    best_group_size,
    estimate_variance_components,
    gradient_estimates,
    u_statistic_pairs,
)

BUDGET = 64  # samples per step N = B G; B = 32 prompts at G = 2 down to 1 prompt at G = 64


@pytest.fixture(scope="module")
def bandit():
    return make_toy_bandit()


def test_grpo_estimate_is_the_pairwise_u_statistic(bandit):
    generator = torch.Generator().manual_seed(0)
    prompts = torch.tensor([0, 3, 5])
    rewards, scores = sample_groups(bandit, prompts, 7, generator)
    grpo = gradient_estimates(rewards, scores, bandit.values()[prompts])["grpo"]
    for row in range(3):
        torch.testing.assert_close(grpo[row], u_statistic_pairs(rewards[row], scores[row]))


def test_exact_mse_formulas_match_enumeration_of_all_groups_of_three(bandit):
    # Theorem 2 checked without Hoeffding: enumerate every group (z_1, z_2, z_3) of outcomes z = (arm, r),
    # weight its squared error by its probability, and compare with c2 / G + c3 / (G (G - 1)) etc.
    group_size = 3
    pi, mu = bandit.policy(), bandit.success_prob
    probs = torch.cat([pi * (1 - mu), pi * mu], dim=1)  # [P, 2K]: reward 0 outcomes, then reward 1
    num_outcomes = probs.shape[1]
    rewards = (torch.arange(num_outcomes) >= num_outcomes // 2).to(torch.float64)  # [2K]
    scores = bandit.scores().repeat(1, 2, 1)  # [P, 2K, D]
    groups = torch.cartesian_prod(*[torch.arange(num_outcomes)] * group_size)  # [M^3, 3]
    total = {"vanilla": 0.0, "grpo": 0.0, "oracle": 0.0}
    for prompt in range(probs.shape[0]):
        weight = probs[prompt][groups].prod(dim=1)  # [M^3]
        values = bandit.values()[prompt].expand(groups.shape[0])
        estimates = gradient_estimates(rewards[groups], scores[prompt][groups], values)
        for name, estimate in estimates.items():
            error = (estimate - bandit.prompt_gradients()[prompt]).square().sum(-1)
            total[name] += float((weight * error).sum()) / probs.shape[0]
    exact = exact_estimator_mse(bandit, group_size)
    for name in total:
        assert exact[name] == pytest.approx(total[name], rel=1e-9)


def test_estimator_mse_ordering_and_oracle_property(bandit):
    # Paper Fig. 4 on the toy bandit: for every G, vanilla > GRPO-type > oracle (Corollary 5), and
    # GRPO / oracle = 1 + c3 / (c2 (G - 1)) falls toward 1 (Corollary 4): exact values ~1.93, 1.31, 1.13,
    # 1.06, 1.03, 1.01 for G = 2 ... 64.
    mse = monte_carlo_estimator_mse(bandit, GROUP_SIZES, groups_per_prompt=2000, seed=0)
    ratios = [g / o for g, o in zip(mse["grpo"], mse["oracle"], strict=True)]
    for index, group_size in enumerate(GROUP_SIZES):
        assert mse["vanilla"][index] > mse["grpo"][index] > mse["oracle"][index], group_size
        exact = exact_estimator_mse(bandit, group_size)
        for name in mse:
            assert mse[name][index] == pytest.approx(exact[name], rel=0.06), (name, group_size)
    assert all(later < earlier for earlier, later in pairwise(ratios)), ratios
    assert ratios[0] > 1.5 and ratios[-1] < 1.05


def average(terms) -> torch.Tensor:
    terms = list(terms)
    return sum(terms) / len(terms)


def brute_force_components(rewards: torch.Tensor, scores: torch.Tensor) -> VarianceComponents:
    """The advisor's U-statistics written as explicit averages over distinct index tuples."""
    num_prompts, group_size = rewards.shape
    zeta1, zeta2, grad_sq, u_stats = [], [], [], []
    for r, s in zip(rewards, scores, strict=True):

        def h(i, j, r=r, s=s):
            return 0.5 * (r[i] - r[j]) * (s[i] - s[j])

        kernel_sq = average(h(i, j).square().sum() for i, j in permutations(range(group_size), 2))
        overlap = average(h(i, j) @ h(i, k) for i, j, k in permutations(range(group_size), 3))
        disjoint = average(h(i, j) @ h(k, m) for i, j, k, m in permutations(range(group_size), 4))
        zeta1.append(overlap - disjoint)
        zeta2.append(kernel_sq - disjoint)
        grad_sq.append(disjoint)
        u_stats.append(average(h(i, j) for i, j in permutations(range(group_size), 2)))
    cross = average(u_stats[a] @ u_stats[b] for a, b in permutations(range(num_prompts), 2))
    return VarianceComponents(
        between_prompt=float(average(grad_sq) - cross),
        first_order=float(average(4 * z for z in zeta1)),
        second_order=float(average(2 * (z2 - 2 * z1) for z1, z2 in zip(zeta1, zeta2, strict=True))),
    )


def test_advisor_sums_match_brute_force():
    generator = torch.Generator().manual_seed(0)
    rewards = torch.rand(3, 5, generator=generator, dtype=torch.float64)
    scores = torch.randn(3, 5, 2, generator=generator, dtype=torch.float64)
    fast, slow = estimate_variance_components(rewards, scores), brute_force_components(rewards, scores)
    for name in ("between_prompt", "first_order", "second_order"):
        assert getattr(fast, name) == pytest.approx(getattr(slow, name), rel=1e-9, abs=1e-12)
    with pytest.raises(ValueError, match="at least 2 prompts with 4"):
        estimate_variance_components(rewards[:, :3], scores[:, :3])


def test_optimal_group_size_formula_and_universality():
    components = VarianceComponents(between_prompt=0.01, first_order=0.5, second_order=0.49)
    # G* = 1 + sqrt(0.49 / 0.01) = 8, whatever the budget
    assert components.optimal_group_size() == pytest.approx(8.0)
    fine_grid = [2 + k / 100 for k in range(6200)]
    for budget in (64, 1024, 8192):
        assert min(fine_grid, key=lambda g: components.minibatch_mse(g, budget)) == pytest.approx(
            8.0, abs=0.01
        )
        assert best_group_size(components, GROUP_SIZES, budget) == 8
    assert VarianceComponents(0.0, 0.5, 0.49).optimal_group_size() == math.inf


def test_group_size_advisor_predicts_monte_carlo_mse(bandit):
    # Exact components of the default bandit: c1 = 0.0124, c2 = 0.554, c3 = 0.516
    # -> G* = 1 + sqrt(41.5) = 7.4, so 8 is the best of the grid.
    exact = exact_components(bandit)
    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(bandit.features.shape[0], (2048,), generator=generator)
    estimated = estimate_variance_components(*sample_groups(bandit, prompts, max(GROUP_SIZES), generator))
    assert estimated.between_prompt == pytest.approx(exact.between_prompt, rel=0.15)
    assert estimated.first_order == pytest.approx(exact.first_order, rel=0.05)
    assert estimated.second_order == pytest.approx(exact.second_order, rel=0.05)

    simulated = monte_carlo_minibatch_mse(bandit, BUDGET, GROUP_SIZES, num_steps=4000, seed=2)
    for group_size, value in zip(GROUP_SIZES, simulated, strict=True):
        assert exact.minibatch_mse(group_size, BUDGET) == pytest.approx(value, rel=0.05), group_size
        assert estimated.minibatch_mse(group_size, BUDGET) == pytest.approx(value, rel=0.15), group_size
    empirical_best = simulated.index(min(simulated))
    predicted_best = GROUP_SIZES.index(best_group_size(estimated, GROUP_SIZES, BUDGET))
    assert abs(predicted_best - empirical_best) <= 1
    assert 4 < estimated.optimal_group_size() < 16
