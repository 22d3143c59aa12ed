"""Held-out evaluation: greedy accuracy, pass@k / mean@k, per-subject and per-level breakdowns.

Used by the training loop (before, during and after training: `evaluate`) and by `grpo-eval` (`evaluate_model`),
with the same prompt templates and verifier as training.

pass@k uses the unbiased estimator of Chen et al. (2021, "Evaluating Large Language Models Trained on
Code", eq. 1): with n samples of which c are correct, pass@k = 1 - C(n - c, k) / C(n, k).
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from grpo_train.config import Config, ConfigError, RewardConfig, load_config, source_kind
from grpo_train.data import Problem
from grpo_train.distributed import global_means
from grpo_train.rewards.failures import FailureReports
from grpo_train.rewards.functions import RewardFunction, reward_functions
from grpo_train.rewards.scoring import verify
from grpo_train.rewards.workers import FunctionScore, VerifierPool, function_errors, function_sums, veto_counts
from grpo_train.rollout import SamplingSpec
from grpo_train.rounds import RolloutTools


def pass_at_k(n: int, c: int, k: int) -> float:
    """Probability that at least one of k samples drawn without replacement from n (c correct) is correct."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n, got n={n} c={c} k={k}")
    if n - c < k:
        return 1.0
    # 1 - prod_{i = n-c+1}^{n} (1 - k / i): the product form avoids huge binomials.
    return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


@dataclass
class EvalItem:
    """One problem's evaluation: its greedy completion and, with k > 1, its sampled completions."""

    problem: Problem
    greedy_text: str
    greedy_correct: bool
    greedy_status: str
    greedy_answer: str | None
    truncated: bool
    completion_tokens: int
    samples_correct: list[bool]
    functions: tuple[FunctionScore, ...] = ()  # the pool's reward functions on the greedy completion
    greedy_rule: str | None = None  # the verifier's rule that refused the greedy completion (verifier/rules.py)


def run_eval(engine, tokenizer, renderer, pool: VerifierPool, problems: list[Problem], reward: RewardConfig,
             max_tokens: int, k: int = 1, temperature: float = 1.0, seed: int = 0) -> list[EvalItem]:
    """Greedy decoding for accuracy, plus k samples per problem at `temperature` when k > 1."""
    if not problems:
        return []
    prompts = [renderer.token_ids(p) for p in problems]
    greedy = engine.generate(prompts, SamplingSpec(n=1, temperature=0.0, max_tokens=max_tokens, seed=seed))
    texts, scores = verify(pool, tokenizer, greedy, problems, reward)
    sampled: list[list[bool]] = [[] for _ in problems]
    if k > 1:
        rollouts = engine.generate(prompts, SamplingSpec(n=k, temperature=temperature, max_tokens=max_tokens,
                                                         seed=seed + 1))
        _, sample_scores = verify(pool, tokenizer, rollouts, problems, reward)
        for r, s in zip(rollouts, sample_scores, strict=True):
            sampled[r.prompt_index].append(s.correct)
    return [EvalItem(problem=p, greedy_text=text, greedy_correct=s.correct, greedy_status=s.status,
                     greedy_answer=s.answer, truncated=r.truncated, completion_tokens=len(r.completion_token_ids),
                     samples_correct=sampled[i], functions=s.functions, greedy_rule=s.rule)
            for i, (p, r, text, s) in enumerate(zip(problems, greedy, texts, scores, strict=True))]


def evaluate(tools: RolloutTools, problems: list[Problem], cfg: Config,
             failures: FailureReports) -> dict[str, float]:
    """The training run's held-out eval (before, during and after training): greedy accuracy on the held-out problems
    (none with data.kind none: no verifier scores them), each engine decoding its part and each rank scoring its own
    share, and the reward functions' means, over all ranks; prints each function's first failure. The engine's times
    of the eval are dropped (engine.take_times): its requests are not a step's rollouts."""
    ranks = tools.engine_ranks
    items = ranks.share(run_eval(tools.engine, tools.tokenizer, tools.renderer, tools.verifier,
                                 ranks.prompts(problems), RewardConfig(), cfg.rollout.max_tokens))
    sums = {
        **function_sums([i.functions for i in items], tools.verifier.functions, "eval/fn/"),
        "eval/truncated": (sum(i.truncated for i in items), len(items)),
        "eval/completion_len": (sum(i.completion_tokens for i in items), len(items)),
    }
    if cfg.data.kind != "none":  # the verifier's judgement; with kind none only the reward functions score
        sums["eval/accuracy"] = (sum(i.greedy_correct for i in items), len(items))
        sums["eval/no_answer"] = (sum(i.greedy_status == "no_answer" for i in items), len(items))
        # Breakdowns (synthetic category, MATH level): the keys come from the whole set so every rank has them all.
        for key in ("category", "level"):
            for value in sorted({str(p.meta[key]) for p in problems if key in p.meta}):
                mine = [i.greedy_correct for i in items if str(i.problem.meta.get(key)) == value]
                sums[f"eval/{key}/{value}"] = (sum(mine), len(mine))
    metrics = global_means(sums)
    failures.report(function_errors([i.functions for i in items], tools.verifier.functions), "eval/fn/")
    tools.engine.take_times()
    return metrics


def summarise(items: list[EvalItem], k: int = 1, functions: Sequence[RewardFunction] = ()) -> dict[str, Any]:
    """Fractions under the names metrics.jsonl gives them under `eval/` (accuracy, no_answer, truncated, ...), the
    counts behind them under `counts`, pass@k / mean@k, breakdowns by subject / level / category, and each reward
    function's mean value (before its weight) and fractions of failed calls, as `eval/fn/` logs them, with the
    first error or timeout of each function that failed. "veto" gives, for each verifier rule that refused a greedy
    completion, the fraction it refused (verifier/rules.py's names, in their order; a rule absent refused none)."""
    n = len(items)
    counts = {
        "correct": sum(i.greedy_correct for i in items),
        "no_answer": sum(i.greedy_status == "no_answer" for i in items),
        "timeout": sum(i.greedy_status == "timeout" for i in items),
        "error": sum(i.greedy_status == "error" for i in items),
        "truncated": sum(i.truncated for i in items),
    }
    fraction = (lambda count: count / n) if n else (lambda count: None)  # JSON has no NaN
    summary: dict[str, Any] = {
        "n": n,
        "accuracy": fraction(counts["correct"]),
        **{key: fraction(counts[key]) for key in ("no_answer", "timeout", "error", "truncated")},
        "completion_len": fraction(sum(i.completion_tokens for i in items)),
        "counts": counts,
    }
    vetoes = {rule: count for rule, count in veto_counts(i.greedy_rule for i in items).items() if count}
    summary["veto"] = {rule: fraction(count) for rule, count in vetoes.items()}
    counts["veto"] = vetoes
    if k > 1 and n:
        for j in sorted({1, k} | {2 ** e for e in range(1, int(math.log2(k)) + 1)}):
            summary[f"pass@{j}"] = sum(pass_at_k(k, sum(i.samples_correct), j) for i in items) / n
        summary[f"mean@{k}"] = sum(sum(i.samples_correct) / k for i in items) / n
    for j, fn in enumerate(functions):
        scores = [i.functions[j] for i in items]
        summary[f"fn/{fn.name}"] = fraction(sum(f.value for f in scores if f.status == "ok"))
        for status in ("no_answer", "error", "timeout"):
            summary[f"fn/{fn.name}/{status}"] = fraction(sum(f.status == status for f in scores))
    if failures := function_errors([i.functions for i in items], functions):
        summary["fn_first_failure"] = failures  # {name: "error: ..."}: what to fix first
    for key in ("subject", "level", "category"):
        groups: dict[str, list[bool]] = defaultdict(list)
        for item in items:
            if key in item.problem.meta:
                groups[str(item.problem.meta[key])].append(item.greedy_correct)
        if groups:
            summary[f"by_{key}"] = {g: {"n": len(v), "accuracy": sum(v) / len(v)} for g, v in sorted(groups.items())}
    return summary


def item_record(item: EvalItem) -> dict[str, Any]:
    """One line of the completions jsonl."""
    return {"uid": item.problem.uid, "question": item.problem.question, "gold": item.problem.gold,
            "completion": item.greedy_text, "answer": item.greedy_answer, "correct": item.greedy_correct,
            "status": item.greedy_status, "rule": item.greedy_rule, "truncated": item.truncated,
            "samples_correct": item.samples_correct,
            **{f"meta_{k}": v for k, v in item.problem.meta.items()}}


# ----------------------------------------------------------------------------------------------------
# grpo-eval


def resolve_eval_model(model: str) -> str:
    """A run folder or checkpoint of grpo-train -> its exported HF weights; anything else as in training."""
    from grpo_train.checkpoint import HF_MODEL, CheckpointError, find_resumable
    from grpo_train.models import resolve_model

    path = Path(model)
    if (path / "checkpoints").is_dir():
        ckpt = find_resumable(path)
        if ckpt is None:
            raise CheckpointError(f"{path}: the run has no complete checkpoint")
        return str(ckpt / HF_MODEL)
    if (path / HF_MODEL).is_dir():
        return str(path / HF_MODEL)
    return resolve_model(model)


# grpo-eval's own defaults where no --config is given (longer than training's: evaluation is not the budget)
EVAL_DEFAULTS = {"data": "synthetic", "template": "chat", "num_shots": 3, "max_tokens": 512, "max_model_len": 2048}


def _data_overrides(data: str) -> list[str]:
    if data in ("synthetic", "gsm8k", "math"):
        return [f"data.source={data}", "data.eval_source="]
    kind = source_kind(data)
    if kind == "unknown":
        raise ConfigError(f"--data: {data!r} is not synthetic, gsm8k, math, a .jsonl / .parquet / .csv file, "
                          "a dataset folder or a hub id (owner/name)")
    if kind == "file" and not Path(data).is_file():
        raise ConfigError(f"--data: {data}: file not found")
    return [f"data.source={data}", f"data.eval_source={data}"]  # its rows (its test split) are the test set


def run_config_file(model: str | None) -> Path | None:
    """The config.yaml of the grpo-train run that `model` names (its folder, or one of its checkpoints), else None."""
    from grpo_train.checkpoint import CHECKPOINTS

    if model is None:
        return None
    path = Path(model)
    run_dir = path.parent.parent if path.parent.name == CHECKPOINTS else path  # runs/x/checkpoints/step-000010
    config = run_dir / "config.yaml"
    return config if (run_dir / CHECKPOINTS).is_dir() and config.is_file() else None


def eval_config(args) -> tuple[Config, str | None]:
    """The config grpo-eval runs with: --config's, else the run's own config.yaml when --model is a run folder (its
    model settings, length caps, template and held-out set), else grpo-eval's defaults; then the explicit flags.
    Returns it and the file it came from (None: the defaults)."""
    config = args.config or run_config_file(args.model)
    flags = {name: getattr(args, name) for name in EVAL_DEFAULTS}
    if config is None:
        flags = {name: EVAL_DEFAULTS[name] if value is None else value for name, value in flags.items()}
    overrides = [f"{key}={flags[name]}" for name, key in (
        ("template", "data.template"), ("num_shots", "data.num_shots"), ("max_tokens", "rollout.max_tokens"),
        ("max_model_len", "model.max_model_len")) if flags[name] is not None]
    if flags["data"] is not None:
        overrides += _data_overrides(flags["data"])
    if args.model is not None:
        overrides.append(f"model.name_or_path={args.model}")
    return load_config(config, overrides), None if config is None else str(config)


def evaluate_model(args) -> tuple[dict[str, Any], Path]:
    """`grpo-eval`: evaluate, write completions.jsonl and summary.json; returns (summary, output folder)."""
    from rich.progress import Progress
    from transformers import AutoTokenizer

    from grpo_train.data import load_problems
    from grpo_train.prompts import PromptRenderer
    from grpo_train.rollout import make_engine

    cfg, config = eval_config(args)
    defaults = ", ".join(f"{key} {value}" for key, value in EVAL_DEFAULTS.items())
    which = config if args.config else f"{config}, the run's own" if config else f"grpo-eval's defaults ({defaults})"
    print(f"grpo-eval: config {which}; the flags given override it", flush=True)
    model_path = resolve_eval_model(cfg.model.name_or_path)
    cfg = replace(cfg, model=replace(cfg.model, name_or_path=model_path))
    n = args.n if args.n is not None else (cfg.run.eval_size if config else 200)
    problems = load_problems(cfg.data, "test", n=n or None)
    test_source = cfg.data.eval_source or cfg.data.source  # where load_problems took the test split from
    model_name, data_name = Path(args.model or cfg.model.name_or_path).name, Path(test_source).stem
    out = Path(args.out or f"runs/eval-{model_name}-{data_name}")
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    renderer = PromptRenderer(tokenizer, cfg.data)
    engine = make_engine(cfg, seed=args.seed)
    items: list[EvalItem] = []
    chunk = 64  # progress granularity; vLLM batches within each chunk
    functions = reward_functions(cfg.reward)  # a training config's reward functions are scored too
    with VerifierPool(num_workers=cfg.reward.num_workers, timeout_s=cfg.reward.timeout_s,
                      functions=functions) as pool, Progress() as bar:
        task = bar.add_task(f"eval {len(problems)} problems", total=len(problems))
        for start in range(0, len(problems), chunk):
            part = problems[start: start + chunk]
            items += run_eval(engine, tokenizer, renderer, pool, part, RewardConfig(), cfg.rollout.max_tokens, k=args.k,
                              temperature=args.temperature, seed=args.seed + start)
            bar.advance(task, len(part))
    engine.close()
    summary = {"model": args.model or model_path, "data": test_source,
               "template": cfg.data.template_file or cfg.data.template,
               "config": config, **summarise(items, args.k, functions)}
    with open(out / "completions.jsonl", "w") as f:
        for item in items:
            f.write(json.dumps(item_record(item)) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary, out
