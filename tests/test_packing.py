"""Padding-free passes (learner.packing): the packed layout, log-probs and gradients equal to the padded path's, the
attention confined to each sequence, no host sync in the pass, and the learner's packed update."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grpo_train import forward, logprob_kernels
from grpo_train.forward import pack_sequences, packed_attention, token_logprobs
from grpo_train.learner import Learner, make_update_batch


def packed_of(batch, capacity=None):
    """The batch's sequences packed as the learner packs a micro-batch of all of them."""
    return pack_sequences(batch.sequences, batch.lengths[0], capacity)


def spread_batch(seed=0, vocab=1000):
    """3 prompts x 3 completions of 0-8 tokens (one completion may be empty), prompts of 3-11 tokens."""
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for _ in range(3):
        prompt = torch.randint(3, vocab, (int(torch.randint(3, 12, (1,), generator=g)),), generator=g).tolist()
        for _ in range(3):
            prompts.append(prompt)
            completions.append(torch.randint(3, vocab, (int(torch.randint(0, 9, (1,), generator=g)),),
                                             generator=g).tolist())
    return make_update_batch(prompts, completions, [[0.0] * len(c) for c in completions],
                             torch.randn(len(prompts), generator=g), pad_id=2)


def test_pack_layout_worked_example():
    # Prompts [5, 6, 7] and [4]; completions [8, 9] and [3, 2, 1]: sequences of 5 and 4 tokens.
    batch = make_update_batch([[5, 6, 7], [4]], [[8, 9], [3, 2, 1]], [[0.0] * 2, [0.0] * 3], torch.zeros(2), 0)
    one = packed_of(batch, capacity=9)
    assert one.tokens.tolist() == [[5, 6, 7, 8, 9, 4, 3, 2, 1]] and one.padding == 0
    assert one.positions.tolist() == [[0, 1, 2, 3, 4, 0, 1, 2, 3]]
    assert one.segments.tolist() == [[0, 0, 0, 0, 0, 1, 1, 1, 1]]
    # Position 2 (token 7) predicts completion token 0 of sequence 0 (8), position 3 its token 1; position 5 (the
    # second prompt's only token) predicts 3, and so on.
    assert one.scored.tolist() == [2, 3, 5, 6, 7]
    assert one.target_row.tolist() == [0, 0, 1, 1, 1] and one.target_col.tolist() == [0, 1, 0, 1, 2]
    assert one.targets.tolist() == [8, 9, 3, 2, 1] and one.seq_lens == [5, 4]
    # Rows as wide as the longest sequence: 5 + 4 > 5, so two rows, the second with one tail token.
    rows = packed_of(batch)
    assert rows.tokens.tolist() == [[5, 6, 7, 8, 9], [4, 3, 2, 1, 0]] and rows.padding == 1
    assert rows.positions.tolist() == [[0, 1, 2, 3, 4], [0, 1, 2, 3, 0]]
    assert rows.segments.tolist() == [[0, 0, 0, 0, 0], [1, 1, 1, 1, -1]]
    assert rows.scored.tolist() == [2, 3, 5, 6, 7] and rows.seq_lens == [5, 4, 1]


def test_row_capacity_weighs_the_tail_against_attention():
    # Sequences of 10, 6 and 5 tokens; candidate widths 10, 12, 15, 20, 21 make 3, 2, 2, 2 and 1 rows. Estimated
    # cost rows x w x (1 + c x w): with free attention (c = 0) one row of 21 (30, 24, 30, 40, 21); at c = 0.05
    # the width 12 ([10], [6, 5]: 2 x 12 x 1.6 = 38.4 against one row's 21 x 2.05 = 43.05 and 3 x 10 x 1.5 = 45).
    assert forward.row_capacity([10, 6, 5], None) == 21
    assert forward.row_capacity([10, 6, 5], 0.0) == 21
    assert forward.row_capacity([10, 6, 5], 0.05) == 12
    assert forward.row_capacity([10, 6, 5], 10.0) == 12


def test_attention_pair_cost_from_the_config(models):
    # tiny-qwen2: hidden 128, 4 heads of 32, 2 key/value heads, MLP 256: matmul weights a layer
    # 128 x 32 x (8 + 4) + 3 x 128 x 256 = 49,152 + 98,304 = 147,456; a pair 4 x 4 x 32 = 512 FLOPs.
    assert forward.attention_pair_cost(models["sdpa"]) == pytest.approx(512 / (2 * 147_456))
    # The shared-prompt pass's copied key: its keys and values as attention reads them, 2 x 4 heads x 32 elements.
    costs = forward.shared_pass_costs(models["sdpa"])
    assert costs.pair == pytest.approx(512 / (2 * 147_456))
    assert costs.key == pytest.approx(forward.KEY_ELEMENT_FLOPS * 256 / (2 * 147_456))


def test_first_fit_decreasing_fills_rows():
    # Sequences of 6, 3, 2 and 1 tokens into rows of 6: [6], [3, 2, 1] - no padding.
    batch = make_update_batch([[4, 4, 4, 4, 4], [4, 4], [4], [4]], [[9], [9], [9], []], [[0.0], [0.0], [0.0], []],
                              torch.zeros(4), 0)
    packed = packed_of(batch)
    assert packed.tokens.shape == (2, 6) and packed.padding == 0
    assert packed.segments.tolist() == [[0] * 6, [1, 1, 1, 2, 2, 3]]


@pytest.fixture(scope="module")
def models(tiny_path):
    from transformers import AutoModelForCausalLM

    return {name: AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation=name)
            for name in ("sdpa", "eager")}


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("one_row", [False, True])  # rows as wide as the longest sequence, or one row
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_packed_logprobs_and_gradients_equal_the_padded_paths(models, attention, one_row, fused):
    model = models[attention]
    batch = spread_batch()
    width = batch.completion_mask.shape[1]
    weight = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    results = []
    capacity = sum(batch.attention_mask.sum(1).tolist()) if one_row else None
    for packed in (None, packed_of(batch, capacity)):
        model.zero_grad(set_to_none=True)
        logp, entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, width, 0.7, with_entropy=True,
                                       fused=fused, packed=packed)
        (logp * weight * batch.completion_mask).sum().backward()
        results.append((logp * batch.completion_mask, entropy * batch.completion_mask,
                        {n: p.grad.clone() for n, p in model.named_parameters()}))
    (padded, padded_entropy, padded_grad), (logp, entropy, grad) = results
    torch.testing.assert_close(logp, padded, rtol=0, atol=1e-5)
    torch.testing.assert_close(entropy, padded_entropy, rtol=0, atol=1e-5)
    for name, g in padded_grad.items():
        torch.testing.assert_close(grad[name], g, rtol=1e-4, atol=1e-6 * g.abs().max().item() + 1e-9, msg=name)
    # The packed pass scored exactly the completion tokens: 0 elsewhere.
    assert torch.equal(logp != 0, batch.completion_mask.bool())


def test_packed_sequences_never_see_each_other(models):
    """The packed pass's mask keeps each sequence to itself: its logits equal each sequence run alone. An all-ones
    2-D attention mask (what a collator would hand over) turns transformers' packed mask off and lets the second
    sequence attend to the first: the reason the packed pass builds its own mask and never takes one."""
    model = models["sdpa"]
    batch = spread_batch()
    packed = packed_of(batch, capacity=10**6)
    with torch.no_grad():
        confined = model(input_ids=packed.tokens, position_ids=packed.positions, use_cache=False,
                         **packed_attention(model, packed)).logits[0]
        leaking = model(input_ids=packed.tokens, position_ids=packed.positions, use_cache=False,
                        attention_mask=torch.ones_like(packed.tokens)).logits[0]
        start = 0
        for length in packed.seq_lens:
            alone = model(input_ids=packed.tokens[:, start: start + length]).logits[0]
            torch.testing.assert_close(confined[start: start + length], alone, rtol=0, atol=1e-5)
            start += length
    assert (leaking - confined).abs().max() > 0.1  # the all-ones mask mixes the sequences


def test_flex_attention_packs_one_row(tiny_path):
    """flex attention (the GPU image's packed kernel where flash attention is absent) takes the one-row layout
    with transformers' block mask; forward only here (flex has no CPU backward)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation="flex_attention")
    assert forward.attention_pair_cost(model) is None
    batch = spread_batch()
    width = batch.completion_mask.shape[1]
    packed = packed_of(batch, forward.row_capacity([len(s) for s in batch.sequences], None))
    assert packed.tokens.shape[0] == 1 and packed.padding == 0
    with torch.no_grad():
        got, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, width, 1.0, packed=packed)
        model.set_attn_implementation("sdpa")
        want, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, width, 1.0)
    torch.testing.assert_close(got * batch.completion_mask, want * batch.completion_mask, rtol=0, atol=1e-5)


class _Syncs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("fused", [False, True])
def test_the_packed_pass_makes_no_host_sync(models, monkeypatch, fused):
    """Forward and backward of a packed pass read no tensor value on the host (transformers' own packed-sequence
    detection from position ids would, once per pass); the fused head's chunks neither."""
    monkeypatch.setattr(logprob_kernels, "HEAD_CHUNK_ELEMENTS", 4 * models["sdpa"].config.vocab_size)  # several chunks
    batch = spread_batch()
    width = batch.completion_mask.shape[1]
    packed = packed_of(batch)
    with _Syncs() as syncs:
        logp, _ = token_logprobs(models["sdpa"], batch.input_ids, batch.attention_mask, width, 1.0, fused=fused,
                                 packed=packed)
        logp.sum().backward()
    assert syncs.count == 0
    with _Syncs() as syncs:  # the counter sees a sync where there is one
        float(logp.sum())
    assert syncs.count == 1


def make_cfg(*overrides):
    from grpo_train.config import load_config

    return load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                              "learner.lr=1e-3", "learner.micro_batch_size=4", "algorithm.seq_correction=none",
                              "learner.grad_clip=0", "learner.adam_eps=1e-6", *overrides])


@pytest.mark.parametrize("extra", [("learner.zero_stage=2",), ("model.lora.rank=4", "model.lora.alpha=8",
                                                                 "algorithm.kl_coef=0.1")])
def test_the_learners_packed_update_equals_the_padded_one(tiny_path, extra):
    """The whole update (policy, and with LoRA the reference = adapters off and the old log-probs) packed and padded:
    the same log-probs, statistics and weights after the step."""
    batch = spread_batch(seed=3)
    results = []
    for packing in ("true", "false"):
        torch.manual_seed(0)  # LoRA's A matrices are drawn at random
        learner = Learner(make_cfg(f"learner.packing={packing}", *extra), tiny_path, total_optimizer_steps=2)
        assert learner.packing == (packing == "true")
        batch.old_logp = learner.logprobs(batch)
        if learner.lora:
            batch.ref_logp = learner.logprobs(batch, reference=True)
        logs = (batch.old_logp, batch.ref_logp)
        stats = learner.update(batch)
        results.append((logs, stats, {k: v.detach().clone() for k, v in learner.module.state_dict().items()}))
        batch.old_logp = batch.ref_logp = None
    (logs, stats, after), (padded_logs, padded_stats, padded_after) = results
    for got, want in zip(logs, padded_logs, strict=True):
        if want is not None:
            torch.testing.assert_close(got, want, rtol=0, atol=1e-5)
    assert stats["loss"] == pytest.approx(padded_stats["loss"], rel=1e-4, abs=1e-7)
    assert stats["entropy"] == pytest.approx(padded_stats["entropy"], rel=1e-5)
    for name, want in padded_after.items():
        torch.testing.assert_close(after[name], want, rtol=0, atol=2e-5, msg=name)


def test_shared_prompts_take_precedence_over_packing(tiny_path):
    learner = Learner(make_cfg("learner.share_prompts=true"), tiny_path, total_optimizer_steps=1)
    assert learner.share_prompts and not learner.packing
    batch = spread_batch()
    assert learner._packed(batch, [0, 1, 2, 3]) is None


def test_flex_attention_is_a_choice_and_refuses_shared_prompts():
    from grpo_train.config import ConfigError, load_config

    assert load_config(None, ["model.attn_implementation=flex_attention"]).model.attn_implementation == "flex_attention"
    with pytest.raises(ConfigError, match="learner.share_prompts"):
        load_config(None, ["model.attn_implementation=flex_attention", "learner.share_prompts=true"])
