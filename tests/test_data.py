"""Data: the synthetic arithmetic set, GSM8K / MATH files, malformed rows, prompt templates, prompt order."""

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from grpo_train.config import DataConfig, SyntheticConfig
from grpo_train.data import DataError, Problem, PromptSampler, last_boxed, load_problems, synthetic_problems
from grpo_train.prompts import GSM8K_SHOTS, PromptRenderer, PromptTooLongError
from grpo_train.synthetic import CATEGORIES, synthetic_shots

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
EXPRESSION = re.compile(r"What is ([\d +\-*/()]+)\?")


def shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} is absent (reference data lives beside the repo)")
    return path


def expression_of(problem: Problem) -> str:
    match = EXPRESSION.fullmatch(problem.question)
    assert match, problem.question
    return match.group(1)


def write_jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


# ----------------------------------------------------------------------------------------------------
# Synthetic arithmetic


def test_synthetic_answers_are_integers_and_correct():
    problems = synthetic_problems(SyntheticConfig(), "train", n=2000)
    for problem in problems:
        expression = expression_of(problem)  # only digits, spaces, + - * / ( ): safe to evaluate
        value = eval(expression)  # e.g. "6 - (8 + 19)" -> 6 - 27 = -21
        assert problem.gold == str(int(problem.gold))  # a plain integer, "-21" style when negative
        assert value == int(problem.gold), problem
        assert problem.dataset == "gsm8k" and problem.meta["category"] in CATEGORIES
        if problem.meta["category"] == "division":
            dividend, divisor = map(int, expression.split(" / "))
            assert dividend % divisor == 0  # exact: 84 / 7 = 12, never 85 / 7
    assert any(int(p.gold) < 0 for p in problems)  # subtraction can go below zero


def test_category_shapes():
    shapes = {  # one expression pattern per category
        "add_sub_2": r"\d+ [+-] \d+ [+-] \d+",
        "add_sub_3": r"\d+ [+-] \d+ [+-] \d+ [+-] \d+",
        "multiplication": r"\d+ \* \d+",
        "division": r"\d+ / \d+",
        "parentheses": r"\d+ [+-] \(\d+ [+-] \d+\)",
    }
    for problem in synthetic_problems(SyntheticConfig(), "train", n=500):
        assert re.fullmatch(shapes[problem.meta["category"]], expression_of(problem)), problem


def test_categories_are_uniform():
    # 5,000 draws over 5 categories: 1,000 expected each, sd = sqrt(5000 * 0.2 * 0.8) = 28; allow 5 sd.
    train = Counter(p.meta["category"] for p in synthetic_problems(SyntheticConfig(), "train"))
    assert set(train) == set(CATEGORIES)
    assert all(abs(count - 1000) < 140 for count in train.values()), train
    # The held-out set too (2,000 draws: 400 expected each, sd 18): no category is crowded out.
    test = Counter(p.meta["category"] for p in synthetic_problems(SyntheticConfig(), "test", n=2000))
    assert all(abs(count - 400) < 90 for count in test.values()), test


def test_difficulty_ranges_are_respected():
    config = SyntheticConfig(min_operand=30, max_operand=45, max_factor=33)
    seen = set()
    for problem in synthetic_problems(config, "train", n=1000):
        numbers = [int(x) for x in re.findall(r"\d+", expression_of(problem))]
        category = problem.meta["category"]
        if category in ("add_sub_2", "add_sub_3", "parentheses"):
            assert all(30 <= x <= 45 for x in numbers), problem
        elif category == "multiplication":
            assert all(30 <= x <= 33 for x in numbers), problem
        else:  # dividend / divisor = quotient, divisor and quotient in [30, 33]
            assert 30 <= numbers[1] <= 33 and 30 <= int(problem.gold) <= 33, problem
        seen.update(numbers)
    assert {30, 45} <= seen  # both ends of the add/sub range are reachable


def test_synthetic_range_errors():
    with pytest.raises(DataError, match="min_operand .*max_factor"):
        synthetic_problems(SyntheticConfig(min_operand=20, max_operand=30, max_factor=12), "train", n=5)


def test_synthetic_category_subset_sets_train_test_and_shots():
    subset = SyntheticConfig(categories=["multiplication", "division"])
    for split in ("train", "test"):
        assert {p.meta["category"] for p in synthetic_problems(subset, split, n=200)} == {"multiplication", "division"}
    assert [s.category for s in synthetic_shots(subset, 3)] == ["multiplication", "division", "multiplication"]
    with pytest.raises(DataError, match=r"data.synthetic.categories: .*unknown: squares"):
        synthetic_problems(SyntheticConfig(categories=["division", "squares"]), "train", n=5)
    with pytest.raises(DataError, match="data.synthetic.categories"):
        synthetic_problems(SyntheticConfig(categories=[]), "test", n=5)


def test_synthetic_seed_determinism():
    first = synthetic_problems(SyntheticConfig(seed=7), "train", n=300)
    again = synthetic_problems(SyntheticConfig(seed=7), "train", n=300)
    other = synthetic_problems(SyntheticConfig(seed=8), "train", n=300)
    assert first == again
    assert [p.question for p in first] != [p.question for p in other]


def test_test_set_is_held_out():
    config = DataConfig()
    train = load_problems(config, "train")  # num_train = 5000 (the default)
    test = load_problems(config, "test", n=500)
    shots = synthetic_shots(config.synthetic, 10)
    train_questions = {p.question for p in train}
    assert len(train) == 5000 and len(test) == 500
    assert not train_questions & {p.question for p in test}
    assert not {s.question for s in shots} & (train_questions | {p.question for p in test})
    # The eval set depends on the ranges and seed only, so runs with different num_train compare.
    config.synthetic.num_train = 50
    assert load_problems(config, "test", n=500) == test
    assert len(load_problems(config, "train")) == 50


def test_shot_solutions_show_true_steps():
    for shot in synthetic_shots(SyntheticConfig(), 10):
        # "2 - 5 = -3. -3 + 16 = 13. The answer is \boxed{13}."
        *steps, final = shot.solution.split(". ")
        for step in steps:
            left, result = step.split(" = ")
            assert eval(left) == int(result), shot
        assert final == f"The answer is \\boxed{{{shot.answer}}}."
        assert eval(expression_of(Problem("", shot.question, "", "gsm8k"))) == shot.answer
    assert [s.category for s in synthetic_shots(SyntheticConfig(), 6)] == [*CATEGORIES, CATEGORIES[0]]


# ----------------------------------------------------------------------------------------------------
# GSM8K and MATH files


def test_gsm8k_file_golds():
    path = shared_file("gsm8k_test.jsonl")
    problems = load_problems(DataConfig(source="x.jsonl", eval_source=str(path)), "test")
    assert len(problems) == 1319 and problems.skipped == 0
    assert problems[0].gold == "18" and problems[0].question.startswith("Janet")  # "#### 18"
    assert problems[0].uid == "gsm8k_test:1" and problems[0].dataset == "gsm8k"
    by_uid = {p.uid: p for p in problems}
    assert by_uid["gsm8k_test:147"].gold == "2,125"  # the dataset's own string, comma kept
    assert by_uid["gsm8k_test:490"].gold == "-10"
    # The folder's README: 14 golds carry thousands commas, 2 are negative.
    assert sum("," in p.gold for p in problems) == 14
    assert sum(p.gold.startswith("-") for p in problems) == 2


def test_math500_file_golds_and_max_rows():
    path = shared_file("math500_test.jsonl")
    problems = load_problems(DataConfig(source=str(path), max_rows=3), "train")
    assert [p.gold for p in problems] == ["\\left( 3, \\frac{\\pi}{2} \\right)", "p - q", "\\frac{14}{3}"]
    assert problems[0].uid == "math500_test:1" and problems[0].dataset == "math"
    unique_id = "test/precalculus/807.json"
    assert problems[0].meta == {"level": 2, "subject": "Precalculus", "unique_id": unique_id}
    # The boxed-answer fallback (used when a row has no answer field) agrees with every MATH-500 answer.
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(last_boxed(row["solution"]) == row["answer"] for row in rows)


def test_math_row_without_answer_uses_last_box(tmp_path):
    row = {"problem": "Halve 1.", "solution": "First \\boxed{2} was wrong; it is $\\boxed{\\frac{1}{2}}$."}
    path = write_jsonl(tmp_path / "m.jsonl", [json.dumps(row)])
    [problem] = load_problems(DataConfig(source=str(path)), "train")
    assert problem.gold == "\\frac{1}{2}" and problem.dataset == "math"


def test_parquet_file(tmp_path):
    import pyarrow
    import pyarrow.parquet

    rows = [{"question": "1 + 1?", "answer": "1 + 1 = 2\n#### 2"}, {"question": "2 + 2?", "answer": "4"}]
    path = tmp_path / "g.parquet"
    pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows), path)
    with pytest.raises(DataError, match=r"g\.parquet: row 2: GSM8K answer has no '####"):
        load_problems(DataConfig(source=str(path)), "train")
    problems = load_problems(DataConfig(source=str(path), skip_malformed=True), "train")
    assert [p.gold for p in problems] == ["2"] and problems.skipped == 1


GOOD = json.dumps({"question": "What is 2 + 3?", "answer": "2 + 3 = 5\n#### 5"})
MALFORMED = [  # (line, message the error must contain)
    ('{"question": "x", "answer": ', "not valid JSON"),
    (json.dumps({"question": "What is 1 + 1?", "answer": "2"}), "GSM8K answer has no '#### <final answer>'"),
    (json.dumps({"query": "x", "response": "y"}), "fits neither GSM8K"),
    (json.dumps({"problem": "Find x.", "solution": "x is four."}), "no \\boxed"),
    (json.dumps({"question": "", "answer": "#### 3"}), "'question' must be a non-empty string"),
    (json.dumps(["a list"]), "expected a JSON object"),
]


@pytest.mark.parametrize("line, message", MALFORMED)
def test_malformed_row_names_file_and_line(tmp_path, line, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [GOOD, "", line, GOOD])  # blank line 2; the bad row is line 3
    with pytest.raises(DataError) as caught:
        load_problems(DataConfig(source=str(path)), "train")
    text = str(caught.value)
    assert text.startswith(f"{path}: line 3: ") and message in text and "\n" not in text


def test_skip_malformed_counts(tmp_path):
    lines = [GOOD, *(line for line, _ in MALFORMED), GOOD]
    path = write_jsonl(tmp_path / "bad.jsonl", lines)
    problems = load_problems(DataConfig(source=str(path), skip_malformed=True), "train")
    assert [p.uid for p in problems] == ["bad:1", f"bad:{len(lines)}"]  # the two good rows, first and last
    assert problems.skipped == len(MALFORMED)  # 6
    only_bad = write_jsonl(tmp_path / "only_bad.jsonl", [MALFORMED[0][0]])
    with pytest.raises(DataError, match="no usable problems"):
        load_problems(DataConfig(source=str(only_bad), skip_malformed=True), "train")


def test_source_errors(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [GOOD])
    with pytest.raises(DataError, match="set data.eval_source"):
        load_problems(DataConfig(source=str(path)), "test")
    assert len(load_problems(DataConfig(source="synthetic", eval_source=str(path)), "test")) == 1
    with pytest.raises(DataError, match="file not found"):
        load_problems(DataConfig(source=str(tmp_path / "missing.jsonl")), "train")
    with pytest.raises(DataError, match="data.source: 'gsm8k.txt' is not"):
        load_problems(DataConfig(source="gsm8k.txt"), "train")
    # grpo-eval --data gsm9k sets data.source and data.eval_source to the same text: the message names
    # data.source, not eval_source, which the user never wrote.
    with pytest.raises(DataError, match="^data.source: 'gsm9k' is not synthetic, gsm8k, math"):
        load_problems(DataConfig(source="gsm9k", eval_source="gsm9k"), "test")


def test_hub_source_offline_suggests_a_local_file(monkeypatch):
    import datasets
    import huggingface_hub.constants

    # Offline mode, so this never downloads even on a machine with network.
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="cannot load openai/gsm8k .*use local files"):
        load_problems(DataConfig(source="gsm8k"), "train")


# ----------------------------------------------------------------------------------------------------
# Hub datasets without a hub: the error within seconds, not after datasets' ~26 s of retries; and what
# `hf download NAME --repo-type dataset` put in the hub cache loads offline (datasets itself does not look there)

_LOAD_OFFLINE = """
import sys, time
from grpo_train.config import DataConfig
from grpo_train.data import DataError, load_problems
for split in sys.argv[2:]:
    start = time.monotonic()
    try:
        problems = load_problems(DataConfig(source=sys.argv[1]), split)
        print(f"{split}: {len(problems)} problems, first gold {problems[0].gold}")
    except DataError as err:
        print(f"DataError after {time.monotonic() - start:.1f} s: {err}")
"""


def _load_offline(tmp_path: Path, source: str, splits: list[str], **env: str) -> str:
    """load_problems in a subprocess (huggingface_hub and datasets read HF_HUB_OFFLINE, HF_ENDPOINT and HF_HOME
    once, at import), with an HF cache of its own under tmp_path."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "TRANSFORMERS_OFFLINE"))}
    result = subprocess.run([sys.executable, "-c", _LOAD_OFFLINE, source, *splits], capture_output=True, text=True,
                            env={**clean, "HF_HOME": str(tmp_path / "hf"), **env}, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(("env", "reason"), [
    ({"HF_HUB_OFFLINE": "1"}, "HF_HUB_OFFLINE is set"),
    # Nothing listens on port 9 (discard): refused at once, as an unreachable hub's DNS failure is. Today's datasets
    # retried this 5 times with backoff, 26 s (1.7 s with HF_HUB_OFFLINE=1).
    ({"HF_ENDPOINT": "http://127.0.0.1:9"}, "the hub (http://127.0.0.1:9) did not answer within 5 s"),
])
def test_hub_dataset_offline_fails_within_seconds(tmp_path, env, reason):
    out = _load_offline(tmp_path, "math", ["train"], **env)
    match = re.match(r"DataError after ([\d.]+) s: (.*)", out)
    assert match, out
    assert float(match.group(1)) < 10.0, out
    assert match.group(2).startswith(f"data.source: cannot load DigitalLearningGmbH/MATH-lighteval (default), split "
                                     f"'train': {reason}, and neither the datasets cache nor the hub cache holds it")
    assert "`hf download DigitalLearningGmbH/MATH-lighteval --repo-type dataset`" in out
    assert "use local files: data.source=train.jsonl" in out


def write_gsm8k_repository(folder: Path) -> Path:
    """openai/gsm8k's layout (its dataset card names the files of config `main`), 3 train and 2 test rows."""
    import pyarrow
    import pyarrow.parquet

    (folder / "main").mkdir(parents=True)
    (folder / "README.md").write_text("---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n"
                                      "    path: main/train-*\n  - split: test\n    path: main/test-*\n---\n")
    for split, rows in (("train", 3), ("test", 2)):
        table = pyarrow.table({"question": [f"What is {i} + 1?" for i in range(rows)],
                               "answer": [f"{i} + 1 = {i + 1}\n#### {i + 1}" for i in range(rows)]})
        pyarrow.parquet.write_table(table, folder / "main" / f"{split}-00000-of-00001.parquet")
    return folder


def test_hub_dataset_loads_offline_from_what_hf_download_fetched(tmp_path):
    # `hf download openai/gsm8k --repo-type dataset` in the hub cache: a snapshot named by refs/main.
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "hf" / "hub" / "datasets--openai--gsm8k"
    write_gsm8k_repository(repo / "snapshots" / commit)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    assert _load_offline(tmp_path, "gsm8k", ["train", "test"], HF_HUB_OFFLINE="1").splitlines() == [
        "train: 3 problems, first gold 1", "test: 2 problems, first gold 1"]
    # The same without HF_HUB_OFFLINE, the hub not answering: found offline too.
    out = _load_offline(tmp_path, "gsm8k", ["train"], HF_ENDPOINT="http://127.0.0.1:9")
    assert out.splitlines() == ["train: 3 problems, first gold 1"], out


def test_dataset_folder_from_hf_download_local_dir(tmp_path):
    # `hf download openai/gsm8k --repo-type dataset --local-dir data/gsm8k`, then data.source=data/gsm8k
    # data.subset=main (docs/gpu-and-clusters.md): its train split, and its test split for the held-out set.
    folder = write_gsm8k_repository(tmp_path / "gsm8k")
    cfg = DataConfig(source=str(folder), subset="main")
    assert [p.gold for p in load_problems(cfg, "train")] == ["1", "2", "3"]
    assert [p.gold for p in load_problems(cfg, "test")] == ["1", "2"]


# ----------------------------------------------------------------------------------------------------
# Prompt templates, with the embedded tiny model's tokenizer (SmolLM2's chat template)


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from grpo_train.models import resolve_model

    return AutoTokenizer.from_pretrained(resolve_model("tiny-qwen2"))


ADD = Problem("u1", "What is 2 + 2?", "4", "gsm8k", {"category": "add_sub_2"})
GSM = Problem("gsm8k_test:1", "How many eggs?", "18", "gsm8k", {})


def test_chat_template(tokenizer):
    renderer = PromptRenderer(tokenizer, DataConfig(template="chat", system_prompt="Be brief."))
    expected = (
        "<|im_start|>system\nBe brief.<|im_end|>\n"
        f"<|im_start|>user\nWhat is 2 + 2?\n{INSTRUCTION}<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert renderer.text(ADD) == expected
    ids = renderer.token_ids(ADD)
    assert ids == tokenizer(expected, add_special_tokens=False)["input_ids"]
    assert tokenizer.decode(ids) == expected
    # No system prompt: we send none (SmolLM2's template then adds its own default); chat ignores num_shots.
    plain = PromptRenderer(tokenizer, DataConfig(template="chat", instruction="", num_shots=3)).text(ADD)
    assert plain.endswith("<|im_start|>user\nWhat is 2 + 2?<|im_end|>\n<|im_start|>assistant\n")
    assert plain.count("<|im_start|>user") == 1 and "Be brief." not in plain


def test_fewshot_template(tokenizer):
    renderer = PromptRenderer(tokenizer, DataConfig(template="fewshot", num_shots=3))
    text = renderer.text(ADD)
    shots = synthetic_shots(SyntheticConfig(), 3)
    assert text.count("<|im_start|>user") == 4 and text.count("<|im_start|>assistant") == 4  # 3 shots + 1
    for shot in shots:  # each shot as user "question\ninstruction", then assistant "... \boxed{N}."
        assert f"<|im_start|>user\n{shot.question}\n{INSTRUCTION}<|im_end|>\n" in text
        assert f"<|im_start|>assistant\n{shot.solution}<|im_end|>\n" in text
    last_turn = f"<|im_start|>user\nWhat is 2 + 2?\n{INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n"
    assert text.endswith(last_turn)
    # GSM8K / MATH problems get the built-in examples; asking for more than exist is an error.
    gsm = PromptRenderer(tokenizer, DataConfig(template="fewshot", num_shots=2)).text(GSM)
    assert GSM8K_SHOTS[0][0] in gsm and GSM8K_SHOTS[1][1] in gsm and GSM8K_SHOTS[2][0] not in gsm
    with pytest.raises(ValueError, match="only 4 built-in gsm8k examples"):
        PromptRenderer(tokenizer, DataConfig(template="fewshot", num_shots=5)).text(GSM)


def test_raw_template(tokenizer):
    renderer = PromptRenderer(tokenizer, DataConfig(template="raw", num_shots=0, system_prompt="ignored"))
    assert renderer.text(ADD) == "Question: What is 2 + 2?\nAnswer:"
    [shot] = synthetic_shots(SyntheticConfig(), 1)
    with_shot = PromptRenderer(tokenizer, DataConfig(template="raw", num_shots=1)).text(ADD)
    example = f"Question: {shot.question}\nAnswer: {shot.solution}"
    assert with_shot == f"{example}\n\nQuestion: What is 2 + 2?\nAnswer:"


def test_prompt_longer_than_budget_names_the_problem(tokenizer):
    renderer = PromptRenderer(tokenizer, DataConfig(template="fewshot", num_shots=3))
    ids = renderer.token_ids(ADD)
    assert renderer.check_length(ADD, len(ids)) == ids  # exactly at the budget is fine
    with pytest.raises(PromptTooLongError, match=f"problem u1: the prompt is {len(ids)} tokens"):
        renderer.check_length(ADD, len(ids) - 1)


# ----------------------------------------------------------------------------------------------------
# Prompt order


def numbered(count: int) -> list[Problem]:
    return [Problem(f"p{i}", f"q{i}", str(i), "gsm8k") for i in range(count)]


def uids(batch: list[Problem]) -> list[str]:
    return [p.uid for p in batch]


def test_sampler_epochs_are_seeded_permutations():
    problems = numbered(7)
    sampler = PromptSampler(problems, seed=3)
    first_epoch = uids(sampler.next_batch(7))
    assert sorted(first_epoch) == sorted(uids(problems))  # each problem once per epoch
    assert sampler.state_dict()["epoch"] == 0 and sampler.state_dict()["position"] == 7
    # Batches of 3 from the second epoch on: 3 + 3 + 1 finish epoch 1, then 2 more start epoch 2.
    batches = [sampler.next_batch(3) for _ in range(3)]
    second_epoch = uids(batches[0] + batches[1] + batches[2][:1])
    assert sorted(second_epoch) == sorted(uids(problems)) and second_epoch != first_epoch
    assert (sampler.epoch, sampler.position) == (2, 2)
    same = PromptSampler(problems, seed=3)
    assert uids(same.next_batch(7)) == first_epoch
    assert uids(PromptSampler(problems, seed=4).next_batch(7)) != first_epoch


def test_sampler_resume_gives_the_same_problems():
    problems = numbered(7)
    run = PromptSampler(problems, seed=0)
    for _ in range(2):
        run.next_batch(3)
    state = json.loads(json.dumps(run.state_dict()))  # saved in a checkpoint as JSON
    continued = [uids(run.next_batch(3)) for _ in range(4)]  # crosses the epoch boundary (6 + 12 > 7)
    resumed = PromptSampler(problems, seed=0)
    resumed.load_state_dict(state)
    assert [uids(resumed.next_batch(3)) for _ in range(4)] == continued
    with pytest.raises(ValueError, match="different seed or problem set"):
        PromptSampler(numbered(8), seed=0).load_state_dict(state)


# ----------------------------------------------------------------------------------------------------
# Your own data: other field names, kinds, numbers as answers, csv, dataset folders, map_fn


def keyed(**overrides) -> DataConfig:
    return DataConfig(**{"question_key": "prompt", "answer_key": "solution", "kind": "gsm8k", **overrides})


def test_other_field_names_and_numbers_as_answers(tmp_path):
    rows = [{"prompt": "Eggs left?", "solution": 18, "level": 2},  # a number
            {"prompt": "Halve 5.", "solution": 2.5},
            {"prompt": "Triple 1.", "solution": 3.0},  # written as 3
            {"prompt": "Sum?", "solution": "1 + 2 = 3\n#### 3"}]  # GSM8K kind: the text after ####
    path = write_jsonl(tmp_path / "mine.jsonl", [json.dumps(row) for row in rows])
    problems = load_problems(keyed(source=str(path)), "train")
    assert [(p.question, p.gold, p.dataset) for p in problems] == [
        ("Eggs left?", "18", "gsm8k"), ("Halve 5.", "2.5", "gsm8k"), ("Triple 1.", "3", "gsm8k"),
        ("Sum?", "3", "gsm8k")]
    assert problems[0].meta == {"level": 2}  # the row's other fields
    assert problems[0].record() == {"level": 2, "uid": "mine:1", "question": "Eggs left?", "gold": "18",
                                    "kind": "gsm8k"}
    # The GSM8K / MATH layouts take numbers too.
    path = write_jsonl(tmp_path / "layout.jsonl", [json.dumps({"question": "Eggs?", "answer": 18}),
                                                   json.dumps({"problem": "x?", "answer": -4})])
    assert [(p.gold, p.dataset) for p in load_problems(DataConfig(source=str(path)), "train")] == [
        ("18", "gsm8k"), ("-4", "math")]
    assert load_problems(DataConfig(source=str(path), kind="math"), "train")[0].dataset == "math"  # kind overrides


def test_kind_none_needs_no_answer(tmp_path):
    path = write_jsonl(tmp_path / "task.jsonl", [json.dumps({"prompt": "Say hi.", "tone": "warm"})])
    [problem] = load_problems(keyed(source=str(path), kind="none", answer_key=""), "train")
    assert (problem.gold, problem.dataset, problem.meta) == ("", "none", {"tone": "warm"})


def test_kind_none_reads_layout_rows_without_an_answer(tmp_path):
    """Issue 45: with kind none a {question} row (no data.question_key) is not refused for a missing answer, nor a
    {problem} row for a missing answer / boxed solution, nor a GSM8K answer without '####'; a math kind still is."""
    rows = [{"question": "Write a haiku."}, {"problem": "Prove it."}, {"problem": "Sketch.", "solution": "no box"},
            {"question": "Greet.", "answer": "Hello there"}, {"question": "Sum?", "answer": "3 #### 3"}]
    path = write_jsonl(tmp_path / "task.jsonl", [json.dumps(row) for row in rows])
    problems = load_problems(DataConfig(source=str(path), kind="none"), "train")
    assert [(p.question, p.gold, p.dataset) for p in problems] == [
        ("Write a haiku.", "", "none"), ("Prove it.", "", "none"), ("Sketch.", "", "none"),
        ("Greet.", "Hello there", "none"), ("Sum?", "3", "none")]
    with pytest.raises(DataError, match=r"line 1: GSM8K row has 'question' but no 'answer' \(data.kind none needs"):
        load_problems(DataConfig(source=str(path)), "train")


@pytest.mark.parametrize("row, message", [
    ({"question": "x", "solution": 3}, "line 2: no field 'prompt' (data.question_key); the row has question, solution"),
    ({"prompt": "x"}, "line 2: no field 'solution' (data.answer_key)"),
    ({"prompt": "x", "solution": True}, "line 2: field 'solution' must be a number or a non-empty string, got True"),
    ({"prompt": "x", "solution": [1, 2]}, "line 2: field 'solution' must be a number or a non-empty string, got [1"),
    ({"prompt": "x", "solution": None}, "line 2: field 'solution' must be a number or a non-empty string, got None"),
    ({"prompt": "", "solution": 3}, "line 2: field 'prompt' must be a non-empty string"),
    ({"prompt": "x", "solution": "#### "}, "line 2: field 'solution' (data.answer_key) is empty after '####'"),
])
def test_malformed_keyed_rows_name_file_line_and_key(tmp_path, row, message):
    good = json.dumps({"prompt": "ok", "solution": 1})
    path = write_jsonl(tmp_path / "mine.jsonl", [good, json.dumps(row)])
    with pytest.raises(DataError) as caught:
        load_problems(keyed(source=str(path)), "train")
    assert str(caught.value).startswith(f"{path}: {message}")


def test_csv_file(tmp_path):
    path = tmp_path / "mine.csv"
    path.write_text('prompt,solution,source\n"Two\nlines?",7,book\nShort?,8,web\nBad,9\n')
    with pytest.raises(DataError, match=r"mine\.csv: line 5: has fewer values than the header's 3 columns"):
        load_problems(keyed(source=str(path)), "train")
    problems = load_problems(keyed(source=str(path), skip_malformed=True), "train")
    assert [(p.uid, p.question, p.gold, p.meta) for p in problems] == [
        ("mine:2", "Two\nlines?", "7", {"source": "book"}), ("mine:4", "Short?", "8", {"source": "web"})]


def test_map_fn_prepares_and_drops_rows(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "prep.py").write_text(
        "def prep(row):\n"
        "    if row['n'] < 0:\n"
        "        return None\n"
        "    if row['n'] == 99:\n"
        "        raise KeyError('oops')\n"
        "    return {'question': f\"Double {row['n']}.\", 'answer': 2 * row['n']}\n")
    path = write_jsonl(tmp_path / "raw.jsonl", [json.dumps({"n": n}) for n in (1, -1, 3)])
    problems = load_problems(DataConfig(source=str(path), map_fn="prep.py:prep"), "train")
    assert [(p.uid, p.question, p.gold) for p in problems] == [("raw:1", "Double 1.", "2"), ("raw:3", "Double 3.", "6")]
    write_jsonl(path, [json.dumps({"n": 1}), json.dumps({"n": 99})])
    with pytest.raises(DataError, match=r"raw\.jsonl: line 2: data.map_fn prep.py:prep raised KeyError: 'oops'"):
        load_problems(DataConfig(source=str(path), map_fn="prep.py:prep"), "train")


def test_dataset_folder_with_splits(tmp_path):
    """A local dataset folder goes through datasets.load_dataset, as a hub id does (which needs network)."""
    folder = tmp_path / "mytask"
    (folder / "data").mkdir(parents=True)
    write_jsonl(folder / "data" / "train.jsonl", [json.dumps({"prompt": f"q{i}", "solution": i}) for i in range(5)])
    write_jsonl(folder / "data" / "test.jsonl", [json.dumps({"prompt": "t", "solution": 9})])
    cfg = keyed(source=str(folder))
    train, test = load_problems(cfg, "train"), load_problems(cfg, "test")
    assert [p.gold for p in train] == ["0", "1", "2", "3", "4"] and [p.uid for p in test] == ["mytask-test:1"]
    with pytest.raises(DataError, match=r"^data.source: cannot load .*mytask, split 'validation'"):
        load_problems(keyed(source=str(folder), split="validation"), "train")


# ----------------------------------------------------------------------------------------------------
# Prompt templates from a file


def test_template_file_text_in_a_chat_turn_and_raw(tokenizer, tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("Reach {{ target }} with {{ nums | join(', ') }}. Think in <think> </think> first.\n")
    problem = Problem("cd:1", "Reach 10.", "", "none", {"nums": [2, 5], "target": 10})
    chat = PromptRenderer(tokenizer, DataConfig(template_file=str(template), system_prompt="Be brief.")).text(problem)
    expected_turn = "Reach 10 with 2, 5. Think in <think> </think> first."  # Jinja drops the final newline
    assert chat == tokenizer.apply_chat_template(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": expected_turn}],
        tokenize=False, add_generation_prompt=True)
    raw = PromptRenderer(tokenizer, DataConfig(template="raw", template_file=str(template)))
    assert raw.text(problem) == expected_turn
    missing = Problem("cd:2", "Reach 3.", "", "none", {"nums": [1, 2]})
    with pytest.raises(DataError, match=r"t\.jinja: problem cd:2: 'target' is undefined; its record has gold, kind"):
        raw.text(missing)


def test_template_file_names_the_question_as_the_data_does(tokenizer, tmp_path):
    template = tmp_path / "t.jinja"
    template.write_text("Q: {{ prompt }} (also {{ question }}); gold {{ solution }}")
    cfg = DataConfig(template="raw", template_file=str(template), question_key="prompt", answer_key="solution",
                     kind="gsm8k")
    problem = Problem("cd:1", "What is 2 + 2?", "4", "gsm8k", {"source": "mine"})
    assert PromptRenderer(tokenizer, cfg).text(problem) == "Q: What is 2 + 2? (also What is 2 + 2?); gold 4"
    without_keys = PromptRenderer(tokenizer, DataConfig(template="raw", template_file=str(template)))
    with pytest.raises(DataError, match="'prompt' is undefined"):
        without_keys.text(problem)


def test_template_file_messages_with_a_prefill(tokenizer, tmp_path):
    template = tmp_path / "t.yaml"
    template.write_text("- role: system\n  content: You think first, then answer.\n"
                        "- role: user\n  content: '{{ question }} (answer: {{ gold }})'\n"
                        "- role: assistant\n  content: <think>\n")
    text = PromptRenderer(tokenizer, DataConfig(template_file=str(template))).text(ADD)
    assert text == ("<|im_start|>system\nYou think first, then answer.<|im_end|>\n"
                    "<|im_start|>user\nWhat is 2 + 2? (answer: 4)<|im_end|>\n<|im_start|>assistant\n<think>")
