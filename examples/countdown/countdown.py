"""The Countdown task for grpo_train: reach a target number with the given numbers and + - * /.

Everything the task needs beyond the package, in one file a config points at:

    data.map_fn: examples/countdown/countdown.py:add_question           # {nums, target} rows -> a question
    reward.functions: [{function: examples/countdown/countdown.py:equation_reward}]

Rows are {"nums": [3, 7, 25], "target": 46}, the field names of the hub set Jiayi-Pan/Countdown-Tasks-3to4
(TinyZero's), so that set works with the same config where there is network. The model is asked for the
equation in \\boxed{...}; the reward parses it without eval: an `ast` walk that admits only numbers and the
four binary operators, computing with exact fractions.
"""

from __future__ import annotations

import ast
from collections import Counter
from fractions import Fraction

MAX_EQUATION_CHARS = 200  # longer is not an answer to a 3-4 number task (and keeps ast.parse cheap)
_OPERATORS = {ast.Add: Fraction.__add__, ast.Sub: Fraction.__sub__, ast.Mult: Fraction.__mul__,
              ast.Div: Fraction.__truediv__}


def add_question(row: dict) -> dict:
    """data.map_fn: the row with a `question` text built from its numbers and target."""
    numbers = ", ".join(str(n) for n in row["nums"])
    return {**row, "question": f"Using the numbers {numbers}, create an equation that equals {row['target']}."}


def last_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (nested braces included); None when there is none or it is unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth = 0
    for i in range(start + len("\\boxed"), len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[start + len("\\boxed{"): i]
    return None


def _value(node: ast.AST, used: list[int]) -> Fraction:
    """The exact value of an expression of integers and + - * /; ValueError for anything else."""
    if isinstance(node, ast.Constant) and type(node.value) is int:
        used.append(node.value)
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        left, right = _value(node.left, used), _value(node.right, used)
        if isinstance(node.op, ast.Div) and right == 0:
            raise ValueError("division by zero")
        return _OPERATORS[type(node.op)](left, right)
    raise ValueError(f"{type(node).__name__} is not a number or one of + - * /")


def parse_equation(text: str) -> tuple[Fraction, list[int]] | None:
    """(value, numbers used) of an equation such as "(25 - 7) * 3" or "(25 - 7) * 3 = 54" (the part after "="
    is ignored); None when it is not a well-formed expression of integers and + - * /."""
    expression = text.split("=")[0].replace("\\times", "*").replace("\\cdot", "*").replace("\\div", "/")
    expression = expression.replace("×", "*").replace("÷", "/").strip().strip("$").strip()
    if not expression or len(expression) > MAX_EQUATION_CHARS:
        return None
    try:
        tree = ast.parse(expression, mode="eval")
        used: list[int] = []
        return _value(tree.body, used), used
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def equation_reward(completion: str, problem: dict, num_tokens: int, truncated: bool, *,
                    numbers_score: float = 0.1, format_score: float = 0.1) -> float | None:
    """1.0 when the boxed equation uses each given number exactly once and equals the target; numbers_score when it
    uses each number once but misses the target; format_score for another well-formed equation; 0.0 for a box
    that is not an equation; None (no answer) when there is no box. With both scores 0.1 this is TinyZero's
    reward; a higher numbers_score credits the half of the task a small model gets wrong most (it writes numbers
    that were not given)."""
    boxed = last_boxed(completion)
    if boxed is None:
        return None
    parsed = parse_equation(boxed)
    if parsed is None:
        return 0.0
    value, used = parsed
    if Counter(used) != Counter(problem["nums"]):
        return format_score
    return 1.0 if value == problem["target"] else numbers_score
