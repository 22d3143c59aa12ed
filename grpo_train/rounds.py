"""Rounds: a step's prompts rolled out and scored, called by the loop in grpo_train/trainer.py (steps 1-3):

    first = roll_out_and_score(tools, engine_problems, group_size, seed)    # steps 2-3, and each dynamic round
    first, phase, reward_s = pooled_round(tools, pool, sampler, B, seed, step)  # the same, max_staleness >= 1

A round (dynamic_sampling.Round) is this rank's share of the problems with G completions each, decoded, verified and
scored (grpo_train/rewards/scoring.py). Synchronous (rollout.max_staleness 0): the engine generates the step's
prompts; asynchronous (k >= 1): the prompts join the rollout pool, whose groups due at the step make the round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from grpo_train.config import AlgorithmConfig, RewardConfig, RolloutConfig
from grpo_train.data import Problem, PromptSampler
from grpo_train.dynamic_sampling import Round
from grpo_train.prompts import PromptRenderer
from grpo_train.rewards.scoring import verify
from grpo_train.rewards.workers import VerifierPool
from grpo_train.rollout import EngineRanks, Phase, RolloutEngine, RolloutPool, SamplingSpec, rollout_seed
from grpo_train.ustat.monitor import UstatMonitor


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
