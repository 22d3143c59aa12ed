"""The `auto` values: model.dtype and learner.precision for this machine, algorithm.seq_correction for the run's
sampler and learner. Each becomes a concrete value before validation, so that the run's saved config.yaml says
what ran."""

from __future__ import annotations

import re
from pathlib import Path

from grpo_train.config.checks import truncated_sampling
from grpo_train.config.schema import Config

ASYNC_TIS_CAP = 2.0  # the token-level cap seq_correction auto picks with rollout.max_staleness >= 1 (Yao et al.'s C)


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

    Without those (plain AVX-512 or AVX2) PyTorch converts bf16 to fp32 around every matmul, so that bf16 runs
    several times slower than fp32 there (docs/benchmarks.md).
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
