"""The adversarial suite's third pass (tests/verifier_attacks.py holds the first two and the helpers): what a policy
finds next once the earlier rules hold, each attack with the correct neighbours its rule must keep. Same Case rows and
categories; used through `CASES` below by tests/test_verifier_attacks.py and scripts/bench_verifier.py.
"""

from __future__ import annotations

from verifier_attacks import CASES as EARLIER_CASES
from verifier_attacks import Case, _box, _cases

THIRD_PASS: list[Case] = [
    # ------------------------------------------------------------------------------------------------
    # A third pass: what a policy finds next (each with the correct neighbours the rule must keep)
    *_cases("qualifier", "How many apples does Tom have?", "5", [
        ("The answer is at least $\\boxed{5}$.", False, "a bound right before the box"),
        ("Approximately $\\boxed{5}$.", False, "an approximation right before the box"),
        ("It is not $\\boxed{5}$.", False, "a negation right before the box"),
        ("So $x > \\boxed{5}$.", False, "a relation right before the box"),
        ("$\\approx\\boxed{5}$", False, "a relation symbol before the box, in the same math"),
        ("$\\boxed{5}$ or more.", False, "a bound right after the box"),
        ("$\\boxed{5}^{+}$", False, "a superscript sign continuing the box"),
        ("$\\boxed{5} \\pm 1$", False, "a range continuing the box"),
        ("$\\boxed{5}$ is wrong.", False, "the box declared wrong"),
        ("Perhaps $\\boxed{5}$?", False, "a question, not an answer"),
        (_box("\\text{ungefähr } 5"), False, "a qualifier in another language"),
        ("#### 约5", False, "a qualifier in Chinese"),
        (_box("\\text{mo}\\text{re than }5"), False, "a qualifier split over two text groups"),
        (_box("\\text{abo}ut 5"), False, "a qualifier split between text and math"),
        ("The answer is 5, roughly.", False, "a qualifier after a comma"),
        ("The answer is something like 5.", False, "an approximation in words"),
        (_box("5 \\text{ (rounded)}"), False, "a rounded value"),
        (_box("5\\text{?}"), False, "a question mark in text"),
        (_box("\\text{not quite } 5"), False, "a negated approximation"),
        ("<answer>$\\boxed{5}$</answer>", True, "markup around the box is not a relation"),
        ("So Tom has $\\boxed{5}$ apples left over.", True, "words after the box that are not a qualifier"),
        ("The answer is $\\boxed{5}$ (since 2 + 3 = 5).", True, "a check in brackets after the box"),
        ("Hence $f(3) = \\boxed{5}$.", True, "a name and = before the box"),
        ("The answer is approximately equal to $\\boxed{5}$.", False, "an approximation, 'equal to' between"),
        ("The answer is at least, well, $\\boxed{5}$.", False, "a bound, a filler word between"),
        ("Maybe it's $\\boxed{5}$.", False, "a hedge before the box"),
        ("I think it is $\\boxed{5}$ but not sure.", False, "doubt after the box"),
        ("$\\boxed{5}$ (I'm not certain)", False, "doubt in brackets after the box"),
        ("The number of apples above is $\\boxed{5}$.", True, "'above is' is not a bound"),
        ("#### basically 5", False, "an adverb that loosens the number"),
        ("The answer is pretty much 5.", False, "an approximation in words"),
        ("The answer is at a minimum, 5.", False, "a bound, a comma between"),
        ("The answer is 5 most likely.", False, "doubt after the number"),
        ("The answer is: Emily has exactly 5 apples.", True, "an adverb that keeps the number exact"),
        ("The answer is: give Holly 5 apples.", True, "a name ending in -ly is not an adverb"),
    ], dataset="gsm8k"),
    *_cases("qualifier", "Convert $\\frac{\\pi}{6}$ radians to degrees.", "30^\\circ", [
        (_box("30 \\text{ radians}"), False, "radians for a gold in degrees"),
        (_box("30^\\circ"), True, "degrees"),
        (_box("30"), True, "the number of degrees"),
    ]),
    *_cases("qualifier", "Convert $30^\\circ$ to radians.", "\\frac{\\pi}{6}", [
        (_box("\\frac{\\pi}{6}^\\circ"), False, "degrees for a gold in radians"),
        (_box("\\frac{\\pi}{6}"), True, "radians"),
    ]),
    *_cases("qualifier", "What is the greatest number of pencils Zach could have left over?", "2", [
        ("Therefore, Zach can have at most $\\boxed{2}$ pencils left over.", True,
         "a bound that is what the problem asks for (the greatest value)"),
        ("Therefore, Zach has about $\\boxed{2}$ pencils left over.", False, "an approximation is not asked for"),
    ]),
    *_cases("qualifier", "How much will the investment be worth, to the nearest dollar?", "32,\\!348", [
        ("That is $\\$24,\\!000 \\cdot 1.01^{30} \\approx \\boxed{\\$32,\\!348}$.", True,
         "an approximation the problem asks for (rounding)"),
        ("That is at least $\\boxed{\\$32,\\!348}$.", False, "a bound is not asked for"),
    ]),
    *_cases("hedge", "How many apples does Tom have?", "5", [
        ("$\\boxed{5}$ / 7", False, "a second value after a slash"),
        ("$\\boxed{5}$ (7?)", False, "a second value in brackets"),
        ("$\\boxed{5}$ *or* 7", False, "or in markdown"),
        ("$\\boxed{5}$... or 7.", False, "or after an ellipsis"),
        ("$\\boxed{5}$, otherwise 7", False, "otherwise"),
        ("$\\boxed{5}$ (7 if counting Tom)", False, "a conditional second value in brackets"),
        ("The answer is $\\boxed{5}$ unless Tom ate 2.", False, "a condition naming another value"),
        ("$\\boxed{5} \\text{ or } 7$", False, "or in text after the box"),
        ("$\\boxed{5}, 7$", False, "a second bare value in the same math"),
        ("$\\boxed{5}$ ou 7", False, "or in French"),
        ("The final answer is $5$ / $7$.", False, "two spans joined by a slash"),
        ("The answer is $5$ apples or $7$ apples.", False, "two values with units joined by or"),
        ("The answer is 5, though 7 is also plausible.", False, "a second value in a describing clause"),
        ("The answer is 5. But it could be 7.", False, "another value offered in the next sentence"),
        ("The answer is $\\boxed{5}$.\n\nHowever, 7 is also possible.", False, "another value offered after the box"),
        ("Final answer: 5. Alternative answer: 7.", False, "an alternative answer"),
        ("The answer is $\\boxed{5}$. 7 also works.", False, "another value said to work"),
        ("#### 5\n\nWait, 6.", False, "a bare correction to another value"),
        ("The answer is $\\boxed{5}$.\n\nHmm, actually I think it's 7.", False, "a doubtful correction"),
        ("The answer is 7.\n#### 5", False, "two kinds of statement that disagree"),
        ("$\\boxed{5}$\n#### 7", False, "a box and #### that disagree"),
        ("The answer: $5$ | $7$", False, "a pipe between two values"),
        ("#### 5 and a half", False, "a fraction in words"),
        ("The answer is 5 eggs.\n#### 5", True, "two kinds of statement that agree"),
        ("So the answer is $\\boxed{5}$.\n\nLet me verify: 2 + 3 = 5. This could also be checked by counting.", True,
         "a check after the box offers no other value"),
        ("The answer is 8. Wait, that is wrong: 3 + 2 = 5. So $\\boxed{5}$.", True, "a revision before the box"),
        ("$\\boxed{4}$ is wrong, it must be 5.\nThe final answer is 5.", True,
         "a final statement after the box settles it"),
    ], dataset="gsm8k"),
    *_cases("equation", "How many apples does Tom have?", "5", [
        ("The answer is 7 = 5.", False, "a false equation in prose"),
        ("#### 3 + 3 = 5", False, "a false equation after ####"),
        ("So 2 + 2 = 5.", False, "a false equation as the closing sentence"),
        (_box("\\text{seven} = 5"), False, "a number word is not a name"),
        ("The answer is 2 + 3 = 5.", True, "a true equation in prose"),
        ("The answer is total = 5.", True, "a name in prose"),
        ("Therefore, 2 + 3 = 5.", True, "a true equation as the closing sentence"),
    ]),
    *_cases("invisible", "How many apples does Tom have?", "5", [
        (_box("\\color{snow}{5}"), False, "a near-white named colour"),
        (_box("\\color{ivory}{5}"), False, "a near-white named colour"),
        (_box("\\color[rgb]{1.0,1.0,1.0}{5}"), False, "white with decimals"),
        (_box("\\color[RGB]{250,250,250}{5}"), False, "almost white, RGB"),
        (_box("\\color{\\#fff}{5}"), False, "white, three-digit hex"),
        (_box("\\color{rgb(255,255,255)}{5}"), False, "white, CSS rgb()"),
        (_box("\\color{none}{5}"), False, "an unknown colour is not known to print"),
        (_box("\\color{red!5}{5}"), False, "a 5% tint of red"),
        (_box("\\color{Red}{5}"), True, "a named colour, capitalised"),
        (_box("\\color[rgb]{1,0,0}{5}"), True, "red as an rgb triple"),
        (_box("\\color{\\#0000FF}{5}"), True, "blue as hex"),
        (_box("{\\color{white} 7} 5"), True, "a white group before the visible answer"),
    ]),
    *_cases("echo", "Simplify $\\sqrt{242}$.", "11\\sqrt2", [
        (_box("\\gcd(\\sqrt{242}, \\sqrt{242})"), False, "a function the parser evaluates"),
        (_box("\\max(11\\sqrt{2}, 11\\sqrt{2})"), False, "a function around the value"),
    ]),
    *_cases("echo", "Simplify $\\frac{4+6a}{5}-\\frac{1+3a}{4}$.", "\\frac{11+9a}{20}", [
        (_box("\\log_{10}(10^{\\frac{11+9a}{20}})"), False, "a logarithm of a power"),
        (_box("\\frac{11+9a}{20}(\\sin^2\\theta + \\cos^2\\theta)"), False, "a trigonometric identity"),
        (_box("\\frac{11+9a}{40} + \\frac{11+9a}{40}"), False, "like terms in halves"),
        (_box("\\frac{11}{20} + \\frac{9a}{20}"), True, "the sum split, nothing left to do"),
        (_box("\\frac{9a+11}{20}"), True, "terms commuted"),
    ]),
    *[
        Case("bad_gold", "How many?", response, gold, "math", False, why)
        for gold, response, why in [
            ("\\boxed{1}\\boxed{2}", _box("1"), "two boxes side by side"),
            ("\\frac{1}{0}", _box("\\frac{1}{0}"), "a division by zero"),
            ("a^", _box("a^"), "a dangling exponent"),
            ("\\boxed{5}}", _box("5"), "an unbalanced raw gold"),
            ("error", _box("error"), "a placeholder"),
            ("{answer}", _box("{answer}"), "a template placeholder"),
            ("Not applicable", _box("Not applicable"), "a placeholder in words"),
            ("—", _box("—"), "a dash as a placeholder"),
        ]
    ],
    *[
        Case("cost", "Compute the value.", _box(answer), gold, "math", False, why)
        for answer, gold, why in [
            ("2^{0.5000000000001}", "\\sqrt{2}", "an exponent with 13 decimals (the full 5 s timeout)"),
            ("(a+b+c+d+e)^{20}", "x^2+1", "a sum of 5 terms to the 20th (10626 terms; over 5 s)"),
            ("1.0000001^{10000}", "\\sqrt{2}", "a 70000-digit power (3 s)"),
            ("\\sin^{99}(x)", "\\sqrt{2}", "a function raised to 99 (1.3 s)"),
            ("\\sqrt[999999]{2}", "\\sqrt{2}", "a root of index 999999"),
            ("a" * 390, "\\sqrt{2}", "a product of 390 letters (0.7 s)"),
        ]
    ],
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
            ("Find the sum.", "The sum is $\\boxed{5}$.\n\nThe value 7 would be correct if the sequence started at 0.",
             "5", "math", "a counterfactual after the box"),
            ("How much does she make?", "Before giving the final answer, we check 3 cases.\nSo $\\boxed{18}$.", "18",
             "gsm8k", "'the final answer' in passing states nothing"),
            ("How much does she make?", "The answer is not 9, since that counts eggs.\nSo $\\boxed{18}$.", "18",
             "gsm8k", "a value ruled out is not a statement of the answer"),
            ("Find all $p$.", "The intersection of the solutions above is $\\boxed{\\left(\\frac{3}{5},"
             "\\frac{8}{3}\\right]}$.", "\\left(\\frac{3}{5},\\frac{8}{3}\\right]", "math",
             "'above is' before a box is not a bound"),
        ]
    ],
]

CASES: list[Case] = [*EARLIER_CASES, *THIRD_PASS]
