"""Dynamic sampling (DAPO, Yu et al. 2025, section 3.2): train only on groups whose rewards are not all equal.

A group whose G rewards are equal has every centred advantage 0: it adds no gradient, yet its tokens count in the
loss normaliser and shrink the step. `algorithm.dynamic_sampling`:
- `off`: every group of the step's rollouts is trained (`select` still returns its record: kept = drawn = first).
- `dapo`: after the step's B prompts, draw further rounds of B prompts (each rank its share, as in step 1) until
  every rank holds B / world groups with mixed rewards, at most `dynamic_sampling_max_rounds` extra rounds; the
  surplus of the last round is dropped. The extra rollouts are logged (train/dynamic_extra_rollouts).
- `filter`: the budget-neutral form: keep the mixed groups of the step's own rollouts, draw nothing more.
The learner's loss normaliser is computed from the kept rows only, so it counts what was kept.

A rank that keeps no group trains on one placeholder group whose loss mask is 0: it adds nothing to the loss or
to the normaliser, and keeps that rank's backward passes in step with the others'.

Every rank draws the same number of rounds (the prompt sampler advances identically everywhere): a round is drawn
while any rank is short, and a rank that is already full skips generating its share of it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor

from grpo_train.rollout import Rollout


@dataclass
class Round:
    """One round of rollouts on this rank: its problems, G completions per problem (prompt-major), their rewards."""

    problems: list
    rollouts: list[Rollout]
    texts: list[str]
    scores: list
    rewards: Tensor  # [len(problems) * G]

    def groups(self, keep: list[int], group_size: int) -> Round:
        """The groups `keep` of this round as a round of their own (rollouts re-indexed to its problems)."""
        rows = [g * group_size + i for g in keep for i in range(group_size)]
        index = {g: j for j, g in enumerate(keep)}
        rollouts = [dataclasses.replace(self.rollouts[r], prompt_index=index[r // group_size]) for r in rows]
        return Round([self.problems[g] for g in keep], rollouts, [self.texts[r] for r in rows],
                     [self.scores[r] for r in rows], self.rewards[rows])


def mixed(rewards: Tensor, group_size: int) -> list[int]:
    """Indices of the groups of `rewards` [B * G] whose rewards are not all equal."""
    groups = rewards.view(-1, group_size)
    return (groups.amax(dim=1) != groups.amin(dim=1)).nonzero().flatten().tolist()


def concat(rounds: list[Round]) -> Round:
    problems, rollouts, texts, scores = [], [], [], []
    for part in rounds:
        offset = len(problems)
        problems += part.problems
        rollouts += [dataclasses.replace(r, prompt_index=r.prompt_index + offset) for r in part.rollouts]
        texts += part.texts
        scores += part.scores
    rewards = torch.cat([part.rewards for part in rounds]) if rounds else torch.zeros(0)
    return Round(problems, rollouts, texts, scores, rewards)


@dataclass
class Sampled:
    """The outcome of dynamic sampling on this rank."""

    kept: Round  # the groups trained on (mixed rewards), or one placeholder group
    placeholder: bool  # kept holds no mixed group: its loss mask must be zeroed
    drawn: Round  # every rollout of the step, for the logged reward and length statistics
    first_round_starts: list[int | None]  # per group of the first round: its first row in kept (None: dropped)
    extra_rounds: int
    extra_rollouts: int


def select(mode: str, first: Round, group_size: int, target: int, max_rounds: int,
           draw: Callable[[int, bool], Round | None], any_rank_short: Callable[[bool], bool]) -> Sampled:
    """Keep the mixed groups of `first` (this rank's share of the step); with mode `dapo`, call draw(k, needed)
    for extra rounds k = 1.. while any rank holds fewer than `target` of them (at most max_rounds). draw must
    advance the prompt sampler on every rank and generate only when `needed` (else return None). Mode `off`: the
    step trains on every group of `first`, which is also all it drew."""
    if mode == "off":
        return Sampled(first, False, first, [g * group_size for g in range(len(first.problems))], 0, 0)
    first_mixed = mixed(first.rewards, group_size)
    parts = [first.groups(first_mixed[:target], group_size)]
    starts: list[int | None] = [None] * len(first.problems)
    for j, g in enumerate(first_mixed[:target]):
        starts[g] = j * group_size
    have, drawn, rounds = len(parts[0].problems), [first], 0
    while mode == "dapo" and rounds < max_rounds and any_rank_short(have < target):
        rounds += 1
        extra = draw(rounds, have < target)
        if extra is None:
            continue
        drawn.append(extra)
        keep = mixed(extra.rewards, group_size)[: target - have]
        parts.append(extra.groups(keep, group_size))
        have += len(keep)
    kept = concat(parts)
    placeholder = have == 0
    if placeholder:  # no mixed group on this rank: train on the first group with its loss masked
        kept = first.groups([0], group_size)
    drawn_all = concat(drawn)
    return Sampled(kept, placeholder, drawn_all, starts, rounds, len(drawn_all.rollouts) - len(first.rollouts))
