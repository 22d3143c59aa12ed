"""Problems: where they come from (the synthetic set, GSM8K, MATH, your files or datasets), the record each one
carries, and the seeded prompt order. Prompts are made in grpo_train.prompts, rewards in grpo_train.rewards.

    train = load_problems(cfg.data, "train")                       # list of Problem (a ProblemSet)
    held_out = load_problems(cfg.data, "test", n=cfg.run.eval_size)
    sampler = PromptSampler(train, seed=cfg.run.seed); batch = sampler.next_batch(8)

Sources (`data.source`, and `data.eval_source` for the held-out split):
- `synthetic`: the paper's Section 5.1 arithmetic set (grpo_train.synthetic); answers are integers, kind gsm8k.
- `gsm8k` / `math`: `datasets.load_dataset` from the hub: openai/gsm8k ("main") train/test;
  MATH train = DigitalLearningGmbH/MATH-lighteval (the 7,500 MATH train problems, disjoint from MATH-500),
  MATH test = HuggingFaceH4/MATH-500 (HUB_DATASETS; docs/gpu-and-clusters.md has the download commands).
- `<path>.jsonl` / `.parquet` / `.csv`: one problem per row. A local training file needs `data.eval_source`.
- a dataset folder or hub id (`owner/name`): `datasets.load_dataset(source, data.subset, split=data.split)`
  for training and `split=data.eval_split` for the held-out set.
`data.max_rows` and the `n` argument keep the first rows of a file/hub source.
A hub id loads offline when HF_HUB_OFFLINE is set or the hub does not answer within HUB_PROBE_TIMEOUT_S (left to
itself, `datasets` retries an unreachable hub for ~26 s): from `datasets`' own cache (a dataset loaded once with
network), else from the hub cache's copy that `hf download NAME --repo-type dataset` made; without either, a
DataError at once that says how to get it.

Rows. Without `data.question_key` each row is read by its layout: GSM8K {question, answer ending in "#### N"
(or a number)} or MATH {problem, answer} (or only a solution with \\boxed{}). With it, the question is that
field and the gold answer the `data.answer_key` field (a string or a number; a GSM8K-kind answer with a
"#### N" line gives N), and `data.kind` says which checker scores the answers: gsm8k, math, or none (no gold
needed: only reward.functions score them). An optional `data.map_fn` (module:function) turns each row
(a dict) into the row to read first, or drops it by returning None. The row's other fields go into the
problem's `meta` and from there into its record (Problem.record), which reward functions and template files
see. Malformed rows raise a DataError naming the file, the line (or row) and the key; with
`data.skip_malformed` they are skipped and counted in the ProblemSet's `skipped` attribute (logged once).
"""

from __future__ import annotations

import contextlib
import csv
import functools
import hashlib
import json
import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grpo_train.config import DataConfig, SyntheticConfig, source_kind
from grpo_train.rewards.user_code import load_function
from grpo_train.synthetic import SYNTHETIC_TEST_SIZE, synthetic_split

logger = logging.getLogger(__name__)


class DataError(ValueError):
    """A data problem; the message names the file and line (or the hub row, or the config key)."""


@dataclass(frozen=True)
class Problem:
    uid: str  # unique within its set: "gsm8k_test:12" (file:line), "synthetic-train-00042", ...
    question: str  # the problem text, without template or instruction
    gold: str  # the reference answer as the dataset writes it ("1,600", "\\frac{14}{3}", "-7"); "" for kind none
    dataset: str  # the checker (data.kind): "gsm8k" or "math" (the verifier's mode), or "none"
    meta: dict = field(default_factory=dict)  # synthetic: {"category"}; MATH: level, subject, ...; keyed rows: the rest

    def record(self) -> dict[str, Any]:
        """What reward functions and template files see: the row's other fields, then uid, question, gold and
        kind (these four win over row fields of the same name)."""
        return {**self.meta, "uid": self.uid, "question": self.question, "gold": self.gold, "kind": self.dataset}


class ProblemSet(list[Problem]):
    """The problems of one split, with where they came from and how many malformed rows were skipped."""

    def __init__(self, problems: Sequence[Problem] = (), source: str = "", skipped: int = 0):
        super().__init__(problems)
        self.source = source
        self.skipped = skipped


# ----------------------------------------------------------------------------------------------------
# Rows -> Problem


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


def _text_field(row: dict, key: str, config_key: str = "") -> str:
    if key not in row:
        named = f" ({config_key})" if config_key else ""
        raise DataError(f"no field {key!r}{named}; the row has {', '.join(map(str, row)) or 'no fields'}")
    value = row[key]
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"field {key!r} must be a non-empty string, got {value!r:.60}")
    return value


def _answer_field(row: dict, key: str, config_key: str = "") -> str:
    """A gold answer: a non-empty string, or a number written as text (18 -> "18", 2.5 -> "2.5", 3.0 -> "3")."""
    value = row.get(key)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and key in row:
        if isinstance(value, float) and not math.isfinite(value):
            raise DataError(f"field {key!r} must be a finite number or a non-empty string, got {value!r}")
        return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)
    if key in row and not isinstance(value, str):
        raise DataError(f"field {key!r} must be a number or a non-empty string, got {value!r:.60}")
    return _text_field(row, key, config_key).strip()


def _layout_problem(row: dict, uid: str, gold_needed: bool = True) -> Problem:
    """A GSM8K row {question, answer "... #### N" or a number} or MATH row {problem, answer?, solution?}.
    Without `gold_needed` (data.kind none: only reward functions score) the answer is optional: a row without one
    has gold "", and an answer without a '####' line or a solution without a box is taken as it is / as ""."""
    if "question" in row:
        if "answer" not in row:
            if not gold_needed:
                return Problem(uid, _text_field(row, "question"), "", "gsm8k", {})
            raise DataError("GSM8K row has 'question' but no 'answer' (data.kind none needs no answer)")
        answer = _answer_field(row, "answer")
        if isinstance(row["answer"], str) and ("####" in answer or gold_needed):
            if "####" not in answer:
                raise DataError("GSM8K answer has no '#### <final answer>' line (a number is taken as it is)")
            answer = answer.rsplit("####", 1)[1].strip()
            if not answer:
                raise DataError("GSM8K answer is empty after '####'")
        return Problem(uid, _text_field(row, "question"), answer, "gsm8k", {})
    if "problem" in row:
        if row.get("answer") is not None:
            gold = _answer_field(row, "answer")
        elif row.get("solution") is not None:
            gold = last_boxed(_text_field(row, "solution")) or ""
            if not gold and gold_needed:
                raise DataError("MATH row has no 'answer' and its solution has no \\boxed{...} answer")
        elif gold_needed:
            raise DataError("MATH row has 'problem' but neither 'answer' nor 'solution' (data.kind none needs "
                            "neither)")
        else:
            gold = ""
        meta = {key: row[key] for key in ("level", "subject", "type", "unique_id") if key in row}
        return Problem(uid, _text_field(row, "problem"), gold, "math", meta)
    raise DataError(
        "row fits neither GSM8K {question, answer} nor MATH {problem, answer/solution}; "
        f"keys: {sorted(row)} (set data.question_key and data.answer_key for other field names)"
    )


def _keyed_problem(row: dict, uid: str, cfg: DataConfig) -> Problem:
    """A row read through data.question_key / data.answer_key; the other fields become meta."""
    question = _text_field(row, cfg.question_key, "data.question_key")
    gold = ""
    if cfg.answer_key and (cfg.kind != "none" or cfg.answer_key in row):
        gold = _answer_field(row, cfg.answer_key, "data.answer_key")
        if cfg.kind == "gsm8k" and "####" in gold:
            gold = gold.rsplit("####", 1)[1].strip()
            if not gold:
                raise DataError(f"field {cfg.answer_key!r} (data.answer_key) is empty after '####'")
    meta = {key: value for key, value in row.items() if key not in (cfg.question_key, cfg.answer_key)}
    return Problem(uid, question, gold, cfg.kind, meta)


def problem_from_row(row: Any, uid: str, cfg: DataConfig | None = None) -> Problem:
    """One row as a Problem, by data.question_key / answer_key / kind (default: the GSM8K or MATH layout).

    Raises DataError (without location; the caller adds it) when the row does not fit.
    """
    cfg = cfg or DataConfig()
    if not isinstance(row, dict):
        raise DataError(f"expected a JSON object, got {type(row).__name__}")
    if cfg.question_key:
        return _keyed_problem(row, uid, cfg)
    problem = _layout_problem(row, uid, gold_needed=cfg.kind != "none")
    if cfg.kind not in ("auto", problem.dataset):
        problem = Problem(problem.uid, problem.question, problem.gold, cfg.kind, problem.meta)
    return problem


def _mapped(map_fn: Callable[[dict], Any], spec: str, row: Any) -> dict | None:
    """`row` through data.map_fn; None drops the row."""
    try:
        out = map_fn(row)
    except Exception as err:  # the user's code: any failure is this row's problem, reported with its line
        raise DataError(f"data.map_fn {spec} raised {type(err).__name__}: {err}") from None
    if out is not None and not isinstance(out, dict):
        raise DataError(f"data.map_fn {spec} returned {type(out).__name__}; it must return a dict (or None)")
    return out


def _collect(rows: Iterator[tuple[str, str, Any]], source: str, cfg: DataConfig, limit: int) -> ProblemSet:
    """Problems from (where, uid, row-or-DataError) triples; stop after `limit` problems (0 = all)."""
    problems = ProblemSet(source=source)
    map_fn = load_function(cfg.map_fn) if cfg.map_fn else None
    first_error = ""
    for where, uid, row in rows:
        try:
            if isinstance(row, DataError):
                raise row
            if map_fn is not None and (row := _mapped(map_fn, cfg.map_fn, row)) is None:
                continue
            problems.append(problem_from_row(row, uid, cfg))
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
# Local files, dataset folders and the hub


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


def _csv_rows(path: Path) -> Iterator[tuple[str, str, Any]]:
    """Rows of a csv file with a header line; every value is text. Line numbers count the header as line 1."""
    with path.open(encoding="utf-8", newline="") as handle:
        reader = csv.DictReader(handle)
        columns = len(reader.fieldnames or [])  # reads the header
        line_number = reader.line_num
        for row in reader:
            start, line_number = line_number + 1, reader.line_num  # a quoted value may span lines
            if None in row or None in row.values():
                row = DataError(f"has {'more' if None in row else 'fewer'} values than the header's {columns} columns")
            yield f"{path}: line {start}", f"{path.stem}:{start}", row


def _load_file(path: Path, cfg: DataConfig, limit: int) -> ProblemSet:
    if not path.is_file():
        raise DataError(f"{path}: data file not found")
    readers = {".jsonl": _jsonl_rows, ".parquet": _parquet_rows, ".csv": _csv_rows}
    return _collect(readers[path.suffix](path), str(path), cfg, limit)


# (source, split) -> (hub id, config name, split name)
HUB_DATASETS = {
    ("gsm8k", "train"): ("openai/gsm8k", "main", "train"),
    ("gsm8k", "test"): ("openai/gsm8k", "main", "test"),
    ("math", "train"): ("DigitalLearningGmbH/MATH-lighteval", "default", "train"),
    ("math", "test"): ("HuggingFaceH4/MATH-500", "default", "test"),
}


HUB_PROBE_TIMEOUT_S = 5.0  # how long the hub may take to answer before a hub dataset loads offline


@functools.cache
def _hub_answers(endpoint: str) -> bool:
    """Whether the hub answers one request within HUB_PROBE_TIMEOUT_S (any HTTP status counts as an answer)."""
    from huggingface_hub import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_TIMEOUT_S)
    except Exception:  # DNS, refused, timeout, proxy: no answer (the client's error classes vary by version)
        return False
    return True


def _hub_offline() -> str:
    """Why a hub id loads offline: HF_HUB_OFFLINE (or HF_DATASETS_OFFLINE) is set, or the hub does not answer;
    "" when it is online."""
    import datasets
    from huggingface_hub import constants

    if datasets.config.HF_HUB_OFFLINE or constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    if not _hub_answers(constants.ENDPOINT):
        return f"the hub ({constants.ENDPOINT}) did not answer within {HUB_PROBE_TIMEOUT_S:.0f} s"
    return ""


@contextlib.contextmanager
def _offline_mode() -> Iterator[None]:
    """datasets and huggingface_hub in offline mode (as HF_HUB_OFFLINE=1 at import would set them), for a hub that
    was found not to answer: a request then fails at once instead of after datasets' five retries."""
    import datasets
    from huggingface_hub import constants

    saved = datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, constants.HF_HUB_OFFLINE = saved


def _hub_snapshot(name: str) -> str | None:
    """The folder of the hub cache holding dataset `name` (`hf download NAME --repo-type dataset`), or None."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(name, repo_type="dataset", local_files_only=True)
    except LocalEntryNotFoundError:
        return None


def _read_dataset(name: str, subset: str, split: str) -> Any:
    """datasets.load_dataset of a local folder or hub id. A hub id offline (_hub_offline) comes from datasets' own
    cache, else from the hub cache's snapshot (datasets itself does not look there offline); None when neither
    holds it."""
    import datasets

    if Path(name).is_dir() or not _hub_offline():
        return datasets.load_dataset(name, subset or None, split=split)
    with _offline_mode():
        try:
            return datasets.load_dataset(name, subset or None, split=split)
        except (OSError, ValueError):  # ConnectionError: not in datasets' cache
            folder = _hub_snapshot(name)
        return None if folder is None else datasets.load_dataset(folder, subset or None, split=split)


def _load_dataset(name: str, subset: str, split: str, key: str, cfg: DataConfig, limit: int,
                  uid_prefix: str) -> ProblemSet:
    """A split of a hub dataset or local dataset folder through datasets.load_dataset, row by row."""
    try:
        import datasets  # noqa: F401  (only whether it is installed)
    except ImportError:
        raise DataError(f"{key}: {name} is loaded with the `datasets` package, which is not installed: "
                        "pip install 'grpo_train[hub]' (or use local files: data.source=train.jsonl)") from None

    where = f"{name}" + (f" ({subset})" if subset else "") + f", split {split!r}"
    hint = ("Without network, use local files: data.source=train.jsonl data.eval_source=test.jsonl "
            "(.parquet and .csv work too)")
    try:
        table = _read_dataset(name, subset, split)
    except (OSError, ValueError) as err:  # not found, no such split or subset
        raise DataError(f"{key}: cannot load {where} ({type(err).__name__}: {str(err)[:200]}). {hint}") from None
    if table is None:
        raise DataError(f"{key}: cannot load {where}: {_hub_offline()}, and neither the datasets cache nor the "
                        f"hub cache holds it. On a machine with network, run `hf download {name} --repo-type "
                        f"dataset`, share the cache (HF_HOME) and set HF_HUB_OFFLINE=1. {hint}")
    rows = ((f"{name} {split} row {i}", f"{uid_prefix}-{split}:{i}", row) for i, row in enumerate(table, 1))
    return _collect(rows, name, cfg, limit)


def synthetic_problems(s: SyntheticConfig, split: str, n: int | None = None) -> ProblemSet:
    """`n` problems (default: num_train for train, 500 for test), categories drawn uniformly, seeded."""
    count = n if n is not None else (s.num_train if split == "train" else SYNTHETIC_TEST_SIZE)
    try:
        items = synthetic_split(s, split, count)
    except ValueError as err:
        raise DataError(str(err)) from None
    return ProblemSet([Problem(f"synthetic-{split}-{index:05d}", item.question, str(item.answer), "gsm8k",
                               {"category": item.category}) for index, item in enumerate(items)], source="synthetic")


# ----------------------------------------------------------------------------------------------------
# Which problems a split holds


def load_problems(cfg: DataConfig, split: str, n: int | None = None) -> ProblemSet:
    """The problems of `split` ("train" or "test"); `n` keeps at most n of them (synthetic: exactly n)."""
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    source, key = cfg.source, "data.source"
    if split == "test" and cfg.eval_source:
        source = cfg.eval_source
        key = "data.source" if cfg.eval_source == cfg.source else "data.eval_source"
    elif split == "test" and source_kind(cfg.source) == "file":
        raise DataError(
            f"data.source is a local file ({cfg.source}); set data.eval_source to a held-out file "
            "(e.g. ../shared/data/gsm8k_test.jsonl), or to gsm8k / math for the hub test split"
        )
    kind = source_kind(source)
    if kind == "synthetic":
        problems = synthetic_problems(cfg.synthetic, split, n)
        if cfg.kind not in ("auto", "gsm8k"):
            problems[:] = [Problem(p.uid, p.question, p.gold, cfg.kind, p.meta) for p in problems]
        return problems
    if n == 0:
        return ProblemSet(source=source)
    limit = min((x for x in (cfg.max_rows, n or 0) if x), default=0)  # 0 = every row
    if kind == "hub":
        hub_id, subset, hub_split = HUB_DATASETS[(source, split)]
        return _load_dataset(hub_id, subset, hub_split, key, cfg, limit, uid_prefix=source)
    if kind == "file":
        return _load_file(Path(source), cfg, limit)
    if kind == "dataset":
        dataset_split = cfg.split if split == "train" else cfg.eval_split
        return _load_dataset(source, cfg.subset, dataset_split, key, cfg, limit, uid_prefix=Path(source).name)
    raise DataError(f"{key}: {source!r} is not synthetic, gsm8k, math, a .jsonl / .parquet / .csv file, a dataset "
                    "folder or a hub id (owner/name)")


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
