"""The verifier's extraction of the final answer from a response (order and rules in grpo_train/verifier.py).

Regexes and linear scans only: safe on a 1 MB response.
"""

from __future__ import annotations

import re

from grpo_train.verifier_text import (
    EQUALS,
    MATH_SPAN,
    NEGATION,
    NUMBER_TOKEN,
    QUALIFIER,
    QUALIFIER_AFTER_BOX,
    QUALIFIER_BEFORE_BOX,
    as_number,
    canonical,
    clean,
    gsm8k_number,
    matching_brace,
    math_content,
)

MAX_BOXES = 64  # more boxes than this is spam, not an answer
SPAN_CHARS = 300  # how far after "the answer is" we read the answer
CLOSING_CHARS = 2000  # how much of an unmarked response's end we read for its closing sentence

BOX_START = re.compile(r"\\(?:boxed|fbox)\b\s*")
MAX_STATEMENTS = 50  # statements of the answer compared with each other (each costs a few microseconds)
_BARE_BOX_ARG = re.compile(r"[^\s${}.,;]+")
# Between two boxes of one multi-part answer: spacing, commas, "and", delimiters, part labels.
_JOINER = re.compile(
    r"(?:\s|\$|,|;|:|\.|&|\\\\|\\[\[\]()]|(?<!\\)\\[,;:! ]|\\q?quad|\\text\s*\{|\}"
    r"|\band\b|\bfor\b|\bparts?\b|\brespectively\b|\(\s*(?:[a-h]|i{1,3}|iv|v|vi{0,3}|\d)\s*\))*",
    re.IGNORECASE,
)
_RETRACTION = re.compile(
    r"\b(?:wait|actually|oops|mistake|misread|not right|incorrect|wrong|re-?check\w*|re-?do\w*"
    r"|re-?calculat\w*|re-?consider\w*|correction|on second thought|on (?:further )?reflection|revis\w*"
    r"|let me (?:fix|correct))\b",
    re.IGNORECASE,
)
# Words that offer a value as one possibility among others: a hedge, never a retraction.
_HEDGE = re.compile(
    r"\b(?:if|unless|otherwise|in case|possib\w*|alternativ\w*|either|or|could|might|(?:maybe|perhaps)(?!\s+I\b))\b",
    re.IGNORECASE,
)
_UNSURE = re.compile(r"\b(?:probabl\w*|likely|sure|guess\w*|believe|think)\b", re.IGNORECASE)
_HEDGE_WORD = r"(?:alternatively|maybe|perhaps|possibly)"
_ALTERNATIVE = re.compile(rf"[\s$]*(?:(?:[.;,]|\()\s*(?:or\b|{_HEDGE_WORD}\b)|(?:or\s+)?{_HEDGE_WORD}\b)", re.I)
_ALTERNATIVE_AFTER_BOX = re.compile(
    # One character per repetition (a run of dots or dashes can be split only one way: no exponential backtracking).
    rf"[\s$*_]*(?:[.;,(\[?!…—–-][\s*_]*)*(?:\\text\s*\{{\s*)?"
    rf"(?:or\b|otherwise\b|else\b|unless\b|\\lor\b|\\vee\b|\|(?!\|)|{_HEDGE_WORD}\b"
    r"|(?:o|ou|oder|oppure|или)\b|或者?)",  # "or" in a few other languages
    re.I,
)
# In the box's sentence only: a line break is crossed when the line goes on in lowercase ("\\boxed{5}\n unless ..."); a
# new paragraph or sentence ("\n\nIf we check: 3 + 2 = 5") is later text. (The lookahead stops at the next line break,
# so a run of line breaks is read in linear time.)
_CONDITION_AFTER_BOX = re.compile(
    r"(?:[ \t$*_]|\n(?=[ \t$*_]*(?-i:[a-z,;(\[—–-])))*(?:[,;(\[—–-]\s*)?(?:\\text\s*\{\s*)?(?:if|unless|except)\b", re.I
)
# A bracket right after a box naming another value with a condition or a hedge: "\\boxed{5} (7 if counting Tom)".
_BRACKET_AFTER_BOX = re.compile(r"[\s$*_]*[(\[]([^()\[\]]{1,80})[)\]]")
_CONDITION = re.compile(
    r"\b(?:if|unless|otherwise|else|or|maybe|perhaps|possibly|alternativ\w*"
    r"|(?:an)?other\s+(?:possible\s+)?(?:answer|value|option|solution|possibility))\b",
    re.I,
)  # not "when" ("(when divided by 4)") nor a bare "other" ("(the other 2 were broken)")
# A lone value right after a box, bracketed or after a slash: "\\boxed{5} (7?)", "\\boxed{5} / 7".
_VALUE_AFTER_BOX = re.compile(r"[\s$*_]*(?:/|[(\[]\s*(?=[^()\[\]]{1,40}[)\]]))\s*(?:or\s+)?|\s*[,;]\s*(?=[-+]?\.?\d)")
# A later sentence offering another value: "It could also be 7.", "7 is also possible.", "Alternatively, 7."
_OFFERED = re.compile(
    r"\b(?:could|might|may|possibly|perhaps|maybe)\s+(?:also\s+|even\s+|just\s+|well\s+)?(?:be|equal)\s+"
    r"|\b(?:alternative|backup|second|other|another|different)(?:\s+possible)?\s+(?:answer|guess|option|possibility"
    r"|solution|value)s?\b[\s:=*]*(?:is\s+|would\s+be\s+)?"
    r"|\b(?:alternatively|or\s+(?:maybe|perhaps|possibly|else))\b[\s,:]*(?:it\s+(?:is|could\s+be)\s+)?",
    re.IGNORECASE,
)
_OFFERED_AFTER = re.compile(
    r"\s+(?:is|are|would\s+be|seems|might\s+be|could\s+be)\s+(?:also\s+|equally\s+)?(?:possible|plausible|valid"
    r"|correct|right|acceptable|an?\s+(?:option|possibility|alternative|candidate))\b"
    r"|\s+(?:also|too|equally|as\s+well)\s+(?:works?|fits?|counts?|holds?|applies|satisfies)\b",
    re.IGNORECASE,
)
# A later sentence giving another value under a condition: another reading of the question offered beside the
# answer ("If the question meant weekly, it would be 35.", "7 would be correct if the sequence started at 0.").
_CONDITION_WORD = re.compile(r"\b(?:if|unless|assuming|suppos\w+|had|were|otherwise|instead)\b", re.IGNORECASE)
_WOULD_GIVE = re.compile(
    r"(?:\bwould\s+(?:be|have|get|give|equal|make|become|need|cost|take|pay|earn|spend|total)"
    r"|\b(?:answer|result|total)\s+(?:is|becomes|will\s+be))\b[\s:,=]*(?:(?:only|just|exactly|then|the\s+answer)\s+)*"
    r"\$?\s*",
    re.IGNORECASE,
)
# ... or the value the conditional sentence ends on: "If he ate one, then 4.", "If we count Tom, it is 6."
_ENDS_ON_VALUE = re.compile(
    r"(?:,|\bthen\b)\s*(?:(?:it|that|this)\s+(?:is|becomes|will\s+be)\s+|it's\s+)?\$?\s*([-+]?\.?\d[\d,]*(?:\.\d+)?)"
    r"\$?\s*[.!]?\s*$",
    re.IGNORECASE,
)
_WOULD_BE_RIGHT = re.compile(r"\$?\s+would\s+be\s+(?:the\s+)?(?:correct|right|valid|answer)\b", re.IGNORECASE)
_DENIED = re.compile(
    r"\b(?:not|never|wrong|incorrect|too|impossible|invalid|extraneous|contradict\w*|cannot)\b|n't\b", re.IGNORECASE
)
_JOINED_VALUE = re.compile(
    r"\s*(?:[A-Za-z]+\s+){0,3}(?:or\b|\\text\s*\{\s*or|and\b|/|,|;|\|)\s*(?=\$|\\\(|[-+]?\.?\d)|\s*(?:or\b|\\text\s*\{\s*or)"
)
# A bound or an approximation that is what the problem asks for: the greatest or least value, a rounded one.
_EXTREME_BOUND = re.compile(
    r"(?:at\s+(?:most|least)|no\s+(?:more|fewer|less)\s+than|max(?:imum)?|min(?:imum)?|or\s+(?:more|fewer|less))", re.I
)
_ASKS_EXTREME = re.compile(
    r"\b(?:greatest|largest|biggest|maxim\w*|most|least|smallest|fewest|minim\w*|max|min)\b", re.IGNORECASE
)
_APPROXIMATION = re.compile(r"approx\w*|about|around|roughly|≈|~", re.IGNORECASE)
_ASKS_ROUNDED = re.compile(r"\b(?:nearest|round\w*|approximat\w*|estimat\w*|decimal\s+places?|significant)\b", re.I)
_RULED_OUT = re.compile(
    r"\b(?:not|never|cannot|extraneous|reject\w*|ruled?\s+out|discard\w*|invalid|impossible|violat\w*|would)\b|n't\b",
    re.IGNORECASE,
)
_ANY_VALUE = re.compile(r"\d|\$")
_INTERJECTION = re.compile(r"^[\s*_>]*(?:(?:hmm+|hm+|oh|ah|uh|well|no|so|but)\b[\s,.!]*)*", re.I)
_ARITHMETIC = re.compile(r"[-+*/×÷=<>]|\\(?:times|cdot|div)(?![a-zA-Z])")
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
_FILLER = re.compile(
    r"(?:[\s,:]*\b(?:it|is|it's|was|could|might|would|should|be|also|even|just|the|answer|value|possibly|maybe"
    r"|perhaps))*[\s,:*_}]*",
    re.IGNORECASE,
)
# The first value of a clause: a box, a math span or a number (whichever comes first).
_FIRST_VALUE = re.compile(
    r"\\(?:boxed|fbox)\s*\{([^{}]*)\}|(?<![\\$])\$([^$\n]+?)\$|(?<![\w.])(-?\d[\d,]*(?:\.\d+)?)(?![\w])"
)
_FINAL_ANSWER = re.compile(r"final answer(?:\s+is)?[\s:*]*", re.IGNORECASE)
_ANSWER_IS = re.compile(r"\banswer(?:\s+is|\s*:|(?=\s*(?:\$|\\[\[(])))[\s:*]*", re.IGNORECASE)
_HASH_ANSWER = re.compile(r"####[ \t]*")
# Markdown emphasis around a stated answer, with a full stop inside or outside it: "**4**.", "**4.**", "*4*".
_MARKDOWN_EDGES = re.compile(r"^[\s*_]*[*_](?=\S)|(?<=\S)\s*(?:[*_]+\s*\.?|\.\s*[*_]+)\s*$")
_CHAT_TOKEN = re.compile(r"<\|[^|>]{1,40}\|>|</s>")  # "<|im_start|>user": the next turn, not the answer
_HOPE_TAIL = re.compile(r"I hope it is correct\.?$", re.IGNORECASE)
_LIST_JOINER = re.compile(r"\s*(?:,\s*(?:and|or)?|and|or)\s*", re.IGNORECASE)
_SENTENCE_END = re.compile(r"\.(?=\s|$)|\n")
# A sentence also starts after displayed math: "... \\geq 2.$$ Therefore, it increases by 100%."
_CLOSING_BREAK = re.compile(r"\.\s+|\n|(?<=\$\$)\s+(?=[A-Z])|(?<=\\\])\s*(?=[A-Z])")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?;])\s+|\n")
_LAST_IS_WORD = re.compile(r".*\b(?:is|are|equals)\s+(?=\S)", re.DOTALL)
_LAST_IS = re.compile(r".*(?:\b(?:is|are|equals)|(?<![<>!\\])=)\s+(?=\S)", re.DOTALL)
_CONCLUSION = re.compile(
    r"\b(?:therefore|thus|hence|so|finally|answer|total|result|is|are|equals|find|found|obtain|conclude|solution)\b",
    re.IGNORECASE,
)


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


def _boxed_answer(text: str, boxes: list[tuple[int, int, str]]) -> str | None:
    """The committed boxed answer: every box after the last retraction must agree, else None. A gap that
    retracts the boxes before it ("Wait, that is not right") but offers alternatives near them ("if that
    is wrong", "alternatively") is a hedge, not a retraction."""
    groups = _group_boxes(text, boxes)
    committed = max((i for i, (_, gap) in enumerate(groups) if i > 0 and _retracts(gap)), default=0)
    answer = groups[-1][0]
    if BOX_START.search(answer):
        return None  # "\boxed{7\boxed{5}}": two answers in one
    return answer if all(_same_answer(g, answer) for g, _ in groups[committed:]) else None


def _retracts(gap: str) -> bool:
    """A gap retracts the boxes before it when a sentence of it says they are wrong without a condition
    or an alternative ("Wait, that is not right", not "if that is wrong") and the sentence that leads
    to the next box offers no alternative ("alternatively, it could be")."""
    if _RETRACTION.search(gap) is None:
        return False
    sentences = _SENTENCE_BREAK.split(gap)
    retracting = [s for s in sentences if _RETRACTION.search(s)]
    return any(not _HEDGE.search(s) for s in retracting) and not _HEDGE.search(sentences[-1])


def _same_answer(first: str, second: str) -> bool:
    """Whether two boxes of one response agree (same text, or same number: 15\\frac{39}{40} and 639/40)."""
    if first == second:
        return True  # one box, compared with itself by _boxed_answer
    numbers = as_number(clean(first)), as_number(clean(second))
    same_number = None not in numbers and numbers[0].value == numbers[1].value
    return same_number or canonical(first) == canonical(second)


def _alternative_follows(text: str, pos: int, answer: str, bare_or: bool) -> bool:
    """A different value offered right after the answer: "\\boxed{5} (or possibly 7)", "The answer is 5.
    Or 7.", "\\boxed{5}, or maybe it is 7" (after a box a plain "or" too: "\\boxed{5} or 7"). The value
    must follow the hedging word, with at most words such as "it could be" between: "Alternatively, we check
    3 x 6 = 18" offers nothing."""
    pattern = _ALTERNATIVE_AFTER_BOX if bare_or else _ALTERNATIVE
    if bare_or and (bracket := _BRACKET_AFTER_BOX.match(text, pos)) and _CONDITION.search(bracket.group(1)):
        values = [v for m in _FIRST_VALUE.finditer(bracket.group(1)) for v in m.groups() if v is not None]
        if any(not _same_answer(v.strip(), answer) for v in values):
            return True  # "\\boxed{5} (7 if counting Tom)", "\\boxed{5} (other possible answer: 7)"
    if bare_or and (condition := _CONDITION_AFTER_BOX.match(text, pos)) is not None:
        clause = _SENTENCE_END.split(text[condition.end() : condition.end() + SPAN_CHARS], maxsplit=1)[0]
        values = [v for m in _FIRST_VALUE.finditer(clause) for v in m.groups() if v is not None]
        if any(not _same_answer(v.strip(), answer) for v in values):
            return True  # "\\boxed{5} unless Tom ate 2": the answer under a condition, another value otherwise
    if bare_or and (match := _VALUE_AFTER_BOX.match(text, pos)) is not None and match.end() > pos:
        value = _FIRST_VALUE.match(text, match.end())
        if value is not None and re.match(r"\s*\??\s*[)\]]?\s*(?:[.,;$]|$)", text[value.end() : value.end() + 8]):
            return not _same_answer(next(g for g in value.groups() if g is not None), answer)
    if (match := pattern.match(text, pos)) is None:
        return False
    filler = _FILLER.match(text, match.end())
    value = _FIRST_VALUE.match(text, filler.end())
    return value is not None and not _same_answer(next(g for g in value.groups() if g is not None), answer)


def _offers_several(sentence: str) -> bool:
    """A sentence that offers two values with hedging words: "7, or maybe it is 5", "5 (or possibly 7)"."""
    prose = MATH_SPAN.sub(" $ ", sentence)
    values = len(MATH_SPAN.findall(sentence)) + len(NUMBER_TOKEN.findall(prose))
    hedged = re.search(r"\b(?:either|maybe|perhaps|possibly|alternatively)\b", prose, re.I)
    return values > 1 and hedged is not None


def _span_after(text: str, pos: int) -> str | None:
    """The answer right after a marker: a math span, else the sentence's end ("... $V$ is 120." -> 120).
    A sentence that qualifies its value ("approximately $5$") or joins two with "or" is returned whole,
    math unwrapped, for the comparison to judge; one that hedges ("7, or maybe 5") gives None."""
    rest = text[pos : pos + SPAN_CHARS].lstrip()
    end = _SENTENCE_END.search(rest, 1)
    sentence = _HOPE_TAIL.sub("", (rest[: end.start()] if end else rest).rstrip())
    if _offers_several(sentence):
        return None
    unwrapped = MATH_SPAN.sub(lambda m: math_content(m), sentence)
    if (span := MATH_SPAN.match(rest)) is not None:
        if _alternative_follows(rest, span.end(), math_content(span), bare_or=False):
            return None  # "The answer is $5$ (or $7$)."
        if end is not None and _alternative_follows(rest, end.start(), math_content(span), bare_or=False):
            return None  # "The answer is $5$. Or 7."
        # "$5$ or $7$", "$5$ apples or $7$ apples", "$5$ / $7$", "$5$ and $7$": a list, for the comparison to judge.
        joined = _JOINED_VALUE.match(rest, span.end())
        return unwrapped if joined is not None else math_content(span)
    sentence = sentence.removeprefix("$")  # "$90." is a price, not a math span
    sentence = _describing_clause_kept(sentence, _after_last_is(sentence))
    if end is not None and _alternative_follows(rest, end.start(), sentence, bare_or=False):
        return None  # "The answer is 5. Or 7."
    spans = list(MATH_SPAN.finditer(sentence))
    if len(spans) == 1 and not QUALIFIER.search(sentence) and not re.search(r"\bor\b", sentence):
        return math_content(spans[0])
    return MATH_SPAN.sub(lambda m: math_content(m), sentence)  # "$5$ or $7$" -> "5 or 7", a list


def _describing_clause_kept(sentence: str, tail: str) -> str:
    """The sentence whole when what follows its last "is" holds no value and only describes the answer ("18
    apples, which is the total"); the tail otherwise ("the number of ways is 12" -> 12; "18, which is wrong" ->
    no value: a retraction or a negation is not a description)."""
    if tail is sentence or MATH_SPAN.search(tail) or re.search(r"\d", tail):
        return tail
    if NEGATION.search(tail) or _RETRACTION.search(tail) or _HEDGE.search(tail) or _UNSURE.search(tail):
        return tail
    head = sentence[: len(sentence) - len(tail)]
    if "," not in head or re.search(r"\d", head[head.rindex(",") :]):
        return sentence  # "5, though 7 is also plausible": two values, for the comparison to judge
    return head[: head.rindex(",")].strip()  # "18 apples, which is ..." -> "18 apples"


def _after_last_is(sentence: str) -> str:
    """What follows the sentence's last "is" / "are" / "equals" / "=" outside math ("The roots are $x = 2$ or
    $x = -3$" -> "$x = 2$ or $x = -3$"); the sentence itself without one."""
    masked = MATH_SPAN.sub(lambda m: "$" + "_" * (len(m.group()) - 2) + "$", sentence)
    last_is = _LAST_IS.match(masked)
    if last_is is None:
        return sentence
    if not masked[: last_is.end()].rstrip().endswith("="):
        return sentence[last_is.end() :]
    # A prose equation ("The answer is 7 = 5.", "So 2 + 2 = 5."): the chain whole, from its left side, for the
    # equation rule to judge; its last right side alone would hide a false left side.
    word = _LAST_IS_WORD.match(masked)
    start = word.end() if word is not None else 0
    equals = masked.index("=", start)
    bracket = masked.rfind("(", start, equals)
    if bracket > start and masked[start:bracket].strip() and ")" not in masked[bracket:equals]:
        return sentence[start:bracket].strip()  # "18 (6 × 3 = 18)": the work in brackets checks the value before it
    dash = max(masked.rfind(" — ", start, equals), masked.rfind(" – ", start, equals))
    if dash > start and masked[start:dash].strip():
        return sentence[start:dash].strip()  # "18 — 3 + 15 = 18": a spaced dash sets the work apart, as brackets do
    return sentence[_left_side_start(masked, start, equals) :].strip()


def _left_side_start(text: str, start: int, equals: int) -> int:
    """Where the left side of the equation at `equals` begins: back over symbols, numbers and one-letter names
    ("So 2 + 2 = 5" -> "2 + 2"); the word before the "=" when there is nothing else ("total = 5")."""
    text = re.sub(r"\\[a-zA-Z]+", lambda m: "\\" + "#" * (len(m.group()) - 1), text)  # "\\cdot" is a symbol
    pos = equals
    while pos > start and not (text[pos - 1].isalpha() and pos - 2 >= start and text[pos - 2].isalpha()):
        pos -= 1
    if not re.search(r"[\w$]", text[pos:equals]):
        word = re.search(r"[A-Za-z']+\s*$", text[start:pos])
        pos = start + word.start() if word is not None else pos
    while pos < equals and text[pos] in " ,:;":
        pos += 1
    return pos


def _last_statement(text: str, marker: re.Pattern[str]) -> tuple[str, str | None, int]:
    """("none", None, 0) without the marker; ("hedge", None, 0) when its answer hedges, when an earlier statement
    of the same marker since the last retraction gives another value ("The answer is 5. The answer is 7.",
    as two boxes would), or when a retraction after it offers another ("The answer is 5. Wait, no, it might
    be 7."); else ("ok", answer, where the last statement starts)."""
    matches = list(marker.finditer(text))
    if not matches:
        return "none", None, 0
    if len(matches) > MAX_STATEMENTS:
        return "hedge", None, 0  # "The answer is 5." written thousands of times answers nothing
    span = _span_after(text, matches[-1].end())
    if span is None:
        return "hedge", None, 0
    answer = span.strip() or None
    for earlier, later in zip(reversed(matches[:-1]), reversed(matches[1:]), strict=True):
        if _retracts(text[earlier.end() : later.start()]):
            break
        stated = _span_after(text, earlier.end())
        if stated is not None and answer is not None and not _same_answer(stated.strip(), answer):
            return "hedge", None, 0
    if answer is not None and _retracted_after(text, matches[-1].end(), answer):
        return "hedge", None, 0
    return "ok", answer, matches[-1].start()


def _retracted_after(text: str, pos: int, answer: str) -> bool:
    """A sentence after the stated answer that retracts it and offers another value with a hedge ("Wait, no,
    it might be 7."); a check that only restates the work ("Wait, let me check: 2 + 3 = 5.") does not."""
    rest = text[pos:]
    end = _SENTENCE_END.search(rest, 1)
    return _offered_later(rest[end.end() :] if end else "", answer)


def _offered_later(rest: str, answer: str) -> bool:
    """A sentence that retracts the answer with a hedge and names another value ("Wait, no, it might be 7."), or
    that offers another value as possible ("It could also be 7.", "However, 7 is also possible.") or under a
    condition ("If the question meant weekly, it would be 35.")."""
    if not _ANY_VALUE.search(rest):
        return False  # nothing after the answer names a value (most responses end there)
    for sentence in _SENTENCE_BREAK.split(rest):
        values = []
        if _RETRACTION.search(sentence) and _HEDGE.search(sentence):  # "Wait, no, it might be 7."
            values = [v for m in _FIRST_VALUE.finditer(sentence) for v in m.groups() if v is not None]
        elif (
            (_RETRACTION.match(_INTERJECTION.sub("", sentence)) or _UNSURE.search(sentence))
            and _RETRACTION.search(sentence)
            and not _ARITHMETIC.search(sentence)
        ):
            # "Wait, 6.", "Hmm, actually I think it's 7.": a correction to another value, not a check ("Wait, let me
            # check: 12 - 3 = 9.")
            values = [v for m in _FIRST_VALUE.finditer(sentence) for v in m.groups() if v is not None][-1:]
        if not _RULED_OUT.search(sentence):  # "The other solution is 3, which is extraneous.": not offered
            for offer in _OFFERED.finditer(sentence):
                if (value := _FIRST_VALUE.match(sentence, offer.end())) is not None:
                    values.append(next(g for g in value.groups() if g is not None))
            for value in _FIRST_VALUE.finditer(sentence):
                if _OFFERED_AFTER.match(sentence, value.end()):
                    values.append(next(g for g in value.groups() if g is not None))
        if _CONDITION_WORD.search(sentence) and not _DENIED.search(sentence):  # another reading's value
            values += [
                _first_group(value)
                for would in _WOULD_GIVE.finditer(sentence)
                if (value := _FIRST_VALUE.match(sentence, would.end())) is not None
            ]
            values += [
                _first_group(value)
                for value in _FIRST_VALUE.finditer(sentence)
                if _WOULD_BE_RIGHT.match(sentence, value.end())
            ]
            # Its last 60 characters: a search of the whole sentence from every comma would be quadratic.
            values += [ending.group(1)] if (ending := _ENDS_ON_VALUE.search(sentence.rstrip()[-60:])) else []
        if any(not _same_answer(v.strip(), answer) for v in values):
            return True
    return False


def _first_group(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)


def _closing_answer(text: str) -> str | None:
    """The answer of a MATH response without a marker: the whole response when it is one short math
    span or a few words ("$\\frac{1}{3}$", "28 percent"); else the last math span or the only number
    of a concluding last sentence ("Therefore, there are 12 sequences.", "The matrix is: $M$")."""
    if (chat := _CHAT_TOKEN.search(text)) is not None:
        text = text[: chat.start()]
    text = _HOPE_TAIL.sub("", text.strip()).strip()[-CLOSING_CHARS:]  # only the end can conclude
    if len(text) <= SPAN_CHARS and (whole := MATH_SPAN.fullmatch(text.rstrip(".,"))) is not None:
        return math_content(whole)
    if len(text) <= 40 and text.count(" ") <= 3:
        return text  # a bare answer such as "1/3" (garbage then fails to match)
    if not text.endswith((".", "$", "\\]", "\\)")):
        return None  # cut off mid-sentence
    boundaries = [m.end() for m in _CLOSING_BREAK.finditer(text[:-1])]
    sentence = text[boundaries[-1] if boundaries else 0 :]
    prose = MATH_SPAN.sub(" $ ", sentence)
    if NEGATION.search(prose) or not (_CONCLUSION.search(prose) or re.search(r":\s*\$", prose)):
        return None
    if _offers_several(sentence):
        return None
    whole, sentence = sentence, _after_last_is(sentence)  # "... = 2/3 Therefore, the probability is 2/3."
    if spans := list(MATH_SPAN.finditer(sentence)):
        between = [sentence[a.end() : b.start()] for a, b in zip(spans, spans[1:], strict=False)]
        if between and all(_LIST_JOINER.fullmatch(gap) for gap in between):
            return ", ".join(math_content(span) for span in spans)  # "The roots are $2$ and $-3$."
        return math_content(spans[-1])
    if EQUALS.search(sentence):
        return sentence.rstrip(".")  # "Therefore, 3 + 4 = 7.": the chain, for the equation rule
    numbers = {n.strip() for n in NUMBER_TOKEN.findall(sentence)}
    if not numbers and len(spans := list(MATH_SPAN.finditer(whole))) == 1:
        return math_content(spans[0])  # "Therefore $x \\geq 5$ is the solution."
    return numbers.pop() if len(numbers) == 1 else None


def _box_qualified(text: str, box: tuple[int, int, str], problem: str | None) -> bool:
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
        before = _SENTENCE_BREAK.split(before)[-1]
        qualifier = QUALIFIER_BEFORE_BOX.search(before) or QUALIFIER_AFTER_BOX.match(after)
    else:  # the word before the box cannot end a qualifier ("... is $\\boxed{5}$"): only what follows is read
        qualifier = QUALIFIER_AFTER_BOX.match(after)
    if qualifier is None:
        return False
    asked, word = MATH_SPAN.sub(" ", problem or ""), qualifier.group().strip(" $*_:([\\")
    if _EXTREME_BOUND.match(word) and (problem is None or _ASKS_EXTREME.search(asked)):
        return False
    return not (_APPROXIMATION.match(word) and (problem is None or _ASKS_ROUNDED.search(asked)))


def extract_answer(response: str, dataset: str, problem: str | None = None) -> tuple[str | None, str]:
    """The final answer and its source: boxed, final_answer, answer_is, hash or closing (`problem` tells which
    bounds around a box answer it).
    Source "conflict": different boxed answers, a hedge, or statements of the answer in different forms (a box,
    "the final answer is", "the answer is", "####") that give different numbers; "none": no answer found."""
    lowered = response.lower()
    answer, source, pos = _extract(response, lowered, dataset, problem)
    if answer is not None and source != "closing" and _contradicted(response, lowered, answer, pos):
        return None, "conflict"  # "$\\boxed{5}$. The final answer is 7.", "The answer is 7.\n#### 5"
    if answer is not None and source != "boxed":
        answer = _MARKDOWN_EDGES.sub("", answer) or None  # "The answer is **4**.", "**Answer: 4**": emphasis
    return answer, source


def _extract(response: str, lowered: str, dataset: str, problem: str | None) -> tuple[str | None, str, int]:
    """extract_answer without the agreement of statements, and where the answer's statement starts."""
    boxes = find_boxes(response)
    if boxes is None:
        return None, "conflict", 0
    if boxes:
        if (answer := _boxed_answer(response, boxes)) is not None:
            end = boxes[-1][1]
            if _alternative_follows(response, end, answer, bare_or=True) or _offered_later(response[end:], answer):
                return None, "conflict", 0  # "$\\boxed{5}$ (or 7)", "$\\boxed{5}$. But it could be 7."
            after = response[end:]
            final = _last_match(after, _FINAL_ANSWER) if "final answer" in lowered[end:] else None
            stated = _span_after(after, final.end()) if final is not None and _states(after, final) else ""
            # A final-answer statement after the last box settles it ("... is the final answer." states nothing).
            settled = stated is None or (bool(stated.strip(" .")) and not _agree(stated, answer))
            if not settled and not _box_qualified(response, boxes[-1], problem):
                return answer, "boxed", boxes[-1][0]
        _, statement, start = _last_statement(response[boxes[-1][1] :], _FINAL_ANSWER)
        return (statement, "final_answer", boxes[-1][1] + start) if statement is not None else (None, "conflict", 0)
    if BOX_START.search(response):
        return None, "none", 0  # a \boxed{ that never closes: cut off in the answer
    for marker, source in ((_FINAL_ANSWER, "final_answer"), (_ANSWER_IS, "answer_is"), (_HASH_ANSWER, "hash")):
        found, span, start = _last_statement(response, marker)
        if found == "hedge":
            return None, "conflict", 0  # "The answer is 7, or maybe it is 5."
        if span is not None:
            return span, source, start
    if dataset == "math" and (answer := _closing_answer(response)) is not None:
        return answer, "closing", len(response)  # GSM8K asks for a marked answer: no guessing from its prose
    return None, "none", 0


def _last_match(text: str, marker: re.Pattern[str]) -> re.Match[str] | None:
    last = None
    for last in marker.finditer(text):  # noqa: B007 - only the last one is wanted
        pass
    return last


_STATED = re.compile(r"\bis\b|:", re.IGNORECASE)  # "the final answer is", "Final answer:"
_VALUE_START = re.compile(r"[\\$]|[-+]?\.?\d")
_STATEMENT_KINDS = ((_FINAL_ANSWER, "final answer"), (_ANSWER_IS, "answer"), (_HASH_ANSWER, "####"), (BOX_START, "\\"))


def _contradicted(response: str, lowered: str, answer: str, pos: int) -> bool:
    """Whether the last statement of another kind (a box, "the final answer is", "the answer is", "####") gives
    another number than the answer, or hedges, unless a retraction stands between it and the answer's statement
    ("The answer is 8. Wait, I miscounted ... \\boxed{7}" is a revision, C3). Only numbers are compared: two
    spellings of one expression are not told apart here."""
    value = None
    for marker, key in _STATEMENT_KINDS:
        if key not in lowered:
            continue  # most responses state their answer once: a substring test spares the regex
        other = _last_match(response, marker)
        if other is None or other.start() <= pos < other.end() or abs(other.start() - pos) < 2:
            continue
        if other.end() <= pos and not response[other.end() : pos].strip(" \t$*:([\\"):
            continue  # the marker of the answer's own statement ("The answer is $\\boxed{5}$")
        if marker is BOX_START and pos <= other.start() < pos + len(answer) + 40:
            continue  # the box of the answer's own statement
        if other.start() < pos and (_retracts(response[other.end() : pos]) or (
            marker is BOX_START and _FINAL_ANSWER.match(response, pos)
        )):  # fmt: skip
            continue  # revised (C3), or boxes settled by a final-answer statement after them
        if marker is BOX_START:
            close = matching_brace(response, other.end()) if response.startswith("{", other.end()) else None
            if close is None:
                continue
            stated: str | None = response[other.end() + 1 : close]
        elif marker is _HASH_ANSWER:  # GSM8K's "#### N" is a line holding a number, not a markdown heading
            stated = response[other.end() :].split("\n", 1)[0]
            if as_number(clean(stated)) is None:
                continue
        else:
            if marker is _FINAL_ANSWER and not _states(response, other):
                continue  # "Before giving the final answer, we check 3 cases." states nothing
            stated = _span_after(response, other.end())
            if stated is not None and NEGATION.match(stated.lstrip()):
                continue  # "The answer is not 9, since ..." rules a value out
        if value is None and (value := _plain_value(answer)) is None:
            return False
        if stated is None:
            return True  # "\\boxed{5}. The final answer is 5 or maybe 7."
        stated_value = _plain_value(BOX_START.sub("", stated))
        if stated_value is not None and stated_value != value:
            return True
    return False


def _states(text: str, marker: re.Match[str]) -> bool:
    """Whether a "final answer" marker states one: "the final answer is", "Final answer:", or a value right after."""
    return _STATED.search(marker.group()) is not None or _VALUE_START.match(text, marker.end()) is not None


def _agree(stated: str | None, answer: str) -> bool:
    """Whether a statement gives the answer: the same text or the same number."""
    if stated is None:
        return False
    value = _plain_value(BOX_START.sub("", stated))
    return _same_answer(stated.strip(), answer) or (value is not None and value == _plain_value(answer))


def _plain_value(text: str) -> object | None:
    """The number a statement gives ("18", "\\$18.00", "Janet makes $18 a day"), else None."""
    number = as_number(clean(text)) or (gsm8k_number(text) if re.search(r"\d", text) else None)
    return number.value if number is not None else None


def gold_answer(gold: str, dataset: str) -> tuple[str, str | None]:
    """The gold answer and what is wrong with it (None when it can be scored): GSM8K's text after
    "####", the boxed answer of a MATH solution (its boxes must agree), else the text as is."""
    if dataset == "gsm8k" and "####" in gold:
        return gold.rsplit("####", 1)[1].strip(), None
    if BOX_START.search(gold):
        boxes = find_boxes(gold) or []
        answer = _boxed_answer(gold, boxes) if boxes else None
        if answer is None or any(not _same_answer(box[2], boxes[0][2]) for box in boxes):  # "\\boxed{1}\\boxed{2}"
            return "", "its boxed answers are empty, unclosed or disagree"
        return answer, None
    return gold.strip(), None
