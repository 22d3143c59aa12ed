"""The U-statistic analysis of the GRPO gradient on a toy bandit, and the group-size advisor.

Zhou et al. 2026, "Demystifying Group Relative Policy Optimization: Its Policy Gradient is a U-Statistic"
(arXiv 2603.01162); the formulas are re-derived in /work/shared/reference/U-STATISTICS.md.
For one prompt with G completions, rewards r_i and scores s_i = grad log pi(o_i | q), the three estimators
g = (1/G) sum_i (r_i - b_i) s_i of the per-prompt gradient grad J(q) = E[r s | q] are
vanilla (b_i = 0), GRPO-type (b_i = mean of the other G - 1 rewards, eq. 4) and oracle (b_i = V(q)).
The GRPO-type one is a U-statistic with kernel h(z, z') = 1/2 (r - r')(s - s') (Lemma 1), and
  MSE(B, G) = c1 / B + c2 / (B G) + c3 / (B G (G - 1))            (Proposition 3)
with c1 = E_q ||grad J(q) - grad J||^2 (between prompts), c2 = E_q tr Cov((r - V(q)) s) (first-order
Hoeffding term, the oracle's MSE) and c3 = 2 E_q E||h~||^2 (second-order term). At a fixed number of
samples per step N = B G, MSE(G) = [G c1 + c2 + c3 / (G - 1)] / N, minimised at G* = 1 + sqrt(c3 / c1)
(Theorem 7, which uses the approximation G (G - 1) ~ G^2 and writes G* = sqrt(c3 / c1)).

The toy problem is a contextual bandit: P prompts, K arms, features phi(q, a) in R^D, a softmax policy
pi(a | q) = softmax_a(phi(q, a) . theta), and Bernoulli rewards with P(r = 1 | q, a) = mu(q, a). Its
outcomes z = (a, r) are finite, so every quantity above is computed exactly by enumeration and the
Monte-Carlo MSEs and the advisor's estimates can be checked against it (tests/test_analysis*.py).

`estimate_variance_components` is the advisor: it needs only per-completion rewards and (projected)
scores for a few prompts with G_max completions each, so it applies unchanged to an LLM policy whose
score is the gradient of a LoRA adapter or a random projection of one layer.

Run the toy study: python -m grpo_train.ustat.analysis
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_train.algorithms import group_advantages

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
# The three gradient estimators
# ---------------------------------------------------------------------------------------------------
def gradient_estimates(rewards: Tensor, scores: Tensor, values: Tensor) -> dict[str, Tensor]:
    """Per-group estimates (1/G) sum_i A_i s_i of grad J(q), paper Table 1.

    rewards: [N, G]; scores: [N, G, D]; values: [N] the true V(q) of each group's prompt (oracle only).
    The advantages come from the trainer's own `group_advantages`, so this checks the code that trains.
    Returns {"vanilla", "grpo", "oracle"} -> [N, D].
    """
    num_groups, group_size = rewards.shape
    advantages = {
        "vanilla": group_advantages(rewards.flatten(), group_size, "none").view(num_groups, group_size),
        "grpo": group_advantages(rewards.flatten(), group_size, "rloo").view(num_groups, group_size),
        "oracle": rewards - values.unsqueeze(1),
    }
    return {name: torch.einsum("ng,ngd->nd", adv, scores) / group_size for name, adv in advantages.items()}


def u_statistic_pairs(rewards: Tensor, scores: Tensor) -> Tensor:
    """Lemma 1 written out: (1 / C(G, 2)) sum_{i<j} 1/2 (r_i - r_j)(s_i - s_j).
    rewards: [G]; scores: [G, D]. Returns [D]. O(G^2 D) memory: for checks, not for training."""
    group_size = rewards.shape[0]
    kernel = 0.5 * (rewards[:, None] - rewards[None, :])[..., None] * (scores[:, None] - scores[None, :])
    upper = torch.triu(torch.ones(group_size, group_size, dtype=torch.bool), diagonal=1)
    return kernel[upper].sum(dim=0) / (group_size * (group_size - 1) / 2)


# ---------------------------------------------------------------------------------------------------
# Exact variance components by enumerating the outcomes z = (a, r)
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class VarianceComponents:
    between_prompt: float  # c1 = E_q ||grad J(q) - grad J||^2
    first_order: float  # c2 = E_q tr Cov((r - V(q)) s), the oracle estimator's per-sample variance
    second_order: float  # c3 = 2 E_q E||h~||^2, the degenerate second-order Hoeffding term

    def minibatch_mse(self, group_size: int, budget: int) -> float:
        """Predicted MSE of the minibatch GRPO gradient with B = budget / G prompts of G completions."""
        g = group_size
        return (g * self.between_prompt + self.first_order + self.second_order / (g - 1)) / budget

    def optimal_group_size(self) -> float:
        """Continuous minimiser 1 + sqrt(c3 / c1) of minibatch_mse; inf when c1 <= 0."""
        if self.between_prompt <= 0:
            return float("inf")
        return 1.0 + (max(self.second_order, 0.0) / self.between_prompt) ** 0.5


def best_group_size(components: VarianceComponents, candidates: tuple[int, ...], budget: int) -> int:
    """The candidate G with the smallest predicted MSE at the fixed budget N = B G."""
    return min(candidates, key=lambda g: components.minibatch_mse(g, budget))


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
# The group-size advisor (Theorem 7) from sampled rewards and projected scores
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class PromptMoments:
    """Unbiased per-prompt moments of the kernel h (see estimate_variance_components); one entry per prompt."""

    kernel_sq: Tensor  # [P] E||h_12||^2
    overlap: Tensor  # [P] E<h_12, h_13>
    grad_sq: Tensor  # [P] ||grad J(q)||^2 = E<h_12, h_34>
    u_stats: Tensor  # [P, D] the prompt's GRPO (leave-one-out) gradient, the U-statistic with kernel h

    @property
    def first_order(self) -> Tensor:
        """[P] 4 zeta_1 = 4 (E<h_12, h_13> - ||grad J(q)||^2), the prompt's share of c2."""
        return 4 * (self.overlap - self.grad_sq)

    @property
    def second_order(self) -> Tensor:
        """[P] 2 (zeta_2 - 2 zeta_1) = 2 (E||h_12||^2 - 2 E<h_12, h_13> + ||grad J(q)||^2), its share of c3."""
        return 2 * (self.kernel_sq - 2 * self.overlap + self.grad_sq)


def prompt_moments(rewards: Tensor, scores: Tensor) -> PromptMoments:
    """The per-prompt U-statistics behind estimate_variance_components. rewards: [P, G]; scores: [P, G, D]; G >= 4.

    A prompt whose G rewards are all equal has h = 0 for every pair, so all its moments are exactly 0
    whatever its scores: such a group needs no scores at all."""
    num_prompts, group_size = rewards.shape
    if group_size < 4:
        raise ValueError(f"need 4 completions per prompt (c3 needs four distinct ones), got {group_size}")
    g = group_size
    r = rewards.to(torch.float64)  # [P, G]
    s = scores.to(torch.float64)  # [P, G, D]
    reward_sum = r.sum(dim=1, keepdim=True)  # [P, 1]
    score_sum = s.sum(dim=1, keepdim=True)  # [P, 1, D]
    weighted_sum = (r.unsqueeze(-1) * s).sum(dim=1, keepdim=True)  # [P, 1, D]
    # T_i = sum_j 1/2 (r_i - r_j)(s_i - s_j) = 1/2 (G r_i s_i - r_i S - R s_i + M)
    r3 = r.unsqueeze(-1)
    row_sums = 0.5 * (g * r3 * s - r3 * score_sum - reward_sum.unsqueeze(-1) * s + weighted_sum)  # [P, G, D]
    total = row_sums.sum(dim=1)  # [P, D] sum over ordered pairs i != j
    # ||h_ij||^2 = 1/4 (r_i - r_j)^2 (|s_i|^2 + |s_j|^2 - 2 <s_i, s_j>)
    gram = s @ s.transpose(1, 2)  # [P, G, G]
    norms = torch.diagonal(gram, dim1=1, dim2=2)  # [P, G]
    pair_sq_dist = norms.unsqueeze(2) + norms.unsqueeze(1) - 2 * gram
    pair_reward_sq = (r.unsqueeze(2) - r.unsqueeze(1)).square()
    kernel_sq_sum = 0.25 * (pair_reward_sq * pair_sq_dist).sum(dim=(1, 2))  # A: [P]
    shared_one_sum = row_sums.square().sum(dim=(1, 2)) - kernel_sq_sum  # Q: [P]
    # Ordered pairs of ordered pairs: 2 share both indices, 4 ways share exactly one, the rest are disjoint.
    disjoint_sum = total.square().sum(-1) - 4 * shared_one_sum - 2 * kernel_sq_sum  # [P]
    return PromptMoments(
        kernel_sq=kernel_sq_sum / (g * (g - 1)),
        overlap=shared_one_sum / (g * (g - 1) * (g - 2)),
        grad_sq=disjoint_sum / (g * (g - 1) * (g - 2) * (g - 3)),
        u_stats=total / (g * (g - 1)),
    )


def estimate_variance_components(rewards: Tensor, scores: Tensor) -> VarianceComponents:
    """Unbiased estimates of c1, c2, c3 from P prompts drawn i.i.d. with G >= 4 completions each.

    rewards: [P, G]; scores: [P, G, D], any fixed linear projection of grad log pi(o | q) (the components
    then describe the MSE of the projected gradient). With h_ij = h(z_i, z_j), every needed moment is a
    U-statistic over distinct indices of one prompt's group (`prompt_moments`):
      E||h_12||^2           = sum_{i != j} ||h_ij||^2 / (G (G-1))                =: A / (G (G-1))
      E<h_12, h_13>         = sum over distinct (i, j, k) of <h_ij, h_ik> / (G (G-1) (G-2)) =: Q / ...
      ||grad J(q)||^2 = E<h_12, h_34>  = sum over distinct (i, j, k, l) / (G (G-1) (G-2) (G-3))
    and zeta_1 = E<h_12, h_13> - ||grad J(q)||^2, zeta_2 = E||h_12||^2 - ||grad J(q)||^2 give
    c2 = E_q 4 zeta_1 and c3 = E_q 2 (zeta_2 - 2 zeta_1). The sums come from row sums T_i = sum_j h_ij,
    which are linear in r and s, and a G x G Gram matrix, so memory is O(P G (G + D)), not O(P G^2 D).
    c1 = E_q ||grad J(q)||^2 - ||grad J||^2, the second term from products of the per-prompt U-statistics
    of two different (independent) prompts. Small estimates can come out negative from noise.
    """
    num_prompts = rewards.shape[0]
    if rewards.shape[1] < 4 or num_prompts < 2:
        raise ValueError(f"need at least 2 prompts with 4 completions each, got {tuple(rewards.shape)}")
    moments = prompt_moments(rewards, scores)
    u_stats = moments.u_stats  # [P, D]
    cross = (u_stats.sum(0).square().sum() - u_stats.square().sum()) / (num_prompts * (num_prompts - 1))
    return VarianceComponents(
        between_prompt=float(moments.grad_sq.mean() - cross),
        first_order=float(moments.first_order.mean()),
        second_order=float(moments.second_order.mean()),
    )


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
