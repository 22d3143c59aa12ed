"""The verifier's rules by name (grpo_train/verifier/rules.py): each rule's refused example is refused by that rule
and its kept example scores 1; a judgement names a rule exactly when the response is refused."""

import pytest

from grpo_train.verifier import judge
from grpo_train.verifier.rules import RECALL_NAMES, RECALLS, RULE_NAMES, RULES


def test_rule_names_are_unique_and_staged_in_order():
    assert len(set(RULE_NAMES)) == len(RULE_NAMES)
    stages = [rule.stage for rule in RULES]
    assert stages == sorted(stages, key=["extract", "compare"].index)  # extraction runs before the comparison
    assert RULE_NAMES.index("not_found") == stages.count("extract") - 1 and RULE_NAMES[-1] == "not_equal"


@pytest.mark.parametrize("rule", RULES, ids=RULE_NAMES)
def test_each_rule_refuses_its_example_and_keeps_the_honest_one(rule):
    refused = judge(rule.refuses.response, rule.refuses.gold, rule.refuses.dataset, rule.refuses.problem)
    assert not refused.correct and refused.rule == rule.name, refused
    assert refused.status == ("no_answer" if rule.stage == "extract" else "ok")
    kept = judge(rule.keeps.response, rule.keeps.gold, rule.keeps.dataset, rule.keeps.problem)
    assert kept.correct and kept.rule is None, kept


def test_errors_and_correct_answers_name_no_rule():
    assert judge("The answer is 5.", "N/A", "gsm8k").rule is None  # a bad gold: status error
    assert judge("The answer is 5.", "5", "gsm8k").rule is None
    # a refusal recorded by one item's comparison does not leak into the next item's judgement
    assert judge("The answer is about 5.", "5", "gsm8k").rule == "qualified"
    assert judge("The answer is 7.", "5", "gsm8k").rule == "not_equal"


@pytest.mark.parametrize("recall", RECALLS, ids=RECALL_NAMES)
def test_each_recall_rule_credits_its_example_and_refuses_the_hedge_it_could_open(recall):
    accepted = judge(recall.accepts.response, recall.accepts.gold, recall.accepts.dataset, recall.accepts.problem)
    assert accepted.correct and accepted.rule is None, accepted
    refused = judge(recall.refuses.response, recall.refuses.gold, recall.refuses.dataset, recall.refuses.problem)
    assert not refused.correct and refused.rule is not None, refused


def test_recall_names_are_unique_and_distinct_from_the_refusals():
    assert len(set(RECALL_NAMES)) == len(RECALL_NAMES) and not set(RECALL_NAMES) & set(RULE_NAMES)


def test_the_comparison_returns_only_the_names_of_its_rules():
    """compare.py's checks (refusing_rule and the *_refusal functions under it) return a rule's name, or None when the
    answer passes: every name returned there is one of RULES' comparison rules, so a misspelt one cannot reach
    Judgement.rule unseen."""
    import ast
    from pathlib import Path

    from grpo_train.verifier import compare

    def names(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            return names(node.body) | names(node.orelse)
        return set()

    tree = ast.parse(Path(compare.__file__).read_text())
    checks = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.endswith(("refusing_rule", "_refusal"))]
    returns = [node.value for f in checks for node in ast.walk(f) if isinstance(node, ast.Return) and node.value]
    returned = {name for value in returns for name in names(value)}
    comparison = {rule.name for rule in RULES if rule.stage == "compare"}
    assert compare.NOT_EQUAL == "not_equal" and len(returned) > 10 and returned <= comparison, returned - comparison
