"""The verifier's extraction order, labelling conventions, normalisation and safety (in-process).

The process pool and its timeouts are tested in test_verifier_pool.py.
"""

import json
import time
from fractions import Fraction
from pathlib import Path

import pytest

from grpo_train.verifier import extract_answer, is_correct, judge, judge_with_timeout
from grpo_train.verifier.compare import parse_latex
from grpo_train.verifier.form import asks_for, evaluated_by_parser, exact_value, pending_operations
from grpo_train.verifier.text import as_number, visible

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
PUBLIC_CASES = DATA / "verifier_cases_public.jsonl"


def boxed(answer: str) -> str:
    return f"Some working first.\nSo the final answer is $\\boxed{{{answer}}}$."


# ----------------------------------------------------------------------------------------------------
# The public labelled cases (../shared/data)


@pytest.mark.parametrize("with_problem", [True, False])
def test_public_cases_accuracy_and_false_positives(with_problem):
    """As training scores them (the problem text passed where a case has it), and without the problem."""
    if not PUBLIC_CASES.exists():
        pytest.skip("../shared/data is not next to the repo")
    cases = [json.loads(line) for line in PUBLIC_CASES.read_text().splitlines() if line.strip()]
    problems = [c.get("problem") if with_problem else None for c in cases]
    wrong = [c for c, p in zip(cases, problems, strict=True) if is_correct(c["response"], c["gold"], c["dataset"], p)
             != c["expected"]]  # fmt: skip
    false_positives = [c["id"] for c in wrong if not c["expected"]]
    # The bar: accuracy >= 0.995 (at most 3 of 610 wrong) and at most 1 false positive.
    assert len(cases) == 610 and sum(p is not None for p in problems) == (530 if with_problem else 0)
    assert 1 - len(wrong) / len(cases) >= 0.995, [c["id"] for c in wrong]
    assert len(false_positives) <= 1, false_positives


# ----------------------------------------------------------------------------------------------------
# Extraction order and the labelling conventions


def test_extraction_order_box_then_final_answer_then_answer_is_then_hash():
    text = "The answer is 6 eggs.\nFinal Answer: The final answer is $6.00.\n#### 6\nSo it is $\\boxed{6.0}$."
    assert extract_answer(text, "gsm8k") == ("6.0", "boxed")
    assert extract_answer(text.replace("$\\boxed{6.0}$", "6"), "gsm8k") == ("6.00", "final_answer")
    assert extract_answer("The answer is 5 eggs.\n#### 5", "gsm8k") == ("5 eggs", "answer_is")
    assert extract_answer("3 + 2 = 5\n#### 5", "gsm8k") == ("5", "hash")
    # Statements of the answer in different forms must give the same number (C2), unless a retraction comes between.
    assert extract_answer("The answer is 3.\n#### 5", "gsm8k") == (None, "conflict")
    assert extract_answer("So it is $\\boxed{5}$.\n#### 7", "gsm8k") == (None, "conflict")
    assert extract_answer("So it is $\\boxed{5}$. The final answer is 7.", "math") == ("7", "final_answer")  # settled
    revised = "The answer is 8. Wait, that is wrong: 3 + 4 = 7. So $\\boxed{7}$."
    assert extract_answer(revised, "gsm8k") == ("7", "boxed")


def test_nested_braces_and_fbox():
    assert extract_answer("so $\\boxed{\\frac{\\sqrt{2}}{2}}$", "math") == ("\\frac{\\sqrt{2}}{2}", "boxed")
    assert extract_answer("hence \\fbox{12}.", "math") == ("12", "boxed")
    assert is_correct("so $\\boxed{\\dfrac{\\sqrt{2}}{2}}$", "\\frac{\\sqrt2}{2}", "math")


def test_conflicting_boxes_are_wrong_in_either_order():
    assert not is_correct("It is either $\\boxed{12}$ or $\\boxed{13}$.", "12", "gsm8k")
    assert not is_correct("It is either $\\boxed{13}$ or $\\boxed{12}$.", "12", "gsm8k")
    assert judge("$\\boxed{8} \\text{ or } \\boxed{6}$", "6", "math").status == "no_answer"


def test_explicit_self_correction_takes_the_last_box():
    retracted = "So the answer is $\\boxed{40}$.\nWait, I dropped a term. Redoing it: 40 + 2 = 42.\n"
    assert is_correct(retracted + "The answer is $\\boxed{42}$.", "42", "gsm8k")
    assert not is_correct(retracted + "The answer is $\\boxed{42}$.", "40", "gsm8k")


def test_a_final_statement_after_intermediate_boxes_settles_them():
    # Boxes on intermediate results (200, 255) and then an explicit final answer of 10,455.
    text = "$\\boxed{200}$ then $\\boxed{255}$ more.\nFinal Answer: The final answer is $10{,}455$."
    assert is_correct(text, "10455", "math")


def test_multi_part_answers_boxed_side_by_side_need_every_part():
    assert is_correct("$\\boxed{3}, \\boxed{-1}$", "-1, 3", "math")
    assert is_correct(
        "$$\\boxed{(1, 2)} \\quad \\text{and} \\quad \\boxed{(4, 0)}$$", "(1, 2), (4, 0)", "math"
    )
    assert not is_correct("$\\boxed{3}$", "-1, 3", "math")


def test_gold_only_mid_text_or_in_a_truncated_response_is_not_enough():
    assert not is_correct(
        "My first guess is 27, but working it out: 9 * 4 = 36.\nSo the answer is 36.", "27", "gsm8k"
    )
    assert not is_correct("First, 3 * 9 = 27 apples are red. Then the green ones number", "27", "gsm8k")
    assert not is_correct("We get $x = 27$ from the first equation, so the second", "27", "math")
    assert (
        judge("First, 3 * 9 = 27 apples are red. Then the green ones number", "27", "gsm8k").status
        == "no_answer"
    )


def test_unboxed_final_answers_count():
    assert is_correct("Adding them, 120 + 31 = 151.\nThe answer is 151.", "151", "gsm8k")
    assert is_correct("**Final Answer:** 151", "151", "gsm8k")
    assert is_correct(
        "... $x = 7$.\nFinal Answer: The final answer is $7$. I hope it is correct.", "7", "math"
    )
    assert is_correct("Final Answer: The number of marbles left is 19.", "19", "math")
    assert is_correct("Thus the chance that Bo wins is 3/8. <|im_end|>", "\\frac{3}{8}", "math")


def test_echoing_the_expression_to_convert_is_wrong():
    # 7/16 = 0.4375 exactly, but "write 7/16 as a decimal" is not answered by 7/16.
    problem = "Express $\\frac{7}{16}$ as a decimal."
    echo = "$\\frac{7}{16} = \\frac{4375}{10000} = \\boxed{\\frac{7}{16}}$"
    assert not is_correct(echo, "0.4375", "math")  # without the problem: the chain starts at the echo
    assert not is_correct("So $\\boxed{\\frac{7}{16}}$.", "0.4375", "math", problem=problem)
    assert is_correct("So $\\boxed{0.4375}$.", "0.4375", "math", problem=problem)
    # "Simplify sqrt(200)": 10 sqrt 2 is right, the unsimplified sqrt(200) is the question itself.
    assert not is_correct(boxed("\\sqrt{200}"), "10\\sqrt{2}", "math", problem="Simplify $\\sqrt{200}$.")
    assert is_correct(boxed("10\\sqrt2"), "10\\sqrt{2}", "math", problem="Simplify $\\sqrt{200}$.")


def test_exact_decimals_equal_fractions_but_rounded_ones_do_not():
    assert is_correct(boxed("0.375"), "\\frac{3}{8}", "math")  # 3/8 = 0.375 exactly
    assert is_correct(boxed("(1, 2.5)"), "(1, \\frac{5}{2})", "math")
    assert not is_correct(boxed("0.33"), "\\frac{1}{3}", "math")
    # 0.333333 is 1/3 to 6 places: Math-Verify's float rounding would accept it, we do not.
    assert not is_correct(boxed("0.333333"), "\\frac{1}{3}", "math")
    assert not is_correct(boxed("0.4286"), "\\frac{3}{7}", "math")


def test_reward_hacking_probes_get_no_credit():
    assert not is_correct("$\\boxed{5} \\boxed{6} \\boxed{7}$", "6", "math")  # spraying values
    assert not is_correct("The answer is 5 or 6.", "6", "gsm8k")
    assert not is_correct("Final Answer: It is not 6.", "6", "math")
    assert not is_correct("The answer is $\\boxed{6 \\text{ million}}$.", "6", "math")
    assert not is_correct("The answer is $\\boxed{6x}$.", "6", "math")
    assert is_correct("#### 5\nOn reflection:\n#### 6", "6", "gsm8k")  # a revision: the last marker counts
    assert not is_correct("#### 6\nOn reflection:\n#### 5", "6", "gsm8k")
    assert not is_correct("#### 5\n#### 6", "6", "gsm8k")  # two answers, no revision: convention 2, as for boxes
    assert not is_correct("The answer is 6.\nThe answer is 5.", "6", "gsm8k")
    assert not is_correct("The answer is 6. Wait, no, it might be 5.", "6", "gsm8k")  # retracted with a hedge
    assert is_correct("The answer is 6. Wait, let me check: 2 + 4 = 6. Yes.", "6", "gsm8k")  # a check, not a retraction
    assert is_correct("The answer is 6. " * 50, "6", "gsm8k")
    assert not is_correct("The answer is 6. " * 51, "6", "gsm8k")  # a degenerate response, bounded work


def test_percent_and_degrees_conventions():
    assert is_correct(boxed("35"), "35\\%", "math")  # a bare number for a percentage gold
    assert is_correct(boxed("35 \\text{ percent}"), "35\\%", "math")
    assert is_correct(boxed("45"), "45^\\circ", "math")
    assert not is_correct(boxed("0.35"), "35\\%", "math")


# ----------------------------------------------------------------------------------------------------
# GSM8K numbers


@pytest.mark.parametrize(
    "answer",
    ["1,250", "1250", "\\$1,250", "$1250.00", "1250.0", "1250 dollars", "1,250 \\text{ dollars}"],
)
def test_gsm8k_number_spellings(answer):
    assert is_correct(f"The answer is $\\boxed{{{answer}}}$.", "1,250", "gsm8k")


def test_gsm8k_words_around_the_number_and_hash_forms():
    assert is_correct("The answer is: Ana has 18 eggs left.", "18", "gsm8k")
    assert is_correct("9 + 9 = 18\n#### 18", "#### 18", "gsm8k")  # gold written with its marker
    assert is_correct("#### -7", "-7", "gsm8k")
    assert not is_correct("#### 7", "-7", "gsm8k")
    assert not is_correct("The answer is $\\boxed{1250.5}$.", "1,250", "gsm8k")
    assert not is_correct("The answer is $\\boxed{125}$.", "1,250", "gsm8k")


# ----------------------------------------------------------------------------------------------------
# MATH equivalence through Math-Verify


@pytest.mark.parametrize(
    ("answer", "gold", "expected"),
    [
        ("(-\\infty, 1) \\cup (4, \\infty)", "(4,\\infty)\\cup(-\\infty,1)", True),
        ("(-\\infty, 1] \\cup (4, \\infty)", "(-\\infty,1)\\cup(4,\\infty)", False),
        (
            "\\begin{bmatrix} 2 \\\\ -\\frac12 \\end{bmatrix}",
            "\\begin{pmatrix} 2 \\\\ -1/2 \\end{pmatrix}",
            True,
        ),
        ("\\begin{pmatrix} 2 \\\\ 1/2 \\end{pmatrix}", "\\begin{pmatrix} 2 \\\\ -1/2 \\end{pmatrix}", False),
        ("y = 3x - 2", "y=-2+3x", True),
        ("\\{-5, 2\\}", "2, -5", True),
        ("3 + 2\\sqrt{2}, 3 - 2\\sqrt{2}", "3 \\pm 2\\sqrt{2}", True),
        ("3 + 2\\sqrt{2}", "3 \\pm 2\\sqrt{2}", False),
        ("\\frac{1}{4}\\sqrt{6}", "\\frac{\\sqrt6}{4}", True),
        ("2\\sqrt{6}", "\\frac{\\sqrt6}{4}", False),
        ("\\text{(C)}", "C", True),
        ("121_{5}", "121_5", True),
        ("112_5", "121_5", False),
        ("t = 5", "5", True),
    ],
)
def test_math_equivalence(answer, gold, expected):
    assert is_correct(boxed(answer), gold, "math") is expected


def test_format_flag_and_statuses():
    assert judge(boxed("5"), "5", "math") == judge(boxed("5"), "5", "math")  # pure
    verdict = judge(boxed("5"), "5", "math")
    assert (verdict.correct, verdict.formatted, verdict.answer, verdict.status) == (True, True, "5", "ok")
    assert judge("The answer is 5.", "5", "gsm8k").formatted is False
    assert judge("2 + 3 = 5\n#### 5", "5", "gsm8k").formatted is True  # GSM8K's own format
    assert judge("", "5", "gsm8k").status == "no_answer"
    with pytest.raises(ValueError, match="dataset"):
        judge("5", "5", "aime")


# ----------------------------------------------------------------------------------------------------
# Adversarial inputs, in-process (the pool versions are in test_verifier_pool.py)


def test_adversarial_inputs_return_quickly_without_side_effects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    inputs = [
        ("x" * 1_000_000 + " The answer is $\\boxed{5}$.", "5", True),
        ("\\boxed{" + "{" * 10_000 + "7" + "}" * 10_000 + "}", "7", False),  # too deep to be an answer
        ("The answer is \\boxed{7", "7", False),  # unclosed
        ("$\\boxed{9^{9^{9^{9}}}}$", "9", False),
        ("$\\boxed{10^{10^{10}}}$", "3", False),
        ("$\\boxed{2^{123456789}}$", "3", False),
        ("$\\boxed{__import__('os').system('touch pwned')}$", "0", False),
        ("The answer is $\\boxed{\udcff\x00\ufffd7}$", "7", False),  # lone surrogate, NUL, replacement char
        ("\\boxed{5}", "", False),  # empty gold
        ("\\boxed{1}" * 200, "1", False),  # box spam
    ]
    for response, gold, expected in inputs:
        start = time.perf_counter()
        assert is_correct(response, gold, "math", timeout_s=5.0) is expected
        assert time.perf_counter() - start < 5.0
    assert not (tmp_path / "pwned").exists()
    assert judge("\\boxed{5}", "", "math").status == "error"


def test_the_soft_timer_turns_a_slow_comparison_into_a_timeout():
    # A symbolic comparison Math-Verify needs well over 10 ms for (simplify of a rational function).
    slow = boxed("\\frac{(x+1)^{7} - (x-1)^{7}}{(x^2+3)(x^4+5)}")
    verdict = judge_with_timeout(
        slow, "\\frac{14x^6 + 70x^4 + 42x^2 + 2}{(x^2+3)(x^4+5)}", "math", timeout_s=0.01
    )
    assert verdict.status == "timeout" and not verdict.correct
    # Given time, the same comparison succeeds: (x+1)^7 - (x-1)^7 = 14x^6 + 70x^4 + 42x^2 + 2.
    assert judge(slow, "\\frac{14x^6 + 70x^4 + 42x^2 + 2}{(x^2+3)(x^4+5)}", "math").correct


# ----------------------------------------------------------------------------------------------------
# The answer-form rule's pieces


@pytest.mark.parametrize(
    ("latex", "pending"),
    [
        ("11\\sqrt{2}", set()),
        ("\\frac{3\\sqrt{3}}{4}", set()),
        ("3 - 2\\sqrt{2}", set()),
        ("\\frac{2\\pi}{3}", set()),
        ("-\\frac{\\pi}{6}", set()),
        ("2(x+1)", set()),
        ("\\frac{1}{e^2}", set()),
        ("x^2 + 7x + 10", set()),
        ("\\log_2 3", set()),
        ("\\frac{20000}{\\pi}", set()),
        ("3\\sqrt[3]{19}", set()),
        ("99^2+99+1", {"power", "sum"}),
        ("(5)+0", {"sum"}),
        ("1\\cdot(\\sqrt{53})", {"product"}),
        ("242^{1/2}", {"radical"}),
        ("\\sqrt{\\frac{3}{8}}", {"radical"}),
        ("\\frac{1}{\\sqrt{2}}", {"radical"}),
        ("\\log_2 64", {"log"}),
        ("x^2+2x+5x+10", {"sum"}),
        ("2 \\cdot 3\\pi", {"product"}),
        ("\\frac{3\\sqrt{2}}{6}", {"fraction"}),
        ("x \\cdot x", {"product"}),
        ("5!", {"factorial"}),
        ("\\sin(\\pi/6)", {"sin"}),
    ],
)
def test_pending_operations_read_from_the_unevaluated_tree(latex, pending):
    assert pending_operations(parse_latex(latex)[0]) == pending


def test_operations_the_parser_evaluates_are_read_from_the_text():
    assert evaluated_by_parser("\\binom{31}{28}") == {"binomial", "function binom"}
    assert evaluated_by_parser("\\frac{6}{8} + 6/8") == {"fraction"}
    assert evaluated_by_parser("\\frac{3}{4}\\sqrt{2}") == set()
    # Functions by family: what the gold writes may be written in another member of it.
    assert evaluated_by_parser("\\gcd(x, x) + \\sin^2 t + \\cos^2 t") == {"function gcd", "function trig"}
    assert evaluated_by_parser("\\ln 2 + \\operatorname{lcm}(4, 6)") == {"function log", "function lcm"}


def test_exact_arithmetic_without_eval():
    assert exact_value("2 \\times 9") == 18
    assert exact_value("3 + 5 \\cdot 2 - 1") == 12
    assert exact_value("(1 + 2) / 4") == Fraction(3, 4)
    assert exact_value("\\frac{2}{6}") == Fraction(1, 3)
    assert exact_value("2x") is None and exact_value("1/0") is None and exact_value("__import__('os')") is None


def test_what_the_problem_asks_for():
    assert asks_for("Express $\\frac{3}{20}$ as a decimal.") == {"decimal"}
    assert asks_for("Factor the expression $ab+5b+2a+10$.") == {"factor"}
    assert asks_for("Expand the product $(x+2)(x+5)$.") == {"expand"}
    assert asks_for("What is the greatest common factor of 12 and 18?") == set()
    assert asks_for("Compute $5!$, the factorial of five.") == set()
    assert asks_for(None) == set()


def test_only_printed_content_is_read():
    assert visible("\\boxed{\\phantom{5}}") == "\\boxed{}"
    assert visible("\\boxed{\\phantom{\\frac{1}{2}}7}") == "\\boxed{7}"
    assert visible("\\boxed{\\color{red}{7}}") == "\\boxed{{7}}"
    assert visible("\\boxed{{\\color{white} 5} 7}") == "\\boxed{ 7}"  # the whole group goes
    assert visible("\\boxed{5\u200b}") == "\\boxed{5}"


def test_repeating_decimals_are_exact():
    assert as_number("0.\\overline{3}").value == Fraction(1, 3)
    assert as_number("0.1\\overline{6}").value == Fraction(1, 6)
    assert as_number("2.\\overline{45}").value == Fraction(27, 11)
    assert as_number("\\frac{6}{8}").reduced is False and as_number("\\frac{3}{4}").reduced is True


@pytest.mark.parametrize("tail", [".", "-", ". ", "- -", "\n", " ", "*", "…"])
def test_a_degenerate_tail_after_the_answer_is_read_in_linear_time(tail):
    """A long run of one character after a box (a degenerate generation) once made a hedge regex backtrack
    exponentially: 50 dots took 140 s. Runs of 60 and 20000 now finish far inside the item timeout."""
    for n in (60, 20000):
        response = "So the answer is $\\boxed{5}$" + tail * n + "7"
        verdict = judge_with_timeout(response, "5", "math", "How many apples?", timeout_s=5)
        assert verdict.status != "timeout", (repr(tail), n)
