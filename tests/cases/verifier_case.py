"""The adversarial suite's record and helpers (tests/cases/verifier_attacks.py collects the cases)."""

from __future__ import annotations

from typing import NamedTuple

APPLES = "How many apples does Tom have?"
BUYS = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"


class Case(NamedTuple):
    category: str
    problem: str | None
    response: str
    gold: str
    dataset: str
    expected: bool
    why: str


def _box(answer: str) -> str:
    return f"Working it out step by step.\nSo the final answer is $\\boxed{{{answer}}}$."


def _cases(category: str, problem: str | None, gold: str, rows: list[tuple[str, bool, str]], dataset="math"):
    return [Case(category, problem, response, gold, dataset, expected, why) for response, expected, why in rows]


def _nested(depth: int, inner: str) -> str:
    return "(" * depth + inner + ")" * depth
