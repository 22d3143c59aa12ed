"""scripts/studies/group_size_sweep.py: the statistics and bookkeeping around the training runs (the runs themselves
are the trainer's, tested in test_trainer)."""

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "studies"))

import group_size_sweep  # noqa: E402


def write_metrics(run_dir: Path, rows: list[dict]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_mean_interval_hand_worked():
    # mean 0.2, sample sd 0.1, t(2 df) = 4.303: half-width 4.303 * 0.1 / sqrt(3) = 0.24844
    mean, half = group_size_sweep.mean_interval([0.1, 0.2, 0.3])
    assert mean == pytest.approx(0.2)
    assert half == pytest.approx(0.24844, abs=1e-5)
    assert group_size_sweep.mean_interval([0.4]) == (0.4, 0.0)


def test_eval_accuracy_reads_only_eval_rows(tmp_path):
    write_metrics(tmp_path, [{"step": 0, "eval/accuracy": 0.1}, {"step": 1, "reward/mean": 0.5},
                             {"step": 2, "eval/accuracy": 0.25, "reward/mean": 0.3}])
    assert group_size_sweep.eval_accuracy(tmp_path) == {0: 0.1, 2: 0.25}
    assert group_size_sweep.eval_accuracy(tmp_path / "absent") == {}


def test_summarise_marks_best_group_size_per_step():
    accuracy = {2: {0: {0: 0.1, 8: 0.20}, 1: {0: 0.1, 8: 0.30}},
                4: {0: {0: 0.1, 8: 0.35}, 1: {0: 0.1, 8: 0.15}},
                8: {0: {0: 0.1, 8: 0.20}}}
    table = group_size_sweep.summarise(accuracy)
    assert list(table) == ["0", "8"]
    last = table["8"]["by_group_size"]
    assert last["2"]["mean"] == pytest.approx(0.25) and last["2"]["seeds"] == 2
    assert last["4"]["mean"] == pytest.approx(0.25)
    assert last["8"] == {"mean": 0.2, "half_width": 0.0, "seeds": 1}
    # ties go to the first G listed; 2 and 4 tie at 0.25 here
    assert table["8"]["best_group_size"] == 2
    accuracy[4][1][8] = 0.16
    assert group_size_sweep.summarise(accuracy)["8"]["best_group_size"] == 4


def test_finished_run_is_not_run_again(tmp_path):
    write_metrics(tmp_path, [{"step": 0, "eval/accuracy": 0.1}, {"step": 16, "eval/accuracy": 0.2}])
    # a config path that does not exist: had the run been started, the subprocess would fail and raise
    assert group_size_sweep.run_training("no/such/config.yaml", [], tmp_path, final_step=16) is None
    with pytest.raises(RuntimeError, match="training failed"):
        group_size_sweep.run_training("no/such/config.yaml", [], tmp_path, final_step=32)
    assert "no/such/config.yaml" in (tmp_path / "train.log").read_text()


def test_budget_must_be_divisible_by_every_group_size(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["group_size_sweep.py", "--config", "configs/tiny-cpu.yaml", "--budget", "12",
                                      "--group-sizes", "2,8"])
    with pytest.raises(SystemExit):
        group_size_sweep.main()
    assert "divide the budget 12" in capsys.readouterr().err


def test_plot_writes_png(tmp_path):
    table = group_size_sweep.summarise({2: {0: {0: 0.1, 4: 0.2}}, 4: {0: {0: 0.1, 4: 0.3}}})
    group_size_sweep.plot(table, [2, 4], advised=4, path=tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").read_bytes()[:4] == b"\x89PNG"


def test_report_only_summarises_existing_runs_without_training(tmp_path, monkeypatch, capsys):
    out = tmp_path / "sweep"
    write_metrics(out / "G2-seed0", [{"step": 0, "eval/accuracy": 0.1}, {"step": 2, "eval/accuracy": 0.3}])
    write_metrics(out / "G2-seed1", [{"step": 0, "eval/accuracy": 0.1}, {"step": 2, "eval/accuracy": 0.2}])
    write_metrics(out / "G4-seed0", [{"step": 0, "eval/accuracy": 0.1}])  # cut short before its final eval
    monkeypatch.setattr(sys, "argv", ["group_size_sweep.py", "--config", str(REPO / "configs/tiny-cpu.yaml"),
                                      "--budget", "8", "--group-sizes", "2,4", "--seeds", "0,1", "--out", str(out),
                                      "--advisor-json", "none", "--report-only", "run.steps=2"])
    group_size_sweep.main()
    record = json.loads((out / "sweep.json").read_text())
    assert record["run_wall_s"] == {}  # nothing was trained
    assert not (out / "G4-seed1").exists()
    final = record["table"]["2"]
    assert final["by_group_size"]["2"]["seeds"] == 2 and final["by_group_size"]["2"]["mean"] == pytest.approx(0.25)
    assert "4" not in final["by_group_size"] and final["best_group_size"] == 2
    assert record["table"]["0"]["by_group_size"]["4"]["seeds"] == 1
    assert "G=4 step 0 (1)" in capsys.readouterr().out
