"""The parts of a training step that are not the learner's update, called by the loop in grpo_train/trainer.py:

    first = roll_out_and_score(tools, engine_problems, group_size, seed)    # steps 2-3, and each dynamic round
    first, phase, reward_s = pooled_round(tools, pool, sampler, B, seed, step)  # the same, max_staleness >= 1
    metrics = step_metrics(cfg, record, functions, world, step)             # step 8: the metrics row

A step's records: `first` is the round of the step's own prompts; `drawn` every rollout the step drew (the first
round and dynamic sampling's extra rounds), which the logged rewards and lengths describe; `trained` the groups the
update trains on (with dynamic sampling, the drawn groups with mixed rewards; else the first round). Without dynamic
sampling the three are one round.

Also here: the reward functions' failures (printed once each, and a stop when one fails too often), the held-out
evaluation, the check of a weight sync, and the trainer's part of a checkpoint.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from grpo_train import algorithms
from grpo_train.config import AlgorithmConfig, Config, ConfigError, RewardConfig, RolloutConfig, to_dict
from grpo_train.data import Problem, PromptSampler
from grpo_train.distributed import all_reduce_max, global_means
from grpo_train.dynamic_sampling import Round, Sampled
from grpo_train.evaluation import run_eval, verify
from grpo_train.learner import Learner, make_update_batch
from grpo_train.metrics import MetricsLogger
from grpo_train.prompts import PromptRenderer
from grpo_train.rewards.pool import (
    VerifierPool,
    function_errors,
    function_failures,
    function_sums,
    function_values,
    veto_counts,
)
from grpo_train.rollout import EngineRanks, Phase, RolloutEngine, RolloutPool, SamplingSpec, rollout_seed, staleness
from grpo_train.ustat.monitor import UstatMonitor


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def trainer_state(step: int, sampler: PromptSampler, cfg: Config, monitor: UstatMonitor | None = None,
                  pool: RolloutPool | None = None) -> dict:
    """The trainer's part of a checkpoint (the learner adds its own counters): the step, the data position, the
    resolved config; with the monitor, its window and G, so a resumed run makes the same group_size auto choices;
    with the rollout pool, every rank's groups in flight (collective), so a resumed run goes on with them."""
    return checkpoint_state(step, sampler.state_dict(), cfg, monitor.state_dict() if monitor is not None else None,
                            pool.state_dict() if pool is not None else None)


def checkpoint_state(step: int, sampler: dict, cfg: Config, ustat: dict | None, pool: dict | None) -> dict:
    """`trainer_state` from the parts' states (also those taken earlier: grpo_train/preemption.py's StepStart);
    collective with a pool's state (this rank's)."""
    return {"step": step, "sampler": sampler, "config": to_dict(cfg), **({"ustat": ustat} if ustat is not None else {}),
            **({"pools": pool_states(pool)} if pool is not None else {})}


# ----------------------------------------------------------------------------------------------------
# Roll out and score one round


@dataclass(frozen=True)
class RolloutTools:
    """What rolling out and scoring a round needs, gathered once at set-up."""

    engine: RolloutEngine
    verifier: VerifierPool
    tokenizer: Any
    renderer: PromptRenderer
    engine_ranks: EngineRanks  # the ranks sharing this rank's engine
    rollout: RolloutConfig
    reward: RewardConfig
    max_prompt_tokens: int  # model.max_model_len - rollout.max_tokens


def roll_out_and_score(tools: RolloutTools, engine_problems: list[Problem], group_size: int,
                       seed: int) -> tuple[Round, float, float]:
    """The engine generates G completions for each of its prompts (every rank of a tensor-parallel engine submits
    the same requests); this rank keeps its share of the prompts with all their completions, decodes and scores
    them. Returns the round and the seconds spent generating and scoring."""
    prompt_ids = [tools.renderer.check_length(p, tools.max_prompt_tokens) for p in engine_problems]
    started = time.perf_counter()
    spec = SamplingSpec.from_config(tools.rollout, n=group_size, seed=seed)
    rollouts = tools.engine_ranks.share_rollouts(tools.engine.generate(prompt_ids, spec))  # prompt-major
    generated = time.perf_counter()
    scored = score_round(tools, tools.engine_ranks.share(engine_problems), rollouts)
    return scored, generated - started, time.perf_counter() - generated


def score_round(tools: RolloutTools, problems: list[Problem], rollouts: list) -> Round:
    """This rank's problems and their G completions each (prompt-major), decoded, verified and scored: a round."""
    texts, scores = verify(tools.verifier, tools.tokenizer, rollouts, problems, tools.reward)
    rewards = torch.tensor([s.reward for s in scores], dtype=torch.float32)  # [len(problems) * G]
    return Round(problems, rollouts, texts, scores, rewards)


def step_sizes(a: AlgorithmConfig, monitor: UstatMonitor | None, pool: RolloutPool | None, step: int,
               engines: int) -> tuple[int, int]:
    """(G, prompts per step over all ranks) of the groups trained at `step`: the config's, group_size auto's choice
    (the monitor's), or with a rollout pool the sizes the groups due at `step` were admitted with."""
    if pool is not None:
        group_size, groups = pool.sizes_at(step)
        return group_size, groups * engines
    if monitor is not None:
        return monitor.group_size, monitor.prompts_per_step
    return a.group_size, a.prompts_per_step


def pooled_round(tools: RolloutTools, pool: RolloutPool, sampler: PromptSampler, run_seed: int,
                 step: int) -> tuple[Round, Phase, float]:
    """Steps 1-3 with rollout.max_staleness >= 1: a batch of new prompts joins the pool for each free step of
    deadlines (k + 1 batches at the first step, then one per step; each of that step's B prompts per engine), the
    step's generation phase runs, and this rank keeps its share of the groups due, scored like
    `roll_out_and_score`'s round. Returns the round, the phase and the seconds spent scoring."""
    for batch, free in enumerate(pool.open_slots(step).values()):
        prompts = tools.engine_ranks.prompts(sampler.next_batch(free * tools.engine_ranks.count))
        admit(tools, pool, prompts, step, rollout_seed(run_seed, step, tools.engine_ranks.index, batch))
    return run_pool(tools, pool, step)


def admit(tools: RolloutTools, pool: RolloutPool, problems: list[Problem], step: int, seed: int,
          due_now: bool = False) -> None:
    """This engine's `problems` into the pool at `step` (their prompts checked against the length limit)."""
    prompt_ids = [tools.renderer.check_length(p, tools.max_prompt_tokens) for p in problems]
    pool.admit(problems, prompt_ids, step, seed=seed, due_now=due_now)


def run_pool(tools: RolloutTools, pool: RolloutPool, step: int) -> tuple[Round, Phase, float]:
    """The pool's generation phase for `step`, and this rank's share of the groups due, scored."""
    due, phase = pool.run(step)
    started = time.perf_counter()
    groups = tools.engine_ranks.share(due)
    rollouts = [r for i, group in enumerate(groups) for r in group.rollouts(i)]  # prompt-major
    scored = score_round(tools, [group.problem for group in groups], rollouts)
    return scored, phase, time.perf_counter() - started


def pool_states(state: dict) -> list[dict]:
    """Every rank's pool state (`state`: this rank's), rank-major (a checkpoint keeps them all in trainer_state.json).
    Collective."""
    states = [None] * dist.get_world_size()
    dist.all_gather_object(states, state)
    return states


def extra_round(tools: RolloutTools, sampler: PromptSampler, prompts_per_step: int, group_size: int, run_seed: int,
                step: int, k: int, needed: bool) -> Round | None:
    """Dynamic sampling's extra round k of a step: every rank advances the prompt sampler (so they stay in step); a
    rank that needs no more groups generates nothing (config validation keeps dapo to one rank per engine)."""
    more = tools.engine_ranks.prompts(sampler.next_batch(prompts_per_step))
    if not needed:
        return None
    return roll_out_and_score(tools, more, group_size, rollout_seed(run_seed, step, tools.engine_ranks.index, k))[0]


def pooled_extra_round(tools: RolloutTools, pool: RolloutPool, phase: Phase, sampler: PromptSampler,
                       prompts_per_step: int, run_seed: int, step: int, k: int, needed: bool) -> Round | None:
    """`extra_round` with rollout.max_staleness >= 1: the round's prompts join the pool due at this step, and the pool
    runs again until they are complete (the groups due later advance meanwhile); its work counts into `phase`."""
    more = tools.engine_ranks.prompts(sampler.next_batch(prompts_per_step))
    if not needed:
        return None
    admit(tools, pool, more, step, rollout_seed(run_seed, step, tools.engine_ranks.index, pool.max_staleness + k),
          due_now=True)
    scored, extra, _ = run_pool(tools, pool, step)
    phase.add(extra)
    return scored


# ----------------------------------------------------------------------------------------------------
# Reward functions that fail


class RewardFunctionError(ConfigError):
    """A reward function failed on more than reward.max_failure_fraction of its calls in a step (a ConfigError: the
    cli prints it as one line, like the other mistakes in what the config names)."""

    kind = "reward function error"  # the cli's prefix of the line


def check_failures(fractions: dict[str, float], failures: dict[str, str], limit: float, step: int) -> None:
    """RewardFunctionError when a reward function failed on more than `limit` of its calls in the step:
    `fractions` {name: failed fraction, over all ranks}, `failures` {name: this rank's first failure}."""
    over = {name: fraction for name, fraction in fractions.items() if fraction > limit}
    if not over:
        return
    name, *others = over
    also = f"; also over it: {', '.join(f'{n} ({over[n]:.1%})' for n in others)}" if others else ""
    first = failures.get(name, "none on this rank (see the other ranks' lines)")
    raise RewardFunctionError(
        f"reward function {name} failed on {over[name]:.1%} of its calls at step {step}, over "
        f"reward.max_failure_fraction {limit:g}{also}; its first failure: {first}. Fix the function, or raise "
        "reward.max_failure_fraction (1 = never stop)")


@dataclass
class FailureReports:
    """Prints the first error or timeout of each reward function in training (prefix reward/fn/) and in eval
    (eval/fn/); later ones are counted in the metrics only."""

    logger: MetricsLogger
    reported: set[str] = field(default_factory=set)

    def report(self, failures: dict[str, str], prefix: str) -> None:
        for name, failure in failures.items():
            if f"{prefix}{name}" not in self.reported:
                self.reported.add(f"{prefix}{name}")
                status = failure.partition(":")[0]  # error or timeout
                self.logger.print(f"warning: reward function {name}: {failure} (scored 0; counted in "
                                  f"{prefix}{name}/{status}; the first failure of each function is printed)")

    def check_step(self, scores: list, functions: list, limit: float, step: int) -> None:
        """Stop before training on broken rewards (RewardFunctionError, over all ranks), then print first failures."""
        failures = function_errors([s.functions for s in scores], functions)
        if functions and limit < 1.0:
            check_failures(global_means(function_failures([s.functions for s in scores], functions)), failures,
                           limit, step)
        self.report(failures, "reward/fn/")


# ----------------------------------------------------------------------------------------------------
# Held-out evaluation and the weight-sync check


def evaluate(tools: RolloutTools, problems: list[Problem], cfg: Config,
             failures: FailureReports) -> dict[str, float]:
    """Greedy accuracy on the held-out problems (none with data.kind none: no verifier scores them), each engine
    decoding its part and each rank scoring its own share, and the reward functions' means; prints each function's
    first failure."""
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
    return metrics


def sync_logprob_gap(engine: RolloutEngine, learner: Learner, prompt_ids: list[int], pad_id: int) -> float:
    """Max |engine logprob - learner logprob| over a short greedy completion, right after a weight sync."""
    greedy = engine.generate([prompt_ids], SamplingSpec(n=1, temperature=0.0, max_tokens=8, seed=0))[0]
    batch = make_update_batch([greedy.prompt_token_ids], [greedy.completion_token_ids], [greedy.logprobs],
                              torch.zeros(1), pad_id=pad_id)
    learner_logp = learner.logprobs(batch, temperature=1.0)  # greedy logprobs are the raw log-softmax
    return float(((learner_logp - batch.sampler_logp) * batch.completion_mask).abs().max())


# ----------------------------------------------------------------------------------------------------
# The step's metrics row


@dataclass
class StepRecord:
    """What one step produced, from which its metrics row is made (`step_metrics`)."""

    group_size: int  # G of this step
    first: Round  # the step's own prompts' round (its rewards give the zero-variance fraction)
    drawn: Round  # every rollout drawn (the logged rewards, statuses and lengths)
    sampled: Sampled | None  # dynamic sampling's outcome (None: off)
    update_stats: dict[str, float]  # Learner.update's statistics, already over all ranks
    seconds: dict[str, float]  # perf/<phase>_s: rollout, reward, logprobs, update, sync, step
    sync_gap: float | None  # train/sync_logprob_max_diff, on the steps that check it
    ustat: dict[str, float]  # the U-statistic monitor's metrics (empty without it)
    memory_gib: dict[str, float]  # this rank's per-phase peak memory (memory/<phase>_gib)
    skipped_steps_total: int  # optimizer steps skipped for non-finite gradients, so far
    phase: Phase | None = None  # the rollout pool's generation phase (rollout.max_staleness >= 1)
    servers: dict[str, float] = field(default_factory=dict)  # rollout servers: ServerEngine.take_times()


def step_metrics(cfg: Config, record: StepRecord, functions: list, world: int, step: int) -> dict[str, float]:
    """The step's metrics row, averaged (or maxed) over all ranks; docs/metrics.md defines each."""
    drawn = record.drawn
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
    if record.servers:  # where the time went with rollout servers; the servers idle while the learner works
        metrics.update(global_means({
            **{name: (value, 1) for name, value in record.servers.items()},
            "perf/server_idle_s": (seconds["step"] - record.servers["perf/server_busy_s"], 1)}))
    sampled = record.sampled
    if sampled is not None:
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
    trained = record.first if record.sampled is None else record.sampled.kept
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
