"""Other spellings of a plain number, for grpo_train/verifier/compare.py (rules stated in docs/verifier.md):
scientific notation ("1.2 \\times 10^{6}", "1.2e6") and the thousands separators of other locales (an apostrophe:
"1'200'000"; dots: "1.200.000"; with a decimal comma: "1.234,5", "1 234,5"), read only where a human reads one
number and only one. Ambiguous spellings stay as text.py reads them: "1,234" groups thousands (1234), "1.234" is a
decimal (1.234), "1,5" is a decimal comma only against a decimal gold (text.decimal_comma).

Number words: an English cardinal from zero to 999,999,999 ("twenty-five", "one hundred and five", "minus
seven") is read as its digits where the text has no digit (number_words_as_digits), so the rest of the verifier judges
"18 dollars" for "eighteen dollars" and refuses "5 or 7" for "five or seven". Not read: ordinals and fractions
("fifth", "one half"), an operation in words ("ten minus three", "two point five"), a run that is not one cardinal
("five twenty"), "one" after a determiner ("the blue one"), other languages.
Regexes on the whole (short) answer only: linear.
"""

from __future__ import annotations

import re
from fractions import Fraction

from grpo_train.verifier.text import PlainNumber

# A factor from 1 up to 10 (scientific notation's own form) times a power of ten: "1.2 \\times 10^{6}", "1.2 × 10^6",
# "1.2\\cdot 10^{-3}", "1.2*10^6"; or e-notation "1.2e6", "1.2E+06".
_SCIENTIFIC = re.compile(
    r"^([-+]?)([1-9](?:\.\d+)?)\s*(?:\\times|\\cdot|×|·|\*|x)\s*10\s*\^\s*(?:\{\s*([-+]?\d{1,3})\s*\}|(\d))$"
)
# Superscript digits of a power of ten written in Unicode: "1.2 × 10⁹", "1.2 × 10⁻³".
_SUPERSCRIPT = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹⁻⁺", "0123456789-+")
_SUPERSCRIPT_POWER = re.compile(r"10([⁻⁺]?[⁰¹²³⁴⁵⁶⁷⁸⁹]{1,3})$")
_E_NOTATION = re.compile(r"^([-+]?)([1-9](?:\.\d+)?)[eE]([-+]?\d{1,3})$")
# Thousands grouped by apostrophes (Swiss: "1'200'000", "1’200’000"), by two or more dots ("1.200.000"; one dot group
# is a decimal: "1.200"), or by dots or spaces before a decimal comma ("1.234,5", "1 234,5").
_APOSTROPHES = re.compile(r"^[-+]?[1-9]\d{0,2}(?:['’]\d{3})+(?:\.\d+)?$")
_DOTS = re.compile(r"^[-+]?[1-9]\d{0,2}(?:\.\d{3}){2,}$")
_GROUPS_BEFORE_COMMA = re.compile(r"^[-+]?[1-9]\d{0,2}(?:(\.|\s)\d{3})(?:\1\d{3})*,\d+$")
# A decimal comma followed by two zeros, as a price is written in Europe ("18,00 €"): two digits after a comma are no
# thousands group, and zeros make no other value. Other decimals after one comma stay ambiguous ("1,5": a list?).
_ZERO_CENTS = re.compile(r"^[-+]?\d{1,3}(?:(?:[.\s'’]\d{3})*|\d*),00$")


def spelled_number(answer: str) -> PlainNumber | None:
    """The number a cleaned answer spells in scientific notation or with another locale's separators, else None."""
    s = answer.strip()
    if (power := _SUPERSCRIPT_POWER.search(s)) is not None:
        s = f"{s[: power.start()]}10^{{{power.group(1).translate(_SUPERSCRIPT)}}}"
    if m := _SCIENTIFIC.match(s) or _E_NOTATION.match(s):
        exponent = int((m.group(3) or m.group(4)) if m.re is _SCIENTIFIC else m.group(3))
        value = Fraction(m.group(2)) * Fraction(10) ** exponent
        return _plain(-value if m.group(1) == "-" else value)
    if _APOSTROPHES.match(s):
        return _plain(Fraction(s.replace("'", "").replace("’", "")))
    if _DOTS.match(s):
        return _plain(Fraction(s.replace(".", "")))
    if _ZERO_CENTS.match(s):
        return _plain(Fraction(re.sub(r"[.\s'’]", "", s[:-3])))
    if _GROUPS_BEFORE_COMMA.match(s):
        return _plain(Fraction(re.sub(r"[.\s]", "", s).replace(",", ".")))
    return None


_ONES = {w: i for i, w in enumerate(("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"))}
_TEENS = {w: i + 10 for i, w in enumerate(("ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
                                           "seventeen", "eighteen", "nineteen"))}  # fmt: skip
_TENS = {w: 10 * (i + 2) for i, w in enumerate(("twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty",
                                                "ninety"))}  # fmt: skip
_SCALES = {"thousand": 1000, "million": 1_000_000}
_WORD = "|".join(sorted([*_ONES, *_TEENS, *_TENS, "hundred", *_SCALES], key=len, reverse=True))
NUMBER_WORD = re.compile(rf"\b(?:{_WORD})\b", re.IGNORECASE)  # one English number word: "seven", "twenty"
# A run of number words: words apart by spaces or a hyphen, "and" inside ("one hundred and five"); a sign word before.
_RUN = re.compile(
    rf"(?<![\\\w-])(?:(minus|negative)\s+)?((?:a\s+(?=hundred|thousand|million))?(?:{_WORD})"
    rf"(?:(?:\s*-\s*|\s+(?:and\s+)?)(?:{_WORD}))*)(?![\w-])",
    re.I,
)
MAX_NUMBER_WORDS = 20  # 999,999,999 with every "and" is 20 words; a longer run is not read
# Words that make a number word another value: an ordinal or a fraction ("fifth", "one half", "two thirds"), an
# operation or a decimal point in words, a sign word not in front of the number ("ten minus three").
_NOT_CARDINAL = re.compile(
    r"\b(?:first|second|third|half|halves|quarters?|(?:fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth"
    r"|\w*teenth|\w*tieth|hundredth|thousandth|millionth)s?|point|plus|times|over|divided|multiplied|squared|cubed"
    r"|minus|negative)\b",
    re.IGNORECASE,
)
_DETERMINER = re.compile(r"\b(?:the|this|that|each|every|any|no|which|another|some|its?)\s+(?:\w+\s+)?$", re.I)


def number_words_as_digits(text: str) -> str:
    """The text with each run of English number words that reads as one cardinal written in digits ("So she earns
    eighteen dollars." -> "So she earns 18 dollars.", "\\text{minus seven}" -> "\\text{-7}"); the text unchanged when
    it has a digit or no number word, or when a number word in it is not a cardinal read alone (see the module)."""
    if re.search(r"\d", text) or not _RUN.search(text):
        return text
    runs = list(_RUN.finditer(text))
    signs = sum(1 for run in runs if run.group(1))
    if signs > 1 or (signs and not runs[0].group(1)) or _NOT_CARDINAL.search(_RUN.sub(" ", text)):
        return text  # "ten minus three", "five fifths": not one cardinal
    parts, pos = [], 0
    for run in runs:
        words = re.findall(r"[a-z]+", run.group(2).lower())
        words[:1] = ["one"] if words[:1] == ["a"] else words[:1]  # "a hundred and eight"
        value = _cardinal([w for w in words if w != "and"]) if len(words) <= MAX_NUMBER_WORDS else None
        if value is None or (words == ["one"] and _DETERMINER.search(text[: run.start()])):
            return text
        parts += [text[pos : run.start()], f"-{value}" if run.group(1) else str(value)]
        pos = run.end()
    return "".join(parts) + text[pos:]


def _cardinal(words: list[str]) -> int | None:
    """The value of number words without "and" ("one hundred five", "two thousand three hundred"), None when they do
    not spell one cardinal ("five twenty", "hundred", "thousand million")."""
    if words == ["zero"]:
        return 0
    total, i, last_scale = 0, 0, None
    while i < len(words):
        group, i = _group(words, i)
        if group is None:
            return None
        scale = _SCALES.get(words[i]) if i < len(words) else None
        if scale is None:
            return total + group if i == len(words) else None
        if last_scale is not None and scale >= last_scale:
            return None
        total, last_scale, i = total + group * scale, scale, i + 1
    return total if last_scale is not None else None


def _group(words: list[str], i: int) -> tuple[int | None, int]:
    """A number below 1000 from words[i]: "nine hundred ninety nine", "fifteen", "twenty"; (None, i) if none."""
    value, n = None, len(words)
    if i + 1 < n and words[i + 1] == "hundred" and _ONES.get(words[i], 0) > 0:
        value, i = _ONES[words[i]] * 100, i + 2
    if i < n and words[i] in _TENS:
        value, i = (value or 0) + _TENS[words[i]], i + 1
        if i < n and _ONES.get(words[i], 0) > 0:
            value, i = value + _ONES[words[i]], i + 1
    elif i < n and (words[i] in _TEENS or _ONES.get(words[i], 0) > 0):
        value, i = (value or 0) + (_TEENS.get(words[i]) or _ONES[words[i]]), i + 1
    return value, i


def _plain(value: Fraction) -> PlainNumber:
    return PlainNumber(value, "integer" if value.denominator == 1 else "decimal")
