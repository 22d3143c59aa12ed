"""The run folder: a run that would be lost is refused, replaced only when asked (and then moved aside, never
deleted), resumed when asked; a start that fails leaves nothing that blocks the next attempt."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from grpo_train.checkpoint import MANIFEST, TRAINER_STATE, CheckpointError
from grpo_train.cli import train_main
from grpo_train.config import ConfigError, load_config, save_config
from grpo_train.run_dir import SHARED_MARKER, RunDirError, prepare_run_dir, remove_if_left_empty, run_contents

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny-cpu.yaml"


def config(run_dir: Path, *overrides: str):
    return load_config(TINY, [f"run.output_dir={run_dir}", *overrides])


def finished_run(run_dir: Path, steps: int = 4) -> None:
    """A run folder as a finished run leaves it (the checkpoint folders need not hold files to count)."""
    for step in (steps - 1, steps):
        (run_dir / "checkpoints" / f"step-{step:06d}").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(f'{{"step": {s}}}\n' for s in range(steps + 1)))
    save_config(config(run_dir), run_dir / "config.yaml")


def test_rerunning_the_same_command_in_a_finished_run_is_refused(tmp_path):
    run_dir = tmp_path / "res"
    finished_run(run_dir)
    before = sorted(p.relative_to(run_dir) for p in run_dir.rglob("*"))
    with pytest.raises(RunDirError, match=r"holds a run \(5 rows of metrics.jsonl; checkpoints step-000004, "
                                          r"step-000003\); set run.resume=auto .* run.overwrite=true"):
        prepare_run_dir(config(run_dir))
    assert sorted(p.relative_to(run_dir) for p in run_dir.rglob("*")) == before  # nothing touched


@pytest.mark.parametrize("held", ["metrics", "checkpoint"])
def test_either_metrics_or_a_checkpoint_makes_a_run(tmp_path, held):
    run_dir = tmp_path / "res"
    run_dir.mkdir()
    if held == "metrics":
        (run_dir / "metrics.jsonl").write_text('{"step": 0, "eval/accuracy": 0.1}\n')
    else:
        (run_dir / "checkpoints" / "step-000002").mkdir(parents=True)
    assert run_contents(run_dir)
    with pytest.raises(RunDirError, match="holds a run"):
        prepare_run_dir(config(run_dir))


def test_overwrite_moves_the_old_run_aside_and_says_where(tmp_path):
    run_dir = tmp_path / "res"
    finished_run(run_dir)
    old_metrics = (run_dir / "metrics.jsonl").read_text()
    folder, note = prepare_run_dir(config(run_dir, "run.overwrite=true"))
    assert folder == run_dir and list(run_dir.iterdir()) == []
    (moved,) = tmp_path.glob("res.replaced-*")
    assert (moved / "metrics.jsonl").read_text() == old_metrics
    assert (moved / "checkpoints" / "step-000004").is_dir()
    assert str(moved) in note and "5 rows of metrics.jsonl" in note
    # A second overwrite in the same second does not collide with the first one's folder.
    finished_run(run_dir)
    prepare_run_dir(config(run_dir, "run.overwrite=true"))
    assert len(list(tmp_path.glob("res.replaced-*"))) == 2


def test_resume_auto_continues_a_run_without_moving_it(tmp_path, monkeypatch):
    import grpo_train.checkpoint as checkpoint

    run_dir = tmp_path / "res"
    finished_run(run_dir)
    newest = run_dir / "checkpoints" / "step-000004"
    monkeypatch.setattr(checkpoint, "is_complete", lambda path: (path == newest, "test"))
    folder, note = prepare_run_dir(config(run_dir, "run.resume=auto"))
    assert note is None and (run_dir / "metrics.jsonl").is_file() and not list(tmp_path.glob("res.replaced-*"))


def test_resume_auto_with_nothing_to_resume_says_so(tmp_path):
    empty = tmp_path / "fresh"
    _, note = prepare_run_dir(config(empty, "run.resume=auto"))
    assert note == f"run.resume=auto: no complete checkpoint in {empty}, starting at step 0"
    # Rows of an attempt that never finished a checkpoint: kept, moved aside with the rest of that attempt.
    attempt = tmp_path / "attempt"
    (attempt / "checkpoints" / ".tmp-step-000001").mkdir(parents=True)
    (attempt / "metrics.jsonl").write_text('{"step": 1}\n')
    _, note = prepare_run_dir(config(attempt, "run.resume=auto"))
    (moved,) = tmp_path.glob("attempt.replaced-*")
    assert "no complete checkpoint" in note and str(moved) in note
    assert (moved / "metrics.jsonl").read_text() == '{"step": 1}\n'


def test_a_failed_start_leaves_no_config_that_blocks_the_corrected_one(tmp_path, capfd, monkeypatch):
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(key, raising=False)
    run_dir = tmp_path / "run"
    argv = ["--config", str(TINY), f"run.output_dir={run_dir}", "model.name_or_path=no-such-model"]
    assert train_main(argv) == 2
    assert "model 'no-such-model' not found" in capfd.readouterr().err
    assert not run_dir.exists()  # the start created the folder and wrote nothing: it is removed again
    # A config.yaml left by older versions (or written by hand) is not a run either: the next start may use it.
    run_dir.mkdir()
    save_config(config(run_dir, "run.seed=123"), run_dir / "config.yaml")
    folder, note = prepare_run_dir(config(run_dir))
    assert folder == run_dir and note is None



def test_overwrite_and_resume_together_are_refused():
    """Resume continues the run in output_dir, overwrite moves it aside: one of them was not meant."""
    with pytest.raises(ConfigError, match="run.overwrite: true cannot go with run.resume=auto"):
        load_config(None, ["run.overwrite=true", "run.resume=auto"])


def test_a_failed_start_removes_only_an_empty_folder_it_created(tmp_path):
    made = tmp_path / "made"
    made.mkdir()
    remove_if_left_empty(made, existed=False)
    assert not made.exists()
    for existed, content in ((True, None), (False, "notes.txt")):  # the user's folder; a folder holding a file
        folder = tmp_path / f"kept-{existed}"
        folder.mkdir()
        if content:
            (folder / content).write_text("mine")
        remove_if_left_empty(folder, existed=existed)
        assert folder.is_dir()


def fake_checkpoint(run_dir: Path, step: int) -> Path:
    """A checkpoint folder that is complete as far as its manifest and trainer state go (no weights needed: the
    checks below must stop before anything reads them)."""
    ckpt = run_dir / "checkpoints" / f"step-{step:06d}"
    ckpt.mkdir(parents=True)
    (ckpt / TRAINER_STATE).write_text(json.dumps({"step": step}))
    (ckpt / MANIFEST).write_text(json.dumps({"files": {TRAINER_STATE: (ckpt / TRAINER_STATE).stat().st_size}}))
    return ckpt


def test_a_bad_resume_path_and_a_finished_run_stop_before_any_model_loads(tmp_path, tiny_path, monkeypatch, capfd):
    from grpo_train import trainer

    monkeypatch.setattr(trainer, "Learner", lambda *a, **k: pytest.fail("the learner's model was loaded"))
    monkeypatch.setattr(trainer, "make_engine", lambda *a, **k: pytest.fail("the engine's model was loaded"))
    with pytest.raises(CheckpointError, match="run.resume: .*missing is not a usable checkpoint"):
        trainer.train(config(tmp_path / "run", f"run.resume={tmp_path / 'missing'}"))
    finished = tmp_path / "finished"
    fake_checkpoint(finished, 4)
    assert trainer.train(config(finished, "run.steps=4", "run.resume=auto")) == finished
    assert "already finished at step 4 (run.steps 4): nothing to train" in capfd.readouterr().err
    # The cli: the same bad path is one line, exit 2, and no folder is left where there was none.
    fresh = tmp_path / "fresh"
    assert train_main(["--config", str(TINY), f"run.output_dir={fresh}", f"run.resume={tmp_path / 'missing'}"]) == 2
    assert "not a usable checkpoint" in capfd.readouterr().err and not fresh.exists()


SHARED_DRIVER = """
    import sys
    from pathlib import Path
    import torch.distributed as dist
    from grpo_train.run_dir import RunDirError, check_shared_folder

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    for layout in ("shared", "apart"):  # one folder for both ranks; then a folder per rank (a node-local disk)
        folder = Path(sys.argv[1]) / (layout if layout == "shared" else f"{layout}-rank{rank}")
        folder.mkdir(parents=True, exist_ok=True)
        try:
            check_shared_folder(folder, rank, dist.get_world_size())
            verdict = "ok"
        except RunDirError as err:
            verdict = str(err)
        (Path(sys.argv[1]) / f"{layout}-verdict-{rank}.txt").write_text(verdict)
    dist.destroy_process_group()
"""


def test_ranks_that_do_not_share_the_run_folder_fail_together_naming_the_fix(tmp_path):
    """torchrun, 2 ranks: the same folder passes (and the marker is removed); a folder per rank, as on node-local
    disks, fails on both ranks with one error naming the rank that cannot see rank 0's file."""
    driver = tmp_path / "driver.py"
    driver.write_text(textwrap.dedent(SHARED_DRIVER))
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", "29561"]
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    out = subprocess.run([*torchrun, str(driver), str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    verdicts = {(layout, rank): (tmp_path / f"{layout}-verdict-{rank}.txt").read_text()
                for layout in ("shared", "apart") for rank in (0, 1)}
    assert verdicts["shared", 0] == verdicts["shared", 1] == "ok"
    assert not (tmp_path / "shared" / SHARED_MARKER).exists()
    apart = [verdicts["apart", 0], verdicts["apart", 1]]
    assert all("rank 1 on" in v and "rank 0 on" not in v and "cannot see the file" in v for v in apart), apart
    assert all("every node mounts at the same path" in v for v in apart)
