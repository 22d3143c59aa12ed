"""The verifier's entry points for GSM8K and MATH answers: extract -> normalise -> compare -> score.

    judge(response, gold, "math", problem)    # -> Judgement(correct, formatted, answer, status, error, rule)
    judge_with_timeout(response, gold, "gsm8k", problem, timeout_s=5.0)   # judge under a per-item timer
    is_correct(response, gold, "gsm8k")       # -> bool: judge_with_timeout(...).correct

`judge` checks the gold first (one that cannot be scored, such as an empty or placeholder gold or one that divides by
zero, gives status "error" naming why, for every response), then extracts the response's final answer (extract.py;
none: status "no_answer") and compares it with the gold (compare.py; status "ok"). Judgement.rule names the rule that
refused a response scored 0: rules.py lists every rule in the order they run, each with a one-line statement and an
example each way, and docs/verifier.md states them in full (its rule list is generated from rules.py). Pass the
problem text, as training and evaluation always do: the answer-form and echo rules need it. Format reward
(Judgement.formatted): the answer was in \\boxed{} (GSM8K: or "#### N").

Model text is never `eval`-ed or `sympify`-ed: only Math-Verify's LaTeX parser sees it, and an answer SymPy could
spend seconds on is compared as text only (form.py's too_big). Math-Verify's own SIGALRM timeouts are off (they fail
outside a main thread); `judge_with_timeout` sets one timer per item instead (main thread only; elsewhere it runs
untimed), and the pool of grpo_train.rewards.workers, which scores batches in worker processes, kills a worker that
overruns anyway (C code ignores signals): the timer is a last resort, not the bound.
"""

from __future__ import annotations

import functools
import re
import signal
import threading
from dataclasses import dataclass

from grpo_train.verifier.compare import UnreadableGold, answers_match, refusing_rule, warm_up
from grpo_train.verifier.extract import extract_answer, extract_with_rule, gold_answer
from grpo_train.verifier.form import exact_value
from grpo_train.verifier.text import TEXT_WRAP, as_number, clean, forget, gsm8k_number, strip_wrappers, visible

__all__ = ["DATASETS", "Judgement", "answers_match", "extract_answer", "is_correct", "judge", "judge_with_timeout",
           "warm_up"]  # fmt: skip

DATASETS = ("gsm8k", "math")
_STRUCTURE = re.compile(r"\\(?:[dtc]?frac|sqrt|text\w*|math\w*|left|right|boxed|fbox|begin|end|cdot|times|div)\b")
_PLACEHOLDER = re.compile(
    r"[(\[<{]*\s*(?:n\s*[/.]?\s*a\.?|none|null|[-+]?nan|\?+|tbd|todo|unknown|[-–—]+|\.\.\.|\\[lcv]?dots|error|invalid|x{2,}"
    # a spreadsheet's error value, a blank to fill in, an empty box drawn as a symbol
    r"|\#(?:n/?a|value!|div/0!|ref!|name\?|num!|null!)|fill[\s_-]*in(?:[\s_-]*the[\s_-]*blank)?|insert[\s_]+(?:the[\s_]+|your[\s_]+)?answer"
    r"|\\(?:square|blacksquare|Box|boxed\s*\{\s*\})"
    r"|not\s+(?:applicable|available|given|known)|unanswerable"
    r"|(?:your[\s_]+|final[\s_]+|the[\s_]+|no[\s_]+)?(?:answer|ans|gold|result)(?:[\s_]+here)?|placeholder|missing|blank|empty)"
    r"\s*[)\]>}]*\.?",
    re.IGNORECASE,
)
# Golds with a part missing: "\\frac{}{3}", "\\sqrt{}", "x^{}", "^2", "x =", "= 5", "(1,)", "(, 2)".
_EMPTY_ARGUMENT = re.compile(
    r"\\(?:[dt]?frac|sqrt|[dt]?binom)\s*(?:\{[^{}]*\}\s*)?\{\s*\}|[\^_]\s*(?:\{\s*\}|$)|^\s*[\^_]"
    r"|(?:^|[(\[{]|\\\{)\s*,|,\s*(?:$|[)\]}]|\\\}|\\right)|,\s*,"
)
# "<|endoftext|>", "<unk>", "[MASK]": a chat template's or a tokenizer's special token, not an answer
_CHAT_MARKUP = re.compile(
    r"<\|[^|>]{1,40}\|>|</?s>|<(?:mask|unk|pad|eos|bos|cls|sep)>|\[(?:MASK|UNK|PAD|CLS|SEP|EOS|BOS)\]"
)
_TAGS = re.compile(r"</?[a-zA-Z][\w-]{0,20}>")  # "<answer></answer>" holds nothing
# A gold that divides by zero: "\\frac{1}{0}", "0/0".
_BY_ZERO = re.compile(r"\\[dt]?frac\s*(?:\{[^{}]*\}|\w)\s*(?:\{\s*0\s*\}|0(?!\d))|/\s*0(?![\d.])")
# ... or by a divisor that comes to zero: "1 \\div 0", "\\frac{1}{0.0}", "\\frac{1}{1-1}", "5/(1-1)".
_DIVISOR = re.compile(r"\\[dt]?frac\s*\{[^{}]*\}\s*\{([^{}]*)\}|(?:/|\\div)\s*(?:\(([^()]*)\)|\{([^{}]*)\}|(\d[\d.]*))")
_EMPTY_SIDE = re.compile(r"^\s*=|(?<![<>!\\])=\s*$")


@dataclass(frozen=True)
class Judgement:
    correct: bool  # the final answer equals the gold answer
    formatted: bool  # the answer was in \boxed{} (GSM8K: or "#### N")
    answer: str | None  # the extracted final answer as written; None when there is none
    status: str  # "ok", "no_answer", "timeout" or "error"
    error: str | None = None  # why it could not be scored (status "error" or "timeout")
    rule: str | None = None  # what refused the response (status "no_answer" or "ok" and not correct): a name of
    # verifier/rules.py's RULES ("not_found": no answer stated; "not_equal": another value); None otherwise


class ItemTimeout(BaseException):
    """Raised by the per-item timer; a BaseException so that a library's `except Exception` cannot eat it."""


def raise_item_timeout(signum: int, frame: object) -> None:
    """The SIGALRM handler of the per-item timers."""
    raise ItemTimeout


_handler_kept = False  # raise_item_timeout is the SIGALRM handler for the process's life (a verifier worker)


def keep_timeout_handler() -> None:
    """For a process that only scores (a verifier worker): installs raise_item_timeout once, so that each
    item's timer only sets and clears an itimer (swapping handlers around every item costs a fifth of a fast
    item's time). Whoever runs other code in the process must reinstall it afterwards (the pool's reward calls
    do)."""
    global _handler_kept
    signal.signal(signal.SIGALRM, raise_item_timeout)
    _handler_kept = True


@functools.lru_cache(maxsize=4096)
def _gold(gold: str, dataset: str) -> tuple[str, str | None]:
    """The gold answer to compare with, and why it cannot be scored (None when it can)."""
    if not gold.strip():
        return "", "empty gold answer"
    text, problem = gold_answer(visible(gold), dataset)
    if problem is not None:
        return "", f"gold {gold!r}: {problem}"
    stripped = strip_wrappers(text)
    if not _TAGS.sub("", TEXT_WRAP.sub(r"\1", stripped)).strip():
        return "", f"gold {gold!r} is empty once its delimiters are removed"
    if _PLACEHOLDER.fullmatch(TEXT_WRAP.sub(r"\1", stripped).strip()):
        return "", f"gold {gold!r} is a placeholder, not an answer"
    if not re.search(r"[0-9A-Za-z]", _STRUCTURE.sub("", stripped)):
        return "", f"gold {gold!r} holds no value"  # "\\frac{}{}", "\\sqrt{}"
    if _unbalanced(text) or _unbalanced(gold):
        return "", f"gold {gold!r} has unbalanced braces or brackets"
    if _CHAT_MARKUP.search(text):
        return "", f"gold {gold!r} holds a chat template's token"
    if _EMPTY_ARGUMENT.search(stripped) or _EMPTY_SIDE.search(stripped):
        return "", f"gold {gold!r} has an empty part (a fraction, root, exponent or side of an equation)"
    if _BY_ZERO.search(stripped) or any(exact_value(_first(m)) == 0 for m in _DIVISOR.finditer(stripped)):
        return "", f"gold {gold!r} divides by zero"
    if dataset == "gsm8k" and as_number(clean(text)) is None and gsm8k_number(text) is None:
        return "", f"GSM8K gold {gold!r} is not a number"
    return text, None


def _first(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group is not None)


def _unbalanced(latex: str) -> bool:
    unescaped = re.sub(r"\\.", "", latex)
    left, right = (len(re.findall(rf"\\{side}(?![a-zA-Z])", latex)) for side in ("left", "right"))
    return unescaped.count("{") != unescaped.count("}") or left != right  # "(2, 5]" is fine, "\left( 3" is not


def judge(response: str, gold: str, dataset: str, problem: str | None = None) -> Judgement:
    """Scores one response against the gold answer, without a time limit (see judge_with_timeout)."""
    if dataset not in DATASETS:
        raise ValueError(f"dataset must be one of {DATASETS}, got {dataset!r}")
    forget()  # the per-item memo of the text functions
    gold_text, gold_error = _gold(gold, dataset)
    if gold_error is not None:
        return Judgement(False, False, None, "error", gold_error)  # a data bug, made visible
    answer, source, rule = extract_with_rule(visible(response), dataset, problem)
    if answer is None:
        return Judgement(False, False, None, "no_answer", rule=rule)
    formatted = source == "boxed" or (dataset == "gsm8k" and source == "hash")
    try:
        rule = refusing_rule(answer, gold_text, dataset, response, problem)
    except UnreadableGold:  # found when an answer first needs the gold parsed
        return Judgement(False, False, answer, "error", f"gold {gold!r} cannot be parsed")
    return Judgement(rule is None, formatted, answer, "ok", rule=rule)


def judge_with_timeout(
    response: str, gold: str, dataset: str, problem: str | None = None, timeout_s: float = 5.0
) -> Judgement:
    """`judge` under a SIGALRM timer (status "timeout" when it fires). Signals only work in a main
    thread; elsewhere this runs untimed. The timer re-fires every 0.25 s in case a library swallows it."""
    if threading.current_thread() is not threading.main_thread():
        return judge(response, gold, dataset, problem)
    previous = raise_item_timeout if _handler_kept else signal.signal(signal.SIGALRM, raise_item_timeout)
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s, 0.25)
            return judge(response, gold, dataset, problem)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)  # first thing: no alarm fires after this line
    except ItemTimeout:
        return Judgement(False, False, None, "timeout", f"over {timeout_s:g} s")
    finally:
        if previous is not raise_item_timeout:
            signal.signal(signal.SIGALRM, previous)


def is_correct(
    response: str, gold: str, dataset: str, problem: str | None = None, *, timeout_s: float = 5.0
) -> bool:
    """True when the response's final answer equals the gold answer of a GSM8K or MATH item
    (`dataset` "gsm8k" or "math"; `problem` lets echoes of the question be rejected)."""
    return judge_with_timeout(response, gold, dataset, problem, timeout_s).correct
