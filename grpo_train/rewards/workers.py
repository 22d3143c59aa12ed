"""Scores batches of responses in worker processes, with a hard per-item timeout.

    with VerifierPool(num_workers=2, timeout_s=5.0, functions=reward_functions(cfg.reward)) as pool:  # once
        scored = pool.score_batch(items, accuracy_weight=1.0)       # every step
    metrics = status_counts(scored)                                 # ok / no_answer / timeout / error
    sums = function_sums(scored, pool.functions, "reward/fn/")      # each reward function's mean and statuses
    failed = function_failures(scored, pool.functions)              # (error or timeout, calls) per function

    scored = score_batch(items, timeout_s=5.0, num_workers=2)       # one-off: starts and stops workers

Each item is scored by up to 1 + len(functions) calls, each a job of its own with its own timeout: the
verifier's judgement of the answer against the gold one (not for items of kind "none"), and every reward
function of grpo_train.rewards (the user's `reward.functions` and the built-ins), which the workers import by
their `module:function` text. A function's call that raises, returns something other than a number or None,
or runs out of time is that function's status `error` / `timeout` for that item and adds 0 to its reward.

Why processes: SymPy can run for minutes inside C code that no signal interrupts, and Math-Verify's
signal timeouts only work in a main thread. Each worker scores items in its own main thread under a
SIGALRM timer set to 80% of the timeout (status "timeout", worker kept). If an item still outlives the
full timeout, the parent kills the worker, marks that item "timeout", starts a new worker and requeues
the rest of the dead worker's items. A worker that dies on its own (segfault, OOM kill) marks its item
"error" the same way. The batch always completes, in input order.

Dispatch: items go out in chunks (at most two queued per worker) and a chunk's results come back in
one message. Which item a worker is on, the parent reads from an 8-byte slot of memory it shares with
the worker (the worker writes the item's index before starting it): one message per result cost the
workers and the parent more than a GSM8K item's scoring itself.

Workers are fresh interpreters (`python -c`) talking over a socket pair: not forked (forking a trainer
that holds vLLM/torch threads is unsafe) and not multiprocessing-spawned (spawn re-imports the parent's
__main__, i.e. the trainer with torch and vLLM, in every worker).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

from grpo_train.rewards.functions import RewardFunction, as_reward
from grpo_train.rewards.user_code import UserCodeError, load_function, raised_at
from grpo_train.verifier import (
    ItemTimeout,
    Judgement,
    judge_with_timeout,
    keep_timeout_handler,
    raise_item_timeout,
    warm_up,
)
from grpo_train.verifier.rules import RULE_NAMES

SOFT_TIMEOUT_FRACTION = 0.8  # the in-worker timer fires first, so most timeouts cost no restart
STARTUP_TIMEOUT_S = 300.0  # importing SymPy + Math-Verify on a loaded machine
PROGRESS_CHECKS_PER_TIMEOUT = 4  # how often the parent looks at a busy worker's slot: a hang costs <= 1.25 x timeout
_READY = "ready"


JUDGE = -1  # the part of an item that the verifier scores; parts 0, 1, ... are the reward functions


class VerifyItem(NamedTuple):
    response: str
    gold: str  # GSM8K: text after "####"; MATH: the answer field or a solution with \boxed{}
    dataset: str  # "gsm8k" or "math"; "none": only the reward functions score it
    problem: str | None = None  # lets the verifier reject answers that echo the question
    record: dict | None = None  # the problem's record for reward functions (Problem.record())
    num_tokens: int = 0  # the completion's length in tokens
    truncated: bool = False  # cut off at the length cap


class FunctionScore(NamedTuple):
    reward: float  # weight * value; 0 unless status is "ok"
    value: float | None  # what the function returned (None: no answer, error or timeout)
    status: str  # "ok", "no_answer" (it returned None), "timeout" or "error"
    error: str | None = None  # the exception or the bad return value, when status is "error"


@dataclass(frozen=True)
class ScoredItem:
    correct: bool  # the verifier found the final answer equal to the gold one
    accuracy_reward: float  # accuracy_weight when correct, else 0
    answer: str | None  # the extracted final answer; None for no_answer / timeout / error / unchecked
    status: str  # the verifier's: "ok", "no_answer", "timeout", "error", or "unchecked" (kind none)
    error: str | None = None  # the exception, when status is "error"
    functions: tuple[FunctionScore, ...] = ()  # one per reward function, in the pool's order
    rule: str | None = None  # the verifier's rule that refused the answer (verifier/rules.py); None when not refused

    @property
    def reward(self) -> float:
        return self.accuracy_reward + sum(f.reward for f in self.functions)


def status_counts(scored: Iterable[ScoredItem]) -> dict[str, int]:
    """{"ok": n, "no_answer": n, "timeout": n, "error": n} for the training metrics."""
    counts = Counter(item.status for item in scored)
    return {status: counts[status] for status in ("ok", "no_answer", "timeout", "error")}


def veto_counts(rules: Iterable[str | None]) -> dict[str, int]:
    """{rule: n} for every rule of the verifier (verifier/rules.py's RULES, in their order) from the items' `rule`:
    how many it refused. Every name, refused or not, so that each rank logs the same keys."""
    counts = Counter(rules)
    return {name: counts[name] for name in RULE_NAMES}


def function_sums(scores: Sequence[tuple[FunctionScore, ...]], functions: Sequence[RewardFunction],
                  prefix: str) -> dict[str, tuple[float, int]]:
    """(sum, count) per metric, for grpo_train.distributed.global_means, from each item's `functions` scores: for each
    function, prefix + name is the mean value it returned, before its weight (items without a number count 0:
    weight times this is its share of the mean reward; a weight-0 entry is a metric only), and prefix + name +
    "/no_answer", "/error" and "/timeout" the fractions of the items where it returned None, failed, or ran
    out of time."""
    sums: dict[str, tuple[float, int]] = {}
    for j, fn in enumerate(functions):
        column = [item[j] for item in scores]
        sums[prefix + fn.name] = (sum(f.value for f in column if f.status == "ok"), len(column))
        for status in ("no_answer", "error", "timeout"):
            sums[f"{prefix}{fn.name}/{status}"] = (sum(f.status == status for f in column), len(column))
    return sums


def function_failures(scores: Sequence[tuple[FunctionScore, ...]],
                      functions: Sequence[RewardFunction]) -> dict[str, tuple[int, int]]:
    """{name: (calls that failed, calls)} for global_means: a failure is status error or timeout."""
    return {fn.name: (sum(item[j].status in ("error", "timeout") for item in scores), len(scores))
            for j, fn in enumerate(functions)}


def function_values(scores: tuple[FunctionScore, ...], functions: Sequence[RewardFunction]) -> dict[str, Any]:
    """{name: what the function returned} for one item; the status instead where it returned no number."""
    return {fn.name: f.value if f.status == "ok" else f.status for fn, f in zip(functions, scores, strict=True)}


def function_errors(scores: Sequence[tuple[FunctionScore, ...]], functions: Sequence[RewardFunction]) -> dict[str, str]:
    """{name: the first error or timeout} for each function that failed on some item."""
    failures: dict[str, str] = {}
    for item in scores:
        for fn, score in zip(functions, item, strict=True):
            if score.status in ("error", "timeout") and fn.name not in failures:
                failures[fn.name] = f"{score.status}: {score.error}"
    return failures


# ----------------------------------------------------------------------------------------------------
# The slot a worker writes its current job's index to, and the parent reads


IDLE = -1  # between chunks
_INDEX = struct.Struct("q")  # one aligned 8-byte word: written and read whole


class _ProgressSlot:
    """8 bytes of memory shared by the parent and one worker, through a file descriptor the worker
    inherits (an anonymous memfd on Linux, an unlinked temporary file elsewhere)."""

    def __init__(self, fd: int | None = None) -> None:
        if fd is None:
            fd = os.memfd_create("grpo-verifier-progress") if hasattr(os, "memfd_create") else _unlinked_file()
            os.ftruncate(fd, _INDEX.size)
        self.fd = fd
        self._memory = mmap.mmap(fd, _INDEX.size)
        self.write(IDLE)

    def write(self, index: int) -> None:
        _INDEX.pack_into(self._memory, 0, index)

    def read(self) -> int:
        return _INDEX.unpack_from(self._memory, 0)[0]

    def close(self) -> None:
        self._memory.close()
        with contextlib.suppress(OSError):
            os.close(self.fd)


def _unlinked_file() -> int:
    with tempfile.TemporaryFile() as file:
        return os.dup(file.fileno())


# ----------------------------------------------------------------------------------------------------
# Worker process


def _serve(fd: int, progress_fd: int) -> None:
    """The worker's main loop (run by `python -c`): scores chunks until it receives None.

    A parent that exits without saying goodbye (an error, a kill) closes the socket: the worker then
    ends quietly instead of printing a traceback under the parent's own error message.
    """
    try:
        _serve_until_closed(Connection(fd), _ProgressSlot(progress_fd))
    except (EOFError, ConnectionResetError, BrokenPipeError):
        return


def _serve_until_closed(conn: Connection, progress: _ProgressSlot) -> None:
    sys.path[:0] = [path for path in conn.recv() if path not in sys.path]  # the parent's, for judge_fn
    soft_timeout_s, judge_fn, functions = conn.recv()
    # Math-Verify warns that its own timeouts are off: this process times each item itself.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    loaded = [_load(fn) for fn in functions]
    warm_up()
    keep_timeout_handler()
    conn.send(_READY)
    while (chunk := conn.recv()) is not None:
        results = []
        for index, part, args in chunk:
            progress.write(index)
            if part == JUDGE:
                results.append((index, *_judge(judge_fn, args, soft_timeout_s)))
            else:
                results.append((index, *_call(loaded[part], functions[part].kwargs, args, soft_timeout_s)))
        progress.write(IDLE)
        conn.send(results)


def _load(fn: RewardFunction) -> Callable[..., object] | str:
    """The function, or why it cannot be loaded here (the config check loaded it in the parent already)."""
    try:
        return load_function(fn.spec)
    except UserCodeError as err:
        return f"cannot load {fn.spec} in the verifier worker: {err}"


def _judge(judge_fn: Callable[..., Judgement], args: tuple, timeout_s: float) -> tuple:
    """(status, error, (correct, answer, rule)) of the verifier's judgement."""
    try:
        verdict = judge_fn(*args, timeout_s=timeout_s)
    except Exception as exc:  # one bad item must not sink the batch; it is reported as "error"
        return "error", f"{type(exc).__name__}: {exc}"[:500], None
    return verdict.status, verdict.error, (verdict.correct, verdict.answer, verdict.rule)


def _call(fn: Callable[..., object] | str, kwargs: dict, args: tuple, timeout_s: float) -> tuple:
    """(status, error, value) of one reward function call under a SIGALRM timer (as judge_with_timeout)."""
    if isinstance(fn, str):
        return "error", fn, None
    try:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout_s, 0.25)  # re-fires in case the function swallows it
            returned = fn(*args, **kwargs)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
        value = as_reward(returned)
    except ItemTimeout:
        # timeout_s is the worker's own timer, SOFT_TIMEOUT_FRACTION of the configured one: say both.
        configured = timeout_s / SOFT_TIMEOUT_FRACTION
        timer = f"the worker's timer, {SOFT_TIMEOUT_FRACTION:.0%} of reward.timeout_s = {configured:g} s"
        return "timeout", f"still running at {timeout_s:g} s ({timer})", None
    except Exception as exc:  # the user's code: reported per item, never fatal, with where it raised
        return "error", f"{type(exc).__name__}: {str(exc)[:500]} (raised at {raised_at(fn, exc)})", None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)  # also when the alarm hit between the call and the inner finally
        signal.signal(signal.SIGALRM, raise_item_timeout)  # the worker's handler, whatever the user's code set
    return ("no_answer" if value is None else "ok"), None, value


# ----------------------------------------------------------------------------------------------------
# Parent side


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection
    progress: _ProgressSlot
    ready: bool = False
    inflight: deque[int] = field(default_factory=deque)  # job indices sent and not yet reported, in run order
    running: int = IDLE  # the slot's value when the parent last looked
    progress_at: float = 0.0  # when the parent saw the worker start its current job (or report a chunk)
    started_at: float = field(default_factory=time.monotonic)


class VerifierPool:
    """Long-lived verifier workers; `score_batch` may be called any number of times, then `close`."""

    def __init__(
        self,
        num_workers: int = 2,
        timeout_s: float = 5.0,
        chunk_size: int = 16,
        judge_fn: Callable[..., Judgement] = judge_with_timeout,
        functions: Sequence[RewardFunction] = (),
    ) -> None:
        """judge_fn(response, gold, dataset, problem, timeout_s=...) runs on each item in the workers;
        it must be importable by name (tests pass one that hangs or crashes). `functions`: the reward
        functions every item is also scored by (grpo_train.rewards.reward_functions of the config)."""
        if num_workers < 1 or timeout_s <= 0 or chunk_size < 1:
            raise ValueError("num_workers >= 1, timeout_s > 0 and chunk_size >= 1 are required")
        self.timeout_s = timeout_s
        self.chunk_size = chunk_size
        self.judge_fn = judge_fn
        self.functions = list(functions)
        self.restarts = 0  # workers replaced after a timeout or a crash, over the pool's life
        self._workers = [self._start_worker() for _ in range(num_workers)]

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_worker(self) -> _Worker:
        parent_end, child_end = socket.socketpair()
        progress = _ProgressSlot()
        paths = [path or os.getcwd() for path in sys.path]
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                # A Ctrl-C reaches the whole process group: the worker ignores it (no traceback of its own) and
                # ends when the trainer closes the pool or exits (its socket closes). So do SIGTERM and SIGUSR1,
                # which torchrun and Slurm send the whole group too: the trainer may finish its step on them
                # (grpo_train/preemption.py).
                "import signal; [signal.signal(s, signal.SIG_IGN) for s in "
                "(signal.SIGINT, signal.SIGTERM, signal.SIGUSR1)]; "
                f"from grpo_train.rewards.workers import _serve; _serve({child_end.fileno()}, {progress.fd})",
            ],
            pass_fds=[child_end.fileno(), progress.fd],
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        )
        child_end.close()  # the worker holds the only copy: its death reads as EOF here
        conn = Connection(parent_end.detach())
        conn.send(paths)
        conn.send((self.timeout_s * SOFT_TIMEOUT_FRACTION, self.judge_fn, self.functions))
        return _Worker(process, conn, progress)

    def wait_until_ready(self) -> None:
        """Blocks until every worker has started (a benchmark times the warm pool, as a training step sees it)."""
        while starting := [w for w in self._workers if not w.ready]:
            wait([w.conn for w in starting], timeout=1.0)
            for slot, worker in enumerate(self._workers):
                self._collect(slot, worker, [], deque())

    def score_batch(
        self,
        items: Sequence[VerifyItem | tuple],
        *,
        accuracy_weight: float = 1.0,
    ) -> list[ScoredItem]:
        """Scores VerifyItems (or tuples of their fields); the result list is in input order."""
        if not self._workers:
            raise RuntimeError("the verifier pool is closed")
        verify_items = [VerifyItem(*item) for item in items]
        jobs = self._jobs(verify_items)
        messages: list[tuple | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        chunk = max(1, min(self.chunk_size, len(jobs) // (4 * len(self._workers))))
        while pending or any(w.inflight for w in self._workers):
            self._dispatch(pending, jobs, chunk)
            busy = [w for w in self._workers if w.inflight or not w.ready]
            wait([w.conn for w in busy], timeout=self._seconds_to_next_check(busy))
            for slot, worker in enumerate(self._workers):
                self._collect(slot, worker, messages, pending)
        return self._assemble(verify_items, jobs, messages, accuracy_weight)

    def _jobs(self, items: list[VerifyItem]) -> list[tuple[int, int, tuple]]:
        """(item index, part, arguments) for every call: the judgement (JUDGE), then each function (0, 1, ...)."""
        jobs = []
        for i, item in enumerate(items):
            if item.dataset != "none":
                jobs.append((i, JUDGE, (item.response, item.gold, item.dataset, item.problem)))
            record = item.record if item.record is not None else {
                "question": item.problem or "", "gold": item.gold, "kind": item.dataset}
            jobs += [(i, j, (item.response, record, item.num_tokens, item.truncated))
                     for j in range(len(self.functions))]
        return jobs

    def _assemble(self, items: list[VerifyItem], jobs: list[tuple[int, int, tuple]], messages: list,
                  accuracy_weight: float) -> list[ScoredItem]:
        """One ScoredItem per item from its jobs' (job index, status, error, result) messages."""
        judged: dict[int, tuple] = {}
        calls: list[list[FunctionScore]] = [[] for _ in items]
        for (i, part, _), (_, status, error, result) in zip(jobs, messages, strict=True):
            if part == JUDGE:
                judged[i] = (status, error, result)
                continue
            weight = self.functions[part].weight
            reward = weight * result if status == "ok" else 0.0
            calls[i].append(FunctionScore(reward, result, status, error))
        scored = []
        for i in range(len(items)):
            status, error, result = judged.get(i, ("unchecked", None, None))
            correct, answer, rule = result if result is not None else (False, None, None)
            scored.append(ScoredItem(correct, accuracy_weight * correct, answer, status, error, tuple(calls[i]), rule))
        return scored

    def _dispatch(self, pending: deque[int], jobs: list[tuple[int, int, tuple]], chunk: int) -> None:
        # Smaller chunks and queues near the end of the batch, so that no worker idles while another still
        # holds a full queue.
        chunk = max(1, min(chunk, len(pending) // (2 * len(self._workers))))
        for slot, worker in enumerate(self._workers):
            while pending and worker.ready and len(worker.inflight) < 2 * chunk:
                indices = [pending.popleft() for _ in range(min(chunk, len(pending)))]
                try:
                    worker.conn.send([(index, *jobs[index][1:]) for index in indices])
                except OSError:  # died while idle: requeue and start a fresh worker
                    pending.extendleft(reversed(indices))
                    self._replace(slot, worker)
                    break
                if not worker.inflight:
                    worker.progress_at = time.monotonic()
                worker.inflight.extend(indices)

    def _seconds_to_next_check(self, busy: list[_Worker]) -> float:
        """Until the first busy worker's deadline, or the next look at the progress slots if sooner."""
        now = time.monotonic()
        deadlines = [w.progress_at + self.timeout_s for w in busy if w.ready]
        until_deadline = min(deadlines, default=now + 1.0) - now
        return max(0.0, min(until_deadline, self.timeout_s / PROGRESS_CHECKS_PER_TIMEOUT))

    def _collect(self, slot: int, worker: _Worker, messages: list[tuple | None], pending: deque[int]) -> None:
        """Reads the worker's finished items; replaces it if it died or overran the timeout."""
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                worker.progress_at = time.monotonic()
                if message == _READY:
                    worker.ready = True
                    continue
                for result in message:  # one chunk's results, in the order its jobs were sent
                    messages[result[0]] = result
                    worker.inflight.popleft()
        except (EOFError, OSError):
            self._fail_current(slot, worker, messages, pending, "error", "verifier worker died")
            return
        now = time.monotonic()
        if worker.ready and worker.inflight and (running := worker.progress.read()) != worker.running:
            worker.running, worker.progress_at = running, now  # started another job since the last look
        elif worker.ready and worker.inflight and now - worker.progress_at > self.timeout_s:
            self._fail_current(slot, worker, messages, pending, "timeout", None)
        elif not worker.ready and now - worker.started_at > STARTUP_TIMEOUT_S:
            raise RuntimeError(f"verifier worker did not start within {STARTUP_TIMEOUT_S:.0f} s")

    def _fail_current(
        self,
        slot: int,
        worker: _Worker,
        messages: list[tuple | None],
        pending: deque[int],
        status: str,
        error: str | None,
    ) -> None:
        if not worker.ready:
            raise RuntimeError(f"verifier worker exited during start-up (exit code {worker.process.poll()})")
        if worker.inflight:
            # The job the worker was on takes the blame; the rest of its queue, including jobs it finished
            # but had not reported yet (they come back a chunk at a time), is scored again by its successor.
            running = worker.progress.read()
            index = running if running in worker.inflight else worker.inflight[0]
            messages[index] = (index, status, error, None)
            pending.extendleft(reversed([i for i in worker.inflight if i != index]))
        self._replace(slot, worker)

    def _replace(self, slot: int, worker: _Worker) -> None:
        _stop(worker, graceful=False)
        self._workers[slot] = self._start_worker()
        self.restarts += 1

    def close(self) -> None:
        """Stops the workers (idempotent)."""
        for worker in self._workers:
            _stop(worker, graceful=True)
        self._workers = []


def _stop(worker: _Worker, graceful: bool) -> None:
    if graceful and worker.process.poll() is None:
        with contextlib.suppress(OSError):  # already gone: nothing to tell it
            worker.conn.send(None)
        with contextlib.suppress(subprocess.TimeoutExpired):  # then it is killed below
            worker.process.wait(timeout=2.0)
    if worker.process.poll() is None:
        worker.process.kill()
    worker.process.wait(timeout=5.0)
    worker.conn.close()
    worker.progress.close()


def score_batch(
    items: Sequence[VerifyItem | tuple],
    *,
    timeout_s: float = 5.0,
    num_workers: int = 2,
    accuracy_weight: float = 1.0,
    functions: Sequence[RewardFunction] = (),
) -> list[ScoredItem]:
    """One-off scoring: starts `num_workers` processes, scores, stops them. Training keeps a VerifierPool."""
    with VerifierPool(num_workers=num_workers, timeout_s=timeout_s, functions=functions) as pool:
        return pool.score_batch(items, accuracy_weight=accuracy_weight)
