"""The DeepSpeed learner: policy (optionally LoRA), reference model, per-token logprobs and the GRPO update.

The DeepSpeed config is built in code from `LearnerConfig` (plus the raw `learner.deepspeed` escape hatch).
Gradient accumulation is *unmanaged* (`managed_gradient_accumulation: false`, DeepSpeed >= 0.19): every
`backward` accumulates, and the one `step()` per mini-batch is the boundary. The loss of each micro-batch is
already divided by the global normaliser of its mini-batch (`algorithms.loss_normaliser`, summed over
ranks), so the accumulated gradient is the mini-batch gradient without any 1/gas rescaling, for any number of
micro-batches.

CPU and GPU differ in a few lines only (`_on_gpu`): gloo vs NCCL, torch AdamW vs DeepSpeed's FusedAdam.
"""

from __future__ import annotations

import contextlib
import math
import os
import socket
import sys
from dataclasses import dataclass

import deepspeed
import torch
import torch.distributed as dist
from torch import Tensor

from grpo_train import algorithms
from grpo_train.config import Config, LearnerConfig


def _on_gpu() -> bool:
    return torch.cuda.is_available()


# ----------------------------------------------------------------------------------------------------
# Distributed set-up


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_distributed() -> tuple[int, int]:
    """Join (or create) the process group; returns (rank, world_size).

    torchrun, `accelerate launch --multi_gpu` and the `deepspeed` launcher set RANK / WORLD_SIZE / LOCAL_RANK /
    MASTER_ADDR / MASTER_PORT. A plain `grpo-train` start sets none of them, and DeepSpeed would then look
    for MPI, so we declare a world of one on a free local port.
    """
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    if not dist.is_initialized():
        if _on_gpu():
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        deepspeed.init_distributed(dist_backend="nccl" if _on_gpu() else "gloo", verbose=False)
    return dist.get_rank(), dist.get_world_size()


def _is_live(group: dist.ProcessGroup) -> bool:
    try:
        dist.get_process_group_ranks(group)
    except KeyError:
        return False
    return True


def _forget_dead_deepspeed_groups() -> None:
    """Drop process groups DeepSpeed cached from a world that has since ended.

    A world can end inside a live process (closing the in-process vLLM engine destroys it, so a second
    `train()` in a notebook or a test session runs in a new one); DeepSpeed keeps the dead world's groups in
    module globals and would fail with "Group ... is not registered".
    """
    from deepspeed.utils import groups

    for name, value in list(vars(groups).items()):
        if isinstance(value, dist.ProcessGroup) and not _is_live(value):
            setattr(groups, name, None)
        elif isinstance(value, dict) and any(isinstance(v, dist.ProcessGroup) and not _is_live(v)
                                             for v in value.values()):
            value.clear()


def all_reduce_sum(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=_device())
    dist.all_reduce(t)
    return float(t.item())


def all_reduce_max(value: float) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=_device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def global_means(sums: dict[str, tuple[float, float]]) -> dict[str, float]:
    """{name: (sum, count)} on this rank -> {name: sum over ranks / count over ranks}, in one all-reduce."""
    names = sorted(sums)
    flat = torch.tensor([float(v) for n in names for v in sums[n]], dtype=torch.float64, device=_device())
    dist.all_reduce(flat)
    flat = flat.cpu()
    return {n: float(flat[2 * i] / flat[2 * i + 1]) if flat[2 * i + 1] > 0 else float("nan")
            for i, n in enumerate(names)}


def _device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if _on_gpu() else torch.device("cpu")


# ----------------------------------------------------------------------------------------------------
# DeepSpeed config and the learning-rate schedule


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def deepspeed_config(cfg: LearnerConfig, world_size: int) -> dict:
    """The DeepSpeed config for the policy, from our dataclass plus the raw `learner.deepspeed` keys."""
    ds = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": cfg.micro_batch_size * world_size,
        "managed_gradient_accumulation": False,  # we own the boundary: one step() per mini-batch
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        "bf16": {"enabled": cfg.precision == "bf16"},
        # torch's AdamW on CPU is a client optimizer DeepSpeed has not "tested" with ZeRO.
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }
    if cfg.zero_stage == 1 and cfg.precision == "bf16":
        # Sum micro-batch gradients in fp32: DeepSpeed then runs its bf16 optimizer (fp32 master weights), the same
        # update as stage 2's; with bf16 sums it would take the ZeRO path that keeps them in bf16.
        ds["data_types"] = {"grad_accum_dtype": "fp32"}
    if _on_gpu():
        ds["optimizer"] = {"type": "AdamW", "params": {"lr": cfg.lr, "betas": list(cfg.adam_betas),
                                                       "eps": cfg.adam_eps, "weight_decay": cfg.weight_decay}}
    return _merge(ds, cfg.deepspeed)


def lr_lambda(cfg: LearnerConfig, total_steps: int):
    """Multiplier of the peak lr at optimizer step k: linear warmup, then constant or cosine to zero."""

    def factor(step: int) -> float:
        if step < cfg.warmup_steps:
            return (step + 1) / (cfg.warmup_steps + 1)
        if cfg.lr_schedule == "constant":
            return 1.0
        progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress)))

    return factor


# ----------------------------------------------------------------------------------------------------
# The update batch


@dataclass
class UpdateBatch:
    """One rank's rollout batch: prompts left-padded to P columns, completions right-padded to C.

    Every row reads [pad .. prompt | completion .. pad], so completions start at column P and the model's
    last C + 1 positions hold every logit the loss needs (`logits_to_keep`): prompt positions are never
    projected onto the vocabulary. Log-prob tensors have one column per completion token.
    """

    input_ids: Tensor  # [N, P + C] long
    attention_mask: Tensor  # [N, P + C] long, 1 on prompt and completion tokens
    completion_mask: Tensor  # [N, C] float, 1 on completion tokens
    advantages: Tensor  # [N] float
    sampler_logp: Tensor  # [N, C] float, vLLM's log-probs of the completion tokens (0 on padding)
    old_logp: Tensor | None = None  # [N, C] learner log-probs before the update (None: on-policy)
    ref_logp: Tensor | None = None  # [N, C] reference-model log-probs (None: no KL term)

    @property
    def prompt_len(self) -> int:
        return self.input_ids.shape[1] - self.completion_mask.shape[1]

    def rows(self, index: Tensor) -> UpdateBatch:
        """The sequences `index` [n], without the columns that are padding in all of them."""
        p = self.prompt_len
        attention = self.attention_mask[index]
        longest_prompt = int(attention[:, :p].sum(1).max())
        longest_completion = max(1, int(self.completion_mask[index].sum(1).max()))
        columns = slice(p - longest_prompt, p + longest_completion)
        completion = lambda t: None if t is None else t[index][:, :longest_completion]  # noqa: E731
        return UpdateBatch(
            input_ids=self.input_ids[index][:, columns],
            attention_mask=attention[:, columns],
            completion_mask=completion(self.completion_mask),
            advantages=self.advantages[index],
            sampler_logp=completion(self.sampler_logp),
            old_logp=completion(self.old_logp),
            ref_logp=completion(self.ref_logp),
        )


def make_update_batch(prompt_ids: list[list[int]], completion_ids: list[list[int]],
                      sampler_logps: list[list[float]], advantages: Tensor, pad_id: int) -> UpdateBatch:
    """Pack rollouts into an UpdateBatch (prompts left-padded, completions right-padded)."""
    n = len(prompt_ids)
    p = max(len(prompt) for prompt in prompt_ids)
    c = max(1, max(len(completion) for completion in completion_ids))
    input_ids = torch.full((n, p + c), pad_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p + c), dtype=torch.long)
    completion_mask = torch.zeros((n, c))
    sampler_logp = torch.zeros((n, c))
    for i, (prompt, completion, logps) in enumerate(zip(prompt_ids, completion_ids, sampler_logps, strict=True)):
        input_ids[i, p - len(prompt): p] = torch.tensor(prompt, dtype=torch.long)
        input_ids[i, p: p + len(completion)] = torch.tensor(completion, dtype=torch.long)
        attention_mask[i, p - len(prompt): p + len(completion)] = 1
        completion_mask[i, : len(completion)] = 1.0
        sampler_logp[i, : len(completion)] = torch.tensor(logps, dtype=torch.float32)
    return UpdateBatch(input_ids, attention_mask, completion_mask, advantages.float(), sampler_logp)


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


def token_logprobs(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor, completion_len: int,
                   temperature: float, with_entropy: bool = False,
                   share_prompts: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-prob of each completion token under `model` at the sampling temperature, in fp32.

    input_ids, attention_mask: [n, P + C] laid out as in UpdateBatch, C = completion_len.
    Returns (logp [n, C], entropy [n, C] or None); with share_prompts, 0 on completion padding.
    """
    if share_prompts:
        return _token_logprobs_shared_prompts(model, input_ids, attention_mask, completion_len, temperature,
                                              with_entropy)
    # Positions count real tokens only, so a left-padded prompt is seen exactly as vLLM sees it.
    position_ids = (attention_mask.cumsum(1) - 1).clamp(min=0)
    out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                logits_to_keep=completion_len + 1, use_cache=False)
    logits = out.logits[:, :-1]  # [n, C, V]: position t predicts completion token t
    # The sampler drew from softmax(logits / T); fp32 log-probs, a few rows at a time (no [n, C, V] fp32 copy).
    return algorithms.token_logprobs_from_logits(logits, input_ids[:, -completion_len:], temperature, with_entropy)


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
                     prompt_lengths: list[int]) -> PackedCompletions | None:
    """Pack the fed completion tokens of [n, P + C] rows (see PackedCompletions); None if no row feeds any.

    row_prompt: the distinct prompt of each row; prompt_lengths: each distinct prompt's real tokens.
    """
    p = input_ids.shape[1] - completion_len
    fed = [max(0, int(c) - 1) for c in attention_mask[:, p:].sum(1).tolist()]
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
            tokens[b, offset: offset + length] = input_ids[row, p: p + length]
            positions[b, offset: offset + length] = torch.arange(length, device=device) + prompt_lengths[prompt]
            segment[b, offset: offset + length] = row
            source.extend(range(b * width + offset, b * width + offset + length))
            target_row.extend([row] * length)
            target_col.extend(range(1, length + 1))  # fed token t predicts token t + 1
            offset += length
    index = lambda values: torch.tensor(values, dtype=torch.long, device=device)  # noqa: E731
    return PackedCompletions(index([prompt for prompt, _ in bins]), tokens, positions, segment, index(source),
                             index(target_row), index(target_col))


def _token_logprobs_shared_prompts(model: torch.nn.Module, input_ids: Tensor, attention_mask: Tensor,
                                   completion_len: int, temperature: float,
                                   with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    """token_logprobs with every distinct prompt run once and the completions packed on top of it.

    GRPO's G completions of a prompt share it, and a few-shot prompt is often ten times longer than the
    answer: running it once per group instead of once per sequence removes most of the update's FLOPs.
    The distinct prompts are run with their key/value cache kept (with its autograd graph); the cache rows
    are repeated for the packed completion rows (PackedCompletions), which are run on top of it. Gradients flow
    back through the cache into the single prompt pass, so this is the same function of the weights as one
    forward of the whole sequences (checked against it, with gradients, in tests/test_learner.py).
    """
    n, p = input_ids.shape[0], input_ids.shape[1] - completion_len
    prompt_ids, prompt_mask = input_ids[:, :p], attention_mask[:, :p]
    distinct, row_prompt = torch.unique(torch.cat([prompt_ids, prompt_mask], 1), dim=0, return_inverse=True)
    distinct_ids, distinct_mask = distinct[:, :p], distinct[:, p:]
    prompt_lengths = distinct_mask.sum(1)
    packed = pack_completions(input_ids, attention_mask, completion_len, row_prompt.tolist(),
                              prompt_lengths.tolist())
    fed_ids = packed.tokens if packed is not None else distinct_ids[:, :0]
    # One embedding lookup for both passes: each lookup's backward builds a dense [vocab, hidden] gradient.
    embeds = model.get_input_embeddings()(torch.cat([distinct_ids.reshape(-1), fed_ids.reshape(-1)]))
    prompt_embeds, fed_embeds = embeds.split([distinct_ids.numel(), fed_ids.numel()])
    out = model(inputs_embeds=prompt_embeds.view(*distinct_ids.shape, -1), attention_mask=distinct_mask,
                position_ids=(distinct_mask.cumsum(1) - 1).clamp(min=0), logits_to_keep=1, use_cache=True)
    completion = input_ids[:, p:]
    has_tokens = attention_mask[:, p] > 0
    rows = torch.arange(n, device=input_ids.device)[has_tokens]
    # Token 0 of every completion: predicted by its prompt's last position.
    parts = [(out.logits[row_prompt[rows], 0], rows, torch.zeros_like(rows))]
    if packed is not None:
        cache = out.past_key_values
        cache.batch_select_indices(packed.prompt)  # [distinct, ...] -> [B, ...], differentiable indexing
        logits = model(inputs_embeds=fed_embeds.view(*packed.tokens.shape, -1),
                       attention_mask=packed.attention_mask(distinct_mask, embeds.dtype),
                       position_ids=packed.positions, past_key_values=cache, use_cache=True).logits  # [B, W, V]
        parts.append((logits.flatten(0, 1)[packed.source], packed.target_row, packed.target_col))
    logp = torch.zeros(completion.shape, device=input_ids.device)
    entropy = torch.zeros(completion.shape, device=input_ids.device) if with_entropy else None
    for logits, row, col in parts:
        part_logp, part_entropy = algorithms.token_logprobs_from_logits(logits, completion[row, col], temperature,
                                                                        with_entropy)
        logp = logp.index_put((row, col), part_logp)
        if with_entropy:
            entropy[row, col] = part_entropy
    return logp, entropy


def _allreduce_is_a_copy(engine) -> bool:
    """Whether the engine's gradient all-reduce is DeepSpeed's generic one (ZeRO 0, or stage 1 with its bf16
    optimizer) rather than ZeRO's own reduction (stage 2, stage 1's partitioned fp32 optimizer), which also
    moves gradients into the optimizer's partitions. On one process the generic one averages over one rank,
    yet still flattens every gradient into a new buffer and copies it back: 2 x 540 MB for SmolLM2's 135 M fp32
    gradients, and ~200 k page faults per step on CPU."""
    if engine.zero_optimization_partition_gradients():
        return False
    return not (engine.zero_optimization_stage() == 1 and hasattr(engine.optimizer, "reduce_gradients"))


def _chunks(n: int, size: int) -> list[Tensor]:
    return list(torch.arange(n).split(size))


# ----------------------------------------------------------------------------------------------------
# The learner


class Learner:
    """A DeepSpeed engine around the policy, an optional reference model, and the GRPO update.

    Reference model: none when kl_coef = 0; with LoRA, the policy itself with its adapters disabled; otherwise
    a frozen copy (partitioned by its own DeepSpeed engine under ZeRO-3, a plain module below that).
    """

    def __init__(self, cfg: Config, model_path: str, total_optimizer_steps: int):
        from transformers import AutoModelForCausalLM

        self.cfg = cfg
        # Here rather than in init_distributed: whoever started the current world (us, vLLM, the caller),
        # DeepSpeed must not hand out groups of an earlier one.
        _forget_dead_deepspeed_groups()
        self.world = dist.get_world_size()
        self.device = _device()
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                     attn_implementation=cfg.model.attn_implementation)
        if cfg.model.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.learner.compile:
            compile_model(model)
        self.lora = cfg.model.lora.rank > 0
        # A kept key/value cache and activation recomputation do not mix (transformers turns the cache off).
        self.share_prompts = cfg.learner.share_prompts and not cfg.model.gradient_checkpointing
        if self.lora:
            from peft import LoraConfig, get_peft_model

            lora = cfg.model.lora
            model = get_peft_model(model, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                     target_modules=list(lora.target_modules), task_type="CAUSAL_LM"))
        trainable = [p for p in model.parameters() if p.requires_grad]
        lcfg = cfg.learner
        # GPU: DeepSpeed builds FusedAdam from the config's "optimizer" block; CPU: torch's fused AdamW (one pass
        # over the weights instead of one per elementwise op: 0.075 s against 0.73 s per step on 134.5 M fp32
        # weights on 2 cores, where the per-op AdamW took 12% of the update).
        optimizer = None if _on_gpu() else torch.optim.AdamW(
            trainable, lr=lcfg.lr, betas=tuple(lcfg.adam_betas), eps=lcfg.adam_eps, weight_decay=lcfg.weight_decay,
            fused=True)
        schedule = lr_lambda(lcfg, total_optimizer_steps)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model,
            model_parameters=trainable,
            optimizer=optimizer,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
            config=deepspeed_config(lcfg, self.world),
        )
        if self.world == 1 and _allreduce_is_a_copy(self.engine):
            self.engine.enable_backward_allreduce = False
        self.ref = self._reference(model_path) if cfg.algorithm.kl_coef > 0 and not self.lora else None
        self.skipped_nonfinite = 0
        self.basic_grad_norm: float | None = None

    def _reference(self, model_path: str) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        dtype = torch.bfloat16 if self.cfg.learner.precision == "bf16" else torch.float32
        ref = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype,
                                                   attn_implementation=self.cfg.model.attn_implementation)
        ref = ref.eval().requires_grad_(False)
        if self.cfg.learner.compile:
            compile_model(ref)
        if self.cfg.learner.zero_stage == 3:
            # Partition the frozen copy like the policy instead of holding it whole on every rank.
            ref_config = {"train_micro_batch_size_per_gpu": self.cfg.learner.micro_batch_size,
                          "zero_optimization": {"stage": 3}, "bf16": {"enabled": dtype == torch.bfloat16}}
            return deepspeed.initialize(model=ref, config=ref_config)[0].module
        return ref.to(self.device)

    @property
    def base_config(self):
        """The HF config of the underlying model (through a peft wrapper)."""
        module = self.engine.module
        return module.get_base_model().config if self.lora else module.config

    @property
    def module(self) -> torch.nn.Module:
        """The policy as an nn.Module (a PeftModel with LoRA), for weight sync and checkpoint export."""
        return self.engine.module

    # ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def logprobs(self, batch: UpdateBatch, reference: bool = False, temperature: float | None = None) -> Tensor:
        """Learner log-probs [N, C] of the batch's completion tokens (0 on padding), in micro-batches.

        At the sampling temperature unless `temperature` is given (greedy decoding scores at 1).
        """
        temperature = temperature or self.cfg.rollout.temperature or 1.0
        out = torch.zeros_like(batch.sampler_logp)
        self.engine.eval()
        for index in _chunks(batch.input_ids.shape[0], self.cfg.learner.micro_batch_size):
            sub = batch.rows(index)
            ids, attn = sub.input_ids.to(self.device), sub.attention_mask.to(self.device)
            width = sub.completion_mask.shape[1]
            # The LoRA reference is the policy with its adapters off; the full-model one is a separate copy.
            model = self.ref if reference and not self.lora else self.engine
            adapters_off = self.module.disable_adapter() if reference and self.lora else contextlib.nullcontext()
            with adapters_off:
                logp, _ = token_logprobs(model, ids, attn, width, temperature, share_prompts=self.share_prompts)
            out[index, : logp.shape[1]] = logp.float().cpu()
        self.engine.train()
        return out * batch.completion_mask

    def update(self, batch: UpdateBatch) -> dict[str, float]:
        """mu passes over the batch, each split into `mini_batches` optimizer steps; returns mean statistics."""
        a = self.cfg.algorithm
        n = batch.input_ids.shape[0]
        if n % a.mini_batches:
            raise ValueError(f"algorithm.mini_batches={a.mini_batches} does not divide this rank's {n} sequences")
        mini_size = n // a.mini_batches
        totals: dict[str, float] = {}
        steps = 0
        for _ in range(a.num_iterations):
            for start in range(0, n, mini_size):
                stats = self._optimizer_step(batch, torch.arange(start, start + mini_size))
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                steps += 1
        return {key: value / steps for key, value in totals.items()}

    def _optimizer_step(self, batch: UpdateBatch, index: Tensor) -> dict[str, float]:
        a = self.cfg.algorithm
        temperature = self.cfg.rollout.temperature or 1.0
        mask = batch.completion_mask[index]
        # The global normaliser of this mini-batch over all ranks, so micro-batch / rank splits sum exactly.
        normaliser = all_reduce_sum(algorithms.loss_normaliser(mask, a.loss_agg, self.cfg.rollout.max_tokens))
        sums: dict[str, float] = {}
        tokens = 0.0
        micro_batches, trained = self._micro_batches(batch, index)
        for micro, scale in micro_batches:
            sub = batch.rows(micro)
            ids, attn = sub.input_ids.to(self.device), sub.attention_mask.to(self.device)
            cmask = sub.completion_mask.to(self.device)
            logp, entropy = token_logprobs(self.engine, ids, attn, cmask.shape[1], temperature, with_entropy=True,
                                           share_prompts=self.share_prompts)
            # On-policy (mu = 1, one mini-batch): old = current, so the ratio is exactly 1 but still carries
            # the gradient; this saves a forward pass over the batch.
            old = logp.detach() if sub.old_logp is None else sub.old_logp.to(self.device)
            per_token, stats = algorithms.clipped_surrogate_loss(
                logp, old, sub.advantages.to(self.device), cmask,
                clip_low=a.clip_eps, clip_high=a.clip_eps_high or a.clip_eps, dual_clip=a.dual_clip or None,
                ref_logp=None if sub.ref_logp is None else sub.ref_logp.to(self.device),
                kl_coef=a.kl_coef, kl_kind=a.kl_estimator,
                sampler_logp=sub.sampler_logp.to(self.device), tis_cap=a.tis_cap or None, entropy=entropy)
            # DeepSpeed averages gradients over data-parallel ranks; the normaliser already counts every rank,
            # so multiply by the world size to turn that average into the sum the normaliser expects.
            loss = algorithms.agg_loss(per_token, cmask, a.loss_agg, normaliser) * (self.world * scale)
            # scale_wrt_gas=False: the loss is already divided by the mini-batch normaliser; a further 1/gas
            # would shrink the gradient by the number of micro-batches. A non-finite loss is still
            # back-propagated: its non-finite gradient makes the optimizer skip the whole step (below).
            self.engine.backward(loss, scale_wrt_gas=False)
            count = float(cmask.sum()) * scale  # a padding pass (scale 0) adds nothing to the statistics
            tokens += count
            sums["loss"] = sums.get("loss", 0.0) + float(loss.detach()) / self.world
            for key, value in stats.items():
                sums[key] = sums.get(key, 0.0) + float(value) * count
        applied = self._step()
        out = {key: value / max(tokens, 1.0) for key, value in sums.items() if key != "loss"}
        out["loss"] = sums.get("loss", 0.0)
        out["grad_norm"] = self._grad_norm() if applied else float("nan")
        out["lr"] = self.scheduler.get_last_lr()[0]
        out["skipped_step"] = 0.0 if applied else 1.0
        out["trained_seq_frac"] = trained / len(index)
        return out

    def _micro_batches(self, batch: UpdateBatch, index: Tensor) -> tuple[list[tuple[Tensor, float]], int]:
        """The micro-batches of the mini-batch `index` as (rows, loss scale), and how many rows they train.

        Without a KL term a sequence with advantage 0 (a group whose rewards are all equal) has loss 0 and
        gradient 0 at every token, whatever the ratio, clipping or TIS weight, so it is not run at all; its
        tokens still count in the normaliser, which keeps the update exactly the same. Every rank must make
        the same number of backward passes (DeepSpeed reduces gradients in them), so a rank with fewer adds
        passes over one row with the loss scaled by 0.
        """
        rows = index
        if self.cfg.learner.skip_zero_advantage and self.cfg.algorithm.kl_coef == 0:
            rows = index[batch.advantages[index] != 0]
        micro_batches = [(micro, 1.0) for micro in rows.split(self.cfg.learner.micro_batch_size) if len(micro)]
        passes = max(1, int(all_reduce_max(float(len(micro_batches)))))
        micro_batches += [(index[:1], 0.0)] * (passes - len(micro_batches))
        return micro_batches, len(rows)

    def _grad_norm(self) -> float:
        """The pre-clipping global gradient norm of the last applied step (NaN where it is not known)."""
        norm = self.engine.get_global_grad_norm()
        if norm is None:
            norm = self.basic_grad_norm
        return float("nan") if norm is None else float(norm)

    def _step(self) -> bool:
        """Apply the accumulated gradient unless it is non-finite anywhere; returns whether it was applied.

        DeepSpeed's ZeRO and bf16 optimizers check the global gradient norm themselves and skip a non-finite
        step (counted in `engine.skipped_steps`). The plain fp32 ZeRO-0 path does not, so we check its local
        gradients (not yet reduced here) on every rank and drop them all together.
        """
        self.basic_grad_norm = None
        if self.cfg.learner.zero_stage == 0 and self.cfg.learner.precision == "fp32":
            grads = [p.grad for p in self.engine.module.parameters() if p.grad is not None]
            local_norm = float(torch.nn.utils.get_total_norm(grads)) if grads else 0.0
            if all_reduce_sum(0.0 if math.isfinite(local_norm) else 1.0) > 0:
                self.engine.zero_grad()
                self.skipped_nonfinite += 1
                return False
            # DeepSpeed does not report this path's norm; ours is exact only before any cross-rank averaging.
            self.basic_grad_norm = local_norm if self.world == 1 else None
        before = self.engine.skipped_steps
        self.engine.step()
        if self.engine.skipped_steps > before:
            self.skipped_nonfinite += 1
            return False
        return True
