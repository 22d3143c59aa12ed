"""Units and scale words on an answer: a scale word ("5 thousand", "5 dozen", "5 squared") makes another number
unless the problem asks in that scale ("How many dozen ..."), and a unit of the same kind as the one the problem
asks for, but another unit ("5 minutes" when it asks "How many hours"), makes another value, and so does a rate ("5 per
day") when a "how many" question asks for none.

Regexes over the answer and the problem's last characters only; every one is linear.
"""

from __future__ import annotations

import re
from fractions import Fraction

from grpo_train.verifier.text import MULTIPLIER, SCALE_AFTER_NUMBER, TEXT_WRAP, as_number, clean

_SCALE_WORD = re.compile(r"[a-z]+", re.IGNORECASE)
# The unit a problem asks in: the word after "how many", "how much", "number of", "in", "into" or "to", in its last
# characters ("How many dozen", "How much more", "in thousands of dollars", "convert to degrees").
_ASKED_IN = re.compile(r"\b(?:how\s+many|how\s+much|number\s+of|in|into|to)\s+([a-z]+)", re.IGNORECASE)
ASKED_CHARS = 300  # the question is at the end of a problem

# Units by kind: a unit of one kind on the answer when the problem asks in another unit of that kind is another value.
_UNITS = {
    "time": {"second": "s sec secs second seconds", "minute": "min mins minute minutes", "hour": "h hr hrs hour hours",
             "day": "day days", "week": "wk week weeks", "month": "month months", "year": "yr yrs year years"},
    "length": {"mm": "mm millimeter millimeters millimetre millimetres", "cm": "cm centimeter centimeters centimetre"
               " centimetres", "m": "m meter meters metre metres", "km": "km kilometer kilometers kilometre kilometres",
               "inch": "inch inches", "foot": "ft foot feet", "yard": "yd yds yard yards", "mile": "mi mile miles"},
    "mass": {"mg": "mg milligram milligrams", "g": "g gram grams", "kg": "kg kilogram kilograms kilo kilos",
             "pound": "lb lbs pound pounds", "ounce": "oz ounce ounces", "ton": "ton tons tonne tonnes"},
    "volume": {"ml": "ml milliliter milliliters millilitre millilitres", "l": "l liter liters litre litres",
               "gallon": "gal gallon gallons", "quart": "qt quart quarts", "pint": "pt pint pints", "cup": "cup cups"},
    "money": {"cent": "cent cents", "dollar": "dollar dollars"},
    "angle": {"degree": "degree degrees deg", "radian": "rad rads radian radians"},
}  # fmt: skip
_KIND_OF = {spelling: (kind, unit) for kind, units in _UNITS.items() for unit, spellings in units.items()
            for spelling in spellings.split()}  # fmt: skip
# The unit right after an answer's last number: a word, or a degree sign.
_UNIT_AFTER_NUMBER = re.compile(r"\d(?:\s|\\[,;: ])*(?:\^\s*\{?\s*(\\circ)\s*\}?|(°|\\degree\b)|([a-zA-Z]+)\b)")


def asked_scale_words(problem: str | None) -> set[str]:
    """The words the problem asks in ("dozen" for "How many dozen eggs ..."), lowercased, without a plural s."""
    if not problem:
        return set()
    return {m.group(1).lower().removesuffix("s") for m in _ASKED_IN.finditer(problem[-ASKED_CHARS:])}


# A comparison word on the answer ("5 more", "5 fewer") is the amount asked when the question (the problem's last
# sentence) is about a difference or what is still missing: "How many apples does she still need to buy?" -> "She
# needs to buy 5 more apples."
_COMPARISON_WORDS = ("more", "less", "fewer", "extra", "short")
_ASKS_DIFFERENCE = re.compile(
    r"\b(?:more|less|fewer|extra|short|than|still|need\w*|left|remain\w*|additional|differ\w*|increase\w*"
    r"|decrease\w*)\b",
    re.IGNORECASE,
)


def _last_sentence(problem: str) -> str:
    """The question: the problem's last sentence (within its last ASKED_CHARS characters)."""
    return re.split(r"(?<=[.!?])\s+(?=\S)", problem[-ASKED_CHARS:].strip())[-1]


def scaled(answer: str, problem: str | None) -> bool:
    """Whether a scale word or suffix makes the answer's number another number: "5 thousand" is not 5, "5 dozen"
    is 5 only when the problem asks in dozens, "5 more" only when it asks for a difference or what is missing."""
    found = [m.group() for pattern in (MULTIPLIER, SCALE_AFTER_NUMBER) for m in pattern.finditer(answer)]
    if not found:
        return False
    asked = asked_scale_words(problem)
    if problem and _ASKS_DIFFERENCE.search(_last_sentence(problem)):
        asked |= set(_COMPARISON_WORDS)
    return any(
        not (words := _SCALE_WORD.findall(word)) or words[-1].lower().removesuffix("s") not in asked for word in found
    )


def unit_conflict(answer: str, problem: str | None) -> bool:
    """Whether the answer's unit is of the kind the problem asks in but another unit ("5 minutes" for "How many
    hours ...", "5 radians" for "in degrees", "$5^\\circ$" for "in radians")."""
    if not problem:
        return False
    matches = list(_UNIT_AFTER_NUMBER.finditer(TEXT_WRAP.sub(r" \1 ", answer)))
    if not matches:
        return False
    match = matches[-1]  # the last number's unit
    word = "degree" if match.group(1) or match.group(2) else match.group(3).lower()
    if word not in _KIND_OF:
        return False
    kind, unit = _KIND_OF[word]
    asked = {_KIND_OF[w] for m in _ASKED_IN.finditer(problem[-ASKED_CHARS:]) if (w := m.group(1).lower()) in _KIND_OF}
    return any(asked_kind == kind for asked_kind, _ in asked) and (kind, unit) not in asked


# A rate on the answer ("5 per day", "5 apples each", "5 apiece", "5 a week") is another quantity than the count a
# "how many" question asks for, unless the question (the problem's last sentence) asks for a rate: "per", "each",
# "every", "apiece", "a day", "an hour", "daily", "weekly", ..., "rate", "average", "fast", "speed" or a "/" in it.
# Other questions ("How much does one pencil cost?", "What is his hourly wage?") are not judged by it.
_RATE_SEPARATOR = r"(?:[\s}]|\\(?:text|mathrm)\s*\{)"  # one space, a closing brace or a text command's opening
# The number's last digit, at most two words, then the rate word: no two runs of spaces meet, so the search is linear.
_RATE_AFTER_NUMBER = re.compile(
    rf"\d(?!\d)(?:{_RATE_SEPARATOR}*[a-zA-Z]+(?![a-zA-Z])){{0,2}}{_RATE_SEPARATOR}*"
    r"(?:per|each|apiece|every|an?\s+(?:day|week|month|year|hour|minute|second|person|piece|head))\b",
    re.IGNORECASE,
)
_HOW_MANY = re.compile(r"\bhow\s+many\b", re.IGNORECASE)
_ASKS_RATE = re.compile(
    r"\b(?:per|each|every|apiece|rate|average|fast|speed|pace|daily|weekly|monthly|yearly|annually|hourly|nightly"
    r"|an?\s+(?:day|week|month|year|hour|minute|second|person|piece|head))\b|/",
    re.IGNORECASE,
)


def rate_not_asked(answer: str, problem: str | None) -> bool:
    """Whether the answer gives a rate ("5 per day") where a "how many" question asks for no rate."""
    if not problem or _RATE_AFTER_NUMBER.search(answer) is None:
        return False
    question = _last_sentence(problem)
    return _HOW_MANY.search(question) is not None and _ASKS_RATE.search(question) is None


# A number and one scale word, a value a human reads as one number: "1.2 billion km", "$57.5k", "5 dozen" (a currency
# sign before it, words after it). Read only against a gold of that value: "5 thousand" is 5000, never 5.
_SCALES = {"thousand": 1000, "k": 1000, "million": 10**6, "billion": 10**9, "bn": 10**9, "trillion": 10**12,
           "dozen": 12}  # fmt: skip
_SCALED_NUMBER = re.compile(
    r"^\s*([$€£]?)\s*(-?\d+(?:\.\d+)?)\s*(thousand|k|million|billion|bn|trillion|dozen)(?![a-zA-Z])((?:\s+[a-zA-Z]+){0,3})"
    r"\s*\.?\s*$",
    re.IGNORECASE,
)


def scaled_to_gold(answer: str, gold: str) -> str | None:
    """The answer with its number and scale word written as the gold's number ("1.2 billion km" -> "1200000000 km"
    for the gold 1200000000) when they are that value; None otherwise (the scale makes another number)."""
    match = _SCALED_NUMBER.match(TEXT_WRAP.sub(r" \1 ", answer))
    gold_number = as_number(clean(gold))
    if match is None or gold_number is None:
        return None
    value = Fraction(match.group(2)) * _SCALES[match.group(3).lower()]
    if value != gold_number.value:
        return None
    return f"{match.group(1)}{clean(gold)}{match.group(4)}"
