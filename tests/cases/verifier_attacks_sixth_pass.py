"""The adversarial suite's sixth pass (tests/cases/verifier_attacks.py holds the first two passes and the helpers,
tests/cases/verifier_attacks_third_pass.py the third and fourth, tests/cases/verifier_attacks_fifth_pass.py the
fifth): qualifier words the lists missed, values offered in later sentences and lines in other wordings and
decorations, words and brackets after a box in markdown, HTML or full-width spelling, Cyrillic look-alike letters,
negated names and number words of other languages on an equation's left side, content a page does not render, digits
apart with a Unicode or LaTeX space, signs in a fraction, golds that divide by zero or hold a placeholder, a function
of a huge power. Each attack comes with the correct neighbours its rule must keep. One category is new:
  rate    a rate on the answer ("5 per day", "5 apiece") where the question asks for an amount
Used through `CASES` below (all six passes) by tests/test_verifier_attacks.py and scripts/bench/bench_verifier.py.
"""

from __future__ import annotations

from cases.verifier_attacks import Case, _box, _cases
from cases.verifier_attacks_fifth_pass import CASES as EARLIER_CASES

APPLES = "How many apples does Tom have?"
BUYS = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"

SIXTH_PASS: list[Case] = [
    # ------------------------------------------------------------------------------------------------
    # qualifier: words the lists missed, before or after the number, and a qualifier alone on the line before a box
    *_cases("qualifier", APPLES, "5", [
        (_box("\\text{at the very least } 5"), False, "'at least' with 'the very' between"),
        ("The answer is at the very most 5.", False, "'at most' with 'the very' between"),
        ("The answer is al menos 5.", False, "'at least' in Spanish"),
        ("The answer is nigh on 5.", False, "an approximation"),
        ("The answer is often 5.", False, "a frequency is not one value"),
        ("The answer is sometimes 5.", False, "a frequency is not one value"),
        ("The answer is rounded: 5.", False, "a rounded value when no rounding is asked"),
        ("The answer is min 5.", False, "a bound"),
        ("The answer is minimum of 5.", False, "a bound without its article"),
        ("The answer is bound 5.", False, "a bound"),
        ("The answer is 5 (tentative).", False, "a tentative value"),
        (_box("5\\text{ (tentative)}"), False, "a tentative value, boxed"),
        (_box("x = 5 \\text{ (unverified)}"), False, "an unverified value"),
        (_box("x = 5 \\text{ (assumed)}"), False, "an assumed value"),
        ("#### 5 (floor)", False, "a floor of another value"),
        ("#### 5 (ceiling)", False, "a ceiling of another value"),
        ("`about` $\\boxed{5}$", False, "a qualifier in inline code before the box"),
        ("about\n$$\\boxed{5}$$", False, "a qualifier alone on the line before a displayed box"),
        ("At least\n\n$\\boxed{5}$", False, "a qualifier alone in the paragraph before the box"),
        (_box("\\text{exactly } 5"), True, "'exactly' keeps the number"),
        ("The answer is 5 apples, at the very end of the day.", True, "'at the very end' is no bound"),
        ("He will have 40-32=8 screws left over\n**$\\boxed{5}$**", True, "a line before the box ending on 'over'"),
        ("Tom counts them once more.\n\n$\\boxed{5}$", True, "a sentence before the box"),
    ], dataset="gsm8k"),
    *_cases("qualifier", APPLES, "5", [
        ("⩾ $\\boxed{5}$", False, "a Unicode relation sign before the box"),
        ("≦ $\\boxed{5}$", False, "a Unicode relation sign before the box"),
        ("≒ $\\boxed{5}$", False, "a Unicode approximation sign before the box"),
        ("～ $\\boxed{5}$", False, "a full-width tilde before the box"),
        ("Tom has $\\boxed{5}$ apples.", True, "no relation"),
    ], dataset="gsm8k"),
    *_cases("recall", "What is the residue of $11$ modulo $7$?", "4", [
        ("$11 ≡ \\boxed{4} \\pmod{7}$", True, "a congruence sign before a residue's box"),
    ]),
    *_cases("qualifier", "Round $4.6$ to the nearest whole number.", "5", [
        ("Rounded: $\\boxed{5}$", True, "a rounding the problem asks for"),
    ]),
    # ------------------------------------------------------------------------------------------------
    # hedge: another value in a later sentence, in other wordings
    *_cases("hedge", APPLES, "5", [
        ("The answer is 5. Some might say 7.", False, "others' answer offered"),
        ("The answer is 5. Others argue 7.", False, "others' answer offered"),
        ("The answer is 5. A case can be made for 7.", False, "a case for another value"),
        ("The answer is 5. Unless it's 7.", False, "'unless' and another value"),
        ("The answer is 5. If not, 7.", False, "'if not' is a condition, not a denial"),
        ("The answer is 5. Then again, 7.", False, "'then again' and another value"),
        ("The answer is 5. 7 cannot be ruled out.", False, "a value not excluded is offered"),
        ("The answer is 5. Can't rule out 7.", False, "a value not excluded is offered"),
        ("The answer is 5. Either that or 7.", False, "'either that or'"),
        ("The answer is 5. I'd also accept 7.", False, "another value accepted"),
        ("The answer is 5. Possible answers: 5, 7.", False, "a list of candidates"),
        ("#### 5. Candidates: 5 and 7.", False, "a list of candidates"),
        ("$\\boxed{5}$ failing that 7.", False, "'failing that'"),
        ("$\\boxed{5}$ (second choice: 7)", False, "a second choice in brackets"),
        ("$\\boxed{5}$ (runner-up: 7)", False, "a runner-up in brackets"),
        ("$\\boxed{5}$ (backup 7)", False, "a backup in brackets"),
        ("$\\boxed{5}$ (7 is close)", False, "a close value in brackets"),
        ("The answer is 5. It cannot be 7 because 7 > 6.", True, "another value denied"),
        ("The answer is 5. We can rule out 7.", True, "another value excluded"),
        ("The answer is 5. Some people might miscount.", True, "others named without a value"),
        ("The answer is 5. If not convinced, check 2 + 3 = 5.", True, "'if not' before a check"),
        ("The candidates were 4, 5 and 6; only 5 works. The answer is 5.", True, "candidates before the answer"),
    ], dataset="gsm8k"),
    *_cases("recall", "Of the two-digit perfect squares, how many end in 6?", "2", [
        ("Only $4^2=16$ and $6^2=36$ end in $6$. Thus, there are $\\boxed{2}$ distinct possible values for $B$.", True,
         "'possible values' in the box's own sentence lists nothing (a MATH reference solution)"),
    ]),
    # a later line that is only another value once its decoration is dropped
    *_cases("hedge", APPLES, "5", [
        ("$\\boxed{5}$\n\n\\framebox{7}", False, "a later line: another box command"),
        ("$\\boxed{5}$ \\colorbox{yellow}{7}", False, "a coloured box beside the answer"),
        ("$\\boxed{5}$\n\n\\fcolorbox{red}{white}{7}", False, "a framed coloured box on a later line"),
        ("$\\boxed{5}$\n\n\\underline{7}", False, "a later line: an underlined value"),
        ("$\\boxed{5}$\n\n\\emph{7}", False, "a later line: an emphasised value"),
        ("$\\boxed{5}$\n\n\\large 7", False, "a later line: a size switch and a value"),
        ("$\\boxed{5}$\n\n{\\bf 7}", False, "a later line: an old font switch and a value"),
        ("$\\boxed{5}$\n\n$\\displaystyle 7$", False, "a later line: a display-style value"),
        ("$\\boxed{5}$\n\n$\\frac{14}{2}$", False, "a later line: a fraction of another value"),
        ("$\\boxed{5}$\n\n7/1", False, "a later line: another value as a fraction"),
        ("$\\boxed{5}$\n\nSeven.", False, "a later line: a number word"),
        ("The answer is 5.\n\n<sub>7</sub>", False, "a later line in HTML"),
        ("The answer is 5.\n\n| value |\n|---|\n| 7 |", False, "a later table cell"),
        ("The answer is 5.\n\n> Note: or 7", False, "a later quoted note"),
        ("The answer is 5.\n\n[^1]: or 7", False, "a later footnote definition"),
        ("The answer is 5.\n\nTL;DR: 7", False, "a later label with a semicolon"),
        ("The answer is 5.\n\nIn short, 7.", False, "a later connective"),
        ("The answer is 5.\n\nHence 7.", False, "a later connective"),
        ("The answer is 5.\n\n∴ 7", False, "a later 'therefore' sign"),
        ("The answer is 5.\n\n⟹ 7", False, "a later arrow"),
        ("The answer is 5.\n\nAnswer = 7", False, "a later label with '='"),
        ("- Answer: 5\n- Backup: 7", False, "a later bullet with a label"),
        ("\\boxed{5}\n\n\\textit{Alternatively} 7", False, "'alternatively' in italics"),
        ("$\\boxed{5}$\n\nIn short, 5.", True, "the same value on a later line"),
        ("$\\boxed{5}$\n\nFive.", True, "the same value in words"),
        ("$\\boxed{5}$\n\nTherefore, Tom has 5 apples.", True, "a later sentence with the same value"),
        ("The answer is 5.\n\nStep 2 was the key.", True, "a later line that is no value"),
        ("The answer is 5.\n\n| step | value |\n|---|---|\n| 1 | 2 |\n| 2 | 5 |", True, "a table of the work"),
        ("Answer: 5\n- Check: 2 + 3 = 5", True, "a later bullet that checks"),
    ], dataset="gsm8k"),
    # words and brackets after a box in markdown, HTML, LaTeX spacing or full-width spelling; relations after it
    *_cases("hedge", APPLES, "5", [
        ("\\boxed{5} \\; \\text{or} \\; 7", False, "'or' between LaTeX spaces"),
        ("$\\boxed{5}$ _or_ 7", False, "'or' in markdown italics"),
        ("$\\boxed{5}$ (_or_ 7)", False, "'or' in markdown italics, in brackets"),
        ("$\\boxed{5}$ <i>or</i> 7", False, "'or' in HTML italics"),
        ("$\\boxed{5}$ 【or 7】", False, "'or' in CJK brackets"),
        ("$\\boxed{5}$ （or 7）", False, "'or' in full-width brackets"),
        ("$\\boxed{5}$（7）", False, "another value in full-width brackets"),
        ("$\\boxed{5}$ ≈ 7", False, "a relation to another value"),
        ("$\\boxed{5}$ ≡ 7", False, "a relation to another value"),
        ("$\\boxed{5}$ \\iff 7", False, "a relation to another value"),
        ("$\\boxed{5}$ _apples_", True, "a unit in markdown italics"),
        ("$\\boxed{5}$（5 apples）", True, "the same value in full-width brackets"),
        ("$\\boxed{5}$ \\; \\text{apples}", True, "a unit after LaTeX spacing"),
        ("$\\boxed{5}$ ≠ 7", True, "5 is not 7: no second value offered"),
        ("Tom has $\\boxed{5}$ apples; Jerry has 7.", True, "a clause about another count"),
    ], dataset="gsm8k"),
    *_cases("hedge", APPLES, "5", [
        ("The answer is $5$ оr $7$.", False, "'or' spelled with a Cyrillic о"),
        ("#### $5$ оr $7$.", False, "'or' spelled with a Cyrillic о, after ####"),
        ("The answer is 5 οr 7.", False, "'or' spelled with a Greek omicron"),
        ("The answer is 5 арples.", True, "a Cyrillic а and р in a unit"),
    ], dataset="gsm8k"),
    # ------------------------------------------------------------------------------------------------
    # equation: a left side that is a negated or disowned name, or a number word in another language
    *_cases("equation", APPLES, "5", [
        (_box("\\text{not } x = 5"), False, "a negated name"),
        (_box("\\text{wrong} = 5"), False, "a disowned left side"),
        (_box("\\text{incorrect answer} = 5"), False, "a disowned left side"),
        (_box("\\text{sept} = 5"), False, "seven in French"),
        (_box("\\text{sieben} = 5"), False, "seven in German"),
        (_box("\\text{siete} = 5"), False, "seven in Spanish"),
        (_box("\\text{the answer} = 5"), True, "a name"),
        (_box("x = 5"), True, "a name"),
        (_box("\\text{nota} = 5"), True, "a word that only starts like 'not'"),
    ]),
    # ------------------------------------------------------------------------------------------------
    # invisible: content a page does not render
    *_cases("invisible", APPLES, "7", [
        ("<script>\\boxed{7}</script>", False, "a script element is not rendered"),
        ("<style>\\boxed{7}</style>", False, "a style element is not rendered"),
        ("<template>\\boxed{7}</template>", False, "a template element is not rendered"),
        ("<noscript>\\boxed{7}</noscript>", False, "a noscript element is not rendered where scripts run"),
        ("[//]: # (\\boxed{7})", False, "markdown's comment line"),
        ("[comment]: <> (The answer is 7.)", False, "markdown's comment line, other spelling"),
        ("<?php /* \\boxed{7} */ ?>", False, "a processing instruction"),
        ("<SCRIPT type=\"text/x\">The answer is 7.", False, "an unclosed script runs to the end"),
        ("The answer is 7. <b>Done</b>", True, "printed HTML"),
        ("Since 3 < 7, the answer is 7.", True, "a '<' that opens no element"),
        ("[1]: https://example.org\n\nThe answer is 7.", True, "a link reference is not a comment"),
    ]),
    # digits apart with a Unicode or LaTeX space are two numbers; a space of any width groups thousands
    *_cases("recall", APPLES, "57", [
        ("#### 5\u00a07", False, "a no-break space between digits"),
        ("#### 5\u20097", False, "a thin space between digits"),
        ("#### 5\u202f7", False, "a narrow no-break space between digits"),
        ("The answer is 5\\,7.", False, "a LaTeX thin space between digits"),
        ("#### 57", True, "the number"),
    ], dataset="gsm8k"),
    *_cases("recall", APPLES, "1000", [
        ("#### 1\u2009000", True, "a thin space groups thousands"),
        ("#### 1\u00a0000", True, "a no-break space groups thousands"),
        ("The answer is $1\\,000$.", True, "a LaTeX thin space groups thousands"),
    ], dataset="gsm8k"),
    *_cases("recall", "What is $10^4$?", "10000", [
        (_box("10{,}000"), True, "a braced comma groups thousands"),
        (_box("10\\,000"), True, "a LaTeX thin space groups thousands"),
    ]),
    # ------------------------------------------------------------------------------------------------
    # echo: signs left in a fraction are an operation left undone
    *_cases("echo", "Express $0.\\overline{3}$ as a common fraction.", "\\frac13", [
        (_box("\\frac{-1}{-3}"), False, "a sign in the denominator"),
        (_box("-\\frac{-1}{3}"), False, "two signs"),
        (_box("\\frac{1}{3}"), True, "the fraction"),
    ]),
    *_cases("echo", "Express $-0.\\overline{3}$ as a common fraction.", "-\\frac13", [
        (_box("\\frac{1}{-3}"), False, "a sign in the denominator"),
        (_box("\\frac{-1}{3}"), True, "a sign in the numerator"),
        (_box("-\\frac{1}{3}"), True, "a sign before the fraction"),
    ]),
    # the form the problem asks for: a mixed number, scientific notation (a factor from 1 to below 10)
    *_cases("echo", "Express $\\frac{7}{2}$ as a mixed number.", "3\\frac{1}{2}", [
        (_box("\\frac{7}{2}"), False, "an improper fraction when a mixed number is asked"),
        (_box("7/2"), False, "an improper fraction with a slash"),
        (_box("3.5"), False, "a decimal when a mixed number is asked"),
        (_box("3\\frac12"), True, "the mixed number"),
        (_box("3 \\tfrac{1}{2}"), True, "the mixed number, spaced, with \\tfrac"),
    ]),
    *_cases("echo", "Write $0.00052$ in scientific notation.", "5.2\\times10^{-4}", [
        (_box("52\\times10^{-5}"), False, "a factor above 10"),
        (_box("0.52\\times 10^{-3}"), False, "a factor below 1"),
        (_box("0.00052"), False, "the question's number"),
        (_box("5.2\\times10^{-4}"), True, "scientific notation"),
        (_box("5.2 \\cdot 10^{-4}"), True, "scientific notation with \\cdot"),
    ]),
    # ------------------------------------------------------------------------------------------------
    # scale: an operation in words before or after the number; rate: a rate where an amount is asked
    *_cases("scale", BUYS, "5", [
        ("#### double 5", False, "an operation in words before the number"),
        ("#### twice 5", False, "an operation in words before the number"),
        ("#### half of 10", False, "an operation in words before the number"),
        ("#### 5 doubled", False, "an operation in words after the number"),
        ("#### 5 halved", False, "an operation in words after the number"),
        ("#### 5 apples", True, "a unit"),
    ], dataset="gsm8k"),
    *_cases("rate", BUYS, "5", [
        ("#### 5 per day", False, "a rate where an amount is asked"),
        ("#### 5 each", False, "a rate where an amount is asked"),
        ("#### 5 apiece", False, "a rate where an amount is asked"),
        ("#### 5 apples a week", False, "a rate with a unit"),
        ("The answer is 5 apples per person.", False, "a rate with a unit"),
        ("#### 5 in total", True, "a total"),
        ("#### 5 apples", True, "an amount"),
    ], dataset="gsm8k"),
    *_cases("rate", "Tom eats 35 apples in a week. How many apples does he eat per day?", "5", [
        ("#### 5 per day", True, "the rate the question asks for"),
        ("#### 5 apples each day", True, "the rate the question asks for, other words"),
    ], dataset="gsm8k"),
    *_cases("rate", "Five apples cost $25. How much does each apple cost?", "5", [
        ("#### $5 each", True, "the rate the question asks for"),
    ], dataset="gsm8k"),
    *_cases("rate", "A box of 10 pencils costs $20. How much does one pencil cost?", "2", [
        ("#### $2 each", True, "a price per item: not a 'how many' question"),
    ], dataset="gsm8k"),
    *_cases("rate", "She works 40 hours in 5 days. How many hours does she work daily?", "8", [
        ("#### 8 hours per day", True, "'daily' asks for a rate"),
    ], dataset="gsm8k"),
    *_cases("rate", "The car goes 120 miles in 2 hours. How fast does the car go?", "60", [
        ("#### 60 miles per hour", True, "a speed: not a 'how many' question"),
    ], dataset="gsm8k"),
    # ------------------------------------------------------------------------------------------------
    # bad_gold: a division by zero in any spelling, placeholders and special tokens
    *[
        Case("bad_gold", "How many?", response, gold, "math", False, why)
        for gold, response, why in [
            ("1 \\div 0", _box("1 \\div 0"), "a division by zero with \\div"),
            ("\\frac{1}{0.0}", _box("\\frac{1}{0.0}"), "a decimal zero denominator"),
            ("\\frac{1}{00}", _box("\\frac{1}{00}"), "a zero denominator written 00"),
            ("1/0.0", _box("1/0.0"), "a slash and a decimal zero"),
            ("5/(1-1)", _box("5/(1-1)"), "a divisor that comes to zero"),
            ("\\frac{1}{1-1}", _box("\\frac{1}{1-1}"), "a denominator that comes to zero"),
            ("#N/A", _box("\\#N/A"), "a spreadsheet's error value"),
            ("#VALUE!", _box("\\#VALUE!"), "a spreadsheet's error value"),
            ("#DIV/0!", _box("\\#DIV/0!"), "a spreadsheet's error value"),
            ("FILL_IN", _box("FILL_IN"), "a blank to fill in"),
            ("ANSWER_HERE", _box("ANSWER_HERE"), "a placeholder with underscores"),
            ("\\text{insert answer}", _box("\\text{insert answer}"), "a placeholder phrase"),
            ("-nan", _box("-nan"), "a signed nan"),
            ("[MASK]", _box("[MASK]"), "a tokenizer's mask token"),
            ("<unk>", _box("<unk>"), "a tokenizer's unknown token"),
            ("<pad>", _box("<pad>"), "a tokenizer's padding token"),
            ("<answer></answer>", _box("5"), "empty answer tags"),
            ("\\square", _box("\\square"), "an empty box drawn as a symbol"),
        ]
    ],
    *_cases("recall", "Compute the value.", "\\frac{1}{10}", [
        (_box("0.1"), True, "a gold with a denominator that is not zero"),
    ]),
    *_cases("recall", "Compute the value.", "\\frac{1}{2-1}", [
        (_box("1"), True, "a gold whose divisor is not zero"),
    ]),
    # ------------------------------------------------------------------------------------------------
    # cost: a function beside a huge power (SymPy reduces a trigonometric argument to all its digits)
    *[
        Case("cost", "Compute the value.", _box(answer), gold, "math", expected, why)
        for answer, gold, expected, why in [
            ("\\sin(10^{4000})", "1", False, "a trig function of a 4000-digit power"),
            ("\\sin(2^{10000})", "1", False, "a trig function of a 3011-digit power"),
            ("\\tan(9^{4000})", "\\sqrt{2}", False, "a trig function of a 3800-digit power"),
            ("\\cos(10^{1000}) + \\sin(10^{1000})", "x+1", False, "two functions of 1000-digit powers"),
            ("\\sin(10^{100})", "\\sin(10^{100})", True, "a function of a 100-digit power stays cheap"),
            ("2^{10000}", "2^{10000}", True, "a huge power without a function stays cheap"),
        ]
    ],
]  # fmt: skip

CASES: list[Case] = [*EARLIER_CASES, *SIXTH_PASS]
