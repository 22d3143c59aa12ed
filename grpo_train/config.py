"""Loading grpo_train's config: YAML files with dotted command-line overrides, presets, and validation.

A YAML file holds only what differs from the defaults (the typed tree in grpo_train/config_schema.py, whose names
are re-exported here). Every field carries a one-line doc, printed by `grpo-train --config F --explain`. Unknown
keys, wrong types and out-of-range values are errors that name the key path and where it was set (the file, or
the command-line override). Reading the YAML and the overrides into the typed tree: grpo_train/config_yaml.py.

    cfg = load_config("configs/tiny-cpu.yaml", ["algorithm.group_size=4", "run.seed=1"])
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from grpo_train.config_aliases import ALIASES, Alias, suggest_keys
from grpo_train.config_schema import (
    PRESETS,
    SYNTHETIC_CATEGORIES,
    AlgorithmConfig,
    Config,
    ConfigError,
    DataConfig,
    LearnerConfig,
    LoraConfig,
    ModelConfig,
    RewardConfig,
    RewardFunctionConfig,
    RolloutConfig,
    RunConfig,
    SyntheticConfig,
    UstatConfig,
    field_docs,
    get_key,
    group_size_candidates,
    rollouts_per_step,
    save_config,
    to_dict,
    to_yaml,
    ustat_monitor_on,
)
from grpo_train.config_yaml import Origin, build, leaf_keys, read_tree, set_dotted
from grpo_train.rewards.user_code import function_problems, template_problems

__all__ = [  # the schema's names, so that callers import everything config-related from here
    "PRESETS", "SYNTHETIC_CATEGORIES", "AlgorithmConfig", "Config", "ConfigError", "DataConfig", "LearnerConfig",
    "LoraConfig", "ModelConfig", "RewardConfig", "RewardFunctionConfig", "RolloutConfig", "RunConfig",
    "SyntheticConfig", "UstatConfig", "field_docs", "get_key", "group_size_candidates", "rollouts_per_step",
    "save_config", "to_dict", "to_yaml", "ustat_monitor_on",
    "Origin", "load_config", "validate", "read_tree", "apply_preset", "preset_report", "source_kind",
    "resolve_auto_precision", "resolve_seq_correction", "native_bf16", "cpu_has_native_bf16", "auto_precision",
    "truncated_sampling", "TRUNCATED_SAMPLING_REASON", "Alias", "ALIASES", "suggest_keys",
]


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
    "model.attn_implementation": ("sdpa", "eager", "flash_attention_2", "flex_attention"),
    "data.template": ("chat", "fewshot", "raw"),
    "data.kind": ("auto", "gsm8k", "math", "none"),
    "rollout.engine": ("vllm", "hf"),
    "rollout.placement": ("colocated", "servers"),
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


ASYNC_TIS_CAP = 2.0  # the token-level cap seq_correction auto picks with rollout.max_staleness >= 1 (Yao et al.'s C)

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
        ("rollout.max_staleness", r.max_staleness >= 0, "must be >= 0"),
        ("rollout.max_staleness", r.max_staleness == 0 or r.engine == "vllm",
         "needs rollout.engine vllm (the rollout pool pauses and resumes requests one at a time)"),
        # Tokens from older weights: the loss's ratio is against the learner's recomputed log-probs (the proximal
        # policy) and the behaviour weight pi_old / pi_sampler corrects for the sampler's older weights.
        ("rollout.max_staleness", r.max_staleness == 0 or a.tis_cap > 0.0 or a.seq_correction in ("truncate", "mask"),
         "needs an off-policy correction for the tokens older weights sampled: algorithm.tis_cap >= 1, "
         "algorithm.seq_correction truncate or mask, or seq_correction auto (which picks tis_cap 2 unless "
         "rollout.top_p / top_k truncate the sampling)"),
        # Rollout servers (grpo_train/rollout/servers.py; asynchronous: server_pool.py).
        ("rollout.placement", r.placement == "colocated" or r.engine == "vllm",
         "servers needs rollout.engine vllm (the servers are vLLM's own)"),
        ("rollout.servers.count", r.servers.count >= 1, "must be >= 1"),
        ("rollout.servers.urls", all(u.startswith(("http://", "https://")) for u in r.servers.urls),
         "must be http://host:port addresses of running vLLM servers"),
        ("rollout.servers.urls", len(set(r.servers.urls)) == len(r.servers.urls), "must not repeat a server"),
        ("rollout.servers.devices", not r.servers.devices
         or len(r.servers.devices) == r.servers.count * r.tensor_parallel_size,
         "must hold rollout.servers.count * rollout.tensor_parallel_size CUDA device ids (one per server and "
         "tensor-parallel rank), or be empty on CPU"),
        ("rollout.servers.devices", not (r.servers.devices and r.servers.urls),
         "applies to the servers the run starts: leave it empty with rollout.servers.urls"),
        ("rollout.servers.timeout_s", r.servers.timeout_s > 0.0, "must be > 0"),
        ("rollout.servers.on_failure", r.servers.on_failure in ("wait", "others", "stop"),
         "must be wait, others or stop"),
        ("rollout.servers.on_failure", r.servers.on_failure != "others" or max(len(r.servers.urls), r.servers.count)
         >= 2 or r.placement == "colocated", "needs two or more servers (rollout.servers.count or urls)"),
        ("reward.timeout_s", c.reward.timeout_s > 0.0, "must be > 0"),
        ("reward.num_workers", c.reward.num_workers >= 1, "must be >= 1"),
        ("reward.max_failure_fraction", 0.0 <= c.reward.max_failure_fraction <= 1.0, "must be in [0, 1]"),
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
        ("learner.max_tokens_per_micro_batch", lr.max_tokens_per_micro_batch >= 0, "must be >= 0 (0 = off)"),
        # The packed completions attend through a 4-D mask: flash attention takes none, flex only a block mask.
        ("learner.share_prompts", not (lr.share_prompts and c.model.attn_implementation in ("flash_attention_2",
                                                                                             "flex_attention")),
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
        ("run.preempt_grace_s", c.run.preempt_grace_s > 0.0, "must be > 0"),
        ("run.check_sync_every", c.run.check_sync_every >= 0, "must be >= 0"),
    ]


def validate(cfg: Config, origin: Origin | str = "<config>") -> None:
    """Raise ConfigError naming the first key whose value is out of range, and where it was set (for a check of
    several keys, the overrides of any key its message names)."""
    origin = Origin(origin) if isinstance(origin, str) else origin
    for key, problem in _ustat_problems(cfg):
        raise origin.error(key, problem)
    for key, allowed in _CHOICES.items():
        value = get_key(cfg, key)
        if value not in allowed:
            raise ConfigError(f"{origin.of(key)}: {key}: {value!r} is not one of {', '.join(allowed)}")
    for key, ok, requirement in _range_checks(cfg):
        if not ok:
            raise origin.error(key, f"{get_key(cfg, key)!r} {requirement}")
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


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (safe loading), apply `key=value` overrides and the preset, check types and ranges."""
    tree, origin = read_tree(path, overrides)
    apply_preset(tree, origin)
    cfg = resolve_seq_correction(resolve_auto_precision(build(Config, tree, "", origin)))
    if not cfg.run.output_dir:
        cfg.run.output_dir = f"runs/{Path(path).stem if path is not None else 'default'}"
    validate(cfg, origin)
    return cfg


# ----------------------------------------------------------------------------------------------------
# Presets: a published recipe's coupled keys, under the keys the user set


def apply_preset(tree: dict[str, Any], origin: Origin | None = None) -> tuple[list[str], list[str]]:
    """Set, in the plain tree, the keys of `algorithm.preset` that the tree does not set itself.

    Returns (keys taken from the preset, the preset's keys the tree set explicitly and keeps), both empty without
    a preset. The resolved config (saved as the run's config.yaml) then holds every value, so a saved config
    reloads to the same run whatever the preset table says later.
    """
    origin = origin or Origin()
    algorithm = tree.get("algorithm")
    name = algorithm.get("preset", "") if isinstance(algorithm, dict) else ""
    if not name:
        return [], []
    if name not in PRESETS:
        raise ConfigError(f"{origin.of('algorithm.preset')}: algorithm.preset: {name!r} is not one of "
                          f"{', '.join(PRESETS)}")
    explicit = set(leaf_keys(tree))
    taken = [key for key in PRESETS[name] if key not in explicit]
    for key in taken:
        set_dotted(tree, key, PRESETS[name][key], origin.file)
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
    see TRUNCATED_SAMPLING_REASON) or the token-level tis_cap is chosen; none otherwise. With rollout.max_staleness
    >= 1 auto is the token level: tis_cap ASYNC_TIS_CAP unless one is set."""
    a = cfg.algorithm
    if a.seq_correction == "auto" and cfg.rollout.max_staleness > 0:
        # Asynchronous: token-level truncated IS against the sampler's log-probs, AReaL's decoupled objective with a
        # cap (docs/algorithm.md#asynchronous-grpo).
        if a.tis_cap == 0.0 and not truncated_sampling(cfg.rollout):
            a.tis_cap = ASYNC_TIS_CAP
        a.seq_correction = "none"
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

