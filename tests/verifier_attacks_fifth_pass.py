"""The adversarial suite's fifth pass (tests/verifier_attacks.py holds the first two passes and the helpers,
tests/verifier_attacks_third_pass.py the third and fourth): scale words and units, comments and footnotes, values put
beside the answer on a later line or joined to its box, unfinished numbers, digits apart and Unicode signs. Each attack
comes with the correct neighbours its rule must keep. Three categories are new:
  scale   a word or suffix that scales the number, compares or carries out an operation ("5 thousand", "5 dozen",
          "5 more", "5 squared")
  unit    a unit of the kind the problem asks in, but another unit ("5 minutes" for "How many hours")
  operand the box as a part of a larger expression ("$\\boxed{5}^2$", "$-\\boxed{5}$", "$\\frac{\\boxed{5}}{2}$")
Used through `CASES` below (all five passes) by tests/test_verifier_attacks.py and scripts/bench_verifier.py.
"""

from __future__ import annotations

from verifier_attacks import Case, _box, _cases
from verifier_attacks_third_pass import CASES as EARLIER_CASES

APPLES = "How many apples does Tom have?"

FIFTH_PASS: list[Case] = [
    *_cases("scale", APPLES, "5", [
        ("#### 5 score", False, "a score is twenty"),
        ("#### 5 gross", False, "a gross is 144"),
        ("The answer is 5 lakh.", False, "a lakh is 100,000"),
        ("#### 5bn", False, "a suffix for billions"),
        ("#### 5M", False, "a capital M for millions"),
        ("#### 5 grand", False, "a grand is 1000"),
        ("#### 5 tens", False, "five tens are 50"),
        ("#### 5 quarters", False, "five quarters are 5/4"),
        ("#### 5 squared", False, "an operation in words"),
        (_box("5 \\text{ cubed}"), False, "an operation in words, in text"),
        ("#### 5 ppm", False, "parts per million"),
        ("#### 5 basis points", False, "basis points are hundredths of a percent"),
        ("#### 5‰", False, "per mille"),
        ("#### 5 apples", True, "a unit is not a scale"),
        ("Answer: the grand total is 5.", True, "a scale word before the number is not on it"),
        ("Answer: his score is 5 apples.", True, "'score' before the number is a word, not twenty"),
        ("#### 5 m", True, "a lowercase m is a unit (metres), not a million"),
    ], dataset="gsm8k"),
    *_cases("scale", "How many dozen eggs does she buy?", "5", [
        ("#### 5 dozen", True, "a dozen is the unit the problem asks in"),
        (_box("5 \\text{ dozen}"), True, "the same, boxed"),
        ("#### 5 thousand", False, "a scale the problem does not ask in"),
    ], dataset="gsm8k"),
    *_cases("scale", "How much did the car cost, in thousands of dollars?", "5", [
        ("#### 5 thousand", True, "the scale the problem asks in"),
        ("#### 5 million", False, "another scale"),
        ("#### 5k", False, "a suffix the problem does not name"),
    ], dataset="gsm8k"),
    *_cases("unit", "How many hours does the trip take?", "5", [
        ("#### 5 minutes", False, "minutes when hours are asked"),
        ("The answer is 5 min.", False, "an abbreviated unit of time"),
        (_box("5\\text{ days}"), False, "days, boxed"),
        ("#### 5 hours", True, "the unit asked"),
        ("#### 5 hrs", True, "the unit asked, abbreviated"),
        ("#### 5", True, "no unit"),
        ("#### 5 miles", True, "a unit of another kind is not the unit asked (the number is judged)"),
    ], dataset="gsm8k"),
    *_cases("unit", "The rope is 500 cm long. How many meters long is it?", "5", [
        ("#### 5 cm", False, "centimetres when metres are asked"),
        ("#### 5 km", False, "kilometres when metres are asked"),
        ("#### 5 meters", True, "the unit asked"),
        ("#### 5 m", True, "the unit asked, abbreviated"),
    ], dataset="gsm8k"),
    *_cases("unit", "How many dollars does he earn?", "5", [
        ("#### 5 cents", False, "cents when dollars are asked"),
        ("#### $5", True, "a dollar sign"),
        ("#### 5 dollars", True, "the unit asked"),
    ], dataset="gsm8k"),
    *_cases("unit", "What is the measure of the angle in degrees?", "30", [
        (_box("30 \\text{ rad}"), False, "radians when degrees are asked"),
        (_box("30 \\text{ radians}"), False, "radians when degrees are asked, spelled out"),
        (_box("30^\\circ"), True, "degrees"),
        (_box("30"), True, "the number of degrees"),
    ]),
    *_cases("unit", "Express the angle in radians.", "2", [
        (_box("2^\\circ"), False, "degrees when radians are asked"),
        (_box("2 \\text{ degrees}"), False, "degrees in words when radians are asked"),
        (_box("2"), True, "the number of radians"),
        (_box("2 \\text{ rad}"), True, "radians"),
    ]),
    *_cases("invisible", APPLES, "5", [
        ("The answer is 7.<!-- The answer is 5. -->", False, "an HTML comment is not printed"),
        ("#### 7\n<!--\n#### 5\n-->", False, "a hash line in a comment"),
        ("The answer is 7.\n\\iffalse The answer is 5. \\fi", False, "a LaTeX \\iffalse block"),
        ("The answer is 7.\n\\begin{comment}\nThe answer is 5.\n\\end{comment}", False, "a comment environment"),
        ("The answer is 7. <!-- The answer is 5.", False, "an unclosed comment runs to the end"),
        ("The answer is 7.\\footnote{The answer is 5.}", False, "a footnote states a second answer"),
        ("$\\boxed{5}$\\footnote{Or 7.}", False, "a footnote offers another value"),
        ("<!-- draft: 7 -->\nThe answer is 5.", True, "a comment before the answer is not printed either"),
        ("The answer is 5.<!-- or 7 -->", True, "what prints is only 5"),
        ("\\iffalse$\\boxed{7}$\\fi The answer is $\\boxed{5}$.", True, "a hidden box is not a second box"),
        ("$\\boxed{5}$\\footnote{Check: 2 + 3 = 5.}", True, "a footnote that checks the answer"),
        ("The answer is 5.\\footnote{Tom started with 3 apples.}", True, "a footnote with a given"),
    ], dataset="gsm8k"),
    *_cases("hedge", APPLES, "5", [
        ("#### 5\n7", False, "a bare other value on the next line"),
        ("#### 5\n\n7", False, "a bare other value after a blank line"),
        ("$\\boxed{5}$\n\n$7$", False, "a bare other value in math"),
        ("The final answer is $\\boxed{5}$.\n\n**7**", False, "a bare other value in bold"),
        ("$\\boxed{5}$\n\nP.S. 7", False, "a postscript value"),
        ("$\\boxed{5}$\n\nNote: 7.", False, "a labelled other value"),
        ("$\\boxed{5}$ (and 7)", False, "a second value joined in brackets"),
        ("$\\boxed{5}$ and 7.", False, "a second value joined by 'and'"),
        ("$\\boxed{5}\\text{ (and 7)}$", False, "a second value joined in text"),
        ("$\\boxed{5}\\text{ (or 7)}$", False, "an alternative in text after the box"),
        ("$\\boxed{5}$ (also 7)", False, "'also' another value"),
        ("$\\boxed{5}$ & 7", False, "an ampersand"),
        ("The answer is 5.\n\n5", True, "the same value repeated on its own line"),
        ("#### 5\n\n1. Check: 2 + 3 = 5.", True, "a numbered line is not a bare value"),
        ("#### 5\n\n5.00", True, "the same value in another spelling"),
        ("Tom has $\\boxed{5}$ and Jerry has 7.", True, "'and' starting another clause"),
        ("$\\boxed{5}$ and 2 + 3 = 5.", True, "'and' before a check"),
        ("$\\boxed{5}$ and 5.", True, "'and' the same value"),
    ], dataset="gsm8k"),
    *_cases("near", APPLES, "5", [
        ("#### 5...", False, "an ellipsis: the number goes on"),
        ("The answer is 5…", False, "a Unicode ellipsis"),
        ("#### 1 2", False, "digits with a space between are two numbers, not 12 (gold 5: 1 2 is neither)"),
        ("#### 5.", True, "a full stop"),
        ("#### 5.0", True, "a zero decimal"),
    ], dataset="gsm8k"),
    *_cases("near", APPLES, "12", [
        ("#### 1 2", False, "digits with a space between are not 12"),
        ("The answer is 1 2.", False, "the same in a sentence"),
        ("#### 1\u200b2", True, "a zero-width space prints nothing between the digits"),
        ("#### 12", True, "the number"),
    ], dataset="gsm8k"),
    *_cases("near", "What is $\\frac{1}{3} \\cdot 15$?", "5", [
        (_box("5.\\overline{0}"), False, "a period of zeros is not a final form"),
        (_box("4.\\overline{9}"), False, "a period of nines (as before)"),
        (_box("5"), True, "the number"),
    ]),
    *_cases("near", "What is $\\log_2 3$ written exactly?", "\\log_2 3", [
        (_box("\\log_2 3"), True, "a space inside LaTeX is not digits apart"),
    ]),
    *_cases("operand", APPLES, "5", [
        ("$\\boxed{5}^2$", False, "a power on the box"),
        ("$\\boxed{5}!$", False, "a factorial on the box"),
        ("$\\boxed{5}\\times 2$", False, "a product with the box"),
        ("$\\boxed{5}/2$", False, "a quotient of the box"),
        ("$-\\boxed{5}$", False, "a sign before the box"),
        ("$1\\boxed{5}$", False, "a digit before the box"),
        ("$\\boxed{5}0$", False, "a digit glued after the box"),
        ("$\\boxed{5}\\text{0}$", False, "a digit in text glued after the box"),
        ("$\\frac{\\boxed{5}}{2}$", False, "the box as a numerator"),
        ("$10^{\\boxed{5}}$", False, "the box as an exponent"),
        ("$x_{\\boxed{5}}$", False, "the box as an index"),
        ("$\\boxed{5}\\text{th}$", False, "an ordinal"),
        ("$\\boxed{5}$x", False, "a variable glued after the box"),
        ("$\\boxed{5} \\to 7$", False, "an arrow to another value"),
        ("$\\boxed{5} = 7$", False, "the box equated to another value"),
        ("$\\boxed{5}\\%$", False, "a percent the question does not ask for, outside the box"),
        ("$\\boxed{5}$ thousand", False, "a scale word after the box"),
        ("$\\boxed{5}$ squared", False, "an operation in words after the box"),
        ("The answer is **$\\boxed{5}$**.", True, "bold around the box"),
        ("_Final answer:_ $\\boxed{5}$ _(done)_", True, "italics around the box"),
        ("So the final answer is '$\\boxed{5}$'.", True, "quotes around the box"),
        ("So $x = \\boxed{5}$.", True, "a name before the box"),
        ("$2 + 3 = \\boxed{5} = x$", True, "a name after the box"),
        ("The area is $\\boxed{5}\\text{ cm}^2$.", True, "a unit in text after the box"),
        ("$\\boxed{5}$ apples", True, "a word after the box"),
    ]),
    *_cases("operand", "What is the angle, in degrees?", "30", [
        ("$\\boxed{30}^\\circ$", True, "a degree sign after the box stays the answer's"),
        ("$\\boxed{30}$ minutes", True, "a unit of another kind than asked (the number is judged)"),
        ("$\\boxed{30}$ radians", False, "radians after the box when degrees are asked"),
    ]),
    *_cases("operand", "What percent of the apples are red?", "28", [
        ("$\\boxed{28}\\%$", True, "a percent sign after the box when a percent is asked"),
    ]),
    *_cases("operand", "How many hours does the trip take?", "5", [
        ("$\\boxed{5}$ minutes", False, "a unit after the box, of the kind asked but another"),
        ("$\\boxed{5}$ hours", True, "the unit asked after the box"),
    ]),
    *_cases("hedge", APPLES, "5", [
        ("$\\boxed{5}$ = 7", False, "an equation to another value after the box"),
        ("$\\boxed{5}$ → 7", False, "an arrow to another value"),
        ("$\\boxed{5}$ -> 7", False, "an ASCII arrow to another value"),
        ("$\\boxed{5}$, 7", False, "a comma and another value"),
        ("$\\boxed{5}$ vs 7", False, "versus another value"),
        ("$\\boxed{5}$ ~ 7", False, "a tilde and another value"),
        ("$\\boxed{5}$\n\n= 7", False, "a later line equating another value"),
        ("$\\boxed{5}$\n\n$$7$$", False, "a later display of another value"),
        ("$\\boxed{5}$\n\n\\[7\\]", False, "a later display of another value, in brackets"),
        ("$\\boxed{5}$\n\n- 7", False, "a bullet with another value"),
        ("$\\boxed{5}$ = 2 + 3.", True, "the box equated to its work"),
        ("$\\boxed{5}$, 3 of them red.", True, "a comma and a clause that goes on"),
    ]),
    *_cases("scale", APPLES, "5", [
        ("The answer is 5 more.", False, "a comparison, not the amount"),
        ("The answer is 5 fewer.", False, "a comparison, not the amount"),
        ("The answer is 5-fold.", False, "a factor"),
        ("The answer is 5 times as many.", False, "a factor"),
        ("The answer is 5 tenths.", False, "tenths scale the number"),
        ("The answer is 5 plus tax.", False, "an amount still to add to"),
    ], dataset="gsm8k"),
    *_cases("scale", "How many more apples does Tom have than Jerry?", "5", [
        ("The answer is 5 more.", True, "the comparison the problem asks for"),
        ("#### 5 more apples", True, "the comparison the problem asks for, with a unit"),
    ], dataset="gsm8k"),
    *_cases("recall", APPLES, "-5", [
        ("#### ‐5", True, "a Unicode hyphen as a minus sign"),
        ("#### –5", True, "an en dash as a minus sign"),
        ("#### −5", True, "the minus sign"),
        ("#### －5", True, "a full-width hyphen-minus"),
    ], dataset="gsm8k"),
    *_cases("recall", APPLES, "-2", [
        ("#### 4–6", False, "an en dash between numbers is a range, not a subtraction"),
    ], dataset="gsm8k"),
    *_cases("recall", APPLES, "5", [
        ("#### ５", True, "a full-width digit"),
        ("#### ٥", True, "an Arabic-Indic digit"),
        ("#### ⁵", False, "a superscript is not the number"),
        ("#### ₅", False, "a subscript is not the number"),
        ("#### ⑤", False, "a circled digit"),
        ("#### ±5", False, "plus or minus"),
    ], dataset="gsm8k"),
]  # fmt: skip

CASES: list[Case] = [*EARLIER_CASES, *FIFTH_PASS]
