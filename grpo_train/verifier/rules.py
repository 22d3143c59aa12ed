"""The verifier's refusals by name: every rule that can leave a response without its reward, in the order they run,
each with a one-line statement and a response it refuses beside one it keeps.

    judge(response, gold, "gsm8k", problem).rule   # "qualified", "boxes_disagree", ... or None when correct

A plain tuple, not a registry: the order is the behaviour (extraction's rules, then the comparison's), and the code
that applies each rule names it (extract.py returns it with "no answer"; compare.py's checks `return refuse(name)`).
docs/verifier.md's rule list is generated from RULES (scripts/maint/verifier_docs.py) and tests/test_verifier_rules.py
checks it current and every example's verdict. The full statement of each rule is api.py's docstring.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class Example:
    response: str
    gold: str
    dataset: str = "gsm8k"
    problem: str | None = None


@dataclass(frozen=True)
class Rule:
    name: str  # Judgement.rule, the training metric reward/veto/<name>, samples.jsonl's "rule"
    stage: str  # "extract" (status no_answer: no answer is taken) or "compare" (status ok: the answer is not the gold)
    statement: str  # one line
    refuses: Example  # judged with rule == name
    keeps: Example  # judged correct: the nearest honest answer


# The labelling conventions every rule follows (C1-C8 in api.py's docstring); the 610 labelled cases of
# ../shared/data/verifier_cases_public.jsonl, where present, are labelled by them.
CONVENTIONS: tuple[str, ...] = (
    "A clearly stated final answer without a box counts (\"The answer is N.\", \"Final Answer: The final answer is "
    "$X$. I hope it is correct.\", \"#### N\").",
    "Two different values offered as the answer (\"either \\boxed{A} or \\boxed{B}\") are wrong, whatever the order.",
    "On an explicit self-correction, the last boxed answer is the final one.",
    "The gold value met only mid-text (a guess, an intermediate step, a truncated solution) is not enough.",
    "Answering \"simplify / convert / factor X\" by handing X back is wrong even though the values are equal.",
    "A bare number answers a percentage gold (the MATH convention).",
    "Exactly equal decimals are accepted (1.5 for 3/2); rounded ones are not.",
    "A multi-part answer boxed part by part is accepted when every part is there.",
    "Where a rule must guess, it refuses: a false positive is a reward a policy learns to collect, so it weighs above "
    "a false negative. The problem text is always passed in training and evaluation (echoes of it are refused).",
)

APPLES = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"
HOURS = "A trip takes 300 minutes. How many hours does it take?"
DEGREES = "Convert $\\frac{\\pi}{6}$ radians to degrees."
GIVEN = "Given $p + q + r = 0$ and $pqr = 4$, find the sum $p + q + r$."

RULES: tuple[Rule, ...] = (
    # Extraction (extract.py, its box rules in boxes.py), in the order it looks: boxes, then statements, then their
    # agreement.
    Rule("too_many_boxes", "extract", "more boxes than MAX_BOXES: spam, not an answer",
         Example("\\boxed{5} " * 2000, "5"), Example("\\boxed{5}", "5")),
    Rule("boxes_disagree", "extract", "different boxed answers (or a box in a box) with no retraction between (C2)",
         Example("It is $\\boxed{5}$ or $\\boxed{7}$.", "5", "gsm8k", APPLES),
         Example("$\\boxed{7}$. Wait, that is not right: 3 + 2 = 5, so $\\boxed{5}$.", "5", "gsm8k", APPLES)),
    Rule("other_value_after_box", "extract", "another value offered after the last box, in its clause or later (C2)",
         Example("$\\boxed{5}$ (or possibly 7)", "5", "gsm8k", APPLES),
         Example("$\\boxed{5}$ (3 + 2)", "5", "gsm8k", APPLES)),
    Rule("box_qualified", "extract", "a bound, approximation, relation or negation right around the box",
         Example("Tom has at least $\\boxed{5}$ apples.", "5", "gsm8k", APPLES),
         Example("Tom has $\\boxed{5}$ apples.", "5", "gsm8k", APPLES)),
    Rule("box_operand", "extract",
         "the box is an operand of a larger expression (a number, operator or power beside it)",
         Example("$\\boxed{5}^2$", "5", "gsm8k", APPLES), Example("$\\boxed{5}$.", "5", "gsm8k", APPLES)),
    Rule("box_unfinished", "extract", "a \\boxed{ left empty (once unprinted content is dropped) or never closed",
         Example("So Tom has $\\boxed{5", "5", "gsm8k", APPLES),
         Example("So Tom has $\\boxed{5}$", "5", "gsm8k", APPLES)),
    Rule("too_many_statements", "extract", "more statements of the answer than MAX_STATEMENTS: spam",
         Example("The answer is 5. " * 500, "5", "gsm8k", APPLES), Example("The answer is 5.", "5", "gsm8k", APPLES)),
    Rule("statement_hedged", "extract", "the statement offers two values or a different value right after (C2)",
         Example("The answer is 5, or maybe 7.", "5", "gsm8k", APPLES),
         Example("The answer is 5.", "5", "gsm8k", APPLES)),
    Rule("statements_disagree", "extract", "an earlier statement of the same kind gives another value, unrevised",
         Example("The answer is 7. The answer is 5.", "5", "gsm8k", APPLES),
         Example("The answer is 7. Actually, 3 + 2 = 5, so the answer is 5.", "5", "gsm8k", APPLES)),
    Rule("retracted_for_other", "extract", "a later sentence retracts the answer for another value with a hedge",
         Example("The answer is 5. Wait, no, it might be 4.", "5", "gsm8k", APPLES),
         Example("The answer is 5. Wait, let me check: 3 + 2 = 5.", "5", "gsm8k", APPLES)),
    Rule("statement_kinds_disagree", "extract",
         "statements of different kinds (box, final answer, answer, ####) give different numbers, unrevised",
         Example("Calculate the final answer: 7. The answer is 5.", "5", "gsm8k", APPLES),
         Example("Calculate the final answer: 5. The answer is 5.", "5", "gsm8k", APPLES)),
    Rule("not_found", "extract", "no final answer stated (a value met only mid-text is not one, C4)",
         Example("Tom has 3 apples, buys 2 more and has 5 apples", "5", "gsm8k", APPLES),
         Example("Tom has 3 apples, buys 2 more.\n#### 5", "5", "gsm8k", APPLES)),
    # Comparison (compare.py), in the order answers_match checks.
    Rule("option_text", "compare", "a multiple-choice letter with a text that is not that option's own",
         Example("$\\boxed{(C)\\ \\text{Sphere}}$", "\\text{(C)}", "math", "Which shape?\n(C) Plane\n(D) Sphere"),
         Example("$\\boxed{(C)\\ \\text{Plane}}$", "\\text{(C)}", "math", "Which shape?\n(C) Plane\n(D) Sphere")),
    Rule("qualified", "compare", "a bounded, approximated, excluded or conditional value where the gold states one",
         Example("The answer is about 5.", "5", "gsm8k", APPLES),
         Example("The answer is exactly 5.", "5", "gsm8k", APPLES)),
    Rule("angle_unit", "compare", "radians for a gold in degrees, degrees for a gold holding pi",
         Example("$\\boxed{30 \\text{ radians}}$", "30^\\circ", "math", DEGREES),
         Example("$\\boxed{30^\\circ}$", "30^\\circ", "math", DEGREES)),
    Rule("percent_not_asked", "compare", "a percent where neither the gold nor the problem speaks of one",
         Example("The answer is 5%.", "5", "gsm8k", APPLES), Example("The answer is 5.", "5", "gsm8k", APPLES)),
    Rule("unit_not_asked", "compare", "a unit of the kind asked but another unit of it (minutes for hours)",
         Example("The answer is 5 minutes.", "5", "gsm8k", HOURS),
         Example("The answer is 5 hours.", "5", "gsm8k", HOURS)),
    Rule("scaled", "compare", "a multiplier, comparison or operation word makes another number (5 million, 5 more)",
         Example("The answer is 5 thousand.", "5", "gsm8k", APPLES),
         Example("The answer is 5 apples.", "5", "gsm8k", APPLES)),
    Rule("rate_not_asked", "compare", "a rate (5 per day) where the question asks for a count",
         Example("The answer is 5 per day.", "5", "gsm8k", APPLES), Example("The answer is 5.", "5", "gsm8k", APPLES)),
    Rule("split_digits", "compare", "digits apart with only a space between are two numbers (1 2 is not 12)",
         Example("The answer is 1 2.", "12", "gsm8k", APPLES), Example("The answer is 12.", "12", "gsm8k", APPLES)),
    Rule("list_items", "compare", "a list whose items do not match the gold's one to one",
         Example("The roots are $\\boxed{1, 3}$.", "1, 2", "math", "Solve $x^2 - 3x + 2 = 0$."),
         Example("The roots are $\\boxed{2, 1}$.", "1, 2", "math", "Solve $x^2 - 3x + 2 = 0$.")),
    Rule("other_name", "compare", "an assignment to another name than the gold's (y = 3 for x = 3)",
         Example("$\\boxed{y \\in [0, 1]}$", "x \\in [0, 1]", "math"),
         Example("$\\boxed{x \\in [0, 1]}$", "x \\in [0, 1]", "math")),
    Rule("given_restated", "compare", "an equation the problem gives, or an equation for a multiple choice's letter",
         Example("$\\boxed{p + q + r = 0}$", "0", "math", GIVEN), Example("$\\boxed{0}$", "0", "math", GIVEN)),
    Rule("not_written_out", "compare", "a number answered by an expression still to evaluate (the answer-form rule)",
         Example("$\\boxed{3 + 2}$", "5", "math", "What is $3 + 2$?"),
         Example("$\\boxed{5}$", "5", "math", "What is $3 + 2$?")),
    Rule("echo", "compare", "the question's own expression handed back, however it is re-spelled (C5)",
         Example("$\\boxed{2.5}$", "\\frac52", "math", "Write $2.5$ as a fraction."),
         Example("$\\boxed{\\frac{5}{2}}$", "\\frac52", "math", "Write $2.5$ as a fraction.")),
    Rule("too_big", "compare", "an answer too costly for SymPy, compared as text only and not equal as text",
         Example("$\\boxed{(99!)!}$", "5", "math"), Example("$\\boxed{5}$", "5", "math")),
    Rule("not_reduced", "compare", "a fraction not in lowest terms (the answer-form rule)",
         Example("$\\boxed{\\frac{6}{8}}$", "\\frac{3}{4}", "math", "What is $\\frac{1}{2} + \\frac{1}{4}$?"),
         Example("$\\boxed{\\frac{3}{4}}$", "\\frac{3}{4}", "math", "What is $\\frac{1}{2} + \\frac{1}{4}$?")),
    Rule("form_asked", "compare",
         "not the form the problem asks for (decimal, fraction, mixed, scientific, factored, expanded)",
         Example("$\\boxed{\\frac{1}{2}}$", "0.5", "math", "Express $\\frac{1}{2}$ plus zero as a decimal."),
         Example("$\\boxed{0.5}$", "0.5", "math", "Express $\\frac{1}{2}$ plus zero as a decimal.")),
    Rule("pending_operation", "compare", "an operation left undone that the gold has done (the answer-form rule)",
         Example("$\\boxed{\\sqrt{8}}$", "2\\sqrt{2}", "math", "Simplify $\\sqrt{2} + \\sqrt{2}$."),
         Example("$\\boxed{2\\sqrt{2}}$", "2\\sqrt{2}", "math", "Simplify $\\sqrt{2} + \\sqrt{2}$.")),
    Rule("not_equal", "compare", "the value is not the gold's",
         Example("The answer is 7.", "5", "gsm8k", APPLES), Example("The answer is 5.", "5", "gsm8k", APPLES)),
)
RULE_NAMES = tuple(rule.name for rule in RULES)

# The comparison's refusal, recorded where a check returns False (compare.py: `return refuse("qualified")`) and read
# by judge once the comparison is over: its functions return booleans through several layers. Per thread.
_refusal = threading.local()


def refuse(rule: str) -> bool:
    """Records that `rule` refused the answer being compared; False, for `return refuse(name)`."""
    _refusal.rule = rule
    return False


def take_refusal() -> str | None:
    """The last rule recorded by `refuse` since the previous call, and forgets it."""
    rule, _refusal.rule = getattr(_refusal, "rule", None), None
    return rule
