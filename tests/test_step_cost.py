"""The cost side of rollout.max_staleness auto (grpo_train/rollout/step_cost.py): the online phase-cost fit, the work
a phase does at k from completion lengths (by hand, and against the rollout pool itself over an engine of known
lengths), the predicted step at each k, and the bookkeeping of predicted against measured."""

import statistics

import numpy as np
import pytest

from grpo_train.data import Problem
from grpo_train.rollout import RolloutPool, SamplingSpec, StreamDelta, StreamRequest
from grpo_train.rollout.step_cost import (
    TERMS,
    PhaseCost,
    PhaseWork,
    RelativeErrors,
    StepCost,
    least_squares,
    phase_work,
    pool_phases,
    steady_state,
    steady_states,
)

TRUE = {"decode_step_s": 0.015, "token_s": 0.0009, "resumed_s": 0.008, "constant_s": 0.1}  # a CPU's, roughly


def _seconds(decode_steps: float, tokens: float, resumed: float, cost: dict = TRUE) -> float:
    return (cost["decode_step_s"] * decode_steps + cost["token_s"] * tokens + cost["resumed_s"] * resumed
            + cost["constant_s"])


def _phases(n: int, seed: int = 0, noise: float = 0.0, resumes: bool = True, cost: dict = TRUE) -> list[PhaseWork]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        d, t, r = int(rng.integers(20, 200)), int(rng.integers(800, 3000)), int(rng.integers(0, 40)) if resumes else 0
        out.append(PhaseWork(d, t, r, _seconds(d, t, r, cost) * (1 + noise * rng.standard_normal())))
    return out


def test_the_fit_recovers_known_constants_exactly_without_noise_and_within_tolerance_with_it():
    cost = PhaseCost(window=64)
    for work in _phases(30):
        cost.observe(work)
    fit = cost.fit()
    assert fit.source == "fit" and fit.phases == 30 and fit.r2 == pytest.approx(1.0)
    for term in TERMS:
        assert fit.coefficients[term] == pytest.approx(TRUE[term], rel=1e-9)
    assert fit.seconds(100, 2000, 10) == pytest.approx(_seconds(100, 2000, 10), rel=1e-9)

    noisy = PhaseCost(window=400)
    for work in _phases(400, seed=1, noise=0.02):
        noisy.observe(work)
    fit = noisy.fit()
    assert 0.9 < fit.r2 < 1.0
    for term, tolerance in (("decode_step_s", 0.05), ("token_s", 0.05), ("resumed_s", 0.15), ("constant_s", 0.3)):
        assert fit.coefficients[term] == pytest.approx(TRUE[term], rel=tolerance), term
    assert fit.seconds(100, 2000, 10) == pytest.approx(_seconds(100, 2000, 10), rel=0.01)


def test_the_fit_follows_the_run_through_its_window():
    """Phases older than the window leave the fit: a machine that became twice as slow is refitted."""
    cost = PhaseCost(window=20)
    for work in _phases(50, cost={term: 2 * c for term, c in TRUE.items()}) + _phases(20, seed=2):
        cost.observe(work)
    assert cost.fit().coefficients["decode_step_s"] == pytest.approx(TRUE["decode_step_s"], rel=1e-9)


def test_too_few_phases_or_terms_that_move_together_give_none_or_the_prior():
    cost = PhaseCost(window=64)
    assert cost.fit() is None
    for work in _phases(4):  # as many phases as terms: not determined
        cost.observe(work)
    assert cost.fit() is None
    cost.observe(_phases(5)[4])
    assert cost.fit().source == "fit"

    prior = {term: 2 * c for term, c in TRUE.items()}
    with_prior = PhaseCost(window=64, prior=prior)
    for work in _phases(4):
        with_prior.observe(work)
    assert with_prior.fit().source == "prior" and with_prior.fit().coefficients == prior

    # every phase decoded to max_tokens: the decode steps are the constant's; nothing is determined
    limit = PhaseCost(window=64)
    for t in (1000, 1200, 1500, 1700, 2000, 2100):
        limit.observe(PhaseWork(256, t, 0, _seconds(256, t, 0)))
    assert limit.fit() is None
    assert least_squares(np.array([[256, t, 1] for t in (1000, 1200, 1500, 1700)]), np.ones(4)) is None

    # k = 0 only: nothing resumed, so a resumed request's cost is unknown (the prior's, if given)
    sync = PhaseCost(window=64)
    for work in _phases(10, resumes=False):
        sync.observe(work)
    fit = sync.fit()
    assert fit.coefficients["resumed_s"] is None and fit.coefficients["token_s"] == pytest.approx(TRUE["token_s"])
    assert fit.seconds(100, 2000, 0) == pytest.approx(_seconds(100, 2000, 0)) and fit.seconds(100, 2000, 5) is None
    sync.prior = prior
    assert sync.fit().coefficients["resumed_s"] == prior["resumed_s"]
    assert sync.fit().coefficients["decode_step_s"] == pytest.approx(TRUE["decode_step_s"])  # fitted, not the prior's

    with pytest.raises(ValueError, match="every one"):
        PhaseCost(prior={"token_s": 1.0})


LENGTHS = np.array([[3, 1], [4, 2], [1, 1], [5, 2], [2, 2]])  # the batch due at step i + 1: C = 2 completions


def test_a_phases_work_at_k_worked_by_hand():
    sync = pool_phases(LENGTHS, 0)  # each step decodes to its longest, nothing carried over
    assert sync["decode_steps"].tolist() == [3, 4, 1, 5, 2] and sync["tokens"].tolist() == [4, 6, 2, 7, 4]
    assert sync["resumed"].tolist() == [0] * 5
    # k = 1. Step 1 admits the batches due at 1 and 2 and runs until [3, 1] is complete: 3 decode steps, 3 + 1 tokens
    # for it and 3 + 2 for [4, 2], which stops at 3 of 4. Step 2 (admits [5, 2]'s predecessor [1, 1], due 3): the
    # 4 resumes with its 3-token prefix, 1 decode step, 1 token for it and 1 + 1 for [1, 1], now complete. Step 3:
    # its batch is complete, 0 decode steps ([5, 2], admitted, gets nothing). Step 4: [5, 2] and [2, 2] from
    # scratch, 5 decode steps, 7 + 4 tokens, both complete; step 5: 0.
    pooled = pool_phases(LENGTHS, 1)
    assert pooled["decode_steps"].tolist() == [3, 1, 0, 5, 0]
    assert pooled["tokens"].tolist() == [9, 3, 0, 11, 0] and pooled["resumed"].tolist() == [0, 1, 0, 0, 0]
    assert pooled["resumed_tokens"].tolist() == [0, 3, 0, 0, 0]
    assert pooled["tokens"].sum() == sync["tokens"].sum() == LENGTHS.sum()  # every completion decoded once
    assert PhaseWork.generate([3, 1], 2.0) == PhaseWork(3, 4, 0, 2.0)


class FixedLengthEngine:
    """A StreamingEngine without a model whose completion (group number, j) has the length `table` gives it; every
    running request advances one token per step (no batch limit), and a resumed one goes on from its prefix."""

    def __init__(self, table: dict[tuple[int, int], int]) -> None:
        self.table, self.left = table, {}

    def add_requests(self, requests: list[StreamRequest]) -> None:
        for r in requests:
            _, number, j, _ = r.request_id.split("-")
            self.left[r.request_id] = self.table[int(number), int(j)] - (len(r.token_ids) - 1)  # prompt: 1 token
            assert self.left[r.request_id] > 0

    def step(self) -> list[StreamDelta]:
        deltas = []
        for request_id in list(self.left):
            self.left[request_id] -= 1
            deltas.append(StreamDelta(request_id, [1], [-0.5], "stop" if self.left[request_id] == 0 else None))
            if not self.left[request_id]:
                del self.left[request_id]
        return deltas

    def abort(self, request_ids: list[str]) -> None:
        for request_id in request_ids:
            del self.left[request_id]


@pytest.mark.parametrize("k, groups, group_size", [(1, 2, 3), (2, 1, 4), (3, 3, 2)])
def test_the_work_at_k_is_the_rollout_pools(k, groups, group_size):
    """pool_phases against RolloutPool itself (admitted as the trainer admits: k + 1 batches at step 1, then one)."""
    steps, per_step = 14, groups * group_size
    lengths = np.random.default_rng(k).geometric(1 / 8, size=(steps + k, per_step))
    table = {(number, j): int(lengths[number // groups][(number % groups) * group_size + j])
             for number in range((steps + k) * groups) for j in range(group_size)}
    pool = RolloutPool(FixedLengthEngine(table), SamplingSpec(n=group_size, temperature=1.0, max_tokens=10_000),
                       group_size=group_size, groups_per_step=groups, max_staleness=k)
    measured = []
    for step in range(1, steps + 1):
        free = sum(pool.open_slots(step).values())
        numbers = range(pool.admitted, pool.admitted + free)
        pool.admit([Problem(f"p{n}", "q", "1", "gsm8k") for n in numbers], [[n] for n in numbers], step, seed=step)
        _, phase = pool.run(step)
        measured.append((phase.engine_steps, phase.tokens, phase.resumed, phase.resumed_tokens))
    simulated = pool_phases(lengths, k)
    assert measured == [tuple(int(simulated[key][s]) for key in ("decode_steps", "tokens", "resumed",
                                                                   "resumed_tokens")) for s in range(steps)]
    assert any(m[2] for m in measured) and any(m[0] == 0 for m in measured)  # resumes and empty phases both seen


def test_equal_lengths_merge_k_plus_one_steps_into_one_phase():
    """With equal lengths L nothing is paused part-way: the pool decodes k + 1 steps' batches together in one phase
    of L decode steps, then k empty ones: L / (k + 1) decode steps a phase, the same tokens a step, nothing
    resumed. The predicted time is flat in k when a decode step costs nothing beyond its tokens."""
    work = phase_work([40] * 10, 16, range(5))
    for k, w in work.items():
        assert (w.decode_steps, w.tokens, w.resumed) == (pytest.approx(40 / (k + 1)), 16 * 40, 0), k
    cost = StepCost(k_max=4, prior={**TRUE, "decode_step_s": 0.0})
    cost.observe(0, PhaseWork.generate([40] * 16, 1.0), [40] * 16, learner_s=3.0, step_s=4.0)
    predicted = cost.predict(16)
    assert all(predicted[k] == pytest.approx(predicted[0]) for k in range(5))
    assert predicted[0] == pytest.approx(_seconds(0, 16 * 40, 0) + 3.0)


def _long_tail(n: int, seed: int = 0) -> list[int]:
    """Most completions stop near 30 tokens, one in eight runs on towards the 256-token limit."""
    rng = np.random.default_rng(seed)
    return np.where(rng.random(n) < 0.125, rng.integers(100, 257, n), rng.integers(10, 50, n)).tolist()


def test_the_work_at_k_is_the_steady_states_not_the_lockstep_start():
    """The pool starts with k + 1 fresh batches in lockstep, and its first ~10 (k + 1) phases decode longer: the
    phases averaged (here 20, over 30 draws) come after them, as in a long run's."""
    lengths = _long_tail(4000, 3)
    phases = pool_phases(np.random.default_rng(99).choice(lengths, size=(20000, 8)), 4)["decode_steps"]
    run = phases[1000:].mean()
    short = np.mean([phase_work(lengths, 8, [4], steps=20, seed=seed)[4].decode_steps for seed in range(30)])
    assert short == pytest.approx(run, rel=0.05)
    assert phases[:20].mean() > 1.05 * run  # the start, for comparison


GPU = {"decode_step_s": 0.02, "token_s": 0.00002, "resumed_s": 0.002, "constant_s": 0.05}  # a step's fixed cost rules


def _run_at(cost: StepCost, k: int, steps: int, coefficients: dict, seed: int = 0, completions: int = 32) -> None:
    """Steps at k measured exactly by `coefficients` (phases from pool_phases over fresh long-tailed batches)."""
    lengths = np.array(_long_tail((steps + k) * completions, seed)).reshape(steps + k, completions)
    phases = pool_phases(lengths, k)
    for s in range(steps):
        d, t, r = (int(phases[key][s]) for key in ("decode_steps", "tokens", "resumed"))
        rollout_s = _seconds(d, t, r, coefficients)
        cost.observe(k, PhaseWork(d, t, r, rollout_s), lengths[s].tolist(), learner_s=2.0, step_s=rollout_s + 2.0,
                     sync_s=0.5)


def test_the_predicted_step_falls_with_k_on_a_long_tail_where_decode_steps_cost_and_can_rise_where_resumes_do():
    cost = StepCost(k_max=4, window=64)
    _run_at(cost, 0, 20, GPU)
    _run_at(cost, 1, 20, GPU, seed=1)  # resumes seen: every term determined
    assert cost.phase_cost.fit().coefficients["resumed_s"] == pytest.approx(GPU["resumed_s"], rel=1e-6)
    predicted = cost.predict(32)
    work = phase_work([n for step in cost.lengths for n in step], 32, range(5))
    assert all(work[k + 1].decode_steps < work[k].decode_steps for k in range(4))
    assert all(predicted[k + 1] <= predicted[k] for k in range(4)), predicted
    assert predicted[1] < 0.8 * predicted[0]

    # a resumed request as dear as 25 decode steps: k = 1's resumes cost more than its decode steps save
    dear = StepCost(k_max=2, window=64)
    _run_at(dear, 0, 20, {**GPU, "resumed_s": 0.5})
    _run_at(dear, 1, 20, {**GPU, "resumed_s": 0.5}, seed=1)
    assert dear.predict(32)[1] > dear.predict(32)[0]


def test_rollout_servers_overlap_generation_with_the_learners_passes_but_not_the_weight_push():
    cost = StepCost(k_max=2, window=64, overlap=True)
    _run_at(cost, 0, 12, GPU)
    _run_at(cost, 1, 12, GPU, seed=1)
    rollout = cost.predict_rollout(32)
    step = cost.predict(32)
    assert step[0] == pytest.approx(rollout[0] + 2.0)  # k = 0: synchronous, nothing overlaps
    for k in (1, 2):  # learner 2.0 s of which the push 0.5 s
        assert step[k] == pytest.approx(0.5 + max(rollout[k], 1.5))
    colocated = StepCost(k_max=2, window=64)
    colocated.phase_cost, colocated.lengths, colocated.learner = cost.phase_cost, cost.lengths, cost.learner
    assert colocated.predict(32)[1] == pytest.approx(rollout[1] + 2.0) and colocated.predict(32)[1] > step[1]


def test_each_step_is_checked_against_the_prediction_from_the_steps_before():
    primed = StepCost(k_max=1, prior=TRUE)  # a prediction needs the lengths of a step before, even with a prior
    assert primed.observe(0, PhaseWork.generate([7, 7], 1.0), [7, 7], learner_s=2.0, step_s=3.0) is None
    assert primed.observe(0, PhaseWork.generate([7, 7], 1.0), [7, 7], learner_s=2.0, step_s=3.0) == pytest.approx(
        (_seconds(7, 14, 0) + 2.0) / 3.0 - 1)
    cost = StepCost(k_max=2, window=64)
    assert cost.observe(0, PhaseWork.generate([5, 9], 1.0), [5, 9], learner_s=2.0, step_s=3.0) is None
    assert cost.checks["step"].missing == cost.checks["rollout"].missing == 1 and cost.predict(2) is None
    medians = []
    for k in range(3):  # steps measured exactly by the fitted line: what is left is each step's draw of lengths
        errors = len(cost.checks["step"].errors)
        _run_at(cost, k, 40, GPU, seed=k)
        medians.append(statistics.median(abs(e) for e in cost.checks["step"].errors[errors:]))
    step = cost.checks["step"]
    assert len(step.errors) > 100 and step.missing < 20  # a prediction once the fit was determined (and settled)
    assert max(medians) < 0.1 and step.median() < 0.1 and abs(step.bias()) < 0.05
    assert cost.checks["rollout"].median() > step.median() > 0  # the learner's 2 s dilute the rollout's error


def test_the_steps_of_a_change_of_bound_are_not_checked():
    """1 -> 0: the first step at k = 0 trains groups admitted under k = 1 (unchecked), the next is k = 0's own;
    0 -> 2: the pool fills in one long phase, so the first K + 1 = 3 steps and every span of 3 holding one of them
    go unchecked, and the fifth step at k = 2 is checked again. Each unchecked step counts as missing."""
    cost = StepCost(k_max=2, window=64)
    _run_at(cost, 1, 12, GPU)
    checked = []
    for k, steps in ((0, 3), (2, 5)):
        for _ in range(steps):
            before = cost.checks["step"].missing
            _run_at(cost, k, 1, GPU, seed=len(cost.lengths))
            checked.append(cost.checks["step"].missing == before)
            assert (cost.checks["step"].last is None) == (not checked[-1])
            assert (cost.checks["model"].last is None) or checked[-1]
    assert checked == [False, True, True, False, False, False, False, True]


def test_the_relative_errors_median_bias_and_span():
    log = RelativeErrors()
    assert log.median() is None and log.bias() is None
    assert log.add(11.0, 10.0) == pytest.approx(0.1)
    assert log.add(None, 10.0) is None and log.missing == 1
    for predicted in (8.0, 10.5, 13.0):
        log.add(predicted, 10.0)
    assert log.errors == pytest.approx([0.1, -0.2, 0.05, 0.3])
    assert log.median() == pytest.approx(0.15) and log.bias() == pytest.approx(0.075)
    # over a span of 2 steps: the sums of both (a phase of the pool's cycle and the empty one after it)
    cycle = RelativeErrors()
    assert cycle.add(6.0, 9.0, span=2) is None and cycle.missing == 1  # one step of the two so far
    assert cycle.add(6.0, 1.0, span=2) == pytest.approx(12 / 10 - 1)
    assert cycle.add(5.0, 10.0, span=2) == pytest.approx(11 / 11 - 1)
    assert cycle.add(None, 10.0, span=2) is None and cycle.add(5.0, 10.0, span=2) is None and cycle.missing == 3


def test_the_model_check_at_a_steps_realized_work_leaves_out_the_steps_own_draws():
    """Steps whose update time follows the tokens they train (0 to all groups) and whose phases follow the fitted
    line: the forecast misses each step's draw, the model at the step's realized work does not."""
    rng = np.random.default_rng(0)
    cost = StepCost(k_max=1, window=64)
    for _ in range(60):
        lengths = [int(n) for n in rng.integers(10, 200, size=16)]
        work = PhaseWork.generate(lengths)
        rollout_s = _seconds(work.decode_steps, work.tokens, 0)
        trained = float(rng.choice([0.0, 0.25, 0.5, 1.0])) * sum(lengths)
        learner_s = 0.5 + 0.004 * trained
        cost.observe(0, PhaseWork(work.decode_steps, work.tokens, 0, rollout_s), lengths, learner_s,
                     rollout_s + learner_s, trained_tokens=trained)
    assert cost.learner_line() == pytest.approx((0.5, 0.004), rel=1e-6)
    model, step = cost.checks["model"], cost.checks["step"]
    assert len(model.errors) > 50 and model.median() < 1e-6  # exact once the fits are determined
    assert step.median() > 0.1  # the forecast: a median learner and the mean phase, not this step's


def test_a_forecast_follows_the_recent_steps_where_the_policy_moves():
    """Halfway through, the policy writes shorter completions and trains fewer groups (the learner's 4 s fall to 2 s),
    on the same machine: a forecast from the last 8 steps' lengths and learner seconds follows within a few steps;
    one from the whole window of 64 lags behind, while both keep the same phase fit."""
    rng = np.random.default_rng(0)
    recent, whole = StepCost(k_max=1, window=64, recent=8), StepCost(k_max=1, window=64)
    for step in range(40):
        low, high, learner_s = (100, 250, 4.0) if step < 20 else (20, 80, 2.0)
        lengths = [int(n) for n in rng.integers(low, high, size=16)]
        work = PhaseWork.generate(lengths)
        rollout_s = _seconds(work.decode_steps, work.tokens, 0)
        for cost in (recent, whole):
            cost.observe(0, PhaseWork(work.decode_steps, work.tokens, 0, rollout_s), lengths, learner_s,
                         rollout_s + learner_s)
        if step == 8:  # steps 0-8 forecast from at most 8 steps before them: the same forecasts
            early = len(whole.checks["step"].errors)
            assert early >= 5 and recent.checks["step"].errors == pytest.approx(whole.checks["step"].errors)
    assert recent.checks["step"].errors[early] != pytest.approx(whole.checks["step"].errors[early])
    assert recent.phase_cost.fit().coefficients == pytest.approx(whole.phase_cost.fit().coefficients)
    late = {name: [abs(e) for e in cost.checks["step"].errors[-10:]] for name, cost in (("recent", recent),
                                                                                        ("whole", whole))}
    assert statistics.median(late["recent"]) < 0.1 < statistics.median(late["whole"]), late


def test_pools_simulated_together_are_each_pools_own_simulation():
    rng = np.random.default_rng(3)
    pools = [[int(n) for n in rng.choice([3, 5, 9, 40], size=32)] for _ in range(3)]
    together = steady_states(pools, 8, [0, 1, 2], steps=60)
    for lengths, found in zip(pools, together, strict=True):
        alone = steady_state(lengths, 8, [0, 1, 2], steps=60)
        for k in (0, 1, 2):
            assert found[k][0] == alone[k][0] and np.array_equal(found[k][1], alone[k][1])
    draws = rng.choice([3, 5, 9, 40], size=(2, 30, 8))
    stacked = pool_phases(draws, 2)
    for i in range(2):
        one = pool_phases(draws[i], 2)
        assert all(np.array_equal(stacked[key][i], one[key]) for key in one)


def test_resamples_of_the_forecast_spread_with_the_steps_and_phases_behind_it():
    """Steps that repeat exactly resample to the forecast itself; phases that scatter spread every k's seconds; a
    learner whose seconds scatter spreads each k's as well but not their difference (every k of a resample shares
    its steps)."""
    steady, noisy, learner = (StepCost(k_max=2, window=32, recent=8) for _ in range(3))
    rng = np.random.default_rng(1)
    lengths = [int(n) for n in rng.choice([4, 8, 16, 120], size=32)]
    for step in range(16):
        decode, tokens, resumed = 40 + 7 * (step % 5), sum(lengths) + 50 * (step % 3), 3 * (step % 4)
        exact = _seconds(decode, tokens, resumed)
        steady.observe(1, PhaseWork(decode, tokens, resumed, exact), lengths, 2.0, exact + 2.0)
        scattered = exact * (1 + 0.2 * rng.standard_normal())
        noisy.observe(1, PhaseWork(decode, tokens, resumed, scattered), lengths, 2.0, scattered + 2.0)
        learner_s = 2.0 * (1 + 0.3 * rng.standard_normal())
        learner.observe(1, PhaseWork(decode, tokens, resumed, exact), lengths, learner_s, exact + learner_s)
    predicted = steady.predict(32)
    draws = steady.resampled(32, 20, seed=0)
    for k in (0, 1, 2):
        assert draws[k] == pytest.approx(np.full(20, predicted[k]), rel=1e-9)
    spread = noisy.resampled(32, 200, seed=0)
    assert all(np.std(spread[k]) > 0.01 * np.mean(spread[k]) for k in (0, 1, 2))
    shared = learner.resampled(32, 200, seed=0)
    assert np.std(shared[0]) > 0.05 and np.std(shared[2] - shared[0]) < 1e-9
    assert np.mean(shared[2] - shared[0]) == pytest.approx(predicted[2] - predicted[0], rel=1e-6)
    assert np.array_equal(noisy.resampled(32, 50, seed=7)[1], noisy.resampled(32, 50, seed=7)[1])  # seeded
    exact = _seconds(40, sum(lengths), 0)
    for _ in range(6):  # steps that kept no completion lengths are left out of the resamples, not simulated empty
        steady.observe(1, PhaseWork(40, sum(lengths), 0, exact), [], 2.0, exact + 2.0)
    assert not np.isnan(steady.resampled(32, 50, seed=0)[0]).any()
    prior = StepCost(k_max=1, window=8, prior=TRUE)  # no phase yet: every resample is the prior's forecast
    prior.lengths.append(lengths)
    prior.learner.append((2.0, 0.1, None))
    assert prior.resampled(32, 5, seed=0)[1] == pytest.approx(np.full(5, prior.predict(32)[1]))


def test_the_interval_check_sums_the_forecast_over_a_choices_steps():
    """Steps at k = 0 that train 0 to all of their groups (the learner's seconds follow): each step's own draw is
    whole in a span of one step, and the forecast of the mean step misses most steps by more than 15%; over the 4
    steps between two choices the draws partly average out. Each interval error is the sum of the last 4 forecasts over
    the sum of the last 4 measured steps, and an interval shorter than the pool's cycle (k + 1) takes the cycle."""
    rng = np.random.default_rng(0)
    cost = StepCost(k_max=1, window=64, interval=4)
    for _ in range(60):
        lengths = [int(n) for n in rng.integers(10, 200, size=16)]
        work = PhaseWork.generate(lengths)
        rollout_s = _seconds(work.decode_steps, work.tokens, 0)
        learner_s = 0.5 + 0.004 * float(rng.choice([0.0, 0.25, 0.5, 1.0])) * sum(lengths)
        cost.observe(0, PhaseWork(work.decode_steps, work.tokens, 0, rollout_s), lengths, learner_s,
                     rollout_s + learner_s)
    step, interval = cost.checks["step"], cost.checks["interval"]
    assert len(interval.errors) > 40 and interval.pairs == step.pairs
    last = interval.pairs[-4:]
    assert interval.errors[-1] == pytest.approx(sum(p for p, _ in last) / sum(m for _, m in last) - 1)
    assert step.median() > 0.15 and interval.median() < 0.6 * step.median(), (step.median(), interval.median())
    cycle = StepCost(k_max=2, interval=1)
    _run_at(cycle, 2, 12, GPU)
    assert cycle.checks["interval"].errors == pytest.approx(cycle.checks["step"].errors)  # both over k + 1 = 3 steps
    with pytest.raises(ValueError, match="interval 0"):
        StepCost(k_max=1, interval=0)
