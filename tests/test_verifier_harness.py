"""The verifier's regression harness (scripts/maint/verifier_harness.py): its generated honest answers and its
lost / gained arithmetic. The harness itself runs as `make verifier-harness` (about a minute), not here."""

import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "maint"))

import verifier_harness  # noqa: E402

from grpo_train.verifier import judge  # noqa: E402

GSM8K_ITEM = {"question": "Tom has 3 apples and buys 2 more. How many apples does Tom have?",
              "answer": "Tom has 3+2=<<3+2=5>>5 apples.\n#### 5"}
MATH_ITEM = {"problem": "What is $\\frac{1}{2} + \\frac{1}{4}$?", "answer": "\\frac{3}{4}",
             "solution": "We add: $\\frac{1}{2} + \\frac{1}{4} = \\boxed{\\frac{3}{4}}$."}


def test_honest_answers_are_seeded_and_scored_correct():
    first = verifier_harness.gsm8k_honest(GSM8K_ITEM, random.Random(3), 30)
    assert first == verifier_harness.gsm8k_honest(GSM8K_ITEM, random.Random(3), 30)  # reproducible from the seed
    assert len({style for style, _ in first}) == len(first) > 10
    wrong = [style for style, response in first if not judge(response, "5", "gsm8k", GSM8K_ITEM["question"]).correct]
    assert not wrong, wrong
    math = verifier_harness.math_honest(MATH_ITEM, random.Random(3), 30)
    gold, problem = MATH_ITEM["answer"], MATH_ITEM["problem"]
    wrong = [style for style, response in math if not judge(response, gold, "math", problem).correct]
    assert not wrong, wrong


def test_unboxed_writes_the_box_content_in_place():
    assert verifier_harness._unboxed("so $x = \\boxed{\\frac{3}{4}}$. Done") == "so $x = \\frac{3}{4}$. Done"


def test_compare_counts_lost_gained_and_other_changes():
    cases = [{"set": "honest"}] * 4
    base = [[True, "ok", "5", None], [False, "ok", "7", None], [False, "no_answer", None, None],
            [False, "ok", "7", "not_equal"]]
    head = [[False, "ok", "7", "not_equal"], [True, "ok", "5", None], [False, "ok", "9", "not_equal"],
            [False, "ok", "7", "qualified"]]
    report = verifier_harness.compare(cases, base, head)
    assert [len(report[kind]) for kind in ("lost", "gained", "changed", "rule")] == [1, 1, 1, 1]
    assert report["lost"][0][1] == base[0] and report["gained"][0][2] == head[1]
