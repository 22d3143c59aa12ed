"""Loss aggregation: worked numbers, and the gradient is the same whether a batch is processed at once,
in micro-batches with gradient accumulation, or across two simulated data-parallel ranks; for the loss variants
and corrections, all three equal the naive per-sequence implementation (tests/reference/naive_losses.py)."""

import copy

import pytest
import torch
from reference.naive_losses import naive_loss

from grpo_train.algorithms import LossSpec, agg_loss, loss_normaliser, policy_loss

MODES = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]
MAX_COMPLETION_LENGTH = 9  # the configured limit, larger than any sequence below


def test_agg_loss_worked_example():
    # Two sequences, max length 4. Valid losses: seq 0 [1, 2, 3], seq 1 [4]; padding holds 9s to be ignored.
    #   token_mean:              (1 + 2 + 3 + 4) / 4 tokens = 2.5
    #   seq_mean_token_mean:     (mean(1, 2, 3) + mean(4)) / 2 sequences = (2 + 4) / 2 = 3.0
    #   seq_mean_token_sum_norm: 10 / (2 sequences * 4) = 1.25
    per_token = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 9.0, 9.0, 9.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    expected = {
        "token_mean": (4.0, 2.5),
        "seq_mean_token_mean": (2.0, 3.0),
        "seq_mean_token_sum_norm": (8.0, 1.25),
    }
    for mode, (normaliser, value) in expected.items():
        assert loss_normaliser(mask, mode, max_completion_length=4) == normaliser
        assert agg_loss(per_token, mask, mode, normaliser).item() == pytest.approx(value)
    with pytest.raises(ValueError, match="max_completion_length"):
        loss_normaliser(mask, "seq_mean_token_sum_norm")
    with pytest.raises(ValueError, match="unknown aggregation mode"):
        agg_loss(per_token, mask, "sum", 1.0)


def make_batch(num_seqs: int = 8, length: int = 7, vocab: int = 11):
    """A tiny next-token policy and a batch of completions of different lengths, in float64."""
    generator = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    policy = torch.nn.Sequential(
        torch.nn.Embedding(vocab, 6), torch.nn.Tanh(), torch.nn.Linear(6, vocab)
    ).double()
    tokens = torch.randint(vocab, (num_seqs, length + 1), generator=generator)
    lengths = torch.tensor([7, 3, 5, 1, 6, 2, 7, 4])
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()  # [B, T]
    advantages = torch.randn(num_seqs, generator=generator, dtype=torch.float64)
    with torch.no_grad():
        logp = token_logp(policy, tokens)
    # Old and reference log-probs a little off the current ones, so some tokens are clipped and KL != 0.
    old_logp = logp + 0.3 * torch.randn(logp.shape, generator=generator, dtype=torch.float64)
    ref_logp = logp + 0.2 * torch.randn(logp.shape, generator=generator, dtype=torch.float64)
    return policy, tokens, mask, advantages, old_logp, ref_logp


def token_logp(policy: torch.nn.Module, tokens: torch.Tensor) -> torch.Tensor:
    """[B, T + 1] tokens -> [B, T] log-prob of each next token given the previous one."""
    logits = policy(tokens[:, :-1])
    return logits.log_softmax(-1).gather(-1, tokens[:, 1:, None]).squeeze(-1)


def accumulate_gradients(
    policy, batch, rows: list[list[int]], mode: str, normaliser: float
) -> list[torch.Tensor]:
    """Backward once per micro-batch (each a list of sequence indices), summing gradients, no 1/steps."""
    _, tokens, mask, advantages, old_logp, ref_logp = batch
    policy.zero_grad()
    for index in rows:
        per_token, _, _ = policy_loss(
            token_logp(policy, tokens[index]),
            old_logp[index],
            advantages[index],
            mask[index],
            LossSpec(clip_low=0.2, clip_high=0.28, kl_coef=0.05),
            ref_logp=ref_logp[index],
        )
        agg_loss(per_token, mask[index], mode, normaliser).backward()
    return [p.grad.clone() for p in policy.parameters()]


@pytest.mark.parametrize("mode", MODES)
def test_gradient_is_invariant_to_micro_batches_and_ranks(mode):
    batch = make_batch()
    policy, mask = batch[0], batch[2]
    _, stats, _ = policy_loss(token_logp(policy, batch[1]), batch[4], batch[3], mask,
                              LossSpec(clip_low=0.2, clip_high=0.28))
    assert stats["clip_frac_low"] > 0 and stats["clip_frac_high"] > 0  # the clipped branches take part
    normaliser = loss_normaliser(mask, mode, MAX_COMPLETION_LENGTH)
    full = accumulate_gradients(policy, batch, [list(range(8))], mode, normaliser)
    assert any(g.abs().sum() > 0 for g in full)

    micro = accumulate_gradients(policy, batch, [[0, 1, 2], [3, 4, 5], [6, 7]], mode, normaliser)

    # Two ranks, each with its own model replica, its half of the batch in micro-batches, and the global
    # normaliser as the all-reduced SUM of the per-rank values; gradients are then summed over ranks.
    rank_rows = [[[0, 1], [2, 3, 4]], [[5], [6, 7]]]
    rank_normaliser = sum(
        loss_normaliser(mask[sum(rows, [])], mode, MAX_COMPLETION_LENGTH) for rows in rank_rows
    )
    assert rank_normaliser == normaliser
    per_rank = [
        accumulate_gradients(copy.deepcopy(policy), batch, rows, mode, rank_normaliser) for rows in rank_rows
    ]
    ranks = [a + b for a, b in zip(*per_rank, strict=True)]

    for reference, split in [(full, micro), (full, ranks)]:
        for a, b in zip(reference, split, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


def test_local_normaliser_breaks_split_invariance():
    # The failure the explicit normaliser prevents: dividing each micro-batch by its own token count (and
    # averaging over micro-batches) weighs the tokens of short micro-batches more.
    batch = make_batch()
    policy, mask = batch[0], batch[2]
    full = accumulate_gradients(
        policy, batch, [list(range(8))], "token_mean", loss_normaliser(mask, "token_mean")
    )
    rows = [[0, 1, 2], [3, 4, 5], [6, 7]]
    naive = [torch.zeros_like(p) for p in policy.parameters()]
    for index in rows:
        local = loss_normaliser(mask[index], "token_mean") * len(rows)
        grads = accumulate_gradients(policy, batch, [index], "token_mean", local)
        naive = [n + g for n, g in zip(naive, grads, strict=True)]
    difference = max((a - b).abs().max().item() for a, b in zip(full, naive, strict=True))
    assert difference > 1e-3


# ---------------------------------------------------------------------------------------------------
# The loss variants and corrections: micro-batch and rank splits, against the naive per-sequence implementation
# ---------------------------------------------------------------------------------------------------
VARIANTS = {
    "gspo": {"kind": "gspo", "clip_low": 0.05, "clip_high": 0.08},
    "cispo": {"kind": "cispo", "clip_low": 0.0, "clip_high": 1.2},
    "ppo_seq_mask": {"kind": "ppo", "clip_low": 0.2, "clip_high": 0.28, "seq_correction": "mask", "seq_low": 0.6,
                     "seq_high": 1.4},
    "gspo_seq_truncate": {"kind": "gspo", "clip_low": 0.05, "clip_high": 0.08, "seq_correction": "truncate",
                          "seq_low": 0.0, "seq_high": 1.2},
    "cispo_tis": {"kind": "cispo", "clip_low": 0.0, "clip_high": 1.2, "tis_cap": 1.1},
}
DROPPED = [1, 4]  # completions whose tokens the loss ignores (truncated, with algorithm.mask_truncated)


def variant_gradients(policy, batch, sampler_logp, mask, rows, variant, mode, normaliser):
    """As accumulate_gradients, for a variant of VARIANTS with the KL term and the given loss mask."""
    _, tokens, _, advantages, old_logp, ref_logp = batch
    policy.zero_grad()
    for index in rows:
        per_token, _, _ = policy_loss(token_logp(policy, tokens[index]), old_logp[index], advantages[index],
                                      mask[index], LossSpec(kl_coef=0.05, **VARIANTS[variant]),
                                      ref_logp=ref_logp[index], sampler_logp=sampler_logp[index])
        agg_loss(per_token, mask[index], mode, normaliser).backward()
    return [p.grad.clone() for p in policy.parameters()]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variant_gradients_equal_the_naive_ones_under_micro_batches_and_ranks(variant, mode):
    batch = make_batch()
    policy, tokens, mask, advantages, old_logp, ref_logp = batch
    generator = torch.Generator().manual_seed(1)
    sampler_logp = old_logp + 0.15 * torch.randn(old_logp.shape, generator=generator, dtype=torch.float64)
    loss_mask = mask.clone()
    loss_mask[DROPPED] = 0
    normaliser = loss_normaliser(loss_mask, mode, MAX_COMPLETION_LENGTH)
    full = variant_gradients(policy, batch, sampler_logp, loss_mask, [list(range(8))], variant, mode, normaliser)
    micro = variant_gradients(policy, batch, sampler_logp, loss_mask, [[0, 1, 2], [3, 4, 5], [6, 7]], variant, mode,
                              normaliser)
    rank_rows = [[[0, 1], [2, 3, 4]], [[5], [6, 7]]]
    rank_normaliser = sum(loss_normaliser(loss_mask[sum(rows, [])], mode, MAX_COMPLETION_LENGTH) for rows in rank_rows)
    per_rank = [variant_gradients(copy.deepcopy(policy), batch, sampler_logp, loss_mask, rows, variant, mode,
                                  rank_normaliser) for rows in rank_rows]
    ranks = [a + b for a, b in zip(*per_rank, strict=True)]

    policy.zero_grad()
    lengths = mask.sum(1).tolist()
    seqs = [{"logp": token_logp(policy, tokens[i: i + 1, : n + 1])[0], "old": old_logp[i, :n],
             "sampler": sampler_logp[i, :n], "ref": ref_logp[i, :n], "advantage": float(advantages[i]),
             "dropped": i in DROPPED} for i, n in enumerate(lengths)]
    settings = {**VARIANTS[variant], "kl_coef": 0.05, "agg": mode, "max_tokens": MAX_COMPLETION_LENGTH}
    naive_loss(seqs, settings).backward()
    naive = [p.grad.clone() for p in policy.parameters()]
    assert any(g.abs().sum() > 0 for g in naive)
    for split in (full, micro, ranks):
        for a, b in zip(naive, split, strict=True):
            torch.testing.assert_close(b, a, atol=1e-9, rtol=1e-7)
