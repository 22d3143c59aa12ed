"""The learner's gradient for every loss variant and correction equals the naive per-sequence implementation
(tests/reference/naive_losses.py) run on a plain transformers model, under ZeRO 0-3, micro-batch splits (a fixed
size or a token budget) and (slow test) two ranks; the logged loss and statistics are those of the whole batch;
dropout does not move the importance ratio."""

import dataclasses
import json
import math
import subprocess
import sys
from contextlib import nullcontext
from pathlib import Path

import pytest
import torch
from reference.naive_losses import naive_loss

from grpo_train.algorithms import LossSpec
from grpo_train.config import load_config
from grpo_train.learner import Learner, make_update_batch

# lr = adam_eps = 1: Adam's first step is -g / (|g| + 1) per element (bias-corrected moments g and g^2), which
# gives the gradient back exactly, g = -step / (1 - |step|), whatever the ZeRO stage does with it on the way.
EXACT_STEP = ["learner.lr=1", "learner.adam_eps=1", "learner.grad_clip=0", "learner.weight_decay=0"]
TEMPERATURE = 0.7

CASES = {
    "ppo_kl_tis_stage0": ["algorithm.clip_eps=0.1", "algorithm.kl_coef=0.1", "algorithm.tis_cap=1.2",
                          "learner.zero_stage=0", "learner.micro_batch_size=4"],  # FlatAdamW: 3 folds
    "gspo_stage1": ["algorithm.policy_loss=gspo", "algorithm.gspo_clip_eps=0.02", "algorithm.gspo_clip_eps_high=0.03",
                    "algorithm.loss_agg=seq_mean_token_mean", "learner.zero_stage=1", "learner.micro_batch_size=4"],
    "cispo_seq_truncate_stage2": ["algorithm.policy_loss=cispo", "algorithm.cispo_weight_cap=1.1",
                                  "algorithm.seq_correction=truncate", "algorithm.seq_correction_high=1.2",
                                  "learner.zero_stage=2", "learner.micro_batch_size=2"],
    "ppo_seq_mask_truncated_stage3": ["algorithm.seq_correction=mask", "algorithm.seq_correction_low=0.9",
                                      "algorithm.seq_correction_high=1.1", "algorithm.mask_truncated=true",
                                      "algorithm.loss_agg=seq_mean_token_sum_norm", "learner.zero_stage=3",
                                      "learner.micro_batch_size=4"],
    # The same with micro-batches by token budget. 51 padded tokens: on two ranks, rank 0's trained rows (0, 1, 3, 4)
    # make two micro-batches and rank 1's (5, 7, 8) one of 3 x (10 + 7) = 51, which it splits to match.
    "ppo_seq_mask_truncated_stage3_budget": ["algorithm.seq_correction=mask", "algorithm.seq_correction_low=0.9",
                                             "algorithm.seq_correction_high=1.1", "algorithm.mask_truncated=true",
                                             "algorithm.loss_agg=seq_mean_token_sum_norm", "learner.zero_stage=3",
                                             "learner.max_tokens_per_micro_batch=51"],
    # Asynchronous (rollout.max_staleness 2, so tis_cap 2): tokens 0-2 weight versions old, mu = 1, so no old
    # log-probs are recomputed (the proximal policy is the learner before this update: logp.detach()).
    "async_decoupled_k2_stage2": ["rollout.max_staleness=2", "algorithm.clip_eps=0.1", "learner.zero_stage=2",
                                  "learner.micro_batch_size=2"],
}


def case_cfg(case: str):
    return load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                              f"rollout.temperature={TEMPERATURE}", *EXACT_STEP, *CASES[case]])


def rollouts(seed: int = 0):
    """3 prompts x 3 completions of different lengths; rows 2 and 6 hit max_tokens (truncated)."""
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for k in range(3):
        prompt = torch.randint(3, 1000, (4 + 3 * k,), generator=g).tolist()
        for i in range(3):
            prompts.append(prompt)
            completions.append(torch.randint(3, 1000, (2 + (3 * i + k) % 7,), generator=g).tolist())
    advantages = torch.randn(len(prompts), generator=g)
    truncated = [i in (2, 6) for i in range(len(prompts))]
    return prompts, completions, advantages, truncated


def full_batch(learner: Learner, seed: int = 0):
    """The batch with old, sampler and reference log-probs set off the current policy, so that ratios clip,
    sequences are masked or capped, and the KL term has a gradient."""
    prompts, completions, advantages, truncated = rollouts(seed)
    batch = make_update_batch(prompts, completions, [[0.0] * len(c) for c in completions], advantages, pad_id=2,
                              truncated=truncated)
    g = torch.Generator().manual_seed(seed + 1)
    noise = lambda scale: scale * torch.randn(batch.completion_mask.shape, generator=g)  # noqa: E731
    mask = batch.completion_mask
    current = learner.logprobs(batch)
    batch.old_logp = (current + noise(0.15)) * mask
    batch.sampler_logp = (batch.old_logp + noise(0.08)) * mask
    batch.ref_logp = (batch.old_logp + noise(0.2)) * mask
    k = learner.cfg.rollout.max_staleness
    if k:  # each token sampled 0..k versions ago, the older the further from the learner
        age = torch.randint(0, k + 1, mask.shape, generator=g)
        batch.sampler_logp = (current + noise(0.25) * (1 + age)) * mask
        batch.old_logp = None
        batch.staleness = age * mask.long()
    return batch


def naive_behaviour_weights(current, batch, cap: float, k: int) -> dict[str, float]:
    """The mean of min(pi_prox / pi_sampler, cap) over the completion tokens n versions old, token by token."""
    sums, counts = [0.0] * (k + 1), [0] * (k + 1)
    for i in range(current.shape[0]):
        for t in range(int(batch.completion_mask[i].sum())):
            n = int(batch.staleness[i, t])
            sums[n] += min(math.exp(float(current[i, t]) - float(batch.sampler_logp[i, t])), cap)
            counts[n] += 1
    return {f"behaviour_weight/{n}": sums[n] / counts[n] for n in range(k + 1) if counts[n]}


def trainable(learner: Learner) -> dict[str, torch.Tensor]:
    params = [(n, p) for n, p in learner.module.named_parameters() if p.requires_grad]
    import deepspeed

    gather = deepspeed.zero.GatheredParameters([p for _, p in params]) if learner.cfg.learner.zero_stage == 3 \
        else nullcontext()
    with gather:
        return {n: p.detach().double().clone() for n, p in params}


def recovered_gradient(before: dict, after: dict) -> dict[str, torch.Tensor]:
    return {n: -(after[n] - before[n]) / (1 - (after[n] - before[n]).abs()) for n in before}


def naive_gradient(model_path: str, cfg, batch, rows) -> tuple[float, dict[str, torch.Tensor]]:
    """The naive loss of `rows` of the batch and its gradient, on a fresh transformers copy of the model, one
    unpadded sequence at a time."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    a = cfg.algorithm
    settings = {**dataclasses.asdict(LossSpec.from_config(a)), "agg": a.loss_agg, "max_tokens": cfg.rollout.max_tokens}
    prompts, completions, advantages, truncated = rollouts()
    seqs = []
    for i in rows:
        ids = torch.tensor([prompts[i] + completions[i]])
        n, p = len(completions[i]), len(prompts[i])
        logits = model(ids).logits[0, p - 1: -1].float() / TEMPERATURE
        logp = logits.log_softmax(-1).gather(-1, ids[0, p:, None])[:, 0]
        old = logp.detach() if batch.old_logp is None else batch.old_logp[i, :n]  # None: the proximal is the current
        seqs.append({"logp": logp, "old": old, "sampler": batch.sampler_logp[i, :n],
                     "ref": batch.ref_logp[i, :n], "advantage": float(advantages[i]),
                     "dropped": a.mask_truncated and truncated[i]})
    loss = naive_loss(seqs, settings)
    loss.backward()
    return float(loss.detach()), {n: p.grad.double() for n, p in model.named_parameters()}


def assert_same_gradient(got: dict, want: dict):
    assert len(got) > 10 and any(g.abs().max() > 0 for g in want.values())
    for name, expected in want.items():
        # fp32 forward passes in another layout (padding, micro-batches): rounding relative to the tensor's scale.
        scale = expected.abs().max().item()
        torch.testing.assert_close(got[name], expected, atol=2e-4 * scale + 1e-9, rtol=1e-3, msg=name)


@pytest.mark.parametrize("case", list(CASES))
def test_learner_gradient_equals_the_naive_per_sequence_gradient(tiny_path, case):
    cfg = case_cfg(case)
    learner = Learner(cfg, tiny_path, total_optimizer_steps=1)
    batch = full_batch(learner)
    current = learner.logprobs(batch)  # the proximal policy's log-probs (the learner before the update)
    before = trainable(learner)
    stats = learner.update(batch)
    got = recovered_gradient(before, trainable(learner))
    loss, want = naive_gradient(tiny_path, cfg, batch, range(len(batch.advantages)))
    assert_same_gradient(got, want)
    assert stats["loss"] == pytest.approx(loss, rel=1e-4, abs=1e-6)
    if cfg.algorithm.seq_correction == "mask":
        assert 0 < stats["seq_masked_frac"] < 1
    if cfg.algorithm.seq_correction == "truncate":
        assert 0 < stats["seq_capped_frac"] < 1
    if cfg.algorithm.mask_truncated:
        assert stats["trained_seq_frac"] == pytest.approx(7 / 9)  # the two truncated rows are not run
    if cfg.algorithm.policy_loss != "cispo" and batch.old_logp is not None:
        assert stats["clip_frac_low"] + stats["clip_frac_high"] > 0
    if cfg.rollout.max_staleness:  # the behaviour weights min(pi_old / pi_sampler, 2) are not all 1, some capped
        assert 0 < stats["tis_capped_frac"] < 1 and stats["tis_weight_mean"] != pytest.approx(1.0, abs=1e-3)
        by_age = naive_behaviour_weights(current, batch, cfg.algorithm.tis_cap, cfg.rollout.max_staleness)
        assert len(by_age) == 3 and by_age == pytest.approx({k: stats[k] for k in stats if "behaviour" in k}, rel=1e-5)
    else:
        assert not any("behaviour" in k for k in stats)


def test_model_dropout_is_off_so_the_ratio_starts_at_one(tiny_path, tmp_path):
    """A model whose config asks for attention dropout: the old-logprob pass (eval mode) and the update pass (train
    mode) compute the same log-probs, so the first update's ratio is exactly 1 and nothing is clipped."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    model.config.attention_dropout = 0.3
    model.save_pretrained(tmp_path / "dropout")  # the learner loads no tokenizer
    cfg = load_config(None, ["model.max_model_len=256", "rollout.max_tokens=16", "algorithm.clip_eps=0.01"])
    learner = Learner(cfg, str(tmp_path / "dropout"), total_optimizer_steps=1)
    batch = full_batch(learner)
    batch.old_logp = learner.logprobs(batch)
    stats = learner.update(batch)
    assert stats["ratio_mean"] == pytest.approx(1.0, abs=1e-6)
    assert stats["clip_frac_low"] == 0 and stats["clip_frac_high"] == 0


@pytest.mark.slow
def test_two_ranks_log_the_global_loss_and_take_the_naive_gradient(tiny_path, tmp_path):
    """~60 s. Each rank updates on its half of the batch: the logged loss and statistics are the one-rank values of
    the whole batch (the review found the loss logged as 1/N of it), the gradient the naive one."""
    script = Path(__file__).parent / "drivers" / "dist_learner_losses.py"
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2", str(script),
           str(tmp_path), *DIST_CASES]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    for case in DIST_CASES:
        ranks = [json.loads((tmp_path / f"{case}-rank{r}.json").read_text()) for r in range(2)]
        assert ranks[0] == ranks[1]  # every rank logs the same global values
        chunks = [json.loads((tmp_path / f"{case}-chunks-rank{r}.json").read_text()) for r in range(2)]
        if "stage3" in case:  # the fused head, a different number of chunks on each rank (one head call per pass)
            assert chunks[0] > 0 and chunks[1] > 0 and chunks[0] != chunks[1], chunks
        cfg = case_cfg(case)
        one_rank = Learner(cfg, tiny_path, total_optimizer_steps=1)
        batch = full_batch(one_rank)
        single = one_rank.update(batch)
        for key in ("loss", "ratio_mean", "clip_frac_low", "clip_frac_high", "entropy", "trained_seq_frac",
                    "sampler_logp_gap", *(k for k in single if k.startswith("behaviour_weight/"))):
            assert ranks[0][key] == pytest.approx(single[key], rel=1e-4, abs=1e-6), key
        _, want = naive_gradient(tiny_path, cfg, batch, range(len(batch.advantages)))
        assert_same_gradient(torch.load(tmp_path / f"{case}-grad.pt"), want)


# ZeRO-3 gathers the weights in every pass: the budget case has the ranks form different numbers of micro-batches,
# and runs the fused head (the driver makes its chunks 2 rows) with a different number of chunks on each rank.
# ZeRO-0 is FlatAdamW's one all-reduce of its flat buffer in place of DeepSpeed's.
DIST_CASES = ["ppo_kl_tis_stage0", "gspo_stage1", "ppo_seq_mask_truncated_stage3_budget", "async_decoupled_k2_stage2"]
