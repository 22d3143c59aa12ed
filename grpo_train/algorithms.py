"""GRPO loss math as pure tensor functions: group advantages, KL estimators, the clipped token-level
surrogate and the loss aggregation with an explicit normaliser.

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
  Framework Secretly Brings You Off-Policy RL Training" (the TIS weight min(pi_learner / pi_sampler, C)).

Deviations from the GRPO paper, on purpose:
- The default loss aggregation is `token_mean` (DAPO), not GRPO's per-sequence mean; see `agg_loss`.
- The default upper clip range can differ from the lower one (clip-higher), and the KL term is the
  per-token K3 added to the loss (as in GRPO) with its log-ratio clamped to +-LOG_RATIO_CLAMP.
"""

import torch
from torch import Tensor

# exp(20) ~ 4.9e8: large enough that no realistic log-ratio is touched, small enough that exp() stays far
# from fp32 overflow (~3.4e38) and that a single wild token cannot dominate a whole update.
LOG_RATIO_CLAMP = 20.0

ADVANTAGE_MODES = ("grpo", "dr_grpo", "rloo", "none")
KL_KINDS = ("k1", "k2", "k3")
AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")


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
# Token log-probs and entropy from logits
# ---------------------------------------------------------------------------------------------------
# Rows of logits handled at once: ~4 MB of fp32 per chunk, so each chunk's passes (upcast, log-sum-exp, softmax,
# entropy; in backward the softmax again) run in the cache instead of streaming [B, T, V] fp32 tensors through
# memory several times. SmolLM2's update of a 4 x 8 bf16 batch on 2 CPU cores: 6.1 s with the full fp32
# log-softmax, 4.7 s with this (0.18 s of it here, forward and backward).
CHUNK_ELEMENTS = 2**20


def token_logprobs_from_logits(logits: Tensor, tokens: Tensor, temperature: float = 1.0,
                               with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """log softmax(logits / T)[token] and, optionally, the entropy of softmax(logits / T), in fp32.

    logits: [..., V] in any float dtype (bf16 from the model is fine: it is upcast a chunk at a time).
    tokens: [...] long, the tokens whose log-probs are wanted.
    Returns (logp [...] fp32, differentiable with respect to logits; entropy [...] fp32 without gradient, or None).
    Equal to `torch.log_softmax(logits.float() / T, -1).gather(-1, tokens)` and its gradient, computed chunk by
    chunk: the full fp32 [..., V] tensors are never built, and backward recomputes the softmax from the saved
    logits and log-sum-exp.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    logp, entropy = _ChunkedTokenLogprobs.apply(flat, tokens.reshape(-1), float(temperature), with_entropy)
    return logp.view(tokens.shape), entropy.view(tokens.shape) if with_entropy else None


def _row_chunks(rows: int, vocab: int) -> list[slice]:
    size = max(1, CHUNK_ELEMENTS // vocab)
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


def _scaled_chunk(logits: Tensor, chunk: slice, temperature: float) -> Tensor:
    """logits[chunk] / T in fp32. fp32 logits are not copied at T = 1, so callers must not write into the result."""
    scaled = logits[chunk].float()
    return scaled / temperature if temperature != 1.0 else scaled


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """logits [M, V], tokens [M] -> (logp [M], entropy [M] or an empty tensor); see token_logprobs_from_logits."""

    @staticmethod
    def forward(ctx, logits: Tensor, tokens: Tensor, temperature: float, with_entropy: bool):
        rows, vocab = logits.shape
        logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
        log_norm = torch.empty_like(logp)  # log-sum-exp of logits / T per row, kept for backward
        entropy = torch.empty_like(logp) if with_entropy else logp.new_empty(0)
        for chunk in _row_chunks(rows, vocab):
            scaled = _scaled_chunk(logits, chunk, temperature)
            log_norm[chunk] = torch.logsumexp(scaled, -1)
            logp[chunk] = scaled.gather(-1, tokens[chunk, None]).squeeze(-1) - log_norm[chunk]
            if with_entropy:
                # H = log Z - sum_v p_v x_v with p = softmax(x), x = logits / T
                probs = (scaled - log_norm[chunk, None]).exp_()
                entropy[chunk] = log_norm[chunk] - (probs * scaled).sum(-1)
        ctx.save_for_backward(logits, tokens, log_norm)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, _grad_entropy: Tensor):
        logits, tokens, log_norm = ctx.saved_tensors
        t = ctx.temperature
        grad = torch.empty_like(logits)
        grad_logp = grad_logp.float()
        for chunk in _row_chunks(*logits.shape):
            # d logp / d x = onehot(token) - softmax(x), and dx / dlogits = 1 / T
            scaled = _scaled_chunk(logits, chunk, t)
            weight = grad_logp[chunk, None] / t  # [rows, 1]
            g = (scaled - log_norm[chunk, None]).exp_().mul_(-weight)
            g.scatter_add_(-1, tokens[chunk, None], weight)
            grad[chunk] = g
        return grad, None, None, None


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
# Clipped token-level surrogate
# ---------------------------------------------------------------------------------------------------
def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of values over the positions where mask is 1. values, mask: [B, T]. Returns a 0-d tensor."""
    valid = mask.to(values.dtype)
    return (values * valid).sum() / valid.sum().clamp(min=1.0)


def clipped_surrogate_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    dual_clip: float | None = None,
    ref_logp: Tensor | None = None,
    kl_coef: float = 0.0,
    kl_kind: str = "k3",
    sampler_logp: Tensor | None = None,
    tis_cap: float | None = None,
    entropy: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token PPO/GRPO clipped surrogate loss (DeepSeekMath eq. 3, negated to be minimised).

    logp:         [B, T] log pi_theta of the sampled tokens (carries the gradient).
    old_logp:     [B, T] log pi_old, the learner's log-probs of the rollout policy (no gradient).
    advantages:   [B] one advantage per sequence (broadcast over tokens), or [B, T] per token.
    mask:         [B, T] 1 on completion tokens, 0 on padding.
    ref_logp:     [B, T] log pi_ref; when given, kl_coef * KL(pi_theta || pi_ref) is added per token,
                  estimated with `kl_estimate(logp, ref_logp, kl_kind)` (K3 by default, as in GRPO).
    sampler_logp: [B, T] log-probs reported by the rollout engine (vLLM); used only when tis_cap is set.
    entropy:      [B, T] per-token entropy of pi_theta, only logged.

    ratio = exp(logp - old_logp);
    pg = -min(ratio * A, clip(ratio, 1 - clip_low, 1 + clip_high) * A)
    With dual_clip = c > 1 the loss of a token with A < 0 is also capped at -c * A, so a huge ratio on a
    bad token cannot blow up the update. With tis_cap = C the policy-gradient term is multiplied by the
    truncated importance weight min(exp(old_logp - sampler_logp), C) (no gradient), which corrects for the
    sampler computing slightly different probabilities than the learner.
    loss = tis_weight * pg + kl_coef * KL.

    Returns (per_token_loss [B, T], zero on padding; stats), stats being detached 0-d tensors averaged over
    the valid tokens of this call: clip_frac_low (ratio < 1 - clip_low with A < 0, gradient cut),
    clip_frac_high (ratio > 1 + clip_high with A > 0, gradient cut), ratio_mean, and when applicable
    dual_clip_frac, tis_weight_mean, kl, entropy.
    """
    valid = mask.bool()
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1], broadcast over tokens
    log_ratio = (logp - old_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
    ratio = torch.exp(log_ratio)  # [B, T]
    unclipped = ratio * advantages
    clipped = ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * advantages
    pg_loss = -torch.minimum(unclipped, clipped)  # [B, T]

    stats: dict[str, Tensor] = {}
    if dual_clip is not None:
        if dual_clip <= 1.0:
            raise ValueError(f"dual_clip must be > 1, got {dual_clip}")
        dual_capped = torch.minimum(pg_loss, -dual_clip * advantages)
        is_dual_clipped = (advantages < 0) & (pg_loss > -dual_clip * advantages)
        pg_loss = torch.where(advantages < 0, dual_capped, pg_loss)
        stats["dual_clip_frac"] = masked_mean(is_dual_clipped.float(), valid)

    if tis_cap is not None:
        if sampler_logp is None:
            raise ValueError("tis_cap is set but sampler_logp was not given")
        sampler_log_ratio = (old_logp - sampler_logp).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        tis_weight = torch.exp(sampler_log_ratio).clamp(max=tis_cap).detach()  # [B, T]
        pg_loss = pg_loss * tis_weight
        stats["tis_weight_mean"] = masked_mean(tis_weight, valid)

    loss = pg_loss
    if ref_logp is not None:
        kl = kl_estimate(logp, ref_logp, kl_kind)  # [B, T]
        loss = loss + kl_coef * kl
        stats["kl"] = masked_mean(kl.detach(), valid)

    ratio = ratio.detach()
    stats["clip_frac_low"] = masked_mean(((ratio < 1.0 - clip_low) & (advantages < 0)).float(), valid)
    stats["clip_frac_high"] = masked_mean(((ratio > 1.0 + clip_high) & (advantages > 0)).float(), valid)
    stats["ratio_mean"] = masked_mean(ratio, valid)
    if entropy is not None:
        stats["entropy"] = masked_mean(entropy.detach(), valid)
    # Padding positions may hold arbitrary log-probs; zero them so they cannot leak NaN/inf into sums.
    return torch.where(valid, loss, torch.zeros_like(loss)), stats


# ---------------------------------------------------------------------------------------------------
# Loss aggregation
# ---------------------------------------------------------------------------------------------------
def loss_normaliser(
    mask: Tensor, mode: str = "token_mean", max_completion_length: int | None = None
) -> float:
    """The denominator `agg_loss` needs, computed over the FULL update batch before it is split.

    mask: [B, T] of the whole update batch on this rank. The value is additive over sequences, so with
    several data-parallel ranks sum it over ranks (all_reduce SUM) and pass the total to every call.
    - token_mean: number of valid tokens.
    - seq_mean_token_mean: number of sequences.
    - seq_mean_token_sum_norm: number of sequences * max_completion_length (the configured generation
      limit, not the longest sequence of the batch, so the scale does not depend on the batch).
    """
    if mode == "token_mean":
        return float(mask.sum())
    if mode == "seq_mean_token_mean":
        return float(mask.shape[0])
    if mode == "seq_mean_token_sum_norm":
        if max_completion_length is None:
            raise ValueError("seq_mean_token_sum_norm needs max_completion_length")
        return float(mask.shape[0] * max_completion_length)
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
