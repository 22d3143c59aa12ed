"""The DeepSpeed learner on CPU (gloo, a world of one): update, micro-batch invariance, non-finite skips,
LoRA, the reference model, and checkpoint round trips."""

import itertools
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from grpo_train import checkpoint
from grpo_train.config import load_config
from grpo_train.distributed import init_distributed
from grpo_train.forward import SharedPassCosts, compile_model, pack_completions, token_logprobs
from grpo_train.learner import Learner, deepspeed_config, lr_lambda, make_update_batch


def make_cfg(*overrides):
    # The batches' sampler log-probs are placeholders: no mismatch correction (auto would turn it on in bf16).
    return load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                              "learner.lr=1e-3", "learner.micro_batch_size=8", "algorithm.seq_correction=none",
                              *overrides])


def random_batch(n=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    prompts = [torch.randint(3, 1000, (4 + i % 3,), generator=g).tolist() for i in range(n)]
    completions = [torch.randint(3, 1000, (2 + i,), generator=g).tolist() for i in range(n)]
    sampler_logps = [[-2.0] * len(c) for c in completions]
    advantages = torch.randn(n, generator=g)
    return make_update_batch(prompts, completions, sampler_logps, advantages, pad_id=2)


def weights(learner):
    return {k: v.detach().clone() for k, v in learner.module.state_dict().items()}


def test_make_update_batch_layout():
    batch = make_update_batch([[5, 6, 7], [4]], [[8, 9], [3, 2, 1]], [[-0.5, -0.25], [-1.0, -2.0, -3.0]],
                              torch.tensor([1.0, -1.0]), pad_id=0)
    # Prompts left-padded to 3 columns, completions right-padded to 3: [pad.. prompt | completion ..pad].
    assert batch.input_ids.tolist() == [[5, 6, 7, 8, 9, 0], [0, 0, 4, 3, 2, 1]]
    assert batch.attention_mask.tolist() == [[1, 1, 1, 1, 1, 0], [0, 0, 1, 1, 1, 1]]
    assert batch.completion_mask.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
    assert batch.sampler_logp.tolist() == [[-0.5, -0.25, 0.0], [-1.0, -2.0, -3.0]]
    # The second row alone needs 1 prompt column and 3 completion columns.
    sub = batch.rows(torch.tensor([1]))
    assert sub.input_ids.tolist() == [[4, 3, 2, 1]] and sub.prompt_len == 1


def test_logprobs_do_not_depend_on_padding(tiny_path):
    """A left-padded row scores its completion exactly as it does alone (positions count real tokens)."""
    from transformers import AutoModelForCausalLM


    model = AutoModelForCausalLM.from_pretrained(tiny_path)
    batch = make_update_batch([[11, 12, 13, 14, 15, 16], [21, 22]], [[31, 32, 33], [41, 42]],
                              [[0.0] * 3, [0.0] * 2], torch.zeros(2), pad_id=2)
    padded, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, 3, temperature=1.0)
    alone = batch.rows(torch.tensor([1]))
    single, _ = token_logprobs(model, alone.input_ids, alone.attention_mask, 2, temperature=1.0)
    torch.testing.assert_close(padded[1, :2], single[0], rtol=0, atol=1e-5)
    # Gradients through a padded batch stay finite (no NaN from fully masked pad positions).
    logp, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, 3, temperature=1.0)
    (logp * batch.completion_mask).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_deepspeed_config_and_escape_hatch():
    cfg = make_cfg("learner.zero_stage=3", "learner.precision=bf16", "learner.grad_clip=0.5")
    cfg.learner.deepspeed = {"zero_optimization": {"overlap_comm": False}, "steps_per_print": 7}
    ds = deepspeed_config(cfg.learner, world_size=2)
    assert ds["zero_optimization"] == {"stage": 3, "overlap_comm": False}  # merged, not replaced
    assert ds["bf16"] == {"enabled": True, "immediate_grad_update": True} and ds["gradient_clipping"] == 0.5
    assert ds["steps_per_print"] == 7
    assert ds["train_batch_size"] == 16 and ds["managed_gradient_accumulation"] is False


def test_lr_schedule_warmup_then_cosine():
    cfg = make_cfg("learner.warmup_steps=3", "learner.lr_schedule=cosine")
    f = lr_lambda(cfg.learner, total_steps=13)
    # warmup: (k+1)/(3+1) -> 0.25, 0.5, 0.75; cosine over the 10 remaining steps: 1 at k=3, 0.5 at k=8, 0 at k=13
    assert [f(k) for k in range(3)] == [0.25, 0.5, 0.75]
    assert f(3) == pytest.approx(1.0) and f(8) == pytest.approx(0.5) and f(13) == pytest.approx(0.0)


@pytest.mark.parametrize("stage", [0, 2])
def test_update_changes_weights_and_reports_stats(tiny_path, stage):
    learner = Learner(make_cfg(f"learner.zero_stage={stage}"), tiny_path, total_optimizer_steps=4)
    before = weights(learner)
    stats = learner.update(random_batch())
    after = weights(learner)
    assert math.isfinite(stats["loss"]) and stats["grad_norm"] > 0 and stats["skipped_step"] == 0.0
    assert stats["ratio_mean"] == pytest.approx(1.0)  # on-policy: old = current
    assert all(not torch.equal(before[k], after[k]) for k in before)
    assert learner.ref is None  # kl_coef = 0 loads no reference model


def test_micro_batch_split_gives_the_same_step(tiny_path):
    """One padded micro-batch of 8, four packed ones of 2, or as many as a budget of 40 tokens holds (padded tokens,
    or packed ones): the same global normaliser, so the same gradient and update, padded or padding-free."""
    batch = random_batch()
    results, norms, plans = [], [], []
    for split in (("learner.micro_batch_size=8", "learner.packing=false"), ("learner.micro_batch_size=2",),
                  ("learner.max_tokens_per_micro_batch=40", "learner.packing=false"),
                  ("learner.max_tokens_per_micro_batch=40",)):
        # adam_eps 1e-6: Adam's first step is ~lr * g / (|g| + eps), so with eps 1e-8 a gradient element of
        # ~1e-8 turns a rounding difference of the summation order into a visible difference of the step.
        learner = Learner(make_cfg("learner.zero_stage=2", *split, "learner.grad_clip=0", "learner.adam_eps=1e-6"),
                          tiny_path, total_optimizer_steps=4)
        passes, _ = learner._micro_batches(batch, torch.arange(8))
        plans.append([rows for rows, _ in passes])
        norms.append(learner.update(batch)["grad_norm"])
        results.append(weights(learner))
    # The budget's micro-batches, longest completions first (row i: 2 + i completion tokens, prompts of 4-6):
    # padded, [7, 6] 2 x (5 + 9) = 28, [5, 4, 3] 3 x (6 + 7) = 39, [2, 1, 0] 3 x (6 + 4) = 30 padded tokens;
    # packed (sequences of 6, 8, 10, 9, 11, 13, 12, 14 tokens), [7, 6, 5] 14 + 12 + 13 = 39, [4, 3, 2, 1] 38, [0] 6.
    assert plans[2] == [[7, 6], [5, 4, 3], [2, 1, 0]]
    assert [batch.rows(torch.tensor(rows)).input_ids.numel() for rows in plans[2]] == [28, 39, 30]
    assert plans[3] == [[7, 6, 5], [4, 3, 2, 1], [0]]
    assert plans[1] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    # A 1/gas rescaling would shrink the second norm 4x; summation order only moves the last bits.
    for norm, result in zip(norms[1:], results[1:], strict=True):
        assert norm == pytest.approx(norms[0], rel=1e-5)
        for name in results[0]:
            # Compare against a small fraction of one step (lr = 1e-3).
            torch.testing.assert_close(results[0][name], result[name], rtol=0, atol=2e-5)


@pytest.mark.parametrize("stage", [0, 2])
def test_non_finite_loss_skips_the_step(tiny_path, stage):
    learner = Learner(make_cfg(f"learner.zero_stage={stage}"), tiny_path, total_optimizer_steps=4)
    batch = random_batch()
    batch.advantages[3] = float("nan")
    before = weights(learner)
    stats = learner.update(batch)
    assert stats["skipped_step"] == 1.0 and learner.skipped_nonfinite == 1
    after = weights(learner)
    assert all(torch.equal(before[k], after[k]) for k in before)  # no NaN reached the weights
    # The next, finite batch trains normally.
    stats = learner.update(random_batch(seed=1))
    assert stats["skipped_step"] == 0.0 and all(torch.isfinite(v).all() for v in weights(learner).values())


@pytest.mark.parametrize("stage", [0, 1, 2])
def test_bf16_updates_follow_the_fp32_updates(tiny_path, stage):
    """Three steps in bf16 (fp32 master weights) move the weights as fp32 does, up to bf16 rounding. DeepSpeed's
    bf16 path without ZeRO failed this (0.74x the fp32 step: a zero-gradient Adam step at start-up); stage 0 is
    FlatAdamW's (grpo_train/flat_optimizer.py), which sums the micro-batches in fp32 as stages 1 and 2 do."""
    deltas = {}
    for precision, zero in (("fp32", 0), ("bf16", stage)):
        learner = Learner(make_cfg(f"learner.zero_stage={zero}", f"learner.precision={precision}",
                                   "learner.micro_batch_size=4"), tiny_path, total_optimizer_steps=4)
        start = weights(learner)
        deltas[precision] = []
        for seed in range(3):
            learner.update(random_batch(seed=seed))
            deltas[precision].append({n: w.float() - start[n].float() for n, w in weights(learner).items()})
    for bf16, fp32 in zip(deltas["bf16"], deltas["fp32"], strict=True):
        norm = lambda d: sum(float((t**2).sum()) for t in d.values()) ** 0.5  # noqa: E731
        assert norm(bf16) / norm(fp32) == pytest.approx(1.0, abs=0.02)
        assert norm({n: bf16[n] - fp32[n] for n in fp32}) / norm(fp32) < 0.06  # bf16 rounding of the weights


@pytest.mark.parametrize(("stage", "precision", "skipped"), [(0, "fp32", True), (1, "bf16", True),
                                                           (1, "fp32", False), (2, "bf16", False)])
def test_one_process_skips_only_the_generic_gradient_allreduce(tiny_path, stage, precision, skipped):
    """On one process the generic all-reduce is skipped (it averages over one rank), and the steps stay the same
    as with it in fp32 (DeepSpeed's default communication dtype under bf16 is bf16: the all-reduce would round
    the fp32 gradient sums); ZeRO's own reductions, which fill the optimizer's partitions, always run."""
    after = {}
    for allreduce in ("default", "forced"):
        learner = Learner(make_cfg(f"learner.zero_stage={stage}", f"learner.precision={precision}",
                                   "learner.micro_batch_size=4", "learner.deepspeed={communication_data_type: fp32}"),
                          tiny_path, total_optimizer_steps=4)
        if allreduce == "default":
            assert learner.engine.enable_backward_allreduce is not skipped
        else:
            learner.engine.enable_backward_allreduce = True
        start = weights(learner)
        for seed in range(2):
            learner.update(random_batch(seed=seed))
        after[allreduce] = weights(learner)
        assert any(not torch.equal(after[allreduce][n], start[n]) for n in start)  # the steps moved the weights
    for name, tensor in after["forced"].items():
        torch.testing.assert_close(after["default"][name], tensor, atol=0, rtol=0, msg=name)


def test_kl_reference_copy_and_lora_reference(tiny_path):
    full = Learner(make_cfg("algorithm.kl_coef=0.1", "learner.zero_stage=2", "model.attn_implementation=eager"),
                   tiny_path, total_optimizer_steps=4)
    assert full.ref is not None
    # Both copies run the configured attention kernel (the default would be sdpa).
    assert full.module.config._attn_implementation == full.ref.config._attn_implementation == "eager"
    batch = random_batch()
    ref_before = full.logprobs(batch, reference=True)
    full.update(batch)
    # The reference is frozen, the policy moved away from it.
    torch.testing.assert_close(full.logprobs(batch, reference=True), ref_before)
    assert not torch.allclose(full.logprobs(batch), ref_before)

    lora = Learner(make_cfg("algorithm.kl_coef=0.1", "model.lora.rank=4", "learner.zero_stage=2"), tiny_path,
                   total_optimizer_steps=4)
    assert lora.ref is None  # the reference is the policy with its adapters disabled
    ref_lora = lora.logprobs(batch, reference=True)
    torch.testing.assert_close(ref_lora, ref_before)  # adapters start at zero: base model = reference
    batch.ref_logp = ref_lora
    for _ in range(2):
        stats = lora.update(batch)
    assert stats["kl"] > 0
    torch.testing.assert_close(lora.logprobs(batch, reference=True), ref_before)
    assert not torch.allclose(lora.logprobs(batch), ref_before)
    trainable = [n for n, p in lora.module.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def save_hf_tensors(folder, named):
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({n: t.detach().contiguous() for n, t in named}, str(folder / "model.safetensors"))


@pytest.mark.parametrize(("stage", "precision"), [(0, "fp32"), (0, "bf16"), (2, "fp32")])
def test_checkpoint_round_trip_continues_identically(tiny_path, tmp_path, stage, precision):
    """Under bf16 at stage 0 the checkpoint carries FlatAdamW's fp32 master weights (the module's are rounded)."""
    cfg = make_cfg(f"learner.zero_stage={stage}", f"learner.precision={precision}")
    learner = Learner(cfg, tiny_path, total_optimizer_steps=4)
    learner.update(random_batch(seed=0))
    ckpt = checkpoint.save_checkpoint(tmp_path, 1, learner.engine, {"step": 1}, learner.module.named_parameters(),
                                      save_hf_tensors, keep_last=2)
    assert checkpoint.is_complete(ckpt) == (True, "")
    continued = learner.update(random_batch(seed=1))

    resumed = Learner(cfg, tiny_path, total_optimizer_steps=4)
    assert checkpoint.load_checkpoint(ckpt, resumed.engine) == {"step": 1}
    again = resumed.update(random_batch(seed=1))
    # Adam's moments and the scheduler came back too, so the next step is the same to the last bit.
    assert again["loss"] == continued["loss"] and again["lr"] == continued["lr"]
    for name, value in weights(learner).items():
        assert torch.equal(value, weights(resumed)[name]), name


def test_a_second_world_in_one_process_gets_fresh_deepspeed_groups(tiny_path):
    """Closing an in-process vLLM engine ends the world; a Learner built in the next world must not use the
    groups DeepSpeed cached from the dead one ("Group ... is not registered")."""
    Learner(make_cfg("learner.zero_stage=0"), tiny_path, total_optimizer_steps=1)
    dist.destroy_process_group()
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        os.environ.pop(key, None)
    init_distributed()
    learner = Learner(make_cfg("learner.zero_stage=0"), tiny_path, total_optimizer_steps=1)
    assert learner.world == 1


def grouped_batch(seed=0, groups=2, group_size=3):
    """Prompts of different lengths (so left padding), each with group_size completions of different lengths."""
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for k in range(groups):
        prompt = torch.randint(3, 1000, (5 + 3 * k,), generator=g).tolist()
        for i in range(group_size):
            prompts.append(prompt)
            completions.append(torch.randint(3, 1000, (1 + (i * 2 + k) % 5,), generator=g).tolist())
    logps = [[-1.0] * len(c) for c in completions]
    return make_update_batch(prompts, completions, logps, torch.randn(len(prompts), generator=g), pad_id=2)


FREE = SharedPassCosts(pair=0.0, key=0.0)


def test_completions_pack_first_fit_decreasing_into_the_fewest_cells():
    batch = make_update_batch([[5, 6]] * 3 + [[7, 8, 9, 10, 11]], [[11, 12, 13, 14], [21, 22], [31, 32, 33], [41]],
                              [[-1.0] * 4, [-1.0] * 2, [-1.0] * 3, [-1.0]], torch.zeros(4), pad_id=0)
    # Fed tokens (all but the last): 3, 1, 2, 0. With attention and copied keys free, rows of 3 hold them in 6 cells.
    packed = pack_completions(batch.input_ids, batch.attention_mask, 4, row_prompt=[0, 0, 0, 1],
                              prompt_lengths=[2, 5], costs=FREE)
    assert packed.tokens.tolist() == [[11, 12, 13], [31, 32, 21]]  # row 3 feeds nothing: the prompt pass predicts
    assert packed.positions.tolist() == [[2, 3, 4], [2, 3, 2]]
    assert packed.segment.tolist() == [[0, 0, 0], [2, 2, 1]]
    assert packed.token_prompt.tolist() == [[0, 0, 0], [0, 0, 0]]
    assert packed.cache_prompt.tolist() == [[0, 0], [0, 0]] and packed.cache_col.tolist() == [[3, 4], [3, 4]]
    assert packed.source.tolist() == [0, 1, 2, 3, 4, 5]
    assert packed.target_row.tolist() == [0, 0, 0, 2, 2, 1]
    assert packed.target_col.tolist() == [1, 2, 3, 1, 2, 1]
    allowed = (packed.attention_mask(torch.float32) == 0)[:, 0].int().tolist()  # [2 rows, 3 queries, 2 + 3 keys]
    assert allowed[1][1] == [1, 1, 1, 1, 0]  # row 2's second token: its prompt and its own first token
    assert allowed[1][2] == [1, 1, 0, 0, 1]  # row 1's token: not row 2's
    assert pack_completions(batch.input_ids[3:], batch.attention_mask[3:], 4, [0], [5], FREE) is None


def mixed_prompts_batch():
    """Prompt A's completions (fed 3, 3, 2 tokens) overflow a bin of 5 that B's one completion (fed 2) can share."""
    return make_update_batch([[5, 6, 7, 8, 9, 10]] * 3 + [[20, 21, 22, 23, 24, 25, 26, 27, 28]],
                             [[11, 12, 13, 14], [15, 16, 17, 18], [19, 30, 31], [40, 41, 42]],
                             [[-1.0] * 4, [-1.0] * 4, [-1.0] * 3, [-1.0] * 3], torch.zeros(4), pad_id=2)


def test_a_packed_row_mixes_prompts_and_each_token_sees_only_its_own_prompt_and_segment():
    batch = mixed_prompts_batch()
    packed = pack_completions(batch.input_ids, batch.attention_mask, 4, [0, 0, 0, 1], [6, 9], FREE)
    assert packed.tokens.shape == (2, 5)  # 10 fed tokens in 10 cells; one prompt per row needs 3 rows of 5
    assert {tuple(sorted(set(r) - {-1})) for r in packed.cache_prompt.tolist()} == {(0,), (0, 1)}
    allowed = (packed.attention_mask(torch.float32) == 0)[:, 0]  # [B, W, K + W]
    keys = packed.cache_prompt.shape[1]
    for b, w in itertools.product(*map(range, packed.tokens.shape)):
        row, prompt = packed.segment[b, w].item(), packed.token_prompt[b, w].item()
        if row < 0:
            assert allowed[b, w].any()
            continue
        sees_cache = packed.cache_prompt[b] == prompt
        sees_packed = (packed.segment[b] == row) & (torch.arange(packed.tokens.shape[1]) <= w)
        assert torch.equal(allowed[b, w], torch.cat([sees_cache, sees_packed])), (b, w)
        assert sees_cache.sum() == (6, 9)[prompt] and packed.cache_col[b][sees_cache].tolist() == list(
            range(9 - (6, 9)[prompt], 9))  # the prompt's real columns of the prompt pass (left-padded to 9)
    assert keys == 15
    # Where attention costs as much as a token's matmuls per key, sharing a row with B's 9 keys costs more than
    # padding: one prompt per row, as narrow as the longest segment (4 rows of 3).
    costly = pack_completions(batch.input_ids, batch.attention_mask, 4, [0, 0, 0, 1], [6, 9],
                              SharedPassCosts(pair=1.0, key=0.0))
    assert costly.tokens.shape == (4, 3) and all(len(set(r) - {-1}) == 1 for r in costly.cache_prompt.tolist())
    # Where each copied key costs as much as a token, the fewest rows win: one row of all 10, over both prompts' keys.
    copied = pack_completions(batch.input_ids, batch.attention_mask, 4, [0, 0, 0, 1], [6, 9],
                              SharedPassCosts(pair=0.0, key=1.0))
    assert copied.tokens.shape == (1, 10) and copied.cache_prompt.shape[1] == 15


def logprobs_and_grads(model, batch, shared):
    width = batch.completion_mask.shape[1]
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    model.zero_grad()
    logp, entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, width, 0.7, with_entropy=True,
                                   share_prompts=shared)
    (logp * batch.completion_mask * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp * batch.completion_mask, entropy * batch.completion_mask, grads


def assert_same_logprobs_and_grads(got, want):
    torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
    assert got[2].keys() == want[2].keys() and len(want[2]) > 10
    for name in want[2]:
        # Summation order differs between the two paths, so rounding scales with the largest entries (embedding
        # rows collect many tokens' terms): the tolerance is relative to the tensor's scale, not each entry's.
        scale = max(1.0, want[2][name].abs().max().item())
        torch.testing.assert_close(got[2][name], want[2][name], atol=1e-5 * scale, rtol=1e-4, msg=name)


@pytest.mark.parametrize(("completion_width", "attention"), [(None, "sdpa"), (1, "sdpa"), (None, "eager")])
def test_shared_prompt_forward_equals_the_full_forward_with_gradients(tiny_path, completion_width, attention):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation=attention)
    batch = grouped_batch()
    if completion_width == 1:  # every completion one token long: only the prompt pass predicts
        batch = make_update_batch([[5, 6, 7]] * 2 + [[8, 9]] * 2, [[10], [11], [12], [13]], [[-1.0]] * 4,
                                  torch.zeros(4), pad_id=2)
    plain, shared = (logprobs_and_grads(model, batch, share) for share in (False, True))
    assert_same_logprobs_and_grads(shared, plain)


def test_shared_prompt_forward_with_mixed_rows_equals_the_full_forward_with_gradients(tiny_path):
    from transformers import AutoModelForCausalLM

    from grpo_train.forward import shared_pass_costs, shared_prompt_layout

    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation="sdpa")
    batch = mixed_prompts_batch()
    layout = shared_prompt_layout(batch.input_ids, batch.attention_mask, 4, shared_pass_costs(model))
    assert any(len(set(r) - {-1}) > 1 for r in layout.packed.cache_prompt.tolist())  # a row carries both prompts
    plain, shared = (logprobs_and_grads(model, batch, share) for share in (False, True))
    assert_same_logprobs_and_grads(shared, plain)


@pytest.mark.parametrize("stage", [0, 3])
def test_shared_prompt_update_equals_the_unshared_update(tiny_path, stage):
    """The same step with and without prompt sharing, through DeepSpeed (ZeRO-3 gathers weights per pass)."""
    batch = grouped_batch(seed=3, groups=2, group_size=4)
    results = []
    for shared in ("true", "false"):
        learner = Learner(make_cfg(f"learner.zero_stage={stage}", f"learner.share_prompts={shared}",
                                   "learner.micro_batch_size=4", "learner.grad_clip=0"), tiny_path,
                          total_optimizer_steps=2)
        before = learner.logprobs(batch)
        stats = learner.update(batch)
        after = learner.logprobs(batch)
        assert (after - before).abs().max() > 1e-3  # the step moved the policy
        results.append((stats, after))
    (stats_a, after_a), (stats_b, after_b) = results
    assert stats_a["loss"] == pytest.approx(stats_b["loss"], abs=1e-5)
    torch.testing.assert_close(after_a, after_b, atol=2e-5, rtol=1e-4)


def test_skipping_zero_advantage_rows_gives_the_same_step(tiny_path):
    """Rows with advantage 0 carry no gradient without a KL term: not running them changes nothing."""
    batch = random_batch(seed=4)
    batch.advantages[[0, 1, 2, 5, 6]] = 0.0  # five of eight rows, as in groups whose rewards are all equal
    results = []
    for skip in ("true", "false"):
        learner = Learner(make_cfg("learner.zero_stage=2", f"learner.skip_zero_advantage={skip}",
                                   "learner.micro_batch_size=2", "learner.grad_clip=0", "learner.adam_eps=1e-6"),
                          tiny_path, total_optimizer_steps=2)
        stats = learner.update(batch)
        results.append((stats, weights(learner)))
    (skipped, after_skip), (full, after_full) = results
    assert skipped["trained_seq_frac"] == 3 / 8 and full["trained_seq_frac"] == 1.0
    assert skipped["grad_norm"] == pytest.approx(full["grad_norm"], rel=1e-5)
    assert skipped["loss"] == pytest.approx(full["loss"], abs=1e-6)
    for name in after_full:
        torch.testing.assert_close(after_skip[name], after_full[name], rtol=0, atol=2e-5)


def test_zero_advantage_rows_are_trained_when_the_kl_term_gives_them_a_gradient(tiny_path):
    batch = random_batch(seed=5)
    batch.advantages.zero_()
    learner = Learner(make_cfg("algorithm.kl_coef=0.1"), tiny_path, total_optimizer_steps=2)
    batch.ref_logp = learner.logprobs(batch) - 0.5  # a reference away from the policy: KL has a gradient
    stats = learner.update(batch)
    assert stats["trained_seq_frac"] == 1.0 and stats["grad_norm"] > 0


def test_a_batch_of_only_zero_advantages_makes_one_empty_pass_and_leaves_the_weights(tiny_path):
    batch = random_batch(seed=6)
    batch.advantages.zero_()
    learner = Learner(make_cfg("learner.zero_stage=2"), tiny_path, total_optimizer_steps=2)
    before = weights(learner)
    stats = learner.update(batch)
    assert stats["trained_seq_frac"] == 0.0 and stats["grad_norm"] == 0.0 and stats["skipped_step"] == 0.0
    for name, value in weights(learner).items():  # Adam with a zero gradient and no weight decay: no move
        torch.testing.assert_close(value, before[name], rtol=0, atol=0)


@pytest.mark.slow
def test_skipping_zero_advantage_rows_under_two_ranks_gives_the_same_step(tmp_path):
    # ~30 s: rank 0 has nothing to train and makes one zero-scaled pass; without it, rank 1's gradient
    # reduction would wait for rank 0 forever.
    script = Path(__file__).parent / "drivers" / "dist_learner_skip.py"
    cmd = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2", str(script),
           str(tmp_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert all(r["world"] == 2 for r in ranks)
    # Logged over both ranks, the same on each: rank 0's 4 rows skipped, rank 1's 4 trained.
    assert [r["true"]["trained_seq_frac"] for r in ranks] == [0.5, 0.5]
    for r in ranks:
        assert r["false"]["trained_seq_frac"] == 1.0 and r["true"]["grad_norm"] > 0
        assert r["true"]["grad_norm"] == pytest.approx(r["false"]["grad_norm"], rel=1e-6)
        assert r["true"]["checksum"] == pytest.approx(r["false"]["checksum"], rel=1e-9)
    assert ranks[0]["true"]["checksum"] == ranks[1]["true"]["checksum"]  # the ranks stay in step


# ----------------------------------------------------------------------------------------------------
# learner.compile: the compiled decoder-layer parts compute the same function as eager PyTorch


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_compiled_model_computes_the_eager_function_with_gradients(tiny_path, attention):
    from transformers import AutoModelForCausalLM

    eager = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation=attention)
    compiled = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32, attn_implementation=attention)
    torch._dynamo.reset()  # forget graphs an earlier test compiled, so the count below is this test's
    graphs_before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    compile_model(compiled)
    batch = grouped_batch()
    for shared in (False, True):
        assert_same_logprobs_and_grads(logprobs_and_grads(compiled, batch, shared),
                                       logprobs_and_grads(eager, batch, shared))
    # The passes ran compiled code: MLP and norms always, the attention function itself only when eager.
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs_before
    assert compiled.config._attn_implementation == ("compiled_eager_modeling_qwen2" if attention == "eager"
                                                    else "sdpa")
    # The name is process-local: a saved config still names the attention the model was loaded with.
    assert "compiled" not in compiled.config.to_json_string()


def compile_cfg(*overrides):
    return make_cfg("learner.micro_batch_size=4", "learner.grad_clip=0", "learner.share_prompts=true",
                    "model.attn_implementation=eager", "algorithm.kl_coef=0.1", *overrides)


@pytest.mark.parametrize("variant", [["learner.zero_stage=1"], ["learner.zero_stage=2", "model.lora.rank=4"],
                                     ["learner.zero_stage=0", "model.lora.rank=4"]])  # LoRA through FlatAdamW
def test_compiled_update_equals_the_eager_update(tiny_path, variant):
    """Two updates with the KL term on (the reference model compiled too, or the policy without adapters)."""
    batch = grouped_batch(seed=3, groups=2, group_size=4)
    results = []
    for compiled in ("false", "true"):
        torch.manual_seed(0)  # the same LoRA initialisation in both
        learner = Learner(compile_cfg(f"learner.compile={compiled}", *variant), tiny_path, total_optimizer_steps=2)
        batch.ref_logp = learner.logprobs(batch, reference=True)
        before = learner.logprobs(batch)
        stats = [learner.update(batch) for _ in range(2)]
        after = learner.logprobs(batch)
        assert (after - before).abs().max() > 1e-3  # the steps moved the policy
        results.append((batch.ref_logp, stats, after))
    (ref_a, stats_a, after_a), (ref_b, stats_b, after_b) = results
    torch.testing.assert_close(ref_b, ref_a, atol=1e-5, rtol=1e-5)
    for a, b in zip(stats_a, stats_b, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], abs=1e-5)
        assert b["kl"] == pytest.approx(a["kl"], abs=1e-6)
    torch.testing.assert_close(after_b, after_a, atol=2e-5, rtol=1e-4)


def test_lora_in_bf16_at_stage_0_trains_only_the_adapters_through_flat_adamw(tiny_path):
    """LoRA on one GPU's likeliest setting: FlatAdamW holds the adapters alone (fp32 master weights of bf16
    adapters); the KL term's reference is the policy with its adapters off; the frozen base never moves."""
    learner = Learner(make_cfg("learner.zero_stage=0", "learner.precision=bf16", "model.lora.rank=4",
                               "algorithm.kl_coef=0.1", "learner.micro_batch_size=4"), tiny_path,
                      total_optimizer_steps=4)
    assert learner.flat is not None and learner.flat.master.dtype == torch.float32
    assert learner.flat.flat.numel() == sum(p.numel() for p in learner.module.parameters() if p.requires_grad)
    start = weights(learner)
    for seed in range(2):
        assert learner.update(random_batch(seed=seed))["skipped_step"] == 0.0
    after = weights(learner)
    moved = [name for name in start if not torch.equal(start[name], after[name])]
    assert moved and all("lora" in name for name in moved), moved
