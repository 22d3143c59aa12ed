"""rollout.max_staleness auto (grpo_train/pace.py): the weight moments of the drift model against sampling, the drift
fit, the choice of (G, k) with its hysteresis and its state, and the pool's bound in force (over the model-free
engine of tests/test_rollout_pool.py). The trainer with it: tests/test_async.py."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_rollout_pool import RandomLengthEngine, problems, train_steps

import grpo_train.pace as pace_module
from grpo_train.config import load_config
from grpo_train.pace import Drift, Pace, lognormal_weight_moments, mixed_weight_moments
from grpo_train.rollout import RolloutPool, SamplingSpec, staleness
from grpo_train.rollout.step_cost import PhaseWork, age_shares, nonnegative_fit, pool_phases
from grpo_train.ustat.estimators import VarianceComponents
from grpo_train.ustat.staleness import capped_weights


@pytest.mark.parametrize("variance, cap", [(0.02, 2.0), (0.3, 2.0), (1.0, 1.5), (0.3, None), (0.0, 2.0)])
def test_lognormal_weight_moments_match_sampled_weights(variance, cap):
    """m2 = E min(w, C)^2 and rho = E (w - C)+ of mean-one lognormal weights, closed form against 4M draws."""
    generator = torch.Generator().manual_seed(0)
    log_w = torch.randn(4_000_000, generator=generator, dtype=torch.float64) * math.sqrt(variance) - variance / 2
    capped, excess = capped_weights(log_w.exp(), cap)
    moments = lognormal_weight_moments(variance, cap)
    assert moments.mean_sq == pytest.approx(float(capped.square().mean()), rel=5e-3, abs=1e-6)
    assert moments.removed == pytest.approx(float(excess.mean()), rel=2e-2, abs=1e-4)
    if cap is not None and variance > 0.1:
        assert moments.removed > 0  # the cap removes mass, so the prediction carries a bias


def test_mixed_weight_moments_weigh_each_age_by_its_share():
    parts = [lognormal_weight_moments(v, 2.0) for v in (0.01, 0.2, 0.6)]
    mixed = mixed_weight_moments([0.01, 0.2, 0.6], np.array([0.5, 0.3, 0.2]), 2.0)
    assert mixed.mean_sq == pytest.approx(0.5 * parts[0].mean_sq + 0.3 * parts[1].mean_sq + 0.2 * parts[2].mean_sq)
    assert mixed.ess_fraction < parts[0].ess_fraction  # staler tokens spread the weights


def stats(per_age: dict[int, tuple[float, float]]) -> dict[str, float]:
    """The update's log-ratio moments by age from (mean, variance) per age."""
    out = {}
    for age, (mean, var) in per_age.items():
        out[f"behaviour_log_ratio/{age}"] = mean
        out[f"behaviour_log_ratio_sq/{age}"] = var + mean * mean
    return out


def test_drift_fits_the_variance_by_age_and_keeps_its_slope_through_a_stretch_at_k_0():
    drift = Drift(ages=3)
    assert drift.fit() is None
    for _ in range(5):
        drift.observe(stats({0: (-0.001, 0.002), 1: (-0.02, 0.002 + 0.05), 2: (-0.1, 0.002 + 4 * 0.05)}))
    v0, d = drift.fit()
    assert v0 == pytest.approx(0.002, abs=1e-9) and d == pytest.approx(0.05)
    later = Drift(ages=3, window=4)
    later.load_state_dict(drift.state_dict())
    for _ in range(6):  # k = 0: only fresh tokens, with a new mismatch; the window forgets the stale ages
        later.observe(stats({0: (0.0, 0.004)}))
    assert later.fit() == pytest.approx((0.004, 0.05))


def test_nonnegative_fit_never_gives_a_negative_cost():
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.integers(10, 40, 30), rng.integers(100, 400, 30), np.zeros(30) + 1.0]).astype(float)
    y = 0.01 * x[:, 0] + 0.0 * x[:, 1] + 0.05 + rng.normal(0, 0.02, 30)
    coef, _ = nonnegative_fit(x, y)
    assert (coef >= 0).all() and coef[0] == pytest.approx(0.01, rel=0.3)
    exact = x @ np.array([0.02, 0.001, 0.1])
    assert nonnegative_fit(x, exact)[0] == pytest.approx([0.02, 0.001, 0.1])


def test_age_shares_follow_the_pools_rule():
    shares = age_shares([5, 10, 40, 80], 8, [0, 1, 2])
    assert shares[0].tolist() == [1.0]
    assert all(s.sum() == pytest.approx(1) and len(s) == k + 1 for k, s in shares.items())
    assert shares[2][2] > 0 and shares[1][1] > 0  # some tokens are generated ahead of their step
    lengths = np.array([[2, 5], [3, 1], [4, 4]])
    ages = pool_phases(lengths, 1)["age_tokens"]
    assert ages.sum() == lengths.sum()  # every token once, at one age
    assert ages[0].tolist() == [7, 4]  # phase 1: the batch due at 1 whole, 4 tokens of the batch due at 2 ahead


# ----------------------------------------------------------------------------------------------------
# The choice, over stand-ins for the monitor and the rounds (the pool is real)
class Monitor:
    """What the pace reads of UstatMonitor: its G in force, N, the candidates and the window's constants."""

    group_size, budget, candidates = 4, 16, [4, 8]

    @property
    def prompts_per_step(self) -> int:
        return self.budget // self.group_size

    def components(self):
        return VarianceComponents(0.1, 1.0, 2.0), 0.5


def pace_and_parts(margin: float = 0.1, group_size_auto: bool = False, tis_cap: float = 2.0):
    overrides = ["rollout.max_staleness=auto", f"rollout.max_staleness_margin={margin}", f"algorithm.tis_cap={tis_cap}",
                 "rollout.max_staleness_every=2", f"algorithm.group_size_auto={str(group_size_auto).lower()}",
                 "algorithm.prompts_per_step=4", "algorithm.group_size=4"]
    cfg = load_config("configs/tiny-cpu.yaml", overrides)
    pace = Pace(cfg)
    pool = RolloutPool(RandomLengthEngine(), SamplingSpec(n=4, temperature=1.0, max_tokens=40), 4, 4, 2)
    monitor = Monitor()
    resized = []
    rounds = SimpleNamespace(pool=pool, tools=SimpleNamespace(engine_ranks=SimpleNamespace(count=1)),
                             resize=lambda g, b, step: resized.append((g, b, step)) or " (resized)")
    return pace, monitor, rounds, resized


def feed(pace, monitor, steps: int, k: int, decode_s: float, variance_per_age: float, learner_s: float = 0.2,
         noise: float = 0.0, seed: int | None = None):
    """Steps at bound k whose phases cost decode_s per decode step (+ 1 ms per token, 5 ms per resumed request) on
    long-tailed lengths, with log-ratio variance variance_per_age x age^2 at each age; `noise`: each phase's seconds
    times 1 + noise x a standard normal draw."""
    rng = np.random.default_rng(k if seed is None else seed)
    for _ in range(steps):
        lengths = [int(n) for n in rng.choice([4, 6, 8, 60], size=16)]
        decode = max(lengths) if k == 0 else int(rng.integers(10, 60))
        resumed = 0 if k == 0 else int(rng.integers(0, 8))
        rollout_s = decode_s * decode + 0.001 * sum(lengths) + 0.005 * resumed + 0.01
        if noise:
            rollout_s *= 1 + noise * rng.standard_normal()
        phase = SimpleNamespace(engine_steps=decode, tokens=sum(lengths), resumed=resumed, seconds=rollout_s)
        seconds = {"step": rollout_s + learner_s, "rollout": rollout_s}
        moments = stats({a: (-variance_per_age * a * a / 2, 1e-4 + variance_per_age * a * a) for a in range(k + 1)})
        pace.observe(0, monitor, phase, lengths, seconds, {**moments, "trained_seq_frac": 1.0})


def test_the_choice_weighs_time_against_the_weights_spread_with_hysteresis():
    pace, monitor, rounds, _ = pace_and_parts()
    assert pace.k == 1
    assert pace.choose(1, monitor, rounds) is None and rounds.pool.bound == 1  # the start: k = 1 in force
    assert "no prediction yet" in pace.choose(3, monitor, rounds) and pace.k == 1
    feed(pace, monitor, 12, 1, decode_s=0.02, variance_per_age=0.001)  # decode steps dear, stale weights near 1
    line = pace.choose(5, monitor, rounds)
    assert pace.k == 2 and rounds.pool.bound == 2, line  # fewer decode steps a phase, nearly the same MSE
    assert pace.choices[-1] == {"step": 5, "k": 2, "group_size": 4, "reason": line}

    # The policy moves fast and a loose cap (10) keeps most of the stale weights' spread: MSE x2.2 at k = 1 costs
    # more than its 0.66x step time buys. (Under a tight cap the weights shrink the gradient instead: less
    # variance, a bias.)
    slow, monitor, rounds, _ = pace_and_parts(tis_cap=10.0)
    feed(slow, monitor, 12, 1, decode_s=0.02, variance_per_age=3.0)
    slow.choose(3, monitor, rounds)
    assert slow.k == 0 and rounds.pool.bound == 0

    # The same case as the first with a 90% margin, after a first choice with predictions (the start at k = 1 is a
    # measurement: that first choice takes the best whatever the margin).
    sticky, monitor, rounds, _ = pace_and_parts(margin=0.9)
    feed(sticky, monitor, 12, 1, decode_s=0.02, variance_per_age=0.001)
    assert "the first choice with predictions" in sticky.choose(3, monitor, rounds) and sticky.k == 2
    sticky.k = 1
    assert "within the 90% margin" in sticky.choose(5, monitor, rounds) and sticky.k == 1


def test_a_larger_k_must_beat_the_smaller_ones_in_most_resamples(monkeypatch):
    """Phases whose seconds scatter by 30% around a cost where merging decode steps saves ~10%: the point forecast
    ranks k = 2 first, but resamples of the same steps and phases put it ahead of k = 0 and k = 1 in under 90% of
    draws, so the fresher k = 0 is kept; the same steps without the scatter earn k = 2."""
    pace, monitor, rounds, _ = pace_and_parts()
    feed(pace, monitor, 12, 1, decode_s=0.002, variance_per_age=0.001, noise=0.3, seed=106)
    found = pace.candidates(monitor, 16)
    assert min(found, key=lambda c: c.score).k == 2
    earned = pace.earned(found, 16, step=3)
    assert earned[4, 0] == 1.0 and 0.5 < earned[4, 2] < pace_module.PACE_CONFIDENCE
    line = pace.choose(3, monitor, rounds)
    assert pace.k == 0 and f"beats k < 2 in {earned[4, 2]:.0%}" in line, line
    phase = SimpleNamespace(engine_steps=40, tokens=200, resumed=0, seconds=0.3)
    logged = [pace.observe(3 + i, monitor, phase, [10] * 16, {"step": 0.5, "rollout": 0.3}, {}) for i in range(2)]
    assert {key: v for key, v in logged[0].items() if key.startswith("pace/earned/")} == {
        f"pace/earned/{k}": earned[4, k] for k in (0, 1, 2)}
    assert not any(key.startswith("pace/earned/") for key in logged[1])  # the choice's step only
    monkeypatch.setattr(pace_module, "PACE_CONFIDENCE", 0.0)  # the point forecast alone: k = 2
    unsure, monitor, rounds, _ = pace_and_parts()
    feed(unsure, monitor, 12, 1, decode_s=0.002, variance_per_age=0.001, noise=0.3, seed=106)
    unsure.choose(3, monitor, rounds)
    assert unsure.k == 2
    monkeypatch.undo()
    sure, monitor, rounds, _ = pace_and_parts()
    feed(sure, monitor, 12, 1, decode_s=0.002, variance_per_age=0.001, seed=106)
    sure.choose(3, monitor, rounds)
    assert sure.k == 2 and min(sure.earned(sure.candidates(monitor, 16), 16, step=3).values()) >= 0.9


def test_with_group_size_auto_the_pace_chooses_g_too_and_resizes_the_pool():
    pace, monitor, rounds, resized = pace_and_parts(group_size_auto=True)
    monitor.components = lambda: (VarianceComponents(0.001, 1.0, 20.0), 0.5)  # G* = 1 + sqrt(20000): the largest G
    feed(pace, monitor, 12, 1, decode_s=0.02, variance_per_age=0.001)
    line = pace.choose(3, monitor, rounds)
    assert monitor.group_size == 8 and resized == [(8, 2, 3)] and line.endswith("(resized)")


def test_the_pace_state_restores_its_predictions_and_choices():
    pace, monitor, rounds, _ = pace_and_parts()
    feed(pace, monitor, 10, 1, decode_s=0.02, variance_per_age=0.01)
    pace.choose(3, monitor, rounds)
    restored, *_ = pace_and_parts()
    restored.load_state_dict(pace.state_dict())
    assert restored.k == pace.k and restored.choices == pace.choices
    assert restored.candidates(monitor, 16) == pace.candidates(monitor, 16)
    assert restored.cost.checks["step"].errors == pace.cost.checks["step"].errors
    assert list(restored.cost.bounds) == list(pace.cost.bounds) == [1, 1, 1]
    model = pace.cost.checks["model"]
    assert model.errors and restored.cost.checks["model"].errors == model.errors
    interval = pace.cost.checks["interval"]  # the forecast over a choice's interval (every 2 steps here)
    assert interval.errors and restored.cost.checks["interval"].pairs == interval.pairs
    assert restored.cost.interval == pace.cost.interval == pace.every
    assert restored.cost.learner_line() == pace.cost.learner_line() is not None
    # A state written before the learner's trained tokens were kept: (learner_s, sync_s) pairs, no "model" check.
    old = pace.state_dict()
    old["learner"] = [x[:2] for x in old["learner"]]
    del old["checks"]["model"], old["checks"]["interval"]
    legacy, *_ = pace_and_parts()
    legacy.load_state_dict(old)
    assert legacy.candidates(monitor, 16) == pace.candidates(monitor, 16) and legacy.cost.learner_line() is None


def test_the_first_step_of_a_process_stays_out_of_the_windows():
    pace, monitor, _, _ = pace_and_parts()
    phase = SimpleNamespace(engine_steps=10, tokens=40, resumed=0, seconds=5.0)
    assert pace.observe(1, monitor, phase, [10] * 4, {"step": 9.0, "rollout": 5.0}, {}) == {"pace/k": 1.0}
    assert not pace.cost.lengths and not pace.drift.steps
    pace.observe(2, monitor, phase, [10] * 4, {"step": 1.0, "rollout": 0.5}, {})
    assert list(pace.cost.phase_cost.phases) == [PhaseWork(10, 40, 0, 5.0)]


def test_a_lower_bound_applies_to_new_groups_and_k_0_trains_each_steps_own_groups():
    pool = RolloutPool(RandomLengthEngine(16), SamplingSpec(n=4, temperature=1.0, max_tokens=40), 4, 2, 2)
    data = problems(100)
    out = train_steps(pool, range(1, 5), data)  # k = 2: 3 batches in flight
    assert len(pool.groups) == 4
    pool.set_bound(0)
    out += train_steps(pool, range(5, 10), data)
    for step, due, _ in out[4:]:
        ages = [a for g in due for a in staleness(g.rollouts(0), step - 1)]
        assert max(ages) <= 2  # those admitted under k = 2 keep their deadlines
        if step >= 7:  # admitted at k = 0: generated at their own step
            assert max(ages) == 0
    assert not pool.groups  # nothing in flight at k = 0
    pool.set_bound(1)
    train_steps(pool, range(10, 12), data)
    assert len(pool.groups) == 2
    with pytest.raises(ValueError, match="outside 0 .. 2"):
        pool.set_bound(3)


def test_config_max_staleness_auto():
    cfg = load_config("configs/tiny-cpu.yaml", ["rollout.max_staleness=auto", "rollout.max_staleness_max=3"])
    assert cfg.rollout.max_staleness_auto and cfg.rollout.max_staleness == 3 and cfg.algorithm.tis_cap == 2.0
    assert cfg.ustat.enabled is False  # the monitor runs anyway (ustat_monitor_on)
    with pytest.raises(Exception, match="write `max_staleness: auto`"):
        load_config("configs/tiny-cpu.yaml", ["rollout.max_staleness_auto=true"])
    with pytest.raises(Exception, match="placement colocated"):
        load_config("configs/tiny-cpu.yaml", ["rollout.max_staleness=auto", "rollout.placement=servers"])
    off = load_config("configs/tiny-cpu.yaml", [])
    assert not off.rollout.max_staleness_auto and off.rollout.max_staleness == 0


def test_a_hiccup_does_not_move_the_phase_fit_and_k_1_without_resumes_still_predicts_k_2():
    """A phase slowed 10x by another job is left out of the fit; a run at k = 1 whose completions all finished in
    their phase (nothing resumed) still predicts every k (a resumed request priced as one decode step)."""
    pace, monitor, rounds, _ = pace_and_parts()
    rng = np.random.default_rng(0)
    for i in range(14):
        lengths = [int(n) for n in rng.choice([4, 6, 8, 60], size=16)]
        decode = int(rng.integers(20, 60))
        rollout_s = 0.02 * decode + 0.001 * sum(lengths) + 0.01
        if i == 9:
            rollout_s *= 10  # a hiccup
        phase = SimpleNamespace(engine_steps=decode, tokens=sum(lengths), resumed=0, seconds=rollout_s)
        pace.observe(0, monitor, phase, lengths, {"step": rollout_s + 0.2, "rollout": rollout_s},
                     stats({0: (0.0, 1e-4), 1: (-0.001, 0.002)}))
    fit = pace.cost.phase_cost.fit()
    assert fit.coefficients["decode_step_s"] == pytest.approx(0.02, rel=1e-6)
    assert fit.coefficients["resumed_s"] == pytest.approx(0.02, rel=1e-6)  # from the prior: one decode step
    assert {c.k for c in pace.candidates(monitor, 16)} == {0, 1, 2}
