"""Scores batches of responses in worker processes, with a hard per-item timeout.

    with VerifierPool(num_workers=2, timeout_s=5.0) as pool:       # once per run: workers live on
        scored = pool.score_batch(items, accuracy_weight=1.0, format_weight=0.1)   # every step
    metrics = status_counts(scored)                                 # ok / no_answer / timeout / error

    scored = score_batch(items, timeout_s=5.0, num_workers=2)       # one-off: starts and stops workers

Why processes: SymPy can run for minutes inside C code that no signal interrupts, and Math-Verify's
signal timeouts only work in a main thread. Each worker scores items in its own main thread under a
SIGALRM timer set to 80% of the timeout (status "timeout", worker kept). If an item still outlives the
full timeout, the parent kills the worker, marks that item "timeout", starts a new worker and requeues
the rest of the dead worker's items. A worker that dies on its own (segfault, OOM kill) marks its item
"error" the same way. The batch always completes, in input order.

Dispatch: items go out in chunks (one message per chunk, at most two chunks queued per worker) and
every result comes back as its own small message, so the parent knows which item each worker is on
and since when. Workers are fresh interpreters (`python -c`) talking over a socket pair: not forked
(forking a trainer that holds vLLM/torch threads is unsafe) and not multiprocessing-spawned (spawn
re-imports the parent's __main__, i.e. the trainer with torch and vLLM, in every worker).
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import subprocess
import sys
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from typing import NamedTuple

from grpo_train.verifier import Judgement, judge_with_timeout, warm_up

SOFT_TIMEOUT_FRACTION = 0.8  # the in-worker timer fires first, so most timeouts cost no restart
STARTUP_TIMEOUT_S = 300.0  # importing SymPy + Math-Verify on a loaded machine
_READY = "ready"


class VerifyItem(NamedTuple):
    response: str
    gold: str  # GSM8K: text after "####"; MATH: the answer field or a solution with \boxed{}
    dataset: str  # "gsm8k" or "math"
    problem: str | None = None  # lets the verifier reject answers that echo the question


@dataclass(frozen=True)
class ScoredItem:
    accuracy_reward: float  # accuracy_weight when the final answer is correct, else 0
    format_reward: float  # format_weight when the answer is in \boxed{} (GSM8K: or "#### N"), else 0
    answer: str | None  # the extracted final answer; None for no_answer / timeout / error
    status: str  # "ok", "no_answer", "timeout" or "error"
    error: str | None = None  # the exception, when status is "error"

    @property
    def reward(self) -> float:
        return self.accuracy_reward + self.format_reward


def status_counts(scored: Iterable[ScoredItem]) -> dict[str, int]:
    """{"ok": n, "no_answer": n, "timeout": n, "error": n} for the training metrics."""
    counts = Counter(item.status for item in scored)
    return {status: counts[status] for status in ("ok", "no_answer", "timeout", "error")}


# ----------------------------------------------------------------------------------------------------
# Worker process


def _serve(fd: int) -> None:
    """The worker's main loop (run by `python -c`): scores chunks until it receives None.

    A parent that exits without saying goodbye (an error, a kill) closes the socket: the worker then
    ends quietly instead of printing a traceback under the parent's own error message.
    """
    try:
        _serve_until_closed(Connection(fd))
    except (EOFError, ConnectionResetError, BrokenPipeError):
        return


def _serve_until_closed(conn: Connection) -> None:
    sys.path[:0] = [path for path in conn.recv() if path not in sys.path]  # the parent's, for judge_fn
    soft_timeout_s, judge_fn = conn.recv()
    # Math-Verify warns that its own timeouts are off: this process times each item itself.
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    warm_up()
    conn.send(_READY)
    while (chunk := conn.recv()) is not None:
        for index, item in chunk:
            try:
                verdict = judge_fn(*item, timeout_s=soft_timeout_s)
                message = (
                    index,
                    verdict.correct,
                    verdict.formatted,
                    verdict.answer,
                    verdict.status,
                    verdict.error,
                )
            except Exception as exc:  # one bad item must not sink the batch; it is reported as "error"
                message = (index, False, False, None, "error", f"{type(exc).__name__}: {exc}"[:500])
            conn.send(message)


# ----------------------------------------------------------------------------------------------------
# Parent side


@dataclass
class _Worker:
    process: subprocess.Popen
    conn: Connection
    ready: bool = False
    inflight: deque[int] = field(default_factory=deque)  # item indices sent, in the order they run
    progress_at: float = 0.0  # when the worker started its current item (as seen by the parent)
    started_at: float = field(default_factory=time.monotonic)


class VerifierPool:
    """Long-lived verifier workers; `score_batch` may be called any number of times, then `close`."""

    def __init__(
        self,
        num_workers: int = 2,
        timeout_s: float = 5.0,
        chunk_size: int = 16,
        judge_fn: Callable[..., Judgement] = judge_with_timeout,
    ) -> None:
        """judge_fn(response, gold, dataset, problem, timeout_s=...) runs on each item in the workers;
        it must be importable by name (tests pass one that hangs or crashes)."""
        if num_workers < 1 or timeout_s <= 0 or chunk_size < 1:
            raise ValueError("num_workers >= 1, timeout_s > 0 and chunk_size >= 1 are required")
        self.timeout_s = timeout_s
        self.chunk_size = chunk_size
        self.judge_fn = judge_fn
        self.restarts = 0  # workers replaced after a timeout or a crash, over the pool's life
        self._workers = [self._start_worker() for _ in range(num_workers)]

    def __enter__(self) -> VerifierPool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _start_worker(self) -> _Worker:
        parent_end, child_end = socket.socketpair()
        paths = [path or os.getcwd() for path in sys.path]
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from grpo_train.verifier_pool import _serve; _serve({child_end.fileno()})",
            ],
            pass_fds=[child_end.fileno()],
            stdin=subprocess.DEVNULL,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(paths)},
        )
        child_end.close()  # the worker holds the only copy: its death reads as EOF here
        conn = Connection(parent_end.detach())
        conn.send(paths)
        conn.send((self.timeout_s * SOFT_TIMEOUT_FRACTION, self.judge_fn))
        return _Worker(process, conn)

    def score_batch(
        self,
        items: Sequence[VerifyItem | tuple],
        *,
        accuracy_weight: float = 1.0,
        format_weight: float = 0.0,
    ) -> list[ScoredItem]:
        """Scores (response, gold, dataset[, problem]) items; the result list is in input order."""
        if not self._workers:
            raise RuntimeError("the verifier pool is closed")
        jobs = [VerifyItem(*item) for item in items]
        messages: list[tuple | None] = [None] * len(jobs)
        pending = deque(range(len(jobs)))
        chunk = max(1, min(self.chunk_size, len(jobs) // (4 * len(self._workers))))
        while pending or any(w.inflight for w in self._workers):
            self._dispatch(pending, jobs, chunk)
            busy = [w for w in self._workers if w.inflight or not w.ready]
            wait([w.conn for w in busy], timeout=self._seconds_to_next_deadline(busy))
            for slot, worker in enumerate(self._workers):
                self._collect(slot, worker, messages, pending)
        return [_to_scored(message, accuracy_weight, format_weight) for message in messages]

    def _dispatch(self, pending: deque[int], jobs: list[VerifyItem], chunk: int) -> None:
        for slot, worker in enumerate(self._workers):
            while pending and worker.ready and len(worker.inflight) < 2 * chunk:
                indices = [pending.popleft() for _ in range(min(chunk, len(pending)))]
                try:
                    worker.conn.send([(index, tuple(jobs[index])) for index in indices])
                except OSError:  # died while idle: requeue and start a fresh worker
                    pending.extendleft(reversed(indices))
                    self._replace(slot, worker)
                    break
                if not worker.inflight:
                    worker.progress_at = time.monotonic()
                worker.inflight.extend(indices)

    def _seconds_to_next_deadline(self, busy: list[_Worker]) -> float:
        now = time.monotonic()
        deadlines = [w.progress_at + self.timeout_s for w in busy if w.ready]
        return max(0.0, min(deadlines, default=now + 1.0) - now)

    def _collect(self, slot: int, worker: _Worker, messages: list[tuple | None], pending: deque[int]) -> None:
        """Reads the worker's finished items; replaces it if it died or overran the timeout."""
        try:
            while worker.conn.poll():
                message = worker.conn.recv()
                worker.progress_at = time.monotonic()
                if message == _READY:
                    worker.ready = True
                    continue
                messages[message[0]] = message
                worker.inflight.popleft()
        except (EOFError, OSError):
            self._fail_current(slot, worker, messages, pending, "error", "verifier worker died")
            return
        now = time.monotonic()
        if worker.ready and worker.inflight and now - worker.progress_at > self.timeout_s:
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
            index = worker.inflight.popleft()
            messages[index] = (index, False, False, None, status, error)
            pending.extendleft(reversed(worker.inflight))
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


def _to_scored(message: tuple, accuracy_weight: float, format_weight: float) -> ScoredItem:
    _, correct, formatted, answer, status, error = message
    return ScoredItem(accuracy_weight * correct, format_weight * formatted, answer, status, error)


def score_batch(
    items: Sequence[VerifyItem | tuple],
    *,
    timeout_s: float = 5.0,
    num_workers: int = 2,
    accuracy_weight: float = 1.0,
    format_weight: float = 0.0,
) -> list[ScoredItem]:
    """One-off scoring: starts `num_workers` processes, scores, stops them. Training keeps a VerifierPool."""
    with VerifierPool(num_workers=num_workers, timeout_s=timeout_s) as pool:
        return pool.score_batch(items, accuracy_weight=accuracy_weight, format_weight=format_weight)
