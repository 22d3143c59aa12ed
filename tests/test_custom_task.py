"""Bring your own task, as a new user does it from docs/custom-tasks.md: a reward file and a jsonl with other field
names in a folder of their own (outside the package), a config pointing at both, a short run on the tiny model.
Also the Countdown example's reward function and config (examples/countdown/)."""

import itertools
import json
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import pytest

from grpo_train.config import ConfigError, load_config
from grpo_train.rewards.user_code import load_function

REPO = Path(__file__).resolve().parents[1]

MY_REWARDS = '''
import time

calls = 0

def mentions_keyword(completion, problem, num_tokens, truncated):
    """The row's own field `keyword`; None (no answer) for an empty completion."""
    if not completion.strip():
        return None
    return float(problem["keyword"] in completion) - len(completion) / 1000

def flaky(completion, problem, num_tokens, truncated):
    global calls
    calls += 1
    if calls % 2 == 0:
        raise RuntimeError(f"call {calls} fails")
    return 0.5

def sleepy(completion, problem, num_tokens, truncated):
    time.sleep(60)
    return 1.0

def brevity(completion, problem, num_tokens, truncated):
    return -len(completion) / 100

served = 0

def breaks_after_step_1(completion, problem, num_tokens, truncated):
    """With reward.num_workers 1 and the config below: scores the eval before training (2 calls) and step 1
    (2 prompts x 4 = 8 calls), then raises on every call."""
    global served
    served += 1
    if served > 10:
        raise ValueError(f"no score for call {served}")
    return 0.0
'''

CONFIG = """
model:
  name_or_path: tiny-qwen2
  max_model_len: 256
data:
  source: tasks/train.jsonl
  eval_source: tasks/test.jsonl
  question_key: prompt
  answer_key: solution
  kind: gsm8k
  template_file: prompt.jinja
rollout:
  max_tokens: 16
  cpu_kvcache_gb: 0.25
reward:
  timeout_s: 1.0
  max_failure_fraction: 1.0     # never stop: sleepy times out on every call
  functions:
    - function: my_rewards.py:mentions_keyword
      weight: 2.0
      name: keyword
    - function: my_rewards.py:flaky
    - function: my_rewards.py:sleepy
algorithm:
  group_size: 4
  prompts_per_step: 2
learner:
  lr: 1.0e-4
  micro_batch_size: 8
run:
  output_dir: run
  steps: 2
  eval_size: 2
  samples_every: 1
"""


def user_folder(tmp_path: Path) -> Path:
    (tmp_path / "tasks").mkdir()
    rows = [{"prompt": f"How many legs do {n} ducks have?", "solution": 2 * n, "keyword": "leg"} for n in range(1, 9)]
    (tmp_path / "tasks" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:6]))
    (tmp_path / "tasks" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[6:]))
    (tmp_path / "prompt.jinja").write_text("{{ question }}\nThink first, then answer in \\boxed{}.\n")
    (tmp_path / "my_rewards.py").write_text(MY_REWARDS)
    (tmp_path / "config.yaml").write_text(CONFIG)
    return tmp_path


def grpo_train(folder: Path, *args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    inherited = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
    env = {k: v for k, v in os.environ.items() if k not in inherited} | {"PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, "-m", "grpo_train", "--config", "config.yaml", *args],
                          capture_output=True, text=True, cwd=folder, timeout=timeout, env=env)


def test_own_reward_functions_and_data_on_the_tiny_model(tmp_path):
    folder = user_folder(tmp_path)
    out = grpo_train(folder)
    assert out.returncode == 0, out.stderr[-5000:]
    rows = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "train/loss" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        # The user's function, under its configured name: a mean reward and its statuses.
        assert {"reward/fn/keyword", "reward/fn/keyword/no_answer", "reward/fn/keyword/error"} <= set(row)
        assert row["reward/fn/keyword/error"] == 0 and row["reward/fn/keyword/timeout"] == 0
        # A function that sleeps past reward.timeout_s: every call a timeout, the run goes on.
        assert row["reward/fn/sleepy/timeout"] == 1.0 and row["reward/fn/sleepy"] == 0.0
    # A function that raises on every other call (in each worker): some calls fail, the others count.
    assert 0 < sum(r["reward/fn/flaky/error"] for r in steps) < len(steps)
    assert sum(r["reward/fn/flaky"] for r in steps) > 0
    # Both failures are explained once in training and once in eval on the console, the rest only counted.
    warnings = [line for line in out.stderr.splitlines() if "warning: reward function" in line]
    flaky = [line for line in warnings if "flaky: error: RuntimeError: call" in line]
    assert sum("counted in reward/fn/flaky/error" in line for line in flaky) == 1
    assert sum("counted in eval/fn/flaky/error" in line for line in flaky) <= 1  # 2 eval problems: may all pass
    sleepy = [line for line in warnings if "sleepy: timeout" in line]
    assert len(sleepy) == 2 and "counted in eval/fn/sleepy/timeout" in sleepy[0]  # the eval before training
    assert "counted in reward/fn/sleepy/timeout" in sleepy[1]
    samples = [json.loads(line) for line in (folder / "run" / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 2 * 4 and set(samples[0]["functions"]) == {"keyword", "flaky", "sleepy"}
    assert samples[0]["functions"]["sleepy"] == "timeout"
    assert samples[0]["meta"] == {"keyword": "leg"} and samples[0]["uid"].startswith("train:")  # the row's fields
    assert all(s["gold"] in ("2", "4", "6", "8", "10", "12") for s in samples)  # numbers as answers
    evals = [r for r in rows if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2] and all("eval/fn/keyword" in r for r in evals)
    # What the model saw: the template file's text inside the chat markup, in samples.jsonl and prompts.txt.
    rendered = samples[0]["rendered_prompt"]
    assert samples[0]["prompt"] in rendered and "Think first, then answer in \\boxed{}." in rendered
    assert "<|im_start|>user" in rendered and rendered != samples[0]["prompt"]
    prompts = (folder / "run" / "prompts.txt").read_text()
    assert prompts.count("# ---- problem train:") == 3 and "How many legs do 1 ducks have?" in prompts
    assert "prompts: the first 3 as the model sees them" in out.stderr
    # The end of the run: each failing function's rate (below reward.max_failure_fraction, here 1: never stop).
    summary = [line for line in out.stderr.splitlines() if line.startswith("reward function ")]
    assert [line.split(":")[0] for line in summary] == ["reward function flaky", "reward function sleepy"], summary
    assert "reward function sleepy: failed on 100.0% of its calls in training (errors 0.0%, timeouts 100.0%" in \
        summary[1] and summary[1].endswith("and 100.0% of its calls in eval")


def test_a_task_without_answers_logs_no_accuracy_and_a_broken_reward_function_stops_it(tmp_path):
    """Issue 45: data.kind none with {question} rows that have no answer (no data.question_key); no accuracy logged;
    a reward function that fails on every call of step 2 stops the run there with one line and exit 2."""
    folder = user_folder(tmp_path)
    rows = [{"question": f"Name a colour that starts with {c}."} for c in "BGRY"]
    (folder / "tasks" / "open.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.yaml").write_text(CONFIG.replace("""  question_key: prompt
  answer_key: solution
  kind: gsm8k
  template_file: prompt.jinja
""", """  kind: none
  system_prompt: Answer in one word.
""").replace("tasks/train.jsonl", "tasks/open.jsonl").replace("tasks/test.jsonl", "tasks/open.jsonl").replace(
        """  max_failure_fraction: 1.0     # never stop: sleepy times out on every call
  functions:
    - function: my_rewards.py:mentions_keyword
      weight: 2.0
      name: keyword
    - function: my_rewards.py:flaky
    - function: my_rewards.py:sleepy
""", """  num_workers: 1                # breaks_after_step_1 counts its calls in its one worker
  functions:
    - function: my_rewards.py:brevity
    - function: my_rewards.py:breaks_after_step_1
""").replace("steps: 2", "steps: 3"))
    out = grpo_train(folder)
    assert out.returncode == 2, out.stderr[-5000:]
    assert "Traceback" not in out.stderr, out.stderr[-5000:]
    last = out.stderr.strip().splitlines()[-1]
    raised = MY_REWARDS.splitlines().index('        raise ValueError(f"no score for call {served}")') + 1
    assert last == ("grpo-train: reward function error: reward function breaks_after_step_1 failed on 100.0% of "
                    "its calls at step 2, over reward.max_failure_fraction 0.5; its first failure: error: "
                    f"ValueError: no score for call 11 (raised at my_rewards.py:{raised}). Fix the function, or "
                    "raise reward.max_failure_fraction (1 = never stop)"), last
    metrics = [json.loads(line) for line in (folder / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [0, 1]  # stopped before step 2's update
    assert not [k for r in metrics for k in r if k.endswith(("/accuracy", "/no_answer")) and "/fn/" not in k]
    assert not [k for r in metrics for k in r if k in ("reward/timeout", "reward/error")]  # no verifier ran
    assert metrics[1]["reward/fn/brevity"] < 0 and metrics[1]["reward/fn/breaks_after_step_1/error"] == 0
    assert "eval/fn/brevity" in metrics[0] and "eval before training: fn/breaks_after_step_1 0.000" in out.stderr
    samples = [json.loads(line) for line in (folder / "run" / "samples.jsonl").read_text().splitlines()]
    assert samples[0]["gold"] == "" and "Answer in one word." in samples[0]["rendered_prompt"]
    assert samples[0]["prompt"] in samples[0]["rendered_prompt"]


def test_a_typo_in_a_function_name_stops_before_any_model_loads(tmp_path):
    folder = user_folder(tmp_path)
    config = folder / "config.yaml"
    config.write_text(config.read_text().replace("my_rewards.py:flaky", "my_rewards.py:flakey"))
    for args in ((), ("--print-config",)):
        out = grpo_train(folder, *args, timeout=120)
        assert out.returncode == 2
        assert "config error" in out.stderr and "reward.functions[1].function" in out.stderr
        assert "has no function 'flakey'; did you mean flaky" in out.stderr
        assert "Traceback" not in out.stderr
    assert not (folder / "run").exists()  # nothing started


# ----------------------------------------------------------------------------------------------------
# The Countdown example


def countdown_reward():
    return load_function(str(REPO / "examples" / "countdown" / "countdown.py") + ":equation_reward")


@pytest.mark.parametrize("completion, expected", [
    ("<think>25 - 7 = 18, 18 * 3 = 54</think> \\boxed{(25 - 7) * 3}", 1.0),
    ("\\boxed{(25 - 7) \\times 3 = 54}", 1.0),  # LaTeX operators, the "= target" part ignored
    ("\\boxed{3 * (25 - 7)}", 1.0),
    ("\\boxed{25 + 7 + 3}", 0.1),  # the numbers, but not the target (numbers_score 0.1)
    ("\\boxed{(25 - 7) * 3 * 1}", 0.1),  # a number that was not given
    ("\\boxed{(25 - 7) * 3 + 3 - 3}", 0.1),  # a number used twice
    ("\\boxed{54}", 0.1),  # the target alone uses none of the numbers
    ("\\boxed{(25 - 7) ** 3}", 0.0),  # not one of the four operators
    ("\\boxed{__import__('os').system('touch pwned')}", 0.0),  # parsed, never run
    ("\\boxed{-(7 - 25) * 3}", 0.0),  # a unary minus is not an operation on two numbers
    ("\\boxed{25 / (7 - 7) * 3}", 0.0),  # division by zero
    ("\\boxed{" + "(" * 3000 + "3" + ")" * 3000 + "}", 0.0),  # too long to be an answer
    ("(25 - 7) * 3", None),  # no box: no answer
])
def test_countdown_reward(completion, expected, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert countdown_reward()(completion, {"nums": [3, 7, 25], "target": 54}, 0, False) == expected
    assert not (tmp_path / "pwned").exists()


def test_countdown_reward_scores():
    reward, problem = countdown_reward(), {"nums": [3, 7, 25], "target": 54}
    scores = {"numbers_score": 0.5, "format_score": 0.2}
    assert reward("\\boxed{25 + 7 + 3}", problem, 0, False, **scores) == 0.5  # the numbers, not the target
    assert reward("\\boxed{25 + 7 + 7}", problem, 0, False, **scores) == 0.2  # another equation
    assert reward("\\boxed{(25 - 7) * 3}", problem, 0, False, **scores) == 1.0


def test_countdown_data_are_solvable_and_held_out(tmp_path):
    make_data = REPO / "examples" / "countdown" / "make_data.py"
    subprocess.run([sys.executable, str(make_data), "--out", str(tmp_path), "--train", "300", "--test", "50"],
                   check=True, capture_output=True, timeout=120)
    train, test = ([json.loads(line) for line in (tmp_path / f"{split}.jsonl").read_text().splitlines()]
                   for split in ("train", "test"))
    assert len(train) == 300 and len(test) == 50
    def key(row):
        return tuple(sorted(row["nums"])), row["target"]

    assert not {key(r) for r in train} & {key(r) for r in test}
    assert all(len(r["nums"]) == 3 and min(r["nums"]) >= 1 and max(r["nums"]) <= 10 and 0 < r["target"] <= 50
               for r in train + test)
    reward = countdown_reward()
    for row in test:  # each has a solution, found here by brute force and accepted by the reward
        solution = next(text for text, value in expressions(row["nums"]) if value == row["target"])
        assert reward(f"\\boxed{{{solution}}}", row, 0, False) == 1.0, row


OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
              "/": lambda a, b: None if b == 0 else a / b}


def _apply(op: str, a: Fraction | None, b: Fraction | None) -> Fraction | None:
    return None if a is None or b is None else OPERATIONS[op](a, b)


def expressions(nums: list[int]) -> list[tuple[str, Fraction | None]]:
    """(text, exact value) of every expression over three numbers, each used once, with + - * / and either
    bracketing; None for a division by zero."""
    out = []
    for a, b, c in itertools.permutations(nums):
        fa, fb, fc = Fraction(a), Fraction(b), Fraction(c)
        for x, y in itertools.product(OPERATIONS, repeat=2):
            out.append((f"({a} {x} {b}) {y} {c}", _apply(y, _apply(x, fa, fb), fc)))
            out.append((f"{a} {x} ({b} {y} {c})", _apply(x, fa, _apply(y, fb, fc))))
    return out


def test_countdown_config_validates(monkeypatch, tmp_path):
    monkeypatch.chdir(REPO)  # its paths are relative to the repository, where the docs run it
    config = REPO / "examples" / "countdown" / "countdown.yaml"
    data = [f"data.source={tmp_path}/train.jsonl", f"data.eval_source={tmp_path}/test.jsonl"]
    with pytest.raises(ConfigError, match="train.jsonl: data file not found"):  # before make_data.py has run
        load_config(config, data)
    subprocess.run([sys.executable, "examples/countdown/make_data.py", "--out", str(tmp_path), "--train", "20",
                    "--test", "5"], check=True, capture_output=True)
    cfg = load_config(config, data)
    assert cfg.data.kind == "none" and cfg.reward.functions[0].function.endswith("countdown.py:equation_reward")
