"""GRPO loss math as pure tensor functions: group advantages, KL estimators, the policy losses (PPO/GRPO clipped
surrogate, GSPO, CISPO; chosen in `policy_loss`, whose settings are one record, `LossSpec`), the rollout/learner
mismatch weights, and the loss aggregation with an explicit normaliser. docs/algorithm.md walks through them with
their equations.

Nothing here imports vLLM or DeepSpeed; every function takes and returns plain tensors, so each piece is
unit-tested on CPU (tests/test_algorithms*.py). Shapes: B sequences (completions), T completion tokens,
G completions per prompt; `mask` is 1 on completion tokens that count and 0 on padding.

Papers:
- GRPO: Shao et al. 2024, "DeepSeekMath", eq. 3 (objective) and section 4.1.2 (outcome supervision).
- Dr. GRPO: Liu et al. 2025, "Understanding R1-Zero-Like Training", section 3.1.
- DAPO: Yu et al. 2025, clip-higher (section 3.1) and token-level loss (section 3.3).
- Leave-one-out baseline / U-statistic view: Zhou et al. 2026, "Demystifying GRPO: Its Policy Gradient
  is a U-Statistic" (arXiv 2603.01162), eq. 4 and Lemma 1; see /work/shared/reference/U-STATISTICS.md.
- K1/K2/K3 KL estimators: J. Schulman, "Approximating KL Divergence" (2020 blog note).
- Dual-clip: Ye et al. 2020, "Mastering Complex Control in MOBA Games with Deep RL", eq. 5.
- Truncated importance sampling for the sampler/learner mismatch: Yao et al. 2025, "Your Efficient RL
  Framework Secretly Brings You Off-Policy RL Training" (the TIS weight min(pi_learner / pi_sampler, C)), and its
  sequence-level truncated / masked forms (the rollout correction of verl, TRL's vllm_importance_sampling_mode).
- GSPO: Zheng et al. 2025, "Group Sequence Policy Optimization" (arXiv 2507.18071), eq. 5-7, section 5.1.
- CISPO: MiniMax 2025, "MiniMax-M1: Scaling Test-Time Compute Efficiently with Lightning Attention"
  (arXiv 2506.13585), section 3.1, eq. 4-5.
- KL bias correction (the KL estimate times the importance ratio): DeepSeek-AI 2025, "DeepSeek-V3.2"
  (arXiv 2512.02556), eq. 7.

Deviations from the GRPO paper, on purpose:
- The default loss aggregation is `token_mean` (DAPO), not GRPO's per-sequence mean; see `agg_loss`.
- The default upper clip range can differ from the lower one (clip-higher), and the KL term is the
  per-token K3 added to the loss (as in GRPO) with its log-ratio clamped to +-LOG_RATIO_CLAMP, multiplied by
  default by the importance ratio (`policy_loss`, kl_ratio_correction), which GRPO's eq. 3 does not do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
from torch import Tensor

# The modes each function accepts, spelled once in the config's schema (validation checks the same tuples).
from grpo_train.config import ADVANTAGE_MODES, AGG_MODES, KL_KINDS, POLICY_LOSSES, SEQ_CORRECTIONS

if TYPE_CHECKING:
    from grpo_train.config import AlgorithmConfig

# exp(20) ~ 4.9e8: large enough that no realistic log-ratio is touched, small enough that exp() stays far
# from fp32 overflow (~3.4e38) and that a single wild token cannot dominate a whole update.
LOG_RATIO_CLAMP = 20.0


# ---------------------------------------------------------------------------------------------------
# Advantages
# ---------------------------------------------------------------------------------------------------
def _grouped(rewards: Tensor, group_size: int) -> Tensor:
    """[num_prompts * G] -> [num_prompts, G], in at least fp32 so fp16/bf16 rewards keep their precision."""
    if rewards.dim() != 1 or rewards.numel() % group_size != 0:
        raise ValueError(
            f"rewards must be 1-D with a multiple of {group_size} entries, got {tuple(rewards.shape)}"
        )
    dtype = torch.promote_types(rewards.dtype, torch.float32)
    return rewards.to(dtype).view(-1, group_size)


def _zero_variance_groups(groups: Tensor) -> Tensor:
    """[P, G] -> [P] bool: True where every reward of the group is equal (no learning signal)."""
    return groups.amax(dim=1) == groups.amin(dim=1)


def group_advantages(rewards: Tensor, group_size: int, mode: str = "grpo", eps: float = 1e-6) -> Tensor:
    """Per-completion advantages from rewards grouped by prompt.

    rewards: [num_prompts * G], the G completions of each prompt contiguous. Returns [num_prompts * G].
    Modes:
    - "grpo": (r - group mean) / (group std + eps), DeepSeekMath section 4.1.2. The std is the unbiased one
      (divides by G - 1), as TRL and verl compute it with torch.std.
    - "dr_grpo": r - group mean (Dr. GRPO drops the std, which over-weights near-deterministic prompts).
    - "rloo": r - mean of the other G - 1 rewards, the leave-one-out baseline of the U-statistic paper
      (eq. 4); it equals G / (G - 1) * (r - group mean).
    - "none": the raw rewards (vanilla REINFORCE, the paper's "vanilla" estimator).
    A group whose rewards are all equal gets advantage exactly 0 in the centred modes (rounding in the
    mean would otherwise leave ~1e-8 / eps noise); `zero_variance_fraction` reports how many there are.
    """
    if mode not in ADVANTAGE_MODES:
        raise ValueError(f"unknown advantage mode {mode!r}; expected one of {ADVANTAGE_MODES}")
    if mode in ("grpo", "rloo") and group_size < 2:
        raise ValueError(f"mode {mode!r} needs group_size >= 2, got {group_size}")
    groups = _grouped(rewards, group_size)  # [P, G]
    if mode == "none":
        return groups.flatten()
    centred = groups - groups.mean(dim=1, keepdim=True)  # [P, G]
    if mode == "grpo":
        advantages = centred / (groups.std(dim=1, keepdim=True) + eps)
    elif mode == "dr_grpo":
        advantages = centred
    else:  # rloo: r_i - (sum_j r_j - r_i) / (G - 1) = G / (G - 1) * (r_i - mean)
        advantages = centred * (group_size / (group_size - 1))
    flat_groups = _zero_variance_groups(groups).unsqueeze(1)  # [P, 1]
    return torch.where(flat_groups, torch.zeros_like(advantages), advantages).flatten()


def zero_variance_fraction(rewards: Tensor, group_size: int) -> Tensor:
    """Fraction (0-d tensor) of prompt groups whose rewards are all equal. rewards: [num_prompts * G]."""
    return _zero_variance_groups(_grouped(rewards, group_size)).float().mean()


# ---------------------------------------------------------------------------------------------------
# KL estimators
# ---------------------------------------------------------------------------------------------------
def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: str = "k3") -> Tensor:
    """Per-token estimate of KL(pi || pi_ref) from tokens sampled from pi (Schulman 2020).

    logp, ref_logp: [...] (e.g. [B, T]) log-probabilities of the sampled tokens under pi and pi_ref.
    With x = ref_logp - logp = log(pi_ref / pi):
    - k1 = -x            (unbiased, can be negative, high variance)
    - k2 = x^2 / 2       (biased, low variance)
    - k3 = exp(x) - x - 1 (unbiased and >= 0 everywhere; the GRPO paper's per-token KL, eq. 4)
    Computed in at least fp32. For k3 the log-ratio is clamped to [-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP] so
    exp() cannot overflow; beyond the bound the estimate saturates and its gradient is zero.
    Returns the same shape as logp.
    """
    dtype = torch.promote_types(logp.dtype, torch.float32)
    log_ratio = ref_logp.to(dtype) - logp.to(dtype)
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    if kind == "k3":
        log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return torch.exp(log_ratio) - log_ratio - 1.0
    raise ValueError(f"unknown KL estimator {kind!r}; expected one of {KL_KINDS}")


# ---------------------------------------------------------------------------------------------------
# Policy losses: the PPO/GRPO clipped surrogate, GSPO and CISPO, chosen in `policy_loss`
# ---------------------------------------------------------------------------------------------------
def masked_means(values: dict[str, Tensor], mask: Tensor) -> dict[str, Tensor]:
    """The mean of each of `values` over the positions where mask is 1, in one stacked reduction (a handful of
    operations whatever the number of values). values: {name: [B, T] or [B, 1]} (one value per sequence, counted
    once per token of it), bool or float; mask: [B, T]. Returns {name: fp32 0-d tensor}."""
    if not values:
        return {}
    with torch.no_grad():
        stacked = torch.stack([v.expand(mask.shape) for v in values.values()]).float()  # [S, B, T]
        valid = mask.float()
        means = (stacked * valid).sum((1, 2)) / valid.sum().clamp(min=1.0)  # [S]
    return dict(zip(values, means.unbind(), strict=True))


def ppo_surrogate(log_ratio: Tensor, advantages: Tensor, clip_low: float, clip_high: float,
                  dual_clip: float | None = None) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token PPO/GRPO clipped surrogate, negated to be minimised (DeepSeekMath eq. 3):

        r_t = pi_theta(y_t) / pi_old(y_t) = exp(log_ratio_t)
        pg_t = -min(r_t A, clip(r_t, 1 - clip_low, 1 + clip_high) A)

    log_ratio: [B, T] log pi_theta - log pi_old (carries the gradient); advantages: [B, 1] or [B, T].
    With dual_clip = c > 1 the loss of a token with A < 0 is also capped at -c A (Ye et al. 2020, eq. 5), so a
    huge ratio on a bad token cannot blow up the update.
    Returns (pg [B, T], events): bool [B, T] tensors clip_frac_low (r < 1 - clip_low with A < 0: gradient cut),
    clip_frac_high (r > 1 + clip_high with A > 0: gradient cut) and dual_clip_frac.
    """
    ratio = torch.exp(log_ratio)
    pg = -torch.minimum(ratio * advantages, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages)
    ratio = ratio.detach()
    events = {"clip_frac_low": (ratio < 1.0 - clip_low) & (advantages < 0),
              "clip_frac_high": (ratio > 1.0 + clip_high) & (advantages > 0)}
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        events["dual_clip_frac"] = (advantages < 0) & (pg.detach() > -dual_clip * advantages)
        pg = torch.where(advantages < 0, torch.minimum(pg, -dual_clip * advantages), pg)
    return pg, events


def sequence_log_ratio(log_ratio: Tensor, mask: Tensor) -> Tensor:
    """Mean token log-ratio of each sequence, [B, T] -> [B, 1]: the log of GSPO's s_i, the geometric mean of the
    token ratios. Padding is left out by selection, not by multiplying with 0, so a NaN there cannot leak in."""
    valid = mask.bool()
    total = torch.where(valid, log_ratio, torch.zeros_like(log_ratio)).sum(1, keepdim=True)
    return total / valid.sum(1, keepdim=True).clamp(min=1)


def gspo_surrogate(log_ratio: Tensor, advantages: Tensor, mask: Tensor, clip_low: float,
                   clip_high: float) -> tuple[Tensor, dict[str, Tensor]]:
    """GSPO's clipped sequence-level surrogate, negated (Zheng et al. 2025, "Group Sequence Policy Optimization",
    eq. 5 and 7):

        s_i = (pi_theta(y_i) / pi_old(y_i))^(1 / |y_i|) = exp(mean_t log_ratio_it)
        pg_i = -min(s_i A_i, clip(s_i, 1 - clip_low, 1 + clip_high) A_i)

    The whole sequence is kept or clipped together, so a few noisy tokens cannot cut or inflate the gradient of
    the rest. The paper's clip range is far narrower than PPO's (3e-4 / 4e-4, section 5.1) because s_i averages
    the token log-ratios. Its objective averages pg_i over the G sequences (`seq_mean_token_mean`); with
    `token_mean` each sequence weighs in proportion to its length, as in TRL's sequence-level ratio.
    log_ratio: [B, T] (carries the gradient); advantages: [B, 1] (one per sequence); mask: [B, T].
    Returns (pg [B, T]: pg_i on every token of sequence i, events [B, 1]: clip_frac_low, clip_frac_high, ratio).
    """
    if advantages.shape[1] != 1:
        raise ValueError(f"gspo takes one advantage per sequence, got shape {tuple(advantages.shape)}")
    ratio = torch.exp(sequence_log_ratio(log_ratio, mask))  # [B, 1]
    pg = -torch.minimum(ratio * advantages, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages)
    ratio = ratio.detach()
    events = {"clip_frac_low": (ratio < 1.0 - clip_low) & (advantages < 0),
              "clip_frac_high": (ratio > 1.0 + clip_high) & (advantages > 0), "ratio": ratio}
    return pg.expand_as(log_ratio), events


def cispo_surrogate(logp: Tensor, log_ratio: Tensor, advantages: Tensor,
                    weight_cap: float) -> tuple[Tensor, dict[str, Tensor]]:
    """CISPO's per-token loss (MiniMax-M1, Chen et al. 2025, eq. 4-5), negated:

        pg_t = -sg(min(r_t, weight_cap)) A log pi_theta(y_t)

    The importance weight is clipped and detached (sg = stop-gradient), and multiplies the log-prob itself, so
    every token keeps a gradient (PPO's clip zeroes the gradient of clipped tokens, often rare "fork" tokens).
    No lower bound, as in the paper. At r = 1 (on-policy) the gradient is PPO's. The loss value is
    -A log pi, not a surrogate of the return: compare it between runs, not with PPO's.
    logp, log_ratio: [B, T]; advantages: [B, 1] or [B, T].
    Returns (pg [B, T], events: clip_frac_high, bool [B, T], r_t above the cap, whatever the sign of A).
    """
    ratio = torch.exp(log_ratio.detach())
    weight = ratio.clamp(max=weight_cap)
    return -weight * advantages * logp, {"clip_frac_high": ratio > weight_cap}


def mismatch_weights(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, tis_cap: float | None = None,
                     seq_mode: str = "none", seq_low: float = 0.0,
                     seq_high: float = 3.0) -> tuple[Tensor | None, dict[str, Tensor]]:
    """Importance weights (no gradient) for the sampler computing other probabilities than the learner
    (different kernels, precision, batching; Yao et al. 2025, "Your Efficient RL Framework Secretly Brings You
    Off-Policy RL Training"). The rollout policy is pi_sampler, the loss assumes pi_old; the correction is
    the ratio pi_old / pi_sampler, per token or per sequence:

    - token level, tis_cap = C:  w_t = min(pi_old(y_t) / pi_sampler(y_t), C)            (truncated IS, TIS)
    - sequence level, rho_i = prod_t pi_old(y_it) / pi_sampler(y_it) = exp(sum_t (old - sampler)):
        "truncate": w_i = min(rho_i, seq_high)                                          (sequence TIS)
        "mask":     w_i = rho_i if seq_low <= rho_i <= seq_high else 0                  (masked IS, MIS: the
                    sequence is dropped from the policy-gradient term; TRL's "sequence_mask" with cap 3 is
                    seq_low 0, seq_high 3)
    rho_i is the exact sequence-level ratio (a product), so it drifts from 1 with length when the sampler is
    biased: the logged fractions show how many sequences that touches. Its log is clamped to
    +-LOG_RATIO_CLAMP before exp(). The two levels are exclusive (config validation).

    old_logp, sampler_logp, mask: [B, T]. Returns (w [B, T] or [B, 1], or None when no correction is on;
    events [B, T] or [B, 1]: logp_gap = |old - sampler| always, and the weight and the fraction capped or masked).
    """
    gap = (old_logp - sampler_logp).detach()  # [B, T]
    events = {"sampler_logp_gap": gap.abs()}
    if tis_cap is not None and seq_mode != "none":
        raise ValueError("token-level tis_cap and a sequence-level correction are exclusive")
    if tis_cap is not None:
        ratio = torch.exp(gap.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
        weight = ratio.clamp(max=tis_cap)
        events.update(tis_weight_mean=weight, tis_capped_frac=ratio > tis_cap)
        return weight, events
    if seq_mode == "none":
        return None, events
    log_rho = torch.where(mask.bool(), gap, torch.zeros_like(gap)).sum(1, keepdim=True)  # [B, 1]
    rho = torch.exp(log_rho.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))
    if seq_mode == "truncate":
        weight = rho.clamp(max=seq_high)
        events["seq_capped_frac"] = rho > seq_high
    elif seq_mode == "mask":
        outside = (rho < seq_low) | (rho > seq_high)
        weight = torch.where(outside, torch.zeros_like(rho), rho)
        events["seq_masked_frac"] = outside
    else:
        raise ValueError(f"unknown sequence-level correction {seq_mode!r}; expected one of {SEQ_CORRECTIONS}")
    events["seq_weight_mean"] = weight
    return weight, events


@dataclass(frozen=True)
class LossSpec:
    """What `policy_loss` computes besides its tensors: the policy-gradient term, the rollout/learner mismatch weight
    on it and the KL term. Built once per run from the algorithm config (`from_config`); the defaults are PPO's
    clipped surrogate at 0.2 and nothing else."""

    kind: str = "ppo"  # POLICY_LOSSES: ppo_surrogate, gspo_surrogate or cispo_surrogate, chosen in policy_loss
    clip_low: float = 0.2  # ppo, gspo: the ratio is clipped to [1 - clip_low, 1 + clip_high]; cispo: unused
    clip_high: float = 0.2  # cispo: the cap of the importance weight
    dual_clip: float | None = None  # ppo: > 1, the loss of a token with A < 0 capped at -dual_clip * A; None: off
    kl_coef: float = 0.0  # weight of the KL term, added where policy_loss is given ref_logp
    kl_kind: str = "k3"  # KL_KINDS, the estimator of `kl_estimate`
    kl_ratio_correction: bool = True  # the KL estimate times the ratio pi_theta / pi_old (DeepSeek-V3.2 eq. 7)
    tis_cap: float | None = None  # token-level mismatch weight min(pi_old / pi_sampler, tis_cap); None: off
    seq_correction: str = "none"  # SEQ_CORRECTIONS, the sequence-level weight (exclusive with tis_cap)
    seq_low: float = 0.0  # "mask": sequences with rho outside [seq_low, seq_high] are dropped
    seq_high: float = 3.0  # "truncate": rho capped at seq_high

    @classmethod
    def from_config(cls, a: AlgorithmConfig) -> LossSpec:
        """The configured loss: the clip range from the chosen kind's own keys; a 0 dual_clip or tis_cap is off."""
        if a.policy_loss == "gspo":
            clip_low, clip_high = a.gspo_clip_eps, a.gspo_clip_eps_high
        elif a.policy_loss == "cispo":
            clip_low, clip_high = 0.0, a.cispo_weight_cap
        else:
            clip_low, clip_high = a.clip_eps, a.clip_eps_high or a.clip_eps
        return cls(kind=a.policy_loss, clip_low=clip_low, clip_high=clip_high, dual_clip=a.dual_clip or None,
                   kl_coef=a.kl_coef, kl_kind=a.kl_estimator, kl_ratio_correction=a.kl_ratio_correction,
                   tis_cap=a.tis_cap or None, seq_correction=a.seq_correction, seq_low=a.seq_correction_low,
                   seq_high=a.seq_correction_high)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    spec: LossSpec,
    ref_logp: Tensor | None = None,
    sampler_logp: Tensor | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor], Tensor | None]:
    """The per-token loss of one micro-batch: a policy-gradient term chosen by `spec.kind`, an optional
    rollout/learner mismatch weight on it, and an optional KL penalty.

    logp:         [B, T] log pi_theta of the sampled tokens (carries the gradient).
    old_logp:     [B, T] log pi_old, the learner's log-probs of the rollout policy (no gradient).
    advantages:   [B] one advantage per sequence (broadcast over tokens), or [B, T] per token (not for gspo).
    mask:         [B, T] 1 on completion tokens that count, 0 on padding (and on masked truncated completions).
    spec.kind:    "ppo" (`ppo_surrogate`: clip range [1 - clip_low, 1 + clip_high], dual_clip),
                  "gspo" (`gspo_surrogate`: the same range on the sequence ratio), or
                  "cispo" (`cispo_surrogate`: the weight capped at clip_high; clip_low unused).
    ref_logp:     [B, T] log pi_ref; when given, kl_coef * KL(pi_theta || pi_ref) is added per token, estimated
                  with `kl_estimate(logp, ref_logp, kl_kind)`. With kl_ratio_correction the estimate is multiplied
                  by the token ratio r_t = pi_theta / pi_old (with its gradient): the tokens were sampled from
                  pi_old, and E_old[r k] = E_theta[k], so the estimate is unbiased off-policy and, even on-policy
                  (r = 1 with gradient r grad log pi), its expected gradient is that of KL(pi_theta || pi_ref)
                  (DeepSeek-V3.2, eq. 7; TRL's use_bias_correction_kl). Without it, K3's expected gradient
                  on-policy is that of KL(pi_ref || pi_theta), and K1's is zero.
    sampler_logp: [B, T] log-probs reported by the rollout engine; `mismatch_weights` with the spec's tis_cap /
                  seq_correction / seq_low / seq_high multiplies the policy-gradient term (not the KL term).
    entropy:      [B, T] per-token entropy of pi_theta, only logged.

    loss_t = w * pg_t + kl_coef * [r_t] * KL_t. Returns (per_token_loss [B, T], zero on padding; stats; w), stats
    being detached 0-d tensors averaged over the valid tokens of this call (a per-sequence quantity counts once
    per token of its sequence): ratio_mean and the variant's clip fractions, and when applicable dual_clip_frac,
    sampler_logp_gap, tis_weight_mean, tis_capped_frac, seq_weight_mean, seq_capped_frac, seq_masked_frac, kl,
    entropy; and w the behaviour weights of `mismatch_weights` ([B, T] or [B, 1], no gradient; None where no
    correction is on or no sampler_logp was given).
    """
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over tokens
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)  # [B, T]
    if spec.kind == "ppo":
        pg_loss, events = ppo_surrogate(log_ratio, advantages, spec.clip_low, spec.clip_high, spec.dual_clip)
    elif spec.kind == "gspo":
        pg_loss, events = gspo_surrogate(log_ratio, advantages, mask, spec.clip_low, spec.clip_high)
    elif spec.kind == "cispo":
        pg_loss, events = cispo_surrogate(logp, log_ratio, advantages, spec.clip_high)
    else:
        raise ValueError(f"unknown policy loss {spec.kind!r}; expected one of {POLICY_LOSSES}")
    events.setdefault("ratio", torch.exp(log_ratio.detach()))
    events["ratio_mean"] = events.pop("ratio")

    weight = None
    if sampler_logp is not None:
        weight, mismatch = mismatch_weights(old_logp, sampler_logp, mask, spec.tis_cap, spec.seq_correction,
                                            spec.seq_low, spec.seq_high)
        events.update(mismatch)
        if weight is not None:
            pg_loss = pg_loss * weight
    elif spec.tis_cap is not None or spec.seq_correction != "none":
        raise ValueError("a mismatch correction (tis_cap or seq_correction) is on but sampler_logp was not given")

    loss = pg_loss
    if ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, spec.kl_kind)  # [B, T]
        if spec.kl_ratio_correction:
            kl = kl * torch.exp(log_ratio)
        loss = loss + spec.kl_coef * kl
        events["kl"] = kl.detach()
    if entropy is not None:
        events["entropy"] = entropy.detach()

    valid = mask.bool()
    stats = masked_means(events, valid)
    # Padding positions may hold arbitrary log-probs; zero them so they cannot leak NaN/inf into sums.
    return torch.where(valid, loss, torch.zeros_like(loss)), stats, weight


# ---------------------------------------------------------------------------------------------------
# Loss aggregation
# ---------------------------------------------------------------------------------------------------
def loss_normaliser(
    mask: Tensor, mode: str = "token_mean", max_completion_length: int | None = None
) -> float:
    """The denominator `agg_loss` needs, computed over the FULL update batch before it is split.

    mask: [B, T] of the whole update batch on this rank. The value is additive over sequences, so with
    several data-parallel ranks sum it over ranks (all_reduce SUM) and pass the total to every call.
    A sequence counts when it has at least one valid token: a completion whose tokens are all masked (a
    truncated one under `algorithm.mask_truncated`) is left out of the data, not averaged in as a zero.
    - token_mean: number of valid tokens.
    - seq_mean_token_mean: number of sequences.
    - seq_mean_token_sum_norm: number of sequences * max_completion_length (the configured generation
      limit, rollout.max_tokens, not the longest sequence of the batch, so the scale does not depend on the batch;
      TRL uses its max_completion_length, the same limit).
    """
    if mode == "token_mean":
        return float(mask.sum())
    if mode == "seq_mean_token_mean":
        return float(mask.bool().any(dim=1).sum())
    if mode == "seq_mean_token_sum_norm":
        if max_completion_length is None:
            raise ValueError("seq_mean_token_sum_norm needs max_completion_length")
        return float(mask.bool().any(dim=1).sum()) * max_completion_length
    raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {AGG_MODES}")


def agg_loss(per_token_loss: Tensor, mask: Tensor, mode: str, normaliser: float | Tensor) -> Tensor:
    """Reduce a per-token loss to the scalar to back-propagate, dividing by an explicit global normaliser.

    per_token_loss: [b, T] and mask: [b, T] for one micro-batch; normaliser from `loss_normaliser` over the
    whole update batch (summed over ranks). Because the normaliser is global, summing this value's
    gradients over micro-batches and ranks gives exactly the full-batch gradient: call backward on each
    micro-batch without dividing by the number of accumulation steps, and sum (not average) over ranks,
    or multiply by the world size when the engine averages.
    Modes:
    - "token_mean" (default, DAPO): sum of all valid token losses / number of valid tokens. Every token
      weighs the same, so a long wrong answer (e.g. a repetition loop) is penalised per token as much as a
      short one, which per-sequence averaging would dilute.
    - "seq_mean_token_mean" (original GRPO): mean over each sequence's tokens, summed over sequences /
      number of sequences. Shorter sequences get more weight per token (the length bias Dr. GRPO points out).
    - "seq_mean_token_sum_norm" (Dr. GRPO): sum of valid token losses / (number of sequences *
      max_completion_length), a constant that removes the per-sequence length normalisation.
    Returns a 0-d tensor.
    """
    valid = mask.to(per_token_loss.dtype)
    masked_loss = per_token_loss * valid  # [b, T]
    if mode in ("token_mean", "seq_mean_token_sum_norm"):
        return masked_loss.sum() / normaliser
    if mode == "seq_mean_token_mean":
        # A fully masked row contributes 0 instead of 0 / 0.
        per_sequence = masked_loss.sum(dim=1) / valid.sum(dim=1).clamp(min=1.0)  # [b]
        return per_sequence.sum() / normaliser
    raise ValueError(f"unknown aggregation mode {mode!r}; expected one of {AGG_MODES}")
