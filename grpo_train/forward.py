"""The model passes the learner runs: per-token log-probs of completions, with each distinct prompt run once
and the completions packed on top of its key/value cache, and torch.compile of the model's small-kernel parts.

Functions of a transformers causal LM (or a DeepSpeed engine / peft wrapper around one) and token tensors, with
no DeepSpeed or process-group state of their own (compile_model changes the model in place). Used by
`grpo_train.learner`.

Fused log-probs (`fused=True`; the learner's passes fuse where `fusing_pays`, their logits exceeding one chunk): the
model runs as on the reference path (through the DeepSpeed engine and peft wrappers, so ZeRO-3's hooks gather every
weight), but for this one call its output head's forward is `head_token_logprobs` of the scored positions: the
head's input projected onto the vocabulary a chunk of rows at a time, each chunk's logits recomputed in backward, all
in one autograd node (grpo_train/logprob_kernels.py). No [n, C, V] tensor then exists, neither the logits nor their
gradient, and DeepSpeed sees one call of the head, as on the reference path. `fused=False` is the reference path: the
model's [n, C, V] logits, then `token_logprobs_from_logits` (the same module).
"""

from __future__ import annotations

import bisect
import itertools
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from grpo_train.logprob_kernels import head_token_logprobs, token_logprobs_from_logits


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


# The learner's passes fuse where their logits would hold more than this many elements: 1 GiB in fp32, 512 MiB in
# bf16, their gradient as much again (memory.py keeps the same figure for the estimate).
FUSE_MIN_ELEMENTS = 2**28


def fusing_pays(model: torch.nn.Module, positions: int, device: torch.device) -> bool:
    """Whether the fused head is worth its cost for a pass scoring `positions` completion positions: when their
    logits would exceed FUSE_MIN_ELEMENTS. Below that their memory is small and the reference path faster: the fused
    one computes the head's matmul a second time in backward (make bench's SmolLM2 step, 16 x 48 positions of a
    49,152-token head: learner MFU 60.7% fused against 72.0% without, docs/benchmarks.md#fused-log-probs). Every
    shipped Qwen2.5 config's micro-batch fuses (1.2-7x the threshold). A head that is not a plain nn.Linear (an
    adapter on it) keeps the reference path. `device`: for a threshold per device; CPU and GPU share one figure."""
    head = model.get_output_embeddings()
    return type(head) is torch.nn.Linear and positions * head.out_features > FUSE_MIN_ELEMENTS


def token_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_len: int,
                   temperature: float, with_entropy: bool = False, share_prompts: bool = False,
                   pack_last_prompt_token: bool = False, fused: bool | None = None,
                   packed: PackedSequences | None = None) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each completion token under `model` at the sampling temperature, in fp32.

    input_ids, attention_mask: [n, P + C] laid out as in UpdateBatch, C = completion_len.
    Returns (logp [n, C], entropy [n, C] or None); with share_prompts or packed, 0 on completion padding.
    The pass, one of three: packed (`pack_sequences` of these rows, on the model's device: padding-free rows,
    `_token_logprobs_packed`), share_prompts (each distinct prompt once, its completions packed on its cache), or
    the padded rows as they are. pack_last_prompt_token (with share_prompts): see shared_prompt_layout. fused:
    through the head a chunk of rows at a time (module docstring); False: the reference path over the model's whole
    logits; None (the learner's): fused where `fusing_pays`.
    """
    if fused is None:
        fused = fusing_pays(model, input_ids.shape[0] * completion_len, input_ids.device)
    if packed is not None:
        return _token_logprobs_packed(model, packed, input_ids.shape[0], completion_len, temperature, with_entropy,
                                      fused)
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
                with_entropy: bool, fused: bool, select_in_head: bool = False,
                **inputs) -> tuple[Tensor, Tensor | None, Any]:
    """model(**inputs), and the log-probs of `tokens` [...] at the positions `select` picks among those the model's
    output head was to project: select(x) [..., h or V] from the head's input x [..., S, h] (fused) or the model's
    logits [..., S, V] (reference). Returns (logp [...] fp32, entropy [...] or None, the model's output; fused, its
    `logits` are the log-probs).

    Fused, the head's forward is replaced for this call by head_token_logprobs over the selected hidden states,
    inside the model's forward: the log-probs are the head's output and the model's, so DeepSpeed's hooks around the
    head (gather before, release after, the same in backward) and around the model (its backward hooks on its
    outputs prepare the optimizer before any gradient is accumulated) see them as they see the logits. The model's
    logits must be its head's output (no soft-capping after it: Qwen2, Llama). select_in_head (reference path): the
    head's forward projects select(x) only, for a pass whose positions are not the model's last few (packed rows).
    """
    head = model.get_output_embeddings()
    if not fused and not select_in_head:
        out = model(**inputs)
        # The sampler drew from softmax(logits / T); fp32 log-probs, a few rows at a time (no [n, C, V] fp32 copy).
        logp, entropy = token_logprobs_from_logits(select(out.logits), tokens, temperature, with_entropy)
        return logp, entropy, out
    if not fused:  # the head projects the selected positions only; their logits are the model's
        head.forward = _SelectedHead(head, select)
        try:
            out = model(**inputs)
        finally:
            del head.forward
        logp, entropy = token_logprobs_from_logits(out.logits, tokens, temperature, with_entropy)
        return logp, entropy, out
    scorer = _FusedHead(head, select, tokens, temperature, with_entropy)
    head.forward = scorer  # this call of the head only (an instance attribute, deleted below)
    try:
        out = model(**inputs)
    finally:
        del head.forward
    return out.logits, scorer.entropy, out


@dataclass
class _SelectedHead:
    """The head's forward for one model call: its own forward of the selected positions of its input."""

    head: torch.nn.Module
    select: Callable[[Tensor], Tensor]

    def __call__(self, hidden: Tensor) -> Tensor:
        return type(self.head).forward(self.head, self.select(hidden))


@dataclass
class _FusedHead:
    """The head's forward for one model call: head_token_logprobs of the selected positions of its input."""

    head: torch.nn.Linear
    select: Callable[[Tensor], Tensor]
    tokens: Tensor  # [...]
    temperature: float
    with_entropy: bool
    entropy: Tensor | None = None  # [...]

    def __call__(self, hidden: Tensor) -> Tensor:
        logp, self.entropy = head_token_logprobs(self.head, self.select(hidden), self.tokens, self.temperature,
                                                 self.with_entropy)
        return logp


@dataclass
class PackedCompletions:
    """A micro-batch's completion tokens packed into rows on top of their prompts' key/value cache.

    The shared-prompt pass feeds every completion token but the last (the last predicts nothing we score).
    Instead of one right-padded row per completion, the fed segments are packed first-fit-decreasing into rows
    (`pack_completions` picks their width and whether a row may carry several prompts' completions). Each row's
    cache is its prompts' cached keys/values side by side (`cache_prompt`, `cache_col`: gathered by
    `regroup_cache`), and a segment attends to its own prompt's keys and its own earlier tokens only
    (`attention_mask`). The MLPs, projections and the output head then run on little padding, and a prompt's
    keys/values are copied once per row that continues it rather than once per completion; the price is attention
    over the whole row and its cache, the mask hiding the rest.
    """

    tokens: Tensor  # [B, W] fed tokens (0 on padding)
    positions: Tensor  # [B, W] position ids: the prompt's length + the token's index in its completion
    segment: Tensor  # [B, W] which completion a token belongs to (-1 on padding)
    token_prompt: Tensor  # [B, W] the distinct prompt that completion continues (-1 on padding)
    cache_prompt: Tensor  # [B, K] the distinct prompt of each of a row's cached keys (-1 on padding)
    cache_col: Tensor  # [B, K] that key's column in the prompt pass (prompt 0's last column on padding)
    source: Tensor  # [T] flat index b * W + w of every fed token
    target_row: Tensor  # [T] the completion whose next token that position predicts
    target_col: Tensor  # [T] that token's column

    def attention_mask(self, dtype: torch.dtype) -> Tensor:
        """Additive mask [B, 1, W, K + W] over a row's cached prompt keys and its packed keys."""
        width = self.tokens.shape[1]
        same_segment = (self.segment[:, :, None] == self.segment[:, None, :]) & (self.segment[:, None, :] >= 0)
        causal = torch.ones(width, width, dtype=torch.bool, device=self.tokens.device).tril()
        cached, query = self.cache_prompt[:, None, :], self.token_prompt[:, :, None]
        sees_prompt = (cached == query) | (query < 0)  # padding sees the whole cache (no empty softmax)
        allowed = torch.cat([sees_prompt, same_segment & causal], 2)[:, None]
        return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(
            ~allowed, torch.finfo(dtype).min)


def regroup_cache(cache, packed: PackedCompletions) -> None:
    """Turn the prompt pass's cache, [distinct, heads, P', d] per layer, into the packed rows' [B, heads, K, d] in
    place: each row's prompts' real keys/values side by side (differentiable indexing: gradients reach the prompt
    pass). Every layer must be a transformers DynamicLayer (a sliding-window cache keeps no whole prompt)."""
    from transformers.cache_utils import DynamicLayer

    prompt, col = packed.cache_prompt.clamp(min=0), packed.cache_col
    for layer in cache.layers:
        if type(layer) is not DynamicLayer:
            raise ValueError(f"learner.share_prompts needs a full key/value cache; this model's is {type(layer)}")
        layer.keys = layer.keys[prompt, :, col].transpose(1, 2)  # [B, K, heads, d] -> [B, heads, K, d]
        layer.values = layer.values[prompt, :, col].transpose(1, 2)


def pack_completions(input_ids: Tensor, attention_mask: Tensor, completion_len: int, row_prompt: list[int],
                     prompt_lengths: list[int], costs: SharedPassCosts, last_prompt_token: bool = False
                     ) -> PackedCompletions | None:
    """Pack the fed completion tokens of [n, P + C] rows (see PackedCompletions); None if no row feeds any.

    row_prompt: the distinct prompt of each row; prompt_lengths: each distinct prompt's real tokens, as run in the
    prompt pass (left-padded to its P' columns). last_prompt_token: every segment starts with its prompt's last
    token (left out of the prompt pass), so a completion of c tokens feeds c tokens and its token t is predicted at
    its segment's index t. costs (`shared_pass_costs`): the layout is the cheapest of `_completion_bins`'
    candidates by that estimate.
    """
    shift = int(last_prompt_token)  # segments start `shift` columns before the completion
    p = input_ids.shape[1] - completion_len
    prompt_width = p - shift  # the prompt pass's columns
    fed = [max(0, int(c) - 1 + shift) if c else 0 for c in attention_mask[:, p:].sum(1).tolist()]
    if max(fed) == 0:
        return None
    bins = _completion_bins(fed, row_prompt, prompt_lengths, costs)
    width, keys = _bins_extent(bins, fed, row_prompt, prompt_lengths)
    prompts_of = [list(dict.fromkeys(row_prompt[row] for row in rows)) for rows in bins]
    fed_ids = input_ids[:, p - shift:]  # [n, C + shift]; the layout is built on the host, the tokens gathered on device
    take = torch.full((len(bins), width), -1, dtype=torch.long)  # flat index into fed_ids of each packed token
    positions = torch.zeros_like(take)
    segment, token_prompt = torch.full_like(take, -1), torch.full_like(take, -1)
    cache_prompt = torch.full((len(bins), keys), -1, dtype=torch.long)
    cache_col = torch.full((len(bins), keys), prompt_width - 1, dtype=torch.long)
    source, target_row, target_col = [], [], []
    for b, rows in enumerate(bins):
        offset = 0
        for q in prompts_of[b]:  # a prompt's real tokens are the last of the prompt pass's left-padded columns
            length = prompt_lengths[q]
            cache_prompt[b, offset: offset + length] = q
            cache_col[b, offset: offset + length] = torch.arange(prompt_width - length, prompt_width)
            offset += length
        offset = 0
        for row in rows:
            length, prompt = fed[row], row_prompt[row]
            take[b, offset: offset + length] = torch.arange(length) + row * fed_ids.shape[1]
            positions[b, offset: offset + length] = torch.arange(length) + prompt_lengths[prompt]
            segment[b, offset: offset + length] = row
            token_prompt[b, offset: offset + length] = prompt
            source.extend(range(b * width + offset, b * width + offset + length))
            target_row.extend([row] * length)
            target_col.extend(range(1 - shift, length + 1 - shift))  # fed token t predicts token t + 1 - shift
            offset += length
    move = lambda t: t.to(input_ids.device)  # noqa: E731
    index = lambda values: move(torch.tensor(values, dtype=torch.long))  # noqa: E731
    take = move(take)
    tokens = fed_ids.reshape(-1)[take.clamp(min=0)] * (take >= 0)  # [B, W], 0 on padding
    return PackedCompletions(tokens, move(positions), move(segment), move(token_prompt), move(cache_prompt),
                             move(cache_col), index(source), index(target_row), index(target_col))


def _completion_bins(fed: list[int], row_prompt: list[int], prompt_lengths: list[int],
                     costs: SharedPassCosts) -> list[list[int]]:
    """The rows that feed tokens, in bins of at most a capacity's fed tokens: the cheapest by rows x (W x (1 +
    costs.pair x (K + W)) + costs.key x K) (W: the fullest bin's tokens, K: the most prompt keys a bin attends over
    and copies) of first-fit-decreasing packings at a few capacities (the longest segment or prompt; multiples of
    the longest segment; the total over 1 to 8 bins), each with one prompt per bin or mixed: a completion goes to a
    bin of its own prompt with room, else, mixed, to any bin with room. One prompt per bin at the longest prompt's
    width (the layout before 2026-12-07, always a candidate) pads every bin to the fullest, and a prompt whose
    completions overflow a bin fills a second one little (2-48-token completions of four 265-token prompts: 5 bins x
    258 for 915 fed tokens); narrower or mixed bins fill evenly, each copying and attending over its prompts' keys."""
    rows = sorted((r for r in range(len(fed)) if fed[r]), key=lambda r: (-fed[r], r))
    total, longest = sum(fed[r] for r in rows), fed[rows[0]]
    capacities = ({min(total, max(longest, max(prompt_lengths)))} | {int(longest * m) for m in (1, 1.25, 1.5, 2, 3, 4)}
                  | {-(-total // k) for k in range(1, 9)})

    def cost(bins: list[list[int]]) -> float:
        width, keys = _bins_extent(bins, fed, row_prompt, prompt_lengths)
        return len(bins) * (width * (1 + costs.pair * (keys + width)) + costs.key * keys)

    layouts = [_first_fit(rows, fed, row_prompt, capacity, mixed)
               for capacity in sorted(c for c in capacities if longest <= c <= total) for mixed in (False, True)]
    return min(layouts, key=cost)


def _bins_extent(bins: list[list[int]], fed: list[int], row_prompt: list[int], prompt_lengths: list[int]
                 ) -> tuple[int, int]:
    """(W, K) of a packing: the fullest bin's fed tokens and the most prompt keys a bin carries."""
    width = max(sum(fed[row] for row in members) for members in bins)
    keys = max(sum(prompt_lengths[q] for q in {row_prompt[row] for row in members}) for members in bins)
    return width, keys


def _first_fit(rows: list[int], fed: list[int], row_prompt: list[int], capacity: int, mixed: bool) -> list[list[int]]:
    """`rows` (longest first) into bins of at most `capacity` fed tokens: the first bin of the row's prompt with room,
    else (mixed) the first bin with room, else a new bin."""
    bins: list[list[int]] = []
    room: list[int] = []
    bins_of: dict[int, list[int]] = {}  # each prompt's bins, in order
    for row in rows:
        prompt, need = row_prompt[row], fed[row]
        own = bins_of.setdefault(prompt, [])
        b = next((b for b in own if room[b] >= need), None)
        if b is None and mixed:  # a bin with room is then another prompt's
            b = next((b for b in range(len(bins)) if room[b] >= need), None)
            if b is not None:
                bisect.insort(own, b)
        if b is None:
            b = len(bins)
            bins.append([])
            room.append(capacity)
            own.append(b)
        bins[b].append(row)
        room[b] -= need
    return bins


@dataclass
class SharedPromptLayout:
    """Where the shared-prompt pass puts each row of [n, P + C]: its distinct prompt, and the packed rows."""

    distinct_ids: Tensor  # [distinct, P'] the prompts run once each, left-padded (P' = P, or P - 1; see below)
    distinct_mask: Tensor  # [distinct, P']
    row_prompt: Tensor  # [n] the distinct prompt of each row
    packed: PackedCompletions | None  # the completion tokens fed on top of the prompts' cache


def shared_prompt_layout(input_ids: Tensor, attention_mask: Tensor, completion_len: int, costs: SharedPassCosts,
                         last_prompt_token: bool = False) -> SharedPromptLayout:
    """The layout of _token_logprobs_shared_prompts.

    By default each distinct prompt is run whole and its last position predicts token 0 of all its completions.
    With last_prompt_token the prompt pass stops one token short and every packed segment starts with that token:
    then every position whose logits enter the loss belongs to one completion (one more fed token per completion).
    The U-statistic monitor (grpo_train/ustat/sketch.py) needs that to tell completions apart from hooks.
    costs: the model's `shared_pass_costs` (how pack_completions weighs its candidate layouts).
    """
    p = input_ids.shape[1] - completion_len
    prompt_ids, prompt_mask = input_ids[:, :p], attention_mask[:, :p]
    distinct, row_prompt = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0, return_inverse=True)
    distinct_ids, distinct_mask = distinct[:, :p], distinct[:, p:]
    if last_prompt_token:  # prompts are left-padded: the last column holds every prompt's last token
        distinct_ids, distinct_mask = distinct_ids[:, :-1], distinct_mask[:, :-1]
    packed = pack_completions(input_ids, attention_mask, completion_len, row_prompt.tolist(),
                              distinct_mask.sum(1).tolist(), costs, last_prompt_token)
    return SharedPromptLayout(distinct_ids, distinct_mask, row_prompt, packed)


def _token_logprobs_shared_prompts(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor,
                                   completion_len: int, temperature: float, with_entropy: bool,
                                   last_prompt_token: bool = False, fused: bool = True
                                   ) -> tuple[Tensor, Tensor | None]:
    """token_logprobs with every distinct prompt run once and the completions packed on top of it.

    GRPO's G completions of a prompt share it, and a few-shot prompt is often ten times longer than the
    answer: running it once per group instead of once per sequence removes most of the update's FLOPs.
    The distinct prompts are run with their key/value cache kept (with its autograd graph); the cache is regrouped
    into the packed completion rows' prompts (PackedCompletions), which are run on top of it. Gradients flow
    back through the cache into the single prompt pass, so this is the same function of the weights as one
    forward of the whole sequences (checked against it, with gradients, in tests/test_learner.py).
    """
    n, p = input_ids.shape[0], input_ids.shape[1] - completion_len
    layout = shared_prompt_layout(input_ids, attention_mask, completion_len, shared_pass_costs(model),
                                  last_prompt_token)
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
        regroup_cache(cache, packed)  # [distinct, heads, P', d] -> [B, heads, K, d] per layer
        packed_logp, packed_entropy, _ = scored_call(
            model, lambda x: x.flatten(0, 1)[packed.source],  # [B, W, .] -> [T, .]
            completion[packed.target_row, packed.target_col], temperature, with_entropy, fused,
            inputs_embeds=fed_embeds.view(*packed.tokens.shape, -1),
            attention_mask=packed.attention_mask(embeds.dtype), position_ids=packed.positions,
            past_key_values=cache, use_cache=True)
        parts.append((packed_logp, packed_entropy, packed.target_row, packed.target_col))
    logp = torch.zeros(completion.shape, device=input_ids.device)
    entropy = torch.zeros(completion.shape, device=input_ids.device) if with_entropy else None
    for part_logp, part_entropy, row, col in parts:
        logp = logp.index_put((row, col), part_logp)
        if with_entropy:
            entropy[row, col] = part_entropy
    return logp, entropy


# ----------------------------------------------------------------------------------------------------
# Padding-free passes: a micro-batch's sequences concatenated into rows


@dataclass
class PackedSequences:
    """A micro-batch's sequences (prompt + completion, no padding) concatenated into rows.

    Position ids restart at 0 at each sequence, as a padded row's count only its real tokens, so every token sees
    the positions it saw in vLLM. Attention is confined to each sequence by `packed_attention`. A row ends with
    padding only where the sequences do not fill it (`padding`): none in the single row the variable-length kernels
    take (flash attention, flex), a row's unused tail with sdpa and eager, whose masks cost the row's width squared
    (`row_capacity` weighs the two).
    """

    tokens: Tensor  # [R, W] token ids (0 on a row's unused tail)
    positions: Tensor  # [R, W] position ids, from 0 at each sequence (and at a row's tail)
    segments: Tensor  # [R, W] which sequence of the micro-batch a token belongs to (-1 on a row's tail)
    scored: Tensor  # [T] flat index r * W + w of every position that predicts a completion token
    target_row: Tensor  # [T] the sequence whose completion token that position predicts
    target_col: Tensor  # [T] that token's column in the completion
    targets: Tensor  # [T] that token
    seq_lens: list[int]  # the sequences' lengths in row order, a row's tail counted as one (flash attention's)
    padding: int  # tail tokens over all rows

    def to(self, device: torch.device) -> PackedSequences:
        """On `device`, copied from pinned memory without waiting on the device where it is a GPU."""
        def move(t: Tensor) -> Tensor:
            return t.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else t.to(device)
        return PackedSequences(move(self.tokens), move(self.positions), move(self.segments), move(self.scored),
                               move(self.target_row), move(self.target_col), move(self.targets), self.seq_lens,
                               self.padding)


def attention_pair_cost(model: torch.nn.Module) -> float | None:
    """What one (query, key) pair of a packed row costs relative to one token through the layer's matmuls, for
    `row_capacity`; None where the attention kernel takes variable-length rows at no cost for their width (flash
    attention with sequence boundaries; flex attention, whose block mask skips the blocks between sequences): a
    micro-batch then packs into one row with no padding. sdpa and eager compute every pair of a row and mask the
    others: 4 x heads x head_dim FLOPs a pair (scores and values) against 2 x the layer's matmul weights a token."""
    config = hf_config(model)
    implementation = config._attn_implementation
    if implementation.startswith("flash_attention") or implementation == "flex_attention":
        return None
    heads, head_dim, weights = _layer_shapes(config)
    return 4 * heads * head_dim / (2 * weights)


# A prompt key copied into a shared-prompt row, in matmul FLOPs per element of its keys and values as attention reads
# them (repeated to every query head): gather, repeat and their backward are memory traffic. Fitted on the EPYC
# without AVX-512 (fp32, the demo's update; docs/benchmarks.md#shared-prompt-rows: 140-280). GPUs' memory is slower
# still against their matmuls, so there the figure errs toward fewer rows.
KEY_ELEMENT_FLOPS = 200


@dataclass(frozen=True)
class SharedPassCosts:
    """What the shared-prompt pass's layout weighs (`pack_completions`), each relative to one token through a decoder
    layer's matmuls: a (query, key) pair of attention, and a cached prompt key copied into a packed row."""

    pair: float
    key: float


def shared_pass_costs(model: torch.nn.Module) -> SharedPassCosts:
    """SharedPassCosts of `model`: attention_pair_cost (sdpa or eager: config/checks.py refuses share_prompts with
    the variable-length kernels, 0 here) and KEY_ELEMENT_FLOPS x 2 x heads x head_dim against 2 x the matmul weights."""
    heads, head_dim, weights = _layer_shapes(hf_config(model))
    return SharedPassCosts(attention_pair_cost(model) or 0.0, KEY_ELEMENT_FLOPS * 2 * heads * head_dim / (2 * weights))


def _layer_shapes(config) -> tuple[int, int, int]:
    """(query heads, head_dim, a decoder layer's matmul weights) of a transformers config."""
    hidden, heads = config.hidden_size, config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    return heads, head_dim, hidden * head_dim * (2 * heads + 2 * kv_heads) + 3 * hidden * config.intermediate_size


def row_capacity(lengths: list[int], pair_cost: float | None) -> int:
    """The width of a micro-batch's packed rows, for sequences of `lengths` tokens: everything in one row where
    pair_cost is None (`attention_pair_cost`); otherwise the candidate width from the longest sequence to 4x it with
    the least estimated cost, rows x width x (1 + pair_cost x width): wider rows leave less of a tail unused, and
    cost more attention per token."""
    total, longest = sum(lengths), max(lengths)
    if pair_cost is None:
        return total
    candidates = sorted({min(total, int(longest * m)) for m in (1, 1.25, 1.5, 2, 3, 4)})
    return min(candidates, key=lambda w: len(_first_fit_decreasing(lengths, w)) * w * (1 + pair_cost * w))


def _first_fit_decreasing(lengths: list[int], capacity: int) -> list[list[int]]:
    """Sequence indices into rows of at most `capacity` tokens, longest first (ties by index: deterministic)."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    return _first_fit(order, lengths, [0] * len(lengths), capacity, mixed=False)  # one "prompt": any row with room


def hf_config(model: torch.nn.Module):
    """The transformers config of a causal LM, through DeepSpeed-engine and peft wrappers."""
    from transformers import PreTrainedModel

    while not isinstance(model, PreTrainedModel):
        model = model.get_base_model() if hasattr(model, "get_base_model") else model.module
    return model.config


def pack_sequences(sequences: list[list[int]], prompt_lens: list[int], capacity: int | None = None) -> PackedSequences:
    """`sequences` (each one's tokens, prompt then completion, its first prompt_lens[i] the prompt) packed without
    padding between them, first-fit-decreasing into rows of `capacity` tokens (`row_capacity`; None: the longest
    sequence's), each as wide as the fullest. Built from Python lists: no device work and no host sync.
    """
    lengths = [len(seq) for seq in sequences]
    rows = _first_fit_decreasing(lengths, max(lengths) if capacity is None else max(capacity, max(lengths)))
    width = max(sum(lengths[seq] for seq in row) for row in rows)
    tokens, positions, segments, seq_lens = [], [], [], []
    scored, target_row, target_col, targets = [], [], [], []
    for r, members in enumerate(rows):
        offset = r * width
        for seq in members:
            length, prompt = lengths[seq], prompt_lens[seq]
            tokens += sequences[seq]
            positions += range(length)
            segments += [seq] * length
            seq_lens.append(length)
            # position prompt - 1 + t predicts completion token t
            scored += range(offset + prompt - 1, offset + length - 1)
            target_row += [seq] * (length - prompt)
            target_col += range(length - prompt)
            targets += sequences[seq][prompt:]
            offset += length
        tail = (r + 1) * width - offset
        tokens += [0] * tail
        positions += range(tail)
        segments += [-1] * tail
        seq_lens += [tail] if tail else []
    if not scored:  # no completion token at all: score one position (masked out of every loss) to keep the graph
        scored, target_row, target_col, targets = [0], [rows[0][0]], [0], [sequences[rows[0][0]][0]]
    as_long = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
    shape = (len(rows), width)
    return PackedSequences(as_long(tokens).view(shape), as_long(positions).view(shape), as_long(segments).view(shape),
                           as_long(scored), as_long(target_row), as_long(target_col), as_long(targets), seq_lens,
                           len(rows) * width - sum(lengths))


def packed_attention(model: torch.nn.Module, packed: PackedSequences) -> dict[str, Any]:
    """The model's keyword arguments that confine attention to each packed sequence, from its boundaries as known
    on the host (no sync): flash attention's cumulative sequence lengths, or for sdpa, eager and flex the mask
    transformers' own mask interface builds for the implementation (a 4-D mask or a BlockMask) from the causal mask
    and the sequence ids. transformers derives the same mask from position ids, but only when the attention mask is
    None (a 2-D mask of ones silently lets the sequences see each other) and at the price of a host sync per pass.
    """
    from transformers.masking_utils import create_causal_mask, packed_sequence_mask_function

    config = hf_config(model)
    if config._attn_implementation.startswith("flash_attention"):
        if packed.tokens.shape[0] != 1:
            raise ValueError("flash attention's packed pass takes one row")
        bounds = torch.tensor([0, *itertools.accumulate(packed.seq_lens)], dtype=torch.int32)
        bounds = bounds.to(packed.tokens.device, non_blocking=True)
        longest = max(packed.seq_lens)
        return {"cu_seq_lens_q": bounds, "cu_seq_lens_k": bounds, "max_length_q": longest, "max_length_k": longest}
    dtype = model.get_input_embeddings().weight.dtype  # eager's additive mask is in the activations' dtype
    shape_only = torch.empty(*packed.tokens.shape, 0, dtype=dtype, device=packed.tokens.device)
    mask = create_causal_mask(config, shape_only, attention_mask=None, past_key_values=None,
                              and_mask_function=packed_sequence_mask_function(packed.segments))
    if mask is None or len(mask.shape) != 4:  # an implementation without a mask of its own would see across
        raise ValueError(f"attention {config._attn_implementation!r} built no 4-D mask for a packed pass; "
                         "set learner.packing=false")
    return {"attention_mask": mask}


def _token_logprobs_packed(model: torch.nn.Module, packed: PackedSequences, n: int, completion_len: int,
                           temperature: float, with_entropy: bool, fused: bool) -> tuple[Tensor, Tensor | None]:
    """token_logprobs over packed rows: one model call on packed.tokens [R, W], whose head projects the scored
    positions only; the log-probs [T] scattered back to [n, C] (0 where nothing is scored)."""
    logp_flat, entropy_flat, _ = scored_call(
        model, lambda x: x.flatten(0, 1)[packed.scored],  # [R, W, .] -> [T, .]
        packed.targets, temperature, with_entropy, fused, select_in_head=True,
        input_ids=packed.tokens, position_ids=packed.positions, use_cache=False, **packed_attention(model, packed))
    index = (packed.target_row, packed.target_col)
    logp = torch.zeros(n, completion_len, device=logp_flat.device).index_put(index, logp_flat)
    entropy = None
    if with_entropy:
        entropy = torch.zeros(n, completion_len, device=logp_flat.device).index_put(index, entropy_flat)
    return logp, entropy
