"""The group-size advisor's plumbing on the tiny model: per-completion projected scores (checked against a
plain autograd gradient of the layer's weight), shapes, determinism with a seed, the bootstrap intervals,
and the report / json / PNG outputs. The estimator's statistics are checked on the toy bandit in
test_analysis.py; here the rollouts come from the transformers engine (`rollout.engine=hf`), which starts in
a second, unlike vLLM."""

import json
import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from grpo_train.config import load_config
from grpo_train.models import resolve_model
from grpo_train.rollout import HFEngine, SamplingSpec
from grpo_train.ustat.advisor import (
    Advice,
    ScoreProjector,
    advice_record,
    advise,
    completion_scores,
    default_candidates,
    format_report,
    main,
    plot_advice,
    sample_groups,
)
from grpo_train.ustat.estimators import VarianceComponents, best_group_size

TEMPERATURE = 0.7
PROMPTS = [[1, 9690, 198, 2683, 28, 216], [1, 4093, 314, 253, 2880], [1, 30, 31, 32], [1, 504, 3458, 28],
           [1, 2683, 216, 9690, 198], [1, 31, 30, 504]]
K = 8  # completions per prompt
TINY_CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "tiny-cpu.yaml")


@pytest.fixture(scope="module")
def tiny_path():
    return resolve_model("tiny-qwen2")


@pytest.fixture(scope="module")
def rollouts(tiny_path):
    """K completions of each of 6 prompts at temperature 0.7, prompt-major, with the sampler's logprobs."""
    spec = SamplingSpec(n=K, temperature=TEMPERATURE, max_tokens=6, seed=3)
    return HFEngine(tiny_path).generate(PROMPTS, spec)


@pytest.fixture(scope="module")
def projector(tiny_path):
    return ScoreProjector(tiny_path, "down_proj", dim=16, seed=0, temperature=TEMPERATURE, micro_batch=3)


def rule_rewards(rollouts) -> torch.Tensor:
    """[P, K] stand-in rewards from the real completions (the random tiny model never solves a problem):
    1 when the first completion token id is even. Deterministic given the rollouts."""
    rewards = [float(r.completion_token_ids[0] % 2 == 0) for r in rollouts]
    return torch.tensor(rewards, dtype=torch.float64).view(-1, K)


def naive_score(model, layer_name: str, projector: ScoreProjector, prompt: list[int],
                completion: list[int]) -> tuple[torch.Tensor, float]:
    """The definition, one completion at a time: full forward of prompt + completion, log pi at T,
    autograd gradient of the whole [out, in] weight, then u_d^T grad v_d / sqrt(D)."""
    weight = dict(model.named_parameters())[layer_name]
    ids = torch.tensor([prompt + completion])
    logits = model(ids).logits[0, len(prompt) - 1 : -1] / TEMPERATURE
    logp = logits.log_softmax(-1).gather(-1, torch.tensor(completion)[:, None]).sum()
    (grad,) = torch.autograd.grad(logp, weight)
    projected = torch.einsum("od,oi,id->d", projector.out_factors, grad, projector.in_factors)
    return projected / math.sqrt(projector.dim), logp.item()


# ---------------------------------------------------------------------------------------------------
# Scores


@pytest.mark.parametrize("projection", ["down_proj", "o_proj"])
def test_scores_equal_the_projected_autograd_gradient_at_the_temperature(tiny_path, rollouts, projection):
    projector = ScoreProjector(tiny_path, projection, dim=16, seed=0, temperature=TEMPERATURE, micro_batch=3)
    model = AutoModelForCausalLM.from_pretrained(tiny_path, dtype=torch.float32).eval()
    layer_name = f"model.layers.1.{'mlp' if projection == 'down_proj' else 'self_attn'}.{projection}.weight"
    group = rollouts[:K]
    # Completions of different lengths (prefixes of the samples), so micro-batches of 3 hold right padding.
    completions = [r.completion_token_ids[: 2 + i % 5] for i, r in enumerate(group)]
    scores, logps = projector.group_scores(group[0].prompt_token_ids, completions)
    assert scores.shape == (K, 16) and logps.shape == (K,)
    for i, completion in enumerate(completions):
        prompt = group[0].prompt_token_ids
        expected, expected_logp = naive_score(model, layer_name, projector, prompt, completion)
        torch.testing.assert_close(scores[i], expected, atol=1e-4, rtol=1e-4)
        assert logps[i].item() == pytest.approx(expected_logp, abs=1e-4)
        # The sampler drew from softmax(logits / 0.7): its logprobs of the same prefix agree.
        assert logps[i].item() == pytest.approx(sum(group[i].logprobs[: len(completion)]), abs=1e-3)


def test_completion_scores_shape_and_seeded_projection(tiny_path, rollouts, projector):
    scores = completion_scores(projector, rollouts, K)
    assert scores.shape == (len(PROMPTS), K, 16) and scores.dtype == torch.float64
    assert torch.isfinite(scores).all() and scores.abs().sum() > 0
    same_seed = ScoreProjector(tiny_path, "down_proj", dim=16, seed=0, temperature=TEMPERATURE, micro_batch=5)
    torch.testing.assert_close(completion_scores(same_seed, rollouts[:K], K), scores[:1])
    other_seed = ScoreProjector(tiny_path, "down_proj", dim=16, seed=1, temperature=TEMPERATURE)
    assert not torch.allclose(completion_scores(other_seed, rollouts[:K], K), scores[:1])


def test_sample_groups_is_deterministic_with_a_seed():
    cfg = load_config(TINY_CONFIG,
                      ["rollout.engine=hf", "rollout.max_tokens=6", "reward.num_workers=1"])
    first = sample_groups(cfg, num_prompts=2, samples_per_prompt=4, seed=5)
    second = sample_groups(cfg, num_prompts=2, samples_per_prompt=4, seed=5)
    assert len(first.rollouts) == 8 and first.rewards.shape == (2, 4) and len(first.texts) == 8
    assert [r.prompt_index for r in first.rollouts] == [0, 0, 0, 0, 1, 1, 1, 1]  # prompt-major
    tokens = [r.completion_token_ids for r in first.rollouts]
    assert tokens == [r.completion_token_ids for r in second.rollouts]
    torch.testing.assert_close(first.rewards, second.rewards)


# ---------------------------------------------------------------------------------------------------
# Advice


def test_candidates_and_hand_worked_relative_mse():
    assert default_candidates(32) == [2, 4, 8, 16, 32]
    assert default_candidates(12) == [2, 3, 4, 6, 12]
    # c1 = 1, c2 = 4, c3 = 36 at N = 16: N * MSE(G) = G + 4 + 36 / (G - 1)
    # G = 2: 42, G = 4: 20, G = 8: 17.142857, G = 16: 22.4; best 8, continuous G* = 1 + sqrt(36) = 7.
    components = VarianceComponents(between_prompt=1.0, first_order=4.0, second_order=36.0)
    assert best_group_size(components, (2, 4, 8, 16), 16) == 8
    assert components.optimal_group_size() == pytest.approx(7.0)
    assert components.minibatch_mse(2, 16) / components.minibatch_mse(8, 16) == pytest.approx(42 / (120 / 7))


@pytest.fixture(scope="module")
def advice(rollouts, projector) -> Advice:
    return advise(rule_rewards(rollouts), completion_scores(projector, rollouts, K), budget=16, resamples=200,
                  seed=0)


def test_advice_shapes_and_bootstrap_intervals_contain_the_point_estimates(advice):
    assert advice.candidates == [2, 4, 8, 16]
    assert len(advice.mse) == len(advice.relative_mse) == len(advice.relative_mse_interval) == 4
    assert min(advice.relative_mse) == pytest.approx(1.0)
    assert advice.relative_mse[advice.candidates.index(advice.recommended)] == pytest.approx(1.0)
    assert sum(advice.best_share.values()) == pytest.approx(1.0)
    for value, (low, high) in zip(advice.relative_mse, advice.relative_mse_interval, strict=True):
        assert low <= value <= high
    for key, field in (("c1", "between_prompt"), ("c2", "first_order"), ("c3", "second_order")):
        low, high = advice.components_interval[key]
        assert low <= getattr(advice.components, field) <= high
    low, high = advice.optimal_interval
    assert low <= advice.optimal <= high


def test_advice_is_deterministic_with_a_seed(rollouts, projector, advice):
    rewards, scores = rule_rewards(rollouts), completion_scores(projector, rollouts, K)
    again = advise(rewards, scores, budget=16, resamples=200, seed=0)
    assert advice_record(again) == advice_record(advice)
    other = advise(rewards, scores, budget=16, resamples=200, seed=1)
    assert other.components == advice.components  # the point estimate does not use the seed
    assert other.relative_mse_interval != advice.relative_mse_interval


def test_report_json_and_png(advice, tmp_path):
    report = format_report(advice, current_group_size=4)
    assert f"G* = {advice.recommended}" in report and "(config)" in report
    record = json.loads(json.dumps(advice_record(advice)))
    assert record["recommended"] == advice.recommended and set(record["best_share"]) == {"2", "4", "8", "16"}
    path = plot_advice(advice, tmp_path / "advice.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main_end_to_end_on_the_tiny_model(tmp_path):
    # The random tiny model never answers correctly: with the accuracy reward alone (not the smoke config's length
    # reward) every reward is 0, so the advisor must say that it cannot tell group sizes apart (exit code 1) and
    # still record what it sampled.
    code = main(["--config", TINY_CONFIG, "--prompts", "2", "--samples-per-prompt", "4",
                 "--dim", "8", "--out", str(tmp_path),
                 "rollout.engine=hf", "rollout.max_tokens=6", "reward.num_workers=1", "reward.functions=[]"])
    assert code == 1
    record = json.loads((tmp_path / "advice.json").read_text())
    assert record["advice"] is None and record["prompts_with_mixed_rewards"] == 0
    assert record["prompts"] == 2 and record["samples_per_prompt"] == 4 and record["mean_reward"] == 0.0
