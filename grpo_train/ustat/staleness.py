"""Stale tokens: the GRPO gradient's MSE at staleness k, relative to k = 0 (the quality side of
`rollout.max_staleness: auto`; docs/u-statistics.md#stale-tokens-the-mse-at-staleness-k).

For one prompt q, pi is the learner's (proximal) policy, mu the behaviour policy that sampled the group k weight
versions ago, z = (o, r) an outcome, s = grad log pi(o | q) its score, w = pi(o) / mu(o) its behaviour weight,
c = min(w, C) the weight the loss applies (capped at tis_cap C; c = w without a cap) and e = (w - C)_+ = w - c the
weight mass the cap removes. With G completions z_i ~ mu the trained (first-pass) gradient is

    g_k = (1/G) sum_i c_i (r_i - b_i) s_i,   b_i = mean of the other G - 1 rewards (rloo, unweighted),

and at k = 0 (mu = pi, c = 1) it is the U-statistic of estimators.py. Two results:

1. Exact. g_k is a U-statistic under mu with the kernel h_c(z, z') = 1/2 (r - r')(c s - c' s'), i.e. the
   on-policy kernel h with s replaced by t = c s. So Proposition 3 holds exactly with that kernel's constants:
       MSE_k(q) = ||beta(q)||^2 + c2_k(q) / G + c3_k(q) / (G (G - 1)),
       beta(q) = E_mu h_c - grad J(q) = -E_mu[e (r - V_mu) s]
   (E_mu[w s] = E_pi[s] = 0 and E_mu[w r s] = grad J(q); V_mu = E_mu[r]). Without a cap g_k is unbiased at any
   delay. `stale_prompt_moments` estimates c2_k, c3_k and beta from a stale group's rewards, scores and raw
   ratios (prompt_moments on c s and on e s): what the online monitor would read with stale tokens.
2. Predicted from the on-policy constants and two moments of the weights, m1 = E_mu[c] = 1 - rho with
   rho = E_mu[(w - C)_+] (E_mu[w] = 1), and m2 = E_mu[c^2]. Assume (A) the weights c are independent of the
   kernel's (r, s), and (r, s) are distributed under mu as under pi. Then, with gamma(q) = ||grad J(q)||^2,
       E h_c = m1 grad J                     -> beta = -rho grad J(q)
       h_1c(z) = 1/2 [c (r - V) s + m1 grad J]  -> c2_k = 4 Var h_1c = m2 (c2 + gamma) - m1^2 gamma
       E||h_c||^2 = m2 P + m1^2 gamma,  P = 1/2 E[(r - r')^2 ||s||^2] = zeta_2  -> zeta_2k = m2 zeta_2
   (the cross term 1/2 E[(r - r')^2 <s, s'>] = -gamma since E s = 0), hence
       c2_k = m2 c2 + (m2 - m1^2) gamma,    c3_k = 2 (zeta_2k - 2 zeta_1k) = m2 c3 - (m2 - m1^2) gamma,
       MSE_k(q) / MSE_0(q) = [rho^2 gamma + c2_k / G + c3_k / (G (G - 1))] / [c2 / G + c3 / (G (G - 1))].
   m1^2 / m2 = ESS / G is the population Kish fraction, so m2 = m1^2 G / ESS: the variance inflates as 1 / the
   ESS fraction, the cap's scale m1 shrinks it and costs rho^2 gamma of bias. Over B = N / G prompts (the
   minibatch, weights also independent of the prompt): E g_k(q) = m1 grad J(q), so c1_k = m1^2 c1, the bias
   rho^2 ||grad J||^2 (||grad J||^2 = gamma_bar - c1), and
       MSE_k(G; N) = rho^2 ||grad J||^2 + [G c1_k + c2_k + c3_k / (G - 1)] / N,   G*_k = 1 + sqrt(c3_k / c1_k)
   with gamma_bar = E_q ||grad J(q)||^2 in c2_k, c3_k (`stale_components`; the bias does not depend on G).

Where (A) fails: the policy moved along its gradient, so the outcomes that gained probability (w > 1, the ones a
cap removes mass from) are those with a positive advantage along the score. The removed mass sits on the
highest-advantage outcomes, so the true bias exceeds rho grad J (2-3x in squared norm on the toy bandit); and
Cov(w, (r - V)^2 ||s||^2) != 0 moves the variance at first order in the shift, either sign, while m2 - 1 is second
order (so the ratio, not its excess over 1, is what is predicted to 10%). On the toy bandit
(`python -m grpo_train.ustat.staleness`) the per-group ratio is within 10% of the exact enumeration up to
ESS / G = 0.77 with a cap, and underestimates it by ~19% uncapped at ESS / G = 0.54; the minibatch ratio is within
10% while rho <= 0.11, and underestimates it by 24-36% at rho = 0.23-0.30, where the bias dominates: there a
measured bias (`cap_bias_sq`, passed to `stale_components`) brings it back within 10%. Token-level weights on
multi-token completions (the trainer's tis_cap) correct each token's conditional, not the prefix distribution;
the bandit has one token per completion, so that is untested.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_train.algorithms import group_advantages
from grpo_train.ustat.bandit import ToyBandit, exact_components, make_toy_bandit
from grpo_train.ustat.estimators import PromptMoments, VarianceComponents, prompt_moments


# ---------------------------------------------------------------------------------------------------
# The behaviour weights: effective sample size and the two moments the prediction needs
# ---------------------------------------------------------------------------------------------------
def kish_ess(weights: Tensor) -> Tensor:
    """Kish's effective sample size (sum_i w_i)^2 / sum_i w_i^2 of each group's weights. weights: [N, G] (>= 0)
    -> [N]; G for equal weights, 1 when one weight carries everything, 0 for a group of zero weights."""
    total_sq = weights.sum(dim=-1).square()
    sum_sq = weights.square().sum(dim=-1)
    return torch.where(sum_sq > 0, total_sq / sum_sq.clamp(min=torch.finfo(weights.dtype).tiny), 0.0)


def capped_weights(ratios: Tensor, cap: float | None) -> tuple[Tensor, Tensor]:
    """(c, e) = (min(w, C), (w - C)_+) of the raw ratios w = pi / mu, any shape; cap None: (w, 0)."""
    if cap is None:
        return ratios, torch.zeros_like(ratios)
    capped = ratios.clamp(max=cap)
    return capped, ratios - capped


@dataclass(frozen=True)
class WeightMoments:
    """The moments of the applied weights c = min(w, C) under the behaviour policy that the prediction uses."""

    removed: float  # rho = E_mu[(w - C)_+], the weight mass the cap removes; 0 without a cap
    mean_sq: float  # m2 = E_mu[c^2]

    @property
    def mean(self) -> float:
        """m1 = E_mu[c] = 1 - rho (E_mu[w] = 1)."""
        return 1.0 - self.removed

    @property
    def ess_fraction(self) -> float:
        """m1^2 / m2: the population Kish ESS / G, 1 on-policy."""
        return self.mean**2 / self.mean_sq

    @classmethod
    def on_policy(cls) -> WeightMoments:
        return cls(removed=0.0, mean_sq=1.0)


def weight_moments(ratios: Tensor, cap: float | None) -> WeightMoments:
    """The moments from sampled raw ratios w = pi / mu (any shape, every entry a sampled token/completion):
    rho = mean (w - C)_+ and m2 = mean min(w, C)^2. m1 is taken as 1 - rho (E_mu[w] = 1), so that no cap means
    no bias exactly, whatever the sample's mean ratio."""
    capped, excess = capped_weights(ratios.to(torch.float64), cap)
    return WeightMoments(removed=float(excess.mean()), mean_sq=float(capped.square().mean()))


# ---------------------------------------------------------------------------------------------------
# The prediction (assumption A of the module docstring)
# ---------------------------------------------------------------------------------------------------
def stale_constants(c2: Tensor | float, c3: Tensor | float, grad_sq: Tensor | float,
                    weights: WeightMoments) -> tuple[Tensor | float, Tensor | float, Tensor | float]:
    """(c2_k, c3_k, bias_sq) of one prompt (or of means over prompts): c2_k = m2 c2 + (m2 - m1^2) gamma,
    c3_k = m2 c3 - (m2 - m1^2) gamma, bias_sq = rho^2 gamma. c2, c3, grad_sq = gamma: floats or [P] tensors."""
    m1, m2 = weights.mean, weights.mean_sq
    spread = (m2 - m1 * m1) * grad_sq
    return m2 * c2 + spread, m2 * c3 - spread, weights.removed**2 * grad_sq


def predicted_prompt_mse(c2: Tensor | float, c3: Tensor | float, grad_sq: Tensor | float,
                         weights: WeightMoments, group_size: int) -> Tensor | float:
    """Predicted MSE_k(q) = rho^2 gamma + c2_k / G + c3_k / (G (G - 1)) of one prompt's group (target grad J(q))."""
    c2_k, c3_k, bias_sq = stale_constants(c2, c3, grad_sq, weights)
    g = group_size
    return bias_sq + c2_k / g + c3_k / (g * (g - 1))


def predicted_mse_ratio(c2: float, c3: float, grad_sq: float, weights: WeightMoments, group_size: int) -> float:
    """MSE_k(q) / MSE_0(q) for one prompt's group; with the means over prompts of c2, c3 and ||grad J(q)||^2
    it is the ratio of the prompt-averaged MSEs. Exactly 1 on-policy."""
    g = group_size
    return float(predicted_prompt_mse(c2, c3, grad_sq, weights, g) / (c2 / g + c3 / (g * (g - 1))))


@dataclass(frozen=True)
class StaleComponents:
    """The minibatch MSE law at staleness k: the constants of the stale weighted estimator and its bias."""

    components: VarianceComponents  # c1_k = m1^2 c1, c2_k, c3_k
    bias_sq: float  # ||E g_k - grad J||^2 = rho^2 ||grad J||^2, independent of G and B

    def minibatch_mse(self, group_size: int, budget: int) -> float:
        """bias^2 + [G c1_k + c2_k + c3_k / (G - 1)] / N."""
        return self.bias_sq + self.components.minibatch_mse(group_size, budget)

    def optimal_group_size(self) -> float:
        """G*_k = 1 + sqrt(c3_k / c1_k): the bias does not move it."""
        return self.components.optimal_group_size()

    def mse_ratio(self, on_policy: VarianceComponents, group_size: int, budget: int) -> float:
        """MSE_k(G; N) / MSE_0(G; N)."""
        return self.minibatch_mse(group_size, budget) / on_policy.minibatch_mse(group_size, budget)


def stale_components(on_policy: VarianceComponents, grad_sq: float, weights: WeightMoments,
                     bias_sq: float | None = None) -> StaleComponents:
    """The monitor's constants carried to staleness k. on_policy: c1, c2, c3 at k = 0; grad_sq: gamma_bar =
    E_q ||grad J(q)||^2 (the mean of the monitor's per-prompt grad_sq; ||grad J||^2 = gamma_bar - c1).
    bias_sq: a measured ||E_q beta(q)||^2 (`cap_bias_sq`) in place of rho^2 ||grad J||^2, which (A) underestimates
    once the cap binds (module docstring)."""
    c2_k, c3_k, _ = stale_constants(on_policy.first_order, on_policy.second_order, grad_sq, weights)
    if bias_sq is None:
        bias_sq = weights.removed**2 * max(grad_sq - on_policy.between_prompt, 0.0)
    components = VarianceComponents(weights.mean**2 * on_policy.between_prompt, float(c2_k), float(c3_k))
    return StaleComponents(components, float(bias_sq))


# ---------------------------------------------------------------------------------------------------
# The exact side from samples: the weighted kernel's moments (what the monitor reads with stale tokens)
# ---------------------------------------------------------------------------------------------------
def stale_prompt_moments(rewards: Tensor, scores: Tensor, ratios: Tensor,
                         cap: float | None) -> tuple[PromptMoments, Tensor]:
    """Per-prompt U-statistics of a stale group: prompt_moments of the kernel h_c (scores t = c s), whose
    first_order / second_order are the prompt's shares of c2_k / c3_k exactly, and the cap's bias
    beta(q) = -E_mu h_e, estimated by minus the U-statistic of the kernel with t = e s.
    rewards: [P, G]; scores: [P, G, D]; ratios: [P, G] raw w = pi / mu. Returns (moments, bias [P, D])."""
    capped, excess = capped_weights(ratios.to(torch.float64), cap)
    moments = prompt_moments(rewards, capped.unsqueeze(-1) * scores)
    bias = -prompt_moments(rewards, excess.unsqueeze(-1) * scores).u_stats
    return moments, bias


def cap_bias_sq(bias: Tensor) -> float:
    """Unbiased ||E_q beta(q)||^2 from P >= 2 prompts' independent estimates beta_p [P, D] (`stale_prompt_moments`):
    the mean of <beta_p, beta_l> over pairs of distinct prompts."""
    num_prompts = bias.shape[0]
    if num_prompts < 2:
        raise ValueError(f"need 2 prompts, got {num_prompts}")
    return float((bias.sum(0).square().sum() - bias.square().sum()) / (num_prompts * (num_prompts - 1)))


# ---------------------------------------------------------------------------------------------------
# The check: the toy bandit with a delayed behaviour policy, every group of G outcomes enumerated
# ---------------------------------------------------------------------------------------------------
def delayed_theta(bandit: ToyBandit, delay: int, step: float) -> Tensor:
    """The parameters k = delay updates ago, each update a step of length `step` along the true gradient:
    theta - k step grad J / ||grad J||."""
    grad = bandit.prompt_gradients().mean(dim=0)
    return bandit.theta - delay * step * grad / grad.norm()


def _stale_outcomes(bandit: ToyBandit, behaviour_theta: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Outcomes z = (a, r): behaviour probabilities [P, 2K], rewards [2K], scores under pi [P, 2K, D], ratios
    pi / mu [P, 2K] (r = 0 outcomes first, as bandit._outcome_table)."""
    pi, success = bandit.policy(), bandit.success_prob
    mu = torch.softmax(bandit.features @ behaviour_theta, dim=-1)  # [P, K]
    probs = torch.cat([mu * (1 - success), mu * success], dim=1)
    num_arms = pi.shape[1]
    rewards = torch.cat([torch.zeros(num_arms), torch.ones(num_arms)]).to(torch.float64)
    return probs, rewards, bandit.scores().repeat(1, 2, 1), (pi / mu).repeat(1, 2)


@dataclass(frozen=True)
class ExactStale:
    """Exact quantities of the stale estimator on the bandit, per prompt (prompts drawn uniformly)."""

    mse: Tensor  # [P] E||g_k - grad J(q)||^2, by enumerating all G-tuples of outcomes
    means: Tensor  # [P, D] E g_k(q) = grad J(q) + beta(q)
    grad_q: Tensor  # [P, D] the on-policy target grad J(q)
    weights: WeightMoments  # rho and m2 of the behaviour weights, averaged over prompts

    def prompt_mse(self) -> float:
        """E_q MSE_k(q), one prompt's group against its own grad J(q)."""
        return float(self.mse.mean())

    def bias_sq(self) -> float:
        """E_q ||beta(q)||^2, the squared bias in the per-group MSE."""
        return float((self.means - self.grad_q).square().sum(-1).mean())

    def minibatch_mse(self, group_size: int, budget: int) -> float:
        """MSE of the mean of B = N / G groups, prompts drawn uniformly with replacement, against grad J = E_q
        grad J(q): ||E_q beta(q)||^2 + [Var_q E g_k(q) + E_q Var g_k(q)] / B."""
        batch = budget // group_size
        bias = (self.means - self.grad_q).mean(dim=0)
        between = (self.means - self.means.mean(dim=0)).square().sum(-1).mean()
        within = (self.mse - (self.means - self.grad_q).square().sum(-1)).mean()
        return float(bias.square().sum() + (between + within) / batch)


def exact_stale_mse(bandit: ToyBandit, behaviour_theta: Tensor, group_size: int, cap: float | None) -> ExactStale:
    """Enumerate every group of G outcomes drawn from mu, weight its squared error against the on-policy grad J(q)
    by its probability. The estimator is the trainer's: rloo advantages of `group_advantages` times the capped
    weights times the scores at pi. O(P (2K)^G G D): small G and K only."""
    probs, rewards, scores, ratios = _stale_outcomes(bandit, behaviour_theta)
    capped, excess = capped_weights(ratios, cap)
    grad_q = bandit.prompt_gradients()  # [P, D]
    num_prompts, num_outcomes = probs.shape
    groups = torch.tensor(list(itertools.product(range(num_outcomes), repeat=group_size)))  # [T, G]
    group_rewards = rewards[groups]  # [T, G]
    advantages = group_advantages(group_rewards.flatten(), group_size, "rloo").view(groups.shape)  # [T, G]
    mse, means = [], []
    for prompt in range(num_prompts):
        probability = probs[prompt][groups].prod(dim=1)  # [T]
        coefficient = capped[prompt][groups] * advantages  # [T, G]
        estimate = torch.einsum("tg,tgd->td", coefficient, scores[prompt][groups]) / group_size  # [T, D]
        mse.append((probability * (estimate - grad_q[prompt]).square().sum(-1)).sum())
        means.append(probability @ estimate)
    moments = WeightMoments(removed=float((probs * excess).sum(-1).mean()),
                            mean_sq=float((probs * capped.square()).sum(-1).mean()))
    return ExactStale(torch.stack(mse), torch.stack(means), grad_q, moments)


def exact_stale_constants(bandit: ToyBandit, behaviour_theta: Tensor, cap: float | None) -> tuple[Tensor, ...]:
    """Per prompt, the exact Hoeffding constants of the weighted kernel h_c under mu: (c2_k, c3_k, beta), each
    [P] or [P, D], so that MSE_k(q) = ||beta||^2 + c2_k / G + c3_k / (G (G - 1)) exactly for every G."""
    probs, rewards, scores, ratios = _stale_outcomes(bandit, behaviour_theta)
    capped, _ = capped_weights(ratios, cap)
    weighted = capped.unsqueeze(-1) * scores  # [P, M, D] t = c s
    kernel = 0.5 * (rewards[:, None] - rewards[None, :])[None, :, :, None] * (weighted[:, :, None] - weighted[:, None])
    mean = torch.einsum("pm,pn,pmnd->pd", probs, probs, kernel)  # E_mu h_c
    first = torch.einsum("pn,pmnd->pmd", probs, kernel)  # h_1c(z)
    zeta1 = torch.einsum("pm,pm->p", probs, (first - mean[:, None]).square().sum(-1))
    zeta2 = torch.einsum("pm,pn,pmn->p", probs, probs, (kernel - mean[:, None, None]).square().sum(-1))
    return 4 * zeta1, 2 * (zeta2 - 2 * zeta1), mean - bandit.prompt_gradients()


def staleness_table(bandit: ToyBandit, settings: list[tuple[int, float | None, int]], step: float,
                    budget: int = 64) -> list[dict[str, float]]:
    """For each (delay k, cap, G): exact (enumerated) and predicted MSE_k / MSE_0, per group (the prompt-averaged
    MSE of one group against its grad J(q)) and per minibatch of N = budget completions. The prediction uses the
    bandit's exact on-policy c1, c2, c3, gamma_bar and the prompt-averaged weight moments only."""
    on_policy = exact_components(bandit)
    grad_sq = float(bandit.prompt_gradients().square().sum(-1).mean())
    rows = []
    for delay, cap, group_size in settings:
        base = exact_stale_mse(bandit, bandit.theta, group_size, None)
        stale = exact_stale_mse(bandit, delayed_theta(bandit, delay, step), group_size, cap)
        predicted = predicted_mse_ratio(on_policy.first_order, on_policy.second_order, grad_sq, stale.weights,
                                        group_size)
        minibatch = stale_components(on_policy, grad_sq, stale.weights)
        rows.append({
            "delay": delay, "cap": cap if cap is not None else float("inf"), "group_size": group_size,
            "ess_fraction": stale.weights.ess_fraction, "removed": stale.weights.removed,
            "exact": stale.prompt_mse() / base.prompt_mse(), "predicted": predicted,
            "bias_exact": stale.bias_sq() / base.prompt_mse(),
            "bias_predicted": stale.weights.removed**2 * grad_sq / base.prompt_mse(),
            "minibatch_exact": stale.minibatch_mse(group_size, budget) / base.minibatch_mse(group_size, budget),
            "minibatch_predicted": minibatch.mse_ratio(on_policy, group_size, budget),
        })
    return rows


TABLE_STEP = 0.125  # the bandit's parameter move per update (theta's norm is ~1.3)
TABLE_BUDGET = 64  # N of the minibatch columns
TABLE_SETTINGS = [(k, cap, g) for g in (2, 4) for k in (1, 2, 4) for cap in (None, 1.5, 1.2)]


def table_bandit() -> ToyBandit:
    """The bandit of the table and the tests: 4 prompts, 4 arms (8 outcomes), D = 4, so G = 4 is 4096 groups."""
    return make_toy_bandit(num_prompts=4, num_arms=4, dim=4)


def main() -> None:
    rows = staleness_table(table_bandit(), TABLE_SETTINGS, TABLE_STEP, TABLE_BUDGET)
    print(f"MSE_k / MSE_0 on the toy bandit, theta moved {TABLE_STEP} per update along grad J: exact (all groups "
          f"enumerated) vs predicted; per group, and per minibatch of N = {TABLE_BUDGET}")
    print(f"{'G':>3} {'k':>3} {'cap':>5} {'ESS/G':>6} {'rho':>6} | {'exact':>6} {'pred':>6} {'err':>6}"
          f" {'bias2 ex':>8} {'pred':>6} | {'N exact':>7} {'pred':>6} {'err':>6}")
    for row in rows:
        error = row["predicted"] / row["exact"] - 1
        batch_error = row["minibatch_predicted"] / row["minibatch_exact"] - 1
        print(f"{row['group_size']:>3} {row['delay']:>3} {row['cap']:>5.1f} {row['ess_fraction']:>6.3f}"
              f" {row['removed']:>6.3f} | {row['exact']:>6.3f} {row['predicted']:>6.3f} {error:>+6.1%}"
              f" {row['bias_exact']:>8.4f} {row['bias_predicted']:>6.4f} | {row['minibatch_exact']:>7.3f}"
              f" {row['minibatch_predicted']:>6.3f} {batch_error:>+6.1%}")


if __name__ == "__main__":
    main()
