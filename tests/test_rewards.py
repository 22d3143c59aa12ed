"""Reward functions: the built-ins against their formulas, loading a user's function, the config's checks of
reward.functions / data.map_fn / data.template_file, and the verifier pool running functions that raise, hang,
return no number or sleep past the timeout (real worker processes)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_train.config import ConfigError, load_config
from grpo_train.rewards import (
    FORMAT_SPEC,
    RewardFunction,
    as_reward,
    boxed_format,
    length_penalty,
    overlong_penalty,
    reward_functions,
    think_format,
)
from grpo_train.rewards.user_code import UserCodeError, load_function, raised_at
from grpo_train.rewards.workers import VerifierPool, VerifyItem, function_errors, function_sums
from grpo_train.verifier import judge

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"

USER_FUNCTIONS = '''
import time

calls = 0

def flaky(completion, problem, num_tokens, truncated):
    """Raises on every other call (per worker process)."""
    global calls
    calls += 1
    if calls % 2 == 0:
        raise RuntimeError(f"call {calls} fails")
    return 1.0

def sleepy(completion, problem, num_tokens, truncated):
    time.sleep(30)
    return 1.0

def hedge(completion, problem, num_tokens, truncated):
    return None if "?" in completion else 0.5

def wordy(completion, problem, num_tokens, truncated):
    return "many words"

def echo(completion, problem, num_tokens, truncated, *, scale=1.0):
    return scale * (problem["gold"] in completion) + num_tokens / 100 + truncated

def two_args(completion, problem):
    return 1.0

not_a_function = 3
'''


@pytest.fixture()
def user_file(tmp_path, monkeypatch):
    """A reward module outside the package, and the working directory where it lies."""
    path = tmp_path / "my_rewards.py"
    path.write_text(USER_FUNCTIONS)
    monkeypatch.chdir(tmp_path)
    return path


# ----------------------------------------------------------------------------------------------------
# Built-ins


def _naive_overlong(length: int, l_max: int, l_cache: int) -> float:
    """DAPO eq. 13 written out case by case."""
    if length <= l_max - l_cache:
        return 0.0
    if length <= l_max:
        return ((l_max - l_cache) - length) / l_cache
    return -1.0


def test_overlong_penalty_is_daposs_formula():
    for length in range(0, 140):
        got = overlong_penalty("", {}, length, False, max_len=128, cache=32)
        assert got == pytest.approx(_naive_overlong(length, 128, 32)), length
    assert overlong_penalty("", {}, 96, False, max_len=128, cache=32) == 0.0  # the last free length
    assert overlong_penalty("", {}, 112, False, max_len=128, cache=32) == -0.5  # half-way through the cache
    assert overlong_penalty("", {}, 128, True, max_len=128, cache=32) == -1.0  # at the cap
    with pytest.raises(ValueError, match="cache"):
        overlong_penalty("", {}, 1, False, max_len=16, cache=32)


def test_length_penalty():
    assert [length_penalty("", {}, n, False, max_len=100) for n in (0, 25, 100, 150)] == [0.0, -0.25, -1.0, -1.0]
    assert [length_penalty("", {}, n, False, max_len=100, free=50) for n in (40, 75)] == [0.0, -0.5]
    text = "x" * 30
    assert length_penalty(text, {}, 3, False, max_len=120, unit="chars") == -0.25  # counts characters


@pytest.mark.parametrize("completion, expected", [
    ("<think>2 + 2 is 4.</think> The answer is \\boxed{4}.", 1.0),
    ("2 + 2 is 4.</think>\n\\boxed{4}", 1.0),  # the prompt opened the block
    ("<think>2 + 2 is 4.</think> The answer is 4.", 0.0),  # no box after the block
    ("<think></think> \\boxed{4}", 0.0),  # no thought
    ("\\boxed{4} <think>why</think>", 0.0),  # answer first
    ("<think>a</think><think>b</think>\\boxed{4}", 0.0),  # two blocks
    ("<think>a</think>\\boxed{}", 0.0),  # an empty box
    ("The answer is \\boxed{4}.", 0.0),
])
def test_think_format(completion, expected):
    assert think_format(completion, {}, 0, False) == expected


def test_think_format_answer_forms():
    tagged = "<think>3 * 5 = 15</think> <answer>3 * 5</answer>"
    assert think_format(tagged, {}, 0, False, answer="tag") == 1.0
    assert think_format(tagged + " more", {}, 0, False, answer="tag") == 0.0
    assert think_format(tagged, {}, 0, False) == 0.0  # boxed by default
    assert think_format("<think>x</think> anything", {}, 0, False, answer="any") == 1.0
    assert think_format("<think>x</think>  ", {}, 0, False, answer="any") == 0.0


def verifier_cases() -> list[dict]:
    path = SHARED_DATA / "verifier_cases_public.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def test_boxed_format_is_what_format_weight_always_paid():
    """reward.format_weight used the verifier's `formatted` flag; the built-in that replaces it agrees with
    that flag on every labelled verifier case (and on a few written here when the shared data is absent)."""
    cases = [("The answer is $\\boxed{42}$.", "42", "gsm8k"), ("#### 41", "42", "gsm8k"), ("#### 41", "42", "math"),
             ("I am not sure.", "42", "gsm8k"), ("\\boxed{1} or \\boxed{2}", "1", "math"),
             ("so it is \\boxed{\\frac{3}{4}", "0.75", "math")]
    cases += [(c["response"], c["gold"], c["dataset"]) for c in verifier_cases()]
    for response, gold, dataset in cases:
        expected = judge(response, gold, dataset).formatted
        assert boxed_format(response, {"kind": dataset, "gold": gold}, 0, False) == float(expected), response[:80]


def test_format_weight_becomes_the_format_function():
    cfg = load_config(None, ["reward.format_weight=0.1"])
    assert reward_functions(cfg.reward) == [RewardFunction("format", FORMAT_SPEC, 0.1, {})]
    assert reward_functions(load_config(None).reward) == []


def test_as_reward():
    assert as_reward(True) == 1.0 and as_reward(2) == 2.0 and as_reward(None) is None
    for bad in ("1", float("nan"), [1.0]):
        with pytest.raises((TypeError, ValueError)):
            as_reward(bad)


# ----------------------------------------------------------------------------------------------------
# Loading user code, and the config's checks


def test_load_function_from_a_file_and_a_module(user_file):
    assert load_function("my_rewards.py:hedge")("a?", {}, 0, False) is None  # relative to the working directory
    assert load_function(f"{user_file}:hedge")("a", {}, 0, False) == 0.5
    assert load_function("grpo_train.rewards:think_format") is think_format
    with pytest.raises(UserCodeError, match="has no function 'hedg'; did you mean hedge"):
        load_function("my_rewards.py:hedg")
    with pytest.raises(UserCodeError, match="not a function"):
        load_function("my_rewards.py:not_a_function")
    with pytest.raises(UserCodeError, match="module 'no_such_module' not found"):
        load_function("no_such_module:fn")
    with pytest.raises(UserCodeError, match="not found"):
        load_function("missing.py:fn")
    with pytest.raises(UserCodeError, match="module:function"):
        load_function("my_rewards.py")


def functions_override(*entries: str) -> str:
    return f"reward.functions=[{', '.join(entries)}]"


@pytest.mark.parametrize("entries, key, message", [
    (["{function: my_rewards.py:hedg}"], "reward.functions[0].function", "did you mean hedge"),  # a typo
    (["{function: my_rewards.py:hedge}", "{function: nowhere.py:f}"], "reward.functions[1].function", "not found"),
    (["{function: my_rewards:two_args}"], "reward.functions[0].function", "does not accept 4 positional"),
    (["{function: my_rewards.py:echo, kwargs: {scal: 2}}"], "reward.functions[0].function", "scal"),
    (["{function: my_rewards.py:not_a_function}"], "reward.functions[0].function", "not a function"),
    (["{function: ''}"], "reward.functions[0].function", "is empty"),
    (["{function: my_rewards.py:hedge}", "{function: my_rewards.py:hedge}"], "reward.functions[1].name", "taken"),
    (["{function: my_rewards.py:hedge, name: format}"], "reward.functions[0].name", "reward.format_weight"),
    (["{function: my_rewards.py:hedge, name: 'a b'}"], "reward.functions[0].name", "letters, digits"),
    (["{function: my_rewards.py:hedge, wieght: 2}"], "reward.functions[0].wieght", "unknown key"),
    # The built-ins' kwargs: a missing one is named, a value they cannot use is refused now, not on every call.
    (["{function: 'grpo_train.rewards:overlong_penalty', kwargs: {cache: 8}}"], "reward.functions[0].function",
     "needs max_len in the entry's kwargs"),
    (["{function: 'grpo_train.rewards:length_penalty', kwargs: {max_len: 64, unit: words}}"],
     "reward.functions[0].function", "unit tokens or chars, got free=0 max_len=64 unit='words'"),
    (["{function: 'grpo_train.rewards:think_format', kwargs: {answer: xml}}"], "reward.functions[0].function",
     "answer must be boxed, tag or any, got 'xml'"),
    (["{function: 'grpo_train.rewards:overlong_penalty', kwargs: {max_len: 8, cache: 16}}"],
     "reward.functions[0].function", "needs 0 < cache <= max_len"),
])
def test_bad_reward_function_entries_are_config_errors(user_file, entries, key, message):
    sys.path.insert(0, str(user_file.parent))  # for the module form my_rewards:two_args
    try:
        with pytest.raises(ConfigError) as caught:
            load_config(None, [functions_override(*entries), "reward.format_weight=0.1"])
    finally:
        sys.path.remove(str(user_file.parent))
    assert key in str(caught.value) and message in str(caught.value)


def test_good_entries_load(user_file):
    cfg = load_config(None, [functions_override("{function: my_rewards.py:echo, weight: 0.5, kwargs: {scale: 2}}",
                                                "{function: grpo_train.rewards:overlong_penalty, name: overlong, "
                                                "kwargs: {max_len: 256, cache: 64}}")])
    assert [(f.name, f.weight, f.kwargs) for f in reward_functions(cfg.reward)] == [
        ("echo", 0.5, {"scale": 2}), ("overlong", 1.0, {"max_len": 256, "cache": 64})]


def test_print_config_reports_a_typo_before_any_model_loads(user_file):
    config = user_file.parent / "c.yaml"
    config.write_text("reward:\n  functions:\n    - function: my_rewards.py:flakey\n      weight: 0.5\n")
    out = subprocess.run([sys.executable, "-m", "grpo_train", "--config", str(config), "--print-config"],
                         capture_output=True, text=True, cwd=user_file.parent, timeout=120)
    assert out.returncode == 2
    assert "reward.functions[0].function" in out.stderr and "did you mean flaky" in out.stderr
    assert "Traceback" not in out.stderr


def test_data_map_fn_and_template_file_checks(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prep.py").write_text("def prep(row):\n    return row\n\ndef two(a, b):\n    return a\n")
    with pytest.raises(ConfigError, match=r"data.map_fn: prep.py:prepp: .*did you mean prep"):
        load_config(None, ["data.map_fn=prep.py:prepp"])
    with pytest.raises(ConfigError, match="data.map_fn: prep.py:two: .*does not accept 1 positional"):
        load_config(None, ["data.map_fn=prep.py:two"])
    assert load_config(None, ["data.map_fn=prep.py:prep"]).data.map_fn == "prep.py:prep"
    (tmp_path / "bad.jinja").write_text("Question: {{ question }\n")
    with pytest.raises(ConfigError, match="data.template_file: bad.jinja: line 1: Jinja syntax error"):
        load_config(None, ["data.template_file=bad.jinja"])
    with pytest.raises(ConfigError, match="data.template_file: nope.jinja not found"):
        load_config(None, ["data.template_file=nope.jinja"])
    (tmp_path / "chat.yaml").write_text("- {role: user, content: '{{ question }}'}\n")
    with pytest.raises(ConfigError, match="data.template_file: .*data.template chat or raw"):
        load_config(None, ["data.template_file=chat.yaml", "data.template=fewshot"])
    with pytest.raises(ConfigError, match="data.template_file: chat.yaml: a list of chat messages needs data.template"):
        load_config(None, ["data.template_file=chat.yaml", "data.template=raw"])
    assert load_config(None, ["data.template_file=chat.yaml"]).data.template_file == "chat.yaml"
    (tmp_path / "notalist.yaml").write_text("user: '{{ question }}'\n")
    with pytest.raises(ConfigError, match="a list of \\{role, content\\} messages"):
        load_config(None, ["data.template_file=notalist.yaml"])
    (tmp_path / "unquoted.yaml").write_text("- role: user\n  content: {{ question }}\n")
    with pytest.raises(ConfigError, match="malformed YAML \\(a content that starts with \\{\\{ must be quoted"):
        load_config(None, ["data.template_file=unquoted.yaml"])


@pytest.mark.parametrize("overrides, key", [
    (["data.question_key=prompt"], "data.answer_key"),  # a gold answer is needed unless kind is none
    (["data.question_key=prompt", "data.answer_key=solution"], "data.kind"),  # which checker?
    (["data.answer_key=solution"], "data.question_key"),
    (["data.kind=maths"], "data.kind"),
    (["data.source=gsm9k"], "data.source"),
    (["data.eval_source=mathh"], "data.eval_source"),
    (["data.source=train.jsonl"], "data.eval_source"),  # a local training file needs a held-out one
    (["data.source=other.jsonl", "run.eval_size=0"], "data.source"),  # not there
])
def test_bad_data_keys_are_config_errors(overrides, key, data_files):
    with pytest.raises(ConfigError) as caught:
        load_config(None, overrides)
    assert f": {key}: " in str(caught.value)


@pytest.fixture
def data_files(tmp_path, monkeypatch):
    """train.jsonl and train.csv in the working directory (a local data file must exist to validate)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    (tmp_path / "train.csv").write_text("prompt\n1 + 1?\n")


def test_keyed_data_configs_validate(data_files):
    cfg = load_config(None, ["data.question_key=prompt", "data.kind=none", "data.source=train.csv",
                             "data.eval_source=owner/dataset"])
    assert cfg.data.kind == "none"
    assert load_config(None, ["data.source=train.jsonl", "run.eval_size=0"]).data.eval_source == ""


# ----------------------------------------------------------------------------------------------------
# Functions in the verifier workers


def test_pool_scores_functions_with_per_function_statuses(user_file):
    functions = [RewardFunction("flaky", "my_rewards.py:flaky", 1.0, {}),
                 RewardFunction("sleepy", "my_rewards.py:sleepy", 1.0, {}),
                 RewardFunction("hedge", "my_rewards.py:hedge", 2.0, {}),
                 RewardFunction("wordy", "my_rewards.py:wordy", 1.0, {}),
                 RewardFunction("echo", str(user_file) + ":echo", 0.5, {"scale": 2.0})]
    items = [VerifyItem("It is \\boxed{7}", "7", "gsm8k", "q", {"gold": "7"}, 10, False),
             VerifyItem("7?", "7", "gsm8k", "q", {"gold": "7"}, 2, True),
             VerifyItem("just text", "", "none", None, {"gold": ""}, 50, False)]
    with VerifierPool(num_workers=1, timeout_s=1.0, functions=functions) as pool:
        scored = pool.score_batch(items)
        restarts = pool.restarts
    assert restarts == 0  # a sleeping function is interrupted by the worker's own timer
    assert [s.status for s in scored] == ["ok", "no_answer", "unchecked"]  # the verifier's view; none: unchecked
    assert [[f.status for f in s.functions] for s in scored] == [
        ["ok", "timeout", "ok", "error", "ok"],
        ["error", "timeout", "no_answer", "error", "ok"],
        ["ok", "timeout", "ok", "error", "ok"],
    ]
    # Each error names where it raised: the line in the function's file, else (a bad return) its definition.
    line = {text.strip(): i + 1 for i, text in enumerate(USER_FUNCTIONS.splitlines())}
    raised = line['raise RuntimeError(f"call {calls} fails")']
    wordy = line["def wordy(completion, problem, num_tokens, truncated):"]
    assert scored[1].functions[0].error == f"RuntimeError: call 2 fails (raised at my_rewards.py:{raised})"
    assert "returned 'many words' (str)" in scored[0].functions[3].error
    assert scored[0].functions[3].error.endswith(f"(raised at my_rewards.py:{wordy})")
    # echo: 0.5 * (2 * gold-in-text + tokens / 100 + truncated); the gold "" is in every text
    assert [s.functions[4].reward for s in scored] == pytest.approx([0.5 * 2.1, 0.5 * 3.02, 0.5 * 2.5])
    assert [s.reward for s in scored] == pytest.approx([1 + 1 + 2 * 0.5 + 1.05, 0 + 0 + 0 + 1.51, 0 + 1 + 1 + 1.25])
    sums = function_sums([s.functions for s in scored], functions, "reward/fn/")
    assert sums["reward/fn/flaky"] == (2.0, 3) and sums["reward/fn/flaky/error"] == (1, 3)
    assert sums["reward/fn/sleepy/timeout"] == (3, 3) and sums["reward/fn/hedge/no_answer"] == (1, 3)
    assert sums["reward/fn/echo"][0] == pytest.approx(2.1 + 3.02 + 2.5)  # the values, before the weight 0.5
    assert sums["reward/fn/hedge"] == (1.0, 3)  # 0.5 + None + 0.5; its weight 2 applies to the reward only
    assert set(function_errors([s.functions for s in scored], functions)) == {"flaky", "sleepy", "wordy"}


def test_a_failing_functions_error_names_the_file_and_line_where_it_raised(tmp_path, monkeypatch):
    """The innermost frame in the function's own file (here a helper beside it, calling into C), else the
    function's definition (the error came from checking what it returned)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "parse.py").write_text(textwrap.dedent('''
        def _number(text):
            return int(text)

        def parsed(completion, problem, num_tokens, truncated):
            return _number(completion)
    '''))
    fn = load_function("parse.py:parsed")
    with pytest.raises(ValueError) as err:
        fn("seven", {}, 1, False)
    assert raised_at(fn, err.value) == "parse.py:3"  # int("seven") in the helper
    with pytest.raises(TypeError) as err:
        as_reward("seven")  # a returned string: the check raises, in grpo_train/rewards/functions.py
    assert raised_at(fn, err.value) == "parse.py:5"  # not raised in its file: where it is defined


def test_a_function_stuck_in_c_code_costs_a_worker_not_the_batch(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stuck.py").write_text(textwrap.dedent('''
        import signal, time

        def stuck(completion, problem, num_tokens, truncated):
            if completion == "stuck":
                signal.signal(signal.SIGALRM, signal.SIG_IGN)  # stands for C code that no signal interrupts
                time.sleep(3600)
            return 1.0
    '''))
    items = [VerifyItem(text, "1", "gsm8k") for text in ("#### 1", "stuck", "#### 1")]
    with VerifierPool(num_workers=1, timeout_s=1.0, functions=[RewardFunction("s", "stuck.py:stuck", 1.0, {})]) as pool:
        scored = pool.score_batch(items)
        assert pool.restarts == 1
    assert [s.functions[0].status for s in scored] == ["ok", "timeout", "ok"]
    assert [s.correct for s in scored] == [True, False, True]
