"""The command lines do what they say: flags that print imply --print-config (and never start a run), errors are
one line naming the problem, and piping the output into `head` ends quietly."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from grpo_train.cli import eval_main, train_main

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
    assert "runs/nope: no such folder" in err and "huggingface-cli" not in err


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
    ("data.source=train.jsonl", "data.eval_source: data.source is a local file (train.jsonl)"),
])
def test_what_would_fail_at_start_fails_in_print_config(override, expected, capsys):
    """Mistakes a real start met ~5 s in (after loading the model) are config errors, also for --print-config."""
    assert train_main(["--config", TINY, "--print-config", override]) == 2
    assert expected in capsys.readouterr().err
