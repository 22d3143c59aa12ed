"""Dynamic sampling's selection (grpo_train/dynamic_sampling.py) on hand-made rounds: which groups are kept, how the
rollouts are re-indexed, when extra rounds are drawn, the placeholder, and the first round's rows for the monitor.
The whole trainer with it runs in tests/test_ustat_trainer.py."""

import torch

from grpo_train.dynamic_sampling import Round, mixed, select
from grpo_train.rollout import Rollout

G = 2


def make_round(tag: str, rewards: list[float]) -> Round:
    """Groups of G = 2 completions; problem p's completions are tagged f"{tag}{p}"."""
    problems = [f"{tag}{p}" for p in range(len(rewards) // G)]
    rollouts = [Rollout(i // G, [1], [i], [-1.0], "stop", False) for i in range(len(rewards))]
    return Round(problems, rollouts, [f"{tag}{i // G}" for i in range(len(rewards))], list(rewards),
                 torch.tensor(rewards))


def test_mixed_groups():
    assert mixed(torch.tensor([0.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.5, 0.0]), 2) == [0, 3]


def test_filter_keeps_the_mixed_groups_of_the_step_and_draws_nothing():
    first = make_round("a", [0, 1, 1, 1, 1, 0])
    out = select("filter", first, G, target=3, max_rounds=5, draw=lambda k, needed: 1 / 0,
                 any_rank_short=lambda short: True)
    assert out.kept.problems == ["a0", "a2"] and out.kept.rewards.tolist() == [0, 1, 1, 0]
    assert [r.prompt_index for r in out.kept.rollouts] == [0, 0, 1, 1]
    assert all(out.kept.problems[r.prompt_index] == t for r, t in zip(out.kept.rollouts, out.kept.texts,
                                                                       strict=True))
    assert out.first_round_starts == [0, None, 2] and not out.placeholder
    assert out.extra_rounds == 0 and out.extra_rollouts == 0


def test_dapo_draws_rounds_until_the_target_and_drops_the_surplus():
    first = make_round("a", [0, 1, 1, 1])  # one mixed group of 2 wanted
    rounds = {1: make_round("b", [0, 0, 1, 1]), 2: make_round("c", [1, 0, 0, 1])}  # none, then two
    calls = []

    def draw(k, needed):
        calls.append((k, needed))
        return rounds[k]

    out = select("dapo", first, G, target=2, max_rounds=5, draw=draw, any_rank_short=lambda short: short)
    assert calls == [(1, True), (2, True)]
    assert out.kept.problems == ["a0", "c0"]  # c1 is surplus
    assert all(out.kept.problems[r.prompt_index] == t for r, t in zip(out.kept.rollouts, out.kept.texts,
                                                                       strict=True))
    assert out.extra_rounds == 2 and out.extra_rollouts == 8 and len(out.drawn.rollouts) == 12
    assert [out.drawn.problems[r.prompt_index] for r in out.drawn.rollouts] == [t for t in out.drawn.texts]


def test_dapo_stops_at_the_cap_and_follows_the_other_ranks():
    first = make_round("a", [0, 0, 1, 1])
    # This rank is full after round 1 but another rank is still short: it advances (needed=False) without drawing.
    shortfalls = iter([True, True, False])
    calls = []

    def draw(k, needed):
        calls.append((k, needed))
        return make_round("b", [0, 1, 0, 1]) if needed else None

    out = select("dapo", first, G, target=2, max_rounds=5, draw=draw,
                 any_rank_short=lambda short: next(shortfalls))
    assert calls == [(1, True), (2, False)] and out.kept.problems == ["b0", "b1"]
    capped = select("dapo", first, G, target=2, max_rounds=2, draw=lambda k, needed: make_round("z", [1, 1]),
                    any_rank_short=lambda short: short)
    assert capped.extra_rounds == 2 and capped.placeholder  # nothing mixed after the cap: the placeholder group
    assert capped.kept.problems == ["a0"] and capped.first_round_starts == [None, None]
