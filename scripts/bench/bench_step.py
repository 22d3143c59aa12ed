"""Benchmark: end-to-end GRPO step time of our trainer, its breakdown, the learner's MFU, and a profile.

    .venv/bin/python scripts/bench/bench_step.py                          # 2 warm-up + 5 measured steps, precision auto
    .venv/bin/python scripts/bench/bench_step.py --nproc 2 --out bench/step-2proc.json  # torchrun, 2 processes
    .venv/bin/python scripts/bench/bench_step.py --profile --warmup 1 --steps 1 --out bench/profile.json

Runs the trainer (`python -m grpo_train`, a subprocess) on the demo setting, configs/smollm2-arith-demo.yaml:
SmolLM2-135M-Instruct, synthetic arithmetic with the 3-shot chat prompt, 8 prompts x G = 8 completions of at most 48
tokens per step, vLLM-CPU rollouts, DeepSpeed learner (ZeRO stage 0 with FlatAdamW, eager attention, micro-batches of 32
with the prompt shared by its completions packed on top of it, torch.compile). Three changes from the demo, shared with
scripts/bench/bench_trl.py so that both trainers do the same work: the KL term is on (`--kl-coef`, K3, default 0.04: the
reference model's forward pass is part of a step, and no zero-advantage row is skipped), the lr is constant (as TRL's),
and `--precision` sets the learner's precision and the rollouts' (by default what the demo's `auto` picks: bf16 where
bf16 matmuls are native, else fp32). No eval, no samples; the final checkpoint is written after the last step, outside
the step times.

Reports, over the steps after the warm-up: the median step time (`perf/step_s` of metrics.jsonl) and its breakdown
(rollout, reward, old/ref logprobs, update, weight sync); and, for one process, the learner's model FLOPs
utilisation, MFU = 6 * trainable params * useful tokens / update time / peak. Useful tokens are the tokens the
update computes, without padding: completion tokens (`train/completion_len_mean` * rollouts) plus prompt tokens,
counted once per micro-batch per distinct prompt with learner.share_prompts (once per completion without it),
from replaying the seeded prompt order (the same sampler and renderer as the trainer). The peak is the machine's
matmul rate measured in this run: 2048 x 2048 matmuls in the learner's dtype on 2 torch threads, best of three 1 s
windows, before and after the training run (the other dtype is only probed at 512 x 512: a bf16 matmul without
native bf16 support runs at ~1 GFLOP/s); the higher of the two is used, since other jobs on the machine can
only slow it down (under such load the MFU is not meaningful). 6 * params * tokens counts the output head (tied
to the embedding: 28 M of SmolLM2's 135 M parameters) on every token, while the learner projects only the
completion positions onto the vocabulary, so that MFU flatters the update; a second figure counts the head on
completion tokens only. As a yardstick for what the model itself allows on this machine, a plain PyTorch training
step of the same model is timed after the run (scripts/bench/plain_yardstick.py): the learner's dtype and attention
kernel (model.attn_implementation: the demo's eager, compiled as the learner compiles it where learner.compile is
on), one micro-batch's rows of the demo's real rendered prompts (learner.micro_batch_size rows in the trainer's seeded
order, each prompt once per completion) each followed by the run's mean completion length in random tokens, forward,
backward and a fused torch AdamW step, no DeepSpeed. Its rate is reported with and without the optimizer step, and
the update's against both (`update vs plain step`, `update vs plain forward+backward`), and the seconds each takes
per completion trained (the same work: the rates count the tokens each computes, and the update runs a prompt once
per micro-batch where the plain step runs it in every row). Since the run's update and that plain step are timed
minutes apart on a machine whose speed drifts, the learner's update is then timed once more in this process, in
turns with the plain step on the same prompts and completion tokens (`paired_yardstick`: `--rounds` rounds, 5 by
default, the median of each round's ratio of rates): the figure to read for the update against the plain step.

`--profile` runs the trainer under py-spy (Python stacks, 20 samples/s) and reports each phase's share of the
loop's samples and its most frequent innermost functions. Writes bench/step.json (or `--out`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parent))  # plain_yardstick, beside this script

from plain_yardstick import (  # noqa: E402
    PEAK_THREADS,
    best_plain_yardstick,
    paired_yardstick,
    prompt_tokens_computed,
    rendered_prompts,
    yardstick_text,
)

BENCH = ROOT / "bench"
DEMO_CONFIG = ROOT / "configs" / "smollm2-arith-demo.yaml"
OUT = BENCH / "step.json"
PHASES = ("rollout_s", "reward_s", "logprobs_s", "update_s", "sync_s")  # the parts of perf/step_s, in step order
ROLLOUT_DTYPE = {"bf16": "bfloat16", "fp32": "float32"}
PAIRED_ROUNDS = 5  # the update and the plain step in turns: ~40 s a round on the slowest 2-core kind (fp32)
PROFILE_RATE_HZ = 20  # py-spy samples per second: enough for phase shares, little load on the 2 cores


# ----------------------------------------------------------------------------------------------------
# Running our trainer (also used by scripts/bench/bench_trl.py)


def concrete_precision(precision: str) -> str:
    """"auto" -> what the demo's `learner.precision: auto` picks on this machine."""
    from grpo_train.config import auto_precision

    return auto_precision()[1] if precision == "auto" else precision


def bench_overrides(run_dir: Path, total_steps: int, precision: str, kl_coef: float,
                    prompts_per_step: int = 0, extra: tuple[str, ...] = ()) -> list[str]:
    """Dotted overrides of the demo config for a benchmark run: no eval, no samples, only the steps
    (`prompts_per_step` > 0 replaces the demo's 8 prompts per step); `extra` last (e.g. ustat.enabled=true)."""
    smaller = [f"algorithm.prompts_per_step={prompts_per_step}"] if prompts_per_step else []
    return [*smaller, *extra,
        f"run.output_dir={run_dir}",
        f"run.steps={total_steps}",
        "run.eval_size=0",
        "run.eval_every=0",
        "run.samples_every=0",
        "run.checkpoint_every=0",
        f"algorithm.kl_coef={kl_coef}",
        "algorithm.seq_correction=none",  # as TRL's side (its correction would add an old-logprob pass)
        f"learner.precision={precision}",
        "learner.lr_schedule=constant",  # TRL's side runs a constant lr too; a cosine over 6 steps would differ
        f"model.dtype={ROLLOUT_DTYPE[precision]}",  # the rollouts in the learner's precision
    ]


def load_bench_config(run_dir: Path, total_steps: int, precision: str, kl_coef: float, prompts_per_step: int = 0,
                      extra: tuple[str, ...] = ()):
    from grpo_train.config import load_config

    return load_config(DEMO_CONFIG, bench_overrides(run_dir, total_steps, precision, kl_coef, prompts_per_step,
                                                    extra))


def run_ours(run_dir: Path, total_steps: int, precision: str, kl_coef: float, nproc: int = 1,
             profile: Path | None = None, prompts_per_step: int = 0, extra: tuple[str, ...] = ()) -> list[dict]:
    """Train `total_steps` steps in a fresh subprocess (torchrun with `nproc` processes when > 1); returns the
    metrics.jsonl rows of the steps (step >= 1). With `profile`, py-spy samples the run into that file.

    The console output goes to `<run_dir>.log`; on failure its tail is printed.
    """
    from grpo_train.metrics import read_jsonl

    shutil.rmtree(run_dir, ignore_errors=True)  # a fresh run, never a resumed or refused one
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    log_path = run_dir.with_suffix(".log")
    launcher = [sys.executable]
    if nproc > 1:
        launcher = [str(Path(sys.executable).parent / "torchrun"), "--standalone", f"--nproc-per-node={nproc}"]
    command = [*launcher, "-m", "grpo_train", "--config", str(DEMO_CONFIG),
               *bench_overrides(run_dir, total_steps, precision, kl_coef, prompts_per_step, extra)]
    if profile is not None:
        command = [str(Path(sys.executable).parent / "py-spy"), "record", "--format", "raw", "--rate",
                   str(PROFILE_RATE_HZ), "--output", str(profile), "--", *command]
    with log_path.open("w") as log:
        finished = subprocess.run(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    if finished.returncode != 0:
        print(tail(log_path), file=sys.stderr)
        raise RuntimeError(f"our trainer failed (exit {finished.returncode}); log: {log_path}")
    return [row for row in read_jsonl(run_dir / "metrics.jsonl") if row["step"] >= 1]


def tail(path: Path, lines: int = 30) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def after_warmup(rows: list[dict], warmup: int) -> list[dict]:
    return [row for row in rows if row["step"] > warmup]


# ----------------------------------------------------------------------------------------------------
# Useful tokens and MFU


def prompt_tokens_per_step(cfg, total_steps: int) -> list[int]:
    """Prompt tokens (without padding) the learner's update computes per step.

    Without learner.share_prompts every completion carries its prompt: G copies per prompt. With it, each
    distinct prompt runs once per micro-batch that holds any of its completions (rows are prompt-major and
    split in order; with the KL term on, no row is skipped). Replays the trainer's seeded prompt order
    (`rendered_prompts`), so the counts are exactly the trainer's.
    """
    return [prompt_tokens_computed([len(p) for p in prompts], cfg.algorithm.group_size, cfg.learner.micro_batch_size,
                                   cfg.learner.share_prompts) for prompts in rendered_prompts(cfg, total_steps)]


def trainable_params(model_path: str) -> int:
    """Parameters the full fine-tuning updates (tied embeddings counted once), from the config alone."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):  # shapes only: nothing is allocated or loaded
        model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_path))
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def matmul_peak_gflops(dtype_name: str, size: int = 2048, windows: int = 3, seconds: float = 1.0) -> float:
    """GFLOP/s of back-to-back size x size matmuls in `dtype_name` on PEAK_THREADS threads: the best of `windows`
    timed windows, since load from other jobs comes and goes and can only lower a window's rate."""
    import torch

    torch.set_num_threads(PEAK_THREADS)
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[dtype_name]
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    for _ in range(3):  # warm-up: thread pool, kernel selection (oneDNN / AMX for bf16)
        torch.mm(a, b)
    rates = []
    for _ in range(windows):
        count, started = 0, time.perf_counter()
        while time.perf_counter() - started < seconds:
            torch.mm(a, b)
            count += 1
        rates.append(2 * size**3 * count / (time.perf_counter() - started) / 1e9)
    return max(rates)


PROBE_SIZE = 512  # the other dtype's matmul: on CPUs without native bf16 a 2048^2 bf16 matmul takes over a minute


def measure_peaks(precision: str) -> dict[str, float]:
    """The learner's dtype at 2048^2 (the MFU's denominator); the other dtype only probed, at 512^2."""
    return {dtype: round(matmul_peak_gflops(dtype) if dtype == precision else
                         matmul_peak_gflops(dtype, size=PROBE_SIZE, windows=1), 1) for dtype in ("bf16", "fp32")}


def output_head_params(model_path: str) -> int:
    """vocab x hidden: the output head (tied to the input embedding in SmolLM2)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path)
    return config.vocab_size * config.hidden_size


def step_mfu(row: dict, update_flops: float, peak_gflops: float) -> float:
    return update_flops / 1e9 / row["perf/update_s"] / peak_gflops


# ----------------------------------------------------------------------------------------------------
# Profile: py-spy's samples of the trainer's Python stacks, summarised by phase and by innermost function

# The phase of a sample: the first of these (function, module) frames on its stack, outermost first.
PHASE_FRAMES = (("rollout", "generate", "grpo_train/rollout/engines.py"),
                ("reward", "verify", "grpo_train/evaluation.py"),
                ("logprobs", "logprobs", "grpo_train/learner.py"), ("update", "update", "grpo_train/learner.py"),
                ("sync", "load_weights", "grpo_train/rollout/engines.py"),
                ("checkpoint", "save_checkpoint", "grpo_train/checkpoint.py"))


def _frame(text: str) -> tuple[str, str]:
    """'name (path/to/file.py:123)' -> ('name', 'path/to/file.py')."""
    name, _, where = text.rpartition(" (")
    return name, where.rstrip(")").rpartition(":")[0]


def summarise_profile(raw: Path, top: int = 8) -> dict:
    """Share of the loop's samples per phase, and each phase's most frequent innermost functions."""
    phase_samples: dict[str, int] = {}
    leaves: dict[str, dict[str, int]] = {}
    outside = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        frames = [_frame(f) for f in stack.split(";")]
        if not any(name == "train" and path.endswith("grpo_train/trainer.py") for name, path in frames):
            outside += int(count)  # start-up and imports, before the loop
            continue
        # py-spy names methods "Class.method" (recent versions) or "method" (older ones)
        phase = next((label for name, path in frames for label, fn, module in PHASE_FRAMES
                      if name.rpartition(".")[2] == fn and path.endswith(module)), "other (loop)")
        phase_samples[phase] = phase_samples.get(phase, 0) + int(count)
        leaf = "{} ({})".format(*frames[-1])
        leaves.setdefault(phase, {})[leaf] = leaves.setdefault(phase, {}).get(leaf, 0) + int(count)
    loop = sum(phase_samples.values())
    return {
        "samples_in_loop": loop,
        "samples_outside_loop": outside,
        "phase_share": {k: round(v / loop, 3) for k, v in sorted(phase_samples.items(), key=lambda kv: -kv[1])},
        "top_functions": {phase: [[name, round(n / phase_samples[phase], 3)]
                                  for name, n in sorted(counts.items(), key=lambda kv: -kv[1])[:top]]
                          for phase, counts in leaves.items()},
    }


# ----------------------------------------------------------------------------------------------------
# Report


def summarise(rows: list[dict], cfg, warmup: int) -> dict:
    """Median step time and its breakdown over the steps after the warm-up."""
    rollouts = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
    measured = after_warmup(rows, warmup)
    step_s = median([row["perf/step_s"] for row in measured])
    breakdown = {phase: round(median([row[f"perf/{phase}"] for row in measured]), 3) for phase in PHASES}
    if all("perf/ustat_s" in row for row in measured):  # the U-statistic monitor's estimate (--ustat)
        breakdown["ustat_s"] = round(median([row["perf/ustat_s"] for row in measured]), 3)
    return {
        "median_step_s": round(step_s, 3),
        "step_s": [round(row["perf/step_s"], 3) for row in measured],
        "breakdown_median_s": breakdown,
        "breakdown_share_of_step": {phase: round(s / step_s, 3) for phase, s in breakdown.items()},
        "completion_tokens_per_step": [round(row["train/completion_len_mean"] * rollouts) for row in measured],
        "completion_len_mean": round(median([row["train/completion_len_mean"] for row in measured]), 1),
        # Means and totals as well: with rollout.max_staleness a step's rollout time depends on which groups are due
        # (some steps find them done), so the median of a few steps says little; per trained token it compares.
        "mean_step_s": round(sum(row["perf/step_s"] for row in measured) / len(measured), 3),
        "rollout_s_per_1k_trained_tokens": round(1000 * sum(row["perf/rollout_s"] for row in measured) / sum(
            row["train/completion_len_mean"] * rollouts for row in measured), 4),
    }


def summarise_mfu(rows: list[dict], prompt_tokens: list[int], cfg, params: int, head_params: int,
                  peak: float, warmup: int) -> dict:
    """The update's model FLOPs utilisation per measured step (one process: the token counts are one rank's)."""
    rollouts = cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
    measured = after_warmup(rows, warmup)
    completion_tokens = {row["step"]: round(row["train/completion_len_mean"] * rollouts) for row in measured}
    useful = {step: prompt_tokens[step - 1] + tokens for step, tokens in completion_tokens.items()}
    mfus = [step_mfu(row, 6 * params * useful[row["step"]], peak) for row in measured]
    # The learner projects only completion positions onto the vocabulary, and the embedding lookup is no matmul:
    # the head's FLOPs counted on completion tokens only.
    mfus_head_on_completions = [
        step_mfu(row, 6 * ((params - head_params) * useful[row["step"]] + head_params * completion_tokens[row["step"]]),
                 peak) for row in measured]
    return {
        "useful_tokens_per_step": [useful[row["step"]] for row in measured],
        "prompt_tokens_counted": "once per micro-batch per distinct prompt" if cfg.learner.share_prompts
        else "once per completion",
        "trainable_params": params,
        "update_tflop_per_step_median": round(6 * params * median(list(useful.values())) / 1e12, 3),
        "mfu_median": round(median(mfus), 4),
        "mfu_per_step": [round(m, 4) for m in mfus],
        "mfu_head_on_completions_median": round(median(mfus_head_on_completions), 4),
        "output_head_params": head_params,
        # The same work as the yardstick's rows: a row of it is one completion trained, with its prompt.
        "update_s_per_completion_median": round(median([row["perf/update_s"] for row in measured]) / rollouts, 4),
    }


def print_table(result: dict) -> None:
    s, setting = result["ours"], result["setting"]
    print(f"\nour GRPO step, {setting['model']}, {setting['prompts_per_step']} prompts x G={setting['group_size']}, "
          f"<= {setting['max_tokens']} tokens, {result['precision']} learner and rollouts, kl_coef "
          f"{result['kl_coef']}, {result['nproc']} process(es){', profiled' if 'profile' in result else ''}; "
          f"{len(s['step_s'])} steps after {result['warmup']} warm-up")
    print(f"  {'phase':<12}{'median s':>10}{'share':>8}")
    for phase, seconds in s["breakdown_median_s"].items():
        print(f"  {phase.removesuffix('_s'):<12}{seconds:>10.2f}{100 * s['breakdown_share_of_step'][phase]:>7.1f}%")
    print(f"  {'step':<12}{s['median_step_s']:>10.2f}")
    peaks = result["peak_gflops"]
    other = "fp32" if result["precision"] == "bf16" else "bf16"
    print(f"  matmul peak ({PEAK_THREADS} threads): {result['precision']} {peaks[result['precision']]:.0f} GFLOP/s at "
          f"2048^2 (higher of before {result['peak_gflops_before']} and after {result['peak_gflops_after']}); "
          f"{other} {peaks[other]:.1f} GFLOP/s at {PROBE_SIZE}^2")
    if "mfu" in result:
        m = result["mfu"]
        print(f"  learner MFU ({result['precision']} peak): {100 * m['mfu_median']:.1f}%  "
              f"({m['trainable_params'] / 1e6:.1f} M params, median {median(m['useful_tokens_per_step']):.0f} useful "
              f"tokens/step, prompts counted {m['prompt_tokens_counted']}, {s['completion_len_mean']} completion "
              f"tokens/rollout)")
        print(f"  learner MFU counting the output head on completion tokens only: "
              f"{100 * m['mfu_head_on_completions_median']:.1f}%")
        print(f"  {yardstick_text(m)}")
        if m["mfu_median"] > 1:
            print("  MFU > 100%: the update ran faster than the measured matmul peak (other jobs loading the "
                  "machine during the peak loop); rerun on a quiet machine")
    if "profile" in result:
        prof = result["profile"]
        print(f"  py-spy profile ({prof['samples_in_loop']} samples in the loop at {PROFILE_RATE_HZ} Hz): "
              + ", ".join(f"{k} {100 * v:.0f}%" for k, v in prof["phase_share"].items()))
        for phase, functions in prof["top_functions"].items():
            if prof["phase_share"][phase] >= 0.05:
                print(f"    {phase}: " + "; ".join(f"{name} {100 * share:.0f}%" for name, share in functions[:4]))
    print(f"  wall {result['wall_s']:.0f} s; load average {result['load_average_1min_before_after']}")


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=5, help="measured steps, after the warm-up")
    p.add_argument("--warmup", type=int, default=2, help="steps run first and left out of the figures")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16"), default="auto",
                   help="the learner's precision (the rollouts run in the same); auto: bf16 where bf16 "
                   "matmuls are native (grpo_train.config.auto_precision), else fp32, as the demo")
    p.add_argument("--kl-coef", type=float, default=0.04, help="beta of the K3 KL term (> 0: a reference model)")
    p.add_argument("--nproc", type=int, default=1, help="trainer processes (torchrun when > 1); MFU only for 1")
    p.add_argument("--profile", action="store_true",
                   help="sample the run with py-spy and summarise it (the step times then include its load)")
    p.add_argument("--prompts-per-step", type=int, default=0,
                   help="prompts per step instead of the demo's 8 (G stays 8); make bench uses 4 for the "
                   "2-process and profile runs")
    p.add_argument("--ustat", action="store_true",
                   help="with the U-statistic monitor (ustat.enabled=true): its hooks and sketches run in the "
                   "update, its estimate is the ustat phase")
    p.add_argument("--async", dest="max_staleness", type=int, default=0, metavar="K",
                   help="asynchronous, rollout.max_staleness=K with partial rollouts (token-level TIS, cap 2, as "
                   "seq_correction auto picks): make bench compares it with the synchronous step")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a dotted override of the demo config (repeatable), e.g. --set learner.zero_stage=0 to time "
                   "another learner setting against the default's step")
    p.add_argument("--no-paired", dest="paired", action="store_false",
                   help="skip timing the update and the plain step in turns after the run (~2 min; make bench times "
                   "it in the plain step's run only)")
    p.add_argument("--rounds", type=int, default=PAIRED_ROUNDS,
                   help="rounds of the update and the plain step timed in turns (their ratio's median is reported: "
                   "one round of 3 read 0.87x and the next 1.07x in one run on the 2-core EPYC without AVX-512)")
    p.add_argument("--out", type=Path, default=OUT)
    return p


def main() -> None:
    from grpo_train.cli import keep_freed_host_memory

    # Before torch allocates: the plain step's logits (hundreds of MiB) kept in the process between steps, as the
    # trainer keeps its smaller blocks (grpo-train sets the same for blocks up to 32 MiB), instead of page-faulted
    # in again every step (plain_yardstick.py's docstring).
    host_memory_kept = keep_freed_host_memory(never_mmap=True)
    args = parser().parse_args()
    if args.rounds < 1:
        parser().error(f"--rounds {args.rounds}: at least one round of the update and the plain step in turns")
    extra = (("ustat.enabled=true",) if args.ustat else ()) + (
        (f"rollout.max_staleness={args.max_staleness}", "algorithm.tis_cap=2") if args.max_staleness else ()) + tuple(
        args.overrides)
    args.precision = concrete_precision(args.precision)

    from grpo_train.models import resolve_model

    started = time.perf_counter()
    load_before = os.getloadavg()[0]  # other jobs on the 2 cores slow everything down; recorded for context
    total_steps = args.warmup + args.steps
    run_dir = BENCH / "runs" / args.out.stem
    cfg = load_bench_config(run_dir, total_steps, args.precision, args.kl_coef, args.prompts_per_step, extra)
    model_path = resolve_model(cfg.model.name_or_path)
    raw_profile = run_dir.with_suffix(".pyspy.txt") if args.profile else None
    peaks_before = measure_peaks(args.precision)
    rows = run_ours(run_dir, total_steps, args.precision, args.kl_coef, nproc=args.nproc, profile=raw_profile,
                    prompts_per_step=args.prompts_per_step, extra=extra)
    peaks_after = measure_peaks(args.precision)
    peaks = {dtype: max(peaks_before[dtype], peaks_after[dtype]) for dtype in peaks_before}
    result = {
        "setting": {"model": cfg.model.name_or_path, "prompts_per_step": cfg.algorithm.prompts_per_step,
                    "group_size": cfg.algorithm.group_size, "max_tokens": cfg.rollout.max_tokens,
                    "lr": cfg.learner.lr, "zero_stage": cfg.learner.zero_stage,
                    "micro_batch_size": cfg.learner.micro_batch_size, "share_prompts": cfg.learner.share_prompts,
                    "ustat": cfg.ustat.enabled, "max_staleness": cfg.rollout.max_staleness,
                    "config": str(DEMO_CONFIG.relative_to(ROOT))},
        "precision": args.precision,
        "kl_coef": args.kl_coef,
        "nproc": args.nproc,
        "warmup": args.warmup,
        "ours": summarise(rows, cfg, args.warmup),
        "peak_gflops": peaks,
        "peak_gflops_before": peaks_before,
        "peak_gflops_after": peaks_after,
        "run_dir": str(run_dir.relative_to(ROOT)),
        "cpus": os.cpu_count(),
        "host_memory_kept": host_memory_kept,
    }
    if args.nproc == 1:
        result["mfu"] = summarise_mfu(rows, prompt_tokens_per_step(cfg, total_steps), cfg,
                                      trainable_params(model_path), output_head_params(model_path),
                                      peaks[args.precision], args.warmup)
        completion_len = round(result["ours"]["completion_len_mean"])
        yardstick = best_plain_yardstick(cfg, model_path, args.precision, completion_len)
        if args.paired:
            yardstick["paired"] = paired_yardstick(cfg, model_path, args.precision, completion_len, yardstick["rows"],
                                                   args.rounds)
        for rate in ("forward_backward", "step"):
            yardstick[f"{rate}_fraction_of_peak"] = round(yardstick[f"{rate}_gflops"] / peaks[args.precision], 4)
        result["mfu"]["yardstick"] = yardstick
        result["mfu"]["learner_gflops_median"] = round(
            result["mfu"]["mfu_median"] * peaks[args.precision], 1)
    if raw_profile is not None:
        result["profile"] = summarise_profile(raw_profile)
    result["load_average_1min_before_after"] = [round(load_before, 1), round(os.getloadavg()[0], 1)]
    result["wall_s"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print_table(result)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
