"""Reward functions: the one signature they share, the built-ins, and the list a run scores with.

Every reward function, built-in or the user's (`reward.functions` in the config), is called as

    fn(completion: str, problem: dict, num_tokens: int, truncated: bool, **kwargs) -> float | None

- completion: the completion's text (special tokens removed), without the prompt
- problem: the problem's record: `uid`, `question`, `gold` (the answer as the data gives it, "" when there is
  none), `kind` (gsm8k, math or none) and the row's other fields (see grpo_train.data.Problem.record)
- num_tokens: the completion's length in tokens (its EOS token included, if it stopped on one)
- truncated: whether it was cut off at rollout.max_tokens instead of stopping by itself
- kwargs: the entry's `kwargs` from the config, on every call

It returns a number (a bool counts as 0/1), or None for "no answer": None adds nothing to the reward and is
counted apart. The completion's reward is accuracy_weight * correct + sum over the functions of weight * value.
The functions run in the verifier's worker processes, each call under reward.timeout_s: a call that raises,
returns something else (a string, NaN) or runs out of time adds 0 and is counted as status `error` / `timeout`
for that function; the run goes on.

Built-ins (use them as `grpo_train.rewards:NAME`):
- `boxed_format`: 1 when the final answer is in \\boxed{} (GSM8K kind: or "#### N"), else 0. `reward.format_weight`
  is this function with that weight, under the metric name `format`.
- `think_format`: 1 for one <think>...</think> block, then an answer (boxed, in <answer> tags, or any text).
- `overlong_penalty`: DAPO's soft overlong punishment (0 down to -1 over the last `cache` tokens before max_len).
- `length_penalty`: -length / max_len beyond an optional free length, in tokens or characters (a linear pull
  towards short answers).
"""

from __future__ import annotations

import math
import re
from typing import Any, NamedTuple

from grpo_train.verifier import DATASETS, extract_answer

FORMAT_NAME = "format"  # the metric name of reward.format_weight's function
FORMAT_SPEC = "grpo_train.rewards:boxed_format"
ARGUMENTS = 4  # completion, problem, num_tokens, truncated


class RewardFunction(NamedTuple):
    """One entry of the run's reward functions, as the verifier workers receive it (picklable: the function
    travels by its `module:function` text and is imported in each worker)."""

    name: str  # metric name: reward/fn/<name>
    spec: str  # module:function or path/to/file.py:function
    weight: float
    kwargs: dict[str, Any]


def function_name(spec: str) -> str:
    """The default metric name of an entry: its function's name."""
    return spec.rpartition(":")[2].strip()


def reward_functions(reward_cfg: Any) -> list[RewardFunction]:
    """The run's functions, in config order: `reward.functions`, then the format function when
    `reward.format_weight` is non-zero. (`reward_cfg` is a grpo_train.config.RewardConfig.)"""
    entries = [RewardFunction(entry.name or function_name(entry.function), entry.function, entry.weight,
                              dict(entry.kwargs)) for entry in reward_cfg.functions]
    if reward_cfg.format_weight:
        entries.append(RewardFunction(FORMAT_NAME, FORMAT_SPEC, reward_cfg.format_weight, {}))
    return entries


def as_reward(value: Any) -> float | None:
    """A function's return value as a reward: float or None; TypeError/ValueError for anything else."""
    if value is None:
        return None
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)) or type(value).__name__ in ("float32", "float64", "int64", "int32"):
        number = float(value)  # numpy scalars included, without importing numpy
        if not math.isfinite(number):
            raise ValueError(f"returned {number}; a reward must be a finite number or None")
        return number
    raise TypeError(f"returned {value!r:.60} ({type(value).__name__}); a reward must be a number or None")


# ----------------------------------------------------------------------------------------------------
# Built-ins


def boxed_format(completion: str, problem: dict, num_tokens: int, truncated: bool) -> float:
    """1.0 when the final answer is stated in \\boxed{} (for GSM8K problems "#### N" counts too), else 0.0:
    the verifier's own reading of the answer's format (grpo_train.verifier.extract_answer)."""
    kind = problem.get("kind", "math")
    _, source = extract_answer(completion, kind if kind in DATASETS else "math")
    return float(source == "boxed" or (kind == "gsm8k" and source == "hash"))


_THINK = re.compile(r"\s*(?:<think>)?(?P<thought>.*?)</think>(?P<answer>.*)", re.DOTALL)
_ANSWER_TAG = re.compile(r"\s*<answer>(?P<inside>.*?)</answer>\s*", re.DOTALL)
_BOXED = re.compile(r"\\boxed\s*\{\s*[^\s}]")


def _check_think_format(answer: str = "boxed") -> None:
    if answer not in ("boxed", "tag", "any"):
        raise ValueError(f"think_format: answer must be boxed, tag or any, got {answer!r}")


def think_format(completion: str, problem: dict, num_tokens: int, truncated: bool, *, answer: str = "boxed") -> float:
    """1.0 for a completion that is one <think>...</think> block with some thought in it, then the answer;
    else 0.0. The opening <think> may be missing (a prompt that ends with it, as R1-style prompts do).

    answer: "boxed" (the text after </think> holds a non-empty \\boxed{...}), "tag" (the text after </think>
    is exactly one <answer>...</answer> with something inside, as in DeepSeek-R1-Zero's and TinyZero's format)
    or "any" (some non-blank text follows).
    """
    _check_think_format(answer)
    match = _THINK.fullmatch(completion)
    if not match or not match["thought"].strip() or "<think>" in match["thought"] or "think>" in match["answer"]:
        return 0.0
    tail = match["answer"]
    if answer == "boxed":
        return float(_BOXED.search(tail) is not None)
    if answer == "tag":
        tagged = _ANSWER_TAG.fullmatch(tail)
        return float(tagged is not None and bool(tagged["inside"].strip()) and "<answer>" not in tagged["inside"])
    return float(bool(tail.strip()))


def _check_overlong_penalty(max_len: int, cache: int) -> None:
    if not 0 < cache <= max_len:
        raise ValueError(f"overlong_penalty: needs 0 < cache <= max_len, got cache={cache} max_len={max_len}")


def overlong_penalty(completion: str, problem: dict, num_tokens: int, truncated: bool, *, max_len: int,
                     cache: int) -> float:
    """DAPO's soft overlong punishment (Yu et al., 2025, "DAPO", eq. 13), with L_max = max_len and
    L_cache = cache, for a completion of |y| = num_tokens tokens:

        R_length(y) = 0                              if |y| <= L_max - L_cache
                      ((L_max - L_cache) - |y|) / L_cache   if L_max - L_cache < |y| <= L_max
                      -1                             if |y| > L_max

    Set max_len to rollout.max_tokens (a completion cannot be longer): the penalty then grows linearly over
    the last `cache` tokens and a truncated completion gets -1. DAPO used L_max = 20480, L_cache = 4096.
    """
    _check_overlong_penalty(max_len, cache)
    free = max_len - cache
    if num_tokens <= free:
        return 0.0
    if num_tokens <= max_len:
        return (free - num_tokens) / cache
    return -1.0


def _check_length_penalty(max_len: int, free: int = 0, unit: str = "tokens") -> None:
    if not 0 <= free < max_len or unit not in ("tokens", "chars"):
        raise ValueError(f"length_penalty: needs 0 <= free < max_len and unit tokens or chars, got free={free} "
                         f"max_len={max_len} unit={unit!r}")


def length_penalty(completion: str, problem: dict, num_tokens: int, truncated: bool, *, max_len: int,
                   free: int = 0, unit: str = "tokens") -> float:
    """-(length - free) / (max_len - free), clipped to [-1, 0]: 0 up to `free`, then linearly down to -1 at
    max_len. A pull towards short completions at every length, where overlong_penalty acts only near the cap;
    with a small weight it breaks ties between equally correct answers in favour of the shorter. The length is
    num_tokens, or with unit="chars" the completion's characters (which differ between completions of the same
    token count: a random model that never stops still gets different rewards, as configs/tiny-cpu.yaml uses)."""
    _check_length_penalty(max_len, free, unit)
    length = num_tokens if unit == "tokens" else len(completion)
    return -min(1.0, max(0, length - free) / (max_len - free))


# The config calls these with an entry's kwargs (grpo_train.rewards.user_code.check_call), so that a value the function
# cannot use is a config error before the run starts rather than status `error` on every call.
think_format.check_kwargs = _check_think_format
overlong_penalty.check_kwargs = _check_overlong_penalty
length_penalty.check_kwargs = _check_length_penalty
