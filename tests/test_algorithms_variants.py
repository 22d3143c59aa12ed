"""GSPO, CISPO, the rollout/learner mismatch weights and the KL ratio correction: worked numbers, the exact
expected KL gradients, and every combination against the naive per-sequence implementation
(tests/reference/naive_losses.py)."""

import itertools
import math

import pytest
import torch
from reference.naive_losses import naive_loss

from grpo_train.algorithms import LossSpec, agg_loss, loss_normaliser, mismatch_weights, policy_loss


def leaf(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64).requires_grad_()


# ---------------------------------------------------------------------------------------------------
# GSPO
# ---------------------------------------------------------------------------------------------------
def test_gspo_worked_example():
    # clip 0.2 / 0.28 (PPO-sized, to make the numbers readable). s = exp(mean log-ratio); every token of a
    # sequence carries the sequence's loss -min(s A, clip(s) A); where unclipped, d loss_i / d logp_t = -A s / |y|,
    # and the sum over the |y| tokens that carry loss_i makes it -A s per token.
    #   seq 0, A = +1, ratios [2, 0.5]:  s = sqrt(2 * 0.5) = 1, loss -1 per token; token gradient 2 * (-1 / 2) = -1
    #   seq 1, A = +1, ratios [1.5, 1.5]: s = 1.5 > 1.28, clipped: loss -1.28, gradient 0
    #   seq 2, A = -1, ratios [0.5, 0.5]: s = 0.5 < 0.8, clipped: loss -min(-0.5, -0.8) = 0.8, gradient 0
    #   seq 3, A = -2, ratio [1.2] (one token, then padding with a wild log-ratio): s = 1.2, loss 2.4,
    #          gradient -A s / 1 = 2.4
    old = torch.full((4, 2), -1.0, dtype=torch.float64)
    logp = leaf((old + torch.tensor([[2.0, 0.5], [1.5, 1.5], [0.5, 0.5], [1.2, 1.0]]).log()).tolist())
    with torch.no_grad():
        logp[3, 1] = 1e4
    mask = torch.tensor([[1, 1], [1, 1], [1, 1], [1, 0]])
    advantages = torch.tensor([1.0, 1.0, -1.0, -2.0], dtype=torch.float64)
    loss, stats, _ = policy_loss(logp, old, advantages, mask, LossSpec(kind="gspo", clip_low=0.2, clip_high=0.28))
    torch.testing.assert_close(loss, torch.tensor([[-1.0, -1.0], [-1.28, -1.28], [0.8, 0.8], [2.4, 0.0]],
                                                  dtype=torch.float64))
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-1.0, -1.0], [0, 0], [0, 0], [2.4, 0]], dtype=torch.float64))
    # 7 valid tokens: seq 1 (2 tokens) clipped high, seq 2 (2 tokens) clipped low; ratio (2*1 + 2*1.5 + 2*0.5 + 1.2) / 7
    assert stats["clip_frac_high"].item() == pytest.approx(2 / 7)
    assert stats["clip_frac_low"].item() == pytest.approx(2 / 7)
    assert stats["ratio_mean"].item() == pytest.approx(7.2 / 7)


def test_gspo_clips_the_whole_sequence_where_ppo_clips_tokens():
    # Token ratios [1.5, 0.9] with A = +1 and the GSPO paper's range: s = sqrt(1.35) = 1.1619 > 1 + 4e-4, so the
    # whole sequence has no gradient; PPO (0.2) cuts token 0 only and keeps token 1's gradient -0.9.
    old = torch.zeros(1, 2, dtype=torch.float64)
    logp = leaf([[math.log(1.5), math.log(0.9)]])
    gspo, _, _ = policy_loss(logp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2),
                             LossSpec(kind="gspo", clip_low=3e-4, clip_high=4e-4))
    (gspo_grad,) = torch.autograd.grad(gspo.sum(), logp)
    assert gspo_grad.abs().max() == 0 and gspo[0, 0].item() == pytest.approx(-(1 + 4e-4))
    ppo, _, _ = policy_loss(logp, old, torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 2), LossSpec())
    (ppo_grad,) = torch.autograd.grad(ppo.sum(), logp)
    torch.testing.assert_close(ppo_grad, torch.tensor([[0.0, -0.9]], dtype=torch.float64))
    with pytest.raises(ValueError, match="one advantage per sequence"):
        policy_loss(logp, old, torch.ones(1, 2, dtype=torch.float64), torch.ones(1, 2), LossSpec(kind="gspo"))


# ---------------------------------------------------------------------------------------------------
# CISPO
# ---------------------------------------------------------------------------------------------------
def test_cispo_worked_example_keeps_the_gradient_of_capped_tokens():
    # weight cap 2. loss = -sg(min(r, 2)) A logp; d loss / d logp = -min(r, 2) A.
    #   A = +1, pi = 0.3, r = 3 -> weight 2: loss -2 ln 0.3 = 2.407946, gradient -2 (PPO would give 0 here)
    #   A = -1, pi = 0.1, r = 0.5 -> weight 0.5: loss 0.5 ln 0.1 = -1.151293, gradient 0.5 (no lower bound)
    logp = leaf([[math.log(0.3)], [math.log(0.1)]])
    old = (logp.detach() - torch.tensor([[math.log(3.0)], [math.log(0.5)]], dtype=torch.float64))
    advantages = torch.tensor([1.0, -1.0], dtype=torch.float64)
    loss, stats, _ = policy_loss(logp, old, advantages, torch.ones(2, 1), LossSpec(kind="cispo", clip_high=2.0))
    torch.testing.assert_close(loss, torch.tensor([[2.407946], [-1.151293]], dtype=torch.float64), atol=1e-6, rtol=0)
    loss.sum().backward()
    torch.testing.assert_close(logp.grad, torch.tensor([[-2.0], [0.5]], dtype=torch.float64))
    assert stats["clip_frac_high"].item() == pytest.approx(0.5)
    assert "clip_frac_low" not in stats


@pytest.mark.parametrize("kind", ["gspo", "cispo"])
def test_on_policy_gradient_is_the_policy_gradient_of_ppo(kind):
    # At old = logp (ratio exactly 1): ppo and cispo have the token gradient -A; gspo spreads -A over the
    # sequence's tokens (-A / |y| each), so with seq_mean_token_mean all three give -A / |y| per token.
    generator = torch.Generator().manual_seed(3)
    logp = (torch.randn(4, 5, generator=generator, dtype=torch.float64) - 2).requires_grad_()
    mask = (torch.arange(5)[None] < torch.tensor([[5], [2], [4], [1]])).long()
    advantages = torch.randn(4, generator=generator, dtype=torch.float64)
    grads = {}
    for name in ("ppo", kind):
        per_token, _, _ = policy_loss(logp, logp.detach(), advantages, mask,
                                      LossSpec(kind=name, clip_high=0.2 if name != "cispo" else 5.0))
        (grads[name],) = torch.autograd.grad(agg_loss(per_token, mask, "seq_mean_token_mean", 4), logp)
    torch.testing.assert_close(grads[kind], grads["ppo"])
    torch.testing.assert_close(grads["ppo"], -advantages[:, None] * mask / mask.sum(1, keepdim=True) / 4)


# ---------------------------------------------------------------------------------------------------
# Rollout/learner mismatch weights
# ---------------------------------------------------------------------------------------------------
def test_mismatch_weights_worked_example():
    # Per-token log(pi_old / pi_sampler): seq 0 [ln 2, ln 2] -> rho 4; seq 1 [ln 0.5, 0] -> rho 0.5;
    # seq 2 [ln 1.5, padding with a wild value] -> rho 1.5. Sampler log-probs are -1 throughout.
    sampler = torch.full((3, 2), -1.0, dtype=torch.float64)
    gap = torch.tensor([[math.log(2), math.log(2)], [math.log(0.5), 0.0], [math.log(1.5), 50.0]],
                       dtype=torch.float64)
    mask = torch.tensor([[1, 1], [1, 1], [1, 0]])
    old = sampler + gap
    # token TIS, cap 1.8: [[1.8, 1.8], [0.5, 1], [1.5, -]]; 2 of 5 tokens capped, mean weight 6.6 / 5
    weight, events = mismatch_weights(old, sampler, mask, tis_cap=1.8)
    torch.testing.assert_close(weight[mask.bool()], torch.tensor([1.8, 1.8, 0.5, 1.0, 1.5], dtype=torch.float64))
    assert events["tis_capped_frac"][mask.bool()].tolist() == [True, True, False, False, False]
    # sequence TIS, cap 3: [3, 0.5, 1.5], seq 0 capped
    weight, events = mismatch_weights(old, sampler, mask, seq_mode="truncate", seq_high=3.0)
    torch.testing.assert_close(weight, torch.tensor([[3.0], [0.5], [1.5]], dtype=torch.float64))
    assert events["seq_capped_frac"].flatten().tolist() == [True, False, False]
    # sequence MIS on [0.6, 3]: seq 0 (rho 4) and seq 1 (rho 0.5) dropped, seq 2 keeps its weight 1.5
    weight, events = mismatch_weights(old, sampler, mask, seq_mode="mask", seq_low=0.6, seq_high=3.0)
    torch.testing.assert_close(weight, torch.tensor([[0.0], [0.0], [1.5]], dtype=torch.float64))
    assert events["seq_masked_frac"].flatten().tolist() == [True, True, False]
    torch.testing.assert_close(events["sampler_logp_gap"][mask.bool()], gap[mask.bool()].abs())
    assert mismatch_weights(old, sampler, mask)[0] is None
    with pytest.raises(ValueError, match="exclusive"):
        mismatch_weights(old, sampler, mask, tis_cap=2.0, seq_mode="mask")


def test_sequence_mask_drops_the_policy_gradient_but_not_the_kl_term():
    # One token, A = +1, on-policy (r = 1): pg = -1, grad -1. Sampler ratio 4 is outside [0, 3]: pg weight 0.
    # The KL term (kl_coef 0.5, pi_ref = pi / 2: x = -ln 2, k3 = 0.5 + ln 2 - 1 = 0.193147, dk3/dlogp = 0.5,
    # times r = 1 whose gradient adds k3 * 1) stays: loss 0.5 * 0.193147, grad 0.5 * (0.5 + 0.193147).
    logp = leaf([[math.log(0.4)]])
    loss, stats, _ = policy_loss(logp, logp.detach(), torch.tensor([1.0], dtype=torch.float64), torch.ones(1, 1),
                                 LossSpec(kl_coef=0.5, seq_correction="mask", seq_high=3.0),
                                 ref_logp=logp.detach() - math.log(2), sampler_logp=logp.detach() - math.log(4))
    assert loss.item() == pytest.approx(0.5 * 0.193147, abs=1e-6)
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(0.5 * (0.5 + 0.193147), abs=1e-6)
    assert stats["seq_masked_frac"].item() == 1.0 and stats["seq_weight_mean"].item() == 0.0
    with pytest.raises(ValueError, match="sampler_logp"):
        policy_loss(logp, logp.detach(), torch.tensor([1.0]), torch.ones(1, 1), LossSpec(seq_correction="mask"))


# ---------------------------------------------------------------------------------------------------
# KL ratio correction: exact expectations over a categorical policy
# ---------------------------------------------------------------------------------------------------
def expected_kl_gradient(correction: bool, kind: str = "k3") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """E_{y ~ pi}[grad of the per-token KL term] on-policy (old = pi), by enumerating the 6 outcomes; with the
    gradients of KL(pi || ref) and KL(ref || pi) to compare with."""
    theta = torch.tensor([0.3, -1.0, 0.8, 0.0, -0.4, 1.1], dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([0.5, 0.2, -0.3, 0.9, -1.2, 0.1], dtype=torch.float64).log_softmax(0)
    logp = theta.log_softmax(0)
    probs = logp.detach().exp()
    spec = LossSpec(kl_coef=1.0, kl_kind=kind, kl_ratio_correction=correction)
    per_outcome, _, _ = policy_loss(logp[:, None], logp.detach()[:, None], torch.zeros(6, dtype=torch.float64),
                                    torch.ones(6, 1), spec, ref_logp=ref[:, None])
    (expected,) = torch.autograd.grad((probs * per_outcome[:, 0]).sum(), theta)
    fresh = theta.log_softmax(0)
    (reverse,) = torch.autograd.grad((fresh.exp() * (fresh - ref)).sum(), theta)  # KL(pi || ref)
    (forward,) = torch.autograd.grad((ref.exp() * (ref - theta.log_softmax(0))).sum(), theta)  # KL(ref || pi)
    return expected, reverse, forward


def test_kl_ratio_correction_gives_the_gradient_of_kl_pi_ref():
    corrected, reverse, forward = expected_kl_gradient(True)
    torch.testing.assert_close(corrected, reverse)
    plain, _, _ = expected_kl_gradient(False)
    torch.testing.assert_close(plain, forward)  # plain K3 on-policy: the other direction of the KL
    assert (plain - reverse).abs().max() > 0.2 * reverse.abs().max()  # and the two directions differ here
    # K1 alone has zero expected gradient; corrected, it is the right one too.
    torch.testing.assert_close(expected_kl_gradient(False, "k1")[0], torch.zeros(6, dtype=torch.float64))
    torch.testing.assert_close(expected_kl_gradient(True, "k1")[0], reverse)


def test_kl_ratio_correction_worked_example():
    # pi_old = 0.5, pi = 0.55 (r = 1.1), pi_ref = 0.25: k3 = 0.243003 (test_algorithms' example),
    # corrected r k3 = 0.267303; gradient r * (dk3/dlogp + k3) = 1.1 * (0.545455 + 0.243003) = 0.867303
    old = torch.full((1, 1), math.log(0.5), dtype=torch.float64)
    logp = leaf([[math.log(0.55)]])
    ref = torch.full((1, 1), math.log(0.25), dtype=torch.float64)
    loss, stats, _ = policy_loss(logp, old, torch.zeros(1, dtype=torch.float64), torch.ones(1, 1),
                                 LossSpec(kl_coef=1.0), ref_logp=ref)
    assert loss.item() == pytest.approx(0.267303, abs=1e-6) and stats["kl"].item() == pytest.approx(0.267303, abs=1e-6)
    loss.sum().backward()
    assert logp.grad.item() == pytest.approx(0.867303, abs=1e-6)


# ---------------------------------------------------------------------------------------------------
# Every combination against the naive per-sequence implementation, on random tensors
# ---------------------------------------------------------------------------------------------------
KINDS = {"ppo": {"kind": "ppo", "clip_low": 0.2, "clip_high": 0.28},
         "ppo_dual": {"kind": "ppo", "clip_low": 0.2, "clip_high": 0.2, "dual_clip": 1.5},
         "gspo": {"kind": "gspo", "clip_low": 0.05, "clip_high": 0.08},
         "cispo": {"kind": "cispo", "clip_low": 0.0, "clip_high": 1.3}}
CORRECTIONS = {"none": {}, "tis": {"tis_cap": 1.2},
               "seq_truncate": {"seq_correction": "truncate", "seq_low": 0.0, "seq_high": 1.5},
               "seq_mask": {"seq_correction": "mask", "seq_low": 0.5, "seq_high": 1.5}}
AGGS = ["token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"]


def random_batch(seed: int, kl: bool):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([6, 2, 5, 1, 7, 3, 4])
    n, width = len(lengths), 7
    mask = (torch.arange(width)[None] < lengths[:, None]).long()
    logp = (torch.randn(n, width, generator=g, dtype=torch.float64) * 0.5 - 1.5).requires_grad_()
    old = logp.detach() + 0.25 * torch.randn(n, width, generator=g, dtype=torch.float64)
    sampler = old + 0.2 * torch.randn(n, width, generator=g, dtype=torch.float64)
    ref = logp.detach() + 0.3 * torch.randn(n, width, generator=g, dtype=torch.float64) if kl else None
    advantages = torch.randn(n, generator=g, dtype=torch.float64)
    with torch.no_grad():  # padding holds garbage that must not leak
        logp[~mask.bool()] = 1e4
    dropped = torch.tensor([False, True, False, False, True, False, False])  # e.g. truncated, mask_truncated on
    return logp, old, sampler, ref, advantages, mask, dropped


@pytest.mark.parametrize(("kind", "correction", "agg", "kl", "drop"), [
    (kind, correction, agg, kl, drop) for kind, correction, agg in itertools.product(KINDS, CORRECTIONS, AGGS)
    for kl, drop in [(False, False), (True, True)]])
def test_loss_and_gradient_equal_the_naive_per_sequence_implementation(kind, correction, agg, kl, drop):
    logp, old, sampler, ref, advantages, mask, dropped = random_batch(0, kl)
    loss_mask = mask * (~dropped)[:, None] if drop else mask
    settings = {**KINDS[kind], **CORRECTIONS[correction], "kl_coef": 0.1 if kl else 0.0}
    per_token, stats, _ = policy_loss(logp, old, advantages, loss_mask, LossSpec(**settings), ref_logp=ref,
                                      sampler_logp=sampler)
    loss = agg_loss(per_token, loss_mask, agg, loss_normaliser(loss_mask, agg, max_completion_length=9))
    (grad,) = torch.autograd.grad(loss, logp)

    lengths = mask.sum(1).tolist()
    seqs = [{"logp": logp[i, :n], "old": old[i, :n], "sampler": sampler[i, :n], "advantage": float(advantages[i]),
             "ref": None if ref is None else ref[i, :n], "dropped": bool(drop and dropped[i])}
            for i, n in enumerate(lengths)]
    naive = naive_loss(seqs, {**settings, "agg": agg, "max_tokens": 9})
    (naive_grad,) = torch.autograd.grad(naive, logp)
    torch.testing.assert_close(loss, naive, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(grad, naive_grad, rtol=1e-10, atol=1e-12)
    assert grad.abs().max() > 0
    if correction == "seq_mask":  # the bounds were chosen so that some sequences are dropped, and some kept
        assert 0 < stats["seq_masked_frac"] < 1
    if kind in ("ppo", "gspo") and correction == "none" and not kl:
        assert stats["clip_frac_low"] + stats["clip_frac_high"] > 0  # the clipped branches take part
