"""The verifier's refusals by name: every rule that can leave a response without its reward, in the order they run,
each with a one-line statement and a response it refuses beside one it keeps.

    judge(response, gold, "gsm8k", problem).rule   # "qualified", "boxes_disagree", ... or None when correct

A plain tuple, not a registry: the order is the behaviour (extraction's rules, then the comparison's), and the code
that applies each rule returns its name up to judge, no state kept on the side: extract.py's extract_with_rule returns
it with "no answer"; compare.py's refusing_rule and each check under it return the name of the rule that refused, or
None when the answer passes. docs/verifier.md's rule list is generated from RULES (scripts/maint/verifier_docs.py;
tests/test_docs.py checks it current) and tests/test_verifier_rules.py checks every example's verdict. The full
statement of each rule is docs/verifier.md's (its sections "Extraction order" to "Cost bounds").
"""

from __future__ import annotations

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


# The labelling conventions every rule follows (C1-C8: the first eight, numbered as in ../shared/data/README.md); the
# 610 labelled cases of ../shared/data/verifier_cases_public.jsonl, where present, are labelled by them.
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
    Rule("answer_disowned", "extract", "a sentence after the answer calls it wrong and states no value after",
         Example("The answer is $\\boxed{5}$. Wait, that is wrong.", "5", "gsm8k", APPLES),
         Example("The answer is $\\boxed{5}$. Wait, that is wrong. 3 + 2 = 5, so 5 it is.", "5", "gsm8k", APPLES)),
    Rule("statement_kinds_disagree", "extract",
         "statements of different kinds (box, final answer, answer, ####) give different numbers, unrevised",
         Example("Calculate the final answer: 7. The answer is 5.", "5", "gsm8k", APPLES),
         Example("Calculate the final answer: 5. The answer is 5.", "5", "gsm8k", APPLES)),
    Rule("reasoning_only", "extract",
         "a value stated only inside a reasoning block: the block never closes, or nothing after its close answers",
         Example("<think>Tom has 3 + 2 = 5 apples. The answer is 5.</think>", "5", "gsm8k", APPLES),
         Example("<think>Tom has 3 + 2 = 5 apples.</think>\n\nThe answer is 5.", "5", "gsm8k", APPLES)),
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


@dataclass(frozen=True)
class Recall:
    name: str
    statement: str  # one line
    accepts: Example  # judged correct
    refuses: Example  # the nearest hedge this way to credit could open, judged not correct


SALARY = "Maria earns $50,000 a year and gets a 15% raise. What is her salary after the raise?"
RECTANGLE = "A rectangle has length 8 and width 4. What is the area of the rectangle?"
SOLVE = "Solve for $x$: $2x + 3 = 13$."
CITY = "A city has 1200 blocks with 1000 people on each block. How many people live in the city?"
CANDIES = "23 candies are shared equally among 4 children. How many candies does each child get?"
LLOYD = "Lloyd earns $10 an hour. He tutored 5 hours, then 8. How much did he earn for the first two weeks?"

# The ways an answer is credited besides a marker ("The answer is", a box, "####"): the last value the response
# commits to for the asked quantity, and the spellings of one number. Each beside the hedge it could open, shown
# refused; tests/test_verifier_rules.py checks both, tests/cases/verifier_attacks_commit.py holds the rest.
RECALLS: tuple[Recall, ...] = (
    Recall("box_then_other_quantity", "a final box, closing sentence or statement followed by a clause or a sentence "
           "about another quantity (a remainder, a check); not by the asked quantity's other value",
           Example("Each child gets $\\boxed{5}$ candies, with a remainder of 3.", "5", "gsm8k", CANDIES),
           Example("Each child gets $\\boxed{5}$ candies, or 6 if the rest are shared.", "5", "gsm8k", CANDIES)),
    Recall("labelled_boxes", "the last of several labelled boxes when its label, and no earlier one, names the asked "
           "quantity", Example("Length: $\\boxed{8}$, width: $\\boxed{4}$, area: $\\boxed{32}$.", "32", "math",
                                RECTANGLE),
           Example("Area: $\\boxed{30}$, area: $\\boxed{32}$.", "32", "math", RECTANGLE)),
    Recall("closing_sentence", "a complete last sentence that names the asked quantity and gives one value, true "
           "chains read as their results (MATH: where no conclusion word or math span answers); or a response that is "
           "only a value",
           Example("The raise is $7,500, so her salary is 50000 + 7500 = $57,500.", "57500", "gsm8k", SALARY),
           Example("So her salary is $57,500 or $60,000.", "57500", "gsm8k", SALARY)),
    Recall("question_restated", "a closing sentence that ends as the question ends: the restated end is the "
           "question's data, neither a condition nor another value",
           Example("He worked 13 hours.\nHe earned $130 for the first two weeks.", "130", "gsm8k", LLOYD),
           Example("He worked 13 hours.\nHe earned $130 or $140 for the first two weeks.", "130", "gsm8k", LLOYD)),
    Recall("last_line_value", "a last line that is only a value after the working (bold, in math, in words, or with "
           "words naming the asked quantity), not after a line leading into it with doubt",
           Example("Tom has 3 apples and buys 2 more.\n**5**", "5", "gsm8k", APPLES),
           Example("Tom has 3 apples and buys 2 more. Perhaps\n**5**", "5", "gsm8k", APPLES)),
    Recall("asked_equation", "a last line that is an equation of the variable the question asks for, or of a letter "
           "the response defines once as the asked quantity",
           Example("Subtract 3, then divide by 2:\n$x = 5$", "5", "math", SOLVE),
           Example("Subtract 3, then divide by 2:\n$x = 5$ or $x = 7$", "5", "math", SOLVE)),
    Recall("after_reasoning", "after a reasoning block, only what follows its close is read (reasoning_only refuses "
           "the rest)", Example("<think>3 + 2 = 5</think>\n\nTom has 5 apples.", "5", "gsm8k", APPLES),
           Example("<think>Tom has 5 apples.</think>", "5", "gsm8k", APPLES)),
    Recall("scientific_notation", "a factor from 1 up to 10 times a power of ten, or e-notation",
           Example("The answer is $1.2 \\times 10^6$.", "1200000", "gsm8k", CITY),
           Example("The answer is $12 \\times 10^5$.", "1200000", "gsm8k", CITY)),
    Recall("locale_separators", "thousands grouped by spaces, thin spaces, apostrophes or two or more dots, a decimal "
           "comma after such groups; one dot group is a decimal, comma groups are thousands",
           Example("The answer is 1'200'000.", "1200000", "gsm8k", CITY),
           Example("The answer is 1.234.", "1234", "gsm8k", APPLES)),
    Recall("number_words", "an English cardinal in words (zero to 999,999,999, hyphens, 'and', a sign word) where a "
           "final answer is read; not an ordinal, a fraction, an operation in words or another language",
           Example("So Tom has five apples.\nThe answer is five.", "5", "gsm8k", APPLES),
           Example("The answer is five or seven.", "5", "gsm8k", APPLES)),
    Recall("currency_and_units", "a currency sign or code before or after the value, trailing zeros (after a "
           "decimal comma too: '18,00 €'), the asked unit spelled out or abbreviated; another unit of the kind asked "
           "is another value",
           Example("Her salary is 57,500.00 €.", "57500", "gsm8k", SALARY),
           Example("The answer is 5 minutes.", "5", "gsm8k", HOURS)),
)
RECALL_NAMES = tuple(recall.name for recall in RECALLS)
