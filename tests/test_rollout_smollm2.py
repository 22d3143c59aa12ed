"""The vLLM engine on the real SmolLM2-135M-Instruct (Llama, 30 layers, tied embeddings): chat answers end
on <|im_end|>, the sampler's logprobs match transformers', and a learner step is synced."""

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grpo_train.hf_weights import hf_weights
from grpo_train.models import resolve_model
from grpo_train.rollout import SamplingSpec, VLLMEngine

pytestmark = pytest.mark.slow  # ~1 min on a quiet 2-core machine: a 30-layer engine and HF forwards

QUESTIONS = ["What is 2 + 3?", "Name a colour of the sky."]


@pytest.fixture(scope="module")
def setup():
    path = resolve_model("smollm2-135m-instruct")
    tokenizer = AutoTokenizer.from_pretrained(path)
    prompts = [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True, return_dict=True)["input_ids"] for q in QUESTIONS]
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    engine = VLLMEngine(path, max_model_len=512, seed=0, cpu_kvcache_gb=0.25)
    yield engine, model, prompts
    engine.close()


@torch.no_grad()
def check(model, rollouts) -> tuple[float, bool]:
    """(max |vLLM logprob - HF logprob| over all tokens, whether vLLM's tokens are HF's argmax everywhere)."""
    diff, argmax = 0.0, True
    for r in rollouts:
        logits = model(torch.tensor([r.prompt_token_ids + r.completion_token_ids])).logits[0]
        logits = logits[len(r.prompt_token_ids) - 1 : -1]
        logprobs = logits.log_softmax(-1).gather(-1, torch.tensor(r.completion_token_ids)[:, None])[:, 0]
        diff = max(diff, (logprobs - torch.tensor(r.logprobs)).abs().max().item())
        argmax = argmax and logits.argmax(-1).tolist() == r.completion_token_ids
    return diff, argmax


def test_smollm2_answers_stop_on_eos_and_match_hf(setup):
    engine, model, prompts = setup
    greedy = engine.generate(prompts, SamplingSpec(n=1, temperature=0.0, max_tokens=48))
    assert all(r.completion_token_ids[-1] == 2 and r.finish_reason == "stop" and not r.truncated for r in greedy)
    diff, argmax = check(model, greedy)
    assert diff < 1e-3 and argmax
    sampled = engine.generate(prompts, SamplingSpec(n=4, temperature=1.0, max_tokens=16, seed=7))
    assert len(sampled) == 8 and check(model, sampled)[0] < 1e-3


def test_smollm2_weight_sync_after_an_optimizer_step(setup):
    engine, model, prompts = setup
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)  # stateless: a cheap full-model step on CPU
    ids = torch.tensor([prompts[0] + [28, 1302, 2]])
    model(ids, labels=ids).loss.backward()
    optimizer.step()
    model.eval()
    greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=16)
    assert check(model, engine.generate(prompts, greedy))[0] > 1e-2  # the engine still has the old weights
    engine.load_weights(hf_weights(model))
    diff, argmax = check(model, engine.generate(prompts, greedy))
    assert diff < 1e-3 and argmax
