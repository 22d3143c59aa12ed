"""Other spellings of a plain number, for grpo_train/verifier/compare.py (rules in grpo_train/verifier/api.py):
scientific notation ("1.2 \\times 10^{6}", "1.2e6") and the thousands separators of other locales (an apostrophe:
"1'200'000"; dots: "1.200.000"; with a decimal comma: "1.234,5", "1 234,5"), read only where a human reads one
number and only one. Ambiguous spellings stay as text.py reads them: "1,234" groups thousands (1234), "1.234" is a
decimal (1.234), "1,5" is a decimal comma only against a decimal gold (text.decimal_comma).

Number words ("five") are not read: the answer-form rule asks for digits (tests/cases' "a number in words").
Regexes on the whole (short) answer only: linear.
"""

from __future__ import annotations

import re
from fractions import Fraction

from grpo_train.verifier.text import PlainNumber

# A factor from 1 up to 10 (scientific notation's own form) times a power of ten: "1.2 \\times 10^{6}", "1.2 × 10^6",
# "1.2\\cdot 10^{-3}", "1.2*10^6"; or e-notation "1.2e6", "1.2E+06".
_SCIENTIFIC = re.compile(
    r"^([-+]?)([1-9](?:\.\d+)?)\s*(?:\\times|\\cdot|×|·|\*)\s*10\s*\^\s*(?:\{\s*([-+]?\d{1,3})\s*\}|(\d))$"
)
_E_NOTATION = re.compile(r"^([-+]?)([1-9](?:\.\d+)?)[eE]([-+]?\d{1,3})$")
# Thousands grouped by apostrophes (Swiss: "1'200'000", "1’200’000"), by two or more dots ("1.200.000"; one dot group
# is a decimal: "1.200"), or by dots or spaces before a decimal comma ("1.234,5", "1 234,5").
_APOSTROPHES = re.compile(r"^[-+]?[1-9]\d{0,2}(?:['’]\d{3})+(?:\.\d+)?$")
_DOTS = re.compile(r"^[-+]?[1-9]\d{0,2}(?:\.\d{3}){2,}$")
_GROUPS_BEFORE_COMMA = re.compile(r"^[-+]?[1-9]\d{0,2}(?:(\.|\s)\d{3})(?:\1\d{3})*,\d+$")


def spelled_number(answer: str) -> PlainNumber | None:
    """The number a cleaned answer spells in scientific notation or with another locale's separators, else None."""
    s = answer.strip()
    if m := _SCIENTIFIC.match(s) or _E_NOTATION.match(s):
        exponent = int((m.group(3) or m.group(4)) if m.re is _SCIENTIFIC else m.group(3))
        value = Fraction(m.group(2)) * Fraction(10) ** exponent
        return _plain(-value if m.group(1) == "-" else value)
    if _APOSTROPHES.match(s):
        return _plain(Fraction(s.replace("'", "").replace("’", "")))
    if _DOTS.match(s):
        return _plain(Fraction(s.replace(".", "")))
    if _GROUPS_BEFORE_COMMA.match(s):
        return _plain(Fraction(re.sub(r"[.\s]", "", s).replace(",", ".")))
    return None


def _plain(value: Fraction) -> PlainNumber:
    return PlainNumber(value, "integer" if value.denominator == 1 else "decimal")
