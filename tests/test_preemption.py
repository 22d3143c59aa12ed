"""Preemption (grpo_train/preemption.py): the parts in-process (the ranks' agreement through the store and the rank
that does not answer, the decision to finish or abandon the step in flight, the watchdog), and two ranks end to end
under torchrun. One process, bit-identical to an uninterrupted run after SIGTERM and SIGUSR1: tests/test_faults.py;
the sbatch scripts' trap: tests/test_cluster.py."""

import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from helpers.runs import REPO, TINY, rows, run_env

from grpo_train.distributed import RanksDidNotAnswer, free_port, store_max
from grpo_train.preemption import StopSignals

# Small and quick (as tests/test_faults.py's runs), checkpoints only at the end.
RUN = ["run.steps=4", "run.checkpoint_every=0", "run.eval_size=0", "rollout.max_tokens=16",
       "algorithm.prompts_per_step=2", "algorithm.group_size=2", "reward.num_workers=1", "model.max_model_len=256",
       "rollout.cpu_kvcache_gb=0.125"]


# ----------------------------------------------------------------------------------------------------
# The agreement


def test_store_max_gives_every_rank_the_max_and_names_the_ranks_that_did_not_answer():
    port = free_port()
    store = dist.TCPStore("127.0.0.1", port, is_master=True, wait_for_workers=False)  # rank 0's, as in a run
    results = {}

    def rank(r: int, values: list[float]) -> None:
        client = store if r == 0 else dist.TCPStore("127.0.0.1", port, is_master=False)  # each rank its own socket
        results[r] = store_max(client, r, 3, "step1", values, timeout_s=30)

    # Ranks 1 and 2 answer late, in threads; a rank without a signal sends 0 and -inf time left.
    threads = [threading.Thread(target=rank, args=(r, v)) for r, v in ((1, [0, -math.inf]), (2, [15, -4.5]))]
    for thread in threads:
        thread.start()
    rank(0, [10, -20.0])
    for thread in threads:
        thread.join()
    assert results == {0: [15, -4.5], 1: [15, -4.5], 2: [15, -4.5]}  # SIGTERM (15) wins; the least time left: 4.5 s

    # Rank 1 answers, rank 2 does not: rank 0 waits the time it has, then names rank 2.
    store.set("step2/1", "0.0")
    started = time.monotonic()
    with pytest.raises(RanksDidNotAnswer, match=r"^rank 2 did not answer within 0\.5 s$") as err:
        store_max(store, 0, 3, "step2", [15], timeout_s=0.5)
    assert err.value.ranks == [2] and 0.5 <= time.monotonic() - started < 5


def test_a_signal_stops_the_run_at_the_next_point_and_the_step_is_finished_only_if_a_timed_save_fits(monkeypatch):
    """One process (no process group: the agreement is this rank's own flag), real signals to this process."""
    monkeypatch.setenv("RANK", "1")  # a watchdog, were it to fire, prints nothing into pytest's output
    before = signal.getsignal(signal.SIGTERM)
    stop = StopSignals(grace_s=300)
    try:
        assert not stop.agree(1, "rollout") and not stop.agree(1, "end")
        # Step 1 saved: from the end of its rollout to the end of its save took (here) well under a second.
        stop.saved(1)
        assert stop.last_saved == 1 and stop.finish_s < 1
        os.kill(os.getpid(), signal.SIGUSR1)  # the handler runs before the next line
        assert stop.signum == signal.SIGUSR1 and 299 < stop.time_left() <= 300
        os.kill(os.getpid(), signal.SIGTERM)  # a second signal keeps the first's budget
        assert stop.signum == signal.SIGUSR1
        assert stop.agree(2, "rollout") and stop.finish_fits()  # 300 s left, < 1 s needed
        assert stop.agree(2, "end")  # agreed once, for the rest of the run
        assert stop.preempted().exit_code == 128 + signal.SIGUSR1
    finally:
        stop.close()
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers as they were, the watchdog off

    stop = StopSignals(grace_s=300)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.agree(1, "rollout") and not stop.finish_fits()  # no save timed yet: abandon
        stop.abandoned = 1
        assert stop.preempted().note == " (step 1 abandoned before its update)"
    finally:
        stop.close()

    stop = StopSignals(grace_s=300)
    try:
        stop.agree(1, "rollout")
        stop.finish_s = 400.0  # a step that took 400 s from its rollout's end to its saved checkpoint
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.agree(2, "rollout") and not stop.finish_fits()
    finally:
        stop.close()


def test_the_watchdog_ends_the_process_with_the_line_and_the_exit_code_when_the_budget_runs_out():
    code = ("import os, signal, time; from grpo_train.preemption import StopSignals; "
            "StopSignals(0.5, lambda how, note: how + '; resume with: X'); os.kill(os.getpid(), signal.SIGTERM); "
            "time.sleep(60)")  # a step that does not reach its next stop point in time
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=run_env())
    assert proc.returncode == 143, proc.stderr[-3000:]
    assert "grpo-train: stopped by SIGTERM when run.preempt_grace_s = 0.5 s ran out; resume with: X" in proc.stderr
    assert time.monotonic() - started < 60


# ----------------------------------------------------------------------------------------------------
# Two ranks


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.startswith("grpo-train: stopped by")]
    assert len(lines) == 1, output[-5000:]  # rank 0 prints it, once
    return lines[0]


@pytest.mark.slow
def test_two_ranks_stop_together_when_one_is_signalled_and_resume(tmp_path):
    """~2 torchrun runs of ~50 s.
    1. Rank 1 alone gets SIGTERM as step 3's rollout begins (steps 1-2 done, none saved, no save timed): rank 0 stops
       at the same point, both abandon step 3 and save step 2 together, as step 3 found it.
    2. run.resume=auto through scripts/launch/train.sh, as a cluster starts it; SIGUSR1 to it (torchrun) once step 3
       is logged: torchrun forwards it to both ranks, which stop with step 3 on disk."""
    run_dir = tmp_path / "run"
    torchrun = [str(Path(sys.executable).with_name("torchrun")), "--standalone", "--nproc_per_node", "2"]
    first = subprocess.run([*torchrun, str(REPO / "tests" / "drivers" / "preempt_run.py"), "--config", str(TINY),
                            f"run.output_dir={run_dir}", *RUN], capture_output=True, text=True, cwd=REPO,
                           timeout=600, env={**run_env(), "PREEMPT_AT": "SIGTERM rollout 3 1"})
    output = first.stdout + first.stderr
    # torchrun's report gives each rank's exit code; rank 0's is SIGTERM's, though only rank 1 was signalled: 143 as it
    # exits with it, or -15 where torchrun, seeing rank 1 end first, sent rank 0 a SIGTERM in its last moments (its
    # stop line, checked below, is printed by then: rank 0 had stopped with rank 1)
    assert first.returncode != 0 and re.search(r"rank\s*: 0 \(local_rank: 0\)\n\s*exitcode\s*: (143|-15)\b",
                                               output), output[-5000:]
    line = last_line(output)
    ckpt = run_dir / "checkpoints" / "step-000002"
    assert line.startswith(f"grpo-train: stopped by SIGTERM after step 2 (step 3 abandoned before its update); "
                           f"last complete checkpoint: {ckpt}; resume with: <the same launcher command> -m grpo_train")
    assert line.endswith("run.resume=auto") and [r["step"] for r in rows(run_dir)] == [1, 2]
    assert (ckpt / "rng_rank0.json").is_file() and (ckpt / "rng_rank1.json").is_file()
    assert json.loads((ckpt / "trainer_state.json").read_text())["sampler"]["position"] == 4  # step 3's draw undone

    log = (tmp_path / "second.log").open("w")
    second = subprocess.Popen([str(REPO / "scripts" / "launch" / "train.sh"), "--nproc", "2", "--config", str(TINY),
                               f"run.output_dir={run_dir}", *RUN, "run.resume=auto"], cwd=REPO, env=run_env(),
                              stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 600
    while [r["step"] for r in rows(run_dir)] != [1, 2, 3]:
        assert second.poll() is None and time.monotonic() < deadline, (tmp_path / "second.log").read_text()[-5000:]
        time.sleep(0.05)
    second.send_signal(signal.SIGUSR1)  # train.sh runs torchrun in its own process
    returncode = second.wait(timeout=300)
    log.close()
    output = (tmp_path / "second.log").read_text()
    assert returncode == 1 and "closing signal SIGUSR1" in output, output[-5000:]  # torchrun's code after a signal
    assert f"resumed from {ckpt} at step 2" in output
    assert last_line(output).startswith("grpo-train: stopped by SIGUSR1 after step 3")
    assert f"last complete checkpoint: {run_dir / 'checkpoints' / 'step-000003'}; " in last_line(output)
    assert [r["step"] for r in rows(run_dir)] == [1, 2, 3]


# ----------------------------------------------------------------------------------------------------
# A build killed mid-way


def test_a_lock_left_by_a_killed_op_build_is_named_with_the_command_that_removes_it(tmp_path, monkeypatch):
    """The soak (scripts/studies/soak.py) met it: SIGKILL during DeepSpeed's JIT build of an op left
    <build root>/<op>/lock, and every later start waited on it for ever, printing nothing."""
    from grpo_train.distributed import STALE_LOCK_S, stale_build_locks

    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    old, fresh = tmp_path / "py311_cpu" / "deepspeed_shm_comm" / "lock", tmp_path / "py311_cpu" / "fused_adam" / "lock"
    for lock in (old, fresh):
        lock.parent.mkdir(parents=True)
        lock.touch()
    assert stale_build_locks() == []  # a build under way
    os.utime(old, (time.time() - STALE_LOCK_S - 120, time.time() - STALE_LOCK_S - 120))
    (line,) = stale_build_locks()
    assert line.startswith(f"grpo-train: warning: {old} is 12 min old") and line.endswith(f"rm {old}")
    assert old.exists() and fresh.exists()  # named, never removed: another job may be building
