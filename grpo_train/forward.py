"""The model passes the learner runs: per-token log-probs of completions, with each distinct prompt run once
and the completions packed on top of its key/value cache, and torch.compile of the model's small-kernel parts.

Functions of a transformers causal LM (or a DeepSpeed engine / peft wrapper around one) and token tensors, with
no DeepSpeed or process-group state of their own (compile_model changes the model in place). Used by
`grpo_train.learner`.

Fused log-probs (`fused=True`; the learner's passes fuse where `fusing_pays`, their logits exceeding one chunk): the
model runs as before (through the DeepSpeed engine and peft
wrappers, so ZeRO-3's hooks gather every weight as they always did), but its output head is handed no rows: the
final hidden states of the scored positions are taken from the head's input instead, and `head_token_logprobs`
projects them onto the vocabulary a chunk of rows at a time, recomputing each chunk's logits in backward. No
[n, C, V] tensor then exists, neither the logits nor their gradient. `fused=False` is the reference path: the
model's [n, C, V] logits, then `algorithms.token_logprobs_from_logits`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

from grpo_train import algorithms


def compile_model(model: torch.nn.Module) -> None:
    """torch.compile, in place, the parts of each decoder layer that eager PyTorch runs as many small kernels.

    On a small model most of the non-matmul time goes to the norms, the gated MLP's activation and the eager
    attention's masking, softmax and key/value head repetition, each a separate pass over memory. Compiled (with
    dynamic shapes: every micro-batch has its own lengths) they fuse. The attention module itself is left eager:
    it writes the key/value cache, and torch.compile would specialise on every layer's cache state. With eager
    attention, its inner function is compiled instead, through transformers' AttentionInterface (sdpa and flash
    attention are already one kernel). `model` is a transformers causal LM (not a peft wrapper).
    """
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS, AttentionInterface

    layer_types = set(model._no_split_modules or ())
    for layer in model.modules():
        if type(layer).__name__ in layer_types:
            for name, child in layer.named_children():
                if name != "self_attn":
                    child.compile(dynamic=True)
    if model.config._attn_implementation == "eager":
        modeling = sys.modules[type(model).__module__]  # each architecture's file has its own eager attention
        name = "compiled_eager_" + modeling.__name__.rpartition(".")[2]
        if name not in ALL_ATTENTION_FUNCTIONS:
            AttentionInterface.register(name, torch.compile(modeling.eager_attention_forward, dynamic=True))
            # transformers builds no attention mask at all for a name without a mask function of its own.
            AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["eager"])
        model.set_attn_implementation(name)


# Logits per chunk of the fused head: rows = HEAD_CHUNK_ELEMENTS // V. Each chunk reads the whole head weight, so a
# chunk must be wide enough for its matmul not to be bound by that read (~220 rows of Qwen2.5's 151,936-token
# vocabulary on CPU, ~880 on a GPU); its logits and, in backward, their gradient are the only [rows, V] tensors:
# 2 x 64 MiB (CPU, fp32) and 2 x 256 MiB (GPU, bf16). scripts/bench/bench_logprob_memory.py measures the CPU one.
HEAD_CHUNK_ELEMENTS = 2**25
GPU_HEAD_CHUNK_ELEMENTS = 2**27


def fusing_pays(model: torch.nn.Module, positions: int, device: torch.device) -> bool:
    """Whether the fused head is worth its cost for a pass scoring `positions` completion positions: when their
    logits would be more than one of its chunks. Below that the reference path's whole logits are no larger than
    one fused chunk, while the fused path computes the head's matmul a second time in backward (14-18% more CPU time
    per token on a small model's update, docs/benchmarks.md#fused-log-probs). So the tiny and small models of the
    tests and the demo keep the reference path, and Qwen2.5's 151,936-token head at long completions fuses."""
    elements = GPU_HEAD_CHUNK_ELEMENTS if device.type == "cuda" else HEAD_CHUNK_ELEMENTS
    return positions * model.get_output_embeddings().out_features > elements


def token_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_len: int,
                   temperature: float, with_entropy: bool = False, share_prompts: bool = False,
                   pack_last_prompt_token: bool = False, fused: bool | None = None) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each completion token under `model` at the sampling temperature, in fp32.

    input_ids, attention_mask: [n, P + C] laid out as in UpdateBatch, C = completion_len.
    Returns (logp [n, C], entropy [n, C] or None); with share_prompts, 0 on completion padding.
    pack_last_prompt_token (with share_prompts): see shared_prompt_layout. fused: through the head a chunk of
    rows at a time (module docstring); False: the reference path over the model's whole logits; None (the
    learner's): fused where `fusing_pays`.
    """
    if fused is None:
        fused = fusing_pays(model, input_ids.shape[0] * completion_len, input_ids.device)
    if share_prompts:
        return _token_logprobs_shared_prompts(model, input_ids, attention_mask, completion_len, temperature,
                                              with_entropy, pack_last_prompt_token, fused)
    # Positions count real tokens only, so a left-padded prompt is seen exactly as vLLM sees it.
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    logp, entropy, _ = scored_call(
        model, lambda x: x[:, :-1],  # [n, C + 1, h or V] -> [n, C, .]: position t predicts completion token t
        input_ids[:, -completion_len:], temperature, with_entropy, fused,
        input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
        logits_to_keep=completion_len + 1, use_cache=False)
    return logp, entropy


def scored_call(model: torch.nn.Module, select: Callable[[Tensor], Tensor], tokens: Tensor, temperature: float,
                with_entropy: bool, fused: bool, **inputs) -> tuple[Tensor, Tensor | None, Any]:
    """model(**inputs), and the log-probs of `tokens` [...] at the positions `select` picks among those the model's
    output head was to project: select(x) [..., h or V] from the head's input x [..., S, h] (fused) or the model's
    logits [..., S, V] (reference). Returns (logp [...] fp32, entropy [...] or None, the model's output; fused, its
    `logits` are the log-probs).

    Fused, hooks on the head turn its call into head_token_logprobs over the selected hidden states, inside the
    model's forward: the log-probs are an output of the model, so a DeepSpeed engine around it sees their gradient
    first, as it sees the logits' (its backward hooks on its outputs prepare the optimizer before any gradient is
    accumulated). The model's logits must be its head's output (no soft-capping after it: Qwen2, Llama).
    """
    if not fused:
        out = model(**inputs)
        # The sampler drew from softmax(logits / T); fp32 log-probs, a few rows at a time (no [n, C, V] fp32 copy).
        logp, entropy = algorithms.token_logprobs_from_logits(select(out.logits), tokens, temperature, with_entropy)
        return logp, entropy, out
    scorer = _FusedHead(select, tokens, temperature, with_entropy)
    head = model.get_output_embeddings()
    handles = [head.register_forward_pre_hook(scorer.take), head.register_forward_hook(scorer.score)]
    try:
        out = model(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    return out.logits, scorer.entropy, out


@dataclass
class _FusedHead:
    """The two hooks that turn one call of the output head into head_token_logprobs (see scored_call)."""

    select: Callable[[Tensor], Tensor]
    tokens: Tensor  # [...]
    temperature: float
    with_entropy: bool
    hidden: Tensor | None = None  # [..., S, h] the head's input
    entropy: Tensor | None = None  # [...]
    busy: bool = False  # inside score(), where head_token_logprobs calls the head itself

    def take(self, _head: torch.nn.Module, args: tuple) -> tuple | None:
        """Before the head: keep its input, and hand it no positions to project."""
        if self.busy:
            return None
        self.hidden = args[0]
        return (args[0][..., :0, :], *args[1:])

    def score(self, head: torch.nn.Module, _args: tuple, _output: Tensor) -> Tensor | None:
        """After the head: its output becomes the log-probs of the selected positions."""
        if self.busy:
            return None
        self.busy = True
        try:
            logp, self.entropy = head_token_logprobs(head, self.select(self.hidden), self.tokens, self.temperature,
                                                     self.with_entropy)
        finally:
            self.busy, self.hidden = False, None
        return logp


def head_token_logprobs(head: torch.nn.Module, hidden: Tensor, tokens: Tensor, temperature: float,
                        with_entropy: bool = False) -> tuple[Tensor, Tensor | None]:
    """log softmax(head(hidden) / T)[token] (and the entropy), a chunk of rows at a time, forward and backward.

    head: the model's output head (an nn.Linear, or what DeepSpeed / peft made of it; called as a module so their
    hooks run); hidden: [..., h] final hidden states; tokens: [...] long. Returns (logp [...] fp32, entropy [...]
    fp32 without gradient, or None), equal to algorithms.token_logprobs_from_logits(head(hidden), ...).
    With gradients on, each chunk runs under non-reentrant activation checkpointing: its logits are dropped after
    the forward and recomputed (the head called again, so ZeRO-3 gathers its weight again) when backward reaches
    them; at most one chunk's logits and their gradient exist at a time. The price is one more head matmul.
    """
    flat, flat_tokens = hidden.reshape(-1, hidden.shape[-1]), tokens.reshape(-1)
    elements = GPU_HEAD_CHUNK_ELEMENTS if hidden.device.type == "cuda" else HEAD_CHUNK_ELEMENTS
    size = max(1, elements // head.out_features)
    logps, entropies = [], []
    for start in range(0, flat.shape[0], size):
        args = (head, flat[start: start + size], flat_tokens[start: start + size], temperature, with_entropy, {})
        if torch.is_grad_enabled():
            logp, entropy = checkpoint(_head_chunk, *args, use_reentrant=False, preserve_rng_state=False)
        else:
            logp, entropy = _head_chunk(*args)
        logps.append(logp)
        entropies.append(entropy)
    if not logps:  # no rows
        empty = flat.new_zeros(0, dtype=torch.float32)
        return empty.view(tokens.shape), empty.view(tokens.shape) if with_entropy else None
    logp = torch.cat(logps).view(tokens.shape)
    return logp, torch.cat(entropies).view(tokens.shape) if with_entropy else None


def _head_chunk(head: torch.nn.Module, hidden: Tensor, tokens: Tensor, temperature: float, with_entropy: bool,
                seen: dict[str, Tensor]) -> tuple[Tensor, Tensor | None]:
    """hidden [rows, h], tokens [rows] -> (logp [rows], entropy [rows] or None) through logits [rows, V].

    The first call keeps the rows' log-sum-exp in `seen`; the recomputation in backward reuses it, so it redoes the
    head's matmul only, not the log-sum-exp and entropy passes over [rows, V] (its outputs are not used).
    """
    logp, entropy, seen["log_norm"] = algorithms.token_logprobs_and_log_norm(
        head(hidden), tokens, temperature, with_entropy, seen.get("log_norm"))
    return logp, entropy


@dataclass
class PackedCompletions:
    """A micro-batch's completion tokens packed into rows that each continue one distinct prompt.

    The shared-prompt pass feeds every completion token but the last (the last predicts nothing we score).
    Instead of one right-padded row per completion, the fed segments of a prompt's completions are packed
    first-fit-decreasing into rows as wide as the longest segment or the prompt, whichever is longer. A segment
    attends to its prompt and to its own earlier tokens only (`attention_mask`). The MLPs, projections and the
    output head then run on little padding, and the prompt's cached keys/values are repeated once per packed
    row rather than once per completion. The price is attention over the whole packed row (the mask hides the
    other segments): a token attends over at most prompt + row width keys, at most twice a padded row's when
    the prompt is the longer, and no more than a padded row's otherwise.
    """

    prompt: Tensor  # [B] the distinct prompt each packed row continues
    tokens: Tensor  # [B, W] fed tokens (0 on padding)
    positions: Tensor  # [B, W] position ids: the prompt's length + the token's index in its completion
    segment: Tensor  # [B, W] which completion a token belongs to (-1 on padding)
    source: Tensor  # [T] flat index b * W + w of every fed token
    target_row: Tensor  # [T] the completion whose next token that position predicts
    target_col: Tensor  # [T] that token's column

    def attention_mask(self, prompt_mask: Tensor, dtype: torch.dtype) -> Tensor:
        """Additive mask [B, 1, W, P + W] over the cached prompt keys and the packed keys, from prompt_mask
        [distinct, P] (0 on a prompt's left padding)."""
        width = self.tokens.shape[1]
        same_segment = (self.segment[:, :, None] == self.segment[:, None, :]) & (self.segment[:, None, :] >= 0)
        causal = torch.ones(width, width, dtype=torch.bool, device=self.tokens.device).tril()
        sees_prompt = prompt_mask[self.prompt].bool()[:, None, :].expand(-1, width, -1)
        allowed = torch.cat([sees_prompt, same_segment & causal], 2)[:, None]  # padding rows still see the prompt
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)


def pack_completions(input_ids: Tensor, attention_mask: Tensor, completion_len: int, row_prompt: list[int],
                     prompt_lengths: list[int], last_prompt_token: bool = False) -> PackedCompletions | None:
    """Pack the fed completion tokens of [n, P + C] rows (see PackedCompletions); None if no row feeds any.

    row_prompt: the distinct prompt of each row; prompt_lengths: each distinct prompt's real tokens, as run in the
    prompt pass. last_prompt_token: every segment starts with its prompt's last token (left out of the prompt
    pass), so a completion of c tokens feeds c tokens and its token t is predicted at its segment's index t.
    """
    shift = int(last_prompt_token)  # segments start `shift` columns before the completion
    p = input_ids.shape[1] - completion_len
    fed = [max(0, int(c) - 1 + shift) if c else 0 for c in attention_mask[:, p:].sum(1).tolist()]
    if max(fed) == 0:
        return None
    capacity = max(max(fed), max(prompt_lengths))
    bins: list[tuple[int, list[int]]] = []  # (prompt, rows), with the room left per bin alongside
    room: list[int] = []
    for row in sorted((r for r in range(len(fed)) if fed[r]), key=lambda r: -fed[r]):
        fits = [b for b, (prompt, _) in enumerate(bins) if prompt == row_prompt[row] and room[b] >= fed[row]]
        if fits:
            bins[fits[0]][1].append(row)
            room[fits[0]] -= fed[row]
        else:
            bins.append((row_prompt[row], [row]))
            room.append(capacity - fed[row])
    width = capacity - min(room)
    device = input_ids.device
    tokens = torch.zeros(len(bins), width, dtype=input_ids.dtype, device=device)
    positions = torch.zeros_like(tokens)
    segment = torch.full_like(tokens, -1)
    source, target_row, target_col = [], [], []
    for b, (prompt, rows) in enumerate(bins):
        offset = 0
        for row in rows:
            length = fed[row]
            tokens[b, offset: offset + length] = input_ids[row, p - shift: p - shift + length]
            positions[b, offset: offset + length] = torch.arange(length, device=device) + prompt_lengths[prompt]
            segment[b, offset: offset + length] = row
            source.extend(range(b * width + offset, b * width + offset + length))
            target_row.extend([row] * length)
            target_col.extend(range(1 - shift, length + 1 - shift))  # fed token t predicts token t + 1 - shift
            offset += length
    index = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return PackedCompletions(index([prompt for prompt, _ in bins]), tokens, positions, segment, index(source),
                             index(target_row), index(target_col))


@dataclass
class SharedPromptLayout:
    """Where the shared-prompt pass puts each row of [n, P + C]: its distinct prompt, and the packed rows."""

    distinct_ids: Tensor  # [distinct, P'] the prompts run once each, left-padded (P' = P, or P - 1; see below)
    distinct_mask: Tensor  # [distinct, P']
    row_prompt: Tensor  # [n] the distinct prompt of each row
    packed: PackedCompletions | None  # the completion tokens fed on top of the prompts' cache


def shared_prompt_layout(input_ids: Tensor, attention_mask: Tensor, completion_len: int,
                         last_prompt_token: bool = False) -> SharedPromptLayout:
    """The layout of _token_logprobs_shared_prompts.

    By default each distinct prompt is run whole and its last position predicts token 0 of all its completions.
    With last_prompt_token the prompt pass stops one token short and every packed segment starts with that token:
    then every position whose logits enter the loss belongs to one completion (one more fed token per completion).
    The U-statistic monitor (grpo_train/ustat/sketch.py) needs that to tell completions apart from hooks.
    """
    p = input_ids.shape[1] - completion_len
    prompt_ids, prompt_mask = input_ids[:, :p], attention_mask[:, :p]
    distinct, row_prompt = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0, return_inverse=True)
    distinct_ids, distinct_mask = distinct[:, :p], distinct[:, p:]
    if last_prompt_token:  # prompts are left-padded: the last column holds every prompt's last token
        distinct_ids, distinct_mask = distinct_ids[:, :-1], distinct_mask[:, :-1]
    packed = pack_completions(input_ids, attention_mask, completion_len, row_prompt.tolist(),
                              distinct_mask.sum(1).tolist(), last_prompt_token)
    return SharedPromptLayout(distinct_ids, distinct_mask, row_prompt, packed)


def _token_logprobs_shared_prompts(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor,
                                   completion_len: int, temperature: float, with_entropy: bool,
                                   last_prompt_token: bool = False, fused: bool = True
                                   ) -> tuple[Tensor, Tensor | None]:
    """token_logprobs with every distinct prompt run once and the completions packed on top of it.

    GRPO's G completions of a prompt share it, and a few-shot prompt is often ten times longer than the
    answer: running it once per group instead of once per sequence removes most of the update's FLOPs.
    The distinct prompts are run with their key/value cache kept (with its autograd graph); the cache rows
    are repeated for the packed completion rows (PackedCompletions), which are run on top of it. Gradients flow
    back through the cache into the single prompt pass, so this is the same function of the weights as one
    forward of the whole sequences (checked against it, with gradients, in tests/test_learner.py).
    """
    n, p = input_ids.shape[0], input_ids.shape[1] - completion_len
    layout = shared_prompt_layout(input_ids, attention_mask, completion_len, last_prompt_token)
    distinct_ids, distinct_mask, row_prompt, packed = (layout.distinct_ids, layout.distinct_mask,
                                                       layout.row_prompt, layout.packed)
    fed_ids = packed.tokens if packed is not None else distinct_ids[:, :0]
    # One embedding lookup for both passes: each lookup's backward builds a dense [vocab, hidden] gradient.
    embeds = model.get_input_embeddings()(torch.cat([distinct_ids.reshape(-1), fed_ids.reshape(-1)]))
    prompt_embeds, fed_embeds = embeds.split([distinct_ids.numel(), fed_ids.numel()])
    completion = input_ids[:, p:]
    rows = torch.arange(n, device=input_ids.device)[attention_mask[:, p] > 0]
    # Token 0 of every completion: predicted by its prompt's last position (or, with last_prompt_token, in the pack).
    first_rows = rows[:0] if last_prompt_token else rows
    first_logp, first_entropy, out = scored_call(
        model, lambda x: x[row_prompt[first_rows], 0],  # [distinct, 1, .] -> [rows, .]
        completion[first_rows, 0], temperature, with_entropy, fused,
        inputs_embeds=prompt_embeds.view(*distinct_ids.shape, -1), attention_mask=distinct_mask,
        position_ids=(distinct_mask.cumsum(1) - 1).clamp(min=0), logits_to_keep=1, use_cache=True)
    parts = [(first_logp, first_entropy, first_rows, torch.zeros_like(first_rows))]
    if packed is not None:
        cache = out.past_key_values
        cache.batch_select_indices(packed.prompt)  # [distinct, ...] -> [B, ...], differentiable indexing
        packed_logp, packed_entropy, _ = scored_call(
            model, lambda x: x.flatten(0, 1)[packed.source],  # [B, W, .] -> [T, .]
            completion[packed.target_row, packed.target_col], temperature, with_entropy, fused,
            inputs_embeds=fed_embeds.view(*packed.tokens.shape, -1),
            attention_mask=packed.attention_mask(distinct_mask, embeds.dtype), position_ids=packed.positions,
            past_key_values=cache, use_cache=True)
        parts.append((packed_logp, packed_entropy, packed.target_row, packed.target_col))
    logp = torch.zeros(completion.shape, device=input_ids.device)
    entropy = torch.zeros(completion.shape, device=input_ids.device) if with_entropy else None
    for part_logp, part_entropy, row, col in parts:
        logp = logp.index_put((row, col), part_logp)
        if with_entropy:
            entropy[row, col] = part_entropy
    return logp, entropy
