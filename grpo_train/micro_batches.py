"""How the learner splits a rank's rows into micro-batches: a fixed number of sequences, or a token budget.

Pure functions of the rows' prompt and completion lengths (no model, no process group); `grpo_train.learner`
calls them and agrees the number of passes with the other ranks.

A micro-batch runs as the rectangle `UpdateBatch.rows` cuts for it: its rows padded to its longest prompt plus its
longest completion. Its *padded tokens*, rows x (longest prompt + longest completion), bound the activations the
pass keeps (with learner.share_prompts the pass runs fewer: each distinct prompt once, the completions packed).
With completions from 20 to 4,000 tokens a fixed number of sequences is padded to its longest one, and ranks wait
on the rank that drew the long ones. A token budget (verl's use_dynamic_bsz, slime's --max-tokens-per-gpu, TRL's
token_budget) instead sorts the rows by length and fills each micro-batch up to the budget: short completions
travel many to a pass, long ones few. Which rows share a micro-batch does not change the gradient: every
micro-batch's loss is divided by the mini-batch's global normaliser (`algorithms.loss_normaliser`).

Every rank must make the same number of passes (ZeRO-3 gathers the weights in each forward, ZeRO-2 with
overlap_comm reduces gradient buckets in each backward), so a rank with fewer micro-batches than the most any rank
has splits its largest ones in two (`equalise`); only a rank that has too few rows to split runs a pass whose loss
is scaled by 0.
"""

from __future__ import annotations

from collections.abc import Sequence


def padded_tokens(rows: Sequence[int], prompt_lens: Sequence[int], completion_lens: Sequence[int]) -> int:
    """The padded tokens of a micro-batch of `rows`: len(rows) x (longest prompt + longest completion)."""
    if not rows:
        return 0
    return len(rows) * (max(prompt_lens[r] for r in rows) + max(completion_lens[r] for r in rows))


def packed_tokens(rows: Sequence[int], prompt_lens: Sequence[int], completion_lens: Sequence[int]) -> int:
    """The tokens of a micro-batch of `rows` run padding-free (learner.packing): their prompts and completions."""
    return sum(prompt_lens[r] + completion_lens[r] for r in rows)


def tokens_of(packed: bool):
    """What a micro-batch's token budget counts: its packed tokens (learner.packing) or its padded rectangle."""
    return packed_tokens if packed else padded_tokens


def by_count(rows: Sequence[int], size: int) -> list[list[int]]:
    """Consecutive runs of `size` rows (the last may be shorter), in the given order."""
    return [list(rows[start: start + size]) for start in range(0, len(rows), size)]


def by_token_budget(rows: Sequence[int], prompt_lens: Sequence[int], completion_lens: Sequence[int],
                    budget: int, packed: bool = False) -> list[list[int]]:
    """Micro-batches of at most `budget` tokens each: padded tokens (`padded_tokens`), or with `packed` the
    sequences' own tokens (`packed_tokens`: a padding-free pass runs no more).

    The rows are taken longest completion first (then longest prompt, then row number: deterministic), and each
    micro-batch takes rows while its tokens stay within the budget. Sorted, a micro-batch's first row sets
    its completion width, so its rows differ little in length and little of the rectangle is padding. A row that
    alone exceeds the budget runs alone.
    """
    order = sorted(rows, key=lambda r: (-completion_lens[r], -prompt_lens[r], r))
    count = tokens_of(packed)
    out: list[list[int]] = []
    current: list[int] = []
    for row in order:
        if current and count([*current, row], prompt_lens, completion_lens) > budget:
            out.append(current)
            current = []
        current.append(row)
    if current:
        out.append(current)
    return out


def equalise(micro_batches: list[list[int]], passes: int, prompt_lens: Sequence[int],
             completion_lens: Sequence[int], packed: bool = False) -> tuple[list[list[int]], int]:
    """`passes` micro-batches from `micro_batches` (at most that many): the one with the most tokens (padded, or
    with `packed` their own) split in two halves (in place, so the order stays deterministic) until there are
    enough, or until none has two rows. Returns (micro-batches, padding passes still needed): the caller runs those
    with the loss scaled by 0."""
    count = tokens_of(packed)
    out = [list(micro) for micro in micro_batches]
    while len(out) < passes:
        splittable = [i for i, micro in enumerate(out) if len(micro) > 1]
        if not splittable:
            break
        i = max(splittable, key=lambda k: (count(out[k], prompt_lens, completion_lens), -k))
        half = (len(out[i]) + 1) // 2
        out[i: i + 1] = [out[i][:half], out[i][half:]]
    return out, passes - len(out)
