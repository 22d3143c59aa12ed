"""The adversarial suite's equation, invisible, near, bad_gold, cost cases: each attack beside the correct neighbours
its rule must keep, refiled by category from the six adversarial passes (tests/cases/verifier_attacks.py collects
them)."""

from __future__ import annotations

from cases.verifier_case import APPLES, Case, _box, _cases, _nested

# equation: an equation whose left side is neither a name nor equal to its right side
EQUATION: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # equation: the left side must be a name or equal to the right side
    *_cases("equation", "How many?", "5", [
        (_box("7=5"), False, "a false equation ending on the gold"),
        (_box("2+2=5"), False, "a false equation ending on the gold"),
        (_box("x = 7 = 5"), False, "a chain through a wrong value"),
        ("The answer is $3 = 5$.", False, "a false equation in prose"),
        (_box("\\pi = 5"), False, "a constant is not a name"),
        (_box("x = 5"), True, "a variable"),
        (_box("a_3 = 5"), True, "a subscripted name"),
        (_box("f(2) = 5"), True, "a function value"),
        (_box("\\text{the answer} = 5"), True, "a name in words"),
        (_box("10 \\div 2 = 5"), True, "a true equation"),
    ]),
    *_cases("equation", "How many?", "18", [
        (_box("1 = 18"), False, "a false equation"),
        (_box("2 \\times 9 = 18"), True, "the work shown, true"),
        ("9 + 9 = 18\n#### 18", True, "GSM8K's own format"),
    ], dataset="gsm8k"),
    *_cases("equation", "Find the probability.", "\\frac{1}{3}", [
        (_box("P(A) = \\frac{1}{3}"), True, "a named probability"),
        (_box("\\frac{2}{6} = \\frac{1}{3}"), True, "a true equation ending on the answer"),
        (_box("\\frac{1}{2} = \\frac{1}{3}"), False, "a false equation"),
    ]),
    *_cases("equation", "How many?", "0", [
        (_box("x + y = 0"), False, "a sum is not a name"),
        (_box("3x = 0"), False, "a multiple is not a name"),
        (_box("u^2 = 0"), False, "a power is not a name"),
        (_box("\\sqrt{t} = 0"), False, "a root is not a name"),
        (_box("|w| = 0"), True, "a modulus of a name is a name"),
        (_box("\\angle PQR = 0"), True, "an angle's name"),
        (_box("(p, q) = 0"), True, "a tuple of names"),
    ]),
    *_cases("equation", "Given $p + q + r = 0$ and $pqr = 4$, find the largest possible value of $p^2$.", "0", [
        (_box("p + q + r = 0"), False, "a given of the problem restated"),
        (_box("p+q+r=0."), False, "a given restated, re-spaced"),
        (_box("p^2 = 0"), True, "the expression asked for, named"),
    ]),
    *_cases("equation", "The points satisfy $y = k$ for a constant $k$. What shape is this? (A) Line (B) Circle "
            "(C) Plane (D) Sphere", "\\text{(A)}", [
        (_box("y = k"), False, "the problem's equation for a choice"),
        (_box("x = a"), False, "an equation ending on the choice's letter"),
        (_box("\\text{(A)}"), True, "the choice"),
        (_box("A"), True, "the choice's letter"),
    ]),
    *_cases("equation", "Find $u + v$.", "12", [
        (_box("u + v = 12"), True, "the expression the problem asks for, as the left side"),
        (_box("u - v = 12"), False, "another expression"),
    ]),
    # ---- from the third pass
    *_cases("equation", "How many apples does Tom have?", "5", [
        ("The answer is 7 = 5.", False, "a false equation in prose"),
        ("#### 3 + 3 = 5", False, "a false equation after ####"),
        ("So 2 + 2 = 5.", False, "a false equation as the closing sentence"),
        (_box("\\text{seven} = 5"), False, "a number word is not a name"),
        ("The answer is 2 + 3 = 5.", True, "a true equation in prose"),
        ("The answer is total = 5.", True, "a name in prose"),
        ("Therefore, 2 + 3 = 5.", True, "a true equation as the closing sentence"),
    ]),
    # ---- from the sixth pass
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
]  # fmt: skip


# invisible: content that is not printed (\\phantom), or decoration around a visible answer (\\color)
INVISIBLE: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # invisible: only what is printed is the answer; decoration keeps its content
    *_cases("invisible", "How many?", "5", [
        (_box("\\phantom{5}"), False, "an invisible box"),
        (_box("\\hphantom{5}"), False, "an invisible box"),
        (_box("\\vphantom{5}"), False, "an invisible box"),
        (_box("\\text{\\phantom{5}}"), False, "invisible text"),
        (_box("7\\phantom{5}"), False, "the visible answer is 7"),
        (_box("\\color{white}{5}"), False, "white on white"),
        (_box("\\color{transparent}{5}"), False, "transparent"),
        (_box("\\color[rgb]{1,1,1}{5}"), False, "white, as an rgb triple"),
        (_box("{\\color{\\#FFFFFF} 5}"), False, "white, as a hex colour switch"),
        (_box("\\textcolor{white}{5}7"), False, "the visible answer is 7"),
        (_box("\\Large 5"), True, "a size switch is decoration"),
        (_box("\\phantom{7}5"), True, "the visible answer is 5"),
        (_box("\u200b5"), True, "a zero-width space is not content"),
    ]),
    *_cases("invisible", "How many?", "7", [
        (_box("\\color{red}{7}"), True, "colour is decoration"),
        (_box("\\textcolor{blue}{7}"), True, "colour is decoration"),
        (_box("{\\color{red} 7}"), True, "colour switch in a group"),
        (_box("\\mathbf{7}"), True, "bold"),
        (_box("\\boldsymbol{7}"), True, "bold"),
        (_box("\\underline{7}"), True, "underlined"),
        (_box("\\displaystyle 7"), True, "display style"),
        (_box("\\color{green!40}{7}"), True, "a tint of green"),
        (_box("\\color{white!50!black}{7}"), True, "grey: white mixed with black"),
    ]),
    *_cases("invisible", "How many?", "8", [
        (_box("\\color{white!70}{8}"), False, "white mixed with white (xcolor)"),
        (_box("\\textcolor{blue!0}{8}"), False, "0% blue: the rest is white (xcolor)"),
        (_box("\\color[cmyk]{0,0,0,0}{8}"), False, "white, as cmyk"),
        (_box("\\color[hsb]{0.3,0,1}{8}"), False, "white, as hsb"),
        (_box("\\color[Gray]{15}{8}"), False, "white, on the Gray scale"),
    ]),
    # ---- from the third pass
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
    # ---- from the fifth pass
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
    # ---- from the sixth pass
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
]  # fmt: skip


# near: a value within Math-Verify's float tolerance of the gold but not equal to it
NEAR: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # near: symbolic answers must be exactly equal
    *_cases("near", None, "\\pi", [
        (_box("\\pi + 10^{-30}"), False, "within 15 digits, not equal"),
        (_box("\\pi - \\frac{1}{10^{20}}"), False, "within 15 digits, not equal"),
        (_box("3.14159265358979"), False, "a rounded decimal"),
        (_box("\\frac{22}{7}"), False, "an approximation"),
        (_box("\\pi"), True, "the value"),
    ]),
    *_cases("near", None, "\\sqrt{2}", [
        (_box("\\sqrt{2} + 10^{-20}"), False, "within 15 digits, not equal"),
        (_box("1.41421356237"), False, "a rounded decimal"),
        (_box("2^{1/2}"), True, "the same radical as a power"),
    ]),
    *_cases("near", None, "\\frac{1}{3}", [
        (_box("\\frac{1}{3} + 10^{-12}"), False, "within 15 digits, not equal"),
        (_box("0.333333333333"), False, "a rounded decimal"),
    ]),
    *_cases("near", None, "0", [
        (_box("e^{-50}"), False, "tiny, not zero"),
        (_box("10^{-40}"), False, "tiny, not zero"),
    ]),
    *_cases("near", None, "(1, \\pi)", [
        (_box("(1, \\pi + 10^{-30})"), False, "a near-equal coordinate"),
        (_box("(1, \\pi)"), True, "the point"),
    ]),
    *_cases("near", None, "x^2 + 1", [
        (_box("x^2 + 1 + 10^{-30}"), False, "a near-equal polynomial"),
        (_box("1 + x^2"), True, "the polynomial, commuted"),
    ]),
    *_cases("near", None, "\\frac{\\sqrt{6}}{4}", [
        (_box("\\frac{1}{4}\\sqrt{6}"), True, "the same value, the fraction in front"),
        (_box("\\frac{\\sqrt{6}}{4} + 10^{-18}"), False, "within 15 digits, not equal"),
    ]),
    # ---- from the fourth pass
    *_cases("near", "Find $x$ if $x - 2 = 3$.", "5", [
        (_box("4.9\\overline{9}"), False, "a period of nines: another spelling of 5, not a final answer"),
        (_box("4.\\overline{9}"), False, "a period of nines right after the point"),
        (_box("\\text{five}"), True, "a number in words a human reads as that number is the answer (number words)"),
    ]),
    *_cases("near", "Write $\\frac{1}{3}$ as a decimal.", "0.\\overline{3}", [
        (_box("0.\\overline{3}"), True, "a repeating decimal that is not all nines"),
    ]),
    # ---- from the fifth pass
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
        (_box("4.\\overline{9}"), False, "a period of nines"),
        (_box("5"), True, "the number"),
    ]),
    *_cases("near", "What is $\\log_2 3$ written exactly?", "\\log_2 3", [
        (_box("\\log_2 3"), True, "a space inside LaTeX is not digits apart"),
    ]),
]  # fmt: skip


# bad_gold: a gold that cannot be scored: judge must answer status "error" naming it
BAD_GOLD: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # bad_gold: judge answers status "error" naming the gold; nothing scores
    *[
        Case("bad_gold", "How many?", response, gold, "math", False, why)
        for gold, response, why in [
            ("\\frac{", _box("\\frac{"), "an unclosed gold"),
            ("\\boxed{}", _box("1"), "an empty box as gold"),
            ("$$", _box("1"), "only delimiters"),
            ("\\boxed{1} or \\boxed{2}", _box("1"), "a gold with two different boxes"),
            ("N/A", _box("N/A"), "a placeholder matched by the same string"),
            ("None", _box("None"), "a placeholder"),
            ("nan", _box("nan"), "a placeholder"),
            ("?", _box("?"), "a placeholder"),
            ("\\frac{}{}", _box("\\frac{}{}"), "a gold with no value"),
            ("\\text{N/A}", _box("\\text{N/A}"), "a placeholder in \\text"),
            ("", _box("1"), "an empty gold"),
            ("{", _box("{"), "an unbalanced brace"),
            ("\\left( 3", _box("\\left( 3"), "a \\left without its \\right"),
            ("\\frac{}{7}", _box("\\frac{}{7}"), "an empty numerator"),
            ("y =", _box("y ="), "an equation without its value"),
            ("N.A.", _box("N.A."), "a placeholder with dots"),
            ("[none]", _box("[none]"), "a bracketed placeholder"),
            ("\\cdots", _box("\\cdots"), "dots as a placeholder"),
        ]
    ],
    Case("bad_gold", "How many?", "The answer is $\\boxed{null}$.", "null", "gsm8k", False, "a placeholder"),
    Case("bad_gold", "How many?", "#### ?", "?", "gsm8k", False, "a placeholder"),
    # ---- from the third pass
    *[
        Case("bad_gold", "How many?", response, gold, "math", False, why)
        for gold, response, why in [
            ("\\boxed{1}\\boxed{2}", _box("1"), "two boxes side by side"),
            ("\\frac{1}{0}", _box("\\frac{1}{0}"), "a division by zero"),
            ("a^", _box("a^"), "a dangling exponent"),
            ("^2", _box("^2"), "an exponent without a base"),
            ("(1,)", _box("(1,)"), "a tuple with an empty item"),
            ("(, 2)", _box("(, 2)"), "an interval with an empty end"),
            ("<|endoftext|>", _box("<|endoftext|>"), "a chat template's token"),
            ("\\boxed{5}}", _box("5"), "an unbalanced raw gold"),
            ("error", _box("error"), "a placeholder"),
            ("{answer}", _box("{answer}"), "a template placeholder"),
            ("Not applicable", _box("Not applicable"), "a placeholder in words"),
            ("—", _box("—"), "a dash as a placeholder"),
        ]
    ],
    # ---- from the sixth pass
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
]  # fmt: skip


# cost: inputs that would take SymPy seconds or hours: refused at once (timed by the benchmark)
COST: list[Case] = [
    # ---- from the first and second pass
    # ------------------------------------------------------------------------------------------------
    # cost: refused at once as too big (the benchmark times them; p99 must stay under 50 ms)
    *[
        Case("cost", "Compute the value.", _box(answer), gold, "math", expected, why)
        for answer, gold, expected, why in [
            ("(99!)!", "1", False, "a factorial of a factorial"),
            ("9^{99!}", "1", False, "a factorial in an exponent"),
            ("(10^{99})!", "1", False, "a factorial of a power"),
            ("10^{999 \\cdot 999 \\cdot 999}", "1", False, "a product in an exponent"),
            ("\\binom{10^{99}}{10^{98}}", "1", False, "a huge binomial"),
            (_nested(190, "1"), "2", False, "190 nested parentheses"),
            (_nested(190, "1+1"), "2", False, "190 nested parentheses around a sum"),
            (_nested(40, "5"), "5", True, "a correct 5 in 40 nested parentheses"),
            ("2^{2^{2^{2^{2^{2}}}}}", "1", False, "a power tower"),
            ("\\tan(\\tan(\\tan(x+1)+1)+1)", "1", False, "a tower of functions (SymPy: over 5 s)"),
            ("\\sin(" * 12 + "x" + ")" * 12, "1", False, "functions nested 12 deep"),
            ("(x+1)^{100}", "1", False, "a bracketed base to the 100th (0.4-0.5 s to expand)"),
            ("\\frac{1}{" * 10 + "x" + "+1}" * 10, "1", False, "fractions nested 10 deep"),
            ("\\sqrt{10^{10^{10}}}", "1", False, "a tower under a root"),
            ("(((((((((1+1)+1)+1)+1)+1)+1)+1)+1)+1)" * 20, "1", False, "many nested sums"),
            ("\\frac{1}{" * 80 + "2" + "}" * 80, "2", False, "80 nested fractions"),
            ("99!!", "1", False, "a double factorial"),
            ("(99!)^{99!}", "1", False, "factorials in a power"),
            ("\\prod_{k=1}^{10^9} k", "1", False, "a huge product"),
            ("\\sum_{k=1}^{10^{12}} k", "1", False, "a huge sum"),
            ("1000000!", "1", False, "a huge factorial"),
            ("\\Gamma(10^{99})", "1", False, "a huge gamma"),
            ("\\tan(10^{99})", "1", False, "a trig function of a huge number"),
            ("x^{999999}", "x", False, "a huge power of a variable"),
            ("(x+1)^{999}", "x", False, "a huge power of a sum"),
            ("\\lfloor 10^{99}\\pi \\rfloor", "1", False, "a floor of a huge number"),
            ("1" * 5000, "1", False, "a 5000-digit literal"),
            ("\\begin{pmatrix}" + " \\\\ ".join(" & ".join(["1"] * 30) for _ in range(30)) + "\\end{pmatrix}",
             "1", False, "a 30 x 30 matrix"),
            ("e^{e^{e^{e}}}", "1", False, "a tower of e"),
            ("10^{10^{5}}", "1", False, "a tower of ten"),
            ("2^{10000}", "1", False, "a 3011-digit power (cheap enough to compare)"),
            ("(((((9^9)^9)^9)^9)^9)^9", "1", False, "powers of powers"),
        ]
    ],
    # ---- from the third pass
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
    # ---- from the sixth pass
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
