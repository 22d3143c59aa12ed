"""The score sketch read from the learner's own backward (grpo_train/ustat/sketch.py) against the definition: for
each sequence alone, a full forward of prompt + completion, log pi at the temperature, the autograd gradient of the
last layer's weight, projected with the same factors. Through the real DeepSpeed learner on the tiny model, with
micro-batches, shared prompts (packed completions), the per-sequence loss normaliser and skipped rows."""

import math

import pytest
import torch

from grpo_train.config import load_config
from grpo_train.forward import shared_pass_costs, shared_prompt_layout, token_logprobs
from grpo_train.learner import Learner, make_update_batch
from grpo_train.ustat.sketch import last_linear, sketch_factors

TEMPERATURE = 0.7
DIM = 12
SEED = 5


def grouped_batch(advantages: list[float]):
    """3 prompts x 4 completions of varied lengths (prompt-major), as the trainer builds them."""
    g = torch.Generator().manual_seed(0)
    prompts, completions = [], []
    for k in range(3):
        prompt = torch.randint(3, 1000, (4 + 3 * k,), generator=g).tolist()
        for i in range(4):
            prompts.append(prompt)
            completions.append(torch.randint(3, 1000, (1 + (2 * i + k) % 6,), generator=g).tolist())
    return make_update_batch(prompts, completions, [[-1.0] * len(c) for c in completions],
                             torch.tensor(advantages), pad_id=2)


def naive_scores(model_path: str, batch, projection: str) -> torch.Tensor:
    """[n, D] u_d^T grad_W log pi(o_i | q_i) v_d / sqrt(D), one sequence at a time, no padding."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    layer = last_linear(model, projection)
    out_factors, in_factors = sketch_factors(layer.out_features, layer.in_features, DIM, SEED)
    p = batch.prompt_len
    rows = []
    for i in range(batch.input_ids.shape[0]):
        ids = batch.input_ids[i][batch.attention_mask[i].bool()]
        prompt_len = int(batch.attention_mask[i, :p].sum())
        logits = model(ids[None]).logits[0, prompt_len - 1: -1] / TEMPERATURE
        logp = logits.log_softmax(-1).gather(-1, ids[prompt_len:, None]).sum()
        (grad,) = torch.autograd.grad(logp, layer.weight)
        projected = torch.einsum("od,oi,id->d", out_factors.double(), grad.double(), in_factors.double())
        rows.append(projected / math.sqrt(DIM))
    return torch.stack(rows)


def learner_scores(model_path: str, batch, *overrides: str):
    cfg = load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                             f"rollout.temperature={TEMPERATURE}", "learner.zero_stage=0", "learner.lr=1e-3",
                             "ustat.enabled=true", f"ustat.dim={DIM}", f"run.seed={SEED}", *overrides])
    learner = Learner(cfg, model_path, total_optimizer_steps=2)
    learner.update(batch)
    return learner.score_sketch.take(batch.input_ids.shape[0])


ADVANTAGES = [1.0, -0.5, 0.25, -0.75, 0.0, 0.0, 0.0, 0.0, 2.0, -1.0, 0.5, -1.5]  # prompt 1: all equal rewards


@pytest.mark.parametrize(("micro", "shared", "projection", "extra"), [
    (12, False, "o_proj", ()),
    (5, False, "down_proj", ("algorithm.loss_agg=seq_mean_token_mean",)),
    (5, True, "o_proj", ()),
    (8, True, "down_proj", ("algorithm.tis_cap=2.0",)),
])
def test_learner_sketch_equals_the_per_sequence_gradient(tiny_path, micro, shared, projection, extra):
    batch = grouped_batch(ADVANTAGES)
    want = naive_scores(tiny_path, batch, projection)
    got, scored = learner_scores(tiny_path, batch, f"learner.micro_batch_size={micro}",
                                 f"learner.share_prompts={str(shared).lower()}", f"ustat.projection={projection}",
                                 *extra)
    # Rows with advantage 0 are skipped by the learner (no backward): unscored, which the monitor does not need.
    assert scored.tolist() == [a != 0 for a in ADVANTAGES]
    scale = want.abs().max()
    torch.testing.assert_close(got[scored], want[scored], atol=1e-5 * scale, rtol=1e-4)


def test_a_sequence_is_scored_by_its_first_pass_only(tiny_path):
    """Two passes (num_iterations 2): the second runs at updated weights and must not replace the first score."""
    batch = grouped_batch(ADVANTAGES)
    want = naive_scores(tiny_path, batch, "o_proj")
    got, scored = learner_scores(tiny_path, batch, "algorithm.num_iterations=2", "learner.micro_batch_size=4")
    torch.testing.assert_close(got[scored], want[scored], atol=1e-5 * want.abs().max(), rtol=1e-4)


def test_the_last_prompt_token_packed_layout_is_the_same_function(tiny_path):
    """pack_last_prompt_token: the prompt pass stops one token short and every packed segment starts with it; the
    log-probs and the gradients are those of the plain forward, and every packed position belongs to one row."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation="eager")
    batch = grouped_batch(ADVANTAGES)
    width = batch.completion_mask.shape[1]
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    results = []
    for shared, packed_first in ((False, False), (True, True)):
        model.zero_grad()
        logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, width, TEMPERATURE,
                                 share_prompts=shared, pack_last_prompt_token=packed_first)
        (logp * batch.completion_mask * weights).sum().backward()
        results.append((logp * batch.completion_mask, {n: p.grad.clone() for n, p in model.named_parameters()}))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-5, rtol=1e-5)
    for name, grad in results[0][1].items():
        torch.testing.assert_close(results[1][1][name], grad, atol=1e-5 * max(1.0, grad.abs().max().item()),
                                   rtol=1e-4, msg=name)
    layout = shared_prompt_layout(batch.input_ids, batch.attention_mask, width, shared_pass_costs(model),
                                  last_prompt_token=True)
    lengths = batch.completion_mask.sum(1).long()
    # Each completion of c tokens feeds c tokens (its prompt's last, then all but its last) predicting tokens 0..c-1.
    for row in range(len(lengths)):
        cols = layout.packed.target_col[layout.packed.target_row == row]
        assert cols.tolist() == list(range(int(lengths[row])))
    assert layout.distinct_ids.shape[1] == batch.prompt_len - 1


@pytest.mark.slow
def test_learner_sketch_with_the_demo_learner_settings(tiny_path):
    """The demo's learner: shared prompts, eager attention, learner.compile (o_proj stays outside the compiled
    parts; its hooks run eagerly)."""
    batch = grouped_batch(ADVANTAGES)
    want = naive_scores(tiny_path, batch, "o_proj")
    got, scored = learner_scores(tiny_path, batch, "learner.micro_batch_size=8", "learner.share_prompts=true",
                                 "learner.compile=true", "model.attn_implementation=eager", "learner.zero_stage=1")
    assert scored.tolist() == [a != 0 for a in ADVANTAGES]
    torch.testing.assert_close(got[scored], want[scored], atol=1e-5 * want.abs().max(), rtol=1e-4)
