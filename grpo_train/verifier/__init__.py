"""The math verifier for GSM8K and MATH answers: extract -> normalise -> compare -> score.

    from grpo_train.verifier import is_correct, judge, judge_with_timeout

- api.py: the public API (judge, judge_with_timeout, is_correct, Judgement), gold checks and the per-item timer
- extract.py: finding the final answer in a response
- boxes.py: the boxed answer (boxes found, joined and agreed) and what right around the box leaves it no answer
- hedge.py: whether the response commits to one value (retractions, hedges, other values offered)
- text.py: what is printed, normalised spellings, plain numbers
- form.py: the answer-form rules and the cost bound
- units.py: scale words on a number and the unit the problem asks in
- commit.py: the last value committed to for the asked quantity without a marker (closing sentence, labelled boxes,
  the asked variable's equation) and another value offered in the clause after a box
- spelling.py: scientific notation, other locales' thousands separators, number words
- compare.py: equality of the extracted answer and the gold answer
- rules.py: every rule that can refuse a response, by name, in run order (Judgement.rule names the one that did);
  docs/verifier.md states them in full

Batches are scored in worker processes by grpo_train.rewards.workers.
"""

from grpo_train.verifier.api import (
    DATASETS,
    Judgement,
    answers_match,
    extract_answer,
    is_correct,
    judge,
    judge_with_timeout,
    warm_up,
)

# The per-item timer, for the worker processes of grpo_train.rewards.workers (re-exported, not in __all__)
from grpo_train.verifier.api import ItemTimeout as ItemTimeout
from grpo_train.verifier.api import keep_timeout_handler as keep_timeout_handler
from grpo_train.verifier.api import raise_item_timeout as raise_item_timeout

__all__ = ["DATASETS", "Judgement", "answers_match", "extract_answer", "is_correct", "judge", "judge_with_timeout",
           "warm_up"]  # fmt: skip
