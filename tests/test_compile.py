"""learner.compile: the compiled decoder-layer parts compute the same function as eager PyTorch, through a whole
update (policy and reference), with and without shared prompts and LoRA."""

import os

import pytest
import torch
import torch.distributed as dist

from grpo_train.config import ConfigError, load_config
from grpo_train.learner import Learner, compile_model, init_distributed, make_update_batch, token_logprobs
from grpo_train.models import resolve_model


@pytest.fixture(scope="module")
def tiny_path():
    if not dist.is_initialized():
        for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(key, None)
    init_distributed()
    return resolve_model("tiny-qwen2")


def grouped_batch(seed=0, groups=2, group_size=3):
    """Groups of completions sharing a prompt of its own length (so the prompts are left-padded)."""
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for i in range(groups):
        prompt = torch.randint(3, 1000, (5 + 2 * i,), generator=g).tolist()
        for j in range(group_size):
            prompts.append(prompt)
            completions.append(torch.randint(3, 1000, (2 + j,), generator=g).tolist())
    return make_update_batch(prompts, completions, [[-2.0] * len(c) for c in completions],
                             torch.randn(len(prompts), generator=g), pad_id=2)


def logprobs_and_grads(model, batch, shared):
    width = batch.completion_mask.shape[1]
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    model.zero_grad()
    logp, entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, width, 0.7, with_entropy=True,
                                   share_prompts=shared)
    (logp * batch.completion_mask * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp * batch.completion_mask, entropy * batch.completion_mask, grads


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
        want, got = logprobs_and_grads(eager, batch, shared), logprobs_and_grads(compiled, batch, shared)
        torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got[1], want[1], atol=1e-5, rtol=1e-5)
        assert got[2].keys() == want[2].keys() and len(want[2]) > 10
        for name in want[2]:
            scale = max(1.0, want[2][name].abs().max().item())
            torch.testing.assert_close(got[2][name], want[2][name], atol=1e-5 * scale, rtol=1e-4, msg=name)
    # The passes ran compiled code: MLP and norms always, the attention function itself only when eager.
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] > graphs_before
    assert compiled.config._attn_implementation == ("compiled_eager_modeling_qwen2" if attention == "eager"
                                                    else "sdpa")
    # The name is process-local: a saved config still names the attention the model was loaded with.
    assert "compiled" not in compiled.config.to_json_string()


def make_cfg(*overrides):
    return load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.max_tokens=16",
                              "learner.lr=1e-3", "learner.micro_batch_size=4", "learner.grad_clip=0",
                              "learner.share_prompts=true", "model.attn_implementation=eager",
                              "algorithm.kl_coef=0.1", *overrides])


@pytest.mark.parametrize("variant", [["learner.zero_stage=1"], ["learner.zero_stage=2", "model.lora.rank=4"]])
def test_compiled_update_equals_the_eager_update(tiny_path, variant):
    """Two updates with the KL term on (the reference model compiled too, or the policy without adapters)."""
    batch = grouped_batch(seed=3, groups=2, group_size=4)
    results = []
    for compiled in ("false", "true"):
        torch.manual_seed(0)  # the same LoRA initialisation in both
        learner = Learner(make_cfg(f"learner.compile={compiled}", *variant), tiny_path, total_optimizer_steps=2)
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


def test_compile_with_zero3_is_refused():
    with pytest.raises(ConfigError, match="learner.compile: .*zero_stage 3"):
        load_config(None, ["learner.compile=true", "learner.zero_stage=3"])
