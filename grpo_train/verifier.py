"""Answer verifier for GSM8K and MATH: extract -> normalise -> compare -> score.

    is_correct(response, gold, "gsm8k")       # -> bool, in this process
    judge(response, gold, "math", problem)    # -> Judgement(correct, formatted, answer, status, error)

Batches go through `grpo_train.verifier_pool` (worker processes, hard per-item timeout).

Extraction, in this order; the first that finds something wins:
  1. `\\boxed{...}` / `\\fbox{...}` (nested braces). Boxes side by side ("\\boxed{1}, \\boxed{2}") are one
     multi-part answer. Different boxed answers are a hedge and score 0, unless the text between them
     retracts the earlier ones ("Wait, ... \\boxed{B}": the last counts) or a "final answer is X"
     statement follows the last box (boxes on intermediate results).
  2. "The final answer is X" / "Final Answer: X" (the last one).
  3. "The answer is X" / "Answer: X" (the last one).
  4. GSM8K's "#### N".
  5. MATH only: a response that is just an answer ("$\\frac{1}{3}$"), or whose last sentence concludes
     ("Therefore, there are 12 sequences."). A response cut off mid-sentence concludes nothing.
A gold value met only mid-text (a guess, an intermediate step) is never enough. Format reward: the
answer was in \\boxed{} (GSM8K: or "#### N").

Comparison: plain numbers (thousands separators, `$`, `.0`, units, percent, degrees, mixed numbers)
and tuples, intervals, lists and matrices of them are compared exactly as fractions without SymPy:
1.5 equals 3/2, 0.33 does not equal 1/3. Everything else goes to Math-Verify (LaTeX -> SymPy: sets,
intervals, matrices, equations) after decimals are rewritten as exact fractions, so its 6-digit float
rounding cannot accept a rounded decimal. A value-equal answer that echoes the question's expression
("write 57/160 as a decimal" -> 57/160) is wrong: it is found in `problem` when given, else as the
left end of an equality chain in the response ("57/160 = ... = \\boxed{57/160}").

Safety: model text is never `eval`-ed or `sympify`-ed here; only Math-Verify's LaTeX parser sees it.
Answers that could blow SymPy up (power towers, huge exponents, sums, long text) are compared as
strings only, and every regex is linear on a 1 MB response. Math-Verify's own SIGALRM timeouts are off
(they fail outside a main thread); `judge_with_timeout` sets one timer per item instead, and the pool
kills a worker that overruns anyway (C code ignores signals).
"""

from __future__ import annotations

import functools
import re
import signal
import threading
from dataclasses import dataclass
from fractions import Fraction

from math_verify import LatexExtractionConfig, parse, verify

DATASETS = ("gsm8k", "math")
MAX_BOXES = 64  # more boxes than this is spam, not an answer
MAX_BOX_CHARS = 4000  # a "boxed answer" longer than this is not an answer
MAX_SYMPY_CHARS = 400  # longer answers are compared as strings only
SPAN_CHARS = 300  # how far after "the answer is" we read the answer
CLOSING_CHARS = 2000  # how much of an unmarked response's end we read for its closing sentence


@dataclass(frozen=True)
class Judgement:
    correct: bool  # the final answer equals the gold answer
    formatted: bool  # the answer was in \boxed{} (GSM8K: or "#### N")
    answer: str | None  # the extracted final answer as written; None when there is none
    status: str  # "ok", "no_answer", "timeout" or "error"
    error: str | None = None  # why it could not be scored (status "error" or "timeout")


class ItemTimeout(BaseException):
    """Raised by the per-item timer; a BaseException so that a library's `except Exception` cannot eat it."""


# ----------------------------------------------------------------------------------------------------
# Extraction

_BOX_START = re.compile(r"\\(?:boxed|fbox)\b\s*")
_BRACE_TOKEN = re.compile(r"\\.|[{}]", re.DOTALL)
_BARE_BOX_ARG = re.compile(r"[^\s${}.,;]+")
# Between two boxes of one multi-part answer: only spacing, commas, "and", math delimiters.
_JOINER = re.compile(r"(?:\s|\$|,|;|&|\\\\|(?<!\\)\\[,;:! ]|\\q?quad|\\text\{\s*(?:and|,)?\s*\}|\band\b)*")
_RETRACTION = re.compile(
    r"\b(?:wait|actually|oops|mistake|misread|not right|incorrect|wrong|re-?check\w*|re-?do\w*"
    r"|re-?calculat\w*|re-?consider\w*|correction|on second thought|let me (?:fix|correct))\b",
    re.IGNORECASE,
)
_FINAL_ANSWER = re.compile(r"final answer(?:\s+is)?[\s:*]*", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\banswer(?:\s+is|\s*:|(?=\s*(?:\$|\\[\[(])))[\s:*]*", re.IGNORECASE)
_HASH_ANSWER = re.compile(r"####[ \t]*")
_CHAT_TOKEN = re.compile(r"<\|[^|>]{1,40}\|>|</s>")  # "<|im_start|>user": the next turn, not the answer
_HOPE_TAIL = re.compile(r"I hope it is correct\.?$", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")
# A math span: display ($$, \[) may span lines, inline ($, \() may not.
_MATH_SPAN = re.compile(
    r"\$\$(.+?)(?<!\\)\$\$|\\\[(.+?)\\\]|(?<![\\$])\$([^$\n]+?)(?<!\\)\$|\\\(([^\n]+?)\\\)", re.DOTALL
)
_LAST_IS = re.compile(r".*(?:\b(?:is|are|equals)|=)\s+(?=\S)", re.DOTALL)
_NEGATION = re.compile(r"\b(?:not|never|cannot)\b|n't\b", re.IGNORECASE)
_CONCLUSION = re.compile(r"\b(?:therefore|thus|hence|so|finally|answer|total|result|is|are|equals)\b", re.I)
_NUMBER_TOKEN = re.compile(
    r"(?<![\w.^_])-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?(?:\s*(?:\\?%|percent\b))?(?![\w^])"
)


def _matching_brace(text: str, open_pos: int) -> int | None:
    """Index of the `}` closing the `{` at open_pos, or None when it is not closed nearby."""
    depth = 0
    for match in _BRACE_TOKEN.finditer(text[open_pos : open_pos + MAX_BOX_CHARS]):
        depth += {"{": 1, "}": -1}.get(match.group(), 0)
        if depth == 0:
            return open_pos + match.start()
    return None


def find_boxes(text: str) -> list[tuple[int, int, str]] | None:
    """The closed, non-empty `\\boxed{..}` / `\\fbox{..}` as (start, end, content); None if too many."""
    starts = list(_BOX_START.finditer(text))
    if len(starts) > MAX_BOXES:
        return None
    boxes: list[tuple[int, int, str]] = []
    for start in starts:
        if boxes and start.start() < boxes[-1][1]:
            continue  # a box inside a box: the outer one is the answer
        pos = start.end()
        if text.startswith("{", pos):
            close = _matching_brace(text, pos)
            if close is not None and text[pos + 1 : close].strip():  # "\boxed{}" quotes the format
                boxes.append((start.start(), close + 1, text[pos + 1 : close]))
        elif bare := _BARE_BOX_ARG.match(text, pos):  # "\boxed 5"
            boxes.append((start.start(), bare.end(), bare.group()))
    return boxes


def _group_boxes(text: str, boxes: list[tuple[int, int, str]]) -> list[tuple[str, str]]:
    """Joins side-by-side boxes into multi-part answers: [(answer, text before this group)]."""
    groups: list[tuple[str, str]] = []
    parts, gap_before = [boxes[0][2]], text[: boxes[0][0]]
    for (_, prev_end, _), (start, _, content) in zip(boxes, boxes[1:], strict=False):
        gap = text[prev_end:start]
        if _JOINER.fullmatch(gap):
            parts.append(content)
            continue
        groups.append((", ".join(dict.fromkeys(parts)), gap_before))
        parts, gap_before = [content], gap
    groups.append((", ".join(dict.fromkeys(parts)), gap_before))
    return groups


def _boxed_answer(text: str, boxes: list[tuple[int, int, str]]) -> str | None:
    """The committed boxed answer: every box after the last retraction must agree, else None."""
    groups = _group_boxes(text, boxes)
    committed = max((i for i, (_, gap) in enumerate(groups) if _RETRACTION.search(gap)), default=0)
    answer = groups[-1][0]
    return answer if all(_same_answer(g, answer) for g, _ in groups[committed:]) else None


def _same_answer(first: str, second: str) -> bool:
    """Whether two boxes of one response agree (same text, or same number: 15\\frac{39}{40} and 639/40)."""
    numbers = as_number(_clean(first)), as_number(_clean(second))
    same_number = None not in numbers and numbers[0].value == numbers[1].value
    return same_number or _canonical(first) == _canonical(second)


def _math_content(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)


def _span_after(text: str, pos: int) -> str:
    """The answer right after a marker: a math span, else the sentence's end ("... $V$ is 120." -> 120)."""
    rest = text[pos : pos + SPAN_CHARS].lstrip()
    if (span := _MATH_SPAN.match(rest)) is not None:
        return _math_content(span)
    rest = rest.removeprefix("$")  # "$90." is a price, not a math span
    end = _SENTENCE_END.search(rest)
    sentence = _HOPE_TAIL.sub("", (rest[: end.start()] if end else rest).rstrip())
    if (last_is := _LAST_IS.match(sentence)) is not None:
        sentence = sentence[last_is.end() :]
    spans = list(_MATH_SPAN.finditer(sentence))
    return _math_content(spans[0]) if len(spans) == 1 else sentence


def _last_marker_span(text: str, marker: re.Pattern[str]) -> str | None:
    last = None
    for last in marker.finditer(text):  # noqa: B007 - we want the last match
        pass
    span = _span_after(text, last.end()).strip() if last is not None else ""
    return span or None


def _closing_answer(text: str) -> str | None:
    """The answer of a MATH response without a marker: the whole response when it is one short math
    span or a few words ("$\\frac{1}{3}$", "28 percent"); else the last math span or the only number
    of a concluding last sentence ("Therefore, there are 12 sequences.", "The matrix is: $M$")."""
    if (chat := _CHAT_TOKEN.search(text)) is not None:
        text = text[: chat.start()]
    text = _HOPE_TAIL.sub("", text.strip()).strip()[-CLOSING_CHARS:]  # only the end can conclude
    if len(text) <= SPAN_CHARS and (whole := _MATH_SPAN.fullmatch(text.rstrip(".,"))) is not None:
        return _math_content(whole)
    if len(text) <= 40 and text.count(" ") <= 3:
        return text  # a bare answer such as "1/3" (garbage then fails to match)
    if not text.endswith((".", "$", "\\]", "\\)")):
        return None  # cut off mid-sentence
    boundaries = [m.end() for m in re.finditer(r"\.\s+|\n", text[:-1])]
    sentence = text[boundaries[-1] if boundaries else 0 :]
    prose = _MATH_SPAN.sub(" $ ", sentence)
    if _NEGATION.search(prose) or not (_CONCLUSION.search(prose) or re.search(r":\s*\$", prose)):
        return None
    if (last_is := _LAST_IS.match(sentence)) is not None:
        sentence = sentence[last_is.end() :]  # "... = 2/3 Therefore, the probability is 2/3."
    if spans := list(_MATH_SPAN.finditer(sentence)):
        return _math_content(spans[-1])
    numbers = {n.strip() for n in _NUMBER_TOKEN.findall(sentence)}
    return numbers.pop() if len(numbers) == 1 else None


def extract_answer(response: str, dataset: str) -> tuple[str | None, str]:
    """The final answer and its source: boxed, final_answer, answer_is, hash or closing.
    Source "conflict": different boxed answers; "none": no answer found."""
    boxes = find_boxes(response)
    if boxes is None:
        return None, "conflict"
    if boxes:
        if (answer := _boxed_answer(response, boxes)) is not None:
            return answer, "boxed"
        statement = _last_marker_span(response[boxes[-1][1] :], _FINAL_ANSWER)
        return (statement, "final_answer") if statement is not None else (None, "conflict")
    if _BOX_START.search(response):
        return None, "none"  # a \boxed{ that never closes: cut off in the answer
    for marker, source in (
        (_FINAL_ANSWER, "final_answer"),
        (_ANSWER_IS, "answer_is"),
        (_HASH_ANSWER, "hash"),
    ):
        if (span := _last_marker_span(response, marker)) is not None:
            return span, source
    if dataset == "math" and (answer := _closing_answer(response)) is not None:
        return answer, "closing"  # GSM8K asks for a marked answer: no guessing from its prose
    return None, "none"


def gold_answer(gold: str, dataset: str) -> str:
    """The gold answer: GSM8K's text after "####", the boxed answer of a MATH solution, else as is."""
    if dataset == "gsm8k" and "####" in gold:
        return gold.rsplit("####", 1)[1].strip()
    if (boxes := find_boxes(gold)) and (answer := _boxed_answer(gold, boxes)) is not None:
        return answer
    return gold.strip()


# ----------------------------------------------------------------------------------------------------
# Normalisation

_MATH_DELIMS = re.compile(r"^\s*(?:\$\$|\$|\\\[|\\\()\s*(.*?)\s*(?:\$\$|\$|\\\]|\\\))\s*$", re.DOTALL)
_GROUPED_COMMA = re.compile(r",\s*\\!\s*|\s*\{\s*,\s*\}\s*")  # 10,\!080 and 14{,}916 (not "32, 349")
_THIN_SPACE = re.compile(r"(?<!\\)\\[,;:!](?![a-zA-Z])")
_SPACING = re.compile(
    r"(?<!\\)\\(?:left|right|displaystyle|q?quad|(?:big|Big)g?[lr]?)(?![a-zA-Z])|(?<!\\)\\ "
)
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\circ|°|\\degree")
_CURRENCY = re.compile(r"\\\$|\$|€|£|¥|₹|\\euro\b|\\pounds\b")
_TEXT_WRAP = re.compile(r"\\(?:text|textbf|textit|mathrm|mbox|mathbf|operatorname)\s*\{([^{}]*)\}")
# A trailing unit: \text{...}, a word of 3+ letters (not a command), or a short unit that is not
# a lone variable ("2x" keeps its x).
_UNIT = r"\\(?:text|textbf|textit|mbox|mathrm)\s*\{[^{}]*\}|(?<![\\a-zA-Z])(?:[a-zA-Z]{3,}(?:\s+[a-zA-Z]+)*"
_UNIT += r"|cm|mm|km|kg|mg|ft|hr|lbs?|oz|yd|mi|m(?=\^))"
_TRAILING_UNIT = re.compile(rf"^(.*?\S)\s*(?:{_UNIT})(?:\^\{{?[23]\}}?)?$")
_MULTIPLIER = re.compile(r"\b(?:hundred|thousand|million|billion|trillion|dozen)s?\b", re.IGNORECASE)
_ASSIGNMENT = re.compile(r"^\s*([a-zA-Z](?:_\{?\w+\}?)?)\s*(?:=|\\in)\s*(?!=)")
_EQUALS = re.compile(r"(?<![<>!\\])=(?!=)")
_LIST_MARK = re.compile(r"[,;]|\\text|\bor\b|\band\b")
_CHOICE = re.compile(r"^\(?([A-Ea-e])\)?$")


def _strip_wrappers(latex: str) -> str:
    """Removes math delimiters, spacing commands, currency, degrees and trailing punctuation."""
    s = latex.strip()
    while (m := _MATH_DELIMS.match(s)) and m.group(1) != s:
        s = m.group(1)
    s = re.sub(r"\\[dtc]frac", r"\\frac", s).replace("∈", "\\in ")
    s = _SPACING.sub(" ", _THIN_SPACE.sub("", _GROUPED_COMMA.sub(",", s)))
    s = _DEGREES.sub("", s).replace("²", "^2").replace("³", "^3")
    s = _CURRENCY.sub("", s.replace("\\%", "%")).strip()
    if s.endswith((".", ",")) and not s.endswith(("..", "\\dots.", "\\ldots.")):
        s = s[:-1]  # sentence punctuation written inside the math: "$42.$"
    return s.strip()


def _clean(latex: str, keep_assignment: bool = False) -> str:
    """Normalised answer: wrappers, a trailing unit and (unless kept) a leading "x =" removed."""
    s = _strip_wrappers(latex)
    if not keep_assignment:
        s = _ASSIGNMENT.sub("", s, count=1)
        if _EQUALS.search(s) and not _LIST_MARK.search(s):
            s = _EQUALS.split(s)[-1].strip()  # "\frac{70}{9} = 7.78": the chain ends on the answer
    if (m := _TRAILING_UNIT.match(s)) and not _is_text_only(s) and not _MULTIPLIER.search(s):
        s = m.group(1).strip()
    return s


def _is_text_only(s: str) -> bool:
    return _TEXT_WRAP.sub("", s).strip() == "" or re.fullmatch(r"[A-Za-z ]+", s) is not None


def _canonical(latex: str) -> str:
    """A spelling-insensitive key: no spaces, `\\text{}` unwrapped, `_{8}` -> `_8`, `\\sqrt3` -> `\\sqrt{3}`,
    `\\frac34` -> `\\frac{3}{4}`, choice letters and words case-folded."""
    s = _TEXT_WRAP.sub(r"\1", _strip_wrappers(latex))
    s = re.sub(r"_\{(\w+)\}", r"_\1", s)
    s = re.sub(r"\\sqrt\s*(\w)", r"\\sqrt{\1}", s)
    s = re.sub(r"\\frac\s*(\w)", r"\\frac{\1}", s)
    s = re.sub(r"\\frac(\{[^{}]*\})\s*(\w)", r"\\frac\1{\2}", s)
    s = re.sub(r"\s+", "", s)
    if choice := _CHOICE.match(s):
        return choice.group(1).upper()
    return s.lower() if re.fullmatch(r"[A-Za-z.,;:'()-]+", s) else s


# ----------------------------------------------------------------------------------------------------
# Plain numbers

_NUMBER = re.compile(r"^-?(?:[1-9]\d{0,2}(?:,\d{3})+|[1-9]\d{0,2}(?: \d{3})+|\d+|(?=\.\d))(?:\.\d+)?$")
_FRACTION = re.compile(r"^(-?)\\frac\s*(?:\{\s*(\d+)\s*\}|(\d))\s*(?:\{\s*(\d+)\s*\}|(\d))$")
_SLASH_FRACTION = re.compile(r"^(-?)(\d+)\s*/\s*(\d+)$")
_MIXED_NUMBER = re.compile(r"^(-?)(\d+)\s*\\frac\s*\{(\d+)\}\s*\{(\d+)\}$")
_PERCENT = re.compile(r"\s*(?:%|\bpercent(?:age)?|\bpct)$")
_DECIMAL_COMMA = re.compile(r"^-?\d+,\d+$")
_ANY_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+")


@dataclass(frozen=True)
class PlainNumber:
    value: Fraction  # exact: "0.375" -> 3/8; a percent sign is dropped (28 answers a 28% gold)
    form: str  # "integer", "decimal" or "fraction"


def as_number(latex: str) -> PlainNumber | None:
    """A plain number or simple fraction ("1,000.5", ".5", "\\frac{3}{4}", "3/4", "2\\frac{1}{2}", "28%")."""
    s = _TEXT_WRAP.sub(r"\1", latex).strip()
    s = _PERCENT.sub("", s).strip().replace("\u2212", "-")
    if s.startswith("(") and s.endswith(")") and "," not in s:
        s = s[1:-1].strip()  # "( \frac{1}{3} )"
    if _NUMBER.match(s):
        form = "decimal" if "." in s else "integer"
        return PlainNumber(Fraction(s.replace(",", "").replace(" ", "")), form)
    if m := _MIXED_NUMBER.match(s):  # MATH's 15\frac{39}{40} is 15 + 39/40
        sign, whole, num, den = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        value = whole + Fraction(num, den) if den else None
    elif m := _FRACTION.match(s):
        sign, num, den = m.group(1), int(m.group(2) or m.group(3)), int(m.group(4) or m.group(5))
        value = Fraction(num, den) if den else None
    elif m := _SLASH_FRACTION.match(s):
        sign, num, den = m.group(1), int(m.group(2)), int(m.group(3))
        value = Fraction(num, den) if den else None
    else:
        return None
    return PlainNumber(-value if sign else value, "fraction") if value is not None else None


def _prose_number(answer: str) -> PlainNumber | None:
    """The one number of an answer written as a sentence ("Jane started 3 hours ago"), else None."""
    words = re.findall(r"(?<![\\\w])[A-Za-z]{3,}\b", _MATH_SPAN.sub(" ", answer))
    if len(words) < 2 or _NEGATION.search(answer):
        return None  # not prose ("2x + 3", "\sqrt{2} cm"), or a denial: "it is not 3"
    numbers = {n.strip() for n in _NUMBER_TOKEN.findall(answer)}
    return as_number(numbers.pop()) if len(numbers) == 1 else None


def _decimal_comma(latex: str) -> PlainNumber | None:
    """1000,99 read as 1000.99 (only against a decimal on the other side: "1,5" may be a list)."""
    return as_number(latex.replace(",", ".")) if _DECIMAL_COMMA.match(latex) else None


def _gsm8k_number(answer: str) -> PlainNumber | None:
    """GSM8K answers are numbers: the one number of "18 eggs", or the last of "3 + 5 = 8"."""
    s = _TEXT_WRAP.sub(r" \1 ", _strip_wrappers(answer))
    if number := as_number(_clean(s)):
        return number
    values = {as_number(n.rstrip(",")) for n in _ANY_NUMBER.findall(s.rsplit("=", 1)[-1])} - {None}
    return values.pop() if len(values) == 1 else None


def _answer_number(answer: str, answer_clean: str, dataset: str) -> PlainNumber | None:
    if _MULTIPLIER.search(answer):
        return None  # "5 million" is not 5
    if dataset == "gsm8k":
        return _gsm8k_number(answer)
    return as_number(answer_clean) or _prose_number(answer)


# ----------------------------------------------------------------------------------------------------
# Comparison

_INFINITY = {"\\infty": "inf", "+\\infty": "inf", "-\\infty": "-inf"}
_BRACKETED = re.compile(r"^([(\[])(.*)([)\]])$", re.DOTALL)
_MATRIX = re.compile(r"^\\begin\{([pbB]?matrix)\}(.*)\\end\{\1\}$", re.DOTALL)
_BASE_LITERAL = re.compile(r"^\w+_\{?\d+\}?$")
_EXPLOSIVE = re.compile(
    r"\^\s*\{[^{}]*\^"  # power towers: 9^{9^{9}}
    r"|\^\s*\{?\s*-?\d{4,}"  # huge powers: 2^{10000}
    r"|\d{3,}\s*!|\d{40,}"  # 1000!, 40-digit literals
    r"|\\(?:sum|prod|int|oint|lim)(?![a-zA-Z])"  # SymPy would try to evaluate them
)
_DECIMAL = re.compile(r"(?<![\d.])(\d*)\.(\d+)(?![\d.])")
_FREE_LETTER = re.compile(r"[a-df-hj-zA-Z]")  # a variable (e and i may be constants)


def _plain_elements(text: str, separator: str) -> list[Fraction | str] | None:
    """["1", "-\\frac{3}{4}", "\\infty"] -> exact values; None if any element is not a plain number."""
    elements: list[Fraction | str] = []
    for part in (p.strip() for p in re.split(separator, text)):
        number = as_number(part)
        if number is None and part not in _INFINITY:
            return None
        elements.append(number.value if number is not None else _INFINITY[part])
    return elements


def _structured_equal(answer: str, gold: str) -> bool | None:
    """Decides without SymPy for tuples, intervals and lists (brackets must agree, plain numbers are
    compared exactly), matrices of plain numbers, numbers in a base (52_8) and text answers.
    None when the shapes leave the decision to SymPy."""
    a, g = (re.sub(r"\s+", " ", x).strip() for x in (answer, gold))
    if (a_matrix := _MATRIX.match(a)) and (g_matrix := _MATRIX.match(g)):
        a_rows = [_plain_elements(row, "&") for row in a_matrix.group(2).split("\\\\")]
        g_rows = [_plain_elements(row, "&") for row in g_matrix.group(2).split("\\\\")]
        return None if None in a_rows or None in g_rows else a_rows == g_rows
    a_tuple, g_tuple = _BRACKETED.match(a), _BRACKETED.match(g)
    if a_tuple and g_tuple and not re.search(r"[()\[\]]", a_tuple.group(2) + g_tuple.group(2)):
        if a_tuple.group(1, 3) != g_tuple.group(1, 3):
            return False  # (a, b) is not [a, b]: open/closed ends, or a point against an interval
        a_parts, g_parts = re.split(r"[,;]", a_tuple.group(2)), re.split(r"[,;]", g_tuple.group(2))
        if len(a_parts) != len(g_parts):
            return False
        if all(_canonical(x) == _canonical(y) for x, y in zip(a_parts, g_parts, strict=True)):
            return True
        a_items, g_items = (
            _plain_elements(a_tuple.group(2), "[,;]"),
            _plain_elements(g_tuple.group(2), "[,;]"),
        )
        return None if a_items is None or g_items is None else a_items == g_items
    a_set, g_set = (re.sub(r"^\\\{(.*)\\\}$", r"\1", x) for x in (a, g))  # \{1, 2\} lists 1, 2
    if "," in a_set and "," in g_set and not (a_tuple or g_tuple):  # "3, 5, 7": a set of solutions
        a_items, g_items = _plain_elements(a_set, ","), _plain_elements(g_set, ",")
        return None if a_items is None or g_items is None else set(a_items) == set(g_items)
    if (_BASE_LITERAL.match(a) and _BASE_LITERAL.match(g)) or (_is_text_only(a) and _is_text_only(g)):
        return _canonical(a) == _canonical(g)
    return None


def _exact_decimals(latex: str) -> str:
    """Rewrites 0.375 as \\frac{375}{1000} so SymPy compares it exactly (no 6-digit float rounding)."""
    return _DECIMAL.sub(
        lambda m: f"\\frac{{{int(m.group(1) + m.group(2))}}}{{1{'0' * len(m.group(2))}}}", latex
    )


def _explosive(latex: str) -> bool:
    return len(latex) > MAX_SYMPY_CHARS or latex.count("{") > 60 or _EXPLOSIVE.search(latex) is not None


@functools.lru_cache(maxsize=4096)
def _parse_latex(latex: str) -> tuple:
    """Math-Verify's LaTeX -> SymPy parse of a bare answer (cached: a GRPO group shares its gold)."""
    config = [LatexExtractionConfig(boxed_match_priority=-1)]
    return tuple(parse(f"${latex.replace(chr(10), ' ')}$", extraction_config=config, parsing_timeout=None))


def _sympy_equal(gold: str, answer: str) -> bool:
    gold_parsed, answer_parsed = _parse_latex(gold), _parse_latex(answer)
    if not gold_parsed or not answer_parsed:
        return False
    return verify(list(gold_parsed), list(answer_parsed), timeout_seconds=None)


# Odd-valued examples of MATH's answer shapes; parsing them fills the LaTeX parser's (ANTLR) decision
# cache, which roughly doubles its speed on the items that follow.
_WARM_UP_LATEX = (
    "\\frac{37}{91}", "-\\frac{13}{29}\\sqrt{17}", "3\\sqrt[3]{19} + 7\\pi", "\\{-23, 41\\}",
    "(-\\infty, -\\tfrac{7}{13}] \\cup (19, \\infty)", "(37, -\\frac{5}{11})", "\\text{(E)}",
    "\\begin{pmatrix} 17 \\\\ -\\frac{3}{29} \\end{pmatrix}", "y = -\\frac{13}{7}x + 19", "97\\%",
    "x^2/37 + y^2/41 = 1", "-13 \\le t < 29", "\\sin 37^\\circ + \\cos^2 x", "a_{19} = 3^{n-7}",
    "1001_{7}", "t \\in [-13, 2.75)", "\\dfrac{\\sqrt{41}}{13} - e^{-7}", "\\log_3 29 + |x - 17|",
)  # fmt: skip


def warm_up() -> None:
    """Parses a few typical answers so that the first real items do not pay the parser's set-up."""
    for latex in _WARM_UP_LATEX:
        _parse_latex(latex)
    _parse_latex.cache_clear()  # keep the parser's decision cache, not the examples


def _is_echo(answer: str, gold: str, response: str, problem: str | None) -> bool:
    """A value-equal answer copied from the question ("write 57/160 as a decimal" -> 57/160)."""
    key = re.sub(r"\s+", "", answer)
    if problem is not None and len(key) > 1:
        squeezed_problem = re.sub(r"\s+", "", problem)
        return key in squeezed_problem and re.sub(r"\s+", "", gold) not in squeezed_problem
    # A worked chain "X = ... = answer" starts from the question's X; ending on X again is the echo.
    return len(key) > 3 and re.search(re.escape(key) + r"=(?!=)", re.sub(r"\s+", "", response)) is not None


def answers_match(
    answer: str, gold: str, dataset: str, response: str = "", problem: str | None = None
) -> bool:
    """Whether an extracted answer equals the gold answer (LaTeX or plain text)."""
    answer_lhs, gold_lhs = (_ASSIGNMENT.match(_strip_wrappers(x)) for x in (answer, gold))
    if answer_lhs and gold_lhs and answer_lhs.group(1) != gold_lhs.group(1):
        return False  # "y \in [0, 1]" does not answer "x \in [0, 1]"
    keep = "=" in gold and not (answer_lhs and gold_lhs)  # "D = (0, 1)" vs "D = (0, 1.5)": compare values
    answer_clean, gold_clean = _clean(answer, keep), _clean(gold, keep)
    if not answer_clean or not gold_clean:
        return False
    if (
        keep
        and not _EQUALS.search(answer_clean)
        and _canonical(answer_clean) == _canonical(_EQUALS.split(gold_clean)[-1])
    ):
        return True  # "11:21" for "V_1:V_2 = 11:21"
    gold_number, answer_number = as_number(gold_clean), _answer_number(answer, answer_clean, dataset)
    if gold_number is None and answer_number is not None and answer_number.form == "decimal":
        gold_number = _decimal_comma(gold_clean)  # a "0,111" gold against 0.111
    if answer_number is None and gold_number is not None and gold_number.form == "decimal":
        answer_number = _decimal_comma(answer_clean)
    if gold_number is not None and answer_number is not None:
        # A fraction for a decimal gold is fine unless it is the question's own ("57/160 as a decimal").
        fraction_for_decimal = gold_number.form == "decimal" and answer_number.form == "fraction"
        if fraction_for_decimal and _is_echo(answer_clean, gold_clean, response, problem):
            return False
        return answer_number.value == gold_number.value  # 28 for a 28% gold is fine (MATH convention)
    if _canonical(answer_clean) == _canonical(gold_clean):
        return True
    if answer_number is None and _is_echo(answer_clean, gold_clean, response, problem):
        return False
    if _MULTIPLIER.search(answer_clean) and not _MULTIPLIER.search(gold_clean):
        return False  # "6 \text{ million}" is not 6, and Math-Verify would drop the word as a unit
    if (structured := _structured_equal(answer_clean, gold_clean)) is not None:
        return structured
    if gold_number is not None and _FREE_LETTER.search(
        re.sub(r"\\[a-zA-Z]+", " ", _TEXT_WRAP.sub(" ", answer_clean))
    ):
        return False  # "4x" or "AZYUK2A" is not a number
    if _explosive(answer_clean) or _explosive(gold_clean):
        return False
    return _sympy_equal(_exact_decimals(gold_clean), _exact_decimals(answer_clean))


# ----------------------------------------------------------------------------------------------------
# Scoring


def judge(response: str, gold: str, dataset: str, problem: str | None = None) -> Judgement:
    """Scores one response against the gold answer, without a time limit (see judge_with_timeout)."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    gold_text = gold_answer(gold, dataset)
    if not gold_text:
        return Judgement(False, False, None, "error", "empty gold answer")  # a data bug, made visible
    answer, source = extract_answer(response, dataset)
    if answer is None:
        return Judgement(False, False, None, "no_answer")
    formatted = source == "boxed" or (dataset == "gsm8k" and source == "hash")
    return Judgement(answers_match(answer, gold_text, dataset, response, problem), formatted, answer, "ok")


def judge_with_timeout(
    response: str, gold: str, dataset: str, problem: str | None = None, timeout_s: float = 5.0
) -> Judgement:
    """`judge` under a SIGALRM timer (status "timeout" when it fires). Signals only work in a main
    thread; elsewhere this runs untimed. The timer re-fires every 0.25 s in case a library swallows it."""
    if threading.current_thread() is not threading.main_thread():
        return judge(response, gold, dataset, problem)

    def on_alarm(signum, frame):
        raise ItemTimeout

    previous = signal.signal(signal.SIGALRM, on_alarm)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s, 0.25)
            return judge(response, gold, dataset, problem)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # first thing: no alarm fires after this line
    except ItemTimeout:
        return Judgement(False, False, None, "timeout", f"over {timeout_s:g} s")
    finally:
        signal.signal(signal.SIGALRM, previous)


def is_correct(
    response: str, gold: str, dataset: str, problem: str | None = None, *, timeout_s: float = 5.0
) -> bool:
    """True when the response's final answer equals the gold answer of a GSM8K or MATH item
    (`dataset` "gsm8k" or "math"; `problem` lets echoes of the question be rejected)."""
    return judge_with_timeout(response, gold, dataset, problem, timeout_s).correct
