"""Faults and bad input, end to end: whole `python -m grpo_train` runs on tiny-qwen2, killed with SIGKILL from
the outside or stopped by SIGTERM / SIGUSR1 (preemption, a time limit) and resumed, compared with an uninterrupted
run; and each kind of bad input giving exit code 2 and one line naming the problem, without a traceback.

Saving that fails (disk full, out of memory), corrupt checkpoints and pickled code are tested in-process in
test_checkpoint.py.
"""

import contextlib
import json
import math
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grpo_train.cli import train_main
from grpo_train.config import load_config, save_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny-cpu.yaml"
# Small and quick, and the weights move every step even though the random model earns no reward: AdamW's
# decoupled weight decay shrinks them, so from step 3 on the KL to the reference and its gradient are non-zero
# and the resumed steps have non-trivial numbers to agree on.
RUN = ["run.steps=4", "run.checkpoint_every=1", "run.eval_size=0", "run.samples_every=1", "rollout.max_tokens=16",
       "algorithm.prompts_per_step=2", "algorithm.group_size=2", "algorithm.kl_coef=0.05", "learner.weight_decay=0.1",
       "reward.num_workers=1", "model.max_model_len=256", "rollout.cpu_kvcache_gb=0.125"]
WALL_CLOCK = ("perf/", "memory/", "time")  # the only metrics allowed to differ between two runs (memory/host_*)


DIST_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def run_env() -> dict[str, str]:
    # An in-process test (init_distributed) may have left RANK / MASTER_PORT set; a child inheriting them would
    # try to join that world and fail on the port, so each run starts as a fresh single process.
    return {**{k: v for k, v in os.environ.items() if k not in DIST_ENV}, "PYTHONUNBUFFERED": "1"}


@pytest.fixture
def restore_dist_env():
    """For tests that train in-process: init_distributed sets DIST_ENV; later subprocesses must not see it."""
    saved = {k: os.environ.get(k) for k in DIST_ENV}
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


def start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return launch([sys.executable, "-m", "grpo_train", "--config", str(TINY), f"run.output_dir={run_dir}", *RUN,
                   *overrides], run_dir)


def as_a_shell_starts_it() -> None:
    """In the child before exec: the signal dispositions and mask a terminal's shell gives a command (Ctrl-C's default
    handler, nothing blocked), whatever state earlier tests left in this test process (a child inherits an ignored
    or blocked SIGINT, and then no Ctrl-C reaches the run)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, set())


def signal_state() -> str:
    """This process's SIGINT disposition and blocked signals (a failed Ctrl-C test reports them)."""
    return f"SIGINT here: {signal.getsignal(signal.SIGINT)}, blocked: {signal.pthread_sigmask(signal.SIG_BLOCK, [])}"


def launch(cmd: list[str], run_dir: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The command in its own process group (a Ctrl-C or kill reaches all it starts), started as a shell would start
    it, its output in RUN_DIR.log."""
    log = open(run_dir.with_suffix(".log"), "ab")  # noqa: SIM115 -- the child writes it; closed in `stop`
    proc = subprocess.Popen(cmd, cwd=REPO, env={**run_env(), **(env or {})}, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, preexec_fn=as_a_shell_starts_it)  # noqa: PLW1509
    proc.log = log
    return proc


def stop(proc: subprocess.Popen) -> str:
    """Once the run's main process has exited: give its children (verifier workers, which exit when their
    pipe closes) 10 s to finish, kill any that are left, and return the run's output."""
    deadline = time.monotonic() + 10
    with contextlib.suppress(ProcessLookupError):  # raised once no process of the group is left
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.1)
        os.killpg(proc.pid, signal.SIGKILL)
    proc.log.close()
    return Path(proc.log.name).read_text(errors="replace")


def finish(proc: subprocess.Popen, timeout: float = 900) -> str:
    returncode = proc.wait(timeout=timeout)
    log = stop(proc)
    assert returncode == 0, log[-5000:]
    return log


def kill_when(proc: subprocess.Popen, condition, delay: float = 0.0, timeout: float = 900) -> None:
    """`kill -9` the run's process as soon as `condition()` holds (polled every 10 ms), after `delay` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, "the run ended before the moment to kill it:\n" + stop(proc)[-3000:]
        assert time.monotonic() < deadline, "timed out waiting for the moment to kill the run"
        time.sleep(0.01)
    time.sleep(delay)
    assert proc.poll() is None, "the run ended before the kill"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    stop(proc)


def metric_rows(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def latest(run_dir: Path) -> str:
    path = run_dir / "checkpoints" / "latest"
    return path.read_text() if path.exists() else ""


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run_dir / "checkpoints" / "step-000004" / "hf_model" / "model.safetensors"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The uninterrupted run (~40-70 s), which every interrupted and resumed run of this file must end equal to."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    finish(start(run_dir))
    return run_dir


def assert_same_run(run: Path, reference: Path) -> None:
    """Every step's metrics exactly once, equal to the uninterrupted run's except for wall-clock times; the same
    final weights, bit for bit."""
    ours, theirs = metric_rows(run), metric_rows(reference)
    assert [r["step"] for r in ours] == [r["step"] for r in theirs] == [1, 2, 3, 4]
    for mine, ref in zip(ours, theirs, strict=True):
        assert set(mine) == set(ref)
        for key, value in ref.items():
            if not key.startswith(WALL_CLOCK):
                assert math.isclose(mine[key], value, rel_tol=1e-5, abs_tol=1e-5), (ref["step"], key, mine[key], value)
    assert theirs[3]["train/kl"] > 0 and theirs[3]["train/grad_norm"] > 0  # the comparison is not of zeros
    mine_w, ref_w = final_weights(run), final_weights(reference)
    assert set(mine_w) == set(ref_w)
    for name, tensor in ref_w.items():
        assert torch.equal(mine_w[name], tensor), name


def resume_line(log: str, prefix: str) -> tuple[int, Path, list[str]]:
    """The run's last line, `grpo-train: PREFIX after step N...; last complete checkpoint: PATH; resume with: COMMAND`
    (no traceback before it): (N, PATH, COMMAND's argv)."""
    assert "Traceback" not in log, log[-5000:]
    last_line = log.strip().splitlines()[-1]
    match = re.fullmatch(rf"grpo-train: {prefix} after step (\d+)(?: \(.*\))?; last complete checkpoint: (\S+); "
                         r"resume with: (.+)", last_line)
    assert match, last_line
    step, ckpt, command = match.groups()
    return int(step), Path(ckpt), shlex.split(command)


# ----------------------------------------------------------------------------------------------------
# kill -9 and resume


@pytest.mark.slow
def test_killed_interrupted_and_resumed_run_matches_the_uninterrupted_one(tmp_path, reference):
    """~3 runs of ~40-70 s each besides the reference: one run killed in a save, resumed and stopped by Ctrl-C,
    resumed again to the end with the command the interrupted run printed."""
    # 1. Killed while saving step 2: the step-1 checkpoint stays the usable one.
    run = tmp_path / "killed"
    ckpts = run / "checkpoints"
    kill_when(start(run), lambda: (ckpts / ".tmp-step-000002").exists())
    assert (ckpts / ".tmp-step-000002").is_dir() and not (ckpts / "step-000002").exists()
    assert latest(run) == "step-000001"
    assert [r["step"] for r in metric_rows(run)] == [1, 2]  # step 2 was logged, its checkpoint was not

    # 2. Resumed from an explicit checkpoint path, then Ctrl-C (SIGINT to the process group, as a terminal sends it:
    # the trainer, its verifier worker, all it started) once step 2's checkpoint is published. It ends with exit 130
    # and one line: the last logged step, the last complete checkpoint, the command that resumes; no traceback.
    resumed = start(run, f"run.resume={ckpts / 'step-000001'}")
    deadline = time.monotonic() + 900
    while latest(run) != "step-000002":
        assert resumed.poll() is None, "the run ended before step 2's checkpoint:\n" + stop(resumed)[-3000:]
        assert time.monotonic() < deadline, "timed out waiting for step 2's checkpoint"
        time.sleep(0.01)
    os.killpg(resumed.pid, signal.SIGINT)
    returncode = resumed.wait(timeout=120)
    log = stop(resumed)
    assert f"resumed from {ckpts / 'step-000001'} at step 1" in log.replace("\n", "")
    assert returncode == 130, signal_state() + "\n" + log[-5000:]
    step, ckpt, argv = resume_line(log, "interrupted")
    assert ckpt == ckpts / latest(run) and step >= 2
    assert [r["step"] for r in metric_rows(run)] == list(range(1, step + 1))
    assert argv[:3] == [sys.executable, "-m", "grpo_train"] and argv[-1] == "run.resume=auto"

    # 3. The printed command, to the end: the uninterrupted run's metrics and weights.
    log = finish(launch(argv, run))
    assert f"resumed from {ckpt} at step" in log.replace("\n", "")
    assert_same_run(run, reference)
    samples = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert Counter(s["step"] for s in samples) == {1: 4, 2: 4, 3: 4, 4: 4}  # 2 prompts x 2 completions each

    # The last two checkpoints kept; `grpo-train export` copies the final weights.
    ref_w = final_weights(reference)
    assert sorted(p.name for p in ckpts.iterdir()) == ["latest", "step-000003", "step-000004"]
    out = tmp_path / "export"
    assert train_main(["export", "--run", str(run), "--out", str(out)]) == 0
    exported = load_file(str(out / "model.safetensors"))
    assert all(torch.equal(exported[name], tensor) for name, tensor in ref_w.items())


# ----------------------------------------------------------------------------------------------------
# SIGTERM and SIGUSR1: a stop at a checkpoint (grpo_train/preemption.py), and resume


def start_signalled(run_dir: Path, at: str, *overrides: str) -> subprocess.Popen:
    """A run that sends its process group (the trainer and its verifier worker) a stop signal at the moment `at`
    names, "SIGNAL PHASE STEP" (tests/drivers/preempt_run.py)."""
    return launch([sys.executable, str(REPO / "tests" / "drivers" / "preempt_run.py"), "--config", str(TINY),
                   f"run.output_dir={run_dir}", *RUN, *overrides], run_dir, {"PREEMPT_AT": at})


def stopped(proc: subprocess.Popen) -> tuple[int, str]:
    """(exit code, output) of a run that stopped on its own, once every process of its group has ended."""
    returncode = proc.wait(timeout=600)
    deadline = time.monotonic() + 10
    with contextlib.suppress(ProcessLookupError):
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)
            time.sleep(0.1)
        pytest.fail("a process of the stopped run outlived it by 10 s:\n" + stop(proc)[-3000:])
    return returncode, stop(proc)


@pytest.mark.slow
def test_stop_signals_save_the_work_and_the_resumed_run_matches_the_uninterrupted_one(tmp_path, reference):
    """~3 runs of ~30-50 s besides the reference, checkpoints only at the end (run.checkpoint_every 0).
    1. SIGTERM as step 3's rollout begins: steps 1-2 are done and unsaved, and this process has timed no save, so step
       3 is abandoned and step 2 saved as step 3 found it (data position, RNG); exit 143.
    2. Resumed; SIGUSR1 as step 3's update begins: the step is finished and saved; exit 138.
    3. The printed command, to the end: every row once, the uninterrupted run's metrics and weights, bit for bit."""
    run = tmp_path / "run"
    ckpts = run / "checkpoints"
    returncode, log = stopped(start_signalled(run, "SIGTERM rollout 3", "run.checkpoint_every=0"))
    assert returncode == 143, log[-5000:]
    assert "(step 3 abandoned before its update)" in log
    step, ckpt, _ = resume_line(log, "stopped by SIGTERM")
    assert (step, ckpt) == (2, ckpts / "step-000002") and latest(run) == "step-000002"
    assert [r["step"] for r in metric_rows(run)] == [1, 2]
    assert json.loads((ckpt / "trainer_state.json").read_text())["sampler"]["position"] == 4  # 2 steps x 2 prompts

    returncode, log = stopped(start_signalled(run, "SIGUSR1 update 3", "run.checkpoint_every=0", "run.resume=auto"))
    assert returncode == 138, log[-5000:]
    assert f"resumed from {ckpts / 'step-000002'} at step 2" in log.replace("\n", "")
    step, ckpt, argv = resume_line(log, "stopped by SIGUSR1")
    assert (step, ckpt) == (3, ckpts / "step-000003") and "abandoned" not in log.strip().splitlines()[-1]
    assert [r["step"] for r in metric_rows(run)] == [1, 2, 3]
    assert argv[:3] == [sys.executable, "-m", "grpo_train"] and argv[-1] == "run.resume=auto"

    log = finish(launch(argv, run))
    assert f"resumed from {ckpts / 'step-000003'} at step 3" in log.replace("\n", "")
    assert_same_run(run, reference)


# ----------------------------------------------------------------------------------------------------
# Bad input: exit code 2, one line naming the problem, no traceback


def one_error_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if line.startswith("grpo-train:")]
    assert len(lines) == 1, stderr[-3000:]
    return lines[0]


def malformed_data_file(tmp_path: Path) -> str:
    rows = [{"question": "What is 2 + 2?", "answer": "2 + 2 = 4\n#### 4"}, {"question": "What is 3 + 3?"}]
    path = tmp_path / "train.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return str(path)


def folder_under_a_file(tmp_path: Path) -> str:
    # Root ignores permission bits, so "not writable" is made with a parent that is a file.
    (tmp_path / "a-file").write_text("")
    return str(tmp_path / "a-file" / "run")


def finished_run_folder(tmp_path: Path) -> str:
    """What a finished run leaves that a fresh start would lose: metric rows and checkpoints."""
    run_dir = tmp_path / "previous-run"
    (run_dir / "checkpoints" / "step-000003").mkdir(parents=True)
    (run_dir / "checkpoints" / "step-000004").mkdir()
    save_config(load_config(TINY, [*RUN, f"run.output_dir={run_dir}"]), run_dir / "config.yaml")
    (run_dir / "metrics.jsonl").write_text("".join(f'{{"step": {s}}}\n' for s in range(5)))
    return str(run_dir)


BAD_INPUTS = {
    "model that does not exist": (["model.name_or_path=no-such-model"], ["model 'no-such-model' not found"]),
    "malformed dataset row": (["data.source={data}"], ["train.jsonl: line 2", "'answer'"]),
    "max_tokens beyond the model length": (["rollout.max_tokens=300"],
                                           ["rollout.max_tokens: 300 must be in [1, model.max_model_len)"]),
    "model length beyond the model's context": (["model.max_model_len=4096", "rollout.max_tokens=3000"],
                                                ["model.max_model_len: 4096", "max_position_embeddings = 2048"]),
    "output folder not writable": (["run.output_dir={unwritable}"], ["a-file/run is not writable"]),
    "folder that holds a finished run, same config": (
        ["run.output_dir={other_run}"],
        ["holds a run (5 rows of metrics.jsonl; checkpoints step-000004, step-000003)", "set run.resume=auto",
         "run.overwrite=true"]),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_one_line_and_exit_code_2(case, tmp_path, capfd, restore_dist_env):
    """In-process (each fails before the learner or vLLM start); `grpo-train` exits with main's return value."""
    overrides, expected = BAD_INPUTS[case]
    paths = {"data": malformed_data_file(tmp_path), "unwritable": folder_under_a_file(tmp_path),
             "other_run": finished_run_folder(tmp_path)}
    argv = ["--config", str(TINY), f"run.output_dir={tmp_path / 'run'}", *RUN,
            *[o.format(**paths) for o in overrides]]
    assert train_main(argv) == 2
    line = one_error_line(capfd.readouterr().err)
    assert all(text in line for text in expected), line


def test_rerun_after_an_early_kill_starts_clean_and_a_too_long_prompt_stops_it(tmp_path):
    """One subprocess (~40 s, set-up included) for two things a user meets when rerunning in the same folder.

    The folder holds an attempt killed during its first save: rows of steps 1-2 (the last one torn by the
    kill) and a `.tmp-step-000001`. `run.resume=auto` finds no checkpoint, so the run starts from step 0: the
    attempt is moved aside whole (its rows would otherwise appear twice, and deleting them would lose them).
    Then the prompt is too long for the context: exit code 2 and one line naming the problem, at step 1.
    """
    run_dir = tmp_path / "run"
    overrides = ["model.max_model_len=32", "rollout.max_tokens=8"]
    (run_dir / "checkpoints" / ".tmp-step-000001" / "engine").mkdir(parents=True)
    save_config(load_config(TINY, [*RUN, f"run.output_dir={run_dir}", *overrides]), run_dir / "config.yaml")
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "reward/mean": 0.0}\n{"step": 2, "rew')
    (run_dir / "samples.jsonl").write_text('{"step": 1, "completion": "x"}\n')

    proc = start(run_dir, *overrides, "run.resume=auto")
    returncode = proc.wait(timeout=600)
    log = stop(proc)
    assert returncode == 2, log[-3000:]
    assert not (run_dir / "metrics.jsonl").exists() and not (run_dir / "samples.jsonl").exists()
    (moved,) = tmp_path.glob("run.replaced-*")
    assert (moved / "metrics.jsonl").read_text().startswith('{"step": 1')
    assert f"no complete checkpoint in {run_dir}, starting at step 0" in log and str(moved) in log
    lines = [line for line in log.splitlines() if line.startswith("grpo-train:")]
    assert len(lines) == 1, log[-3000:]
    assert "PromptTooLongError: problem synthetic-train" in lines[0] and "over the budget of 24" in lines[0], lines[0]
    assert "Traceback" not in log, log[-3000:]
