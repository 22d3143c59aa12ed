"""The U-statistic analysis of the GRPO gradient: the three estimators, the MSE law and its estimates.

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

`estimate_variance_components` is the advisor: it needs only per-completion rewards and (projected)
scores for a few prompts with G_max completions each, so it applies unchanged to an LLM policy whose
score is the gradient of a LoRA adapter or a random projection of one layer.

The toy bandit on which all of it is checked exactly is in grpo_train/ustat/bandit.py (tests/test_analysis*.py).
"""

from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_train.algorithms import group_advantages


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
# The variance components c1, c2, c3 and the MSE law they give
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
