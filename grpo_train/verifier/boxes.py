"""The verifier's boxed answers, for grpo_train/verifier/extract.py (order and rules stated in docs/verifier.md):
the `\\boxed{..}` / `\\fbox{..}` of a response, side-by-side boxes joined into one answer, their agreement, and what
right around the last box leaves it no answer (a qualifier, a relation, or the box as an operand of another value).

Regexes and linear scans only: safe on a 1 MB response.
"""

from __future__ import annotations

import re

from grpo_train.verifier.hedge import SENTENCE_BREAK, retracts, same_answer
from grpo_train.verifier.text import MATH_SPAN, QUALIFIER_AFTER_BOX, QUALIFIER_BEFORE_BOX, matching_brace
from grpo_train.verifier.units import scaled, unit_conflict

MAX_BOXES = 64  # more boxes than this is spam, not an answer
BOX_START = re.compile(r"\\(?:boxed|fbox)\b\s*")
_BARE_BOX_ARG = re.compile(r"[^\s${}.,;]+")
# Between two boxes of one multi-part answer: spacing, commas, "and", delimiters, part labels.
_JOINER = re.compile(
    r"(?:\s|\$|,|;|:|\.|&|\\\\|\\[\[\]()]|(?<!\\)\\[,;:! ]|\\q?quad|\\text\s*\{|\}"
    r"|\band\b|\bfor\b|\bparts?\b|\brespectively\b|\(\s*(?:[a-h]|i{1,3}|iv|v|vi{0,3}|\d)\s*\))*",
    re.IGNORECASE,
)
# A bound or an approximation that is what the problem asks for: the greatest or least value, a rounded one.
_EXTREME_BOUND = re.compile(
    r"(?:at\s+(?:most|least)|no\s+(?:more|fewer|less)\s+than|max(?:imum)?|min(?:imum)?|or\s+(?:more|fewer|less))", re.I
)
_ASKS_EXTREME = re.compile(
    r"\b(?:greatest|largest|biggest|maxim\w*|most|least|smallest|fewest|minim\w*|max|min)\b", re.IGNORECASE
)
_APPROXIMATION = re.compile(r"approx\w*|about|around|roughly|rounded|≈|~", re.IGNORECASE)
_ASKS_ROUNDED = re.compile(r"\b(?:nearest|round\w*|approximat\w*|estimat\w*|decimal\s+places?|significant)\b", re.I)
# The last words of the qualifiers in QUALIFIER_BEFORE_BOX (a word that is none of them spares its regex).
_QUALIFIER_END_WORDS = (
    "than least most minimum maximum about around approx approx. approximately roughly nearly almost circa ca. to"
    " over under above below beyond exceeding of excess order range region ballpark neighborhood neighbourhood vicinity"
    " except for excluding besides but not any some between within maybe perhaps possibly probably likely presumably"
    " supposedly apparently allegedly est est. estimated estimate guess bound as like near less take minus negative by"
    " quite environ etwa ungefähr ungefaehr aproximadamente casi presque mindestens höchstens hoechstens moins plus de"
    " als never cannot n't isn't aren't wasn't"
)
_QUALIFIER_ENDS = frozenset(_QUALIFIER_END_WORDS.split())
_TAG = re.compile(r"</?[a-zA-Z][\w-]{0,20}>")  # "<answer>\\boxed{5}</answer>": markup, not a relation


def find_boxes(text: str) -> list[tuple[int, int, str]] | None:
    """The closed, non-empty `\\boxed{..}` / `\\fbox{..}` as (start, end, content); None if too many.
    A box around a single box is that box; any other box inside a box keeps it in the content."""
    starts = list(BOX_START.finditer(text))
    if len(starts) > MAX_BOXES:
        return None
    boxes: list[tuple[int, int, str]] = []
    for start in starts:
        if boxes and start.start() < boxes[-1][1]:
            continue  # a box inside a box: the outer one is read
        pos = start.end()
        if text.startswith("{", pos):
            close = matching_brace(text, pos)
            content = text[pos + 1 : close].strip() if close is not None else ""
            while (inner := BOX_START.match(content)) and matching_brace(content, inner.end()) == len(content) - 1:
                content = content[inner.end() + 1 : -1].strip()  # \boxed{\boxed{5}}
            if content:  # "\boxed{}" quotes the format
                boxes.append((start.start(), close + 1, content))
        elif bare := _BARE_BOX_ARG.match(text, pos):  # "\boxed 5"
            boxes.append((start.start(), bare.end(), bare.group()))
    return boxes


def _group_boxes(text: str, boxes: list[tuple[int, int, str]]) -> list[tuple[str, str]]:
    """Joins side-by-side boxes into multi-part answers: [(answer, text before this group)]."""
    groups: list[tuple[str, str]] = []
    parts, gap_before = [boxes[0][2]], text[: boxes[0][0]]
    for (_, prev_end, _), (start, _, content) in zip(boxes, boxes[1:], strict=False):
        gap = text[prev_end:start]
        if len(gap) <= 80 and _JOINER.fullmatch(gap):
            parts.append(content)
            continue
        groups.append((", ".join(dict.fromkeys(parts)), gap_before))
        parts, gap_before = [content], gap
    groups.append((", ".join(dict.fromkeys(parts)), gap_before))
    return groups


def boxed_answer(text: str, boxes: list[tuple[int, int, str]]) -> str | None:
    """The committed boxed answer: every box after the last retraction must agree, else None. A gap that
    retracts the boxes before it ("Wait, that is not right") but offers alternatives near them ("if that
    is wrong", "alternatively") is a hedge, not a retraction."""
    groups = _group_boxes(text, boxes)
    committed = max((i for i, (_, gap) in enumerate(groups) if i > 0 and retracts(gap)), default=0)
    answer = groups[-1][0]
    if BOX_START.search(answer):
        return None  # "\boxed{7\boxed{5}}": two answers in one
    return answer if all(same_answer(g, answer) for g, _ in groups[committed:]) else None


def box_qualified(text: str, box: tuple[int, int, str], problem: str | None) -> bool:
    """A qualifier, relation or negation right around the box: "at least $\\boxed{5}$", "$x > \\boxed{5}$", "not
    $\\boxed{5}$", "$\\boxed{5}$ or more", "$\\boxed{5}^{+}$", "$\\boxed{5}$?", "$\\boxed{5}$ is wrong"; unless it
    is what the problem asks for: "at most $\\boxed{2}$" for the greatest number, "\\approx \\boxed{32}" when asked to
    round (without the problem, what it asks is not known: such a bound is allowed)."""
    start, end, _ = box
    before = text[max(0, start - 80) : start]
    after = text[end : end + 80]  # a qualifier right after the box is short; a bounded window keeps the regex linear
    before = _TAG.sub(" ", before) if "<" in before else before
    words = before.rstrip(" \t\n$*_:([\\").rsplit(None, 4)[-4:]  # a qualifier ends within the last words
    tokens = [w.lower().strip(",;:.!?*-–—") for w in words]
    if any(t in _QUALIFIER_ENDS or t.endswith("ly") or (t and not (t.isalpha() and t.isascii())) for t in tokens):
        sentence = SENTENCE_BREAK.split(before)[-1]
        if not sentence.strip(" \t$*_`:([\\"):  # the box opens its line: a line before that is only a qualifier is
            core = before.rstrip(" \t\n$*_`:([\\")  # the box's ("At least\n\n$$\boxed{5}$$")
            line = SENTENCE_BREAK.split(core)[-1] + before[len(core) :]
            sentence = line if QUALIFIER_BEFORE_BOX.match(line) else sentence
        before = sentence
        qualifier = QUALIFIER_BEFORE_BOX.search(before) or QUALIFIER_AFTER_BOX.match(after)
    else:  # the word before the box cannot end a qualifier ("... is $\\boxed{5}$"): only what follows is read
        qualifier = QUALIFIER_AFTER_BOX.match(after)
    if qualifier is None:
        return False
    asked, word = MATH_SPAN.sub(" ", problem or ""), qualifier.group().strip(" $*_:([\\")
    if _EXTREME_BOUND.match(word) and (problem is None or _ASKS_EXTREME.search(asked)):
        return False
    return not (_APPROXIMATION.match(word) and (problem is None or _ASKS_ROUNDED.search(asked)))


# The box as an operand: what touches it makes another value. Before it: a number, an operator, a sign, or the
# opening of a command's argument ("1\\boxed{5}", "-\\boxed{5}", "\\frac{\\boxed{5}}{2}", "10^{\\boxed{5}}",
# "\\sqrt{\\boxed{25}}"); right after it: a power, index, factorial, product, quotient, relation to a value, arrow, a
# digit, a lone letter or an ordinal glued on ("\\boxed{5}^2", "\\boxed{5}!", "\\boxed{5}\\times 2", "\\boxed{5} = 7",
# "\\boxed{5} \\to 7", "\\boxed{5}0", "\\boxed{5}x", "\\boxed{5}th", "\\boxed{5}\\text{0}"). Markdown's * and _ around
# a box are emphasis, "= x" after it names it; a degree or percent sign stays the answer's (the comparison judges it).
_OPERAND_BEFORE = re.compile(
    r"(?:[\d+\-^/×·]|\\(?:times|cdot|div|pm|mp|neg|lnot)|(?:[\^_]\s*\{|\\(?:[dt]?frac|sqrt|[dt]?binom|log|ln|exp|sin|cos"
    r"|tan|overline|bar|hat|tilde|widetilde|vec|[bx]?cancel|sout|not)\s*(?:\[[^\]]{0,20}\])?\s*\{?))\s*$"
)
# What may stand between the box and an operator: spacing, an empty group, a closing bracket ("(\\boxed{5})^2").
_SPACER = (
    r"(?:\s|\\[,;:! ]|\\q?quad(?![a-zA-Z])|\\[hk](?:space|ern)\*?\s*\{[^{}]{0,20}\}|\{\s*\}|\\right\s*[)\]|.]|[)\]])*"
)
_OPERAND_AFTER = re.compile(
    rf"(?!{_SPACER}(?:\^\s*\{{?\s*\\circ|\\%|%))"
    rf"(?:{_SPACER}(?:[\^!/×·→]|_\s*[{{\d]|->|=(?!\s*[a-zA-Z](?![a-zA-Z]))"
    r"|\\(?:times|cdot|div|to|rightarrow|Rightarrow|implies|mapsto|not|neq?|ne)(?![a-zA-Z]))"
    r"|(?:\\!|\{\s*\}|\\hspace\s*\{[^{}]{0,20}\})*\$?(?:[0-9]|(?:st|nd|rd|th)\b|[a-zA-Z](?![a-zA-Z])"
    r"|\{\s*[0-9]|\\(?:text|mathrm|mathit)\s*\{(?:\s*[0-9]|(?:st|nd|rd|th)\b|[eE]\s*\}\s*[-+]?\d)))"
)
# Inside math, a term right after the box (past spacing) multiplies it: a command that is not text, spacing or a
# closing ("\\boxed{2}\\sqrt{3}", "\\boxed{2}\\pi", "\\boxed{5}\\frac12"; a residue's "\\pmod 7" is not), a lone letter
# that is not a unit ("\\boxed{5}\\, x", "\\boxed{5} i"; "\\boxed{5}\\,m" is metres) or a bracket.
_TERM_AFTER_BOX_IN_MATH = re.compile(
    rf"{_SPACER}(?:\\(?!(?:text\w*|math(?:rm|bf|it|sf)|operatorname|q?quad|right|end|[,;:! %]|\\|circ|degree|[lc]?dots"
    r"|hspace|kern|bigr?|Bigr?|[pb]?mod)(?![a-zA-Z]))[a-zA-Z]+|(?![mgshlLKCF])[a-zA-Z](?![a-zA-Z])|\("
    r"|\\math(?:rm|it)\s*\{\s*[ie]\s*\})"
)
# Outside math, arithmetic right after the closing "$": "$\\boxed{5}$ + 2", "$\\boxed{5}$ x 2", "to the power 2".
_ARITHMETIC_AFTER_BOX = re.compile(r"\s*\$+\s*(?:[+×÷^]|[x*/−-]\s*\d|to\s+the\s+(?:\w+\s+)?power\b)", re.I)
_INLINE_DOLLAR = re.compile(r"(?<![\\$])\$(?!\$)")
# A percent or degree sign right after the box is the answer's: "$\\boxed{5}\\%$" is 5%, "$\\boxed{30}^\\circ$" 30
# degrees.
SIGN_AFTER_BOX = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|\\%|%|°|(?:\$\s*)?(?:percent|per\s*cent)\b)", re.I)
_WORD_AFTER_BOX = re.compile(
    r"(?:[\s$*_(]|\\[,;:! ])*(?:\\(?:text|mathrm|textbf|mathbf)\s*\{\s*)?(?:\()?([a-zA-Z‰]+(?:\s+points?)?)"
)


def box_is_operand(text: str, box: tuple[int, int, str], problem: str | None) -> bool:
    """Whether something right around the box makes it part of another value (see _OPERAND_BEFORE / _AFTER), or a
    scale word or a unit right after it makes it another number ("$\\boxed{5}$ thousand", "$\\boxed{5}$ minutes"
    for "How many hours")."""
    start, end, content = box
    before = text[max(0, start - 40) : start]
    if _OPERAND_BEFORE.search(before) or _OPERAND_AFTER.match(text, end) or _ARITHMETIC_AFTER_BOX.match(text, end):
        return True
    if _in_math(text, start) and _TERM_AFTER_BOX_IN_MATH.match(text, end):
        return True
    word = _WORD_AFTER_BOX.match(text, end)
    if word is None:
        return False
    worded = f"1 {word.group(1)}"  # the word alone decides ("\\boxed{2k}" holds its own k)
    return scaled(worded, problem) or unit_conflict(worded, problem)


def _in_math(text: str, pos: int) -> bool:
    """Whether `pos` is inside math: an odd number of single "$" before it on its line, or an unclosed "\\(", "\\["
    or "$$" in the 400 characters before it."""
    line = text[text.rfind("\n", max(0, pos - 400), pos) + 1 : pos]
    if len(_INLINE_DOLLAR.findall(line)) % 2:
        return True
    window = text[max(0, pos - 400) : pos]
    opened = window.rfind("\\(") > window.rfind("\\)") or window.rfind("\\[") > window.rfind("\\]")
    return opened or window.count("$$") % 2 == 1
