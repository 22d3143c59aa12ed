"""Rounds: a step's prompts rolled out and scored, called by the loop in grpo_train/trainer.py (steps 1-3b):

    rounds = EngineRounds(tools, sampler, seed) or PoolRounds(tools, pool, sampler, seed)   # once, at set-up
    first, phase, rollout_s, reward_s = rounds.first(step, G, B)    # the step's own prompts
    sampled = dynamic_sampling.select(..., draw=rounds.extra, ...)   # dynamic sampling's extra rounds

A round (dynamic_sampling.Round) is this rank's share of the problems with G completions each, decoded, verified and
scored (grpo_train/rewards/scoring.py). Synchronous (rollout.max_staleness 0, `EngineRounds`): the engine generates
the step's prompts; asynchronous (k >= 1, `PoolRounds`): the prompts join the rollout pool, whose groups due at the
step make the round. The two answer the loop alike, so it has no branch on the layout.
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
from grpo_train.rollout import (
    EngineRanks,
    Phase,
    Rollout,
    RolloutEngine,
    RolloutPool,
    SamplingSpec,
    rollout_seed,
    token_staleness,
)
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


# ----------------------------------------------------------------------------------------------------
# A step's rounds: built once before the loop, synchronous or from the rollout pool


class EngineRounds:
    """A step's rounds with rollout.max_staleness 0 (synchronous): the engine generates each round's prompts.
    `first` rolls out the step's own prompts, then `extra` is dynamic sampling's draw of more rounds of the same step.
    The seeds depend only on (run seed, step, engine, round): a resumed run regenerates the same rollouts, and the
    ranks of one engine submit the same requests."""

    pool = None  # nothing in flight between steps

    def __init__(self, tools: RolloutTools, sampler: PromptSampler, run_seed: int) -> None:
        self.tools, self.sampler, self.run_seed = tools, sampler, run_seed
        self.step = self.group_size = self.prompts_per_step = 0  # the step in progress (`first`)
        self.engine_problems: list[Problem] = []  # its prompts on this rank's engine (its ranks: the same)

    def first(self, step: int, group_size: int, prompts_per_step: int) -> tuple[Round, Phase | None, float, float]:
        """The step's batch: this rank's engine generates its part, the rank keeps and scores its share. Returns the
        round, no phase, and the seconds spent generating and scoring."""
        self.step, self.group_size, self.prompts_per_step = step, group_size, prompts_per_step
        self.engine_problems = self.tools.engine_ranks.prompts(self.sampler.next_batch(prompts_per_step))
        first, rollout_s, reward_s = roll_out_and_score(
            self.tools, self.engine_problems, group_size, seed=rollout_seed(self.run_seed, step,
                                                                             self.tools.engine_ranks.index))
        return first, None, rollout_s, reward_s

    def extra(self, k: int, needed: bool) -> Round | None:
        """Dynamic sampling's extra round k of the step (dynamic_sampling.select's `draw`): every rank advances the
        prompt sampler (so they stay in step); a rank that needs no more groups generates nothing (config validation
        keeps dapo to one rank per engine)."""
        ranks = self.tools.engine_ranks
        more = ranks.prompts(self.sampler.next_batch(self.prompts_per_step))
        if not needed:
            return None
        return roll_out_and_score(self.tools, more, self.group_size,
                                  rollout_seed(self.run_seed, self.step, ranks.index, k))[0]

    def resize(self, group_size: int, groups_per_step: int, step: int) -> str:
        """group_size auto chose a new G at `step`: nothing in flight, it applies at once (step_sizes)."""
        return ""

    def token_staleness(self, rollouts: list[Rollout], version: int) -> None:
        """None: every token was sampled by the learner's weights before this update."""
        return None


class PoolRounds:
    """A step's rounds with rollout.max_staleness k >= 1: new prompts join the pool of groups in flight; the engine
    runs them all until the groups due at the step are complete, and pauses the others (rollout/async_pool.py; rollout
    servers keep generating them through the update: rollout/server_pool.py). `extra`: dynamic sampling's rounds join
    the pool due at the step, and the pool runs again until they are complete; their work counts into the phase."""

    def __init__(self, tools: RolloutTools, pool: RolloutPool, sampler: PromptSampler, run_seed: int) -> None:
        self.tools, self.pool, self.sampler, self.run_seed = tools, pool, sampler, run_seed
        self.step = self.prompts_per_step = 0  # the step in progress (`first`)
        self.phase = Phase()  # its generation phase
        self.engine_problems: list[Problem] = []  # the problems of its groups due on this rank's engine

    def first(self, step: int, group_size: int, prompts_per_step: int) -> tuple[Round, Phase, float, float]:
        """A batch of new prompts joins the pool for each free step of deadlines (k + 1 batches at the first step,
        then one per step; each of that step's B prompts per engine), the step's generation phase runs, and this rank
        keeps its share of the groups due, scored. Their G is the one they were admitted with (step_sizes: the same
        as `group_size`). Returns the round, the phase and the seconds spent generating and scoring."""
        self.step, self.prompts_per_step = step, prompts_per_step
        ranks = self.tools.engine_ranks
        for batch, free in enumerate(self.pool.open_slots(step).values()):
            prompts = ranks.prompts(self.sampler.next_batch(free * ranks.count))
            self._admit(prompts, rollout_seed(self.run_seed, step, ranks.index, batch))
        first, self.phase, reward_s = self._run()
        self.engine_problems = self.phase.problems
        return first, self.phase, self.phase.seconds, reward_s

    def extra(self, k: int, needed: bool) -> Round | None:
        """EngineRounds.extra with the pool: the round's prompts join it due at this step, and it runs again (the
        groups due later advance meanwhile)."""
        ranks = self.tools.engine_ranks
        more = ranks.prompts(self.sampler.next_batch(self.prompts_per_step))
        if not needed:
            return None
        self._admit(more, rollout_seed(self.run_seed, self.step, ranks.index, self.pool.max_staleness + k),
                    due_now=True)
        scored, extra, _ = self._run()
        self.phase.add(extra)
        return scored

    def resize(self, group_size: int, groups_per_step: int, step: int) -> str:
        """group_size auto chose a new G at `step`: it applies to the groups due from step + k on (those due before
        are in flight with the G they were admitted with). Returns that, for the console's line."""
        due = step + self.pool.max_staleness
        self.pool.resize(group_size, groups_per_step, due)
        return f" (groups due from step {due} on)"

    def token_staleness(self, rollouts: list[Rollout], version: int) -> list[list[int]]:
        """Per completion, per token: the weight versions it is behind the learner's `version`."""
        return token_staleness(rollouts, version)

    def _admit(self, problems: list[Problem], seed: int, due_now: bool = False) -> None:
        """This engine's `problems` into the pool at the step (their prompts checked against the length limit)."""
        prompt_ids = [self.tools.renderer.check_length(p, self.tools.max_prompt_tokens) for p in problems]
        self.pool.admit(problems, prompt_ids, self.step, seed=seed, due_now=due_now)

    def _run(self) -> tuple[Round, Phase, float]:
        """The pool's generation phase for the step, and this rank's share of the groups due, scored."""
        due, phase = self.pool.run(self.step)
        started = time.perf_counter()
        groups = self.tools.engine_ranks.share(due)
        rollouts = [r for i, group in enumerate(groups) for r in group.rollouts(i)]  # prompt-major
        scored = score_round(self.tools, [group.problem for group in groups], rollouts)
        return scored, phase, time.perf_counter() - started
