"""Correct answers in the styles real models write them (MetaMath's "The answer is: N" after a chain, GSM8K's "####"
after a statement, step headings, <think> blocks, prices, recaps after the box, negative values restated, chat tokens),
each beside the attacks its rule must still refuse. Found by a false-negative hunt over GSM8K test and MATH-500 in
generated model styles (2026-11-26): before these rules every response of the first eight groups scored 0.
"""

import pytest
from helpers.hang_guard import assert_linear

from grpo_train.verifier import judge_with_timeout
from grpo_train.verifier.hedge import stated_value

APPLES = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"
EGGS = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast and bakes muffins with four. She sells the "
        "remainder for $2 per egg. How much in dollars does she make every day?")
TEACHERS = "A school has 180 students. If there are 5 students to each teacher, how many teachers are needed?"
ORANGES = "Oranges cost $3 per kilogram. How much do 20 kilograms of oranges cost, in dollars?"
WAGES = "Eliza is paid $400 for her regular hours and $60 for overtime. How much does she earn this week?"
SUM50 = "Compute $(1-2)+(3-4)+\\dots+(99-100)$."

SHAPES = ("In cylindrical coordinates $(r,\\theta,z),$ find the shape described by the equation\n\\[z = c.\\](A) Line\n"
          "(B) Circle\n(C) Plane\n(D) Sphere\n(E) Cylinder\n(F) Cone\n\nEnter the letter of the correct option.")
GROWTH = ("Which equation has the largest solution $x$?\n\n$\\textbf{(A)}\\ 3(1 + r)^x = 7\\qquad \\textbf{(B)}\\ "
          "3(1 + r/10)^x = 7\\qquad \\textbf{(C)}\\ 3(1 + 2r)^x = 7$")

# (response, gold, dataset, problem, expected, why)
STYLES = [
    # Statements of the answer compared by the value they give, not by their text.
    ("So the answer is 9 * 2 = 18.\nThe answer is: 18", "18", "gsm8k", EGGS, True, "MetaMath: a chain, then the value"),
    ("Therefore, the answer is $x = {9}$.\nThe answer is: 9", "9", "math", "Solve $x-2=7$.", True, "a named value"),
    ("So the answer is .75/.25 = 3.\nThe answer is: 3", "3", "gsm8k", APPLES, True, "decimals without a leading 0"),
    ("The answer is 3 + 2 = 5.\n#### 5", "5", "gsm8k", APPLES, True, "a chain, then its #### line"),
    ("Final answer: Tom has 5 apples.\n#### 5", "5", "gsm8k", APPLES, True, "a sentence, then its #### line"),
    ("The answer is 7 = 5.\nThe answer is: 5", "5", "gsm8k", APPLES, False, "a false chain offers 7"),
    ("The answer is x = 7.\nThe answer is: 5", "5", "gsm8k", APPLES, False, "a named value 7, then 5"),
    ("The answer is 3 + 2 = 5.\n#### 7", "7", "gsm8k", APPLES, False, "the chain gives 5, the #### line 7"),
    ("The answer is 5 apples or 7.\n#### 5", "5", "gsm8k", APPLES, False, "two values, then one"),
    ("Final answer: Tom has 5 apples, not 7.\n#### 5", "5", "gsm8k", APPLES, False, "a sentence with two numbers"),
    # "final answer" after a task word names a task; an "Answer:" heading over the working states nothing.
    ("## Step 2: Calculate the final answer\n3 + 2 = 5\n\n#### 5", "5", "gsm8k", APPLES, True, "a step heading"),
    ("Step 2: Find the final answer.\nTom has 3 + 2 = 5 apples.\nThe answer is 5.", "5", "gsm8k", APPLES, True,
     "a step heading with a full stop"),
    ("Before giving the final answer, let me check: 5 - 2 = 3. The answer is 5.", "5", "gsm8k", APPLES, True,
     "a check announced before the answer"),
    ("Before giving the final answer, let me check: 5 - 2 = 3. The answer is 5.", "3", "gsm8k", APPLES, False,
     "the check's value is not the answer (scored 1 before)"),
    ("Calculate the final answer: 7. The answer is 5.", "5", "gsm8k", APPLES, False, "a value after the task"),
    ("To get the final answer: 7\n#### 5", "5", "gsm8k", APPLES, False, "the same before a #### line"),
    ("**Answer:**\n\nTom starts with 3 apples and buys 2 more, so 3 + 2 = 5.\n\n#### 5", "5", "gsm8k", APPLES, True,
     "an Answer heading over the working"),
    ("**Answer:**\n\nTom has 3 apples and buys 2 more apples.\n\n#### 7", "5", "gsm8k", APPLES, False,
     "the heading's working does not change what #### says"),
    ("Answer:\n7\n#### 5", "5", "gsm8k", APPLES, False, "a value under the heading is a statement"),
    ("Answer:\nseven\n#### 5", "5", "gsm8k", APPLES, False, "a word under the heading is a statement"),
    # A closed reasoning block: the answer after it is the one read.
    ("<think>\n2+3=5, so the answer is 5?\n</think>\n\nThe answer is 5.", "5", "math", "What is $2+3$?", True,
     "a tentative answer while thinking"),
    ("<think>\nFirst I thought the answer is 16 * 2 = 32, but she eats 3 and uses 4. 9*2=18.\n</think>\n\n#### 18",
     "18", "gsm8k", EGGS, True, "an abandoned answer while thinking"),
    ("\\boxed{7}</think>\\boxed{5}", "5", "gsm8k", APPLES, True, "the opening tag in the prompt"),
    ("<think>x</think> The answer is 5 or 7.", "5", "gsm8k", APPLES, False, "a hedge after the block"),
    ("<think>x</think> The answer is 5.\nMaybe 7.", "5", "gsm8k", APPLES, False, "another value after the block"),
    ("<think>a</think>\\boxed{7} <think>b</think> \\boxed{5}", "5", "gsm8k", APPLES, False, "a box between blocks"),
    ("\\boxed{7} <think>b</think> \\boxed{5}", "5", "gsm8k", APPLES, False, "a box before the block"),
    # Dollar signs of prices are not math delimiters.
    ("So the answer is $400 + $60 = $460.", "460", "gsm8k", WAGES, True, "a sum of prices"),
    ("So the answer is 147 x $2 = $294.", "294", "gsm8k", EGGS, True, "a product of prices"),
    ("The answer is $7 = $5.", "5", "gsm8k", APPLES, False, "a false chain of prices"),
    ("The answer is $5 or $7.", "5", "gsm8k", APPLES, False, "two prices"),
    # A recap under a condition gives what its chain ends on.
    ("$\\boxed{36}$\n\nIf there are 5 students to each teacher, then 180 students would need 180/5 = 36 teachers.",
     "36", "gsm8k", TEACHERS, True, "a recap of the last step"),
    ("$\\boxed{60}$\n\nIf one kilogram costs $3, then 20 kilograms would cost 20 * 3 = $60.", "60", "gsm8k", ORANGES,
     True, "a recap with a price"),
    ("The answer is $\\boxed{18}$.\n\nIf we redo the last step, the result would be 9*2 = 18.", "18", "gsm8k", EGGS,
     True, "a redone step that agrees"),
    ("$\\boxed{5}$\n\nIf he ate one, it would be 5 + 2 = 7.", "5", "gsm8k", APPLES, False, "another reading's value"),
    ("$\\boxed{5}$\n\nIf he ate one, it would be 7 = 5.", "5", "gsm8k", APPLES, False, "a false chain offers 7"),
    ("$\\boxed{5}$\n\nIf we redo it, it might be 3 + 4 = 7.", "5", "gsm8k", APPLES, False, "a redo, another value"),
    # A minus sign after a label is the value's sign.
    ("$\\boxed{-50}$\n\nSo the answer is -50.", "-50", "math", SUM50, True, "a negative value restated"),
    ("$\\boxed{-50}$\n\nThus the sum is -50.", "-50", "math", SUM50, True, "the same in other words"),
    ("$\\boxed{5}$\n\nSo the answer is -5.", "5", "gsm8k", APPLES, False, "the opposite value restated"),
    ("$\\boxed{5}$\n\nAlt answer -7", "5", "gsm8k", APPLES, False, "another value after a label"),
    ("$\\boxed{5}$\n\nAlt answer - 7", "5", "gsm8k", APPLES, False, "a dash between label and value"),
    # A chat token ends the response.
    ("She makes 9 * 2 = 18.\n#### 18<|im_end|>", "18", "gsm8k", EGGS, True, "an end-of-turn token"),
    ("The answer is: 5</s>", "5", "math", "What is $2+3$?", True, "an end-of-sequence token"),
    ("The answer is 7<|im_end|>The answer is 5", "5", "gsm8k", APPLES, False, "the next turn is not the answer"),
    # A multiple-choice letter with its option's own text; another option's text names two options.
    ("The answer is $\\boxed{\\text{(C) Plane}}$.", "\\text{(C)}", "math", SHAPES, True, "the letter and its text"),
    ("$\\boxed{(C)\\ \\text{plane}}$", "\\text{(C)}", "math", SHAPES, True, "the text in lowercase"),
    ("$\\boxed{\\textbf{(B)}\\ 3(1 + r/10)^x = 7}$", "\\text{(B)}", "math", GROWTH, True, "an equation option"),
    ("$\\boxed{(C)\\ \\text{Sphere}}$", "\\text{(C)}", "math", SHAPES, False, "another option's text (scored 1)"),
    ("$\\boxed{\\text{(C) Plane or (D) Sphere}}$", "\\text{(C)}", "math", SHAPES, False, "two options"),
    ("$\\boxed{\\textbf{(B)}\\ 3(1 + r)^x = 7}$", "\\text{(B)}", "math", GROWTH, False, "option A's equation"),
    ("$\\boxed{(C)\\ 5}$", "\\text{(C)}", "math", SHAPES, False, "a value that is no option's"),
]


@pytest.mark.parametrize("response,gold,dataset,problem,expected,why", STYLES, ids=[s[-1] for s in STYLES])
def test_model_styles_and_their_attacks(response, gold, dataset, problem, expected, why):
    verdict = judge_with_timeout(response, gold, dataset, problem)
    assert verdict.correct == expected, (why, verdict.status, verdict.answer)


def test_stated_value_reads_true_chains_and_single_numbers():
    assert stated_value("9 * 2 = 18") == "18"
    assert stated_value("x = {9}") == "9"
    assert stated_value("3 + 2 = 5 apples.") == "5"
    assert stated_value("Tom has 5 apples") == "5"
    assert stated_value("1/2 + 1/4 = 3/4") == "3/4"
    assert stated_value("7 = 5") == "7 = 5"  # a false chain gives no value
    assert stated_value("five = 5") == "five = 5"  # a number word is not a name
    assert stated_value("5 apples or 7") == "5 apples or 7"


def test_style_rules_stay_linear_on_a_megabyte():
    """Hang guards for the heading, task-word, reasoning-block, price and chain rules: 1 MB inputs repeating what
    each rule reads per match."""
    inputs = [
        (lambda n: "Answer:\nJanet sells some eggs today.\n" * (n // 36) + "#### 5", True),  # headings over working
        (lambda n: "Before giving the final answer, we check.\n" * (n // 42) + "The answer is 5.", True),
        (lambda n: "Calculate the final answer\n" * (n // 27) + "#### 5", True),
        (lambda n: "</think>" * (n // 8) + "The answer is 5", True),  # many closing tags: the whole response is read
        (lambda n: "$1 + $2 = $3 " * (n // 13) + "\n#### 5", True),  # prices everywhere in the working
        # agreeing statements, but thousands of them are spam
        (lambda n: "The answer is 2 + 3 = 5.\n" * (n // 25), False),
        # a chain is read over 60 chars
        (lambda n: "\\boxed{5}\n\nIf so, it would be " + "1 + " * (n // 4) + "4 = 5.", False),
    ]
    for build, expected in inputs:
        verdict = assert_linear(lambda text: judge_with_timeout(text, "5", "gsm8k", APPLES).correct, build)
        assert verdict is expected, build(0)[:40]
