"""The chunked log-prob kernels: log softmax(x / T)[token] of the sampled tokens, and the entropy of softmax(x / T),
in fp32, a chunk of rows at a time in forward and in backward, for x the model's logits
(`token_logprobs_from_logits`) or its output head's projection of the final hidden states (`head_token_logprobs`,
the fused head: no [..., V] tensor at all, neither the logits nor their gradient).

Pure tensor code: `grpo_train.forward` runs them inside the learner's passes, the U-statistic advisor on its own
logits. Both are checked against a naive per-row softmax, with gradients (tests/test_token_logprobs.py,
tests/test_fused_logprobs.py).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

# ---------------------------------------------------------------------------------------------------
# Chunk sizes: logits (rows x V) per chunk, on CPU and on a GPU (`_row_chunks`)
# ---------------------------------------------------------------------------------------------------
# The log-softmax: ~4 MB of fp32 per chunk on CPU, so each chunk's passes (upcast, log-sum-exp, softmax, entropy; in
# backward the softmax again) run in the cache instead of streaming [B, T, V] fp32 tensors through memory several
# times (SmolLM2's update of a 4 x 8 bf16 batch on 2 CPU cores: 6.1 s with the full fp32 log-softmax, 4.7 s with
# this). On a GPU each chunk costs ~10 kernel launches in forward and ~6 in backward, more than their work when a
# chunk is small, and the cache argument does not hold: a chunk there is the fused head's (below), 128 M elements
# (512 MiB fp32, ~880 rows of Qwen2.5's 151,936-token vocabulary), so the fused head runs one log-softmax per head
# chunk (scripts/bench/bench_dispatch.py counts the operations an update dispatches).
CHUNK_ELEMENTS = 2**20
GPU_CHUNK_ELEMENTS = 2**27
# The fused head: each chunk reads the whole head weight, so a chunk must be wide enough for its matmul not to be
# bound by that read (~220 rows of Qwen2.5's vocabulary on CPU, ~880 on a GPU: one log-softmax chunk); its logits and,
# in backward, their gradient are the only [rows, V] tensors: 2 x 64 MiB (CPU, fp32) and 2 x 256 MiB (GPU, bf16).
# scripts/bench/bench_logprob_memory.py measures the CPU one; grpo_train/memory.py keeps the GPU one.
HEAD_CHUNK_ELEMENTS = 2**25
GPU_HEAD_CHUNK_ELEMENTS = 2**27


def _row_chunks(rows: int, vocab: int, device: torch.device, head: bool = False) -> list[slice]:
    """`rows` rows of `vocab` logits in slices of at most the device's chunk size, at least one row each: the fused
    head's chunks (head) or the log-softmax's."""
    if head:
        elements = GPU_HEAD_CHUNK_ELEMENTS if device.type == "cuda" else HEAD_CHUNK_ELEMENTS
    else:
        elements = GPU_CHUNK_ELEMENTS if device.type == "cuda" else CHUNK_ELEMENTS
    size = max(1, elements // vocab)
    return [slice(start, min(start + size, rows)) for start in range(0, rows, size)]


# ---------------------------------------------------------------------------------------------------
# From logits
# ---------------------------------------------------------------------------------------------------
def token_logprobs_from_logits(logits: Tensor, tokens: Tensor, temperature: float = 1.0,
                               with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """log softmax(logits / T)[token] and, optionally, the entropy of softmax(logits / T), in fp32.

    logits: [..., V] in any float dtype (bf16 from the model is fine: it is upcast a chunk at a time).
    tokens: [...] long, the tokens whose log-probs are wanted.
    Returns (logp [...] fp32, differentiable with respect to logits; entropy [...] fp32 without gradient, or None).
    Equal to `torch.log_softmax(logits.float() / T, -1).gather(-1, tokens)` and its gradient, computed chunk by
    chunk: the full fp32 [..., V] tensors are never built, and backward recomputes the softmax from the saved
    logits and log-sum-exp.
    """
    flat = logits.reshape(-1, logits.shape[-1])
    logp, entropy = _ChunkedTokenLogprobs.apply(flat, tokens.reshape(-1), float(temperature), with_entropy)
    return logp.view(tokens.shape), entropy.view(tokens.shape) if with_entropy else None


def _scaled_chunk(logits: Tensor, chunk: slice, temperature: float) -> Tensor:
    """logits[chunk] / T in fp32. fp32 logits are not copied at T = 1, so callers must not write into the result."""
    scaled = logits[chunk].float()
    return scaled / temperature if temperature != 1.0 else scaled


def _logits_forward(logits: Tensor, tokens: Tensor, temperature: float, with_entropy: bool,
                    out: tuple[Tensor, Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """logits [M, V], tokens [M] -> (logp [M], entropy [M] or an empty tensor, log_norm [M]: the log-sum-exp of
    logits / T of each row, all fp32), without autograd; written into `out` (three fp32 [M] tensors, views of a
    caller's larger outputs; the entropy's ignored without with_entropy) where given."""
    rows, vocab = logits.shape
    if out is None:
        logp = torch.empty(rows, dtype=torch.float32, device=logits.device)
        log_norm = torch.empty_like(logp)
        entropy = torch.empty_like(logp) if with_entropy else logp.new_empty(0)
    else:
        logp, entropy, log_norm = out
    for chunk in _row_chunks(rows, vocab, logits.device):
        # Results are written in place (out=): no copy of each chunk's rows into the [M] outputs.
        scaled = _scaled_chunk(logits, chunk, temperature)
        torch.logsumexp(scaled, -1, out=log_norm[chunk])
        torch.sub(scaled.gather(-1, tokens[chunk, None]).squeeze(-1), log_norm[chunk], out=logp[chunk])
        if with_entropy:
            # H = log Z - sum_v p_v x_v with p = softmax(x), x = logits / T
            probs = (scaled - log_norm[chunk, None]).exp_()
            torch.sub(log_norm[chunk], (probs * scaled).sum(-1), out=entropy[chunk])
    return logp, entropy, log_norm


def _logits_grad(logits: Tensor, tokens: Tensor, log_norm: Tensor, grad_logp: Tensor, temperature: float) -> Tensor:
    """The gradient [M, V] (logits' dtype) of sum(grad_logp * logp) with respect to logits [M, V], from the
    log-sum-exps log_norm [M] of `_logits_forward`; tokens, grad_logp: [M]."""
    chunks = _row_chunks(*logits.shape, logits.device)
    grad = torch.empty_like(logits) if len(chunks) > 1 else None  # one chunk: its gradient is the whole
    grad_logp = grad_logp.float()
    for chunk in chunks:
        # d logp / d x = onehot(token) - softmax(x), and dx / dlogits = 1 / T
        scaled = _scaled_chunk(logits, chunk, temperature)
        weight = grad_logp[chunk, None] / temperature  # [rows, 1]
        g = (scaled - log_norm[chunk, None]).exp_().mul_(-weight)
        g.scatter_add_(-1, tokens[chunk, None], weight)
        if grad is None:
            return g.to(logits.dtype)
        grad[chunk] = g
    return grad


class _ChunkedTokenLogprobs(torch.autograd.Function):
    """logits [M, V], tokens [M] -> (logp [M], entropy [M] or an empty tensor); see token_logprobs_from_logits."""

    @staticmethod
    def forward(ctx, logits: Tensor, tokens: Tensor, temperature: float, with_entropy: bool):
        logp, entropy, log_norm = _logits_forward(logits, tokens, temperature, with_entropy)
        ctx.save_for_backward(logits, tokens, log_norm)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, _grad_entropy: Tensor):
        logits, tokens, log_norm = ctx.saved_tensors
        return _logits_grad(logits, tokens, log_norm, grad_logp, ctx.temperature), None, None, None


# ---------------------------------------------------------------------------------------------------
# Through the output head (fused)
# ---------------------------------------------------------------------------------------------------
def head_token_logprobs(head: torch.nn.Linear, hidden: Tensor, tokens: Tensor, temperature: float,
                        with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """log softmax(head(hidden) / T)[token] (and the entropy), a chunk of rows at a time, forward and backward.

    head: the model's output head, an nn.Linear whose weight is there (under ZeRO-3: inside the head's own call,
    where DeepSpeed's hooks gathered it); hidden: [..., h] final hidden states; tokens: [...] long. Returns
    (logp [...] fp32, entropy [...] fp32 without gradient, or None), equal to
    token_logprobs_from_logits(head(hidden), ...). Backward recomputes each chunk's logits from the saved hidden
    states and log-sum-exps: at most one chunk's logits and their gradient exist at a time, for one more head matmul
    than the reference path.
    """
    flat, flat_tokens = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    logp, entropy = _ChunkedHead.apply(flat, head.weight, head.bias, flat_tokens, float(temperature), with_entropy)
    return logp.view(tokens.shape), entropy.view(tokens.shape) if with_entropy else None


class _ChunkedHead(torch.autograd.Function):
    """hidden [M, h], weight [V, h], bias [V] or None, tokens [M] -> (logp [M] fp32, entropy [M] fp32 or empty).

    One autograd node for the whole head: DeepSpeed ZeRO-3 sees one call of the head module per pass, as on the
    reference path, so the weight is gathered once in forward and once in backward whatever the number of chunks,
    and every rank records the same module calls in its trace (which DeepSpeed checks across ranks).
    """

    @staticmethod
    def forward(ctx, hidden: Tensor, weight: Tensor, bias: Tensor | None, tokens: Tensor, temperature: float,
                with_entropy: bool) -> tuple[Tensor, Tensor]:
        rows = hidden.shape[0]
        logp = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        log_norm = torch.empty_like(logp)  # log-sum-exp of logits / T per row, reused in backward
        entropy = torch.empty_like(logp) if with_entropy else logp.new_empty(0)
        for chunk in _row_chunks(rows, weight.shape[0], hidden.device, head=True):
            _logits_forward(F.linear(hidden[chunk], weight, bias), tokens[chunk], temperature, with_entropy,
                            out=(logp[chunk], entropy[chunk] if with_entropy else entropy, log_norm[chunk]))
        ctx.save_for_backward(hidden, weight, bias, tokens, log_norm)
        ctx.temperature = temperature
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp: Tensor, _grad_entropy: Tensor | None):
        hidden, weight, bias, tokens, log_norm = ctx.saved_tensors
        need_hidden, need_weight, need_bias = ctx.needs_input_grad[:3]
        grad_hidden = torch.empty_like(hidden) if need_hidden else None  # every row written: chunks cover them
        grad_weight = torch.zeros_like(weight) if need_weight else None
        grad_bias = torch.zeros_like(bias) if need_bias else None
        for chunk in _row_chunks(hidden.shape[0], weight.shape[0], hidden.device, head=True):
            logits = F.linear(hidden[chunk], weight, bias)  # [rows, V], recomputed
            grad_logits = _logits_grad(logits, tokens[chunk], log_norm[chunk], grad_logp[chunk], ctx.temperature)
            if need_hidden:
                torch.mm(grad_logits, weight, out=grad_hidden[chunk])
            if need_weight:
                grad_weight.addmm_(grad_logits.t(), hidden[chunk])
            if need_bias:
                grad_bias += grad_logits.sum(0)
        return grad_hidden, grad_weight, grad_bias, None, None, None
