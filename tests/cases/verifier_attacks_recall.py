"""The adversarial suite's recall cases: each attack beside the correct neighbours
its rule must keep, refiled by category from the six adversarial passes (tests/cases/verifier_attacks.py collects
them)."""

from __future__ import annotations

from cases.verifier_case import APPLES, Case, _box, _cases, _nested

# recall: correct answers that a stricter verifier could wrongly reject (false-negative checks)
RECALL: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # recall: correct answers the stricter rules above must still accept
    *[
        Case("recall", problem, response, gold, "math", True, why)
        for problem, response, gold, why in [
            (None, _box("\\color{red}{7}"), "7", "colour around the answer"),
            (None, _box("0.\\overline{3}"), "\\frac13", "a repeating decimal"),
            (None, _box("0.1\\overline{6}"), "\\frac{1}{6}", "a repeating decimal with a lead"),
            (None, _box("0.\\overline{142857}"), "\\frac{1}{7}", "a long period"),
            (None, _box("125\\textnormal{ miles}"), "125\\text{ miles}", "\\textnormal as a unit"),
            ("By what percent does the area increase?",
             "The side doubles, so the area is multiplied by 4.\nTherefore, the area increases by 300%.",
             "300\\%", "an unboxed concluding sentence with a percent"),
            ("By what percent does the area increase?", "So the area increases by 100%.", "100\\%",
             "an unboxed final statement"),
            (None, "Dividing, $$\\frac{\\Delta x'}{\\Delta x} \\geq \\frac{2}{1}.$$ Therefore, the error in the "
             "position increases by 100%.", "100\\%", "a concluding sentence after displayed math"),
            (None, "Therefore $x \\geq 5$ is the solution.", "x \\ge 5", "the value before 'is the solution'"),
            (None, "The solution is $x != 5$", "x \\neq 5", "!= is not an equation's ="),
            ("Solve $x^2 + x - 6 = 0$.", "We factor.\nThe solutions are $x = 2$ or $x = -3$.", "2, -3",
             "both solutions in a closing sentence"),
            (None, _box("a_{37} = 19, \\quad a_3 = 2"), "a_3 = 2, a_{37} = 19", "assignments in another order"),
            (None, _box("y = 3, x = 2"), "x = 2, y = 3", "assignments in another order"),
            (None, "$\\boxed{(3, 3)} \\text{ for part (a) and } \\boxed{(1, 1)}$", "(3, 3), (1, 1)",
             "two parts boxed with a label between"),
            (None, "Part (a): $\\boxed{7}$. Part (b): $\\boxed{9}$.", "7, 9", "two labelled parts"),
            ("Simplify $\\frac{6}{8}$.", _box("\\frac{3}{4}"), "\\frac{3}{4}", "the simplified fraction"),
            ("Compute $99^2+99+1$.", _box("9901"), "9901", "the evaluated value"),
            ("Solve for $x$: $x + 3 = 8$.", _box("x = 5"), "5", "a named value"),
            (None, _box("\\dfrac{\\sqrt{3}}{2}"), "\\frac{\\sqrt3}{2}", "dfrac"),
            (None, _box("\\frac{1}{2}\\sqrt{3}"), "\\frac{\\sqrt3}{2}", "the fraction in front"),
            (None, _box("3 - 2\\sqrt{2}"), "3-2\\sqrt2", "a sum of unlike terms"),
            (None, _box("\\frac{2\\pi}{3}"), "\\frac{2}{3}\\pi", "a multiple of pi"),
            (None, _box("-\\frac{\\pi}{6}"), "-\\frac{\\pi}{6}", "a negative multiple of pi"),
            (None, _box("2(x+1)"), "2x+2", "a factored form of an expanded gold, not asked to expand"),
            (None, _box("\\frac{x+1}{2}"), "\\frac{1}{2}(x+1)", "one fraction of a sum"),
            (None, _box("e^{-2}"), "\\frac{1}{e^2}", "a power of e"),
            (None, _box("2^{2005}"), "2^{2005}", "a power the gold keeps too"),
            (None, _box("\\log_2 3"), "\\frac{\\log 3}{\\log 2}", "a logarithm without an exact value"),
            (None, _box("[-2, 5)"), "[-2,5)", "an interval"),
            (None, _box("(-\\infty, 1) \\cup (4, \\infty)"), "(4,\\infty)\\cup(-\\infty,1)", "a union"),
            (None, _box("\\begin{pmatrix} 1 \\\\ -\\frac{1}{2} \\end{pmatrix}"),
             "\\begin{pmatrix} 1 \\\\ -1/2 \\end{pmatrix}", "a vector"),
            (None, _box("y = -2 + 3x"), "y = 3x - 2", "a line, terms commuted"),
            (None, _box("\\text{(C)}"), "C", "a choice"),
            (None, _box("35"), "35\\%", "a bare number for a percent (convention 6)"),
            (None, _box("1.5"), "\\frac32", "an exactly equal decimal (convention 7)"),
            (None, _box("15\\frac{39}{40}"), "\\frac{639}{40}", "a mixed number"),
            (None, _box("\\$1,250"), "1250", "money"),
            (None, _box("45^\\circ"), "45", "degrees"),
            (None, _box("3 \\pm 2\\sqrt{2}"), "3 + 2\\sqrt2, 3 - 2\\sqrt2", "plus-minus for two roots"),
            (None, _box("\\frac{\\sqrt{2}}{2}"), "\\frac{1}{\\sqrt{2}}", "rationalised against an unrationalised gold"),
            (None, _box("10\\sqrt{2}"), "\\sqrt{200}", "simplified against an unsimplified gold"),
            (None, _box(_nested(40, "5")), "5", "redundant parentheses"),
            (None, "Final Answer: The final answer is $\\frac{10\\sqrt{10.5}}{27}$.", "\\frac{5\\sqrt{42}}{27}",
             "without the problem, the form is not judged: equal values are equal"),
            (None, _box("(9+1)"), "10", "without the problem, the form is not judged"),
        ]
    ],
    Case("recall", None, "The answer is $\\boxed{\\color{red}{7}}$.", "7", "gsm8k", True, "colour, GSM8K"),
    Case("recall", "Convert $1011_{2}$ to base 10.", "The answer is $\\boxed{11_{10}}$.", "11", "math", True,
         "a base-10 subscript"),
    Case("recall", "Find $x$.", "The answer is $\\boxed{\\smash{7}}$.", "7", "math", True,
         "\\smash prints its content"),
    Case("recall", "How many pages?", "She reads 120 + 85 = 205 pages.\nThe answer is 205.", "205", "gsm8k", True,
         "a plain statement"),
    Case("recall", "How many dollars?", "#### 1,600", "1600", "gsm8k", True, "thousands separator"),
    # ---- from the third pass
    *[
        Case("recall", problem, response, gold, dataset, True, why)
        for problem, response, gold, dataset, why in [
            ("How much does she make?", "Therefore, Janet makes $\\boxed{18}$ dollars every day.", "18", "gsm8k",
             "a unit after the box"),
            ("How much does she make?", "$\\boxed{18}$ is the final answer.", "18", "gsm8k",
             "a final-answer phrase after the box that states nothing"),
            ("How much does she make?", "The final answer is $\\boxed{\\$18.00}$.", "18", "gsm8k", "money in the box"),
            ("How much does she make?", "She makes 9 * 2 = $18.\nThe answer is 9 * 2 = 18.", "18", "gsm8k",
             "a true equation as the stated answer"),
            ("What is the least number of boxes she needs?", "She needs at least $\\boxed{5}$ boxes.", "5", "gsm8k",
             "a bound that answers the least number asked for"),
            ("What is the remainder when $2004$ is divided by $12$?",
             "Hence it leaves a remainder of $\\boxed{0}$ when divided by 12.", "0", "math",
             "'when' after the box is not a condition"),
            ("Solve for $x$.", "So $x = \\boxed{5}$.", "5", "math", "a name and = before the box"),
            ("Find $x$.", "**Final Answer**\n\\[\n\\boxed{\\dfrac{3}{4}}\n\\]", "\\frac34", "math",
             "a display box under a markdown heading"),
            ("Find the probability.", "The probability is $\\boxed{0.5}$, or $\\frac{1}{2}$.", "\\frac12", "math",
             "the same value restated is not a hedge"),
            ("How much does she make?", "#### Step 1\n16 - 3 - 4 = 9 eggs.\n#### Step 2\n9 * 2 = 18.\n\nThe answer is "
             "$\\boxed{18}$.", "18", "gsm8k", "markdown headings are not GSM8K's #### N"),
            ("How much does she make?", "The answer is 18 (6 × 3 = 18).", "18", "gsm8k",
             "work in brackets after the value"),
            ("How much does she make?", "The answer is $\\boxed{\\color{NavyBlue}{18}}$.", "18", "gsm8k",
             "a dvipsnames colour"),
            ("Find the positive solution $x$.",
             "Thus $x = \\boxed{5}$.\n\nThe other solution is -3, which is extraneous.", "5", "math",
             "another value ruled out after the box"),
            ("What is the remainder?", "The remainder is $\\boxed{3}$ (when divided by 4).", "3", "math",
             "a bracket after the box that is no condition on the value"),
            ("How many apples?", "So $\\boxed{5}$ (but Tom ate 2 of them earlier).", "5", "gsm8k",
             "a remark in brackets after the box"),
            ("How much does she make?", "Before giving the final answer, we check 3 cases.\nSo $\\boxed{18}$.", "18",
             "gsm8k", "'the final answer' in passing states nothing"),
            ("How much does she make?", "The answer is not 9, since that counts eggs.\nSo $\\boxed{18}$.", "18",
             "gsm8k", "a value ruled out is not a statement of the answer"),
            ("Find all $p$.", "The intersection of the solutions above is $\\boxed{\\left(\\frac{3}{5},"
             "\\frac{8}{3}\\right]}$.", "\\left(\\frac{3}{5},\\frac{8}{3}\\right]", "math",
             "'above is' before a box is not a bound"),
            # The lead's review of the third pass: affirming adverbs, prose dashes and markdown emphasis.
            ("Find $x$ if $3x = 12$.", "So $x$ is simply $\\boxed{4}$.", "4", "math", "'simply' affirms the value"),
            ("Find $x$ if $3x = 12$.", "Final answer: \\boxed{4} -- the only solution.", "4", "math",
             "a double dash before a remark is no minus sign"),
            ("How many apples does he have?", "The answer is 18 — 3 + 15 = 18.", "18", "gsm8k",
             "a spaced dash sets the work apart, as brackets do"),
            ("Find $x$ if $3x = 12$.", "The answer is **4**.", "4", "math", "markdown bold around the stated value"),
            ("Find $x$ if $3x = 12$.", "x = 12/3.\n\n**Answer: 4**", "4", "math", "a bold answer line"),
        ]
    ],
    # ---- from the fifth pass
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
    # ---- from the sixth pass
    *_cases("recall", "What is the residue of $11$ modulo $7$?", "4", [
        ("$11 ≡ \\boxed{4} \\pmod{7}$", True, "a congruence sign before a residue's box"),
    ]),
    *_cases("recall", "Of the two-digit perfect squares, how many end in 6?", "2", [
        ("Only $4^2=16$ and $6^2=36$ end in $6$. Thus, there are $\\boxed{2}$ distinct possible values for $B$.", True,
         "'possible values' in the box's own sentence lists nothing (a MATH reference solution)"),
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
    *_cases("recall", "Compute the value.", "\\frac{1}{10}", [
        (_box("0.1"), True, "a gold with a denominator that is not zero"),
    ]),
    *_cases("recall", "Compute the value.", "\\frac{1}{2-1}", [
        (_box("1"), True, "a gold whose divisor is not zero"),
    ]),
]  # fmt: skip
