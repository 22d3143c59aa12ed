"""The DeepSpeed learner: policy (optionally LoRA), reference model, per-token logprobs and the GRPO update.

The DeepSpeed config is built in code from `LearnerConfig` (plus the raw `learner.deepspeed` escape hatch).
Gradient accumulation is *unmanaged* (`managed_gradient_accumulation: false`, DeepSpeed >= 0.19): every
`backward` accumulates, and the one `step()` per mini-batch is the boundary. The loss of each micro-batch is
already divided by the global normaliser of its mini-batch (`algorithms.loss_normaliser`, summed over
ranks), so the accumulated gradient is the mini-batch gradient without any 1/gas rescaling, for any number of
micro-batches.

Without ZeRO (`zero_stage: 0`) the optimizer is ours, `FlatAdamW` (grpo_train/flat_optimizer.py): every weight a view
into one flat buffer, fp32 master weights under bf16, clipping and the gradient all-reduce on that buffer, so a step
dispatches a few operations whatever the depth; DeepSpeed's engine runs backward and counts skipped steps around it.

CPU and GPU differ in a few lines only (`distributed.on_gpu`): gloo vs NCCL, torch AdamW vs DeepSpeed's FusedAdam (built
on first use; where it cannot be built, e.g. no nvcc on the node, torch's fused AdamW, named in a warning).
"""

from __future__ import annotations

import contextlib
import math
import os
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
from torch import Tensor

from grpo_train import algorithms, checkpoint, micro_batches
from grpo_train.config import Config, LearnerConfig
from grpo_train.distributed import (
    all_reduce_max,
    all_reduce_sum,
    device,
    forget_dead_deepspeed_groups,
    global_means,
    global_step_stats,
    on_gpu,
)
from grpo_train.flat_optimizer import FlatAdamW
from grpo_train.forward import (
    PackedSequences,
    attention_pair_cost,
    compile_model,
    pack_sequences,
    row_capacity,
    token_logprobs,
)
from grpo_train.hf_weights import PolicyWeights
from grpo_train.update_batch import UpdateBatch, behaviour_by_staleness, make_update_batch  # noqa: F401 (re-exported)
from grpo_train.ustat.sketch import ScoreSketch


def fused_adam_problem() -> str | None:
    """Why DeepSpeed's FusedAdam cannot be used on this GPU node, or None when it loads.

    DeepSpeed installed without prebuilt ops (the offline kit's pure-Python wheel, `pip install deepspeed` on most
    machines) compiles the op with nvcc and ninja on first use (~1 min, cached in ~/.cache/torch_extensions). A
    node without a CUDA compiler gets torch's fused AdamW instead: the same update, one CUDA kernel per step.
    GRPO_TRAIN_FUSED_ADAM=0 skips the build and takes the fallback (`grpo-gpu-check` sets it for its later items
    when the build failed, so that none of them waits on a half-finished build's lock).
    """
    if os.environ.get("GRPO_TRAIN_FUSED_ADAM", "1") == "0":
        return "GRPO_TRAIN_FUSED_ADAM=0"
    arch_list = os.environ.get("TORCH_CUDA_ARCH_LIST")
    try:
        from deepspeed.ops.op_builder import FusedAdamBuilder

        if arch_list is not None:
            # DeepSpeed 0.19.8's JIT builder reads each entry as MAJOR.MINOR[+PTX]: an arch-specific entry such as
            # "9.0a", which CUDA images set, fails with "invalid literal for int() with base 10: '0a'" (seen on an
            # H100, torch 2.11 / CUDA 13.0). FusedAdam needs no arch-specific instruction: build for the plain arch.
            os.environ["TORCH_CUDA_ARCH_LIST"] = plain_arch_list(arch_list)
        FusedAdamBuilder().load(verbose=False)
    except Exception as err:  # a missing nvcc, a compiler error, an op builder that refuses this torch
        last_line = (str(err).strip().splitlines() or [""])[-1]
        return f"{type(err).__name__}: {last_line[:300]}"
    finally:
        if arch_list is not None:
            os.environ["TORCH_CUDA_ARCH_LIST"] = arch_list
    return None


def plain_arch_list(arch_list: str) -> str:
    """TORCH_CUDA_ARCH_LIST without arch-specific suffixes, one entry per arch: "8.0 9.0a;10.0f+PTX" ->
    "8.0;9.0;10.0+PTX"."""
    out: list[str] = []
    for entry in arch_list.replace(" ", ";").split(";"):
        arch, ptx = (entry.split("+", 1) + [""])[:2]
        arch = arch.strip().rstrip("abcdefghijklmnopqrstuvwxyz")
        token = arch + ("+" + ptx if ptx else "")
        if arch and token not in out:
            out.append(token)
    return ";".join(out)


# ----------------------------------------------------------------------------------------------------
# DeepSpeed config and the learning-rate schedule


def _merge(base: dict, extra: dict) -> dict:
    out = dict(base)
    for key, value in extra.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def deepspeed_config(cfg: LearnerConfig, world_size: int, fused_adam: bool | None = None) -> dict:
    """The DeepSpeed config for the policy, from our dataclass plus the raw `learner.deepspeed` keys; with
    fused_adam (default: on a GPU) DeepSpeed builds its FusedAdam from the "optimizer" block. At stage 0 the
    optimizer is FlatAdamW, which clips and keeps the fp32 master weights itself: DeepSpeed's bf16 and clipping off."""
    flat = cfg.zero_stage == 0
    ds = {
        "train_micro_batch_size_per_gpu": cfg.micro_batch_size,
        "gradient_accumulation_steps": 1,
        "train_batch_size": cfg.micro_batch_size * world_size,
        "managed_gradient_accumulation": False,  # we own the boundary: one step() per mini-batch
        "gradient_clipping": 0.0 if flat else cfg.grad_clip,
        "zero_optimization": {"stage": cfg.zero_stage},
        # immediate_grad_update: DeepSpeed's bf16 optimizer (stage 1 below) adds each bf16 gradient into its fp32 sum
        # in the gradient's own hook, while it is hot, and drops it, instead of a pass over every gradient after each
        # micro-batch's backward and another that zeroes them before the next (the same sums).
        "bf16": {"enabled": cfg.precision == "bf16" and not flat, "immediate_grad_update": cfg.precision == "bf16"},
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
    if not flat and (on_gpu() if fused_adam is None else fused_adam):
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


def disable_dropout(model: torch.nn.Module) -> None:
    """Turn off the model's dropout (nn.Dropout modules, and the attention dropout probability transformers keeps
    as a float on the attention modules). Dropout would draw new masks in every pass, so the update's log-probs
    would differ from the old-logprob pass's (run in eval mode) and from the sampler's: the importance ratio
    would start away from 1 and the mismatch correction would measure the dropout noise."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        if isinstance(getattr(module, "attention_dropout", None), float):
            module.attention_dropout = 0.0


def _allreduce_is_a_copy(engine) -> bool:
    """Whether the engine's gradient all-reduce is DeepSpeed's generic one (ZeRO 0, or stage 1 with its bf16
    optimizer) rather than ZeRO's own reduction (stage 2, stage 1's partitioned fp32 optimizer), which also
    moves gradients into the optimizer's partitions. On one process the generic one averages over one rank,
    yet still flattens every gradient into a new buffer and copies it back: 2 x 540 MB for SmolLM2's 135 M fp32
    gradients, and ~200 k page faults per step on CPU."""
    if engine.zero_optimization_partition_gradients():
        return False
    return not (engine.zero_optimization_stage() == 1 and hasattr(engine.optimizer, "reduce_gradients"))


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
        self.model_path = model_path  # its tokenizer files go into each checkpoint's hf/ folder
        # Here rather than in init_distributed: whoever started the current world (us, vLLM, the caller),
        # DeepSpeed must not hand out groups of an earlier one.
        forget_dead_deepspeed_groups()
        self.world = dist.get_world_size()
        self.device = device()
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                     attn_implementation=cfg.model.attn_implementation)
        disable_dropout(model)  # LoRA's own dropout is refused by the config, for the same reason
        if cfg.model.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if cfg.learner.compile:
            compile_model(model)
        self.lora = cfg.model.lora.rank > 0
        # A kept key/value cache and activation recomputation do not mix (transformers turns the cache off).
        self.share_prompts = cfg.learner.share_prompts and not cfg.model.gradient_checkpointing
        # The pass (forward.token_logprobs): shared prompts where in force, else packed rows, else padded rows.
        self.packing = cfg.learner.packing and not self.share_prompts
        self.fused = None if cfg.learner.fused_head else False  # None: fused where forward.fusing_pays
        if self.lora:
            from peft import LoraConfig, get_peft_model

            lora = cfg.model.lora
            model = get_peft_model(model, LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                                                     target_modules=list(lora.target_modules), task_type="CAUSAL_LM"))
        trainable = [p for p in model.parameters() if p.requires_grad]
        lcfg = cfg.learner
        adam = {"lr": lcfg.lr, "betas": tuple(lcfg.adam_betas), "eps": lcfg.adam_eps, "weight_decay": lcfg.weight_decay}
        self.flat: FlatAdamW | None = None
        if lcfg.zero_stage == 0:  # the weights become views of FlatAdamW's buffer: in their dtype and place first
            model.to(device=self.device, dtype=torch.bfloat16 if lcfg.precision == "bf16" else torch.float32)
            optimizer = self.flat = FlatAdamW(trainable, **adam, max_grad_norm=lcfg.grad_clip, world_size=self.world)
            fused_adam = False
        else:
            # GPU: DeepSpeed builds FusedAdam from the config's "optimizer" block; CPU, or a GPU node where FusedAdam
            # cannot be built: torch's fused AdamW (one pass over the weights instead of one per elementwise op:
            # 0.075 s against 0.73 s per step on 134.5 M fp32 weights on 2 cores, where the per-op AdamW took 12% of
            # the update).
            problem = fused_adam_problem() if on_gpu() else "no GPU"
            fused_adam = problem is None
            if on_gpu() and not fused_adam and dist.get_rank() == 0:
                print(f"grpo-train: warning: DeepSpeed's FusedAdam could not be built ({problem}); "
                      "using torch.optim.AdamW(fused=True), the same update", flush=True)
            optimizer = None if fused_adam else torch.optim.AdamW(trainable, **adam, fused=True)
        schedule = lr_lambda(lcfg, total_optimizer_steps)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model,
            model_parameters=trainable,
            optimizer=optimizer,
            lr_scheduler=lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, schedule),
            config=deepspeed_config(lcfg, self.world, fused_adam),
        )
        if self.flat is not None or (self.world == 1 and _allreduce_is_a_copy(self.engine)):
            self.engine.enable_backward_allreduce = False  # FlatAdamW all-reduces its one buffer in its step
        self.ref = self._reference(model_path) if cfg.algorithm.kl_coef > 0 and not self.lora else None
        self.loss_spec = algorithms.LossSpec.from_config(cfg.algorithm)  # what algorithms.policy_loss computes
        # The U-statistic monitor's per-sequence score sketches, read from hooks during the update's backward.
        self.score_sketch = ScoreSketch.for_config(self.module, cfg, self.share_prompts)
        self.pair_cost = attention_pair_cost(self.module)  # how wide the packed rows are (forward.row_capacity)
        self.skipped_nonfinite = 0
        self.updates = 0  # GRPO updates applied (one per step; restored on resume): the weights' version

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
    # What the trainer asks of the learner besides log-probs and updates: its weights for the rollout engine, its
    # checkpoints, and the score sketches of the last update for the U-statistic monitor

    def policy_weights(self) -> PolicyWeights:
        """The policy's weights as (HF checkpoint name, full tensor), LoRA adapters merged: what the rollout engine
        loads after each update (with their declaration, `metadata()`, for a rollout server's weight transfer).
        Collective under ZeRO-3: every rank must consume each pass."""
        return PolicyWeights(self.module, version=self.updates)

    def save_checkpoint(self, run_dir: Path, step: int, trainer_state: dict, keep_last: int) -> Path:
        """Collective: this step's checkpoint (DeepSpeed state, an HF folder of the policy, `trainer_state` plus the
        learner's own counters), written atomically; the last `keep_last` are kept. Returns its folder."""
        state = {**trainer_state, "skipped_nonfinite": self.skipped_nonfinite}
        save_hf = checkpoint.hf_folder_writer(self.base_config, self.model_path)
        return checkpoint.save_checkpoint(run_dir, step, self.engine, state, self.policy_weights(), save_hf,
                                          keep_last)

    def load_checkpoint(self, ckpt: Path) -> dict:
        """Restore weights, optimizer, scheduler and the learner's counters from `ckpt`; returns the saved state
        (the trainer's part: step, data position, config, ...)."""
        state = checkpoint.load_checkpoint(ckpt, self.engine)
        self.skipped_nonfinite = state["skipped_nonfinite"]
        self.updates = int(state["step"])
        return state

    def take_score_sketches(self, num_sequences: int) -> tuple[Tensor, Tensor]:
        """(sketches [n, D], scored [n] bool) of the last update's n sequences (grpo_train/ustat/sketch.py); only
        when the U-statistic monitor is on (`ScoreSketch.for_config`)."""
        if self.score_sketch is None:
            raise RuntimeError("score sketches are taken only when the U-statistic monitor is on")
        return self.score_sketch.take(num_sequences)

    # ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def logprobs(self, batch: UpdateBatch, reference: bool = False, temperature: float | None = None) -> Tensor:
        """Learner log-probs [N, C] of the batch's completion tokens (0 on padding), in micro-batches.

        At the sampling temperature unless `temperature` is given (greedy decoding scores at 1).
        """
        temperature = temperature or self.cfg.rollout.temperature or 1.0
        out = torch.zeros_like(batch.sampler_logp)
        self.engine.eval()
        # As many passes on every rank (ZeRO-3 gathers the weights in each); a padding pass recomputes row 0.
        for index, _ in self._plan(batch, torch.arange(batch.input_ids.shape[0])):
            sub = batch.rows(index)
            ids, attn = sub.input_ids.to(self.device), sub.attention_mask.to(self.device)
            width = sub.completion_mask.shape[1]
            # The LoRA reference is the policy with its adapters off; the full-model one is a separate copy.
            model = self.ref if reference and not self.lora else self.engine
            adapters_off = self.module.disable_adapter() if reference and self.lora else contextlib.nullcontext()
            with adapters_off:
                logp, _ = token_logprobs(model, ids, attn, width, temperature, share_prompts=self.share_prompts,
                                         fused=self.fused, packed=self._packed(batch, index))
            out[index, : logp.shape[1]] = logp.float().cpu()
        self.engine.train()
        return out * batch.completion_mask

    def update(self, batch: UpdateBatch) -> dict[str, float]:
        """mu passes over the batch, each split into `mini_batches` optimizer steps; returns the statistics of
        all ranks (`global_step_stats`: the same on every rank), averaged over the optimizer steps."""
        a = self.cfg.algorithm
        n = batch.input_ids.shape[0]
        if n % a.mini_batches:
            raise ValueError(f"algorithm.mini_batches={a.mini_batches} does not divide this rank's {n} sequences")
        mini_size = n // a.mini_batches
        totals: dict[str, float] = {}
        steps: dict[str, int] = {}  # per statistic: the optimizer steps that had it (behaviour_weight/<n> may not)
        for _ in range(a.num_iterations):
            for start in range(0, n, mini_size):
                stats = self._optimizer_step(batch, torch.arange(start, start + mini_size))
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                    steps[key] = steps.get(key, 0) + 1
        self.updates += 1
        return {key: value / steps[key] for key, value in totals.items()}

    def _optimizer_step(self, batch: UpdateBatch, index: Tensor) -> dict[str, float]:
        a = self.cfg.algorithm
        temperature = self.cfg.rollout.temperature or 1.0
        mask = batch.loss_mask(a.mask_truncated)[index]
        # The global normaliser of this mini-batch over all ranks, so micro-batch / rank splits sum exactly; at
        # least 1, so a mini-batch whose every completion is masked has loss 0 rather than 0 / 0.
        normaliser = max(1.0, all_reduce_sum(algorithms.loss_normaliser(mask, a.loss_agg, self.cfg.rollout.max_tokens)))
        # This step's statistics stay on the device, summed over micro-batches, and are read once after the step:
        # no host sync per micro-batch or head chunk.
        stat_names: list[str] = []  # the statistics policy_loss returns, the same in every micro-batch
        stat_sums: Tensor | float = 0.0
        drift = self.cfg.rollout.max_staleness_auto  # the log-ratio's moments by age too (grpo_train/pace.py)
        by_age = torch.zeros(4 if drift else 2, self.cfg.rollout.max_staleness + 1, dtype=torch.float64,
                             device=self.device)
        tokens = loss_share = torch.zeros((), dtype=torch.float64, device=self.device)
        passes, trained = self._micro_batches(batch, index)
        for micro, scale in passes:
            sub = batch.rows(micro)
            ids, attn = sub.input_ids.to(self.device), sub.attention_mask.to(self.device)
            cmask = sub.loss_mask(a.mask_truncated).to(self.device)
            packed = self._packed(batch, micro)
            logp, entropy = token_logprobs(self.engine, ids, attn, cmask.shape[1], temperature, with_entropy=True,
                                           share_prompts=self.share_prompts, fused=self.fused,
                                           pack_last_prompt_token=self.score_sketch is not None, packed=packed)
            if self.score_sketch is not None:
                self.score_sketch.watch(torch.tensor(micro), sub.input_ids, sub.attention_mask, sub.completion_mask,
                                        logp, packed)
            # On-policy (mu = 1, one mini-batch): old = current, so the ratio is exactly 1 but still carries
            # the gradient; this saves a forward pass over the batch.
            old = logp.detach() if sub.old_logp is None else sub.old_logp.to(self.device)
            per_token, stats, weight = algorithms.policy_loss(
                logp, old, sub.advantages.to(self.device), cmask, self.loss_spec,
                ref_logp=None if sub.ref_logp is None else sub.ref_logp.to(self.device),
                sampler_logp=sub.sampler_logp.to(self.device), entropy=entropy)
            # This micro-batch's share of the mini-batch loss: the shares of all micro-batches and ranks sum to it.
            share = algorithms.agg_loss(per_token, cmask, a.loss_agg, normaliser) * scale
            # DeepSpeed averages gradients over data-parallel ranks; the normaliser already counts every rank,
            # so multiply by the world size to turn that average into the sum the normaliser expects.
            # scale_wrt_gas=False: the loss is already divided by the mini-batch normaliser; a further 1/gas
            # would shrink the gradient by the number of micro-batches. A non-finite loss is still
            # back-propagated: its non-finite gradient makes the optimizer skip the whole step (below).
            self.engine.backward(share * self.world, scale_wrt_gas=False)
            if self.flat is not None:
                self.flat.fold()  # this micro-batch's gradients into the flat fp32 sum
            count = cmask.sum(dtype=torch.float64) * scale  # a padding pass (scale 0) adds nothing to the statistics
            tokens = tokens + count
            loss_share = loss_share + share.detach().double()
            if stats:  # summed as one vector: a few operations per micro-batch whatever the number of statistics
                stat_names = stat_names or list(stats)
                stat_sums = stat_sums + torch.stack([stats[name] for name in stat_names]).double() * count
            if sub.staleness is not None and scale:  # weight: the behaviour weights policy_loss applied
                log_ratio = (old - sub.sampler_logp.to(self.device)).clamp(-algorithms.LOG_RATIO_CLAMP,
                                                                          algorithms.LOG_RATIO_CLAMP) if drift else None
                by_age += behaviour_by_staleness(weight, sub.staleness, cmask, by_age.shape[1], log_ratio)
        applied = self._step()
        sums = dict(zip(stat_names, stat_sums.unbind(), strict=True)) if stat_names else {}
        out = global_step_stats(loss_share, sums, tokens, trained, len(index))
        if batch.staleness is not None:  # the mean behaviour weight of the tokens n versions old (none: left out)
            ages = {f"behaviour_weight/{n}": (by_age[0, n], by_age[1, n]) for n in range(by_age.shape[1])}
            if drift:
                ages.update({f"behaviour_log_ratio{suffix}/{n}": (by_age[row, n], by_age[1, n])
                             for row, suffix in ((2, ""), (3, "_sq")) for n in range(by_age.shape[1])})
            out.update({k: v for k, v in global_means(ages).items() if v == v})
        out["grad_norm"] = self._grad_norm() if applied else float("nan")
        out["lr"] = self.scheduler.get_last_lr()[0]
        out["skipped_step"] = 0.0 if applied else 1.0
        return out

    def _packed(self, batch: UpdateBatch, rows: list[int]) -> PackedSequences | None:
        """The padding-free layout of the micro-batch `rows` on the device, or None where the pass is not packed
        (learner.packing off, or the shared-prompt pass in force)."""
        if not self.packing:
            return None
        sequences = [batch.sequences[i] for i in rows]
        prompts = [batch.lengths[0][i] for i in rows]
        packed = pack_sequences(sequences, prompts, row_capacity([len(s) for s in sequences], self.pair_cost))
        return packed.to(self.device)

    def _micro_batches(self, batch: UpdateBatch, index: Tensor) -> tuple[list[tuple[list[int], float]], int]:
        """The micro-batches of the mini-batch `index` as (rows, loss scale), and how many rows they train.

        A sequence none of whose tokens the loss counts (a truncated one under mask_truncated) has loss 0 and
        gradient 0, and is not run. Without a KL term neither is a sequence with advantage 0 (a group whose
        rewards are all equal): its loss and gradient are 0 at every token, whatever the ratio, clipping or
        mismatch weight; its tokens still count in the normaliser, which keeps the update exactly the same.
        """
        keep = batch.loss_mask(self.cfg.algorithm.mask_truncated)[index].sum(1) > 0
        if self.cfg.learner.skip_zero_advantage and self.cfg.algorithm.kl_coef == 0:
            keep &= batch.advantages[index] != 0
        rows = index[keep]
        return self._plan(batch, rows, pad_row=index[:1].tolist()), len(rows)

    def _plan(self, batch: UpdateBatch, rows: Tensor,
              pad_row: list[int] | None = None) -> list[tuple[list[int], float]]:
        """`rows` of the batch in micro-batches, as (rows, loss scale): learner.micro_batch_size rows each, or, with
        learner.max_tokens_per_micro_batch, as many as the token budget holds (grpo_train/micro_batches.py).

        Every rank makes the same number of passes (DeepSpeed gathers weights or reduces gradients in them): a rank
        with fewer splits its largest micro-batches, and only where none has two rows left adds passes over
        `pad_row` (default: row 0) with the loss scaled by 0.
        """
        lcfg = self.cfg.learner
        prompt_lens, completion_lens = batch.lengths
        rows = rows.tolist()  # the one read of the rows: every micro-batch is a list cut from it
        if lcfg.max_tokens_per_micro_batch:
            groups = micro_batches.by_token_budget(rows, prompt_lens, completion_lens,
                                                   lcfg.max_tokens_per_micro_batch, packed=self.packing)
        else:
            groups = micro_batches.by_count(rows, lcfg.micro_batch_size)
        passes = max(1, int(all_reduce_max(float(len(groups)))))
        groups, padding = micro_batches.equalise(groups, passes, prompt_lens, completion_lens, packed=self.packing)
        pad = [0] if pad_row is None else pad_row
        return [(g, 1.0) for g in groups] + [(pad, 0.0)] * padding

    def _grad_norm(self) -> float:
        """The pre-clipping global gradient norm of the last applied step (NaN where it is not known)."""
        norm = self.engine.get_global_grad_norm()
        return float("nan") if norm is None else float(norm)

    def _step(self) -> bool:
        """Apply the accumulated gradient unless it is non-finite anywhere; returns whether it was applied.

        DeepSpeed's ZeRO and bf16 optimizers, and FlatAdamW at stage 0, check the global gradient norm themselves
        and skip a non-finite step (counted in `engine.skipped_steps`, the schedule not advanced).
        """
        before = self.engine.skipped_steps
        self.engine.step()
        if self.engine.skipped_steps > before:
            self.skipped_nonfinite += 1
            return False
        return True
