"""A step's metrics row and its samples: what the loop logs at step 8 (grpo_train/trainer.py).

    record = StepRecord(group_size, first, sampled, update_stats, seconds, ...)
    metrics = step_metrics(cfg, record, functions, world, step)     # averaged (or maxed) over all ranks
    logger.samples(step, sample_rows(drawn, renderer, functions))  # samples.jsonl's rows

A step's records: `first` is the round of the step's own prompts; `drawn` every rollout the step drew (the first
round and dynamic sampling's extra rounds), which the logged rewards and lengths describe; `trained` the groups the
update trains on (with dynamic sampling, the drawn groups with mixed rewards; else the first round). Without dynamic
sampling the three are one round. docs/metrics.md defines every key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grpo_train import algorithms
from grpo_train.config import Config
from grpo_train.distributed import all_reduce_max, global_means
from grpo_train.dynamic_sampling import Round, Sampled
from grpo_train.prompts import PromptRenderer
from grpo_train.rewards.workers import function_sums, function_values, veto_counts
from grpo_train.rollout import Phase, staleness


@dataclass
class StepRecord:
    """What one step produced, from which its metrics row is made (`step_metrics`)."""

    group_size: int  # G of this step
    first: Round  # the step's own prompts' round (its rewards give the zero-variance fraction)
    sampled: Sampled  # dynamic sampling's outcome: kept (trained), drawn (the logged rewards, statuses and lengths)
    update_stats: dict[str, float]  # Learner.update's statistics, already over all ranks
    seconds: dict[str, float]  # perf/<phase>_s: rollout, reward, logprobs, update, sync, step
    sync_gap: float | None  # train/sync_logprob_max_diff, on the steps that check it
    ustat: dict[str, float]  # the U-statistic monitor's metrics (empty without it)
    memory_gib: dict[str, float]  # this rank's per-phase peak memory (memory/<phase>_gib)
    skipped_steps_total: int  # optimizer steps skipped for non-finite gradients, so far
    phase: Phase | None = None  # the rollout pool's generation phase (rollout.max_staleness >= 1)
    engine_times: dict[str, float] = field(default_factory=dict)  # engine.take_times() (rollout servers' times)


def step_metrics(cfg: Config, record: StepRecord, functions: list, world: int, step: int) -> dict[str, float]:
    """The step's metrics row, averaged (or maxed) over all ranks; docs/metrics.md defines each."""
    drawn = record.sampled.drawn
    lengths = [len(r.completion_token_ids) for r in drawn.rollouts]
    n_tokens, n = sum(lengths), len(drawn.scores)
    seconds = record.seconds
    # The verifier's accuracy and statuses as fractions of the completions, like eval/no_answer (docs/metrics.md);
    # with data.kind none no verifier scores, and they are not logged.
    # reward/veto/<rule>: the fraction each verifier rule refused (with accuracy, timeout and error they sum to 1).
    verified = {} if cfg.data.kind == "none" else {
        "reward/accuracy": (sum(s.correct for s in drawn.scores), n),
        **{f"reward/{status}": (sum(s.status == status for s in drawn.scores), n)
           for status in ("no_answer", "timeout", "error")},
        **{f"reward/veto/{rule}": (count, n) for rule, count in veto_counts(s.rule for s in drawn.scores).items()}}
    zero_variance = float(algorithms.zero_variance_fraction(record.first.rewards, record.group_size))
    metrics = global_means({
        "reward/mean": (float(drawn.rewards.sum()), n),
        "reward/sq": (float((drawn.rewards**2).sum()), n),
        **verified,
        **function_sums([s.functions for s in drawn.scores], functions, "reward/fn/"),
        "reward/zero_variance": (zero_variance, 1),  # fraction of the groups; every rank holds as many groups
        "train/completion_len_mean": (n_tokens, len(drawn.rollouts)),
        "train/truncated": (sum(r.truncated for r in drawn.rollouts), len(drawn.rollouts)),
        **({"train/sync_logprob_max_diff": (record.sync_gap, 1)} if record.sync_gap is not None else {}),
        **{f"perf/{phase}_s": (seconds[phase], 1) for phase in ("rollout", "reward", "logprobs", "update", "sync",
                                                                 "step")},
        "perf/rollout_tokens_per_s": (n_tokens / max(seconds["rollout"], 1e-9), 1),
    })
    metrics.update({f"train/{k}": v for k, v in record.update_stats.items()})
    metrics["reward/std"] = max(0.0, metrics.pop("reward/sq") - metrics["reward/mean"] ** 2) ** 0.5
    metrics["train/completion_len_max"] = all_reduce_max(max(lengths))
    metrics["train/skipped_steps_total"] = float(record.skipped_steps_total)
    metrics.update(record.ustat)
    metrics.update({name: all_reduce_max(gib) for name, gib in record.memory_gib.items()})
    if record.phase is not None:
        metrics.update(pool_metrics(record, step, cfg.rollout.max_staleness, cfg.rollout.placement == "colocated"))
    if record.engine_times:  # where the time went with rollout servers; the servers idle while the learner works
        metrics.update(global_means({
            **{name: (value, 1) for name, value in record.engine_times.items()},
            "perf/server_idle_s": (seconds["step"] - record.engine_times["perf/server_busy_s"], 1)}))
    sampled = record.sampled
    if cfg.algorithm.dynamic_sampling != "off":
        kept_groups = len(sampled.kept.problems) * (not sampled.placeholder)
        dynamic = global_means({"train/dynamic_extra_rollouts": (sampled.extra_rollouts, 1),
                                "train/dynamic_kept_groups": (kept_groups, 1),
                                "train/dynamic_rounds": (sampled.extra_rounds, 1)})
        dynamic["train/dynamic_extra_rollouts"] *= world  # sums over ranks, not means
        dynamic["train/dynamic_kept_groups"] *= world
        metrics.update(dynamic)
    return metrics


def pool_metrics(record: StepRecord, step: int, max_staleness: int, colocated: bool) -> dict[str, float]:
    """rollout/ metrics of the rollout pool (docs/metrics.md): the staleness of the trained tokens (versions behind
    the learner before this update, step - 1) with its histogram, the phase's work, and the colocated engine's idle
    time (the learner's phases; rollout servers: perf/server_idle_s). Collective."""
    trained = record.sampled.kept
    ages = staleness(trained.rollouts, step - 1)
    phase = record.phase
    metrics = global_means({
        "rollout/staleness_mean": (sum(ages), len(ages)),
        **{f"rollout/staleness_frac/{n}": (sum(a == n for a in ages), len(ages)) for n in range(max_staleness + 1)},
        "rollout/stale_token_frac": (sum(a > 0 for a in ages), len(ages)),
        "rollout/resumed": (phase.resumed, 1),
        "rollout/resumed_tokens": (phase.resumed_tokens, 1),
        "rollout/requests": (phase.requests, 1),
        "rollout/pool_groups": (phase.pool_groups, 1),
        "rollout/phase_tokens": (phase.tokens, 1),
        "rollout/engine_steps": (phase.engine_steps, 1),
        **({"perf/engine_idle_s": (record.seconds["step"] - phase.seconds, 1)} if colocated else {}),
    })
    metrics["rollout/staleness_max"] = all_reduce_max(max(ages, default=0))
    return metrics


def sample_rows(drawn: Round, renderer: PromptRenderer, functions: list) -> list[dict]:
    """samples.jsonl's rows for a step: every drawn completion with its prompt (as written and as the model saw it),
    reward, gold, extracted answer, status, the verifier's rule that refused it (None when not refused), reward
    functions' values and the problem's other fields."""
    problems = drawn.problems
    rendered = {i: renderer.text(problems[i]) for i in {r.prompt_index for r in drawn.rollouts}}  # as generated
    return [{"uid": problems[r.prompt_index].uid, "prompt": problems[r.prompt_index].question,
             "rendered_prompt": rendered[r.prompt_index], "completion": text, "reward": s.reward,
             "gold": problems[r.prompt_index].gold, "answer": s.answer, "status": s.status, "rule": s.rule,
             "functions": function_values(s.functions, functions), "meta": problems[r.prompt_index].meta}
            for r, text, s in zip(drawn.rollouts, drawn.texts, drawn.scores, strict=True)]
