"""The benchmark scripts' own arithmetic: profile summaries, useful-token counts, the report's goals."""

import sys
from pathlib import Path

import pytest

from grpo_train.config import load_config

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "scripts" / "bench"))

import bench_report  # noqa: E402
import bench_step  # noqa: E402

LOOP = "<module> (grpo_train/__main__.py:5);train (grpo_train/trainer.py:200)"


def test_profile_summary_attributes_samples_to_phases(tmp_path):
    raw = tmp_path / "profile.txt"
    raw.write_text("\n".join([
        "<module> (grpo_train/__main__.py:5);_find_and_load (<frozen importlib._bootstrap>:1176) 40",  # start-up
        f"{LOOP};VLLMEngine.generate (grpo_train/rollout/engines.py:160);step (vllm/v1/engine/llm_engine.py:300) 30",
        f"{LOOP};update (grpo_train/learner.py:380);backward (torch/_tensor.py:600) 45",
        f"{LOOP};Learner.update (grpo_train/learner.py:380);forward (torch/nn/modules/linear.py:130) 15",
        # the sync check inside the loop calls generate: the outermost phase frame decides
        f"{LOOP};load_weights (grpo_train/rollout/engines.py:200);generate (grpo_train/rollout/engines.py:160) 5",
        f"{LOOP};save_checkpoint (grpo_train/checkpoint.py:90);_save (torch/serialization.py:900) 4",
        f"{LOOP};log (grpo_train/metrics.py:60) 1",
    ]) + "\n")
    summary = bench_step.summarise_profile(raw)
    assert summary["samples_in_loop"] == 100 and summary["samples_outside_loop"] == 40
    assert summary["phase_share"] == {"update": 0.6, "rollout": 0.3, "sync": 0.05, "checkpoint": 0.04,
                                      "other (loop)": 0.01}
    assert summary["top_functions"]["update"] == [["backward (torch/_tensor.py)", 0.75],
                                                  ["forward (torch/nn/modules/linear.py)", 0.25]]


@pytest.mark.parametrize("share, micro, per_prompt_copies", [(False, 16, 4), (True, 8, 1), (True, 2, 2)])
def test_useful_prompt_tokens_follow_the_learners_micro_batches(share, micro, per_prompt_copies):
    """4 completions per prompt: without sharing each carries its prompt; with it a prompt runs once per
    micro-batch holding any of its completions (micro 8: 2 whole groups each; micro 2: each group in 2)."""
    cfg = load_config(str(REPO / "configs" / "tiny-cpu.yaml"),
                      [f"learner.share_prompts={str(share).lower()}", f"learner.micro_batch_size={micro}"])
    unshared = load_config(str(REPO / "configs" / "tiny-cpu.yaml"), ["learner.share_prompts=false"])
    assert cfg.algorithm.group_size == 4
    counted = bench_step.prompt_tokens_per_step(cfg, 3)
    full = bench_step.prompt_tokens_per_step(unshared, 3)
    assert counted == [n * per_prompt_copies // 4 for n in full]


def test_report_checks_the_goals():
    trl_part = {"setting": "s", "ours": {"median_step_s": 10.0, "step_s": [10.0] * 5,
                                          "breakdown_median_s": {"rollout_s": 4, "reward_s": 0.1, "sync_s": 0.5}},
                "trl": {"median_step_s": 40.0, "step_s": [40.0] * 5, "trl_version": "1.16.0", "generation": ["hf"],
                        "breakdown_median_s": {"rollout_s": 20, "reward_s": 0.1, "sync_s": 0.0}},
                "trl_generation": {"failed_attempts": [{"generation": "vllm", "error": "AttributeError: x"}]}}
    text = "\n".join(bench_report.report_lines({"trl": trl_part}))
    assert "**0.25x** (goal <= 0.5x: met)" in text and "`vllm` failed: AttributeError" in text
    assert "Not run (no result file): verifier.json, rollout.json, step.json" in text
    trl_part["ours"]["median_step_s"] = 30.0
    assert "**0.75x** (goal <= 0.5x: not met)" in "\n".join(bench_report.report_lines({"trl": trl_part}))


def test_h100_projection_matches_hand_worked_figures():
    """Qwen2.5-7B, 16 prompts x 8 completions per GPU (prompt 256, completions uniform on [0, 1024]), MFU 0.4.

    Update: 6 * 7.62e9 * (128 * 512 + 16 * 256 = 69632 tokens) / (989e12 * 0.4) = 8.047 s; the reference forward is
    a third of it. Decode: 1024 steps reading 15.24 GB of weights at 0.6 * 3.35 TB/s = 7.76 s, plus the cache:
    128 * 57344 B * (256/2 + 1024/6) per step on average = 2.192 GB -> 1.117 s; prefill 16 * 256 tokens at peak
    = 0.063 s: rollout 8.94 s.
    """
    p = bench_report.h100_projection(0.4)
    assert p["phases_s"]["update_s"] == pytest.approx(8.047, rel=1e-3)
    assert p["phases_s"]["ref_logprobs_s"] == pytest.approx(p["phases_s"]["update_s"] / 3)
    assert p["phases_s"]["rollout_s"] == pytest.approx(7.76 + 1.117 + 0.063, rel=3e-3)
    assert p["completion_tokens_per_s_per_gpu"] == pytest.approx(128 * 512 / p["step_s"])
    assert bench_report.h100_projection()["mfu_used"] == bench_report.GPU_LEARNER_MFU
    text = "\n".join(bench_report.report_lines({}))
    assert "Projection (on paper, not measured)" in text and "40% MFU (assumed:" in text
