"""Problems (GSM8K, MATH, the paper's synthetic arithmetic), prompt templates, and the seeded prompt order.

    train = load_problems(cfg.data, "train")                       # list of Problem (a ProblemSet)
    held_out = load_problems(cfg.data, "test", n=cfg.run.eval_size)
    renderer = PromptRenderer(tokenizer, cfg.data)
    ids = renderer.check_length(problem, cfg.model.max_model_len - cfg.rollout.max_tokens)
    sampler = PromptSampler(train, seed=cfg.run.seed); batch = sampler.next_batch(8)

Sources (`data.source`, and `data.eval_source` for the held-out split):
- `synthetic`: the paper's Section 5.1 set, integer problems drawn uniformly from five categories
  (CATEGORIES) with operands in [min_operand, max_operand] (add/sub) or [min_operand, max_factor]
  (multiplication, division; divisors are at least 1). Answers may be negative; dataset="gsm8k".
- `gsm8k` / `math`: `datasets.load_dataset` from the hub: openai/gsm8k ("main") train/test;
  MATH train = DigitalLearningGmbH/MATH-lighteval (the 7,500 MATH train problems, disjoint from MATH-500),
  MATH test = HuggingFaceH4/MATH-500. Offline, these fail with an error that suggests a local file.
- `<path>.jsonl` / `<path>.parquet`: one problem per row, format read from each row's fields: GSM8K
  {question, answer ending in "#### N"} or MATH {problem, answer} (or only a solution with \\boxed{}).
  A local training file needs `data.eval_source` for the held-out split.
`data.max_rows` and the `n` argument keep the first rows of a file/hub source. Malformed rows raise a
DataError naming the file and line; with `data.skip_malformed` they are skipped and counted in the
returned ProblemSet's `skipped` attribute (and logged once per file).

Held-out synthetic problems. Each question is assigned, by a stable hash of its text, to one of ten
buckets: bucket 0 is reserved for the test split, bucket 1 for few-shot examples, the rest for training.
Each split draws from its own seed and keeps only questions of its buckets, so the three are disjoint
by construction and the test set does not depend on num_train. Deviation from a plain "deduplicate test
against train": with the default ranges the multiplication and division categories hold only 144
distinct questions each, which 5,000 training problems cover completely, so deduplication would leave the
eval set without those two categories. Questions may repeat within a split (draws are i.i.d., as in the
paper).

Templates (`data.template`):
- `chat`: the tokenizer's chat template; optional system message (`data.system_prompt`; empty sends none,
  though a model's template may add its own default), then one user turn "question\\ninstruction".
- `fewshot`: the same, preceded by `data.num_shots` worked examples as user/assistant turns. Synthetic
  problems get synthetic examples (categories in turn, fixed seed, answered "3 + 4 = 7. The answer is
  \\boxed{7}."); GSM8K and MATH problems get the built-in examples below (at most 4), so prompts never
  depend on which files are present.
- `raw`: "Question: ...\\nAnswer:" for base models, preceded by the same examples when num_shots > 0
  (no system prompt, no instruction).
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_train.config import DataConfig, SyntheticConfig

logger = logging.getLogger(__name__)


class DataError(ValueError):
    """A data problem; the message names the file and line (or the hub row, or the config key)."""


class PromptTooLongError(ValueError):
    """A rendered prompt that does not fit the model's context; the message names the problem uid."""


@dataclass(frozen=True)
class Problem:
    uid: str  # unique within its set: "gsm8k_test:12" (file:line), "synthetic-train-00042", ...
    question: str  # the problem text, without template or instruction
    gold: str  # the reference answer as the dataset writes it ("1,600", "\\frac{14}{3}", "-7")
    dataset: str  # "gsm8k" or "math": the verifier's mode
    meta: dict = field(default_factory=dict)  # synthetic: {"category"}; MATH: level, subject, unique_id


class ProblemSet(list[Problem]):
    """The problems of one split, with where they came from and how many malformed rows were skipped."""

    def __init__(self, problems: Sequence[Problem] = (), source: str = "", skipped: int = 0):
        super().__init__(problems)
        self.source = source
        self.skipped = skipped


# ----------------------------------------------------------------------------------------------------
# Rows (GSM8K or MATH fields) -> Problem


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} (or \\fbox{...}) in `text`, nested braces included; None if absent."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    open_brace = text.index("{", start)
    depth = 0
    for i in range(open_brace, len(text)):
        depth += {"{": 1, "}": -1}.get(text[i], 0)
        if depth == 0:
            return text[open_brace + 1 : i].strip()
    return None  # unbalanced braces


def _text_field(row: dict, key: str) -> str:
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def problem_from_row(row: Any, uid: str) -> Problem:
    """A GSM8K row {question, answer "... #### N"} or MATH row {problem, answer? , solution?} as a Problem.

    Raises DataError (without location; the caller adds it) when the row fits neither format.
    """
    if not isinstance(row, dict):
        raise DataError(f"expected a JSON object, got {type(row).__name__}")
    if "question" in row:
        if "answer" not in row:
            raise DataError("GSM8K row has 'question' but no 'answer'")
        answer = _text_field(row, "answer")
        if "####" not in answer:
            raise DataError("GSM8K answer has no '#### <final answer>' line")
        gold = answer.rsplit("####", 1)[1].strip()
        if not gold:
            raise DataError("GSM8K answer is empty after '####'")
        return Problem(uid, _text_field(row, "question"), gold, "gsm8k", {})
    if "problem" in row:
        if row.get("answer") is not None:
            gold = _text_field(row, "answer").strip()
        elif row.get("solution") is not None:
            gold = last_boxed(_text_field(row, "solution"))
            if not gold:
                raise DataError("MATH row has no 'answer' and its solution has no \\boxed{...} answer")
        else:
            raise DataError("MATH row has 'problem' but neither 'answer' nor 'solution'")
        meta = {key: row[key] for key in ("level", "subject", "type", "unique_id") if key in row}
        return Problem(uid, _text_field(row, "problem"), gold, "math", meta)
    raise DataError(
        "row fits neither GSM8K {question, answer} nor MATH {problem, answer/solution}; "
        f"keys: {sorted(row)}"
    )


def _collect(rows: Iterator[tuple[str, str, Any]], source: str, cfg: DataConfig, limit: int) -> ProblemSet:
    """Problems from (where, uid, row-or-DataError) triples; stop after `limit` problems (0 = all)."""
    problems = ProblemSet(source=source)
    first_error = ""
    for where, uid, row in rows:
        try:
            if isinstance(row, DataError):
                raise row
            problems.append(problem_from_row(row, uid))
        except DataError as err:
            message = f"{where}: {err}"
            if not cfg.skip_malformed:
                raise DataError(message) from None
            problems.skipped += 1
            first_error = first_error or message
        if limit and len(problems) >= limit:
            break
    if problems.skipped:
        logger.warning("%s: skipped %d malformed rows (first: %s)", source, problems.skipped, first_error)
    if not problems:
        raise DataError(f"{source}: no usable problems")
    return problems


# ----------------------------------------------------------------------------------------------------
# Local files and the hub


def _is_file_source(source: str) -> bool:
    return source.endswith((".jsonl", ".parquet"))


def _jsonl_rows(path: Path) -> Iterator[tuple[str, str, Any]]:
    with path.open(encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if not line.strip():
                continue  # blank lines (a trailing newline, a separator) are not rows
            where = f"{path}: line {line_number}"
            try:
                row: Any = json.loads(line)
            except json.JSONDecodeError as err:
                row = DataError(f"not valid JSON ({err.msg} at column {err.colno})")
            yield where, f"{path.stem}:{line_number}", row


def _parquet_rows(path: Path) -> Iterator[tuple[str, str, Any]]:
    import pyarrow.parquet

    for row_number, row in enumerate(pyarrow.parquet.read_table(path).to_pylist(), start=1):
        yield f"{path}: row {row_number}", f"{path.stem}:{row_number}", row


def _load_file(path: Path, cfg: DataConfig, limit: int) -> ProblemSet:
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    rows = _jsonl_rows(path) if path.suffix == ".jsonl" else _parquet_rows(path)
    return _collect(rows, str(path), cfg, limit)


# (source, split) -> (hub id, config name, split name)
HUB_DATASETS = {
    ("gsm8k", "train"): ("openai/gsm8k", "main", "train"),
    ("gsm8k", "test"): ("openai/gsm8k", "main", "test"),
    ("math", "train"): ("DigitalLearningGmbH/MATH-lighteval", "default", "train"),
    ("math", "test"): ("HuggingFaceH4/MATH-500", "default", "test"),
}


def _load_hub(source: str, split: str, cfg: DataConfig, limit: int) -> ProblemSet:
    import datasets

    hub_id, config_name, hub_split = HUB_DATASETS[(source, split)]
    try:
        table = datasets.load_dataset(hub_id, config_name, split=hub_split)
    except OSError as err:  # ConnectionError offline, DatasetNotFoundError, ...
        raise DataError(
            f"data source {source!r}: cannot load {hub_id} ({config_name}, {hub_split}) from the hub "
            f"({type(err).__name__}: {str(err)[:120]}). Without network, use local files with GSM8K or MATH "
            "fields: data.source=train.jsonl data.eval_source=test.jsonl (.parquet works too)"
        ) from None
    rows = ((f"{hub_id} {hub_split} row {i}", f"{source}-{split}:{i}", row) for i, row in enumerate(table, 1))
    return _collect(rows, hub_id, cfg, limit)


# ----------------------------------------------------------------------------------------------------
# The paper's synthetic arithmetic set (Section 5.1)

CATEGORIES = ("add_sub_2", "add_sub_3", "multiplication", "division", "parentheses")
SYNTHETIC_TEST_SIZE = 500  # the paper's set size; the default when `n` is not given
_BUCKETS = 10  # question-hash buckets: 0 = test, 1 = few-shot examples, 2-9 = train
_SPLIT_BUCKETS = {"test": (0,), "shots": (1,), "train": tuple(range(2, _BUCKETS))}
_MAX_DRAWS = 10_000  # per problem; narrow ranges can leave a split without questions of a category
_SHOTS_SEED = "synthetic-fewshot"


@dataclass(frozen=True)
class Arithmetic:
    """One synthetic problem: the expression, its worked steps, and the answer they arrive at."""

    category: str
    expression: str  # "12 - (5 + 3)"
    steps: tuple[str, ...]  # ("5 + 3 = 8", "12 - 8 = 4")
    answer: int

    @property
    def question(self) -> str:
        return f"What is {self.expression}?"

    @property
    def solution(self) -> str:
        return " ".join(f"{step}." for step in self.steps) + f" The answer is \\boxed{{{self.answer}}}."


def _apply(left: int, op: str, right: int) -> tuple[int, str]:
    """(value, step text) of `left op right`; a negative right operand is written in parentheses."""
    value = {"+": left + right, "-": left - right, "*": left * right}[op]
    right_text = f"({right})" if right < 0 else str(right)
    return value, f"{left} {op} {right_text} = {value}"


def _add_sub_chain(rng: random.Random, s: SyntheticConfig, operations: int, category: str) -> Arithmetic:
    value = rng.randint(s.min_operand, s.max_operand)
    expression, steps = str(value), []
    for _ in range(operations):
        op, operand = rng.choice("+-"), rng.randint(s.min_operand, s.max_operand)
        value, step = _apply(value, op, operand)
        expression += f" {op} {operand}"
        steps.append(step)
    return Arithmetic(category, expression, tuple(steps), value)


def _parentheses(rng: random.Random, s: SyntheticConfig) -> Arithmetic:
    a, b, c = (rng.randint(s.min_operand, s.max_operand) for _ in range(3))
    outer, inner = rng.choice("+-"), rng.choice("+-")
    inside, first = _apply(b, inner, c)
    value, second = _apply(a, outer, inside)
    return Arithmetic("parentheses", f"{a} {outer} ({b} {inner} {c})", (first, second), value)


def _multiplication(rng: random.Random, s: SyntheticConfig) -> Arithmetic:
    a, b = rng.randint(s.min_operand, s.max_factor), rng.randint(s.min_operand, s.max_factor)
    value, step = _apply(a, "*", b)
    return Arithmetic("multiplication", f"{a} * {b}", (step,), value)


def _division(rng: random.Random, s: SyntheticConfig) -> Arithmetic:
    # Built from divisor * quotient, so the division is exact and the answer an integer.
    divisor = rng.randint(max(s.min_operand, 1), s.max_factor)
    quotient = rng.randint(s.min_operand, s.max_factor)
    dividend = divisor * quotient
    step = f"{dividend} / {divisor} = {quotient}"
    return Arithmetic("division", f"{dividend} / {divisor}", (step,), quotient)


def draw_arithmetic(rng: random.Random, s: SyntheticConfig, category: str) -> Arithmetic:
    """One problem of `category`, uniform over its operand ranges."""
    if category == "add_sub_2":
        return _add_sub_chain(rng, s, 2, category)
    if category == "add_sub_3":
        return _add_sub_chain(rng, s, 3, category)
    if category == "multiplication":
        return _multiplication(rng, s)
    if category == "division":
        return _division(rng, s)
    if category == "parentheses":
        return _parentheses(rng, s)
    raise ValueError(f"unknown synthetic category {category!r} (known: {', '.join(CATEGORIES)})")


def question_bucket(question: str) -> int:
    """Stable (process- and platform-independent) bucket of a question; it decides the question's split."""
    digest = hashlib.blake2b(question.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % _BUCKETS


def _draw_for(rng: random.Random, s: SyntheticConfig, category: str, split: str) -> Arithmetic:
    """Redraw until the question belongs to `split` (rejection keeps the draw uniform within the split)."""
    for _ in range(_MAX_DRAWS):
        item = draw_arithmetic(rng, s, category)
        if question_bucket(item.question) in _SPLIT_BUCKETS[split]:
            return item
    raise DataError(
        f"synthetic {split} set: no {category} question reserved for it in {_MAX_DRAWS} draws; the number "
        "ranges are too narrow (raise data.synthetic.max_operand / max_factor)"
    )


def _check_ranges(s: SyntheticConfig) -> None:
    unknown = [c for c in s.categories if c not in CATEGORIES]
    if unknown or not s.categories:
        raise DataError(f"data.synthetic.categories: {list(s.categories)} must be a non-empty list of "
                        f"{', '.join(CATEGORIES)}" + (f" (unknown: {', '.join(unknown)})" if unknown else ""))
    if s.min_operand > s.max_factor:
        raise DataError(
            f"data.synthetic.min_operand ({s.min_operand}) must be <= data.synthetic.max_factor "
            f"({s.max_factor}): multiplication and division draw factors from that range"
        )


def synthetic_problems(s: SyntheticConfig, split: str, n: int | None = None) -> ProblemSet:
    """`n` problems (default: num_train for train, 500 for test), categories drawn uniformly, seeded."""
    _check_ranges(s)
    count = n if n is not None else (s.num_train if split == "train" else SYNTHETIC_TEST_SIZE)
    rng = random.Random(f"synthetic-{split}-{s.seed}")  # str seeds are hashed with SHA-512: stable
    problems = ProblemSet(source="synthetic")
    for index in range(count):
        item = _draw_for(rng, s, rng.choice(s.categories), split)
        uid, meta = f"synthetic-{split}-{index:05d}", {"category": item.category}
        problems.append(Problem(uid, item.question, str(item.answer), "gsm8k", meta))
    return problems


def synthetic_shots(s: SyntheticConfig, k: int) -> list[Arithmetic]:
    """`k` worked examples, categories in turn, from a fixed seed and questions train/test never hold."""
    _check_ranges(s)
    rng = random.Random(_SHOTS_SEED)
    return [_draw_for(rng, s, s.categories[i % len(s.categories)], "shots") for i in range(k)]


# ----------------------------------------------------------------------------------------------------
# Which problems a split holds


def load_problems(cfg: DataConfig, split: str, n: int | None = None) -> ProblemSet:
    """The problems of `split` ("train" or "test"); `n` keeps at most n of them (synthetic: exactly n)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    source = cfg.source
    if split == "test" and cfg.eval_source:
        source = cfg.eval_source
    elif split == "test" and _is_file_source(cfg.source):
        raise DataError(
            f"data.source is a local file ({cfg.source}); set data.eval_source to a held-out file "
            "(e.g. ../shared/data/gsm8k_test.jsonl), or to gsm8k / math for the hub test split"
        )
    if source == "synthetic":
        return synthetic_problems(cfg.synthetic, split, n)
    if n == 0:
        return ProblemSet(source=source)
    limit = min((x for x in (cfg.max_rows, n or 0) if x), default=0)  # 0 = every row
    if source in ("gsm8k", "math"):
        return _load_hub(source, split, cfg, limit)
    if _is_file_source(source):
        return _load_file(Path(source), cfg, limit)
    key = "data.eval_source" if source == cfg.eval_source and split == "test" else "data.source"
    raise DataError(f"{key}: {source!r} is not synthetic, gsm8k, math, or a .jsonl / .parquet file")


# ----------------------------------------------------------------------------------------------------
# Prompt templates

# Built-in worked examples for the fewshot and raw templates: (question, worked answer). Written for this
# project in the style of each dataset; they are not rows of GSM8K or MATH.
GSM8K_SHOTS = (
    (
        "A baker fills 4 trays with 12 cookies each. She gives away 15 cookies. How many cookies are left?",
        "She bakes 4 * 12 = 48 cookies. After giving away 15 she has 48 - 15 = 33 left. "
        "The answer is \\boxed{33}.",
    ),
    (
        "Tom reads 25 pages on each weekday and 40 pages on each day of the weekend. "
        "How many pages does he read in a week?",
        "On 5 weekdays he reads 5 * 25 = 125 pages and on 2 weekend days 2 * 40 = 80 pages. "
        "In total he reads 125 + 80 = 205 pages. The answer is \\boxed{205}.",
    ),
    (
        "A bike costs $240. Maria has saved $90 and saves $30 more every week. "
        "How many more weeks must she save to buy the bike?",
        "She still needs 240 - 90 = $150. At $30 a week that takes 150 / 30 = 5 weeks. "
        "The answer is \\boxed{5}.",
    ),
    (
        "A garden has 3 rows of 8 tomato plants, and each plant gives 6 tomatoes. Half of the tomatoes are "
        "sold. How many tomatoes are sold?",
        "There are 3 * 8 = 24 plants, giving 24 * 6 = 144 tomatoes. Half of them is 144 / 2 = 72. "
        "The answer is \\boxed{72}.",
    ),
)
MATH_SHOTS = (
    (
        "Solve for $x$: $3x - 7 = 11$.",
        "Adding 7 to both sides gives $3x = 18$, so $x = 6$. The answer is \\boxed{6}.",
    ),
    (
        "What is the sum of the interior angles of a hexagon, in degrees?",
        "The interior angles of an $n$-gon sum to $180(n-2)$ degrees. "
        "For $n = 6$ this is $180 \\cdot 4 = 720$. The answer is \\boxed{720}.",
    ),
    (
        "Simplify $\\frac{18}{24}$.",
        "The greatest common divisor of 18 and 24 is 6, so $\\frac{18}{24} = \\frac{3}{4}$. "
        "The answer is \\boxed{\\frac{3}{4}}.",
    ),
    (
        "Find all real $x$ such that $x^2 - 5x + 6 = 0$.",
        "The quadratic factors as $(x - 2)(x - 3) = 0$, so $x = 2$ or $x = 3$. The answer is \\boxed{2, 3}.",
    ),
)
_BUILTIN_SHOTS = {"gsm8k": GSM8K_SHOTS, "math": MATH_SHOTS}


class PromptRenderer:
    """Turns a Problem into the prompt text / token ids of the configured template."""

    def __init__(self, tokenizer: Any, cfg: DataConfig):
        if cfg.template not in ("chat", "fewshot", "raw"):
            raise ValueError(f"data.template: {cfg.template!r} is not one of chat, fewshot, raw")
        if cfg.template != "raw" and not getattr(tokenizer, "chat_template", None):
            raise ValueError(
                f"data.template={cfg.template}: the tokenizer has no chat template; use data.template=raw "
                "for base models"
            )
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.num_shots = 0 if cfg.template == "chat" else cfg.num_shots
        examples = synthetic_shots(cfg.synthetic, self.num_shots)
        self._synthetic_shots = [(example.question, example.solution) for example in examples]

    def shots(self, problem: Problem) -> list[tuple[str, str]]:
        """The (question, worked answer) examples shown before `problem`."""
        if self.num_shots == 0:
            return []
        if "category" in problem.meta:
            return self._synthetic_shots
        builtin = _BUILTIN_SHOTS[problem.dataset]
        if self.num_shots > len(builtin):
            raise ValueError(
                f"data.num_shots={self.num_shots}: there are only {len(builtin)} built-in "
                f"{problem.dataset} examples"
            )
        return list(builtin[: self.num_shots])

    def _user_turn(self, question: str) -> str:
        return f"{question}\n{self.cfg.instruction}" if self.cfg.instruction else question

    def text(self, problem: Problem) -> str:
        shots = self.shots(problem)
        if self.cfg.template == "raw":
            blocks = [f"Question: {q}\nAnswer: {a}" for q, a in shots]
            return "\n\n".join([*blocks, f"Question: {problem.question}\nAnswer:"])
        messages = [{"role": "system", "content": self.cfg.system_prompt}] if self.cfg.system_prompt else []
        for question, answer in shots:
            messages += [
                {"role": "user", "content": self._user_turn(question)},
                {"role": "assistant", "content": answer},
            ]
        messages.append({"role": "user", "content": self._user_turn(problem.question)})
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def token_ids(self, problem: Problem) -> list[int]:
        # Chat templates write their own special tokens (BOS included where the model wants one); raw text
        # gets the tokenizer's usual ones, as a base model saw in pretraining.
        add_special = self.cfg.template == "raw"
        return list(self.tokenizer(self.text(problem), add_special_tokens=add_special)["input_ids"])

    def check_length(self, problem: Problem, max_prompt_tokens: int) -> list[int]:
        """The prompt's token ids; PromptTooLongError naming the problem when they exceed the budget."""
        ids = self.token_ids(problem)
        if len(ids) > max_prompt_tokens:
            raise PromptTooLongError(
                f"problem {problem.uid}: the prompt is {len(ids)} tokens, over the budget of "
                f"{max_prompt_tokens} (model.max_model_len - rollout.max_tokens); raise model.max_model_len, "
                "or shorten the prompt (data.num_shots, data.system_prompt)"
            )
        return ids


# ----------------------------------------------------------------------------------------------------
# Prompt order


def _digest(problems: Sequence[Problem]) -> str:
    return hashlib.blake2b("\n".join(p.uid for p in problems).encode(), digest_size=8).hexdigest()


class PromptSampler:
    """Problems in a seeded shuffled order, epoch after epoch; resumable from `state_dict()`.

    Every problem appears once per epoch; a batch that runs past the end of an epoch continues with the
    start of the next one (reshuffled with the epoch number), so no problem is dropped.
    """

    def __init__(self, problems: Sequence[Problem], seed: int):
        if not problems:
            raise ValueError("PromptSampler needs at least one problem")
        self.problems = list(problems)
        self.seed = seed
        self.epoch = 0
        self.position = 0  # index into this epoch's order of the next problem to hand out
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        order = list(range(len(self.problems)))
        random.Random(f"prompt-order-{self.seed}-{epoch}").shuffle(order)
        return order

    def next_batch(self, k: int) -> list[Problem]:
        batch = []
        for _ in range(k):
            if self.position == len(self._order):
                self.epoch, self.position = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            batch.append(self.problems[self._order[self.position]])
            self.position += 1
        return batch

    def state_dict(self) -> dict:
        # JSON-serialisable; `problems` fingerprints the uids so a resume on other data fails loudly.
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "position": self.position,
            "problems": _digest(self.problems),
        }

    def load_state_dict(self, state: dict) -> None:
        if state["seed"] != self.seed or state["problems"] != _digest(self.problems):
            raise ValueError(
                "PromptSampler state is from a different seed or problem set; resuming would change which "
                f"problems come next (state seed {state['seed']}, this seed {self.seed})"
            )
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._order = self._permutation(self.epoch)
