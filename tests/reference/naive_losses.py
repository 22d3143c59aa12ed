"""An independent, deliberately plain implementation of the loss of grpo_train.algorithms, for the tests.

One sequence at a time, unpadded (1-D tensors of its own length), one token at a time, with Python control flow
instead of masks, clamps and torch.where: what the papers write, so the vectorised, padded, split and distributed
code has something independent to be compared with. Nothing here imports grpo_train.

`naive_loss(seqs, settings)` returns the 0-d loss of a whole batch; backward through it gives the reference
gradient. A sequence is a dict with 1-D tensors `logp` (with gradient), `old`, `sampler`, `ref` (optional) and
the float `advantage`; `settings` holds the same names as the fields of `algorithms.LossSpec` plus `agg`
(loss_agg) and `max_tokens`.
"""

import math

import torch


def ppo_terms(logp, old, advantage, clip_low, clip_high, dual_clip):
    terms = []
    for t in range(len(logp)):
        ratio = torch.exp(logp[t] - old[t])
        clipped = torch.clamp(ratio, 1 - clip_low, 1 + clip_high)
        term = -torch.minimum(ratio * advantage, clipped * advantage)
        if dual_clip is not None and advantage < 0:
            term = torch.minimum(term, torch.tensor(-dual_clip * advantage, dtype=term.dtype))
        terms.append(term)
    return terms


def gspo_terms(logp, old, advantage, clip_low, clip_high):
    s = torch.exp(sum(logp[t] - old[t] for t in range(len(logp))) / len(logp))  # geometric mean of the ratios
    term = -torch.minimum(s * advantage, torch.clamp(s, 1 - clip_low, 1 + clip_high) * advantage)
    return [term] * len(logp)  # the sequence's loss on each of its tokens


def cispo_terms(logp, old, advantage, weight_cap):
    terms = []
    for t in range(len(logp)):
        weight = min(math.exp(float((logp[t] - old[t]).detach())), weight_cap)  # a Python float: no gradient
        terms.append(-weight * advantage * logp[t])
    return terms


def mismatch_factors(old, sampler, settings):
    """One weight per token (a sequence-level weight repeated), as plain floats."""
    n = len(old)
    if settings.get("tis_cap") is not None:
        return [min(math.exp(float(old[t] - sampler[t])), settings["tis_cap"]) for t in range(n)]
    mode = settings.get("seq_correction", "none")
    if mode == "none":
        return [1.0] * n
    rho = math.exp(sum(float(old[t] - sampler[t]) for t in range(n)))
    if mode == "truncate":
        return [min(rho, settings["seq_high"])] * n
    keep = settings["seq_low"] <= rho <= settings["seq_high"]
    return [rho if keep else 0.0] * n


def sequence_terms(seq, settings):
    """Per-token losses of one sequence."""
    logp, old, advantage = seq["logp"], seq["old"], seq["advantage"]
    kind = settings.get("kind", "ppo")
    if kind == "ppo":
        terms = ppo_terms(logp, old, advantage, settings["clip_low"], settings["clip_high"],
                          settings.get("dual_clip"))
    elif kind == "gspo":
        terms = gspo_terms(logp, old, advantage, settings["clip_low"], settings["clip_high"])
    else:
        terms = cispo_terms(logp, old, advantage, settings["clip_high"])
    factors = mismatch_factors(old, seq["sampler"], settings)
    terms = [factor * term for factor, term in zip(factors, terms, strict=True)]
    if seq.get("ref") is not None and settings.get("kl_coef", 0.0):
        for t in range(len(logp)):
            x = seq["ref"][t] - logp[t]
            k3 = torch.exp(x) - x - 1
            if settings.get("kl_ratio_correction", True):
                k3 = k3 * torch.exp(logp[t] - old[t])
            terms[t] = terms[t] + settings["kl_coef"] * k3
    return terms


def naive_loss(seqs, settings):
    """The batch loss: `agg` over the sequences that are not dropped (seq["dropped"]: a masked truncated one)."""
    kept = [seq for seq in seqs if not seq.get("dropped")]
    per_sequence = [sequence_terms(seq, settings) for seq in kept]
    agg = settings.get("agg", "token_mean")
    if agg == "token_mean":
        return sum(sum(terms) for terms in per_sequence) / sum(len(terms) for terms in per_sequence)
    if agg == "seq_mean_token_mean":
        return sum(sum(terms) / len(terms) for terms in per_sequence) / len(per_sequence)
    return sum(sum(terms) for terms in per_sequence) / (len(per_sequence) * settings["max_tokens"])
