"""grpo_train's config: YAML files with dotted command-line overrides, presets, `auto` values and validation.

A YAML file holds only what differs from the defaults. Every field carries a one-line doc, printed by
`grpo-train --config F --explain`. Unknown keys, wrong types and out-of-range values are errors that name the key
path and where it was set (the file, or the command-line override). Import every config name from here; the
modules of this package:

    schema.py    the typed tree of every key, with defaults and docs; the choices of the enumerated keys; presets
    yaml_io.py   the YAML file and the overrides as a plain tree, where each value was set, the typed build
    aliases.py   TRL's and verl's names for our keys; the "did you mean" suggestions for an unknown key
    presets.py   a preset's keys set under the keys the user set
    auto.py      the `auto` values (precision for this machine, seq_correction for the run)
    checks.py    validation: the tables of choices and of (key, test, requirement) rows, and the checks in code

    cfg = load_config("configs/tiny-cpu.yaml", ["algorithm.group_size=4", "run.seed=1"])
"""

from __future__ import annotations

from pathlib import Path

from grpo_train.config.aliases import ALIASES, Alias, suggest_keys
from grpo_train.config.auto import (
    auto_precision,
    cpu_has_native_bf16,
    native_bf16,
    resolve_auto_precision,
    resolve_seq_correction,
)
from grpo_train.config.checks import (
    CHECKS,
    CHOICES,
    TRUNCATED_SAMPLING_REASON,
    Check,
    source_kind,
    truncated_sampling,
    validate,
)
from grpo_train.config.presets import apply_preset, preset_report
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
from grpo_train.config.yaml_io import Origin, build, read_tree

__all__ = [
    # schema.py: the tree, its accessors, the presets and the choices of the enumerated keys
    "PRESETS", "SYNTHETIC_CATEGORIES", "AlgorithmConfig", "Config", "ConfigError", "DataConfig", "LearnerConfig",
    "LoraConfig", "ModelConfig", "RewardConfig", "RewardFunctionConfig", "RolloutConfig", "RunConfig",
    "SyntheticConfig", "UstatConfig", "field_docs", "get_key", "group_size_candidates", "rollouts_per_step",
    "save_config", "to_dict", "to_yaml", "ustat_monitor_on",
    "ADVANTAGE_MODES", "AGG_MODES", "ATTN_IMPLEMENTATIONS", "DATA_KINDS", "DTYPES", "DYNAMIC_SAMPLING_MODES",
    "ENGINES", "KL_KINDS", "LOG_LEVELS", "LR_SCHEDULES", "PLACEMENTS", "POLICY_LOSSES", "PRECISIONS",
    "SEQ_CORRECTIONS", "SERVER_FAILURE_MODES", "TEMPLATES", "USTAT_PROJECTIONS", "WANDB_MODES",
    # reading, presets, auto values, validation
    "Origin", "read_tree", "load_config", "apply_preset", "preset_report",
    "resolve_auto_precision", "resolve_seq_correction", "native_bf16", "cpu_has_native_bf16", "auto_precision",
    "validate", "Check", "CHECKS", "CHOICES", "source_kind", "truncated_sampling", "TRUNCATED_SAMPLING_REASON",
    "Alias", "ALIASES", "suggest_keys",
]


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> Config:
    """Read a YAML config (safe loading), apply `key=value` overrides and the preset, check types and ranges."""
    tree, origin = read_tree(path, overrides)
    apply_preset(tree, origin)
    cfg = resolve_seq_correction(resolve_auto_precision(build(Config, tree, "", origin)))
    if not cfg.run.output_dir:
        cfg.run.output_dir = f"runs/{Path(path).stem if path is not None else 'default'}"
    validate(cfg, origin)
    return cfg
