"""Micro-batch formation (grpo_train/micro_batches.py): a fixed count or a token budget, and the equalisation of the
number of passes across ranks, against hand-worked splits and the padded rows `UpdateBatch.rows` really cuts."""

import random

import torch

from grpo_train.learner import make_update_batch
from grpo_train.micro_batches import by_count, by_token_budget, equalise, padded_tokens

# Six rows: prompt lengths and completion lengths.
PROMPTS = [4, 4, 4, 2, 2, 2]
COMPLETIONS = [10, 3, 7, 1, 8, 2]


def test_token_budget_packs_longest_first_up_to_the_budget():
    # Order by completion length, longest first: rows 0 (4 + 10), 4 (2 + 8), 2 (4 + 7), 1 (4 + 3), 5 (2 + 2), 3 (2 + 1).
    # Budget 30: [0, 4] is 2 x (4 + 10) = 28, adding row 2 would make 3 x 14 = 42; [2, 1] is 2 x (4 + 7) = 22,
    # adding row 5 would make 3 x 11 = 33; [5, 3] is 2 x (2 + 2) = 8. 58 padded tokens against the fixed
    # pairs' [0, 1] 28 + [2, 3] 22 + [4, 5] 2 x (2 + 8) = 20 -> 70.
    got = by_token_budget(range(6), PROMPTS, COMPLETIONS, budget=30)
    assert got == [[0, 4], [2, 1], [5, 3]]
    assert [padded_tokens(m, PROMPTS, COMPLETIONS) for m in got] == [28, 22, 8]
    assert sum(padded_tokens(m, PROMPTS, COMPLETIONS) for m in by_count(range(6), 2)) == 70
    # A row over the budget runs alone; a budget above the whole batch is one micro-batch.
    assert by_token_budget(range(6), PROMPTS, COMPLETIONS, budget=10) == [[0], [4], [2], [1], [5, 3]]
    assert by_token_budget(range(6), PROMPTS, COMPLETIONS, budget=1000) == [[0, 4, 2, 1, 5, 3]]


def test_padded_tokens_are_the_rows_the_learner_cuts_and_stay_within_the_budget():
    """On random batches: every row lands in exactly one micro-batch, each micro-batch of more than one row holds at
    most `budget` tokens of `UpdateBatch.rows`' rectangle (counted there, not by padded_tokens), and the same input
    gives the same split."""
    rng = random.Random(0)
    for _ in range(20):
        n = rng.randint(1, 24)
        prompts = [[5] * rng.randint(1, 12) for _ in range(n)]
        completions = [[7] * rng.randint(1, 40) for _ in range(n)]
        batch = make_update_batch(prompts, completions, [[0.0] * len(c) for c in completions], torch.zeros(n), 0)
        prompt_lens, completion_lens = [len(p) for p in prompts], [len(c) for c in completions]
        budget = rng.randint(20, 200)
        rows = sorted(rng.sample(range(n), rng.randint(1, n)))
        split = by_token_budget(rows, prompt_lens, completion_lens, budget)
        assert sorted(r for m in split for r in m) == rows
        for micro in split:
            cut = batch.rows(torch.tensor(micro)).input_ids.numel()
            assert cut == padded_tokens(micro, prompt_lens, completion_lens)
            assert cut <= budget or len(micro) == 1
        assert by_token_budget(rows, prompt_lens, completion_lens, budget) == split


def test_equalise_splits_the_largest_micro_batches_before_padding():
    split = [[0, 4], [2, 1], [5, 3]]  # 28, 22 and 8 padded tokens
    # Two more passes: [0, 4] (28) splits first, then [2, 1] (22); halves stay in place.
    assert equalise(split, 5, PROMPTS, COMPLETIONS) == ([[0], [4], [2], [1], [5, 3]], 0)
    # Eight passes from six rows: every micro-batch split down to one row, then two padding passes.
    assert equalise(split, 8, PROMPTS, COMPLETIONS) == ([[0], [4], [2], [1], [5], [3]], 2)
    # A rank with no rows to train pads every pass; one with enough passes is left as it is.
    assert equalise([], 2, PROMPTS, COMPLETIONS) == ([], 2)
    assert equalise(split, 3, PROMPTS, COMPLETIONS) == (split, 0)


def test_by_count_keeps_the_order():
    assert by_count([5, 1, 4, 2, 0], 2) == [[5, 1], [4, 2], [0]]
