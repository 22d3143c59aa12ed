"""The online monitor's estimator (grpo_train/ustat/monitor.py) on the toy bandit of grpo_train/ustat/bandit.py, where
c1, c2, c3 are exact; its pooling and bootstrap; group_size auto's choices and their resume."""

import math

import pytest
import torch

from grpo_train.config import ConfigError, group_size_candidates, load_config
from grpo_train.ustat.bandit import exact_components, make_toy_bandit, sample_groups
from grpo_train.ustat.estimators import estimate_variance_components, prompt_moments
from grpo_train.ustat.monitor import (
    StepPrompts,
    UstatMonitor,
    bootstrap_weights,
    effective_prompts,
    estimate,
    pooled_components,
    step_prompts,
)


def bandit_steps(bandit, steps: int, prompts: int, group_size: int, seed: int = 0):
    """Steps of `prompts` uniformly drawn prompts with `group_size` completions: [(rewards, scores)]."""
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randint(bandit.features.shape[0], (steps * prompts,), generator=generator)
    rewards, scores = sample_groups(bandit, chosen, group_size, generator)
    return list(zip(rewards.split(prompts), scores.split(prompts), strict=True))


def test_one_step_pooled_is_the_advisors_estimate():
    bandit = make_toy_bandit()
    ((rewards, scores),) = bandit_steps(bandit, 1, 16, 8)
    c1, c2, c3 = (float(c[0]) for c in pooled_components([step_prompts(1, rewards, scores)]))
    want = estimate_variance_components(rewards, scores)
    assert (c1, c2, c3) == pytest.approx((want.between_prompt, want.first_order, want.second_order), rel=1e-9)


@pytest.mark.parametrize(("prompts", "group_size"), [(4, 8), (8, 4), (2, 16)])
def test_pooled_estimate_matches_the_exact_components_within_sampling_error(prompts, group_size):
    """Many small steps as the trainer sees them (B prompts of G completions each); every pooled component is
    a weighted mean of per-step estimates, so its standard error is their spread / sqrt(steps)."""
    bandit = make_toy_bandit()
    exact = exact_components(bandit)
    records = [step_prompts(s, r, sc) for s, (r, sc) in enumerate(bandit_steps(bandit, 1000, prompts, group_size))]
    pooled = [float(c[0]) for c in pooled_components(records)]
    per_step = torch.stack([torch.stack(pooled_components([r])).squeeze(1) for r in records])  # [steps, 3]
    stderr = per_step.std(dim=0) / math.sqrt(len(records))
    for name, got, want, se in zip(("c1", "c2", "c3"), pooled, (exact.between_prompt, exact.first_order,
                                                                  exact.second_order), stderr.tolist(), strict=True):
        assert abs(got - want) < 4 * se, f"{name}: {got:.5f} vs exact {want:.5f} (standard error {se:.5f})"
        assert se < 0.35 * abs(want)  # the check has power: the error bar is small next to the value


def test_bootstrap_intervals_cover_the_exact_values_at_their_level():
    """16 independent windows of 60 steps x 8 prompts x G = 8: the 90% intervals of c1, c2, c3 and G* each hold
    the exact value in at least 12 of them (the expected count is 14.4), and the point estimate picks the exact
    best G most of the time."""
    bandit = make_toy_bandit()
    exact = exact_components(bandit)
    want = {"c1": exact.between_prompt, "c2": exact.first_order, "c3": exact.second_order,
            "g_star": exact.optimal_group_size()}
    covered = dict.fromkeys(want, 0)
    best = []
    for replicate in range(16):
        steps = bandit_steps(bandit, 60, 8, 8, seed=100 + replicate)
        records = [step_prompts(s, r, sc) for s, (r, sc) in enumerate(steps)]
        est = estimate(records, budget=64, candidates=[2, 4, 8, 16, 32], resamples=200, level=0.9, seed=replicate)
        for name, value in want.items():
            covered[name] += getattr(est, name)[1] <= value <= getattr(est, name)[2]
        best.append(est.best)
    assert all(count >= 12 for count in covered.values()), covered
    assert best.count(8) >= 8, best  # exact G* ~ 7.4 on this bandit: 8 is the best candidate at N = 64


def test_equal_reward_groups_have_zero_moments_whatever_their_scores():
    rewards = torch.tensor([[1.0] * 6, [0.0] * 6])
    moments = prompt_moments(rewards, torch.randn(2, 6, 5, dtype=torch.float64))
    for value in (moments.kernel_sq, moments.overlap, moments.grad_sq, moments.u_stats):
        assert value.abs().max() < 1e-12


def test_bootstrap_weights_resample_within_each_step_and_unit_weights_give_the_point():
    bandit = make_toy_bandit()
    records = [step_prompts(s, r, sc) for s, (r, sc) in enumerate(bandit_steps(bandit, 3, 5, 4))]
    weights = bootstrap_weights(records, 7, torch.Generator().manual_seed(0))
    assert [w.shape for w in weights] == [(7, 5)] * 3 and all((w.sum(1) == 5).all() for w in weights)
    ones = [torch.ones(2, 5, dtype=torch.float64) for _ in records]
    unit = torch.stack(pooled_components(records, ones))[:, 0]
    assert torch.equal(unit, torch.stack(pooled_components(records))[:, 0])
    # A resample that draws one prompt five times has no pair of distinct prompts: no c1 from that step.
    single = [torch.tensor([[5.0, 0, 0, 0, 0]], dtype=torch.float64)]
    assert math.isnan(float(pooled_components(records[:1], single)[0][0]))


def test_step_prompts_json_round_trip():
    bandit = make_toy_bandit()
    ((rewards, scores),) = bandit_steps(bandit, 1, 3, 4)
    record = step_prompts(7, rewards, scores)
    back = StepPrompts.from_json(record.to_json())
    assert back.step == 7 and back.group_size == 4
    for name in ("first_order", "second_order", "grad_sq", "gram"):
        assert torch.equal(getattr(back, name), getattr(record, name))


def test_effective_prompts_is_the_participation_ratio():
    assert effective_prompts(torch.tensor([1.0, 1.0, 1.0, 0.0])) == pytest.approx(3.0)
    assert effective_prompts(torch.tensor([4.0, 0.0, 0.0])) == pytest.approx(1.0)
    assert effective_prompts(torch.zeros(3)) == 0.0


# ---------------------------------------------------------------------------------------------------
# group_size auto


def auto_config(*overrides):
    return load_config(None, ["algorithm.group_size=auto", "algorithm.rollouts_per_step=32",
                              "algorithm.group_size_every=3", "ustat.resamples=50", *overrides])


def bandit_observation(bandit, group_size: int, prompts: int, generator):
    chosen = torch.randint(bandit.features.shape[0], (prompts,), generator=generator)
    rewards, scores = sample_groups(bandit, chosen, group_size, generator)
    return rewards, scores, torch.ones(rewards.shape, dtype=torch.bool)


def run_monitor(cfg, steps: int, resume_at: int | None = None) -> tuple[list[int], list[dict]]:
    """The trainer's use of the monitor on the toy bandit; with resume_at, a new monitor continues from the state
    of the old one after that step (as a checkpoint would carry it). Returns G per step and each step's metrics."""
    bandit = make_toy_bandit(prompt_spread=1.0)  # prompts that differ: exact G* = 3.95, best G at N = 32 is 4
    monitor = UstatMonitor(cfg, world=1)
    trajectory, logged = [], []
    for step in range(1, steps + 1):
        monitor.choose_group_size(step)
        g = monitor.group_size
        generator = torch.Generator().manual_seed(step)  # the rollouts of a step depend only on the step
        logged.append(monitor.observe(step, *bandit_observation(bandit, g, monitor.prompts_per_step, generator)))
        trajectory.append(g)
        if step == resume_at:
            state = monitor.state_dict()
            monitor = UstatMonitor(cfg, world=1)
            monitor.load_state_dict(state)
    return trajectory, logged


def test_auto_chooses_by_predicted_mse_and_a_resumed_monitor_makes_the_same_choices():
    # `group_size: auto` starts at the default G = 8; the explicit flag keeps group_size as the start.
    assert auto_config().algorithm.group_size_auto and auto_config().algorithm.group_size == 8
    cfg = load_config(None, ["algorithm.group_size_auto=true", "algorithm.group_size=16",
                             "algorithm.prompts_per_step=2", "algorithm.group_size_every=3", "ustat.resamples=50"])
    assert cfg.algorithm.group_size_auto and UstatMonitor(cfg, world=1).budget == 32
    trajectory, logged = run_monitor(cfg, 13)
    assert trajectory[:3] == [16, 16, 16]  # the first choice is at step 4
    assert set(trajectory) <= {4, 8, 16} and trajectory[-1] < 16
    assert all(row["ustat/group_size"] == g for row, g in zip(logged, trajectory, strict=True))
    resumed, resumed_logged = run_monitor(cfg, 13, resume_at=7)
    assert resumed == trajectory and resumed_logged == logged


def test_the_choice_is_the_logged_best_group_size():
    cfg = auto_config()
    monitor = UstatMonitor(cfg, world=1)
    bandit = make_toy_bandit()
    generator = torch.Generator().manual_seed(0)
    for step in (1, 2, 3):
        metrics = monitor.observe(step, *bandit_observation(bandit, monitor.group_size, monitor.prompts_per_step,
                                                            generator))
    reason = monitor.choose_group_size(4)
    assert reason.startswith(f"step 4: G 8 -> {monitor.group_size}: predicted MSE / best")
    # The choice at step 4 uses the same window as the estimate logged at step 3 (its point estimate).
    assert monitor.group_size == metrics["ustat/best_group_size"]
    assert monitor.choices[-1]["group_size"] == monitor.group_size


def test_group_size_candidates_and_impossible_combinations():
    assert group_size_candidates(auto_config().algorithm) == [4, 8, 16]
    assert group_size_candidates(auto_config().algorithm, world=4) == [4, 8]  # B = 32 / 16 = 2 prompts on 4 ranks
    assert group_size_candidates(auto_config("algorithm.group_size_max=8").algorithm) == [4, 8]
    bad = [
        (["algorithm.rollouts_per_step=30", "algorithm.group_size_min=7", "algorithm.group_size_max=9"],
         "algorithm.group_size_min: no group size"),
        (["algorithm.rollouts_per_step=12", "algorithm.mini_batches=5"], "algorithm.mini_batches"),
        (["algorithm.group_size_every=0"], "algorithm.group_size_every"),
    ]
    for overrides, message in bad:
        with pytest.raises(ConfigError, match=message):
            auto_config(*overrides)
    with pytest.raises(ConfigError, match="algorithm.rollouts_per_step: 48 is used only with group_size auto"):
        load_config(None, ["algorithm.rollouts_per_step=48"])
    with pytest.raises(ConfigError, match="algorithm.dynamic_sampling: 'always'"):
        load_config(None, ["algorithm.dynamic_sampling=always"])
    with pytest.raises(ConfigError, match="algorithm.mini_batches: 3 must divide every group size"):
        load_config(None, ["algorithm.dynamic_sampling=filter", "algorithm.mini_batches=3",
                           "algorithm.prompts_per_step=3"])
    with pytest.raises(ConfigError, match="ustat.enabled: does not work with model.gradient_checkpointing"):
        load_config(None, ["ustat.enabled=true", "model.gradient_checkpointing=true"])
    with pytest.raises(ConfigError, match="ustat.projection: down_proj sits in the compiled MLP"):
        load_config(None, ["ustat.enabled=true", "ustat.projection=down_proj", "learner.compile=true"])
