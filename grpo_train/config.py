"""Typed configuration tree for grpo_train, loaded from YAML with dotted command-line overrides.

A YAML file holds only what differs from the defaults below. Every field carries a one-line doc
(`metadata["doc"]`), printed by `grpo-train --config F --print-config --explain`. Unknown keys, wrong
types and out-of-range values are errors that name the key path and the file.

    cfg = load_config("configs/tiny-cpu.yaml", ["algorithm.group_size=4", "run.seed=1"])
"""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """A config problem, with the key path (e.g. `algorithm.group_size`) and the file in its message."""


def _f(default: Any, doc: str) -> Any:
    """A dataclass field with a one-line doc; mutable defaults are copied per instance."""
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: type(default)(default), metadata={"doc": doc})
    return field(default=default, metadata={"doc": doc})


# ----------------------------------------------------------------------------------------------------
# Sections


@dataclass
class LoraConfig:
    rank: int = _f(0, "LoRA rank; 0 trains all weights (full fine-tuning)")
    alpha: float = _f(32.0, "LoRA scaling numerator (effective scale alpha / rank)")
    dropout: float = _f(0.0, "dropout on the LoRA input")
    target_modules: list[str] = _f(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "module names that get adapters",
    )


@dataclass
class ModelConfig:
    name_or_path: str = _f("tiny-qwen2", "embedded name (tiny-qwen2, smollm2-135m-instruct), HF folder or hub id")
    dtype: str = _f("float32", "weight dtype of the learner and the rollout engine: float32, bfloat16 or auto "
                    "(bfloat16 where bf16 matmuls are native: a GPU, or a CPU with AVX512-BF16 or AMX; else float32)")
    max_model_len: int = _f(1024, "longest prompt + completion, in tokens")
    gradient_checkpointing: bool = _f(False, "recompute activations in backward to save memory")
    attn_implementation: str = _f("sdpa", "the learner's attention kernel (transformers' attn_implementation): "
                                  "sdpa, eager or flash_attention_2; vLLM picks its own")
    lora: LoraConfig = field(default_factory=LoraConfig, metadata={"doc": "LoRA adapters (rank 0 = off)"})


@dataclass
class SyntheticConfig:
    min_operand: int = _f(1, "smallest operand of the synthetic arithmetic problems")
    max_operand: int = _f(20, "largest operand of add/sub problems")
    max_factor: int = _f(12, "largest factor of multiplication and division problems")
    num_train: int = _f(5000, "problems generated for training")
    seed: int = _f(1234, "seed of the problem generator (independent of run.seed)")
    categories: list[str] = _f(
        ["add_sub_2", "add_sub_3", "multiplication", "division", "parentheses"],
        "categories drawn (uniformly) for train, test and the few-shot examples; a subset sets the difficulty",
    )


@dataclass
class DataConfig:
    source: str = _f("synthetic", "synthetic, gsm8k, math, or a local .jsonl/.parquet file")
    eval_source: str = _f("", "held-out set; empty = the same source's test split (synthetic: fresh problems)")
    template: str = _f("chat", "prompt template: chat, fewshot (chat with worked examples) or raw")
    num_shots: int = _f(3, "worked examples in the fewshot template")
    system_prompt: str = _f("", "system message of the chat templates (empty = none)")
    instruction: str = _f(
        "Please reason step by step, and put your final answer within \\boxed{}.",
        "instruction appended to every problem",
    )
    max_rows: int = _f(0, "use only the first N rows of a file source (0 = all)")
    skip_malformed: bool = _f(False, "skip and count malformed rows instead of failing")
    synthetic: SyntheticConfig = field(
        default_factory=SyntheticConfig, metadata={"doc": "the paper's synthetic arithmetic set"}
    )


@dataclass
class RolloutConfig:
    engine: str = _f("vllm", "vllm (vLLM in-process, CPU or CUDA) or hf (transformers.generate fallback)")
    temperature: float = _f(1.0, "sampling temperature")
    top_p: float = _f(1.0, "nucleus sampling mass")
    top_k: int = _f(-1, "top-k sampling (-1 = off)")
    max_tokens: int = _f(256, "completion length cap; longer completions are truncated")
    stop: list[str] = _f([], "extra stop strings (EOS always stops)")
    gpu_memory_utilization: float = _f(0.3, "fraction of GPU memory vLLM may take (GPU only)")
    tensor_parallel_size: int = _f(1, "vLLM tensor parallelism across training ranks (GPU only)")
    enable_sleep_mode: bool = _f(True, "free vLLM's GPU memory during the update (ignored on CPU)")
    cpu_kvcache_gb: float = _f(1.0, "vLLM KV-cache size on CPU, in GiB")


@dataclass
class RewardConfig:
    accuracy_weight: float = _f(1.0, "reward for a verified-correct final answer")
    format_weight: float = _f(0.0, "reward for stating the answer in the expected format")
    timeout_s: float = _f(5.0, "hard per-item verifier timeout, seconds")
    num_workers: int = _f(2, "verifier worker processes")


@dataclass
class AlgorithmConfig:
    group_size: int = _f(8, "G: completions per prompt")
    prompts_per_step: int = _f(8, "prompts per rollout batch (across all ranks)")
    advantage: str = _f("grpo", "grpo (std-normalised), dr_grpo (mean-centred), rloo (leave-one-out), none")
    adv_eps: float = _f(1e-6, "added to the group std in grpo advantages")
    clip_eps: float = _f(0.2, "PPO clip range below 1 (and above, unless clip_eps_high is set)")
    clip_eps_high: float = _f(0.0, "clip range above 1 (clip-higher, DAPO); 0 = same as clip_eps")
    dual_clip: float = _f(0.0, "dual-clip bound c > 1 for negative advantages; 0 = off")
    tis_cap: float = _f(0.0, "truncated importance weight cap for sampler/learner mismatch; 0 = off")
    kl_coef: float = _f(0.0, "beta: weight of the KL penalty to the reference model; 0 loads no reference")
    kl_estimator: str = _f("k3", "k1, k2 or k3 (Schulman's low-variance unbiased estimator)")
    loss_agg: str = _f("token_mean", "token_mean, seq_mean_token_mean or seq_mean_token_sum_norm")
    num_iterations: int = _f(1, "mu: passes over each rollout batch")
    mini_batches: int = _f(1, "optimizer steps per pass over a rollout batch")
    # Group size chosen while training, and dynamic sampling (docs/u-statistics.md)
    group_size_auto: bool = _f(False, "choose G every group_size_every steps: the G with the smallest gradient MSE "
                               "predicted by the U-statistic monitor at rollouts_per_step completions per step, "
                               "starting from group_size (or the nearest feasible G); YAML `group_size: auto` sets it")
    rollouts_per_step: int = _f(0, "N: completions per step with group_size_auto (B = N / G prompts); "
                                "0 = prompts_per_step * group_size")
    group_size_min: int = _f(4, "smallest G group_size_auto may choose (>= 4: the monitor needs 4 completions "
                             "per prompt to separate c1, c2 and c3)")
    group_size_max: int = _f(0, "largest G group_size_auto may choose; 0 = N / 2 (at least 2 prompts per step)")
    group_size_every: int = _f(4, "K: steps between group_size_auto's choices")
    dynamic_sampling: str = _f("off", "off; dapo: draw further prompts until the step holds B groups with mixed "
                               "rewards (DAPO); filter: keep only the mixed groups of the step's rollouts (no extra "
                               "rollouts). The loss normaliser counts what is kept")
    dynamic_sampling_max_rounds: int = _f(4, "dapo: most extra rounds of B prompts per step; the step then trains "
                                          "on the mixed groups it has")


@dataclass
class LearnerConfig:
    zero_stage: int = _f(0, "DeepSpeed ZeRO stage 0-3 (1-3 with bf16)")
    precision: str = _f("fp32", "fp32, bf16 (DeepSpeed mixed precision) or auto (bf16 where model.dtype auto "
                        "picks bfloat16)")
    lr: float = _f(1e-6, "peak learning rate")
    lr_schedule: str = _f("constant", "constant or cosine (after warmup)")
    warmup_steps: int = _f(0, "linear warmup, in optimizer steps")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    adam_betas: list[float] = _f([0.9, 0.999], "AdamW betas")
    adam_eps: float = _f(1e-8, "AdamW epsilon")
    grad_clip: float = _f(1.0, "global gradient-norm clip (0 = off)")
    micro_batch_size: int = _f(8, "sequences per forward/backward pass")
    share_prompts: bool = _f(False, "run a prompt once per micro-batch for all its completions (exact; "
                             "ignored with gradient checkpointing; see README)")
    skip_zero_advantage: bool = _f(True, "do not run sequences whose advantage is 0 through the update when "
                                   "kl_coef = 0: their loss and gradient are exactly 0 (exact); train/entropy, "
                                   "ratio and clip fractions are then over the trained sequences, "
                                   "train/trained_seq_frac says how many")
    compile: bool = _f(False, "torch.compile the policy's and the reference model's decoder-layer parts that run "
                       "as many small kernels (MLP, norms, eager attention); the first passes compile, ~10 s "
                       "(not with ZeRO-3; see README)")
    deepspeed: dict[str, Any] = _f({}, "raw DeepSpeed config keys merged over the generated config")


@dataclass
class RunConfig:
    output_dir: str = _f("runs/default", "run folder: config, metrics, samples, checkpoints")
    seed: int = _f(0, "seed of sampling, data order and initialisation")
    steps: int = _f(10, "GRPO steps (rollout batches)")
    log_every: int = _f(1, "console log interval, in steps (metrics.jsonl gets every step)")
    samples_every: int = _f(5, "write prompt/completion/reward samples every k steps (0 = never)")
    eval_every: int = _f(0, "held-out eval every k steps (0 = only before and after training)")
    eval_size: int = _f(200, "held-out problems per eval")
    checkpoint_every: int = _f(0, "checkpoint every k steps (0 = only at the end)")
    keep_last: int = _f(2, "checkpoints kept")
    check_sync_every: int = _f(0, "every k steps, check vLLM's logprobs against the learner's after the sync")
    resume: str = _f("never", "never, auto (latest complete checkpoint in output_dir) or a checkpoint path")
    wandb: str = _f("disabled", "wandb mode: disabled, offline or online (online needs a key)")
    wandb_project: str = _f("grpo_train", "wandb project name")


@dataclass
class UstatConfig:
    enabled: bool = _f(False, "the online U-statistic monitor: c1, c2, c3 of the gradient-MSE law from the learner's "
                       "own backward, logged under ustat/ (always on with algorithm.group_size_auto)")
    projection: str = _f("o_proj", "the last decoder layer's linear layer whose weight gradient is sketched: "
                         "o_proj or down_proj (down_proj not with learner.compile)")
    dim: int = _f(256, "D: dimension of the random sketch of that layer's gradient (the advisor's --dim)")
    window: int = _f(8, "steps pooled in the estimates")
    resamples: int = _f(200, "bootstrap resamples over prompts for the intervals")
    level: float = _f(0.9, "coverage of the bootstrap intervals")


@dataclass
class Config:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    run: RunConfig = field(default_factory=RunConfig)
    ustat: UstatConfig = field(default_factory=UstatConfig)


# ----------------------------------------------------------------------------------------------------
# The U-statistic monitor, group_size auto and dynamic sampling: derived values and checks


def ustat_monitor_on(cfg: Config) -> bool:
    """Whether the run keeps the U-statistic monitor (asked for, or needed by group_size_auto)."""
    return cfg.ustat.enabled or cfg.algorithm.group_size_auto


def rollouts_per_step(a: AlgorithmConfig) -> int:
    """N, the completions per step that group_size_auto keeps fixed."""
    return a.rollouts_per_step or a.prompts_per_step * a.group_size


def group_size_candidates(a: AlgorithmConfig, world: int = 1) -> list[int]:
    """The G that group_size_auto may choose: divisors of N within [group_size_min, group_size_max], at least 4
    (the monitor's c3 needs 4 completions of a prompt), leaving B = N / G >= 2 prompts (c1 compares two prompts of
    a step) that split evenly over the ranks."""
    n = rollouts_per_step(a)
    high = a.group_size_max or n // 2
    return [g for g in range(max(4, a.group_size_min), high + 1)
            if n % g == 0 and n // g >= 2 and (n // g) % world == 0]


def _group_size_auto_yaml(values: dict[str, Any]) -> dict[str, Any]:
    """algorithm.group_size: auto -> group_size_auto: true (G itself starts at its default)."""
    if values.get("group_size") != "auto":
        return values
    return {**{k: v for k, v in values.items() if k != "group_size"}, "group_size_auto": True}


def _ustat_problems(c: Config) -> list[tuple[str, str]]:
    """(key, what is wrong) for the monitor, group_size_auto and dynamic sampling settings."""
    a, u = c.algorithm, c.ustat
    problems = []
    if a.dynamic_sampling not in ("off", "dapo", "filter"):
        problems.append(("algorithm.dynamic_sampling", f"{a.dynamic_sampling!r} is not one of off, dapo, filter"))
    if a.dynamic_sampling_max_rounds < 0:
        problems.append(("algorithm.dynamic_sampling_max_rounds", "must be >= 0"))
    if u.projection not in ("o_proj", "down_proj"):
        problems.append(("ustat.projection", f"{u.projection!r} is not one of o_proj, down_proj"))
    for key, ok, need in (("ustat.dim", u.dim >= 1, "must be >= 1"), ("ustat.window", u.window >= 1, "must be >= 1"),
                          ("ustat.resamples", u.resamples >= 10, "must be >= 10"),
                          ("ustat.level", 0.0 < u.level < 1.0, "must be in (0, 1)")):
        if not ok:
            problems.append((key, need))
    if ustat_monitor_on(c):
        if c.model.gradient_checkpointing:  # recomputation would run the hooked layer's forward a second time
            problems.append(("ustat.enabled", "does not work with model.gradient_checkpointing"))
        if u.projection == "down_proj" and c.learner.compile:  # its hooks would sit inside the compiled MLP
            problems.append(("ustat.projection", "down_proj sits in the compiled MLP with learner.compile; use o_proj"))
    n = rollouts_per_step(a)
    if a.rollouts_per_step and not a.group_size_auto and a.rollouts_per_step != a.prompts_per_step * a.group_size:
        problems.append(("algorithm.rollouts_per_step", f"{a.rollouts_per_step} is used only with group_size auto "
                         f"(here B * G = {a.prompts_per_step * a.group_size}); set 0 or algorithm.group_size=auto"))
    if a.group_size_auto:
        if a.group_size_every < 1:
            problems.append(("algorithm.group_size_every", "must be >= 1"))
        if not group_size_candidates(a):
            problems.append(("algorithm.group_size_min", f"no group size G >= max(4, {a.group_size_min}) up to "
                             f"{a.group_size_max or n // 2} divides algorithm.rollouts_per_step N = {n} leaving "
                             "at least 2 prompts per step; widen the bounds or change N"))
        if n % a.mini_batches:
            problems.append(("algorithm.mini_batches", f"{a.mini_batches} must divide rollouts_per_step N = {n}"))
    if a.dynamic_sampling != "off":
        sizes = group_size_candidates(a) if a.group_size_auto else [a.group_size]
        if any(g % a.mini_batches for g in sizes):
            problems.append(("algorithm.mini_batches", f"{a.mini_batches} must divide every group size dynamic "
                             "sampling may use (it keeps a varying number of whole groups)"))
    return problems


# ----------------------------------------------------------------------------------------------------
# Validation: one place that lists every range check, each naming its key.

_CHOICES = {
    "model.dtype": ("float32", "bfloat16", "auto"),
    "model.attn_implementation": ("sdpa", "eager", "flash_attention_2"),
    "data.template": ("chat", "fewshot", "raw"),
    "rollout.engine": ("vllm", "hf"),
    "algorithm.advantage": ("grpo", "dr_grpo", "rloo", "none"),
    "algorithm.kl_estimator": ("k1", "k2", "k3"),
    "algorithm.loss_agg": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"),
    "learner.precision": ("fp32", "bf16", "auto"),
    "learner.lr_schedule": ("constant", "cosine"),
    "run.wandb": ("disabled", "offline", "online"),
}


def _range_checks(c: Config) -> list[tuple[str, bool, str]]:
    """(key, ok, requirement) for every numeric bound."""
    a, r, lr = c.algorithm, c.rollout, c.learner
    return [
        ("model.max_model_len", c.model.max_model_len >= 16, "must be >= 16"),
        ("model.lora.rank", c.model.lora.rank >= 0, "must be >= 0"),
        ("model.lora.dropout", 0.0 <= c.model.lora.dropout < 1.0, "must be in [0, 1)"),
        ("data.num_shots", c.data.num_shots >= 0, "must be >= 0"),
        ("data.max_rows", c.data.max_rows >= 0, "must be >= 0"),
        ("data.synthetic.min_operand", c.data.synthetic.min_operand >= 0, "must be >= 0"),
        ("data.synthetic.max_operand", c.data.synthetic.max_operand >= c.data.synthetic.min_operand,
         "must be >= data.synthetic.min_operand"),
        ("data.synthetic.max_factor", c.data.synthetic.max_factor >= 2, "must be >= 2"),
        ("data.synthetic.num_train", c.data.synthetic.num_train >= 1, "must be >= 1"),
        ("rollout.temperature", r.temperature >= 0.0, "must be >= 0"),
        ("rollout.top_p", 0.0 < r.top_p <= 1.0, "must be in (0, 1]"),
        ("rollout.top_k", r.top_k == -1 or r.top_k >= 1, "must be -1 or >= 1"),
        ("rollout.max_tokens", 1 <= r.max_tokens < c.model.max_model_len, "must be in [1, model.max_model_len)"),
        ("rollout.gpu_memory_utilization", 0.0 < r.gpu_memory_utilization <= 1.0, "must be in (0, 1]"),
        ("rollout.tensor_parallel_size", r.tensor_parallel_size >= 1, "must be >= 1"),
        ("rollout.cpu_kvcache_gb", r.cpu_kvcache_gb > 0.0, "must be > 0"),
        ("reward.timeout_s", c.reward.timeout_s > 0.0, "must be > 0"),
        ("reward.num_workers", c.reward.num_workers >= 1, "must be >= 1"),
        ("algorithm.group_size", a.group_size >= 2, "must be >= 2 (a group baseline needs two samples)"),
        ("algorithm.prompts_per_step", a.prompts_per_step >= 1, "must be >= 1"),
        ("algorithm.adv_eps", a.adv_eps >= 0.0, "must be >= 0"),
        ("algorithm.clip_eps", 0.0 < a.clip_eps < 1.0, "must be in (0, 1)"),
        ("algorithm.clip_eps_high", a.clip_eps_high >= 0.0, "must be >= 0 (0 = same as clip_eps)"),
        ("algorithm.dual_clip", a.dual_clip == 0.0 or a.dual_clip > 1.0, "must be 0 (off) or > 1"),
        ("algorithm.tis_cap", a.tis_cap == 0.0 or a.tis_cap >= 1.0, "must be 0 (off) or >= 1"),
        ("algorithm.kl_coef", a.kl_coef >= 0.0, "must be >= 0"),
        ("algorithm.num_iterations", a.num_iterations >= 1, "must be >= 1"),
        ("algorithm.mini_batches", a.mini_batches >= 1, "must be >= 1"),
        ("learner.zero_stage", 0 <= lr.zero_stage <= 3, "must be 0, 1, 2 or 3"),
        # DeepSpeed 0.19 runs bf16 without ZeRO through its fp16 optimizer wrapper, which accumulates gradients in
        # bf16 and takes an Adam step on zero gradients when it starts: Adam's bias correction is then one step
        # off, and the first updates come out 0.74x, 0.78x, 0.82x the fp32 ones (tests/test_learner.py). Stage 1
        # is its bf16 optimizer (fp32 master weights and gradient sums), exact, and partitions nothing more.
        ("learner.zero_stage", not (lr.zero_stage == 0 and lr.precision == "bf16"),
         "with bf16 precision (learner.precision, or auto on this machine) must be 1, 2 or 3"),
        ("learner.lr", lr.lr > 0.0, "must be > 0"),
        ("learner.warmup_steps", lr.warmup_steps >= 0, "must be >= 0"),
        ("learner.weight_decay", lr.weight_decay >= 0.0, "must be >= 0"),
        ("learner.adam_betas", len(lr.adam_betas) == 2 and all(0.0 <= b < 1.0 for b in lr.adam_betas),
         "must be two numbers in [0, 1)"),
        ("learner.adam_eps", lr.adam_eps > 0.0, "must be > 0"),
        ("learner.grad_clip", lr.grad_clip >= 0.0, "must be >= 0"),
        ("learner.micro_batch_size", lr.micro_batch_size >= 1, "must be >= 1"),
        # The packed completions attend through a 4D mask, which flash attention does not take.
        ("learner.share_prompts", not (lr.share_prompts and c.model.attn_implementation == "flash_attention_2"),
         "needs model.attn_implementation sdpa or eager"),
        # ZeRO-3 gathers each module's weights in forward hooks that torch.compile would trace into; DeepSpeed's
        # own engine.compile is the route there, not wired here.
        ("learner.compile", not (lr.compile and lr.zero_stage == 3), "is not supported with learner.zero_stage 3"),
        ("run.steps", c.run.steps >= 0, "must be >= 0"),
        ("run.log_every", c.run.log_every >= 1, "must be >= 1"),
        ("run.samples_every", c.run.samples_every >= 0, "must be >= 0"),
        ("run.eval_every", c.run.eval_every >= 0, "must be >= 0"),
        ("run.eval_size", c.run.eval_size >= 0, "must be >= 0"),
        ("run.checkpoint_every", c.run.checkpoint_every >= 0, "must be >= 0"),
        ("run.keep_last", c.run.keep_last >= 1, "must be >= 1"),
        ("run.check_sync_every", c.run.check_sync_every >= 0, "must be >= 0"),
    ]


def validate(cfg: Config, source: str = "<config>") -> None:
    """Raise ConfigError naming the first key whose value is out of range."""
    for key, problem in _ustat_problems(cfg):
        raise ConfigError(f"{source}: {key}: {problem}")
    for key, allowed in _CHOICES.items():
        value = get_key(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{source}: {key}: {value!r} is not one of {', '.join(allowed)}")
    for key, ok, requirement in _range_checks(cfg):
        if not ok:
            raise ConfigError(f"{source}: {key}: {get_key(cfg, key)!r} {requirement}")
    if cfg.algorithm.prompts_per_step * cfg.algorithm.group_size % cfg.algorithm.mini_batches:
        raise ConfigError(
            f"{source}: algorithm.mini_batches: {cfg.algorithm.mini_batches} must divide "
            f"prompts_per_step * group_size = {cfg.algorithm.prompts_per_step * cfg.algorithm.group_size}"
        )


# ----------------------------------------------------------------------------------------------------
# Building dataclasses from plain YAML values, with the key path in every error


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check `value` (as YAML or an override produced it) against the annotation `tp`."""
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return _build(tp, value, key, source)
    if origin is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key}: expected a list, got {value!r}")
        return [_convert(v, item_tp, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    scalar = _convert_scalar(value, tp)
    if scalar is not None:
        return scalar
    raise ConfigError(f"{source}: {key}: expected {_type_name(tp)}, got {value!r} ({type(value).__name__})")


_FLOAT_TEXT = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _convert_scalar(value: Any, tp: Any) -> Any:
    """`value` as a bool/int/float/str field holds it, or None when it does not fit `tp`."""
    if tp is bool and isinstance(value, bool):
        return value
    if tp is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if tp is float and isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
        return float(value)  # PyYAML reads `1e-5` (no dot) as a string
    if tp is str and isinstance(value, str):
        return value
    return None


def _build(cls: type, values: dict[str, Any], prefix: str, source: str) -> Any:
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    values = _group_size_auto_yaml(values) if cls is AlgorithmConfig else values
    kwargs = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in names:
            raise ConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(names))})")
        kwargs[name] = _convert(value, hints[name], key, source)
    return cls(**kwargs)


def _parse_override(text: str) -> tuple[str, Any]:
    """`a.b=3` -> ("a.b", 3). The value is parsed as a YAML scalar/flow value (3, 0.1, true, [a, b])."""
    if "=" not in text:
        raise ConfigError(f"override {text!r}: expected key=value, e.g. algorithm.group_size=8")
    key, raw = text.split("=", 1)
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:
        raise ConfigError(f"override {text!r}: value is not valid YAML: {err}") from None
    return key.strip(), value


def _set_dotted(tree: dict[str, Any], key: str, value: Any, source: str) -> None:
    parts = key.split(".")
    node = tree
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"{source}: {key}: {part!r} is not a section")
        node = child
    node[parts[-1]] = value


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (safe loading), apply `key=value` overrides, check types and ranges."""
    tree: dict[str, Any] = {}
    source = "<defaults>"
    if path is not None:
        source = str(path)
        p = Path(path)
        if not p.is_file():
            raise ConfigError(f"{source}: config file not found")
        try:
            loaded = yaml.safe_load(p.read_text())
        except yaml.YAMLError as err:
            raise ConfigError(f"{source}: malformed YAML: {err}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{source}: the top level must be a mapping of sections, got {type(loaded).__name__}")
        tree = loaded
    for text in overrides or []:
        key, value = _parse_override(text)
        _set_dotted(tree, key, value, f"{source} (override {text!r})")
    cfg = resolve_auto_precision(_build(Config, tree, "", source))
    validate(cfg, source)
    return cfg


def native_bf16() -> bool:
    """Whether bf16 matmuls run natively here: a CUDA GPU, or a CPU whose flags list AVX512-BF16 or AMX-BF16.

    Without those (plain AVX-512 or AVX2) PyTorch converts bf16 to fp32 around every matmul: measured on 2 threads
    of an AVX-512 Xeon, 49 GFLOP/s in bf16 against 233 in fp32, so there bf16 would slow a run ~5x.
    """
    import torch  # here, not at the top: reading a config needs no torch otherwise

    if torch.cuda.is_available():
        return True
    cpuinfo = Path("/proc/cpuinfo")
    return cpu_has_native_bf16(cpuinfo.read_text() if cpuinfo.is_file() else "")


def cpu_has_native_bf16(cpuinfo_text: str) -> bool:
    """Whether a /proc/cpuinfo text lists the AVX512-BF16 or AMX-BF16 flag (whole words only)."""
    return re.search(r"(?<![\w])(avx512_bf16|amx_bf16)(?![\w])", cpuinfo_text) is not None


def resolve_auto_precision(cfg: Config) -> Config:
    """`model.dtype: auto` / `learner.precision: auto` become concrete values for this machine (see native_bf16),
    so the run's saved config.yaml says what ran."""
    if "auto" not in (cfg.model.dtype, cfg.learner.precision):
        return cfg
    dtype, precision = auto_precision()
    if cfg.model.dtype == "auto":
        cfg.model.dtype = dtype
    if cfg.learner.precision == "auto":
        cfg.learner.precision = precision
    return cfg


def auto_precision() -> tuple[str, str]:
    """(model.dtype, learner.precision) that `auto` stands for on this machine."""
    return ("bfloat16", "bf16") if native_bf16() else ("float32", "fp32")


# ----------------------------------------------------------------------------------------------------
# Access and output


def get_key(cfg: Any, key: str) -> Any:
    node = cfg
    for part in key.split("."):
        node = getattr(node, part)
    return node


def to_dict(cfg: Config) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: Config) -> str:
    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=None, width=110)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config (every field, defaults included) as YAML."""
    Path(path).write_text(to_yaml(cfg))


def field_docs(cls: type = Config, prefix: str = "") -> dict[str, str]:
    """Dotted key -> one-line doc, for every leaf field."""
    docs: dict[str, str] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            docs.update(field_docs(hints[f.name], key + "."))
        else:
            docs[key] = f.metadata.get("doc", "")
    return docs
