"""The toy contextual bandit on which the U-statistic analysis (grpo_train/ustat/estimators.py) is checked exactly.

The toy problem is a contextual bandit: P prompts, K arms, features phi(q, a) in R^D, a softmax policy
pi(a | q) = softmax_a(phi(q, a) . theta), and Bernoulli rewards with P(r = 1 | q, a) = mu(q, a). Its
outcomes z = (a, r) are finite, so c1, c2, c3 and each estimator's MSE are computed exactly by enumeration,
and the Monte-Carlo MSEs and the advisor's estimates can be checked against them (tests/test_analysis*.py).

Run the toy study: python -m grpo_train.ustat.bandit
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_train.ustat.estimators import (
    VarianceComponents,
    best_group_size,
    estimate_variance_components,
    gradient_estimates,
)

GROUP_SIZES = (2, 4, 8, 16, 32, 64)


# ---------------------------------------------------------------------------------------------------
# The toy contextual bandit
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ToyBandit:
    features: Tensor  # [P, K, D] phi(q, a)
    success_prob: Tensor  # [P, K] mu(q, a) = P(r = 1 | q, a)
    theta: Tensor  # [D] policy parameters

    def policy(self) -> Tensor:
        """[P, K] pi(a | q)."""
        return torch.softmax(self.features @ self.theta, dim=-1)

    def scores(self) -> Tensor:
        """[P, K, D] grad_theta log pi(a | q) = phi(q, a) - E_pi phi(q, .)."""
        mean_feature = torch.einsum("pk,pkd->pd", self.policy(), self.features)
        return self.features - mean_feature.unsqueeze(1)

    def values(self) -> Tensor:
        """[P] V(q) = E_pi[r | q]."""
        return (self.policy() * self.success_prob).sum(dim=-1)

    def prompt_gradients(self) -> Tensor:
        """[P, D] grad J(q) = E_pi[r s | q]."""
        return torch.einsum("pk,pkd->pd", self.policy() * self.success_prob, self.scores())


def make_toy_bandit(
    num_prompts: int = 8,
    num_arms: int = 6,
    dim: int = 6,
    prompt_spread: float = 0.3,
    success_bias: float = 1.0,
    seed: int = 0,
) -> ToyBandit:
    """A random bandit in float64. Prompts share one table of arm features and success logits and add their
    own perturbation of size prompt_spread: a small spread makes the prompts' gradients alike (small c1,
    large G*), a large one makes them differ. success_bias > 0 makes the policy succeed more often
    (V ~ 0.75 at the default, a "strong model"), which is where a baseline matters most.
    The defaults give G* = 1 + sqrt(c3 / c1) ~ 7.4, inside the grid GROUP_SIZES."""
    generator = torch.Generator().manual_seed(seed)

    def normal(*shape: int) -> Tensor:
        return torch.randn(*shape, generator=generator, dtype=torch.float64)

    features = normal(num_arms, dim) + prompt_spread * normal(num_prompts, num_arms, dim)
    success_logits = 2.0 * (normal(num_arms) + prompt_spread * normal(num_prompts, num_arms)) + success_bias
    theta = 0.5 * normal(dim)
    return ToyBandit(features, torch.sigmoid(success_logits), theta)


def sample_groups(
    bandit: ToyBandit, prompts: Tensor, group_size: int, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """Draw group_size completions (arms) and their 0/1 rewards for each prompt index in prompts [N].
    Returns rewards [N, G] and scores [N, G, D]."""
    arms = torch.multinomial(bandit.policy()[prompts], group_size, replacement=True, generator=generator)
    rows = prompts.unsqueeze(1)  # [N, 1]
    uniform = torch.rand(arms.shape, generator=generator, dtype=torch.float64)
    rewards = (uniform < bandit.success_prob[rows, arms]).to(torch.float64)  # [N, G]
    return rewards, bandit.scores()[rows, arms]


# ---------------------------------------------------------------------------------------------------
# Exact variance components by enumerating the outcomes z = (a, r)
# ---------------------------------------------------------------------------------------------------
def _outcome_table(bandit: ToyBandit) -> tuple[Tensor, Tensor, Tensor]:
    """Outcomes z = (a, r) of every prompt: probabilities [P, 2K], rewards [2K], scores [P, 2K, D]."""
    pi, mu = bandit.policy(), bandit.success_prob
    probs = torch.cat([pi * (1 - mu), pi * mu], dim=1)  # r = 0 outcomes first, then r = 1
    num_arms = pi.shape[1]
    rewards = torch.cat([torch.zeros(num_arms), torch.ones(num_arms)]).to(torch.float64)
    scores = bandit.scores().repeat(1, 2, 1)
    return probs, rewards, scores


def exact_components(bandit: ToyBandit) -> VarianceComponents:
    """c1, c2, c3 of the bandit with prompts drawn uniformly, via the Hoeffding decomposition:
    zeta_1 = Var h_1(z), zeta_2 = Var h(z, z'), c2 = 4 zeta_1 and E||h~||^2 = zeta_2 - 2 zeta_1."""
    probs, rewards, scores = _outcome_table(bandit)  # [P, M], [M], [P, M, D]
    grad_q = bandit.prompt_gradients()  # [P, D]
    reward_diff = rewards[:, None] - rewards[None, :]  # [M, M]
    score_diff = scores[:, :, None] - scores[:, None, :]  # [P, M, M, D]
    kernel = 0.5 * reward_diff[None, :, :, None] * score_diff  # h(z, z') per prompt
    first_projection = torch.einsum("pn,pmnd->pmd", probs, kernel)  # h_1(z) = E_z' h(z, z')
    zeta1 = torch.einsum("pm,pm->p", probs, (first_projection - grad_q[:, None]).square().sum(-1))
    kernel_dev_sq = (kernel - grad_q[:, None, None]).square().sum(-1)  # [P, M, M]
    zeta2 = torch.einsum("pm,pn,pmn->p", probs, probs, kernel_dev_sq)
    between = (grad_q - grad_q.mean(dim=0)).square().sum(-1).mean()
    return VarianceComponents(
        between_prompt=float(between),
        first_order=float((4 * zeta1).mean()),
        second_order=float((2 * (zeta2 - 2 * zeta1)).mean()),
    )


def exact_estimator_mse(bandit: ToyBandit, group_size: int) -> dict[str, float]:
    """E_q MSE(g | q) of each estimator for one prompt's group of size G (target grad J(q)):
    vanilla E||r s - grad J(q)||^2 / G, oracle c2 / G, GRPO c2 / G + c3 / (G (G - 1))."""
    probs, rewards, scores = _outcome_table(bandit)
    grad_q = bandit.prompt_gradients()
    vanilla_sq = (rewards[None, :, None] * scores - grad_q[:, None]).square().sum(-1)  # [P, M]
    vanilla = float((probs * vanilla_sq).sum(-1).mean())
    components = exact_components(bandit)
    g = group_size
    oracle = components.first_order / g
    return {
        "vanilla": vanilla / g,
        "grpo": oracle + components.second_order / (g * (g - 1)),
        "oracle": oracle,
    }


# ---------------------------------------------------------------------------------------------------
# Monte Carlo
# ---------------------------------------------------------------------------------------------------
def monte_carlo_estimator_mse(
    bandit: ToyBandit,
    group_sizes: tuple[int, ...] = GROUP_SIZES,
    groups_per_prompt: int = 2000,
    seed: int = 0,
) -> dict[str, list[float]]:
    """Monte-Carlo E_q MSE(g | q) of the vanilla, GRPO-type and oracle estimators for each G (paper Fig. 4,
    one prompt per estimate). Every prompt gets groups_per_prompt groups, so the average over the uniform
    prompt distribution is exact; the three estimators share the same samples. Returns name -> [MSE per G]."""
    generator = torch.Generator().manual_seed(seed)
    num_prompts = bandit.features.shape[0]
    prompts = torch.arange(num_prompts).repeat_interleave(groups_per_prompt)  # [N]
    values, grad_q = bandit.values()[prompts], bandit.prompt_gradients()[prompts]
    mse: dict[str, list[float]] = {"vanilla": [], "grpo": [], "oracle": []}
    for group_size in group_sizes:
        rewards, scores = sample_groups(bandit, prompts, group_size, generator)
        for name, estimate in gradient_estimates(rewards, scores, values).items():
            mse[name].append(float((estimate - grad_q).square().sum(-1).mean()))
    return mse


def monte_carlo_minibatch_mse(
    bandit: ToyBandit,
    budget: int,
    group_sizes: tuple[int, ...] = GROUP_SIZES,
    num_steps: int = 4000,
    seed: int = 0,
) -> list[float]:
    """Monte-Carlo MSE of the minibatch GRPO gradient (1/B) sum_b g_LOO(q_b) against grad J = E_q grad J(q)
    at a fixed budget N = B G, prompts drawn uniformly with replacement; one value per G."""
    generator = torch.Generator().manual_seed(seed)
    num_prompts = bandit.features.shape[0]
    grad_q = bandit.prompt_gradients()
    true_gradient = grad_q.mean(dim=0)  # [D]
    values = bandit.values()
    mse = []
    for group_size in group_sizes:
        if budget % group_size:
            raise ValueError(f"budget {budget} is not a multiple of group size {group_size}")
        batch = budget // group_size
        prompts = torch.randint(num_prompts, (num_steps * batch,), generator=generator)
        rewards, scores = sample_groups(bandit, prompts, group_size, generator)
        per_group = gradient_estimates(rewards, scores, values[prompts])["grpo"]  # [steps * B, D]
        minibatch = per_group.view(num_steps, batch, -1).mean(dim=1)  # [steps, D]
        mse.append(float((minibatch - true_gradient).square().sum(-1).mean()))
    return mse


# ---------------------------------------------------------------------------------------------------
# The toy study, printed
# ---------------------------------------------------------------------------------------------------
def main() -> None:
    bandit = make_toy_bandit()
    mse = monte_carlo_estimator_mse(bandit)
    print("per-prompt MSE (Monte Carlo | exact)")
    print(f"{'G':>4} {'vanilla':>21} {'grpo':>21} {'oracle':>21} {'grpo/oracle':>11}")
    for index, group_size in enumerate(GROUP_SIZES):
        exact = exact_estimator_mse(bandit, group_size)
        cells = " ".join(f"{mse[n][index]:10.5f}|{exact[n]:10.5f}" for n in ("vanilla", "grpo", "oracle"))
        print(f"{group_size:>4} {cells} {mse['grpo'][index] / mse['oracle'][index]:11.4f}")

    budget, advisor_prompts = 64, 2048
    generator = torch.Generator().manual_seed(1)
    prompts = torch.randint(bandit.features.shape[0], (advisor_prompts,), generator=generator)
    estimated = estimate_variance_components(*sample_groups(bandit, prompts, max(GROUP_SIZES), generator))
    exact = exact_components(bandit)
    print(f"\ncomponents exact     {exact}\ncomponents estimated {estimated}")
    minibatch = monte_carlo_minibatch_mse(bandit, budget)
    print(f"\nminibatch MSE at N = {budget}: G, Monte Carlo, predicted (estimated c), predicted (exact c)")
    for group_size, value in zip(GROUP_SIZES, minibatch, strict=True):
        predicted = estimated.minibatch_mse(group_size, budget)
        print(
            f"{group_size:>4} {value:10.6f} {predicted:10.6f} {exact.minibatch_mse(group_size, budget):10.6f}"
        )
    empirical_best = GROUP_SIZES[minibatch.index(min(minibatch))]
    print(
        f"G* estimated {best_group_size(estimated, GROUP_SIZES, budget)} "
        f"({estimated.optimal_group_size():.1f}), exact {best_group_size(exact, GROUP_SIZES, budget)} "
        f"({exact.optimal_group_size():.1f}), Monte-Carlo argmin {empirical_best}"
    )


if __name__ == "__main__":
    main()
