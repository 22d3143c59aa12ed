"""pass@k, eval summaries, `grpo-eval` on the tiny model, and the training-curve plot."""

import json
import subprocess
import sys
from math import comb
from pathlib import Path

import pytest

from grpo_train.config import load_config
from grpo_train.data import Problem, load_problems
from grpo_train.evaluation import EvalItem, item_record, pass_at_k, summarise
from grpo_train.plot import plot_run

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.mark.parametrize("n, c, k, expected", [
    (5, 2, 2, 0.7),  # 1 - C(3,2)/C(5,2) = 1 - 3/10
    (5, 2, 1, 0.4),  # pass@1 = c / n
    (4, 0, 2, 0.0),  # nothing correct
    (4, 3, 2, 1.0),  # n - c = 1 < k: every pair holds a correct one
    (10, 3, 5, 1 - comb(7, 5) / comb(10, 5)),  # 1 - 21/252 = 0.91666...
])
def test_pass_at_k_worked_examples(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected, abs=1e-12)


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError):
        pass_at_k(4, 5, 1)
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def item(correct: bool, samples: list[bool], **meta) -> EvalItem:
    problem = Problem(uid="u", question="q", gold="1", dataset="math", meta=meta)
    return EvalItem(problem, "text", correct, "ok" if correct else "no_answer", None, False, 10, samples)


def test_summary_counts_and_breakdowns():
    items = [item(True, [True, False, False, False], subject="Algebra", level=1),
             item(False, [False, False, False, False], subject="Algebra", level=2),
             item(True, [True, True, True, True], subject="Geometry", level=2)]
    summary = summarise(items, k=4)
    assert summary["n"] == 3 and summary["counts"]["correct"] == 2 and summary["counts"]["no_answer"] == 1
    assert summary["no_answer"] == pytest.approx(1 / 3) and summary["error"] == 0  # fractions, as eval/ in metrics
    assert summary["accuracy"] == pytest.approx(2 / 3)
    # mean@4 = (1/4 + 0 + 1) / 3; pass@4 = (1 + 0 + 1) / 3; pass@1 = mean@4
    assert summary["mean@4"] == pytest.approx(1.25 / 3)
    assert summary["pass@4"] == pytest.approx(2 / 3) and summary["pass@1"] == pytest.approx(1.25 / 3)
    assert summary["by_subject"]["Algebra"] == {"n": 2, "accuracy": 0.5}
    assert summary["by_level"]["2"]["n"] == 2


def test_summary_names_the_rules_that_refused():
    items = [item(True, []), item(False, []), item(False, []), item(False, [])]
    items[1].greedy_rule, items[2].greedy_rule, items[3].greedy_rule = "not_found", "qualified", "not_found"
    summary = summarise(items)
    assert summary["veto"] == {"not_found": 0.5, "qualified": 0.25}  # a rule that refused none is absent
    assert list(summary["veto"]) == ["not_found", "qualified"]  # in the order the rules run
    assert summary["counts"]["veto"] == {"qualified": 1, "not_found": 2}
    assert item_record(items[2])["rule"] == "qualified"


def test_summary_of_reward_functions():
    from grpo_train.rewards import RewardFunction
    from grpo_train.rewards.workers import FunctionScore

    functions = [RewardFunction("fmt", "grpo_train.rewards:boxed_format", 0.5, {}),
                 RewardFunction("mine", "my.py:f", 1.0, {})]
    scores = [(FunctionScore(0.5, 1.0, "ok"), FunctionScore(0.0, None, "timeout", "over 4 s")),
              (FunctionScore(0.0, 0.0, "ok"), FunctionScore(0.0, None, "no_answer")),
              (FunctionScore(0.5, 1.0, "ok"), FunctionScore(2.0, 2.0, "ok"))]
    items = [EvalItem(Problem("u", "q", "", "none"), "t", False, "unchecked", None, False, 5, [], functions=f)
             for f in scores]
    summary = summarise(items, functions=functions)
    assert summary["fn/fmt"] == pytest.approx(2 / 3) and summary["fn/fmt/error"] == 0  # values, before the weight 0.5
    assert summary["fn/mine"] == pytest.approx(2 / 3)
    assert summary["fn/mine/timeout"] == summary["fn/mine/no_answer"] == pytest.approx(1 / 3)
    assert summary["fn_first_failure"] == {"mine": "timeout: over 4 s"}  # grpo-eval prints it


def grpo_eval(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "eval"
    exe = Path(sys.executable).parent / "grpo-eval"
    result = subprocess.run([str(exe), "--model", "tiny-qwen2", "--max-tokens", "16", "--max-model-len", "1024",
                             "--out", str(out), *args], capture_output=True, text=True, timeout=600, cwd=REPO)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "accuracy" in result.stdout
    summary = json.loads((out / "summary.json").read_text())
    completions = [json.loads(line) for line in (out / "completions.jsonl").read_text().splitlines()]
    assert len(completions) == summary["n"]
    assert summary["counts"]["correct"] == sum(c["correct"] for c in completions)
    assert summary["counts"]["no_answer"] == sum(c["status"] == "no_answer" for c in completions)
    return summary


def test_grpo_eval_tiny_model_synthetic_with_pass_at_k(tmp_path):
    summary = grpo_eval(tmp_path, "--data", "synthetic", "--n", "6", "--k", "2")
    assert summary["n"] == 6 and "pass@2" in summary and "mean@2" in summary
    assert sum(v["n"] for v in summary["by_category"].values()) == 6


def test_grpo_eval_with_a_training_config_evaluates_the_runs_held_out_set(tmp_path):
    rows = [{"q": f"What is {a} plus {a + 1}?", "a": str(2 * a + 1)} for a in range(12)]
    for name, part in (("train", rows[:6]), ("test", rows[6:])):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in part))
    config = tmp_path / "train.yaml"
    config.write_text(f"data:\n  source: {tmp_path / 'train.jsonl'}\n  eval_source: {tmp_path / 'test.jsonl'}\n"
                      "  question_key: q\n  answer_key: a\n  kind: gsm8k\n  template: fewshot\n  num_shots: 2\n"
                      "run:\n  eval_size: 5\n")
    summary = grpo_eval(tmp_path, "--config", str(config))
    assert summary["template"] == "fewshot" and summary["n"] == 5  # the config's eval_size, not 200
    assert summary["data"] == str(tmp_path / "test.jsonl")  # the file the problems came from, not data.source
    expected = load_problems(load_config(str(config)).data, "test", n=5)
    completions = [json.loads(line) for line in (tmp_path / "eval" / "completions.jsonl").read_text().splitlines()]
    assert [c["question"] for c in completions] == [p.question for p in expected]


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared/data is absent")
def test_grpo_eval_on_shared_gsm8k_and_math_files(tmp_path):
    gsm = grpo_eval(tmp_path / "g", "--data", str(SHARED / "gsm8k_test.jsonl"), "--n", "4")
    assert gsm["n"] == 4
    math = grpo_eval(tmp_path / "m", "--data", str(SHARED / "math500_test.jsonl"), "--n", "4")
    assert math["n"] == 4 and sum(v["n"] for v in math["by_subject"].values()) == 4


def test_plot_redraws_curves(tmp_path):
    rows = [{"step": 0, "eval/accuracy": 0.2, "eval/category/division": 0.1}]
    rows += [{"step": s, "reward/mean": 0.1 * s, "reward/accuracy": 0.1 * s, "train/completion_len_mean": 20 + s}
             for s in range(1, 6)]
    rows.append({"step": 5, "eval/accuracy": 0.4, "eval/category/division": None})  # null: NaN when logged
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = plot_run(tmp_path)
    assert path == tmp_path / "curves.png" and path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
