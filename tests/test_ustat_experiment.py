"""scripts/studies/ustat_experiment.py: its settings, and a 2-step run of three settings on the tiny model (real trainer
runs through the CLI), summarised, then rerun without training anything (the finished runs are skipped)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "studies"))
from ustat_experiment import setting_overrides  # noqa: E402


def test_settings_become_overrides_at_the_budget():
    assert setting_overrides("G4", 32) == ["algorithm.group_size=4", "algorithm.prompts_per_step=8",
                                           "ustat.enabled=true"]
    assert "algorithm.dynamic_sampling=dapo" in setting_overrides("dapo-G8", 32)
    assert setting_overrides("auto-dapo", 32)[:2] == ["algorithm.group_size=auto", "algorithm.rollouts_per_step=32"]
    with pytest.raises(ValueError, match="does not divide the budget"):
        setting_overrides("G5", 32)
    with pytest.raises(ValueError, match="unknown setting"):
        setting_overrides("auto-G4", 32)


@pytest.mark.slow
def test_tiny_experiment_runs_reports_and_resumes(tmp_path):
    out = tmp_path / "exp"
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    command = [sys.executable, str(REPO / "scripts" / "studies" / "ustat_experiment.py"),
               "--config", "configs/tiny-cpu.yaml", "--budget", "8", "--settings", "G4,auto,dapo-G4", "--seeds", "0",
               "--out", str(out),
               "run.steps=2", "run.eval_size=4", "run.samples_every=0", "algorithm.kl_coef=0",
               "algorithm.dynamic_sampling_max_rounds=1", "reward.functions=[]"]  # no length reward: no mixed group
    first = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=1200, env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    record = json.loads((out / "experiment.json").read_text())
    assert sorted(record["table"]) == ["0", "2"]  # eval before training and after the last step
    assert set(record["table"]["2"]["by_setting"]) == {"G4", "auto", "dapo-G4"}
    assert record["table"]["2"]["best_fixed"] == "G4"
    assert record["curves"]["auto"]["0"]["group_size"] == {"1": 4, "2": 4}  # N = 8: G = 4 is the only candidate
    dapo = record["table"]["2"]["by_setting"]["dapo-G4"]
    plain = record["table"]["2"]["by_setting"]["G4"]
    assert dapo["rollout_tokens"] > plain["rollout_tokens"]  # the extra round's rollouts are counted
    assert set(record["run_wall_s"]) == {"G4-seed0", "auto-seed0", "dapo-G4-seed0"}
    assert (out / "experiment.png").stat().st_size > 0
    again = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600, env=env)
    assert again.returncode == 0 and "$ " not in again.stdout  # nothing trained again
    assert json.loads((out / "experiment.json").read_text())["run_wall_s"] == {}
