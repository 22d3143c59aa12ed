"""Validation of a built config: every key's allowed values as data, and the checks that need code.

`CHOICES` (key -> the values it accepts) and `CHECKS` (rows of key, test, requirement) are tables: `validate`
runs each row in order and the first failing one is the error, naming its key and where it was set.
docs/configuration.md lists both tables ("Value checks", scripts/maint/config_docs.py). The checks whose message
depends on several values (group_size auto, dynamic sampling, the data sources, the user's reward functions) are
functions below the tables.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from grpo_train.config.schema import (
    ADVANTAGE_MODES,
    AGG_MODES,
    ATTN_IMPLEMENTATIONS,
    DATA_KINDS,
    DTYPES,
    DYNAMIC_SAMPLING_MODES,
    ENGINES,
    KL_KINDS,
    LOG_LEVELS,
    LR_SCHEDULES,
    PLACEMENTS,
    POLICY_LOSSES,
    PRECISIONS,
    PRESETS,
    SEQ_CORRECTIONS,
    SERVER_FAILURE_MODES,
    SYNTHETIC_CATEGORIES,
    TEMPLATES,
    USTAT_PROJECTIONS,
    WANDB_MODES,
    Config,
    ConfigError,
    DataConfig,
    RewardConfig,
    RolloutConfig,
    get_key,
    group_size_candidates,
    rollouts_per_step,
    ustat_monitor_on,
)
from grpo_train.config.yaml_io import Origin
from grpo_train.rewards.user_code import function_problems, template_problems

TRUNCATED_SAMPLING_REASON = (
    "vLLM's log-probs are then renormalised over the kept tokens and the learner's are not, so the correction would "
    "measure the kept probability mass instead of the sampler/learner mismatch; set rollout.top_p=1 and "
    "rollout.top_k=-1, or turn the correction off (algorithm.tis_cap=0, algorithm.seq_correction=none)")


def truncated_sampling(rollout: RolloutConfig) -> bool:
    """Whether the sampler draws from a top-p / top-k truncated distribution."""
    return rollout.top_p < 1.0 or rollout.top_k != -1


# ----------------------------------------------------------------------------------------------------
# The enumerated keys: each accepts one of its tuple's values (the tuples are spelled in schema.py).

CHOICES: dict[str, tuple[str, ...]] = {
    "model.dtype": DTYPES,
    "model.attn_implementation": ATTN_IMPLEMENTATIONS,
    "data.template": TEMPLATES,
    "data.kind": DATA_KINDS,
    "rollout.engine": ENGINES,
    "rollout.placement": PLACEMENTS,
    "algorithm.advantage": ADVANTAGE_MODES,
    "algorithm.kl_estimator": KL_KINDS,
    "algorithm.loss_agg": AGG_MODES,
    "algorithm.preset": ("", *PRESETS),
    "algorithm.policy_loss": POLICY_LOSSES,
    "algorithm.seq_correction": (*SEQ_CORRECTIONS, "auto"),
    # These two are checked first, with the monitor's and dynamic sampling's settings (_ustat_problems), whose
    # other checks read them; listed here so that the table holds every enumerated key.
    "algorithm.dynamic_sampling": DYNAMIC_SAMPLING_MODES,
    "ustat.projection": USTAT_PROJECTIONS,
    "learner.precision": PRECISIONS,
    "learner.lr_schedule": LR_SCHEDULES,
    "run.wandb": WANDB_MODES,
    "run.log_level": LOG_LEVELS,
}


# ----------------------------------------------------------------------------------------------------
# The bounds and the rules between keys: one row each. A failing row's error reads
# "<where it was set>: <key>: <the key's value> <requirement>".


@dataclass(frozen=True)
class Check:
    key: str  # the key the error names (a rule between keys names the one to change)
    test: Callable[[Config], bool]  # True when the config meets the requirement
    requirement: str  # what the key's value must be, following the value in the error


def _one_of(values: tuple[str, ...]) -> str:
    return f"{', '.join(values[:-1])} or {values[-1]}"


CHECKS: tuple[Check, ...] = (
    Check("model.max_model_len", lambda c: c.model.max_model_len >= 16, "must be >= 16"),
    Check("model.lora.rank", lambda c: c.model.lora.rank >= 0, "must be >= 0"),
    # Dropout draws a new mask in every pass: the update's log-probs would differ from the old-logprob pass's
    # (eval mode) and from the sampler's, so the importance ratio is not 1 where it must be (the learner turns
    # off any dropout the model itself has, for the same reason).
    Check("model.lora.dropout", lambda c: c.model.lora.dropout == 0.0,
          "must be 0: dropout makes the update pass compute other log-probs than the old-logprob pass and the "
          "sampler, so the importance ratio starts away from 1 (the learner turns the model's own dropout off)"),
    Check("data.num_shots", lambda c: c.data.num_shots >= 0, "must be >= 0"),
    Check("data.max_rows", lambda c: c.data.max_rows >= 0, "must be >= 0"),
    Check("data.synthetic.min_operand", lambda c: c.data.synthetic.min_operand >= 0, "must be >= 0"),
    Check("data.synthetic.max_operand", lambda c: c.data.synthetic.max_operand >= c.data.synthetic.min_operand,
          "must be >= data.synthetic.min_operand"),
    Check("data.synthetic.max_factor", lambda c: c.data.synthetic.max_factor >= 2, "must be >= 2"),
    Check("data.synthetic.num_train", lambda c: c.data.synthetic.num_train >= 1, "must be >= 1"),
    Check("data.synthetic.categories",
          lambda c: bool(c.data.synthetic.categories) and set(c.data.synthetic.categories) <= set(SYNTHETIC_CATEGORIES),
          f"must be a non-empty list of {', '.join(SYNTHETIC_CATEGORIES)}"),
    Check("data.synthetic.min_operand", lambda c: c.data.synthetic.min_operand <= c.data.synthetic.max_factor,
          "must be <= data.synthetic.max_factor (multiplication and division draw factors from that range)"),
    Check("rollout.temperature", lambda c: c.rollout.temperature >= 0.0, "must be >= 0"),
    Check("rollout.top_p", lambda c: 0.0 < c.rollout.top_p <= 1.0, "must be in (0, 1]"),
    Check("rollout.top_k", lambda c: c.rollout.top_k == -1 or c.rollout.top_k >= 1, "must be -1 or >= 1"),
    Check("rollout.max_tokens", lambda c: 1 <= c.rollout.max_tokens < c.model.max_model_len,
          "must be in [1, model.max_model_len)"),
    Check("rollout.gpu_memory_utilization", lambda c: 0.0 < c.rollout.gpu_memory_utilization <= 1.0,
          "must be in (0, 1]"),
    Check("rollout.tensor_parallel_size", lambda c: c.rollout.tensor_parallel_size >= 1, "must be >= 1"),
    Check("rollout.tensor_parallel_size", lambda c: c.rollout.tensor_parallel_size == 1 or c.rollout.engine == "vllm",
          "must be 1 with rollout.engine hf (one transformers model per rank)"),
    Check("rollout.cpu_kvcache_gb", lambda c: c.rollout.cpu_kvcache_gb > 0.0, "must be > 0"),
    Check("rollout.max_staleness", lambda c: c.rollout.max_staleness >= 0, "must be >= 0"),
    Check("rollout.max_staleness", lambda c: c.rollout.max_staleness == 0 or c.rollout.engine == "vllm",
          "needs rollout.engine vllm (the rollout pool pauses and resumes requests one at a time)"),
    # Tokens from older weights: the loss's ratio is against the learner's recomputed log-probs (the proximal
    # policy) and the behaviour weight pi_old / pi_sampler corrects for the sampler's older weights.
    Check("rollout.max_staleness",
          lambda c: (c.rollout.max_staleness == 0 or c.algorithm.tis_cap > 0.0
                     or c.algorithm.seq_correction in ("truncate", "mask")),
          "needs an off-policy correction for the tokens older weights sampled: algorithm.tis_cap >= 1, "
          "algorithm.seq_correction truncate or mask, or seq_correction auto (which picks tis_cap 2 unless "
          "rollout.top_p / top_k truncate the sampling)"),
    # rollout.max_staleness auto (grpo_train/pace.py): k in 0 .. max_staleness_max on a pool of that capacity.
    Check("rollout.max_staleness_max", lambda c: not c.rollout.max_staleness_auto or c.rollout.max_staleness_max >= 1,
          "must be >= 1 with rollout.max_staleness auto (k = 0 alone is the synchronous loop)"),
    Check("rollout.max_staleness_auto",
          lambda c: not c.rollout.max_staleness_auto or c.rollout.max_staleness == c.rollout.max_staleness_max,
          "sets rollout.max_staleness to rollout.max_staleness_max (the pool's capacity): write "
          "`max_staleness: auto` rather than a number beside it"),
    Check("rollout.max_staleness_auto",
          lambda c: not c.rollout.max_staleness_auto or c.rollout.placement == "colocated",
          "needs rollout.placement colocated (the step-time model of rollout servers is not checked against "
          "their measured steps yet; set rollout.max_staleness to a number)"),
    Check("rollout.max_staleness_every", lambda c: c.rollout.max_staleness_every >= 1, "must be >= 1"),
    Check("rollout.max_staleness_margin", lambda c: 0.0 <= c.rollout.max_staleness_margin < 1.0, "must be in [0, 1)"),
    # Rollout servers (grpo_train/rollout/servers.py; asynchronous: server_pool.py).
    Check("rollout.placement", lambda c: c.rollout.placement == "colocated" or c.rollout.engine == "vllm",
          "servers needs rollout.engine vllm (the servers are vLLM's own)"),
    Check("rollout.servers.count", lambda c: c.rollout.servers.count >= 1, "must be >= 1"),
    Check("rollout.servers.urls", lambda c: all(u.startswith(("http://", "https://")) for u in c.rollout.servers.urls),
          "must be http://host:port addresses of running vLLM servers"),
    Check("rollout.servers.urls", lambda c: len(set(c.rollout.servers.urls)) == len(c.rollout.servers.urls),
          "must not repeat a server"),
    Check("rollout.servers.devices",
          lambda c: (not c.rollout.servers.devices
                     or len(c.rollout.servers.devices) == c.rollout.servers.count * c.rollout.tensor_parallel_size),
          "must hold rollout.servers.count * rollout.tensor_parallel_size CUDA device ids (one per server and "
          "tensor-parallel rank), or be empty on CPU"),
    Check("rollout.servers.devices", lambda c: not (c.rollout.servers.devices and c.rollout.servers.urls),
          "applies to the servers the run starts: leave it empty with rollout.servers.urls"),
    Check("rollout.servers.timeout_s", lambda c: c.rollout.servers.timeout_s > 0.0, "must be > 0"),
    Check("rollout.servers.on_failure", lambda c: c.rollout.servers.on_failure in SERVER_FAILURE_MODES,
          f"must be {_one_of(SERVER_FAILURE_MODES)}"),
    Check("rollout.servers.on_failure",
          lambda c: (c.rollout.servers.on_failure != "others"
                     or max(len(c.rollout.servers.urls), c.rollout.servers.count) >= 2
                     or c.rollout.placement == "colocated"),
          "needs two or more servers (rollout.servers.count or urls)"),
    Check("reward.timeout_s", lambda c: c.reward.timeout_s > 0.0, "must be > 0"),
    Check("reward.num_workers", lambda c: c.reward.num_workers >= 1, "must be >= 1"),
    Check("reward.max_failure_fraction", lambda c: 0.0 <= c.reward.max_failure_fraction <= 1.0, "must be in [0, 1]"),
    Check("algorithm.group_size", lambda c: c.algorithm.group_size >= 2,
          "must be >= 2 (a group baseline needs two samples)"),
    Check("algorithm.prompts_per_step", lambda c: c.algorithm.prompts_per_step >= 1, "must be >= 1"),
    Check("algorithm.adv_eps", lambda c: c.algorithm.adv_eps >= 0.0, "must be >= 0"),
    Check("algorithm.clip_eps", lambda c: 0.0 < c.algorithm.clip_eps < 1.0, "must be in (0, 1)"),
    Check("algorithm.clip_eps_high", lambda c: c.algorithm.clip_eps_high >= 0.0,
          "must be >= 0 (0 = same as clip_eps)"),
    Check("algorithm.dual_clip", lambda c: c.algorithm.dual_clip == 0.0 or c.algorithm.dual_clip > 1.0,
          "must be 0 (off) or > 1"),
    Check("algorithm.tis_cap", lambda c: c.algorithm.tis_cap == 0.0 or c.algorithm.tis_cap >= 1.0,
          "must be 0 (off) or >= 1"),
    Check("algorithm.gspo_clip_eps", lambda c: 0.0 < c.algorithm.gspo_clip_eps < 1.0, "must be in (0, 1)"),
    Check("algorithm.gspo_clip_eps_high", lambda c: c.algorithm.gspo_clip_eps_high > 0.0, "must be > 0"),
    Check("algorithm.cispo_weight_cap", lambda c: c.algorithm.cispo_weight_cap >= 1.0, "must be >= 1"),
    Check("algorithm.dual_clip", lambda c: c.algorithm.dual_clip == 0.0 or c.algorithm.policy_loss == "ppo",
          "applies to policy_loss ppo only"),
    Check("algorithm.seq_correction_high", lambda c: c.algorithm.seq_correction_high >= 1.0, "must be >= 1"),
    Check("algorithm.seq_correction_low", lambda c: 0.0 <= c.algorithm.seq_correction_low < 1.0,
          "must be in [0, 1)"),
    Check("algorithm.seq_correction",
          lambda c: c.algorithm.seq_correction in ("none", "auto") or c.algorithm.tis_cap == 0.0,
          "and algorithm.tis_cap are exclusive: correct at token or at sequence level"),
    # vLLM reports log-probs renormalised over the tokens top-p / top-k keep, the learner over the whole
    # vocabulary: their ratio measures the kept probability mass (below 1 wherever the sampling truncates), not
    # the mismatch the correction is for.
    Check("algorithm.seq_correction",
          lambda c: c.algorithm.seq_correction in ("none", "auto") or not truncated_sampling(c.rollout),
          f"cannot be used with rollout.top_p < 1 or rollout.top_k set: {TRUNCATED_SAMPLING_REASON}"),
    Check("algorithm.tis_cap", lambda c: c.algorithm.tis_cap == 0.0 or not truncated_sampling(c.rollout),
          f"cannot be used with rollout.top_p < 1 or rollout.top_k set: {TRUNCATED_SAMPLING_REASON}"),
    Check("algorithm.kl_coef", lambda c: c.algorithm.kl_coef >= 0.0, "must be >= 0"),
    Check("algorithm.num_iterations", lambda c: c.algorithm.num_iterations >= 1, "must be >= 1"),
    Check("algorithm.mini_batches", lambda c: c.algorithm.mini_batches >= 1, "must be >= 1"),
    Check("learner.zero_stage", lambda c: 0 <= c.learner.zero_stage <= 3, "must be 0, 1, 2 or 3"),
    Check("learner.lr", lambda c: c.learner.lr > 0.0, "must be > 0"),
    Check("learner.warmup_steps", lambda c: c.learner.warmup_steps >= 0, "must be >= 0"),
    Check("learner.weight_decay", lambda c: c.learner.weight_decay >= 0.0, "must be >= 0"),
    Check("learner.adam_betas",
          lambda c: len(c.learner.adam_betas) == 2 and all(0.0 <= b < 1.0 for b in c.learner.adam_betas),
          "must be two numbers in [0, 1)"),
    Check("learner.adam_eps", lambda c: c.learner.adam_eps > 0.0, "must be > 0"),
    Check("learner.grad_clip", lambda c: c.learner.grad_clip >= 0.0, "must be >= 0"),
    Check("learner.micro_batch_size", lambda c: c.learner.micro_batch_size >= 1, "must be >= 1"),
    Check("learner.max_tokens_per_micro_batch", lambda c: c.learner.max_tokens_per_micro_batch >= 0,
          "must be >= 0 (0 = off)"),
    # The packed completions attend through a 4-D mask: flash attention takes none, flex only a block mask.
    Check("learner.share_prompts",
          lambda c: not (c.learner.share_prompts
                         and c.model.attn_implementation in ("flash_attention_2", "flex_attention")),
          "needs model.attn_implementation sdpa or eager"),
    # ZeRO-3 gathers each module's weights in forward hooks that torch.compile would trace into; DeepSpeed's
    # own engine.compile is the route there, not wired here.
    Check("learner.compile", lambda c: not (c.learner.compile and c.learner.zero_stage == 3),
          "is not supported with learner.zero_stage 3"),
    Check("run.steps", lambda c: c.run.steps >= 0, "must be >= 0"),
    Check("run.log_every", lambda c: c.run.log_every >= 1, "must be >= 1"),
    Check("run.samples_every", lambda c: c.run.samples_every >= 0, "must be >= 0"),
    Check("run.eval_every", lambda c: c.run.eval_every >= 0, "must be >= 0"),
    Check("run.eval_size", lambda c: c.run.eval_size >= 0, "must be >= 0"),
    Check("run.checkpoint_every", lambda c: c.run.checkpoint_every >= 0, "must be >= 0"),
    Check("run.keep_last", lambda c: c.run.keep_last >= 1, "must be >= 1"),
    Check("run.preempt_grace_s", lambda c: c.run.preempt_grace_s > 0.0, "must be > 0"),
    Check("run.check_sync_every", lambda c: c.run.check_sync_every >= 0, "must be >= 0"),
)


def validate(cfg: Config, origin: Origin | str = "<config>") -> None:
    """Raise ConfigError naming the first key whose value is out of range, and where it was set (for a check of
    several keys, the overrides of any key its message names)."""
    origin = Origin(origin) if isinstance(origin, str) else origin
    for key, problem in _ustat_problems(cfg):
        raise origin.error(key, problem)
    for key, allowed in CHOICES.items():
        value = get_key(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{origin.of(key)}: {key}: {value!r} is not one of {', '.join(allowed)}")
    for check in CHECKS:
        if not check.test(cfg):
            raise origin.error(check.key, f"{get_key(cfg, check.key)!r} {check.requirement}")
    a = cfg.algorithm
    if a.prompts_per_step * a.group_size % a.mini_batches:
        raise origin.error("algorithm.mini_batches", f"{a.mini_batches} must divide algorithm.prompts_per_step * "
                           f"algorithm.group_size = {a.prompts_per_step * a.group_size}")
    if cfg.run.overwrite and cfg.run.resume != "never":
        raise origin.error("run.overwrite", f"true cannot go with run.resume={cfg.run.resume} (resume continues the "
                           "run in output_dir, overwrite moves it aside): set one of them")
    problems = _data_problems(cfg.data, cfg.run.eval_size) + _reward_problems(cfg.reward)
    if problems:
        raise origin.error(*problems[0])


# ----------------------------------------------------------------------------------------------------
# Checks whose messages depend on several values: the U-statistic monitor, group_size auto, dynamic sampling.


def _ustat_problems(c: Config) -> list[tuple[str, str]]:
    """(key, what is wrong) for the monitor, group_size_auto and dynamic sampling settings."""
    a, u = c.algorithm, c.ustat
    problems = []
    if a.dynamic_sampling not in DYNAMIC_SAMPLING_MODES:
        problems.append(("algorithm.dynamic_sampling",
                         f"{a.dynamic_sampling!r} is not one of {', '.join(DYNAMIC_SAMPLING_MODES)}"))
    if a.dynamic_sampling_max_rounds < 0:
        problems.append(("algorithm.dynamic_sampling_max_rounds", "must be >= 0"))
    if a.dynamic_sampling == "dapo" and c.rollout.tensor_parallel_size > 1:
        # The ranks of one engine must submit the same requests; each rank decides alone whether it needs a round.
        problems.append(("algorithm.dynamic_sampling", "dapo needs rollout.tensor_parallel_size 1 (filter works "
                         "with any)"))
    if u.projection not in USTAT_PROJECTIONS:
        problems.append(("ustat.projection", f"{u.projection!r} is not one of {', '.join(USTAT_PROJECTIONS)}"))
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
        kind = source_kind(value) if value else ""
        if kind == "unknown":
            problems.append((key, f"{value!r} is not synthetic, gsm8k, math, a {' / '.join(_FILE_SUFFIXES)} file, "
                                  "a dataset folder or a hub id (owner/name)"))
        elif kind == "file" and not Path(value).is_file():
            problems.append((key, f"{value}: data file not found (relative paths are from {Path.cwd()})"))
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
