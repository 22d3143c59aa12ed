"""The paper's synthetic arithmetic set (Section 5.1): integer problems drawn uniformly from five categories.

    problems = synthetic_split(cfg.data.synthetic, "train", 5000)   # list of Arithmetic, seeded
    shots = synthetic_shots(cfg.data.synthetic, 3)                  # worked examples for the fewshot prompt

Categories (CATEGORIES) with operands in [min_operand, max_operand] (add/sub) or [min_operand, max_factor]
(multiplication, division; divisors are at least 1). Answers may be negative. grpo_train.data turns these into
Problems (dataset "gsm8k": the answers are plain integers) and grpo_train.prompts shows the shots.

Held-out synthetic problems. Each question is assigned, by a stable hash of its text, to one of ten
buckets: bucket 0 is reserved for the test split, bucket 1 for few-shot examples, the rest for training.
Each split draws from its own seed and keeps only questions of its buckets, so the three are disjoint
by construction and the test set does not depend on num_train. Deviation from a plain "deduplicate test
against train": with the default ranges the multiplication and division categories hold only 144
distinct questions each, which 5,000 training problems cover completely, so deduplication would leave the
eval set without those two categories. Questions may repeat within a split (draws are i.i.d., as in the
paper).
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass

from grpo_train.config import SYNTHETIC_CATEGORIES, SyntheticConfig

CATEGORIES = SYNTHETIC_CATEGORIES
SYNTHETIC_TEST_SIZE = 500  # the paper's set size; the default when `n` is not given
_BUCKETS = 10  # question-hash buckets: 0 = test, 1 = few-shot examples, 2-9 = train
_SPLIT_BUCKETS = {"test": (0,), "shots": (1,), "train": tuple(range(2, _BUCKETS))}
_MAX_DRAWS = 10_000  # per problem; narrow ranges can leave a split without questions of a category
_SHOTS_SEED = "synthetic-fewshot"


@dataclass(frozen=True)
class Arithmetic:
    """One synthetic problem: the expression, its worked steps, and the answer they arrive at."""

    category: str
    expression: str  # "12 - (5 + 3)"
    steps: tuple[str, ...]  # ("5 + 3 = 8", "12 - 8 = 4")
    answer: int

    @property
    def question(self) -> str:
        return f"What is {self.expression}?"

    @property
    def solution(self) -> str:
        return " ".join(f"{step}." for step in self.steps) + f" The answer is \\boxed{{{self.answer}}}."


def _apply(left: int, op: str, right: int) -> tuple[int, str]:
    """(value, step text) of `left op right`; a negative right operand is written in parentheses."""
    value = {"+": left + right, "-": left - right, "*": left * right}[op]
    right_text = f"({right})" if right < 0 else str(right)
    return value, f"{left} {op} {right_text} = {value}"


def _add_sub_chain(rng: random.Random, s: SyntheticConfig, operations: int, category: str) -> Arithmetic:
    value = rng.randint(s.min_operand, s.max_operand)
    expression, steps = str(value), []
    for _ in range(operations):
        op, operand = rng.choice("+-"), rng.randint(s.min_operand, s.max_operand)
        value, step = _apply(value, op, operand)
        expression += f" {op} {operand}"
        steps.append(step)
    return Arithmetic(category, expression, tuple(steps), value)


def _parentheses(rng: random.Random, s: SyntheticConfig) -> Arithmetic:
    a, b, c = (rng.randint(s.min_operand, s.max_operand) for _ in range(3))
    outer, inner = rng.choice("+-"), rng.choice("+-")
    inside, first = _apply(b, inner, c)
    value, second = _apply(a, outer, inside)
    return Arithmetic("parentheses", f"{a} {outer} ({b} {inner} {c})", (first, second), value)


def _multiplication(rng: random.Random, s: SyntheticConfig) -> Arithmetic:
    a, b = rng.randint(s.min_operand, s.max_factor), rng.randint(s.min_operand, s.max_factor)
    value, step = _apply(a, "*", b)
    return Arithmetic("multiplication", f"{a} * {b}", (step,), value)


def _division(rng: random.Random, s: SyntheticConfig) -> Arithmetic:
    # Built from divisor * quotient, so the division is exact and the answer an integer.
    divisor = rng.randint(max(s.min_operand, 1), s.max_factor)
    quotient = rng.randint(s.min_operand, s.max_factor)
    dividend = divisor * quotient
    step = f"{dividend} / {divisor} = {quotient}"
    return Arithmetic("division", f"{dividend} / {divisor}", (step,), quotient)


def draw_arithmetic(rng: random.Random, s: SyntheticConfig, category: str) -> Arithmetic:
    """One problem of `category`, uniform over its operand ranges."""
    if category == "add_sub_2":
        return _add_sub_chain(rng, s, 2, category)
    if category == "add_sub_3":
        return _add_sub_chain(rng, s, 3, category)
    if category == "multiplication":
        return _multiplication(rng, s)
    if category == "division":
        return _division(rng, s)
    if category == "parentheses":
        return _parentheses(rng, s)
    raise ValueError(f"unknown synthetic category {category!r} (known: {', '.join(CATEGORIES)})")


def question_bucket(question: str) -> int:
    """Stable (process- and platform-independent) bucket of a question; it decides the question's split."""
    digest = hashlib.blake2b(question.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _BUCKETS


def _draw_for(rng: random.Random, s: SyntheticConfig, category: str, split: str) -> Arithmetic:
    """Redraw until the question belongs to `split` (rejection keeps the draw uniform within the split)."""
    for _ in range(_MAX_DRAWS):
        item = draw_arithmetic(rng, s, category)
        if question_bucket(item.question) in _SPLIT_BUCKETS[split]:
            return item
    raise ValueError(
        f"synthetic {split} set: no {category} question reserved for it in {_MAX_DRAWS} draws; the number "
        "ranges are too narrow (raise data.synthetic.max_operand / max_factor)"
    )


def _check_ranges(s: SyntheticConfig) -> None:
    unknown = [c for c in s.categories if c not in CATEGORIES]
    if unknown or not s.categories:
        raise ValueError(f"data.synthetic.categories: {list(s.categories)} must be a non-empty list of "
                         f"{', '.join(CATEGORIES)}" + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    if s.min_operand > s.max_factor:
        raise ValueError(
            f"data.synthetic.min_operand ({s.min_operand}) must be <= data.synthetic.max_factor "
            f"({s.max_factor}): multiplication and division draw factors from that range"
        )


def synthetic_split(s: SyntheticConfig, split: str, count: int) -> list[Arithmetic]:
    """`count` problems of `split` ("train" or "test"), categories drawn uniformly, seeded by s.seed.
    ValueError (naming the data.synthetic key) when the ranges cannot hold them."""
    _check_ranges(s)
    rng = random.Random(f"synthetic-{split}-{s.seed}")  # str seeds are hashed with SHA-512: stable
    return [_draw_for(rng, s, rng.choice(s.categories), split) for _ in range(count)]


def synthetic_shots(s: SyntheticConfig, k: int) -> list[Arithmetic]:
    """`k` worked examples, categories in turn, from a fixed seed and questions train/test never hold."""
    _check_ranges(s)
    rng = random.Random(_SHOTS_SEED)
    return [_draw_for(rng, s, s.categories[i % len(s.categories)], "shots") for i in range(k)]
