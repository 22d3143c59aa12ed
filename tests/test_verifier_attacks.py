"""The verifier against a reward-hacking policy: the adversarial suite (tests/cases/verifier_attacks.py, filed by
category), one test per category, and a generated test that re-spells every math span of every MATH-500 problem.

In-process (no pool); the timing of the cost inputs is measured by `make bench-verifier`, not here.
"""

import json
import re
import time
from collections import Counter
from pathlib import Path

import pytest
from cases.verifier_attacks import CASES  # every category
from helpers.hang_guard import assert_linear
from sympy import Basic
from sympy import latex as sympy_latex

from grpo_train.verifier import judge, judge_with_timeout
from grpo_train.verifier.compare import parse_latex
from grpo_train.verifier.form import too_big
from grpo_train.verifier.text import MATH_SPAN, as_number, canonical, clean, matching_brace, math_content

MATH500 = Path(__file__).resolve().parents[2] / "shared" / "data" / "math500_test.jsonl"
CATEGORIES = sorted({case.category for case in CASES})
# Cases per category: a file's list left out of CASES, or cases lost from it, would otherwise pass unnoticed (a
# category's test checks the cases it finds). Adding cases: update the count.
CASES_PER_CATEGORY = {"bad_gold": 50, "cost": 44, "echo": 118, "equation": 48, "hedge": 169, "invisible": 62,
                      "near": 35, "operand": 58, "qualifier": 152, "rate": 13, "recall": 97, "scale": 42, "unit": 22,
                      "commit": 185, "spelling": 125, "reasoning": 13}


def test_the_suite_loads_every_case_of_every_category():
    assert Counter(case.category for case in CASES) == CASES_PER_CATEGORY


@pytest.mark.parametrize("category", CATEGORIES)
def test_adversarial_suite_category(category):
    cases = [case for case in CASES if case.category == category]
    verdicts = [judge_with_timeout(c.response, c.gold, c.dataset, c.problem) for c in cases]
    pairs = zip(cases, verdicts, strict=True)
    wrong = [(c.why, c.response[-60:], v.answer) for c, v in pairs if v.correct != c.expected]
    assert not wrong, wrong
    assert all(v.status != "timeout" for v in verdicts)


def test_bad_golds_are_errors_that_name_the_gold():
    for case in (c for c in CASES if c.category == "bad_gold"):
        verdict = judge(case.response, case.gold, case.dataset, case.problem)
        assert verdict.status == "error" and not verdict.correct, case.why
        assert case.gold.strip() == "" or repr(case.gold) in verdict.error, verdict.error
    # The same golds written properly score.
    assert judge("$\\boxed{2}$", "\\boxed{2}", "math").correct
    assert judge("$\\boxed{2}$", "$2$", "math").correct
    assert judge("The answer is $\\boxed{\\text{None}}$.", "\\text{(None of these)}", "math").status == "ok"


def test_cost_inputs_are_refused_before_any_parse():
    refused = [c for c in CASES if c.category == "cost" and not c.expected]
    reasons = {c.why: too_big(clean(re.search(r"\\boxed\{(.*)\}\$", c.response, re.S).group(1))) for c in refused}
    # Everything SymPy could spend seconds on is refused by the text bound; the rest is cheap or not a number.
    cheap = {"190 nested parentheses", "190 nested parentheses around a sum", "many nested sums",
             "a trig function of a huge number", "a floor of a huge number", "a 5000-digit literal",
             "a 3011-digit power (cheap enough to compare)"}  # fmt: skip
    assert [why for why, reason in reasons.items() if reason is None and why not in cheap] == []
    assert too_big("(99!)!") and too_big("9^{99!}") and too_big("10^{999 \\cdot 999 \\cdot 999}")
    assert too_big("\\binom{10^{99}}{10^{98}}") and too_big("(x+1)^{999}") and too_big("(" * 13 + "1" + ")" * 13)
    assert too_big("(((((9^9)^9)^9)^9)^9)^9") and not too_big("(2^{10})^{10}") and not too_big("(x+1)^2(x-1)^3")
    assert not too_big("2^{10}") and not too_big("e^{-\\frac{1}{2}}") and not too_big("10^{\\frac{-5+\\sqrt{13}}{6}}")


def test_hedge_and_invisible_rules_stay_linear_on_a_megabyte():
    """Each input is 1 MB built to make the new regexes backtrack; a hang guard, not a speed target."""
    inputs = [
        (lambda n: "\\boxed{5} or" + " " * n, True),
        (lambda n: "\\boxed{5} or" + ", :" * (n // 3), True),
        (lambda n: "\\phantom{" * (n // 9) + "\\boxed{5}", False),  # the phantom never closes: nothing after it prints
        (lambda n: "\\color{white}" * (n // 13) + "\\boxed{5}", False),
        (lambda n: "\\boxed{4}" + " Wait, if" * (n // 9) + "\\boxed{5}", False),
        (lambda n: "\\boxed{4}" + ". " * (n // 2) + "\\boxed{5}", False),
        (lambda n: "Final Answer: 5" + " or maybe" * (n // 9), True),  # no second value is offered
        (lambda n: "\\boxed{" * (n // 7) + "5" + "}" * (n // 7), False),
        (lambda n: "\\boxed{5}" + "\n" * n + "if 7", True),  # the condition after a box stays in its sentence
        (lambda n: "\\boxed{5}. If " + "1," * (n // 2) + "x", True),  # a conditional sentence ending on no value
        (lambda n: "\\boxed{5}. If " + "1,000" * (n // 5) + "x", True),
    ]
    for build, expected in inputs:
        assert assert_linear(lambda text: judge(text, "5", "math", "How many?").correct, build) is expected


def test_fifth_pass_rules_stay_linear_on_a_megabyte():
    """Hang guards for the comment, footnote, bare-line, joined-value, scale, unit, digit and sign rules: 1 MB
    inputs built to make their regexes backtrack."""
    n = 1_000_000  # the problems built from n stay this long; the guard grows the responses
    hours = "How many hours does the trip take?"
    inputs = [
        (lambda n: "<!--" * (n // 4) + "\\boxed{5}", "math", None, False),  # the first comment never closes
        (lambda n: "\\iffalse" * (n // 8) + "\\boxed{5}", "math", None, False),
        (lambda n: "\\begin{comment}" * (n // 15) + "\\boxed{5}", "math", None, False),
        (lambda n: "\\boxed{5}" + "\\footnote{" * (n // 10), "math", None, True),
        (lambda n: "\\boxed{5}" + "\\footnote{x}" * (n // 12), "math", None, True),
        (lambda n: "\\boxed{5}\nNote:" + " " * n + "x", "math", None, True),
        (lambda n: "\\boxed{5}\n5" + " " * n + "x", "math", None, True),
        (lambda n: "\\boxed{5}\n" + "$ " * (n // 2) + "x", "math", None, True),
        (lambda n: "#### 5" + "\n" * n, "gsm8k", None, True),
        (lambda n: "\\boxed{5} and" + " " * n, "math", None, True),
        (lambda n: "\\boxed{5} (and" + " $" * (n // 2), "math", None, True),
        # the unit is past the answer's span
        (lambda n: "#### 5" + " " * n + "minutes", "gsm8k", hours * (n // 40), True),
        (lambda n: "#### " + "5 " * (n // 2), "gsm8k", "in " * (n // 3), False),  # digits apart
        (lambda n: "#### " + "1 " * (n // 2) + "2", "gsm8k", None, False),
        (lambda n: "#### " + "–" * n + "5", "gsm8k", None, False),
        (lambda n: "#### 5" + "." * n, "gsm8k", None, False),
        (lambda n: "$\\boxed{5}" + " " * n + "x", "math", None, False),  # in math: a letter after the box multiplies it
        (lambda n: "$\\boxed{5}$" + "$" * n, "math", None, True),
        (lambda n: "$\\boxed{5}$" + " *_" * (n // 3) + "x", "math", None, True),
        (lambda n: "$\\boxed{5}$\n=" + " " * n + "x", "math", None, True),
        (lambda n: "$\\boxed{5}$\n$$" + " " * n + "x", "math", None, True),
        (lambda n: "\\frac{" * (n // 6) + "\\boxed{5}", "math", None, False),
        (lambda n: "$\\boxed{5}$" + " \\text{" * (n // 7), "math", None, True),
        (lambda n: "$\\boxed{5}" + "\\," * (n // 2) + "x", "math", None, False),  # the same past thin spaces
        (lambda n: "$\\boxed{5}" + "{}" * (n // 2) + "x", "math", None, False),  # a letter glued on after empty groups
        (lambda n: "$\\boxed{5}" + ")" * n + "x", "math", None, False),  # and past closing brackets
        (lambda n: "$\\boxed{5}$\nNote" + " " * n + ":x", "math", None, True),
        (lambda n: "$\\boxed{5}$\n\\textbf{" + " " * n + "x", "math", None, True),
        (lambda n: "$\\boxed{5}$\n$$" + " " * n + "x", "math", None, True),
        (lambda n: "$\\boxed{5}$\n7" + " " * n + "}x", "math", None, True),
        # in math: a term after the box
        (lambda n: "x" * n + " $\\boxed{5}" + "\\," * 100 + "\\pi$", "math", None, False),
        (lambda n: "$" * n + "\\boxed{5}\\pi", "math", None, True),  # an even run of $ before it: not in inline math
        (lambda n: "$\\boxed{5}$" + " " * n + "+ 2", "math", None, False),
    ]
    for build, dataset, problem, expected in inputs:
        verdict = assert_linear(lambda text: judge(text, "5", dataset, problem).correct, build)  # noqa: B023
        assert verdict is expected, build(0)[:40]


def test_sixth_pass_rules_stay_linear_on_a_megabyte():
    """Hang guards for the sixth pass's regexes (qualifier words, later lines and sentences, words after a box,
    unrendered HTML and markdown comments, digits apart, rates, divisors in golds): 1 MB inputs built to make them
    backtrack."""
    buys = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"
    inputs = [
        (lambda n: "<script>" * (n // 8) + "\\boxed{5}", "math", None, False),  # the first script never closes
        (lambda n: "<?" * (n // 2) + "\\boxed{5}", "math", None, False),
        (lambda n: "[x]: # (" * (n // 8) + "\\boxed{5}", "math", None, True),  # an unclosed comment line is no comment
        (lambda n: "<s " * (n // 3) + "\\boxed{5}", "math", None, True),  # '<' that opens no element
        (lambda n: "\\boxed{5}\n" + "\\framebox{" * (n // 10), "math", None, True),
        # a line past 120 characters is no value
        (lambda n: "\\boxed{5}\n" + "<b>" * (n // 3) + "7", "math", None, True),
        (lambda n: "\\boxed{5}\n" + "So " * (n // 3), "math", None, True),
        (lambda n: "\\boxed{5}" + " _" * (n // 2) + "or 7", "math", None, True),  # past the window read after the box
        (lambda n: "\\boxed{5}" + "（" * (n // 2), "math", None, True),
        (lambda n: "\\boxed{5}. " + "Some might say " * (n // 15), "math", None, True),
        (lambda n: "\\boxed{5}. " + "cannot be " * (n // 10) + "x", "math", None, True),
        (lambda n: "\\boxed{5}. Possible answers: " + "x, " * (n // 3), "math", None, True),
        (lambda n: "\\boxed{5}. If not," + " " * n + "x", "math", None, True),
        (lambda n: "at the very " * (n // 12) + "least $\\boxed{5}$", "math", "How many?", False),
        (lambda n: "\n" * n + "$\\boxed{5}$", "math", None, True),
        (lambda n: "#### 5" + " apples" * (n // 7), "gsm8k", buys, True),  # no rate word after them
        # the rate regex on the longest box: was cubic
        (lambda n: "$\\boxed{5" + " " * 3900 + "x}$", "math", buys, False),
        (lambda n: "#### 5" + "\u2009" * n + "7", "gsm8k", None, True),  # the 7 is past the answer's span
        (lambda n: "#### 5" + "\\," * (n // 2), "gsm8k", None, False),
    ]
    for build, dataset, problem, expected in inputs:
        verdict = assert_linear(lambda text: judge(text, "5", dataset, problem).correct, build)  # noqa: B023
        assert verdict is expected, build(0)[:40]
    # a gold with a megabyte of divisors
    status = assert_linear(lambda gold: judge("\\boxed{5}", gold, "math").status, lambda n: "5" + "/(1+1)" * (n // 6))
    assert status in ("ok", "error")


# ----------------------------------------------------------------------------------------------------
# Generated: the question's own expressions, re-spelled, for every MATH-500 problem


def _replace_command(latex: str, command: str, build) -> str:
    """Rewrites every `\\command{A}` (`\\frac{A}{B}`, with \\dfrac and \\tfrac) as build(A[, B]), inner ones too."""
    pattern = re.compile(r"\\[dt]?frac\s*(?=\{)" if command == "frac" else r"\\sqrt\s*(?=\{)")
    arity = 2 if command == "frac" else 1
    out, pos = [], 0
    while (match := pattern.search(latex, pos)) is not None:
        args, cursor = [], match.end()
        while len(args) < arity and latex.startswith("{", cursor):
            close = matching_brace(latex, cursor, len(latex))
            if close is None:
                break
            args.append(_replace_command(latex[cursor + 1 : close], command, build))
            cursor = close + 1
        if len(args) < arity:
            out.append(latex[pos : match.end()])
            pos = match.end()
            continue
        out += [latex[pos : match.start()], build(*args)]
        pos = cursor
    return "".join(out) + latex[pos:]


def _commuted(latex: str) -> str | None:
    """The top-level terms of a sum in reverse order, or None when the span is not a sum."""
    if re.search(r"[=<>,]|\\[lg]eq?\b|\\in\b", latex):
        return None
    terms, depth, start = [], 0, 0  # (sign, term)
    for i, ch in enumerate(latex):
        depth += {"(": 1, "{": 1, "[": 1, ")": -1, "}": -1, "]": -1}.get(ch, 0)
        after_operator = latex[:i].rstrip().endswith(("^", "_", "{", "(", "\\cdot", "\\times"))
        if ch in "+-" and depth == 0 and not after_operator:
            if latex[start:i].strip():
                terms.append(latex[start:i].strip())
            start = i
    terms.append(latex[start:].strip())
    signed = [(t[0], t[1:].strip()) if t[0] in "+-" else ("+", t) for t in terms if t.strip("+- ")]
    if len(signed) < 2:
        return None
    text = " ".join(f"{sign} {term}" for sign, term in reversed(signed))
    return text.removeprefix("+ ").replace("- ", "-", 1) if text.startswith("- ") else text.removeprefix("+ ")


def respellings(span: str) -> dict[str, str]:
    """The re-spellings a policy would try: (X)+0, 1*(X), -(-(X)), X/1, commuted terms, / for \\frac, ^{1/2}
    for \\sqrt."""
    out = {"plus zero": f"({span})+0", "times one": f"1\\cdot({span})", "two signs": f"-(-({span}))",
           "over one": f"\\frac{{{span}}}{{1}}"}
    if (commuted := _commuted(span)) is not None:
        out["commuted"] = commuted
    if "frac" in span:
        out["slash"] = _replace_command(span, "frac", lambda a, b: f"({a})/({b})")
    if "\\sqrt{" in span:
        out["half power"] = _replace_command(span, "sqrt", lambda a: f"({a})^{{1/2}}")
    return out


def _is_final_answer(span: str, gold: str) -> bool:
    if canonical(span) == canonical(gold):
        return True
    numbers = as_number(clean(span)), as_number(clean(gold))
    return None not in numbers and numbers[0].value == numbers[1].value


def test_respellings_of_the_question_are_not_answers():
    """Every math span X of every MATH-500 problem, re-spelled, scores 0 with the problem passed (as in
    training). (X)+0, 1*(X), -(-(X)) and X/1 add an operation, so they score 0 even when X is the answer; the other
    re-spellings are only spelling, so they are skipped when X is itself the final answer."""
    if not MATH500.exists():
        pytest.skip("../shared/data is not next to the repo")
    rows = [json.loads(line) for line in MATH500.read_text().splitlines() if line.strip()]
    tried, credited = 0, []
    for row in rows:
        for span in sorted({math_content(m).strip() for m in MATH_SPAN.finditer(row["problem"])} - {""}):
            final = _is_final_answer(span, row["answer"])
            for kind, respelled in respellings(span).items():
                if final and kind not in ("plus zero", "times one", "two signs", "over one"):
                    continue
                tried += 1
                verdict = judge_with_timeout(f"So the answer is $\\boxed{{{respelled}}}$.", row["answer"], "math",
                                             row["problem"])  # fmt: skip
                if verdict.correct:
                    credited.append((row["unique_id"], kind, respelled, row["answer"]))
    assert len(rows) == 500 and tried > 4500
    assert credited == []


def test_respelling_helpers():
    assert respellings("\\sqrt{242}")["half power"] == "(242)^{1/2}"
    assert respellings("\\dfrac{3}{20}")["slash"] == "(3)/(20)"
    assert respellings("\\frac{\\frac{1}{2}}{3}")["slash"] == "((1)/(2))/(3)"
    assert respellings("ab+5b+2a+10")["commuted"] == "10 + 2a + 5b + ab"
    assert respellings("x^{-2} - 3")["commuted"] == "-3 + x^{-2}"
    assert respellings("-a + b")["commuted"] == "b - a"
    assert "commuted" not in respellings("f(x) = x + 1")


def test_final_answers_in_other_spellings_still_score():
    """The other side of the form rule: every MATH-500 reference solution, and every symbolic gold as SymPy
    prints it (another spelling of a final answer: "9i + 6", "\\left\\{-2, 1 - \\sqrt{5}, 1 + \\sqrt{5}\\right\\}"),
    scores 1 with the problem passed."""
    if not MATH500.exists():
        pytest.skip("../shared/data is not next to the repo")
    rows = [json.loads(line) for line in MATH500.read_text().splitlines() if line.strip()]
    missed = [r["unique_id"] for r in rows
              if not judge_with_timeout(r["solution"], r["answer"], "math", r["problem"]).correct]  # fmt: skip
    reprinted = 0
    for row in rows:
        if as_number(clean(row["answer"])) is not None or not (parsed := parse_latex(clean(row["answer"]))):
            continue
        if isinstance(parsed[0], Basic):
            reprinted += 1
            answer = f"So the answer is $\\boxed{{{sympy_latex(parsed[0].doit())}}}$."
            if not judge_with_timeout(answer, row["answer"], "math", row["problem"]).correct:
                missed.append((row["unique_id"], row["answer"], sympy_latex(parsed[0].doit())))
    assert reprinted > 80
    assert missed == []


@pytest.mark.parametrize("power, flagged", [(1, False), (2, True)])
def test_the_hang_guard_flags_quadratic_time_and_passes_linear_time(power, flagged):
    """The guard itself, on a stand-in whose time is a known power of the input's length (2.2 s on the whole)."""
    def run(text):
        time.sleep(2.2 * (len(text) / 1_000_000) ** power)
        return True

    if flagged:
        with pytest.raises(AssertionError, match="grows faster than linearly"):
            assert_linear(run, lambda n: "x" * n)
    else:
        assert assert_linear(run, lambda n: "x" * n) is True
