"""The last value a response commits to for the asked quantity, where no answer marker says so (rules stated in
docs/verifier.md; used by grpo_train/verifier/extract.py):

- the words that name the asked quantity: the question's words from its interrogative on, up to a clause that gives
  data ("What is her salary after the raise?" -> {salary}; "How much does she make every day?" -> {make, day});
- an unmarked last sentence that states that quantity's value ("... so her salary is $57,500."), or a response that
  is only a value ("**18**");
- a last line that is an equation of the variable the question asks for ("Solve for $x$" ... "$x = 5$");
- the last of several labelled boxes when its label, and no other, names the asked quantity ("Width: \\boxed{4},
  area: \\boxed{32}" for "What is the area?").

Each refuses where it must guess: a sentence with a hedge, a negation, a condition or two values, a false chain
("3 + 2 = 7"), a label that hedges or that two boxes share. Regexes over the response's last characters: linear.
"""

from __future__ import annotations

import functools
import re

from grpo_train.verifier.form import exact_value
from grpo_train.verifier.hedge import HEDGE, RETRACTION, SENTENCE_END, UNSURE, same_answer
from grpo_train.verifier.spelling import number_words_as_digits
from grpo_train.verifier.text import APPROXIMATE, MATH_SPAN, NEGATION, QUALIFIER, as_number, math_content

CLOSING_CHARS = 2000  # how much of an unmarked response's end is read
QUESTION_CHARS = 300  # the question is at the end of a problem

_STOPWORD_LIST = (
    "how many much what which who whose whom is are was were be been being does do did will would can could should"
    " shall may might must has have had the a an of in on at to for from by and or his her their its our your my he"
    " she they it we you this that these those there total number amount value find compute calculate determine all"
    " each every per than more less altogether together now then left remaining get got give end up out"
)
_STOPWORDS = frozenset(_STOPWORD_LIST.split())
_INTERROGATIVE = re.compile(
    r"\b(?:how\s+(?:many|much|long|far|old|fast)|what|which|find|compute|calculate|determine)\b", re.IGNORECASE
)
# Where the question's asked phrase ends and its data begins: "What is the area of a rectangle with length 8 ...".
_DATA_CLAUSE = re.compile(r"\b(?:with|if|when|given|after|before|that|which|who|where|assuming|since|because)\b|[,;:$]",
                          re.IGNORECASE)  # fmt: skip
_WORD = re.compile(r"[A-Za-z]+")


_PER_PERIOD = {"daily": "day", "hourly": "hour", "weekly": "week", "monthly": "month", "yearly": "year",
               "annually": "year", "annual": "year", "nightly": "night"}
# A question about money ("How much ...", "... in dollars") is named by a currency sign on the value ("$18").
_MONEY = re.compile(r"\bhow\s+much\b|\b(?:dollars?|money|cost\w*|price\w*|pa(?:y|id)\w*|spen[dt]\w*|earn\w*|profit"
                    r"|worth|charge\w*|sav(?:e|es|ed|ings?)|budget|cents?)\b", re.IGNORECASE)  # fmt: skip
_CURRENCY = re.compile(r"[$€£¥₹]")


def _stem(word: str) -> str:
    word = word.lower()
    word = _PER_PERIOD.get(word, word)
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


@functools.lru_cache(maxsize=256)
def asked_words(problem: str | None) -> frozenset[str]:
    """The stems of the words naming what the question asks for; empty without a problem or an interrogative.
    Cached: a GRPO group shares its problem."""
    if not problem:
        return frozenset()
    tail = problem[-QUESTION_CHARS:]
    question = re.split(r"(?<=[.!?])\s+(?=\S)", tail.strip())[-1]
    start = _INTERROGATIVE.search(question)
    if start is None:
        return frozenset()
    phrase = question[start.end() :]
    data = _DATA_CLAUSE.search(phrase)
    phrase = phrase[: data.start()] if data is not None else phrase
    words = {_stem(w) for w in _WORD.findall(phrase) if w.lower() not in _STOPWORDS and len(w) > 2}
    return frozenset(words | ({"$"} if _MONEY.search(question) else set()))


def _names_asked(text: str, asked: frozenset[str]) -> bool:
    if "$" in asked and _CURRENCY.search(text):
        return True  # "The total is $18." for "How much does she make?"
    return any(_stem(w) in asked for w in _WORD.findall(MATH_SPAN.sub(" ", text)))


# ----------------------------------------------------------------------------------------------------
# The unmarked last sentence (GSM8K)

_HOPE_TAIL = re.compile(r"I hope it is correct\.?$", re.IGNORECASE)
_EMPHASIS = re.compile(r"\*\*|__|`|(?<![\d\s])[*_]|[*_](?![\d\s])")  # markdown's, not a product's "9 * 2"
_BARE = re.compile(r"^[\s$]*(?:\\\(|\\\[)?\s*[-+]?\$?\s*[-+]?\.?\d[\d,]*(?:\.\d+)?\s*(?:\\\)|\\\])?[\s$.]*$")
_SENTENCES = re.compile(r"(?<=[.!?])\s+(?=\S)|\n")
# A clause break inside the last sentence: the value is stated in its last clause ("She gets $7,500 more, so her
# salary is $57,500.").
_CLAUSES = re.compile(r",(?!\d{3})\s*|;\s*|\s+(?:so|thus|hence|therefore|and)\s+", re.IGNORECASE)
_NUMBER = re.compile(r"(?<![\w.])\$?\s*-?(?:[1-9]\d{0,2}(?:[ '’]\d{3})+(?![\d,.])|\d[\d,]*(?:\.\d+)?)(?![\w])")
# An arithmetic chain ending on "= value": "3 + 2 = 5", "9 * $2 = $18", "50000*0.15=7500".
_CHAIN = re.compile(
    r"((?:(?:\$\s*)?\d[\d,]*(?:\.\d+)?\s*(?:[-+*/×÷x]|\\times|\\cdot|\\div)\s*)+\$?\s*\d[\d,]*(?:\.\d+)?)\s*=\s*\$?\s*"
    r"(-?\d[\d,]*(?:\.\d+)?)"
)
_HEDGED = re.compile(r"\b(?:either|maybe|perhaps|possibly|approximately|about|around|roughly|nearly|almost)\b", re.I)


def closing_statement(text: str, problem: str | None) -> str | None:
    """A GSM8K response's answer without a marker: the whole response when it is one value ("**18**", "$18"), else
    the last clause of a complete last sentence that names the asked quantity and gives one value, its true chains
    read as their results ("Janet makes 9 * $2 = $18 every day." -> "Janet makes $18 every day"). None otherwise."""
    text = without_check(_HOPE_TAIL.sub("", text.strip()).strip()[-CLOSING_CHARS:])
    bare = _EMPHASIS.sub("", text)
    if len(bare) <= 40 and _BARE.match(bare):
        return bare.strip(" $.")
    if len(bare) <= 80 and "\n" not in bare and (result := _results(bare.rstrip(". "))) and _BARE.match(result):
        return result.strip(" $.")  # a response that is only a true chain: "3 + 2 = 5"
    asked = asked_words(problem)
    if asked and (labelled := _LABEL_LINE.match(bare.rstrip().rsplit("\n", 1)[-1])) is not None:
        label = labelled.group(1)
        hedged = HEDGE.search(label) or UNSURE.search(label) or NEGATION.search(label) or RETRACTION.search(label)
        if not hedged and (_GENERIC_LABEL.fullmatch(label.strip()) or _names_asked(label, asked)):
            return labelled.group(2).strip()  # "Total = $18", "Daily earnings: $18"
    if not asked or not bare.rstrip().endswith((".", "!")):
        return None  # cut off mid-sentence, or nothing names the asked quantity
    sentence = _SENTENCES.split(bare.rstrip())[-1].rstrip(".! ")
    if NEGATION.search(sentence) or HEDGE.search(sentence) or UNSURE.search(sentence) or _HEDGED.search(sentence):
        return None
    if RETRACTION.search(sentence) or "?" in sentence:
        return None
    reduced = _results(number_words_as_digits(sentence))  # "so she earns eighteen dollars"
    if reduced is None or "=" in reduced:
        return None  # a false chain: its left side would be hidden
    clauses = [clause for clause in _CLAUSES.split(reduced) if _NUMBER.search(clause)]
    if not clauses or len(_NUMBER.findall(clauses[-1])) != 1 or not _names_asked(clauses[-1], asked):
        return None
    clause = clauses[-1]
    if QUALIFIER.search(clause) or APPROXIMATE.search(clause):
        return None  # "her salary is over $57,500" (the last clause with a value is the last value)
    return clause[_NUMBER.search(clause).start() :].strip()  # the value and its words: "$57,500", "5 minutes"


# A last line that labels one value: "Total = $18", "Result: 18", "Daily earnings: $18" (a label naming the asked
# quantity, or a generic one).
_LABEL_LINE = re.compile(
    r"^\s*([A-Za-z][A-Za-z' ]{0,40}?)\s*[:=]\s*(\$?\s*-?\d[\d,]*(?:\.\d+)?(?:\s+[A-Za-z]+){0,2})\s*[.!]?\s*$"
)
_GENERIC_LABEL = re.compile(r"(?:the\s+)?(?:final\s+)?(?:result|total|solution)", re.IGNORECASE)
# A check of the work at the end: "Check: 9 * 2 = 18.", "Verification: 2(5) + 3 = 13 ✓" (one line, after a line
# break or a sentence); it is not the answer, unless it offers another value or retracts.
_CHECK_TAIL = re.compile(
    r"(?:\n|(?<=[.!?])[ \t])[*_#>\s]*(?:check(?:ing)?|verif(?:y|ying|ication)|double[- ]check\w*)\b[^\n]{0,300}$",
    re.IGNORECASE,
)
_CHECK_OFFERS = re.compile(r"\b(?:or|also|too|alternative\w*|another|either|maybe|perhaps|might|could|instead)\b", re.I)


def without_check(text: str) -> str:
    """The text without a last line or sentence that checks the work ("So x = 5.\n\nCheck: 2(5) + 3 = 13."), when
    that check neither offers another value nor retracts; the text itself otherwise."""
    check = _CHECK_TAIL.search(text, max(0, len(text) - 400))
    if check is None or RETRACTION.search(check.group()) or _CHECK_OFFERS.search(check.group()):
        return text
    return text[: check.start()].rstrip()


def _results(sentence: str) -> str | None:
    """The sentence with each true chain written as its result; None when a chain is false."""
    parts, pos = [], 0
    for chain in _CHAIN.finditer(sentence):
        left = re.sub(r"[$,\s]", "", chain.group(1)).replace("x", "*").replace("×", "*").replace("÷", "/")
        value, result = exact_value(left), as_number(chain.group(2).replace(",", ""))
        if value is None or result is None or value != result.value:
            return None
        parts += [sentence[pos : chain.start()], "$" if "$" in chain.group() else "", chain.group(2)]
        pos = chain.end()
    return "".join(parts) + sentence[pos:]


# ----------------------------------------------------------------------------------------------------
# The asked variable's equation (MATH)

_ASKED_NAME = re.compile(r"^\s*([a-zA-Z](?:_\{?\w{1,3}\}?)?)\s*$")
_EQUATION_LINE = re.compile(r"^\s*(?:\$\$?|\\\[|\\\()?\s*([a-zA-Z](?:_\{?\w{1,3}\}?)?)\s*=\s*([^=\n]+?)\s*"
                            r"(?:\$\$?|\\\]|\\\))?\s*\.?\s*$")  # fmt: skip


def asked_variables(problem: str | None) -> frozenset[str]:
    """The variables the question asks for: its math spans that are one name ("Solve for $x$." -> {"x"})."""
    if not problem:
        return frozenset()
    question = re.split(r"(?<=[.!?])\s+(?=\S)", problem[-QUESTION_CHARS:].strip())[-1]
    if not re.search(r"\b(?:find|solve|what|compute|determine|value)\b", question, re.IGNORECASE):
        return frozenset()
    names = (_ASKED_NAME.match(math_content(span)) for span in MATH_SPAN.finditer(question))
    bare = _BARE_ASKED.findall(MATH_SPAN.sub(" ", question))  # "Solve for x: ...", "find the value of y"
    return frozenset([name.group(1) for name in names if name is not None] + bare)


# A variable named without math: "Solve for x: ...", "find the value of y" (not the article: "Find a number ...").
_BARE_ASKED = re.compile(r"\b(?:solve\s+for|find|value\s+of|what\s+is)\s+(?![aAI]\b)([a-zA-Z])(?![\w'])", re.I)


def asked_equation(text: str, problem: str | None) -> str | None:
    """The last line when it is an equation of an asked variable to one value ("$x = 5$"), as "x = 5"; else None."""
    names = asked_variables(problem)
    if not names:
        return None
    lines = [line for line in without_check(text.rstrip()[-CLOSING_CHARS:]).split("\n") if line.strip()]
    equation = _EQUATION_LINE.match(_EMPHASIS.sub("", lines[-1])) if lines else None
    if equation is None or equation.group(1) not in names or re.search(r"\\pm|\bor\b|,|\\(?:lor|vee)", lines[-1]):
        return None  # another name, or two values ("x = 5 or x = 7", "x = \\pm 5")
    before = lines[-2] if len(lines) > 1 else ""
    if HEDGE.search(before) or UNSURE.search(before) or _HEDGED.search(before) or NEGATION.search(before):
        return None  # "Perhaps\n$x = 5$", "It is not\n$x = 5$"
    return f"{equation.group(1)} = {equation.group(2).rstrip('.').strip()}"


# ----------------------------------------------------------------------------------------------------
# Labelled boxes

_LABEL = re.compile(r"[A-Za-z][A-Za-z' ]{0,60}")


def labelled_box(text: str, boxes: list[tuple[int, int, str]], problem: str | None) -> bool:
    """Whether boxes that disagree are labelled answers to several quantities, the last the asked one: every box has
    a label (the words before it on its line, since the previous box), the last label names the asked quantity and
    no earlier label does, and no label hedges, retracts or negates ("Width: \\boxed{4}, area: \\boxed{32}")."""
    if len(boxes) < 2 or not (asked := asked_words(problem)):
        return False
    labels, previous = [], 0
    for start, end, _ in boxes:
        line_start = text.rfind("\n", previous, start) + 1
        label_text = text[max(previous, line_start, start - 80) : start]
        words = " ".join(_LABEL.findall(label_text.replace("\\", " \\")))
        if not words.strip() or re.search(r"\\[a-zA-Z]", label_text.replace("\\boxed", "")):
            return False
        if HEDGE.search(words) or RETRACTION.search(words) or UNSURE.search(words) or NEGATION.search(words):
            return False
        labels.append(words)
        previous = end
    return _names_asked(labels[-1], asked) and not any(_names_asked(label, asked) for label in labels[:-1])



# ----------------------------------------------------------------------------------------------------
# The clause after a box

# "or" a value, with only words between the box and it ("candies, or 6"): "has a remainder of 1 when divided by 2, 3, or
# 6" lists the data of another quantity.
_OR_VALUE = re.compile(
    r"[^\d.\n$]{0,40}?\b(?:or|otherwise|alternatively|else)\b[^\d.\n$]{0,20}?"
    r"(?:(?<![\\$])\$([^$\n]+?)\$|(?<![\w.])(-?\d[\d,]*(?:\.\d+)?))"
)


def other_value_in_clause(text: str, end: int, answer: str) -> bool:
    """Whether the rest of the box's sentence offers another value after an "or" ("\\boxed{5} candies, or 6 if the
    rest are shared"); a clause about another quantity ("\\boxed{5} candies, with a remainder of 3") does not."""
    rest = text[end : end + 200]  # the "or" within 40 characters of the box, its value within 20 of it
    stop = SENTENCE_END.search(rest)
    clause = rest[: stop.start()] if stop is not None else rest
    offered = _OR_VALUE.match(clause.lstrip("$ \t"))  # past the box's own math
    if offered is None:
        return False
    return not same_answer(offered.group(1) or offered.group(2).replace(",", ""), answer)
