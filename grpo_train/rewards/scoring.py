"""Scoring rollouts: each completion decoded, verified against its problem's gold answer and scored by the reward
functions, in the worker pool (workers.py). The training loop's rewards (grpo_train/rounds.py) and the held-out
evaluation (grpo_train/evaluation.py) both score through `verify`.

    texts, scores = verify(pool, tokenizer, rollouts, problems, cfg.reward)   # scores[i].reward: rollout i's reward
"""

from __future__ import annotations

from grpo_train.config import RewardConfig
from grpo_train.data import Problem
from grpo_train.rewards.workers import ScoredItem, VerifierPool, VerifyItem
from grpo_train.rollout import Rollout


def verify(pool: VerifierPool, tokenizer, rollouts: list[Rollout], problems: list[Problem],
           reward: RewardConfig) -> tuple[list[str], list[ScoredItem]]:
    """Decode each rollout and score it against the gold answer of `problems[rollout.prompt_index]`, and with the
    pool's reward functions."""
    texts = tokenizer.batch_decode([r.completion_token_ids for r in rollouts], skip_special_tokens=True)
    records = {r.prompt_index: problems[r.prompt_index].record() for r in rollouts}
    items = []
    for text, r in zip(texts, rollouts, strict=True):
        problem = problems[r.prompt_index]
        items.append(VerifyItem(text, problem.gold, problem.dataset, problem.question, records[r.prompt_index],
                                len(r.completion_token_ids), r.truncated))
    scores = pool.score_batch(items, accuracy_weight=reward.accuracy_weight)
    return texts, scores
