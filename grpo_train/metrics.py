"""Run outputs on rank 0: metrics.jsonl (always), samples.jsonl, prompts.txt (the first prompts as the model sees
them), a console line per step, a warning when no group's rewards differ for steps in a row (`NoSpreadWarning`),
the end-of-run eval and reward-function failure lines, and wandb; and what the libraries we run inside our process
(vLLM, DeepSpeed, transformers) may print (`configure_library_logs`).

wandb never needs a network or a key: `run.wandb` is `disabled` by default, `offline` writes a local run
that `wandb sync` can upload later, and only an explicit `online` talks to a server.

Metric names are namespaced: `train/`, `reward/`, `eval/`, `perf/`; every key is described in docs/metrics.md.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from grpo_train.config import LOG_LEVELS, Config, ConfigError, to_dict

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
PROMPTS_FILE = "prompts.txt"

# What the console line shows, in order, with its short label (each where the row has it: staleness, the mean
# weight versions the trained tokens are behind, with rollout.max_staleness >= 1).
_CONSOLE_KEYS = [
    ("reward/mean", "reward"), ("reward/accuracy", "acc"), ("train/loss", "loss"), ("train/kl", "kl"),
    ("train/grad_norm", "gnorm"), ("train/completion_len_mean", "len"), ("rollout/staleness_mean", "stale"),
    ("perf/step_s", "s/step"), ("eval/accuracy", "eval_acc"),
]


# Library warnings that every run of ours meets and that mean nothing is wrong, each explained in
# docs/troubleshooting.md. Dropped at run.log_level=warning; shown at info and debug.
KNOWN_HARMLESS = (
    "RotaryEmbedding: Failed to load weights",  # vLLM's weight reload: that layer has no checkpoint tensors
    "does not officially support disabling chunked prefill",  # off on CPU on purpose (rollout/engines.py)
    "The global random seed is set to",  # in-process vLLM seeds the global RNGs; our resume does not rely on them
    "Enforce eager set, disabling torch.compile",  # eager on CPU on purpose (rollout/engines.py)
    "Inductor compilation was disabled by user settings",  # the same choice, said again
    "Triton is not installed",  # CPU: vLLM's CPU kernels need no Triton ...
    "Triton is installed, but doesn't include CPU backend",  # ... whichever way it says so
    "Model Runner V2 requires Triton",  # CPU: the V1 model runner runs instead (GPUs run V2)
    "is not found in LD_PRELOAD",  # CPU: tcmalloc / libiomp speed-ups of vLLM's CPU backend, optional
    "doesn't allow to use `torch.set_num_threads`",  # CPU: vLLM pinned its threads; the call is ignored
    "Setting accelerator to CPU",  # DeepSpeed on a machine without GPUs
    # model.dtype bfloat16/float16 with fp32 weights coming in (a float32 checkpoint at start; an fp32 learner's
    # push at every sync, one line per tensor): the rounding to the sampler's dtype the config asks for
    "with dtype torch.float32 into parameter with dtype torch.bfloat16",
    "with dtype torch.float32 into parameter with dtype torch.float16",
    "Failed to create oneDNN linear",  # CPU without native bf16: vLLM's bf16 layers fall back to torch's matmul
    "accelerated GDN mamba backend 'none'",  # AVX512-BF16 CPUs: a model with no Mamba layers keeps no SSM cache
)


class _DropKnownHarmless(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in KNOWN_HARMLESS)


def library_log_level(level: str) -> str:
    """run.log_level, or GRPO_TRAIN_LOG_LEVEL when set; ConfigError for anything but warning, info, debug."""
    level = os.environ.get("GRPO_TRAIN_LOG_LEVEL", level).lower()
    if level not in LOG_LEVELS:
        raise ConfigError(f"GRPO_TRAIN_LOG_LEVEL: {level!r} is not one of {', '.join(LOG_LEVELS)}")
    return level


def configure_library_logs(level: str) -> str:
    """What vLLM, DeepSpeed and transformers print: warnings and up (less KNOWN_HARMLESS) at `warning`, everything
    from `info` or `debug`. GRPO_TRAIN_LOG_LEVEL overrides `level`. A user's own VLLM_LOGGING_LEVEL,
    VLLM_LOGGING_CONFIG_PATH or VLLM_CONFIGURE_LOGGING=1 leave vLLM's logging to vLLM. Call before vLLM and DeepSpeed
    are imported. Returns the level used.

    vLLM installs its own handler on the `vllm` logger when an engine starts, which would undo a filter set on it;
    with VLLM_CONFIGURE_LOGGING=0 it leaves the logger to us, and every vLLM module's records reach this handler.
    """
    level = library_log_level(level)
    numeric = getattr(logging, level.upper())
    quiet = numeric >= logging.WARNING
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
    if quiet:
        handler.addFilter(_DropKnownHarmless())
    users_own = {"VLLM_LOGGING_LEVEL", "VLLM_LOGGING_CONFIG_PATH"} & set(os.environ)
    if not users_own and os.environ.get("VLLM_CONFIGURE_LOGGING", "0") == "0":
        os.environ["VLLM_CONFIGURE_LOGGING"] = "0"
        vllm_logger = logging.getLogger("vllm")
        vllm_logger.handlers[:] = [handler]
        vllm_logger.setLevel(numeric)
        vllm_logger.propagate = False
    for name in ("DeepSpeed", "transformers"):
        logging.getLogger(name).setLevel(numeric)
        if quiet:
            logging.getLogger(name).addFilter(_DropKnownHarmless())
    if quiet:
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
        # vLLM's Triton shim touches a deprecated torch attribute at import; not ours to fix.
        warnings.filterwarnings("ignore", message=r"`torch.distributed.reduce_op` is deprecated",
                                category=FutureWarning)
    return level


def _clean(value: Any) -> Any:
    """JSON cannot hold NaN/inf: write them as null so every line stays parseable."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every row of a jsonl file. A last line that does not parse is dropped: a run killed while it was
    writing that line leaves it torn. An unparsable line anywhere else is corruption and raises."""
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in path.read_text().splitlines() if line.strip()]
    rows = [json.loads(line) for line in lines[:-1]]
    if lines:
        try:
            rows.append(json.loads(lines[-1]))
        except json.JSONDecodeError:
            warnings.warn(f"{path}: dropping a torn last line (the run was killed while writing it)", stacklevel=2)
    return rows


class MetricsLogger:
    """Writes one JSON line per step (and per eval) into the run folder; a no-op on ranks other than 0."""

    def __init__(self, cfg: Config, run_dir: Path, rank: int):
        self.active = rank == 0
        self.run_dir = run_dir
        # soft_wrap: one line per step whatever the terminal (a redirected log is not cut at 80 columns).
        # No markup or emoji codes: printed text holds user strings (a reward function's error, a run folder
        # named "sweep[lr=1e-4]") that rich would otherwise read as tags, drop, or fail on.
        self.console = Console(stderr=True, highlight=False, soft_wrap=True, markup=False, emoji=False)
        self.log_every = cfg.run.log_every
        self.wandb_run = None
        if self.active and cfg.run.wandb != "disabled":
            os.environ.setdefault("WANDB_SILENT", "true")
            try:
                import wandb
            except ImportError:
                raise ConfigError(f"run.wandb: {cfg.run.wandb} needs the wandb package, which is not installed: "
                                  "pip install 'grpo_train[wandb]' (or run.wandb=disabled)") from None

            self.wandb_run = wandb.init(mode=cfg.run.wandb, project=cfg.run.wandb_project, dir=str(run_dir),
                                        config=to_dict(cfg), resume="allow")

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines of steps after the checkpoint, which the resumed run will log again
        (step -1 on a fresh start: every line of an earlier attempt goes)."""
        if not self.active:
            return
        for name in (METRICS_FILE, SAMPLES_FILE):
            if not (self.run_dir / name).exists():
                continue
            kept = [row for row in read_jsonl(self.run_dir / name) if row.get("step", 0) <= step]
            tmp = self.run_dir / (name + ".tmp")
            tmp.write_text("".join(json.dumps(row) + "\n" for row in kept))
            os.replace(tmp, self.run_dir / name)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.active:
            return
        row = {"step": step, "time": time.time(), **{k: _clean(v) for k, v in metrics.items()}}
        with open(self.run_dir / METRICS_FILE, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)
        # Step 0 is the eval before training, which the trainer reports in its own line.
        if step > 0 and (step % self.log_every == 0 or any(k.startswith("eval/") for k in metrics)):
            shown = [f"{label} {metrics[key]:.4g}" for key, label in _CONSOLE_KEYS if key in metrics]
            self.console.print(Text.assemble((f"step {step}", "bold"), "  " + "  ".join(shown)))

    def samples(self, step: int, rows: list[dict[str, Any]]) -> None:
        if not self.active:
            return
        with open(self.run_dir / SAMPLES_FILE, "a") as f:
            for row in rows:
                f.write(json.dumps({"step": step, **row}) + "\n")

    def prompts(self, rendered: list[tuple[str, str, int]], how: str) -> None:
        """prompts.txt: (uid, prompt text, token count) of the first problems, the prompt exactly as the model sees
        it (system prompt, worked examples, template, chat markup); one console line names the file."""
        if not self.active:
            return
        path = self.run_dir / PROMPTS_FILE
        blocks = [f"# The prompt the model sees for the first {len(rendered)} training problems ({how}); the "
                  "completion follows the last character of each.\n"]
        blocks += [f"# ---- problem {uid}: {tokens} tokens ----\n{text}\n# ---- end of problem {uid}'s prompt ----\n"
                   for uid, text, tokens in rendered]
        path.write_text("\n".join(blocks))
        counts = sorted(tokens for _, _, tokens in rendered)
        span = f"{counts[0]}" if counts[0] == counts[-1] else f"{counts[0]}-{counts[-1]}"
        self.console.print(f"prompts: the first {len(rendered)} as the model sees them ({span} tokens) in {path}")

    def print(self, text: str) -> None:
        if self.active:
            self.console.print(text)

    def eval_summary(self, row: dict[str, Any]) -> str:
        """An eval row in a few words: its accuracy, or with data.kind none (no accuracy) the reward functions'
        means."""
        if "eval/accuracy" in row:
            return f"accuracy {row['eval/accuracy']:.3f}"
        return ", ".join(f"{key[len('eval/'):]} {value:.3f}" for key, value in sorted(row.items())
                         if key.startswith("eval/fn/") and key.count("/") == 2 and value is not None) or "no scores"

    def eval_report(self, num_problems: int) -> None:
        """Held-out accuracy before training (step 0) and at the last eval, with the breakdowns, from the
        metrics file (so a resumed run reports its whole history)."""
        if not self.active:
            return
        evals = {row["step"]: row for row in read_jsonl(self.run_dir / METRICS_FILE)
                 if any(key.startswith("eval/") for key in row)}
        if not evals:
            return
        last = evals[max(evals)]
        before = evals.get(0)
        if before is None:
            self.console.print(f"eval after training: {self.eval_summary(last)} on {num_problems}")
            return
        if "eval/accuracy" in before and "eval/accuracy" in last:
            gap = 100 * (last["eval/accuracy"] - before["eval/accuracy"])
            self.console.print(f"eval: accuracy {before['eval/accuracy']:.3f} before training, "
                               f"{last['eval/accuracy']:.3f} after step {max(evals)} ({gap:+.1f} points) "
                               f"on {num_problems}")
        else:
            self.console.print(f"eval: the reward functions' means before training -> after step {max(evals)} "
                               f"on {num_problems}")
        for key in sorted(k for k in last if k.count("/") == 2 and before.get(k) is not None and last[k] is not None):
            self.console.print(f"  {key[len('eval/'):]:28s} {before[key]:.3f} -> {last[key]:.3f}")

    def failure_report(self, limit: float) -> None:
        """One line per reward function that failed in the run (`failure_lines`), from the metrics file."""
        if self.active:
            for line in failure_lines(read_jsonl(self.run_dir / METRICS_FILE), limit):
                self.console.print(line)

    def close(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


NO_SPREAD_STEPS = 5  # consecutive steps without any group of mixed rewards before the console says so


class NoSpreadWarning:
    """One console line once NO_SPREAD_STEPS steps in a row had no group with any reward spread: in every group the G
    completions scored the same (reward/zero_variance 1; with dynamic sampling, no group kept either), so every
    advantage is 0 and the reward teaches nothing (loss and gradient 0, less any KL term). Once per such streak."""

    def __init__(self, logger: MetricsLogger, steps: int = NO_SPREAD_STEPS):
        self.logger, self.steps, self.streak = logger, steps, 0

    def check(self, step: int, metrics: dict[str, float]) -> None:
        spread = metrics["reward/zero_variance"] < 1.0 or bool(metrics.get("train/dynamic_kept_groups"))
        self.streak = 0 if spread else self.streak + 1
        if self.streak == self.steps:
            self.logger.print(
                f"warning: no reward spread in any group for {self.steps} steps (steps {step - self.steps + 1}-{step}, "
                f"reward/mean {metrics['reward/mean']:.4g}): each group's completions all score the same, so every "
                "advantage is 0 and nothing is learned. Check the reward function and the verifier on samples.jsonl, "
                "that the answer format the prompt asks for is the one the verifier reads, and rollout.temperature "
                "(too low: identical completions)")


def failure_lines(rows: list[dict[str, Any]], limit: float) -> list[str]:
    """For each reward function with failed calls in `rows` (metrics.jsonl): the fraction of its calls that failed
    in training (errors and timeouts; the mean over the steps' fractions, and the worst step's), under the limit
    `limit` (reward.max_failure_fraction) above which a step stops the run, and in eval."""
    def failed(row: dict[str, Any], prefix: str) -> float:
        return (row.get(f"{prefix}/error") or 0.0) + (row.get(f"{prefix}/timeout") or 0.0)

    def mean(values: list[float]) -> float:
        return sum(values) / len(values)

    names = {key.removeprefix(ns).removesuffix("/error"): None for row in rows for key in row
             for ns in ("reward/fn/", "eval/fn/") if key.startswith(ns) and key.endswith("/error")}
    lines = []
    for name in names:
        train = [row for row in rows if row.get(f"reward/fn/{name}/error") is not None]
        evals = [failed(row, f"eval/fn/{name}") for row in rows if row.get(f"eval/fn/{name}/error") is not None]
        train_failed = [failed(row, f"reward/fn/{name}") for row in train]
        if not any(train_failed) and not any(evals):
            continue
        parts = []
        if train:
            errors = mean([row[f"reward/fn/{name}/error"] for row in train])
            timeouts = mean([row.get(f"reward/fn/{name}/timeout") or 0.0 for row in train])
            parts.append(f"failed on {mean(train_failed):.1%} of its calls in training (errors {errors:.1%}, timeouts "
                         f"{timeouts:.1%}; worst step {max(train_failed):.1%}, the run stops above "
                         f"reward.max_failure_fraction {limit:g})")
        if evals:
            parts.append(f"{'failed on ' if not train else ''}{mean(evals):.1%} of its calls in eval")
        lines.append(f"reward function {name}: {' and '.join(parts)}")
    return lines
