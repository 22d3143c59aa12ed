"""Correct answers in the styles real models write them (MetaMath's "The answer is: N" after a chain, GSM8K's "####"
after a statement, step headings, <think> blocks, prices, recaps after the box, negative values restated, chat tokens),
each beside the attacks its rule must still refuse. Found by a false-negative hunt over GSM8K test and MATH-500 in
generated model styles: before these rules every response of the first eight groups scored 0.
"""

from fractions import Fraction

import pytest
from cases.verifier_policy_styles import KNOWN_MISSES
from cases.verifier_policy_styles import STYLES as POLICY_STYLES
from helpers.hang_guard import assert_linear

from grpo_train.verifier import judge_with_timeout
from grpo_train.verifier.commit import asked_words, closing_statement
from grpo_train.verifier.hedge import stated_value
from grpo_train.verifier.spelling import spelled_number

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
    # An "Answer:" heading over lines of working that start with values; the working's chains are not statements.
    ("**Answer:**\n\nDay 1: 70 * 0.3 = 21 eggs\nDay 2: 21 - 3 = 18 eggs\n\n#### 18", "18", "gsm8k", EGGS, True,
     "a heading over labelled lines of working"),
    ("**Answer:**\n\n16 - 3 - 4 = 9 eggs\n9 * 2 = 18 dollars\n\n#### 18", "18", "gsm8k", EGGS, True,
     "a heading over chains"),
    ("Answer:\n3 + 4 = 7\n#### 5", "5", "gsm8k", APPLES, False, "one chain under the marker states 7"),
    ("Answer:\n7\nTom has 3 + 2 = 5 apples.\n#### 5", "5", "gsm8k", APPLES, False, "a value under the marker"),
    # A recap's chain read whole from its bracket or its bare decimal point; a chain of grouped thousands is one value.
    ("$\\boxed{58}$\n\nIf we redo the last step, the result would be (60+72+42)/3 = 58.", "58", "gsm8k", EGGS, True,
     "a recap opening with a bracket"),
    ("$\\boxed{58}$\n\nIf we redo the last step, the result would be (60+72+42)/2 = 58.", "58", "gsm8k", EGGS, False,
     "a false recap opening with a bracket"),
    ("$\\boxed{90}$\n\nIf we redo the last step, the result would be .9*100 = 90.", "90", "gsm8k", EGGS, True,
     "a recap opening with a bare decimal point"),
    ("$\\boxed{90}$\n\nIf we redo the last step, the result would be .8*100 = 80.", "90", "gsm8k", EGGS, False,
     "a recap giving another value"),
    ("So the answer is 34,500-33,000 = $1,500.", "1500", "gsm8k", WAGES, True, "a chain of grouped thousands"),
    ("So the answer is 80*$20000 = $1,600,000.", "1600000", "gsm8k", WAGES, True, "grouped and ungrouped"),
    ("So the answer is 34,500-33,000 = $1,400.", "1400", "gsm8k", WAGES, False, "a false chain of thousands"),
    ("So the answer is 34,500-33,000 = $1,500.", "34500", "gsm8k", WAGES, False, "an operand of the chain"),
    # Statements agree when one is an equation of the asked expression ending on the other's value.
    ("Therefore our answer is $a+b=-1$.\n\nThe answer is $-1$.", "-1", "math", "Find $a+b$.", True,
     "an equation of letters, then its value"),
    ("Therefore our answer is $a+b=-2$.\n\nThe answer is $-1$.", "-1", "math", "Find $a+b$.", False,
     "an equation of letters giving another value"),
    ("So the answer is $\\sqrt{4} = 7$.\n\nThe answer is $7$.", "7", "math", "Find $a+b$.", False,
     "a false chain of numbers is not an equation of letters"),
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


# ----------------------------------------------------------------------------------------------------
# The forms policies write (tests/cases/verifier_policy_styles.py), and the rules that credit them

SALARY = "Maria earns $50,000 a year and gets a 15% raise. What is her salary after the raise?"


@pytest.mark.parametrize("response,gold,dataset,problem,expected,why", POLICY_STYLES,
                         ids=[s[-1] for s in POLICY_STYLES])  # fmt: skip
def test_policy_styles_are_credited_and_their_hedges_refused(response, gold, dataset, problem, expected, why):
    verdict = judge_with_timeout(response, gold, dataset, problem)
    if why in KNOWN_MISSES:
        assert expected and not verdict.correct, why  # when this passes again, drop it from KNOWN_MISSES
        return
    assert verdict.correct == expected, (why, verdict.rule, verdict.answer)


def test_asked_words_name_the_question_up_to_its_data():
    assert asked_words(SALARY) == {"salary"}
    assert asked_words("A rectangle has length 8 and width 4. What is the area of the rectangle with width 4?") == {
        "area", "rectangle"}  # fmt: skip
    assert asked_words("How much does she make every day?") == {"make", "day", "$"}  # money: a currency sign names it
    assert asked_words("How many eggs does she sell daily?") == {"egg", "sell", "day"}
    assert asked_words("Tom has 3 apples.") == frozenset() and asked_words(None) == frozenset()


def test_closing_statement_reads_the_last_clause_and_true_chains_only():
    assert closing_statement("She gets $7,500 more, so her salary is 50000 + 7500 = $57,500.", SALARY) == "$57,500"
    assert closing_statement("Her salary is 50000 + 5000 = $57,500.", SALARY) is None  # a false chain
    assert closing_statement("Her salary is $57,500 and her bonus $500.", SALARY) is None  # the last value names none
    assert closing_statement("Her salary is $57,500", SALARY) is None  # cut off
    assert closing_statement("Her salary is $57,500.", None) is None  # the asked quantity is not known
    assert closing_statement("*57,500*", None) == "57,500"  # a response that is only a value needs no problem
    assert closing_statement("It comes to 12 daily.", "How many pages does Ann finish every day?") == "12 daily"
    assert closing_statement("It comes to 12 in all.", "How many pages does Ann finish every day?") is None


def test_reasoning_blocks_are_read_after_their_close():
    apples = "Tom has 3 apples and buys 2 more. How many apples does Tom have?"
    assert judge_with_timeout("<think>5</think>\n\nThe answer is 5.", "5", "gsm8k", apples).correct
    for response in ("<think>The answer is 5.</think>", "<think>The answer is 5.", "The answer is 5.</think>"):
        assert judge_with_timeout(response, "5", "gsm8k", apples).rule == "reasoning_only", response
    # text before the opening tag: the response is read whole (a box between blocks still disagrees)
    assert not judge_with_timeout("\\boxed{7} <think>b</think> \\boxed{5}", "5", "gsm8k", apples).correct


def test_spelled_numbers_read_one_number_or_none():
    assert spelled_number("1.2 \\times 10^{6}").value == 1_200_000
    assert spelled_number("1.2e-3").value == Fraction(3, 2500)
    assert spelled_number("1'200'000").value == 1_200_000 and spelled_number("1.200.000").value == 1_200_000
    assert spelled_number("1 234,5").value == Fraction(2469, 2) and spelled_number("1.234,5").value == Fraction(2469, 2)
    for ambiguous in ("1.234", "1,234", "1,5", "12 \\times 10^5", "0.5 \\times 10^3", "1.2.3", "1'23'000"):
        assert spelled_number(ambiguous) is None, ambiguous


def test_recall_rules_stay_linear_on_a_megabyte():
    """Hang guards for the closing sentence, the labelled boxes, the asked equation, the clause after a box and the
    reasoning blocks: 1 MB inputs repeating what each reads."""
    inputs = [
        lambda n: "1 + " * (n // 4) + "2 = 3 apples.",  # a chain that never closes, in the closing sentence
        lambda n: "Her salary, " * (n // 12) + "is $57,500.",
        lambda n: "<think>" * (n // 7) + "The answer is 5.",  # opened, never closed
        lambda n: "<think>a</think>" + "<think>" * (n // 7) + "\\boxed{5}",
        lambda n: "\\boxed{5} candies" + ", or" * (n // 4),
        lambda n: "Area: " * (n // 6) + "\\boxed{5}",
        lambda n: "$x = 5$\n" * (n // 8),
    ]
    problem = "Tom has 3 apples and buys 2 more. How many apples does Tom have? What is her salary? Find $x$."
    for build in inputs:  # the time is the point here; the verdicts are tested above
        assert_linear(lambda text: judge_with_timeout(text, "5", "gsm8k", problem).correct, build)
