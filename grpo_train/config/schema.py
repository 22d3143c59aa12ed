"""The typed configuration tree of grpo_train: its sections, every field with its default and one-line doc, the
choices of every enumerated key, the presets' tables, and plain accessors. The rest of the package (loading YAML and
overrides, presets, validation) sits beside this module in grpo_train/config/, and grpo_train.config re-exports
every name here (import from grpo_train.config).

The choices are spelled here once: validation (grpo_train/config/checks.py) and the modules that act on a value
(algorithms.py, prompts.py, metrics.py, the command line) all use these tuples.
"""

from __future__ import annotations

import dataclasses
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
# The choices of the enumerated keys. Each tuple lists the values its key accepts, in the order an error lists them.

DTYPES = ("float32", "bfloat16", "auto")  # model.dtype
ATTN_IMPLEMENTATIONS = ("sdpa", "eager", "flash_attention_2", "flex_attention")  # model.attn_implementation
TEMPLATES = ("chat", "fewshot", "raw")  # data.template
DATA_KINDS = ("auto", "gsm8k", "math", "none")  # data.kind
ENGINES = ("vllm", "hf")  # rollout.engine
PLACEMENTS = ("colocated", "servers")  # rollout.placement
SERVER_FAILURE_MODES = ("wait", "others", "stop")  # rollout.servers.on_failure
ADVANTAGE_MODES = ("grpo", "dr_grpo", "rloo", "none")  # algorithm.advantage
KL_KINDS = ("k1", "k2", "k3")  # algorithm.kl_estimator
AGG_MODES = ("token_mean", "seq_mean_token_mean", "seq_mean_token_sum_norm")  # algorithm.loss_agg
POLICY_LOSSES = ("ppo", "gspo", "cispo")  # algorithm.policy_loss
SEQ_CORRECTIONS = ("none", "truncate", "mask")  # the corrections the loss applies; algorithm.seq_correction adds auto
DYNAMIC_SAMPLING_MODES = ("off", "dapo", "filter")  # algorithm.dynamic_sampling
PRECISIONS = ("fp32", "bf16", "auto")  # learner.precision
LR_SCHEDULES = ("constant", "cosine")  # learner.lr_schedule
WANDB_MODES = ("disabled", "offline", "online")  # run.wandb
LOG_LEVELS = ("warning", "info", "debug")  # run.log_level (and GRPO_TRAIN_LOG_LEVEL)
USTAT_PROJECTIONS = ("o_proj", "down_proj")  # ustat.projection


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
                                  "sdpa, eager, flash_attention_2 or flex_attention (the last two pack a "
                                  "micro-batch into one row: learner.packing); vLLM picks its own")
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
class ServersConfig:
    urls: list[str] = _f([], "vLLM servers already running (http://host:port), each started with the command in "
                         "docs/gpu-and-clusters.md#rollout-servers; empty = the run starts `count` servers itself")
    count: int = _f(1, "servers the run starts when urls is empty: one `vllm serve` process each, on this node, "
                    "stopped when the run ends (also when it is killed)")
    devices: list[int] = _f([], "CUDA device ids of the servers the run starts, tensor_parallel_size consecutive ids "
                            "per server; the learner ranks must use other devices. Empty on CPU")
    timeout_s: float = _f(600.0, "deadline of every request to a server and every wait on one (start-up, a batch of "
                          "completions, a weight transfer; with max_staleness k >= 1, the learner's wait for the "
                          "groups due at a step, a request in flight having (k + 2) x timeout_s); the error names the "
                          "server")
    on_failure: str = _f("wait", "a server lost mid-run (its requests or weight transfer failed or ran past "
                         "timeout_s): wait (restart it if the run started it, else wait up to timeout_s for its URL "
                         "to answer again; then push it the learner's weights and send its requests again), others "
                         "(send its requests to the other servers and leave it out), stop (end the run naming it). "
                         "One learner process only: with several ranks a lost server stops the run")


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
    placement: str = _f("colocated", "colocated: a vLLM engine inside every training process, asleep during the "
                        "update; servers: the learner sends its prompts to vLLM servers (rollout.servers: started by "
                        "the run, or running at URLs) and pushes its weights to them after every update "
                        "(grpo_train/rollout/servers.py)")
    servers: ServersConfig = field(default_factory=ServersConfig,
                                   metadata={"doc": "the vLLM servers of placement servers"})
    max_staleness: int = _f(0, "k: the most weight versions a trained token may be behind the learner. 0: the "
                            "synchronous loop (a step generates and trains its own groups). k >= 1: asynchronous, "
                            "partial rollouts: (k + 1) x prompts_per_step groups stay in flight, a step trains the "
                            "groups due at it and pauses the rest, which go on under the new weights "
                            "(docs/algorithm.md#asynchronous-grpo; on rollout servers they go on generating through "
                            "the update). Needs rollout.engine vllm and an off-policy "
                            "correction (algorithm.seq_correction auto picks algorithm.tis_cap 2)")
    max_staleness_auto: bool = _f(False, "choose k every max_staleness_every steps: the (G, k) with the smallest "
                                  "predicted gradient MSE per second of wall time, k in 0 .. max_staleness_max "
                                  "(grpo_train/pace.py; docs/u-statistics.md#the-pace-chosen-for-you); YAML "
                                  "`max_staleness: auto` sets it, and max_staleness to max_staleness_max (the pool's "
                                  "capacity)")
    max_staleness_max: int = _f(2, "the largest k max_staleness auto may choose")
    max_staleness_every: int = _f(4, "steps between max_staleness auto's choices")
    max_staleness_margin: float = _f(0.1, "hysteresis of max_staleness auto: it leaves the (G, k) in force only "
                                     "for one predicted to cut the MSE per second by more than this fraction")


@dataclass
class RewardFunctionConfig:
    function: str = _f("", "module:function (a module on the Python path) or path/to/file.py:function (relative "
                       "to the working directory); called as fn(completion, problem, num_tokens, truncated, "
                       "**kwargs) -> float or None (see grpo_train/rewards/functions.py)")
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
    max_failure_fraction: float = _f(0.5, "stop the run when a reward function fails (raises, returns neither a "
                                     "number nor None, or runs past timeout_s) on more than this fraction of its "
                                     "calls in a training step (all ranks); 1.0 = never stop. Failed calls score 0 "
                                     "and are counted in reward/fn/<name>/error and /timeout")


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
    # DAPO: clip-higher 0.2 / 0.28, token-level mean, overlong filtering, dynamic sampling, no KL term. Its soft
    # overlong punishment is a reward (grpo_train.rewards.overlong_penalty in reward.functions), not a loss key.
    "dapo": {"algorithm.advantage": "grpo", "algorithm.policy_loss": "ppo", "algorithm.loss_agg": "token_mean",
             "algorithm.clip_eps": 0.2, "algorithm.clip_eps_high": 0.28, "algorithm.mask_truncated": True,
             "algorithm.dynamic_sampling": "dapo", "algorithm.kl_coef": 0.0},
    # GSPO: the clipped sequence ratio with the paper's clip range, averaged per sequence, no KL term.
    "gspo": {"algorithm.advantage": "grpo", "algorithm.policy_loss": "gspo",
             "algorithm.loss_agg": "seq_mean_token_mean", "algorithm.gspo_clip_eps": 3e-4,
             "algorithm.gspo_clip_eps_high": 4e-4, "algorithm.kl_coef": 0.0},
}


@dataclass
class LearnerConfig:
    zero_stage: int = _f(0, "DeepSpeed ZeRO stage 0-3 (0: no partitioning, our flat-buffer AdamW)")
    precision: str = _f("fp32", "fp32, bf16 (DeepSpeed mixed precision) or auto (bf16 where model.dtype auto "
                        "picks bfloat16)")
    lr: float = _f(1e-6, "peak learning rate")
    lr_schedule: str = _f("constant", "constant or cosine (after warmup)")
    warmup_steps: int = _f(0, "linear warmup, in optimizer steps")
    weight_decay: float = _f(0.0, "AdamW weight decay")
    adam_betas: list[float] = _f([0.9, 0.999], "AdamW betas")
    adam_eps: float = _f(1e-8, "AdamW epsilon")
    grad_clip: float = _f(1.0, "global gradient-norm clip (0 = off)")
    micro_batch_size: int = _f(8, "sequences per forward/backward pass (and per log-prob pass), unless "
                               "max_tokens_per_micro_batch is set")
    max_tokens_per_micro_batch: int = _f(0, "token budget of a pass instead of a fixed micro_batch_size (0 = off): "
                                         "rows sorted by length fill each pass up to this many padded tokens, "
                                         "rows x (longest prompt + longest completion); a longer row runs alone. "
                                         "Same gradient as any split (grpo_train/micro_batches.py)")
    fused_head: bool = _f(True, "log-probs through the output head a chunk of rows at a time, forward and "
                          "backward, where a pass's logits exceed one chunk: no [n, C, V] logits or gradient, for "
                          "one more head matmul in backward; false = the model's whole logits (faster where the "
                          "head is a large share of the model and memory allows; docs/benchmarks.md)")
    share_prompts: bool = _f(False, "run a prompt once per micro-batch for all its completions (exact; "
                             "ignored with gradient checkpointing; docs/algorithm.md)")
    packing: bool = _f(True, "padding-free passes: a micro-batch's sequences (prompt + completion) concatenated "
                       "into a few rows, position ids restarting at each sequence, attention confined to each "
                       "sequence (exact; docs/algorithm.md). Where learner.share_prompts is in force its pass "
                       "runs instead (its completions are already packed on their prompt's cache)")
    skip_zero_advantage: bool = _f(True, "do not run sequences whose advantage is 0 through the update when "
                                   "kl_coef = 0: their loss and gradient are exactly 0 (exact); train/entropy, "
                                   "ratio and clip fractions are then over the trained sequences, "
                                   "train/trained_seq_frac says how many")
    compile: bool = _f(False, "torch.compile the policy's and the reference model's decoder-layer parts that run "
                       "as many small kernels (MLP, norms, eager attention); the first passes compile, ~10 s "
                       "(not with ZeRO-3; docs/algorithm.md)")
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
    preempt_grace_s: float = _f(25.0, "after SIGTERM or SIGUSR1 (preemption, a time limit), the seconds the run has "
                                "to stop at a checkpoint: the step in flight is finished if its update and a save fit, "
                                "else abandoned; exit code 128 + the signal (143, 138). 25 s: Slurm's SIGKILL comes "
                                "30 s after its SIGTERM by default (docs/gpu-and-clusters.md#preemption-and-the-time-"
                                "limit)")
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
    """Whether the run keeps the U-statistic monitor (asked for, or needed by group_size_auto or by
    rollout.max_staleness auto, whose quality side is the monitor's constants)."""
    return cfg.ustat.enabled or cfg.algorithm.group_size_auto or cfg.rollout.max_staleness_auto


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
