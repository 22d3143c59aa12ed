"""The command lines do what they say: flags that print imply --print-config (and never start a run), errors are
one line naming the problem, and piping the output into `head` ends quietly."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_train.cli import eval_main, train_main
from grpo_train.models import resolve_model

REPO = Path(__file__).resolve().parents[1]
TINY = str(REPO / "configs" / "tiny-cpu.yaml")
SEVEN_B = str(REPO / "configs" / "qwen2.5-math-7b-math.yaml")


@pytest.mark.parametrize("flags", [["--explain"], ["--gpu-gib", "24"], ["--print-config"]])
def test_printing_flags_print_and_exit_without_a_run(flags, tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert train_main(["--config", TINY, f"run.output_dir={run_dir}", *flags]) == 0
    out = capsys.readouterr().out
    assert yaml.safe_load(out)["run"]["output_dir"] == str(run_dir)  # the config, as valid YAML
    assert not run_dir.exists()  # no run started
    assert ("# field docs" in out) == ("--explain" in flags)


def test_the_memory_estimate_is_printed_when_asked_for(capsys):
    assert train_main(["--config", SEVEN_B, "--print-config"]) == 0
    plain = capsys.readouterr().out
    assert "per-GPU memory estimate: add --gpu-gib" in plain and "# gpus" not in plain
    assert train_main(["--config", SEVEN_B, "--gpu-gib", "80"]) == 0
    estimate = capsys.readouterr().out
    assert "GiB of a 80 GiB GPU" in estimate and "# gpus" in estimate


def test_print_config_into_head_ends_without_a_traceback():
    out = subprocess.run(f"{sys.executable} -m grpo_train --config {TINY} --print-config --explain | head -n 2",
                         shell=True, capture_output=True, text=True, cwd=REPO, timeout=120)
    assert out.returncode == 0 and len(out.stdout.splitlines()) == 2
    assert "Traceback" not in out.stderr and "BrokenPipeError" not in out.stderr, out.stderr


def test_plot_of_a_missing_run_is_one_line(tmp_path, capsys):
    assert train_main(["plot", str(tmp_path / "nonexist")]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"grpo-train plot: {tmp_path / 'nonexist'}: no such run folder"


@pytest.mark.parametrize("argv, expected", [
    (["--model", "tiny-qwen2", "--n", "-1"], "--n: -1 must be >= 0"),
    (["--model", "tiny-qwen2", "--k", "0"], "--k: 0 must be >= 1"),
])
def test_grpo_eval_refuses_bad_counts(argv, expected, capsys):
    with pytest.raises(SystemExit) as exit_info:
        eval_main(argv)
    assert exit_info.value.code == 2 and expected in capsys.readouterr().err


def test_grpo_eval_names_the_flag_and_the_path(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert eval_main(["--model", "tiny-qwen2", "--data", "gsm9k"]) == 2
    err = capsys.readouterr().err
    assert "--data: 'gsm9k' is not synthetic, gsm8k, math" in err and "eval_source" not in err
    assert eval_main(["--model", "tiny-qwen2", "--data", "nope.jsonl"]) == 2
    assert "--data: nope.jsonl: file not found" in capsys.readouterr().err
    assert eval_main(["--model", "runs/nope"]) == 2
    err = capsys.readouterr().err
    assert "runs/nope: no such folder" in err and "hf download" not in err


def test_grpo_eval_of_a_run_folder_uses_the_runs_own_config(tmp_path, capsys):
    """`--model RUN_DIR` (or one of its checkpoints) without --config: the run's config.yaml (its length caps,
    template, model settings), flags given over it, and a first line naming it. (This run has no complete
    checkpoint: grpo-eval stops there, after the line.)"""
    from grpo_train.cli import _eval_parser
    from grpo_train.config import load_config, save_config
    from grpo_train.evaluation import eval_config

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    save_config(load_config(TINY, ["rollout.max_tokens=37", "model.max_model_len=384", "data.template=fewshot"]),
                run / "config.yaml")
    parse = _eval_parser().parse_args
    for model in (run, run / "checkpoints" / "step-000002"):
        cfg, config = eval_config(parse(["--model", str(model)]))
        assert config == str(run / "config.yaml")
        assert (cfg.rollout.max_tokens, cfg.model.max_model_len, cfg.data.template) == (37, 384, "fewshot")
        assert cfg.model.name_or_path == str(model)  # its weights, not the base model the run started from
    cfg, _ = eval_config(parse(["--model", str(run), "--max-tokens", "20", "--template", "raw"]))
    assert (cfg.rollout.max_tokens, cfg.model.max_model_len, cfg.data.template) == (20, 384, "raw")  # flags win
    cfg, config = eval_config(parse(["--model", str(run), "--config", TINY]))
    assert config == TINY and cfg.rollout.max_tokens == 32  # --config wins over the run's
    cfg, config = eval_config(parse(["--model", "tiny-qwen2"]))
    assert config is None and (cfg.rollout.max_tokens, cfg.model.max_model_len) == (512, 2048)  # grpo-eval's own
    assert eval_main(["--model", str(run)]) == 2
    out, err = capsys.readouterr()
    assert out.splitlines() == [f"grpo-eval: config {run / 'config.yaml'}, the run's own; the flags given override it"]
    assert "the run has no complete checkpoint" in err


def test_grpo_eval_summary_is_valid_json_when_there_is_nothing_to_score(tmp_path, capsys):
    """An empty data file is refused; an earlier summary.json is left as it was."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    out = tmp_path / "eval"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"accuracy": 0.5}))
    assert eval_main(["--model", "tiny-qwen2", "--data", str(empty), "--out", str(out)]) == 2
    assert "empty.jsonl: no usable problems" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text()) == {"accuracy": 0.5}


@pytest.mark.parametrize("override, expected", [
    ("data.synthetic.categories=[add_sub_2, foo]", "data.synthetic.categories: ['add_sub_2', 'foo'] must be"),
    ("data.source=gsm9k", "data.source: 'gsm9k' is not synthetic, gsm8k, math"),
    ("data.source={tmp}/train.jsonl", "data.eval_source: data.source is a local file ({tmp}/train.jsonl)"),
    ("data.source={tmp}/nope.jsonl", "data.source: {tmp}/nope.jsonl: data file not found"),
    ("data.eval_source={tmp}/nope.jsonl", "data.eval_source: {tmp}/nope.jsonl: data file not found"),
])
def test_what_would_fail_at_start_fails_in_print_config(override, expected, capsys, tmp_path):
    """Mistakes a real start met ~5 s in (after loading the model) are config errors, also for --print-config."""
    (tmp_path / "train.jsonl").write_text('{"question": "1 + 1?", "answer": "2"}\n')
    override, expected = override.format(tmp=tmp_path), expected.format(tmp=tmp_path)
    assert train_main(["--config", TINY, "--print-config", override]) == 2
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize("args, expected", [
    (["model.name_or_path=tiny-qwen3"], "model 'tiny-qwen3' not found: use an embedded name"),
    (["model.name_or_path=configs/nope"], "configs/nope: no such folder (and configs/ is a local folder"),
    (["model.max_model_len=100000"], "model.max_model_len: 100000 is beyond the context of tiny-qwen2"),
    (["--gpu-gib", "-5"], "--gpu-gib: -5 must be a GPU's memory in GiB"),
])
def test_model_and_context_mistakes_fail_in_print_config(args, expected, capsys, monkeypatch):
    """Checked without loading the model; the embedded model is built first, as after a first run."""
    resolve_model("tiny-qwen2")
    monkeypatch.chdir(REPO)
    assert train_main(["--config", TINY, "--print-config", *args]) == 2
    assert expected in capsys.readouterr().err


def test_a_bad_log_level_in_the_environment_fails_in_print_config(capsys, monkeypatch):
    monkeypatch.setenv("GRPO_TRAIN_LOG_LEVEL", "bogus")
    assert train_main(["--config", TINY, "--print-config"]) == 2
    assert "GRPO_TRAIN_LOG_LEVEL: 'bogus' is not one of warning, info, debug" in capsys.readouterr().err


def interrupted(argv: list[str]) -> str:
    from grpo_train.cli import _train_parser, interrupt_line
    from grpo_train.config import load_config

    args = _train_parser().parse_args(argv)
    return interrupt_line(load_config(args.config, args.overrides), args)


def test_the_interrupt_line_gives_the_command_that_resumes(tmp_path, monkeypatch):
    """The line after Ctrl-C: the last logged step, the newest complete checkpoint, and the command that ran with
    run.resume=auto in place of any run.resume / run.overwrite (the user's run.resume=PATH kept while the run folder
    has no checkpoint of its own)."""
    for key in ("TORCHELASTIC_RUN_ID", "WORLD_SIZE"):
        monkeypatch.delenv(key, raising=False)
    run = tmp_path / "my run"
    python = f"{sys.executable} -m grpo_train --config {TINY} 'run.output_dir={run}' run.seed=3"
    assert interrupted(["--config", TINY, f"run.output_dir={run}", "run.seed=3", "run.overwrite=true"]) == (
        f"interrupted after step 0; last complete checkpoint: none; resume with: {python} run.resume=auto "
        "run.overwrite=false")
    elsewhere = tmp_path / "other" / "checkpoints" / "step-000002"
    argv = ["--config", TINY, f"run.output_dir={run}", f"run.resume={elsewhere}", "run.seed=3"]
    assert interrupted(argv).endswith(f"{python} run.resume={elsewhere}")
    # Once the run folder has a complete checkpoint, that is where to go on from; the step is the last one logged.
    ckpt = run / "checkpoints" / "step-000004"
    ckpt.mkdir(parents=True)
    state = json.dumps({"step": 4})
    (ckpt / "trainer_state.json").write_text(state)
    (ckpt / "MANIFEST.json").write_text(json.dumps({"step": 4, "files": {"trainer_state.json": len(state)}}))
    rows = [json.dumps({"step": s, "train/loss": 0.1}) for s in (1, 2, 3, 4, 5)]
    (run / "metrics.jsonl").write_text("\n".join(rows) + "\n")
    assert interrupted(argv) == (f"interrupted after step 5; last complete checkpoint: {ckpt}; resume with: "
                                 f"{python} run.resume=auto")
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")
    assert f"resume with: <the same launcher command> -m grpo_train --config {TINY} " in interrupted(argv)


def test_serve_rollout_prints_the_server_a_run_would_start(capsys):
    """`grpo-train serve-rollout` (a rollout node's server, for rollout.servers.urls) runs the command and the
    environment of the servers a run starts itself (rollout/servers.py), on the host and port asked for."""
    import shlex

    from grpo_train.config import load_config
    from grpo_train.rollout.server_launch import server_command

    assert train_main(["serve-rollout", "--config", TINY, "--print", "--port", "8123", "model.max_model_len=256"]) == 0
    printed = shlex.split(capsys.readouterr().out)
    cfg = load_config(TINY, ["model.max_model_len=256"])
    want = server_command(cfg, resolve_model(cfg.model.name_or_path), 8123, cfg.run.seed, False, host="0.0.0.0")
    assert printed[-len(want):] == want
    assert "VLLM_SERVER_DEV_MODE=1" in printed[:-len(want)]
    assert want[want.index("--max-model-len") + 1] == "256"
    assert train_main(["serve-rollout", "--config", TINY, "--print", "rollout.nope=1"]) == 2
    assert "rollout.nope" in capsys.readouterr().err


def test_serve_rollout_says_a_server_is_starting_before_it_takes_over(capsys, monkeypatch):
    """One line before the server replaces the process (os.execve, a stand-in here that returns): it takes minutes
    to answer, and its log follows on the same output."""
    import os

    started = []
    monkeypatch.setattr(os, "execve", lambda path, cmd, env: started.append(cmd))
    train_main(["serve-rollout", "--config", TINY, "--port", "8123"])
    (cmd,) = started
    assert capsys.readouterr().out.splitlines() == [
        f"grpo-train serve-rollout: starting vLLM's API server for {resolve_model('tiny-qwen2')} on 0.0.0.0:8123 (a "
        "minute or more to load a real model); its log follows on this output"]
    assert cmd[cmd.index("--port") + 1] == "8123"
