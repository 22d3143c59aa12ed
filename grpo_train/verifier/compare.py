"""The verifier's comparison of an extracted answer with the gold answer (rules stated in docs/verifier.md).

Order: qualifiers -> lists (each item matched once) -> equation sides -> plain numbers (exact, and in
final form) -> tuples, intervals and matrices of plain numbers -> text only for answers too big for
SymPy -> Math-Verify, confirmed exactly, then the answer-form rules on the parsed trees.
"""

from __future__ import annotations

import functools
import re

from math_verify import LatexExtractionConfig, parse, verify
from sympy import Basic, Expr, FiniteSet, Interval, MatrixBase, Tuple, cancel, simplify, srepr
from sympy.core.relational import Relational

from grpo_train.verifier.form import (
    asked_expression,
    asks_for,
    echoes_question,
    evaluated_by_parser,
    exact_value,
    pending_operations,
    restates_given,
    symbolic_factors,
    too_big,
    unexpanded,
)
from grpo_train.verifier.spelling import number_words_as_digits, spelled_number
from grpo_train.verifier.text import (
    APPROXIMATE,
    ASSIGNMENT,
    CHOICE,
    EQUALS,
    MATH_SPAN,
    MIXED_NUMBER,
    MULTIPLIER,
    QUALIFIER,
    RELATION,
    TEXT_WRAP,
    PlainNumber,
    as_number,
    canonical,
    clean,
    decimal_comma,
    gsm8k_number,
    is_text_only,
    math_content,
    prose_number,
    strip_wrappers,
)
from grpo_train.verifier.units import rate_not_asked, scaled, scaled_to_gold, unit_conflict

MAX_ITEMS = 12  # a longer list is compared as text
MAX_QUESTION_SPANS = 16  # math spans of the problem parsed to recognise its expressions in an answer

_ALTERNATIVES = re.compile(r"\bor\b|\\(?:lor|vee)(?![a-zA-Z])")
_SEPARATOR = re.compile(r"\\[{}]|[()\[\]{}]|[,;]|\bor\b|\band\b")
_DECIMAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
_INFINITY = {"\\infty": "inf", "+\\infty": "inf", "-\\infty": "-inf"}
_BRACKETED = re.compile(r"^([(\[])(.*)([)\]])$", re.DOTALL)
_MATRIX = re.compile(r"^\\begin\{([pbB]?matrix)\}((?:(?!\\begin\{).)*)\\end\{\1\}$", re.DOTALL)
_BASE_LITERAL = re.compile(r"^\w+_\{?\d+\}?$")
_FREE_LETTER = re.compile(r"[a-df-hj-zA-Z]")  # a variable (e and i may be constants)
_COMMANDS = re.compile(r"\\(?:text|mathrm|mbox)\s*\{[^{}]*\}|\\[a-zA-Z]+")


NOT_EQUAL = "not_equal"  # the rule that refuses a value other than the gold's (the last of rules.py's RULES)


class UnreadableGold(ValueError):
    """The gold answer is not a number, text or anything Math-Verify can parse: a data bug."""


def _qualified(answer: str, gold: str) -> bool:
    """Whether the answer bounds, approximates, excludes or makes conditional a value where the gold states one."""
    if _PLAIN.fullmatch(answer):
        return False  # most answers: a plain number qualifies nothing
    answer_words, gold_words = _words(answer), _words(gold)
    gold_qualified = QUALIFIER.search(gold_words) or APPROXIMATE.search(gold_words)
    if (QUALIFIER.search(answer_words) or APPROXIMATE.search(answer_words)) and not gold_qualified:
        return True
    if _CONDITIONAL.search(answer_words) and not _CONDITIONAL.search(gold_words):
        return True
    if as_number(clean(gold)) is None:
        return False
    return RELATION.search(answer) is not None or answer_words.lstrip(" {").startswith("~")  # "\\geq 5", "~5"


# A condition or a choice inside the answer: "5 \\text{ (if no apples were eaten)}", "either 5" is not 5 for
# every reading of the question.
_CONDITIONAL = re.compile(r"(?<![a-z])(?:if|unless|assuming|provided|otherwise|either|except)(?![a-z])", re.IGNORECASE)
_PERCENT_SIGN = re.compile(r"%|(?<![a-z])percent", re.IGNORECASE)


def _percent_not_asked(answer: str, gold: str, problem: str | None) -> bool:
    """A percent on the answer where neither the gold nor the problem has one: "5%" does not answer "how many
    apples" (the reverse, 28 for a 28% gold, is C6). Without the problem a percent is allowed."""
    return (
        problem is not None
        and _PERCENT_SIGN.search(answer) is not None
        and not _PERCENT_SIGN.search(f"{gold} {problem}")
    )


# Work shown in brackets after the answer and worth it: "18 (3 + 15)", "18 (= 3 + 15)", "18 (3 + 15 = 18)".
_WORK_IN_BRACKETS = re.compile(r"^(.*?\S)\s*(?:\\left)?\(\s*=?\s*([^()]{1,80}?)\s*(?:\\right)?\)\s*\.?$", re.DOTALL)
_ARITHMETIC_SIGN = re.compile(r"[-+*/×÷]|\\(?:times|cdot|div)(?![a-zA-Z])")


def _shown_work_dropped(answer: str) -> str:
    """The answer without work in brackets after it that evaluates to it exactly; any other bracket stays (a
    second value in brackets is a hedge: "5 (7?)")."""
    match = _WORK_IN_BRACKETS.match(answer)
    if match is None or not _ARITHMETIC_SIGN.search(match.group(2)):
        return answer
    stated, work = match.groups()
    value = as_number(clean(stated)) or gsm8k_number(clean(stated))
    if value is None or any(exact_value(side.strip()) != value.value for side in EQUALS.split(work)):
        return answer
    return stated


_DEGREE = re.compile(r"\\circ|°|\\degree")
_RADIAN = re.compile(r"\brad(?:ian)?s?\b", re.IGNORECASE)


def _other_angle_unit(answer: str, gold: str) -> bool:
    """Radians for a gold in degrees ("30 radians" is not 30°), degrees for a gold holding pi ("\\pi^\\circ" is
    not pi): the unit is dropped before the numbers are compared, so it is read here."""
    if "\\" not in answer + gold and "°" not in answer + gold and "rad" not in answer.lower():
        return False
    in_degrees = _DEGREE.search(gold) is not None
    return (in_degrees and _RADIAN.search(answer) is not None) or (
        "\\pi" in gold and not in_degrees and _DEGREE.search(answer) is not None
    )


def _words(latex: str) -> str:
    """The answer's words as printed: text groups unwrapped ("\\text{mo}\\text{re than }5" and "\\text{abo}ut 5" are
    "more than 5" and "about 5"), spacing and size commands as spaces, and braces of groups dropped."""
    joined = re.sub(r"(\\(?:text\w*|mathrm|mbox)\s*\{[^{}]*)\}\s*\\(?:text\w*|mathrm|mbox)\s*\{", r"\1", latex)
    glued = TEXT_WRAP.sub(lambda m: m.group(1) if m.string[m.end() : m.end() + 1].isalpha() else f" {m[1]} ", joined)
    return _LAYOUT.sub(" ", glued)


_PLAIN = re.compile(r"\s*-?\d[\d,]*(?:\.\d+)?\s*")
_LAYOUT = re.compile(r"\\[,;:! ]|\\q?quad\b|\\(?:tiny|small|large|Large|normalsize|displaystyle)\b|(?<!\\)[{}]")


_SPLIT_DIGITS = re.compile(r"\d[ \t]+\d")


def _split_digits(latex: str) -> bool:
    """Digits apart with only a space between, outside LaTeX (where "\\log_2 3" and "\\frac 1 2" are spaced)."""
    return _SPLIT_DIGITS.search(latex) is not None and re.search(r"[\\^_{]", latex) is None


def answers_match(answer: str, gold: str, dataset: str, response: str = "", problem: str | None = None) -> bool:
    """Whether an extracted answer equals the gold answer (LaTeX or plain text)."""
    return refusing_rule(answer, gold, dataset, response, problem) is None


def refusing_rule(answer: str, gold: str, dataset: str, response: str = "", problem: str | None = None) -> str | None:
    """The name of the comparison's rule (rules.py's RULES) that refuses an extracted answer against the gold answer,
    None when they are equal. Every check below answers the same way: a rule's name, or None when the answer passes."""
    maybe_letter = len(gold) <= 24 and len(answer) <= 400 and _LETTER.search(gold) is not None  # not a GSM8K gold
    letter = CHOICE.match(canonical(gold)) if maybe_letter else None
    if letter and (labelled := _LABELLED_OPTION.match(_option_words(answer))):
        # "(C) Plane" answers (C) when Plane is option C's own text in the problem; "(C) Sphere" names two options.
        own_text = _options(problem or "").get(labelled.group(1).upper())
        if labelled.group(1).upper() == letter.group(1).upper() and own_text == _squeezed(labelled.group(2)):
            return None
        return "option_text"
    if (words := number_words_as_digits(answer)) != answer and as_number(clean(gold)) is not None:
        answer = words  # "\\text{twenty-five}" is 25: read before the scale rules ("five hundred" is 500)
    if _qualified(answer, gold):
        return "qualified"
    if _other_angle_unit(answer, gold):
        return "angle_unit"
    if _percent_not_asked(answer, gold, problem):
        return "percent_not_asked"
    if unit_conflict(answer, problem):
        return "unit_not_asked"  # "5 minutes" for "How many hours"; "5 radians" asked in degrees
    if scaled(answer, problem) and not scaled(gold, None) and (answer := scaled_to_gold(answer, gold)) is None:
        return "scaled"  # "5 squared", "5 lakh" for 5; "1.2 billion" is 1200000000
    if rate_not_asked(answer, problem):
        return "rate_not_asked"  # "5 per day" for "How many apples does Tom have?"
    answer = _shown_work_dropped(answer)
    answer_clean, gold_clean = clean(answer), clean(gold)
    # "1.2 \\times 10^6", "1'200'000", "1 234,5": other spellings of one number
    answer_number = as_number(answer_clean) or spelled_number(answer_clean)
    if _split_digits(answer_clean) and not _split_digits(gold_clean) and not answer_number:
        return "split_digits"  # "1 2" is two numbers, not 12 (a space groups thousands only: "1 000")
    if answer_number and (gold_number := as_number(gold_clean)):
        return _numbers_refusal(answer_number, gold_number, answer_clean, gold_clean, response, problem)  # most items
    answer_items, gold_items = _items(answer, gold), _items(gold, answer)
    if len(answer_items) == 1 and len(gold_items) == 1:
        return _single_refusal(answer, gold, dataset, response, problem)
    tuple_gold = len(gold_items) == 1 and _BRACKETED.match(strip_wrappers(gold)) is not None
    if tuple_gold and gold.count(",") + 1 == len(answer_items) and not _ALTERNATIVES.search(answer):
        return _single_refusal(f"({', '.join(answer_items)})", gold, dataset, response, problem)  # "7, 6" for (7, 6)
    if len(answer_items) != len(gold_items) or len(gold_items) > MAX_ITEMS:
        return None if len(gold_items) > MAX_ITEMS and canonical(answer) == canonical(gold) else "list_items"
    unmatched = list(gold_items)  # each answer item takes one gold item: "x=1 or x=2" answers "1, 2"
    for item in answer_items:
        partner = next((g for g in unmatched if _single_refusal(item, g, dataset, response, problem) is None), None)
        if partner is None:
            return "list_items"
        unmatched.remove(partner)
    return None


_LETTER = re.compile(r"[A-Fa-f]")
# A multiple-choice letter with an option's text after it: "(C) Plane", "(B) 3(1 + r/10)^x = 7".
_LABELLED_OPTION = re.compile(r"^\(([A-Fa-f])\)\s*(\S.*)$", re.DOTALL)
# The options of a problem: "(C) Plane" on its own line, or "\\textbf{(B)}\\ 3(1 + r/10)^x = 7\\qquad" in a row.
_OPTION = re.compile(r"\(([A-F])\)\}?\s*(?:\\\s*)?([^\n$]{1,120}?)\s*(?=\\qquad|\$|\n|\\textbf|\([A-F]\)|$)")


def _option_words(latex: str) -> str:
    """The visible text of an answer or an option: text wrappers, spacing, math delimiters and braces dropped."""
    text = latex
    for _ in range(8):  # nested wrappers, a few levels: "\\text{\\textbf{(C)} Plane}"
        text = TEXT_WRAP.sub(r"\1", text)
    text = re.sub(r"\\[ ,;:!]|\\q?quad(?![a-zA-Z])|\$", " ", text)
    return re.sub(r"\s+", " ", text.replace("{", "").replace("}", "")).strip()


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", _option_words(text)).lower().rstrip(".")


def _options(problem: str) -> dict[str, str]:
    """{"C": "plane", ...}: each option's own text as the problem writes it, squeezed."""
    return {match.group(1): _squeezed(match.group(2)) for match in _OPTION.finditer(problem[-2000:])}


def _items(latex: str, other: str) -> tuple[str, ...]:
    """The values a list, a set or alternatives offer ("1, 2", "\\{1, 2\\}", "x=1 \\lor x=2", "3 \\pm 2",
    "x = 5 \\quad x = 7", "p=5, q=2; p=7, q=2"); one item for anything else (a tuple, an interval, "1,600",
    a decimal comma "0,111" against a decimal, a sentence)."""
    if as_number(clean(latex)) is not None or (decimal_comma(clean(latex)) and as_number(clean(other))):
        return (latex,)
    if "," in latex and _GROUPED_CHAIN.fullmatch(latex):
        return (latex,)  # "34,500-33,000 = $1,500": thousands groups in a chain, not a list
    if len(EQUALS.findall(latex)) > 1:  # "x = 5 \quad x = 7": assignments side by side
        latex = re.sub(r"\\q?quad(?![a-zA-Z])", ", ", latex)
    s = re.sub(r"^\\\{(.*)\\\}$", r"\1", strip_wrappers(latex))
    s = re.sub(r"\\text\s*\{\s*(or|and)\s*\}|\\(?:lor|vee)(?![a-zA-Z])", r" or ", s)
    items, depth, start = [], 0, 0
    for match in _SEPARATOR.finditer(s):
        token = match.group()
        if token in ("(", "[", "{", "\\{"):
            depth += 1
        elif token in (")", "]", "}", "\\}"):
            depth -= 1
        elif depth == 0 and (token == ";" or ";" not in s):  # ";" separates solutions of several parts
            items.append(s[start : match.start()])
            start = match.end()
    items = [item.strip() for item in [*items, s[start:]] if item.strip()]
    if not all(re.search(r"[\d\\]", item) for item in items):
        return (latex,)  # "Tom and Jane have 18 eggs" is one answer
    # "1 \pm \sqrt{5}" is two items, "1 + \sqrt{5}" and "1 - \sqrt{5}".
    items = [part for item in items for part in _plus_minus(item)]
    items = list({canonical(item): item for item in items}.values())
    return (latex,) if len(items) == 1 else tuple(items)


_GROUPED = r"\s*(?:\\?\$)?\s*(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?\s*"
_GROUPED_CHAIN = re.compile(rf"{_GROUPED}(?:(?:[-+*/×=]|\\times|\\cdot){_GROUPED})+")


def _plus_minus(item: str) -> list[str]:
    if item.count("\\pm") != 1:
        return [item]
    return [item.replace("\\pm", "+"), item.replace("\\pm", "-")]


def _single_refusal(answer: str, gold: str, dataset: str, response: str, problem: str | None) -> str | None:
    if _BRACKETED.match(strip_wrappers(answer)) and (values := _assigned_values(gold)):
        gold = f"({', '.join(values)})"  # "(5, 2)" answers "p = 5, q = 2"
    answer_lhs, gold_lhs = (ASSIGNMENT.match(strip_wrappers(x)) for x in (answer, gold))
    if answer_lhs and gold_lhs and answer_lhs.group(1) != gold_lhs.group(1):
        return "other_name"  # "y \in [0, 1]" does not answer "x \in [0, 1]"
    keep = "=" in gold and not gold_lhs  # an equation, not "x = value": "x^2/4 + y^2/3 = 1", "V_1:V_2 = 11:21"
    answer_clean, gold_clean = clean(answer, keep), clean(gold, keep)
    if restates_given(answer, gold, problem) or (EQUALS.search(answer) and CHOICE.match(canonical(gold))):
        return "given_restated"  # a given restated; a multiple choice is answered by its letter, not "z = c"
    if not keep:
        answer_clean = _equation_value(answer_clean, problem)
        gold_clean = _equation_value(gold_clean, problem) or gold_clean
    if not answer_clean or not gold_clean:
        return NOT_EQUAL
    if keep and not EQUALS.search(answer_clean) and canonical(answer_clean) == canonical(EQUALS.split(gold_clean)[-1]):
        return None  # "11:21" for "V_1:V_2 = 11:21"
    gold_number, answer_number = as_number(gold_clean), _answer_number(answer, answer_clean, dataset, problem)
    if gold_number is None and answer_number is not None and answer_number.form == "decimal":
        gold_number = decimal_comma(gold_clean)  # a "0,111" gold against 0.111
    if answer_number is None and gold_number is not None and gold_number.form == "decimal":
        answer_number = decimal_comma(answer_clean)
    if gold_number is not None and answer_number is not None:
        return _numbers_refusal(answer_number, gold_number, answer_clean, gold_clean, response, problem)
    if canonical(answer_clean) == canonical(gold_clean):
        return None
    written_out = problem is not None or dataset == "gsm8k"  # GSM8K answers are numbers, asked or not
    if gold_number is not None and (written_out or _FREE_LETTER.search(_COMMANDS.sub(" ", answer_clean))):
        # The answer-form rule: a number is answered by a number written out ("99^2+99+1" and "\log_2 64"
        # still have work to do). Without the problem only a variable rules it out ("4x" is not 4).
        return "not_written_out"
    if answer_number is None and echoes_question(answer_clean, gold_clean, response, problem):
        return "echo"
    if scaled(answer_clean, problem) and not MULTIPLIER.search(gold_clean):
        return "scaled"  # "6 \text{ million}" is not 6, and Math-Verify would drop the word as a unit
    if (structured := _structured_equal(answer_clean, gold_clean, strict=problem is not None)) is not None:
        return None if structured else NOT_EQUAL
    if too_big(answer_clean) or too_big(gold_clean):
        return "too_big"  # compared as text above
    return _sympy_refusal(answer_clean, gold_clean, problem)


def _assigned_values(latex: str) -> list[str] | None:
    """["5", "2"] for "p = 5, q = 2" (two or more assignments), else None."""
    parts = [ASSIGNMENT.match(part) for part in strip_wrappers(latex).split(",")]
    if len(parts) < 2 or None in parts:
        return None
    return [part.string[part.end() :].strip() for part in parts]


def _answer_number(answer: str, answer_clean: str, dataset: str, problem: str | None) -> PlainNumber | None:
    if scaled(answer, problem):
        return None  # "5 million" is not 5; "5 dozen" is 5 only when the problem asks in dozens
    if dataset == "gsm8k":
        return gsm8k_number(answer_clean) or spelled_number(answer_clean)
    return as_number(answer_clean) or spelled_number(answer_clean) or prose_number(answer_clean)


def _numbers_refusal(
    answer: PlainNumber, gold: PlainNumber, answer_clean: str, gold_clean: str, response: str, problem: str | None
) -> str | None:
    """Exact equality, in final form: a fraction in lowest terms, a decimal when one is asked for, a
    fraction rather than a repeating decimal when a fraction is asked for."""
    if answer.value != gold.value:
        return NOT_EQUAL  # 28 for a 28% gold is fine (MATH convention)
    if canonical(answer_clean) == canonical(gold_clean):
        return None
    asked = asks_for(problem)
    if problem is not None and not answer.reduced:
        return "not_reduced"  # the answer-form rule: 6/8 and 4/1 are fractions left to reduce
    if problem is not None and answer.form == "repeating" and "fraction" in asked:
        return "form_asked"
    if answer.form in ("fraction", "repeating") and gold.form == "decimal":
        if "decimal" in asked:
            return "form_asked"
        return "echo" if echoes_question(answer_clean, gold_clean, response, problem) else None
    if "mixed" in asked and MIXED_NUMBER.match(gold_clean) and not MIXED_NUMBER.match(answer_clean):
        return "form_asked"  # asked for a mixed number, "7/2" and "3.5" are not one
    # Written as the question writes it, not as the gold: "write $2.5$ as a fraction" -> 2.5.
    return "echo" if problem is not None and echoes_question(answer_clean, gold_clean, response, problem) else None


def _equation_value(latex: str, problem: str | None) -> str:
    """The value an equation chain ends on, when every left side is a name ("x", "f(2)", "the answer"), an
    expression the problem asks for ("m + n") or equals that value ("2 \\times 9 = 18"); "" when one is
    none of these ("7 = 5", "x + y = 0")."""
    if not EQUALS.search(latex):
        return latex
    *sides, value = (side.strip() for side in EQUALS.split(latex))
    for side in sides:
        if not side or not (_is_name(side) or asked_expression(side, problem) or _sides_equal(side, value)):
            return ""
    return value


# What a name may hold besides letters: subscripts, primes, a function's arguments, bars, a tuple of names
# ("(x, y)"), words and commands such as \angle or \theta; an operation or a number outside those is not a name.
_SUBSCRIPT_OR_ARGUMENTS = re.compile(r"_\{[^{}]*\}|_\\?\w+|(?<=[a-zA-Z'}])\s*\([^()]*\)")
_OPERATION = re.compile(
    r"[-+*/^<>\d]|\\(?:[dt]?frac|sqrt|cdot|times|div|pm|mp|log|ln|exp|[dt]?binom|sum|prod|int|pi|infty)(?![a-zA-Z])"
    r"|\b(?:zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|twenty|hundred|thousand)\b"
    # and in a few other languages (French, German, Spanish: "\\text{sept} = 5", "\\text{sieben} = 5")
    r"|\b(?:deux|trois|quatre|cinq|sept|huit|neuf|dix|zwei|drei|vier|f(?:ü|ue)nf|sechs|sieben|acht|neun|zehn|uno|dos"
    r"|tres|cuatro|cinco|seis|siete|ocho|nueve|diez)\b"
    # a negated or disowned name is not the name: "\\text{not } x = 5", "\\text{wrong} = 5"
    r"|\b(?:not|no|never|non|wrong|incorrect|false|bad|invalid)\b|n't\b|\\(?:neg|lnot|not)(?![a-zA-Z])",
    re.IGNORECASE,
)  # a number written as a word is a number: "\\text{seven} = 5" is not 5


def _is_name(side: str) -> bool:
    bare = _SUBSCRIPT_OR_ARGUMENTS.sub(" ", TEXT_WRAP.sub(r" \1 ", side))
    return re.search(r"[a-zA-Z]", bare) is not None and _OPERATION.search(bare) is None


def _sides_equal(left: str, right: str) -> bool:
    exact_left, exact_right = exact_value(left), exact_value(right)
    if exact_left is not None and exact_right is not None:
        return exact_left == exact_right
    if too_big(left) or too_big(right):
        return canonical(left) == canonical(right)
    return _sympy_equal(_exact_decimals(left), _exact_decimals(right)) is not None


def _plain_elements(text: str, separator: str) -> list | None:
    """["1", "-\\frac{3}{4}", "\\infty"] -> exact values; None if any element is not a plain number."""
    elements = []
    for part in (p.strip() for p in re.split(separator, text)):
        number = as_number(part)
        if number is None and part not in _INFINITY:
            return None
        elements.append(number.value if number is not None else _INFINITY[part])
    return elements


def _structured_equal(answer: str, gold: str, strict: bool) -> bool | None:
    """Decides without SymPy for tuples, intervals and matrices of plain numbers (brackets must agree;
    when `strict`, by the answer-form rule, a plain number in the gold must be one in the answer),
    numbers in a base (52_8) and text answers. None when the shapes leave the decision to SymPy."""
    a, g = (re.sub(r"\s+", " ", x).strip() for x in (answer, gold))
    if (a_matrix := _MATRIX.match(a)) and (g_matrix := _MATRIX.match(g)):
        a_rows = [_plain_elements(row, "&") for row in a_matrix.group(2).split("\\\\")]
        g_rows = [_plain_elements(row, "&") for row in g_matrix.group(2).split("\\\\")]
        if None in g_rows or (None in a_rows and not strict):
            return None
        return None not in a_rows and a_rows == g_rows
    a_tuple, g_tuple = _BRACKETED.match(a), _BRACKETED.match(g)
    if a_tuple and g_tuple and not re.search(r"[()\[\]]", a_tuple.group(2) + g_tuple.group(2)):
        if a_tuple.group(1, 3) != g_tuple.group(1, 3):
            return False  # (a, b) is not [a, b]: open/closed ends, or a point against an interval
        a_parts, g_parts = re.split(r"[,;]", a_tuple.group(2)), re.split(r"[,;]", g_tuple.group(2))
        if len(a_parts) != len(g_parts):
            return False
        if all(canonical(x) == canonical(y) for x, y in zip(a_parts, g_parts, strict=True)):
            return True
        g_items, a_items = _plain_elements(g_tuple.group(2), "[,;]"), _plain_elements(a_tuple.group(2), "[,;]")
        if g_items is None or (a_items is None and not strict):
            return None
        return a_items is not None and a_items == g_items
    if (_BASE_LITERAL.match(a) and _BASE_LITERAL.match(g)) or (is_text_only(a) and is_text_only(g)):
        return canonical(a) == canonical(g)
    return None


# ----------------------------------------------------------------------------------------------------
# Math-Verify, confirmed exactly


def _exact_decimals(latex: str) -> str:
    """Rewrites 0.375 as \\frac{375}{1000} so SymPy compares it exactly (no 6-digit float rounding)."""
    return _DECIMAL.sub(lambda m: f"\\frac{{{int(m.group(1) + m.group(2))}}}{{1{'0' * len(m.group(2))}}}", latex)


@functools.lru_cache(maxsize=4096)
def parse_latex(latex: str) -> tuple:
    """Math-Verify's LaTeX -> SymPy parse of a bare answer (cached: a GRPO group shares its gold)."""
    config = [LatexExtractionConfig(boxed_match_priority=-1)]
    return tuple(parse(f"${latex.replace(chr(10), ' ')}$", extraction_config=config, parsing_timeout=None))


def _sympy_equal(gold: str, answer: str) -> tuple[Basic, Basic] | None:
    """The two parsed trees when Math-Verify finds them equal and they are exactly equal, else None."""
    gold_parsed, answer_parsed = parse_latex(gold), parse_latex(answer)
    if not gold_parsed or not answer_parsed:
        return None
    if not verify(list(gold_parsed), list(answer_parsed), timeout_seconds=None):
        return None
    gold_tree, answer_tree = gold_parsed[0], answer_parsed[0]
    return (gold_tree, answer_tree) if _exactly_equal(gold_tree, answer_tree) else None


_SCIENTIFIC = re.compile(r"^[-+]?[1-9](?:\.\d+)?\s*(?:\\times|\\cdot|×|\*)\s*10\s*\^")


def _sympy_refusal(answer: str, gold: str, problem: str | None) -> str | None:
    """Math-Verify's equivalence, confirmed exactly, and the answer-form rule: the answer may not
    leave undone an operation the gold has done, nor the form the problem asks for."""
    if not parse_latex(_exact_decimals(gold)):
        raise UnreadableGold(gold)  # parsed only now, when an answer needs it: a group shares its gold
    trees = _sympy_equal(_exact_decimals(gold), _exact_decimals(answer))
    if trees is None:
        return NOT_EQUAL
    gold_tree, answer_tree = trees
    if problem is None or not isinstance(gold_tree, Basic) or not isinstance(answer_tree, Basic):
        return None  # the form rule needs the problem; strings have no form to check
    done_by_gold = pending_operations(gold_tree) | evaluated_by_parser(gold)
    if (pending_operations(answer_tree) | evaluated_by_parser(answer)) - done_by_gold:
        return "pending_operation"
    question = _question_trees(problem)
    if srepr(answer_tree) in question and srepr(gold_tree) not in question:
        return "echo"  # the question's own expression, re-spelled ("(6a+4)/5 - (3a+1)/4")
    asked = asks_for(problem)
    if "scientific" in asked and _SCIENTIFIC.match(clean(gold)) and not _SCIENTIFIC.match(clean(answer)):
        return "form_asked"  # asked for scientific notation, "52 \\times 10^{-5}" is not it (factor in [1, 10))
    if "factor" in asked and symbolic_factors(answer_tree) < symbolic_factors(gold_tree):
        return "form_asked"  # asked to factor, the answer is a sum or less factored than the gold
    # Asked to expand, a product of sums is not expanded (unless the gold is one).
    expand = "expand" in asked and gold_tree.free_symbols and unexpanded(answer_tree) and not unexpanded(gold_tree)
    return "form_asked" if expand else None


@functools.lru_cache(maxsize=256)
def _question_trees(problem: str) -> frozenset[str]:
    """The parse trees (as `srepr`, which orders the terms of sums and products) of the problem's math
    spans and of their sides and list items: how the question writes its expressions, whatever the
    spelling. A GRPO group shares its problem, so this is parsed once per group."""
    keys = set()
    for span in list(MATH_SPAN.finditer(problem))[:MAX_QUESTION_SPANS]:
        content = math_content(span)
        for part in {content, *re.split(r"=|,|;|\\q?quad\b", content)}:
            part = clean(part)
            if part and not too_big(part) and (parsed := parse_latex(_exact_decimals(part))):
                keys.add(srepr(parsed[0]))
    return frozenset(keys)


def _exactly_equal(gold: Basic, answer: Basic) -> bool:
    """Math-Verify compares numbers to 15 digits (pi + 10^-30 passes): equality must hold exactly."""
    try:
        if isinstance(gold, Relational) and isinstance(answer, Relational):
            return _proportional(gold.lhs - gold.rhs, answer.lhs - answer.rhs)
        if isinstance(gold, MatrixBase) and isinstance(answer, MatrixBase):
            return gold.shape == answer.shape and all(map(_exactly_equal, gold, answer))
        if isinstance(gold, (FiniteSet, Tuple, Interval)) and isinstance(answer, (FiniteSet, Tuple, Interval)):
            g, a = _elements(gold), _elements(answer)
            if isinstance(gold, FiniteSet) or isinstance(answer, FiniteSet):
                return all(any(_exactly_equal(x, y) for y in g) for x in a)
            return len(g) == len(a) and all(map(_exactly_equal, g, a))
        if isinstance(gold, Expr) and isinstance(answer, Expr):
            difference = answer.doit() - gold.doit()
            return difference == 0 or (not difference.is_Number and simplify(difference) == 0)
    except Exception:  # noqa: BLE001 - SymPy raises many types on odd trees; unproven means unequal
        return False
    return True  # shapes Math-Verify matched by name (strings, symbols against constants)


def _elements(container: Basic) -> list[Basic]:
    return [container.start, container.end] if isinstance(container, Interval) else list(container.args)


def _proportional(first: Expr, second: Expr) -> bool:
    """Two equations are the same when their (lhs - rhs) differ by a nonzero constant factor."""
    ratio = cancel(first.doit() / second.doit())
    return bool(ratio.is_number and ratio != 0 and not ratio.has(*first.free_symbols | second.free_symbols))


# Examples of MATH's answer shapes (written for this list, odd values); parsing them fills the LaTeX parser's
# (ANTLR) decision cache, which roughly doubles its speed on the items that follow. The 113 shapes after the first
# 18 lengthen a worker's start by seconds and speed up the MATH items after it (docs/verifier.md, "Speed and
# accuracy"); a worker lives for the whole run.
_WARM_UP_LATEX = (
    "\\frac{37}{91}", "-\\frac{13}{29}\\sqrt{17}", "3\\sqrt[3]{19} + 7\\pi", "\\{-23, 41\\}",
    "(-\\infty, -\\tfrac{7}{13}] \\cup (19, \\infty)", "(37, -\\frac{5}{11})", "\\text{(E)}",
    "\\begin{pmatrix} 17 \\\\ -\\frac{3}{29} \\end{pmatrix}", "y = -\\frac{13}{7}x + 19", "97\\%",
    "x^2/37 + y^2/41 = 1", "-13 \\le t < 29", "\\sin 37^\\circ + \\cos^2 x", "a_{19} = 3^{n-7}",
    "1001_{7}", "t \\in [-13, 2.75)", "\\dfrac{\\sqrt{41}}{13} - e^{-7}", "\\log_3 29 + |x - 17|",

    "\\frac{-47}{3}", "\\tfrac{5}{83}", "2\\frac{3}{7}", "-0.0625", "1.5 \\times 10^{4}", "6.02\\cdot 10^{23}",
    "\\sqrt{53}", "4\\sqrt{2} - 3\\sqrt{6}", "\\frac{1 + \\sqrt{5}}{2}", "\\sqrt[4]{12}", "\\frac{\\pi}{6}",
    "\\frac{7\\pi}{12}", "2\\pi r", "\\pi^2 - 9", "e^{3x}", "\\ln 5", "\\log_{2} 3", "\\log 100",
    "3 \\pm 2\\sqrt{2}", "\\pm \\frac{1}{3}", "x \\neq 4", "x \\geq -2", "y > \\frac{1}{2}",
    "[2, 9]", "(-\\infty, 4)", "[-1, 1) \\cup (3, 5]", "\\varnothing", "\\emptyset", "\\mathbb{R}",
    "\\{1, 2, 3\\}", "\\left\\{ -\\frac{1}{2}, 4 \\right\\}", "\\left( 3, \\frac{\\pi}{2} \\right)",
    "(1, -2, 5)", "\\left[ \\frac{1}{4}, 2 \\right)", "\\langle 2, -1, 3 \\rangle",
    "\\begin{pmatrix} 1 & -2 \\\\ 0 & 3 \\end{pmatrix}", "\\begin{bmatrix} 4 \\\\ 5 \\\\ -6 \\end{bmatrix}",
    "\\det A = 7", "f(x) = 2x^3 - 5x + 1", "f^{-1}(x) = \\frac{x - 3}{2}", "g(4) = 11", "p(x) = x^2 + 7x + 10",
    "(x + 2)(x - 5)", "(2a - 3b)^2", "x^4 + 4", "a^2 b^3 c", "\\frac{x + 1}{x^2 - 1}", "3x^2 - 12",
    "x = 3, y = -1", "x = -\\frac{2}{3}", "m + n = 47", "a_n = 2n + 1", "S_{10} = 155", "k = 6",
    "\\binom{10}{4}", "\\dbinom{9}{2}", "6!", "5! \\cdot 3!", "\\frac{1}{36}", "\\frac{11}{216}",
    "45^\\circ", "120^{\\circ}", "\\sin \\theta", "\\cos \\frac{\\pi}{5}", "\\tan^{-1} 2", "\\arcsin \\frac{1}{3}",
    "\\sec^2 x", "\\cot 15^\\circ", "|3 - 4i|", "2 + 3i", "-1 - i\\sqrt{3}", "e^{i\\pi/4}", "\\overline{z}",
    "\\text{Monday}", "\\text{odd}", "\\textbf{(C)}", "\\mathrm{(B)}", "B", "\\$18.50", "35\\%", "12\\text{ cm}",
    "4\\text{ inches}", "60\\,\\text{mph}", "10110_2", "2A_{16}", "\\lfloor x \\rfloor", "\\lceil 7.2 \\rceil",
    "\\left| x - 2 \\right| < 5", "\\max(a, b)", "\\gcd(12, 18)", "\\operatorname{lcm}(4, 6)", "12 \\mid 36",
    "\\sum_{k=1}^{n} k^2", "\\prod_{i=1}^{5} i", "\\int_0^1 x^2 \\, dx", "\\lim_{x \\to 0} \\frac{\\sin x}{x}",
    "\\infty", "-\\infty", "\\frac{a}{b} + \\frac{c}{d}", "\\dfrac{3}{4}", "0.\\overline{3}", "1{,}000",
    "2^{10}", "3^{-2}", "10^{\\frac{1}{3}}", "x^{2/3}", "\\sqrt{x^2 + y^2}", "\\frac{\\sqrt{3}}{4} s^2",
    "y = 2x - 7", "y^2 = 4x", "\\frac{x^2}{9} - \\frac{y^2}{16} = 1", "(x - 1)^2 + (y + 2)^2 = 9", "2x + 3y = 6",
)  # fmt: skip


def warm_up() -> None:
    """Parses a few typical answers so that the first real items do not pay the parser's set-up."""
    for latex in _WARM_UP_LATEX:
        parse_latex(latex)
    # SymPy imports these on the first simplify/solve/set comparison (0.15-0.3 s in the first equation item a
    # worker meets); comparing four pairs of the kinds that reach them loads them before the clock starts.
    for gold, answer in _WARM_UP_PAIRS:
        verify(list(parse_latex(gold)), list(parse_latex(answer)), timeout_seconds=None)
    parse_latex.cache_clear()  # keep the parser's decision cache, not the examples


_WARM_UP_PAIRS = (
    ("x^2/5 + y^2/7 = 1", "7x^2 + 5y^2 = 35"),
    ("-3 \\le x \\le 8", "x \\in [-3, 8]"),
    ("(-\\infty, 1) \\cup (4, \\infty)", "(4, \\infty) \\cup (-\\infty, 1)"),
    ("[-6, 5]", "(-\\infty, -6] \\cup [5, \\infty)"),
)
