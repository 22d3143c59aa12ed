"""Fused log-probs (logprob_kernels.head_token_logprobs, token_logprobs(fused=True)): the same log-probs, entropies and
gradients as the reference path over the model's whole logits, without any [n, C, V] tensor."""


import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from grpo_train import forward, logprob_kernels
from grpo_train.forward import token_logprobs
from grpo_train.learner import Learner, make_update_batch
from grpo_train.logprob_kernels import head_token_logprobs

QWEN25_VOCAB = 151_936


class LargestTensor(TorchDispatchMode):
    """Records the most elements of any tensor an operator produced (forward and backward alike)."""

    def __init__(self):
        super().__init__()
        self.most = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.most = max(self.most, t.numel())
        return out


def naive_logprobs(weight, hidden, tokens, temperature):
    """One row at a time: log softmax(W h / T)[token] and the entropy, in fp32 (independent of both paths)."""
    logps, entropies = [], []
    for h, token in zip(hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1), strict=True):
        log_probs = torch.log_softmax((weight.float() @ h.float()) / temperature, -1)
        logps.append(log_probs[token])
        entropies.append(-(log_probs.exp() * log_probs).sum().detach())
    return torch.stack(logps).view(tokens.shape), torch.stack(entropies).view(tokens.shape)


def test_head_chunks_equal_a_naive_per_row_softmax_with_gradients(monkeypatch):
    # 3 x 7 = 21 rows of a 1000-token head in chunks of 4 rows (5 full chunks and 1 row), at T = 0.7.
    monkeypatch.setattr(logprob_kernels, "HEAD_CHUNK_ELEMENTS", 4 * 1000)
    g = torch.Generator().manual_seed(0)
    head = torch.nn.Linear(16, 1000, bias=False)
    torch.nn.init.normal_(head.weight, std=0.5, generator=g)
    hidden = torch.randn(3, 7, 16, generator=g, requires_grad=True)
    tokens = torch.randint(0, 1000, (3, 7), generator=g)
    upstream = torch.randn(3, 7, generator=g)

    want_logp, want_entropy = naive_logprobs(head.weight, hidden, tokens, 0.7)
    want = torch.autograd.grad((want_logp * upstream).sum(), (hidden, head.weight))
    watch = LargestTensor()
    with watch:
        logp, entropy = head_token_logprobs(head, hidden, tokens, 0.7, with_entropy=True)
        got = torch.autograd.grad((logp * upstream).sum(), (hidden, head.weight))

    torch.testing.assert_close(logp, want_logp, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(entropy, want_entropy, atol=1e-5, rtol=1e-5)
    assert not entropy.requires_grad
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    # Forward and backward: no tensor as large as all 21 rows' logits (the weight and its gradient are 16 x 1000);
    # the reference path makes them, and their gradient.
    assert watch.most < 21 * 1000
    reference = LargestTensor()
    with reference:
        logp, _ = logprob_kernels.token_logprobs_from_logits(head(hidden), tokens, 0.7)
        torch.autograd.grad((logp * upstream).sum(), (hidden, head.weight))
    assert reference.most == 21 * 1000


def grouped_batch(seed=0, vocab=1000):
    """Two prompts of different lengths (left padding), three completions of different lengths each."""
    g = torch.Generator().manual_seed(seed)
    prompts, completions = [], []
    for k in range(2):
        prompt = torch.randint(3, vocab, (5 + 3 * k,), generator=g).tolist()
        for i in range(3):
            prompts.append(prompt)
            completions.append(torch.randint(3, vocab, (1 + (i * 2 + k) % 5,), generator=g).tolist())
    logps = [[-1.0] * len(c) for c in completions]
    return make_update_batch(prompts, completions, logps, torch.randn(len(prompts), generator=g), pad_id=2)


def logprobs_and_grads(model, batch, **kwargs):
    weights = torch.randn(batch.completion_mask.shape, generator=torch.Generator().manual_seed(1))
    model.zero_grad()
    logp, entropy = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_mask.shape[1],
                                   0.7, with_entropy=True, **kwargs)
    (logp * batch.completion_mask * weights).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logp * batch.completion_mask, entropy * batch.completion_mask, grads


def head_chunks(monkeypatch) -> list[int]:
    """The number of chunks of each pass of the fused head (logprob_kernels._row_chunks with head=True is called
    once in its forward and once in its backward), appended to the returned list."""
    calls, original = [], logprob_kernels._row_chunks

    def wrapper(*args, head=False):
        chunks = original(*args, head=head)
        if head:
            calls.append(len(chunks))
        return chunks

    monkeypatch.setattr(logprob_kernels, "_row_chunks", wrapper)
    return calls


def assert_fused_equals_reference(model, batch, share_prompts, monkeypatch):
    chunks = head_chunks(monkeypatch)
    reference = logprobs_and_grads(model, batch, share_prompts=share_prompts, fused=False)
    assert chunks == []  # the reference path: the model's whole logits
    fused = logprobs_and_grads(model, batch, share_prompts=share_prompts, fused=True)
    # The fused path ran (else this compares the reference with itself): forward and backward, several chunks a pass.
    assert len(chunks) >= 2 and len(chunks) % 2 == 0 and max(chunks) >= 2, f"chunks of the fused passes: {chunks}"
    torch.testing.assert_close(fused[0], reference[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fused[1], reference[1], atol=1e-5, rtol=1e-5)
    assert fused[2].keys() == reference[2].keys() and len(reference[2]) >= 4
    for name, want in reference[2].items():
        scale = max(1.0, want.abs().max().item())  # summation order differs: rounding scales with the tensor
        torch.testing.assert_close(fused[2][name], want, atol=1e-5 * scale, rtol=1e-4, msg=name)


def random_qwen2(vocab, tied, seed=0):
    from transformers import AutoModelForCausalLM, Qwen2Config

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=vocab, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied,
                         max_position_embeddings=64)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32)


@pytest.mark.parametrize("share_prompts", [False, True])
def test_tiny_model_fused_equals_reference_with_gradients(tiny_path, monkeypatch, share_prompts):
    from transformers import AutoModelForCausalLM

    monkeypatch.setattr(logprob_kernels, "HEAD_CHUNK_ELEMENTS", 5 * 49152)  # chunks of 5 rows: several per pass
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32)
    assert model.config.tie_word_embeddings
    assert_fused_equals_reference(model, grouped_batch(), share_prompts, monkeypatch)


@pytest.mark.parametrize(("tied", "share_prompts"), [(False, False), (True, True)])
def test_qwen25_vocabulary_fused_equals_reference_with_gradients(monkeypatch, tied, share_prompts):
    # A 1-layer random model with Qwen2.5's 151,936-token vocabulary, tied and untied heads, chunks of 6 rows.
    monkeypatch.setattr(logprob_kernels, "HEAD_CHUNK_ELEMENTS", 6 * QWEN25_VOCAB)
    model = random_qwen2(QWEN25_VOCAB, tied)
    assert_fused_equals_reference(model, grouped_batch(seed=2, vocab=QWEN25_VOCAB), share_prompts, monkeypatch)


def test_lora_fused_equals_reference_and_adapters_off(monkeypatch):
    from peft import LoraConfig, get_peft_model

    monkeypatch.setattr(logprob_kernels, "HEAD_CHUNK_ELEMENTS", 4 * 1000)
    model = get_peft_model(random_qwen2(1000, tied=False), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    for module in model.modules():  # adapters away from 0, so their gradients depend on the head's
        if hasattr(module, "lora_B"):
            torch.nn.init.normal_(module.lora_B["default"].weight, std=0.1)
    batch = grouped_batch(seed=3)
    assert_fused_equals_reference(model, batch, share_prompts=True, monkeypatch=monkeypatch)
    with torch.no_grad(), model.disable_adapter():
        off = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.completion_mask.shape[1], 0.7)[0]
        reference = token_logprobs(model.get_base_model(), batch.input_ids, batch.attention_mask,
                                   batch.completion_mask.shape[1], 0.7, fused=False)[0]
    torch.testing.assert_close(off * batch.completion_mask, reference * batch.completion_mask)


def counted(monkeypatch, owner, name: str) -> list:
    """Replaces owner.name by a wrapper that appends to the returned list at each call."""
    calls, original = [], getattr(owner, name)

    def wrapper(*args, **kwargs):
        calls.append(1)
        return original(*args, **kwargs)

    monkeypatch.setattr(owner, name, wrapper)
    return calls


def test_zero3_learner_step_fused_equals_reference(tiny_path, monkeypatch):
    """Through DeepSpeed ZeRO-3: the same step, and the head's weight gathered no more often than on the reference
    path (once per pass in forward and once in backward), not once per chunk (one call of the head module per pass,
    logprob_kernels._ChunkedHead). Gathers are counted as DeepSpeed's releases of the weight (`partition`), each of
    which follows one gather."""
    from tests.test_learner import make_cfg

    monkeypatch.setattr(logprob_kernels, "HEAD_CHUNK_ELEMENTS", 5 * 49152)  # 5 rows per chunk: several chunks per pass
    monkeypatch.setattr(forward, "FUSE_MIN_ELEMENTS", 5 * 49152)  # the learner's passes fuse
    chunk_calls, row_chunks = [], logprob_kernels._row_chunks
    monkeypatch.setattr(logprob_kernels, "_row_chunks", lambda *a, head=False: chunk_calls.extend(
        row_chunks(*a, head=head) if head else []) or row_chunks(*a, head=head))
    batch = grouped_batch(seed=4)
    results = []
    for fused in ("true", "false"):  # learner.fused_head: the fused path, then the reference path
        learner = Learner(make_cfg("learner.zero_stage=3", "learner.micro_batch_size=4", "learner.grad_clip=0",
                                   f"learner.fused_head={fused}"), tiny_path, total_optimizer_steps=2)
        weight = learner.engine.module.get_output_embeddings().weight
        assert hasattr(weight, "ds_active_sub_modules")  # partitioned by ZeRO-3
        releases = counted(monkeypatch, weight, "partition")
        before = learner.logprobs(batch)
        gathers_logprobs, releases[:] = len(releases), []
        chunk_calls.clear()
        stats = learner.update(batch)
        gathers_update, chunks = len(releases), len(chunk_calls)
        results.append((stats["loss"], learner.logprobs(batch), gathers_logprobs, gathers_update, chunks))
        assert (results[-1][1] - before).abs().max() > 1e-3  # the step moved the policy
    (loss_fused, after_fused, *gathers_fused, chunks), (loss_reference, after_reference, *gathers_reference, _) = (
        results)
    assert loss_fused == pytest.approx(loss_reference, abs=1e-6)
    torch.testing.assert_close(after_fused, after_reference, atol=2e-5, rtol=1e-4)
    assert chunks >= 6  # forward and recomputation of 2 micro-batches, several chunks each
    # (the head called once per chunk instead: [6, 25] against [3, 9], the weight gathered for every chunk)
    assert gathers_fused == gathers_reference


def test_the_learner_fuses_where_the_logits_would_exceed_2_to_the_28_elements():
    """fused=None (the learner's passes): the reference path while a pass's logits are small (the tests', the demo's
    and make bench's models: fusing would only add the head's second matmul), the fused one beyond."""
    model = random_qwen2(QWEN25_VOCAB, tied=False)
    cpu = torch.device("cpu")
    assert not forward.fusing_pays(model, 8 * 16, cpu)  # 128 positions x 151,936 < 2^28
    assert forward.fusing_pays(model, 4 * 4096, cpu)  # the 7B configs' micro-batch of 4 x 4,096
    assert forward.fusing_pays(model, 4 * 4096, torch.device("cuda"))  # 2.5e9 > 2^28 on a GPU too
    assert not forward.fusing_pays(model, 1024, cpu)  # 1.6e8: its logits 622 MiB in fp32
    assert forward.fusing_pays(model, 4 * 512, cpu)  # the 0.5B config's micro-batch, 3.1e8
    assert not forward.fusing_pays(model, 800, torch.device("cuda"))
