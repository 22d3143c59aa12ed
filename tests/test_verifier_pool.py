"""The verifier's process pool: order, weights, status counts, adversarial inputs, hard timeouts and
crashed workers. Real worker processes throughout (start-up is ~2-5 s per worker on 2 cores)."""

import os
import signal
import time

import pytest

from grpo_train.rewards import FORMAT_SPEC, RewardFunction
from grpo_train.rewards.workers import (
    FunctionScore,
    ScoredItem,
    VerifierPool,
    VerifyItem,
    score_batch,
    status_counts,
    veto_counts,
)
from grpo_train.verifier import judge_with_timeout
from grpo_train.verifier.rules import RULE_NAMES

FORMAT = RewardFunction("format", FORMAT_SPEC, 0.25, {})  # what reward.format_weight=0.25 runs


def hang_or_crash(response, gold, dataset, problem=None, timeout_s=5.0):
    """A judge for the workers that hangs without the soft timer, or kills its own process."""
    if response == "hang":
        time.sleep(3600)  # stands for SymPy stuck in C code, which no signal interrupts
    if response == "crash":
        os.kill(os.getpid(), signal.SIGKILL)  # stands for a segfault or the OOM killer
    return judge_with_timeout(response, gold, dataset, problem, timeout_s=timeout_s)


@pytest.fixture(scope="module")
def pool():
    with VerifierPool(num_workers=2, timeout_s=5.0, chunk_size=4, functions=[FORMAT]) as shared_pool:
        yield shared_pool


def test_results_keep_input_order_and_weights(pool):
    items = [
        VerifyItem("The answer is $\\boxed{42}$.", "42", "gsm8k"),  # right, boxed
        VerifyItem("The answer is 42.", "42", "gsm8k"),  # right, not in the format
        VerifyItem("#### 41", "42", "gsm8k"),  # wrong, in GSM8K's format
        ("I am not sure.", "42", "gsm8k"),  # a plain tuple works too
        VerifyItem("so $\\boxed{\\frac{3}{4}}$", "0.75", "math"),
    ] * 5
    scored = pool.score_batch(items, accuracy_weight=1.0)
    assert [s.reward for s in scored] == [1.25, 1.0, 0.25, 0.0, 1.25] * 5
    assert [s.correct for s in scored[:5]] == [True, True, False, False, True]
    assert [s.answer for s in scored[:5]] == ["42", "42", "41", None, "\\frac{3}{4}"]
    assert status_counts(scored) == {"ok": 20, "no_answer": 5, "timeout": 0, "error": 0}
    assert [s.rule for s in scored[:5]] == [None, None, "not_equal", "not_found", None]  # what refused each
    vetoes = veto_counts(s.rule for s in scored)
    assert list(vetoes) == list(RULE_NAMES) and vetoes["not_equal"] == vetoes["not_found"] == 5
    assert sum(vetoes.values()) == 10


def test_pool_is_reusable_across_batches(pool):
    for value in range(3):
        scored = pool.score_batch([VerifyItem(f"#### {value}", str(value), "gsm8k")])
        assert scored == [ScoredItem(True, 1.0, str(value), "ok", None, (FunctionScore(0.25, 1.0, "ok"),))]
    assert pool.score_batch([]) == []


def test_adversarial_batch_completes_in_time_without_side_effects(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # workers inherit the working directory: "touch pwned" would land here
    items = [
        VerifyItem("x" * 1_000_000 + " The answer is $\\boxed{5}$.", "5", "math"),
        VerifyItem("\\boxed{" + "{" * 10_000 + "7" + "}" * 10_000 + "}", "7", "math"),
        VerifyItem("The answer is \\boxed{7", "7", "math"),
        VerifyItem("$\\boxed{9^{9^{9^{9}}}}$", "9", "math"),
        VerifyItem("$\\boxed{10^{10^{10}}}$", "3", "math"),
        VerifyItem("$\\boxed{__import__('os').system('touch pwned')}$", "0", "math"),
        VerifyItem("\udcff\x00 \\boxed{\ufffd}", "1", "gsm8k"),
        VerifyItem("\\boxed{5}", "", "math"),
        VerifyItem("The answer is $\\boxed{5}$.", "5", "math"),
    ]
    start = time.perf_counter()
    scored = score_batch(items, timeout_s=3.0, num_workers=2)
    elapsed = time.perf_counter() - start
    assert [s.accuracy_reward for s in scored] == [1.0, 0, 0, 0, 0, 0, 0, 0, 1.0]
    assert [s.status for s in scored] == [
        "ok",
        "no_answer",
        "no_answer",
        "ok",
        "ok",
        "ok",
        "ok",
        "error",
        "ok",
    ]
    assert scored[7].error == "empty gold answer"
    assert elapsed < 60.0  # start-up of two workers plus well under the 3 s per item
    assert not (tmp_path / "pwned").exists()


def test_workers_outlive_the_stop_signals_that_reach_their_process_group(pool):
    """torchrun and Slurm send SIGTERM / SIGUSR1 (and a terminal SIGINT) to the trainer's whole process group; the
    trainer may finish its step on them (grpo_train/preemption.py), so its workers go on scoring: none restarted."""
    pool.wait_until_ready()
    restarts = pool.restarts
    for worker in pool._workers:
        for sig in (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT):
            os.kill(worker.process.pid, sig)
    time.sleep(0.5)  # a worker the signal ended would be gone by now
    assert all(worker.process.poll() is None for worker in pool._workers)
    scored = pool.score_batch([VerifyItem(f"#### {i}", str(i), "gsm8k") for i in range(8)])
    assert [s.status for s in scored] == ["ok"] * 8 and pool.restarts == restarts


def test_hung_and_crashed_workers_are_replaced_and_the_batch_completes():
    items = [VerifyItem(f"#### {i}", str(i), "gsm8k") for i in range(6)]
    items[1] = VerifyItem("hang", "1", "gsm8k")
    items[4] = VerifyItem("crash", "4", "gsm8k")
    with VerifierPool(num_workers=1, timeout_s=1.0, chunk_size=3, judge_fn=hang_or_crash) as pool:
        scored = pool.score_batch(items)
        assert [s.status for s in scored] == ["ok", "timeout", "ok", "ok", "error", "ok"]
        assert [s.accuracy_reward for s in scored] == [1.0, 0.0, 1.0, 1.0, 0.0, 1.0]
        assert scored[4].error == "verifier worker died"
        assert pool.restarts == 2
        # The replacement worker serves the next batch.
        assert pool.score_batch([VerifyItem("#### 9", "9", "gsm8k")])[0].accuracy_reward == 1.0


def test_the_job_a_worker_is_on_takes_the_blame_not_the_finished_ones_of_its_chunk():
    """Results come back a chunk at a time: when a worker hangs or dies on a chunk's last job, the jobs it
    finished before are not reported yet. The shared progress slot names the job it was on."""
    items = [VerifyItem(f"#### {i}", str(i), "gsm8k") for i in range(12)]
    items[2] = VerifyItem("hang", "2", "gsm8k")  # the first chunk is jobs 0, 1, 2
    items[5] = VerifyItem("crash", "5", "gsm8k")  # the second chunk is jobs 3, 4, 5
    with VerifierPool(num_workers=1, timeout_s=1.0, chunk_size=3, judge_fn=hang_or_crash) as pool:
        pool.wait_until_ready()
        scored = pool.score_batch(items)
    assert [s.status for s in scored] == ["ok"] * 2 + ["timeout"] + ["ok"] * 2 + ["error"] + ["ok"] * 6
    assert [s.accuracy_reward for s in scored] == [1.0] * 2 + [0.0] + [1.0] * 2 + [0.0] + [1.0] * 6
    assert pool.restarts == 2


def test_the_progress_slot_works_without_memfd(monkeypatch):
    """Where os.memfd_create is missing (macOS), the slot is an unlinked temporary file: same behaviour."""
    monkeypatch.delattr("os.memfd_create", raising=False)
    items = [VerifyItem(f"#### {i}", str(i), "gsm8k") for i in range(6)]
    items[4] = VerifyItem("hang", "4", "gsm8k")
    with VerifierPool(num_workers=1, timeout_s=1.0, chunk_size=3, judge_fn=hang_or_crash) as pool:
        scored = pool.score_batch(items)
    assert [s.status for s in scored] == ["ok"] * 4 + ["timeout", "ok"]


def test_bad_arguments_are_rejected():
    with pytest.raises(ValueError):
        VerifierPool(num_workers=0)
    with pytest.raises(ValueError):
        VerifierPool(timeout_s=0)
