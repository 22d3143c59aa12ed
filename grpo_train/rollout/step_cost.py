"""The cost side of `rollout.max_staleness: auto` (issue #58 item 1): the seconds a step would take at each candidate
staleness bound k = 0 .. k_max, predicted online from the run's own measurements, and checked every step against the
measured step at the k in force (docs/u-statistics.md#the-cost-side-of-k). Pure (numpy and the standard library);
grpo_train/pace.py uses it for the trainer's choice.

1. A generation phase's seconds (`PhaseCost`: least squares over the last `window` phases, refit at every one):

       rollout_s = a x decode_steps + b x tokens + c x resumed + d

   decode_steps: the engine's steps in the phase (`rollout/engine_steps`; k = 0's `generate`: the batch's longest
   completion, which a synchronous batch decodes to); tokens: the tokens it generated; resumed: the requests it
   submitted again with a prefix (each prefilled again: its KV cache was the old weights'); d: a constant. It is
   scripts/studies/async_study.py's `cost_fit`, with one constant for every k. A term whose count was 0 in every
   phase of the window (resumed at k = 0) is not determined: its coefficient is the prior's, or unknown, and then
   a prediction that needs it is None. Fewer phases than terms + 1, or terms that move together (every step decoded
   to max_tokens: decode steps constant), determine nothing: the prior, or None.

2. The work a phase does at k (`pool_phases`), from completion lengths, by the rule of the rollout pool
   (rollout/async_pool.py, rounds.PoolRounds): the batch due at step i (B groups of G, C = B x G completions) is
   admitted at step max(1, i - k) (k + 1 batches at step 1, then one a step); step s's phase runs every unfinished
   completion of the batches due at s .. s + k until the batch due at s is complete, one token per completion per
   engine step; the others are paused with what they have. With p the tokens a completion has at the phase's start
   and L its length:

       decode_steps_s = max over the batch due at s of (L - p)        (0 if it finished in earlier phases)
       tokens_s       = sum over the live completions of min(L - p, decode_steps_s)
       resumed_s      = the live completions with 0 < p < L

   k = 0: each step's longest completion, its tokens, nothing resumed. At k >= 1 a phase waits only for the batch
   due, whose completions have had up to k phases already, and the batches due later fill the engine meanwhile, so
   decode steps per phase fall towards the typical length; every completion is still decoded once (tokens per step
   do not depend on k) but the paused ones are resumed. With equal lengths L the pool merges k + 1 steps' batches
   into one phase of L decode steps followed by k empty phases: L / (k + 1) decode steps a phase, nothing resumed
   (fuller decode steps, not a shorter tail). `phase_work` draws the batches from the measured lengths (the same
   draws for every k), averages the decode steps and resumes of the steady state's phases (after the lockstep
   start) and takes a batch's tokens per phase.

3. The step (`StepCost`), with learner_s = step_s - rollout_s (scoring, the log-prob passes, the update, the weight
   sync: measured, median over the recent steps) and sync_s the weight push within it:

       colocated (the engine and the learner take turns), or k = 0:  step_s(k) = rollout_s(k) + learner_s
       rollout servers, k >= 1 (`overlap`):                          step_s(k) = sync_s + max(rollout_s(k),
                                                                                              learner_s - sync_s)

   On servers the pool's requests go on through the learner's passes and pause only for the push, so the learner
   waits only for generation beyond its own phases. rollout_s(k) = the phase fit at the mean work of item 2.

4. Two checks a step, over the last k + 1 steps at the k in force (`checks`): "step" (and "rollout", its generation
   phase), the forecast above against the measured step: it includes what no forecast knows beforehand, the step's
   own draws (its longest completion, how many groups had a reward spread and were trained); "model", the same model
   at the step's realized work: the phase fit at its measured decode steps, tokens and resumed requests, plus the
   learner's seconds as a line in the trained completion tokens (c0 + c1 x tokens, coefficients >= 0, over the
   window; with skip_zero_advantage a step trains 0 to all of its groups, and its update time follows). "model"
   tests the cost model itself; "step" what a choice relies on. A step in a change of bound is not checked, nor a
   span that holds one: one of the last K + 1 steps ran at another bound, K the largest bound in force over the last
   k_max + 1 steps (after k -> k' the groups admitted under k keep their deadlines for up to k steps, and a raised
   bound fills the pool in one long phase): its work is neither k's nor k''s. A third, "interval", is "step" over
   the last max(k + 1, `interval`) steps, `interval` the steps between two choices (rollout.max_staleness_every):
   the forecast is of the mean step (the choice's score is seconds per step over the steps until the next choice),
   and at k = 0 a span of one step holds its own draws whole (the demo's steps at k = 0 scatter so that the run's
   own mean step, known in hindsight, misses one step by a median 13-30%).

Assumptions (where they fail, the prediction does): every request of a phase advances one token per engine step
from its first (its prefill, resumed prefixes included, fits one step; the engine holds (k + 1) x C sequences:
vLLM's max_num_seqs and max_num_batched_tokens do not bind); the lengths do not depend on k, on the step or on the
admission order (independent draws from the window's lengths); a decode step costs a plus b per sequence it carries,
at any batch size (on a GPU b is small against a, on a CPU most of it); a resumed request costs c whatever its
prefix's length (`rollout/resumed_tokens` is not a term); one constant for `generate` and the pool (the study found
0.124 s against 0.114 s on a CPU); learner_s does not depend on k (the same completions are trained); no
dynamic-sampling rounds. On rollout servers a phase's seconds are the learner's wait and its engine steps are not
counted, so the phase fit needs the servers' generation seconds (perf/server_busy_s), not measured against this model
yet.

    cost = StepCost(k_max=4, window=64)
    predicted = cost.predict(completions=B * G)   # {k: step seconds or None}, or None before enough steps
    cost.observe(k, PhaseWork(steps, tokens, resumed, rollout_s), lengths, learner_s, step_s=step_s)
    cost.resampled(completions=B * G, replicates=100, seed=step)   # {k: step seconds of 100 bootstrap resamples}
    cost.checks["step"].median()                   # running median |relative error| at the k in force
    cost.checks["model"].median()                  # the same, the model at each step's realized work
    cost.checks["interval"].median()               # the forecast over the steps of a choice's interval
"""

from __future__ import annotations

import itertools
import statistics
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

TERMS = ("decode_step_s", "token_s", "resumed_s", "constant_s")  # the coefficients a, b, c, d of a phase's seconds


@dataclass(frozen=True)
class PhaseWork:
    """What one generation phase did (a colocated pool's `Phase`: engine_steps, tokens, resumed, seconds)."""

    decode_steps: float
    tokens: float
    resumed: float
    seconds: float = 0.0

    @classmethod
    def generate(cls, lengths: Sequence[int], seconds: float = 0.0) -> PhaseWork:
        """k = 0's `generate` of a batch with these completion lengths: it decodes to its longest, resumes nothing."""
        return cls(max(lengths, default=0), sum(lengths), 0, seconds)

    def row(self) -> list[float]:
        """The phase's counts against TERMS (the constant's 1 last)."""
        return [self.decode_steps, self.tokens, self.resumed, 1.0]


def least_squares(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float] | None:
    """The least-squares coefficients of y ~ x and R^2; None when the rows do not determine them (no more rows than
    terms, or terms that move together). Columns are scaled to a common size before the solve, so counts of
    thousands beside a constant's 1 do not blur the rank."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    if x.ndim != 2 or len(x) <= x.shape[1]:
        return None
    scale = np.abs(x).max(axis=0)
    scale[scale == 0] = 1.0
    coef, _, rank, _ = np.linalg.lstsq(x / scale, y, rcond=None)
    if rank < x.shape[1]:
        return None
    coef = coef / scale
    residual = y - x @ coef
    total = ((y - y.mean()) ** 2).sum()
    return coef, float(1 - (residual ** 2).sum() / total) if total > 0 else 1.0


def nonnegative_fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Least squares with every coefficient >= 0, by trying each subset of the columns (a handful of terms): the
    subset fit with no negative coefficient and the smallest residual, the other coefficients 0 (all 0, R^2 0,
    when none qualifies)."""
    best, best_residual, best_r2 = np.zeros(x.shape[1]), float(np.square(y).sum()), 0.0
    for size in range(1, x.shape[1] + 1):
        for subset in itertools.combinations(range(x.shape[1]), size):
            solved = least_squares(x[:, subset], y)
            if solved is None or (solved[0] < 0).any():
                continue
            coef = np.zeros(x.shape[1])
            coef[list(subset)] = solved[0]
            residual = float(np.square(y - x @ coef).sum())
            if residual < best_residual:
                best, best_residual, best_r2 = coef, residual, solved[1]
    return best, best_r2


@dataclass(frozen=True)
class PhaseFit:
    """A phase's seconds as a x decode_steps + b x tokens + c x resumed + d: each coefficient (TERMS) fitted, the
    prior's, or None (not determined); source "fit" or "prior"; R^2 over the phases fitted (None: the prior)."""

    coefficients: dict[str, float | None]
    source: str
    phases: int
    r2: float | None = None

    def seconds(self, decode_steps: float, tokens: float, resumed: float) -> float | None:
        """The predicted seconds of a phase with this work; None if it needs a coefficient not determined."""
        total = 0.0
        for term, count in zip(TERMS, (decode_steps, tokens, resumed, 1.0), strict=True):
            if count:
                if self.coefficients[term] is None:
                    return None
                total += self.coefficients[term] * count
        return total


class PhaseCost:
    """The online fit of a phase's seconds over its last `window` phases (module docstring, item 1). `prior`: every
    coefficient of TERMS, used where the phases do not determine one (or all)."""

    def __init__(self, window: int = 64, prior: Mapping[str, float] | None = None) -> None:
        if window <= len(TERMS):
            raise ValueError(f"phase cost window {window}: it must hold more phases than the {len(TERMS)} terms")
        if prior is not None and set(prior) != set(TERMS):
            raise ValueError(f"phase cost prior {sorted(prior)}: give every one of {list(TERMS)}")
        self.prior = dict(prior) if prior is not None else None
        self.phases: deque[PhaseWork] = deque(maxlen=window)

    def observe(self, work: PhaseWork) -> None:
        self.phases.append(work)

    def fit(self) -> PhaseFit | None:
        """The fit over the window: the terms whose counts were nonzero somewhere (the constant always), the others
        the prior's or None; all the prior's when the phases do not determine those terms; None without a prior.
        Every coefficient >= 0 (`nonnegative_fit` where plain least squares gives a negative one). Robust to a
        hiccup (another job on the machine, a page-in): with at least twice as many phases as terms, the phases
        whose residual exceeds 4 robust standard deviations (1.4826 x the median absolute residual), and 2% of the
        median phase, are left out and the rest fitted again."""
        x = np.array([w.row() for w in self.phases], float).reshape(-1, len(TERMS))
        y = np.array([w.seconds for w in self.phases], float)
        active = [i for i in range(len(TERMS)) if np.any(x[:, i] != 0) or TERMS[i] == "constant_s"]
        solved = _solve(x[:, active], y)
        if solved is not None and len(y) >= 2 * len(active):
            residual = np.abs(y - x[:, active] @ solved[0])
            kept = residual <= max(4 * 1.4826 * float(np.median(residual)), 0.02 * float(np.median(np.abs(y))))
            if not kept.all():
                solved = _solve(x[kept][:, active], y[kept]) or solved
        if solved is None:
            return PhaseFit(dict(self.prior), "prior", len(self.phases)) if self.prior is not None else None
        coef, r2 = solved
        fitted = dict(zip((TERMS[i] for i in active), coef.tolist(), strict=True))
        return PhaseFit({t: fitted.get(t, self.prior[t] if self.prior else None) for t in TERMS}, "fit",
                        len(self.phases), r2)


def _solve(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float] | None:
    """least_squares, or `nonnegative_fit` where it gives a negative coefficient; None where undetermined."""
    solved = least_squares(x, y)
    if solved is not None and (solved[0] < 0).any():  # a cost is never negative
        return nonnegative_fit(x, y)
    return solved


def pool_phases(lengths: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per step, the work of its generation phase at staleness bound k (module docstring, item 2): `lengths[i]` are
    the completion lengths of the batch due at step i + 1 (C of them, every group of the step together). Returns
    decode_steps, tokens, resumed and resumed_tokens (the paused prefixes prefilled again), one entry per step, and
    age_tokens [steps, k + 1]: the tokens phase s generated for the batch due at s + j, which its update trains j
    weight versions old (the quality side of k: how many trained tokens are how stale). Leading dimensions of
    `lengths` ([..., steps, completions]) are independent pools, simulated together ([..., steps] out)."""
    lengths = np.asarray(lengths, np.int64)
    if lengths.ndim < 2 or k < 0:
        raise ValueError(f"pool_phases: lengths of shape (steps, completions) and k >= 0, not {lengths.shape}, {k}")
    batch, steps = lengths.shape[:-2], lengths.shape[-2]
    progress = np.zeros_like(lengths)
    out = {key: np.zeros((*batch, steps), np.int64) for key in ("decode_steps", "tokens", "resumed", "resumed_tokens")}
    out["age_tokens"] = np.zeros((*batch, steps, k + 1), np.int64)
    for s in range(steps):
        live = slice(s, min(steps, s + k + 1))  # due at s .. s + k: admitted at max(1, i - k) <= s
        done = progress[..., live, :]
        left = lengths[..., live, :] - done  # [..., live batches, C]
        decode = np.maximum(left[..., 0, :].max(axis=-1, initial=0), 0)  # [...]: the due batch's longest rest
        paused = (done > 0) & (left > 0)
        out["resumed"][..., s] = paused.sum(axis=(-2, -1))
        out["resumed_tokens"][..., s] = (done * paused).sum(axis=(-2, -1))
        advanced = np.minimum(np.maximum(left, 0), decode[..., None, None])
        out["tokens"][..., s] = advanced.sum(axis=(-2, -1))
        out["age_tokens"][..., s, : advanced.shape[-2]] = advanced.sum(axis=-1)
        out["decode_steps"][..., s] = decode
        progress[..., live, :] += advanced
    return out


def steady_state(lengths: Sequence[int], completions: int, ks: Sequence[int], steps: int = 120,
                 seed: int = 0) -> dict[int, tuple[PhaseWork, np.ndarray]]:
    """Per k in `ks`, from one simulation of the pool for batches of `completions` drawn (with replacement) from the
    measured `lengths`, the same draws for every k: the mean work of a phase (`phase_work`) and the shares of the
    trained tokens 0 .. k weight versions old ([k + 1], summing to 1: `age_shares`). The steady state: `steps`
    phases after a burn-in of 16 (k_max + 1) phases (the pool starts with k + 1 fresh batches in lockstep, and its
    phases stay correlated for ~10 (k + 1) phases), with k batches after them, so the last ones also have their pool.
    A phase's decode steps and resumed requests are the mean over those phases, its tokens the tokens the due
    batches hold (every completion is decoded once, so in the steady state a phase generates a batch's tokens on
    average, at any k). 120 steps: a whole number of equal lengths' periods of k + 1 phases for every k <= 4."""
    return steady_states([lengths], completions, ks, steps, seed)[0]


def steady_states(pools: Sequence[Sequence[int]], completions: int, ks: Sequence[int], steps: int = 120,
                  seed: int = 0) -> list[dict[int, tuple[PhaseWork, np.ndarray]]]:
    """`steady_state` of each pool of lengths, simulated together (the same seed: the same draws' positions)."""
    burn, draws = 0, []
    for lengths in pools:
        burn, drawn = _draws(lengths, completions, ks, steps, seed)
        draws.append(drawn)
    draws = np.stack(draws)  # [pools, burn + steps + max k, completions]
    kept = slice(burn, burn + steps)
    tokens = draws[:, kept].sum(axis=2).mean(axis=1)
    out = [{} for _ in pools]
    for k in ks:
        phases = pool_phases(draws[:, : burn + steps + k], k)
        ages = phases["age_tokens"][:, kept].sum(axis=1)  # [pools, k + 1]
        decode, resumed = phases["decode_steps"][:, kept].mean(axis=1), phases["resumed"][:, kept].mean(axis=1)
        for i, found in enumerate(out):
            found[k] = (PhaseWork(float(decode[i]), float(tokens[i]), float(resumed[i])),
                        ages[i] / max(ages[i].sum(), 1))
    return out


def phase_work(lengths: Sequence[int], completions: int, ks: Sequence[int], steps: int = 120,
               seed: int = 0) -> dict[int, PhaseWork]:
    """The mean work of a phase at each k in `ks` (`steady_state`)."""
    return {k: work for k, (work, _) in steady_state(lengths, completions, ks, steps, seed).items()}


def age_shares(lengths: Sequence[int], completions: int, ks: Sequence[int], steps: int = 120,
               seed: int = 0) -> dict[int, np.ndarray]:
    """Per k of `ks`: the shares of the trained tokens 0 .. k weight versions old (`steady_state`)."""
    return {k: shares for k, (_, shares) in steady_state(lengths, completions, ks, steps, seed).items()}


def _draws(lengths: Sequence[int], completions: int, ks: Sequence[int], steps: int,
           seed: int) -> tuple[int, np.ndarray]:
    """(burn-in phases, lengths [burn + steps + max k, completions] drawn with replacement from `lengths`)."""
    if not len(lengths) or completions < 1 or not ks:
        raise ValueError("phase_work: needs measured lengths, completions >= 1 and a k")
    burn = 16 * (max(ks) + 1)
    return burn, np.random.default_rng(seed).choice(np.asarray(lengths, np.int64),
                                                    size=(burn + steps + max(ks), completions))


@dataclass
class RelativeErrors:
    """Predicted against measured, step by step: the relative error (predicted - measured) / measured of the sums over
    the last `span` steps (the step's own with span 1); `missing` counts the steps without one (a step in the span
    had no prediction: not enough data yet). `last`: what the latest `add` returned."""

    errors: list[float] = field(default_factory=list)
    missing: int = 0
    pairs: list[tuple[float | None, float]] = field(default_factory=list)  # (predicted, measured) of every step
    last: float | None = None

    def add(self, predicted: float | None, measured: float, span: int = 1) -> float | None:
        self.pairs.append((predicted, measured))
        window = self.pairs[-span:]
        if len(window) < span or any(p is None for p, _ in window) or sum(m for _, m in window) <= 0:
            self.missing += 1
            self.last = None
        else:
            self.last = sum(p for p, _ in window) / sum(m for _, m in window) - 1
            self.errors.append(self.last)
        return self.last

    def median(self) -> float | None:
        """The median |relative error| so far (the target: <= 0.15 at the k in force); None before any."""
        return statistics.median(abs(e) for e in self.errors) if self.errors else None

    def bias(self) -> float | None:
        """The median signed relative error (> 0: the prediction runs high)."""
        return statistics.median(self.errors) if self.errors else None


@dataclass(frozen=True)
class Forecast:
    """A step at one k, predicted: its generation phase's and its whole seconds (None: not determined), and the
    shares of its trained tokens 0 .. k weight versions old."""

    rollout_s: float | None
    step_s: float | None
    age_shares: np.ndarray


class StepCost:
    """The step's seconds at each k = 0 .. k_max (module docstring, item 3), from the last `window` steps: their
    phases (the fit, and the learner's line in its trained tokens: the machine's constants) and, of the last `recent`
    of them (default: all), their completion lengths (the work at each k) and learner seconds (what the policy draws
    and trains, which move as it learns). `overlap`: rollout
    servers (generation goes on through the learner's passes at k >= 1). `checks`: the step's and the rollout's
    relative errors at the k in force, recorded by `observe` before the step joins the window, over the last k + 1
    steps (one cycle of the pool: at k >= 1 a long phase is followed by short ones, and the prediction is their mean;
    k = 0: the step alone), "model"'s (item 4), and "interval": "step"'s over max(k + 1, `interval`) steps."""

    def __init__(self, k_max: int, window: int = 64, prior: Mapping[str, float] | None = None,
                 overlap: bool = False, steps: int = 120, seed: int = 0, recent: int | None = None,
                 interval: int = 1) -> None:
        if interval < 1:
            raise ValueError(f"step cost interval {interval}: the steps between two choices, at least 1")
        self.k_max, self.overlap, self.steps, self.seed, self.interval = k_max, overlap, steps, seed, interval
        self.recent = recent or window  # the last steps whose lengths and learner seconds a forecast draws on
        self.phase_cost = PhaseCost(window, prior)
        self.lengths: deque[list[int]] = deque(maxlen=window)  # per step, its completions' lengths
        # per step, (learner_s, sync_s, trained completion tokens or None)
        self.learner: deque[tuple[float, float, float | None]] = deque(maxlen=window)
        self.checks = {"step": RelativeErrors(), "rollout": RelativeErrors(), "model": RelativeErrors(),
                       "interval": RelativeErrors()}
        self.bounds: deque[int] = deque(maxlen=k_max + 1)  # the bound in force at each of the last steps

    def predict(self, completions: int, ks: Sequence[int] | None = None) -> dict[int, float | None] | None:
        """Predicted seconds per step at each k of `ks` (default 0 .. k_max) for batches of `completions` (B x G on
        one engine). None before a step was observed or while the phase fit has neither enough phases nor a prior;
        a k whose work needs an undetermined coefficient (resumed, before any phase resumed and without a prior):
        None."""
        found = self.forecast(completions, ks)
        return None if found is None else {k: f.step_s for k, f in found.items()}

    def predict_rollout(self, completions: int, ks: Sequence[int] | None = None) -> dict[int, float | None] | None:
        """`predict`'s generation phase alone: rollout_s(k)."""
        found = self.forecast(completions, ks)
        return None if found is None else {k: f.rollout_s for k, f in found.items()}

    def forecast(self, completions: int, ks: Sequence[int] | None = None) -> dict[int, Forecast] | None:
        """Per k: `predict`'s step and `predict_rollout`'s phase, and the trained tokens' shares by age, from one
        simulation of the pool (`steady_state`) over the lengths of the last `recent` steps, with their median
        learner seconds; None as for `predict`."""
        fit = self.phase_cost.fit()
        if fit is None or not self.lengths:
            return None
        ks = list(range(self.k_max + 1)) if ks is None else list(ks)
        # The policy's lengths and the groups its update trains move as it learns: the last `recent` steps'.
        lengths = [n for step in list(self.lengths)[-self.recent:] for n in step]
        state = steady_state(lengths, completions, ks, self.steps, self.seed)
        return self._forecast(fit, state, list(self.learner)[-self.recent:])

    def resampled(self, completions: int, replicates: int, seed: int,
                  ks: Sequence[int] | None = None) -> dict[int, np.ndarray] | None:
        """Per k, `replicates` step seconds, each `forecast`'s from a bootstrap resample of what it draws on: the
        recent steps (a step's lengths with its learner seconds) and the window's phases (the fit's), each drawn
        with replacement (NaN where a resample determines no prediction). Every k of a replicate shares its resample,
        so the replicates of the difference between two k show whether the run's own steps tell them apart
        (grpo_train/pace.py: a larger k must beat the smaller ones in most resamples). None as for `predict`."""
        if self.phase_cost.fit() is None or not self.lengths:
            return None
        ks = list(range(self.k_max + 1)) if ks is None else list(ks)
        rng = np.random.default_rng(seed)
        steps = [(n, x) for n, x in zip(list(self.lengths)[-self.recent:], list(self.learner)[-self.recent:],
                                        strict=True) if n]  # a resample of steps without lengths simulates nothing
        if not steps:
            return None
        phases = list(self.phase_cost.phases)
        fits, picks = [], []
        for _ in range(replicates):
            drawn = PhaseCost(max(len(phases), len(TERMS) + 1), self.phase_cost.prior)
            for i in rng.integers(len(phases), size=len(phases)) if phases else ():  # none: the prior's fit
                drawn.observe(phases[i])
            fits.append(drawn.fit())
            picks.append([steps[i] for i in rng.integers(len(steps), size=len(steps))])
        states = steady_states([[n for lengths, _ in picked for n in lengths] for picked in picks], completions, ks,
                               self.steps, self.seed)
        out = {k: np.full(replicates, np.nan) for k in ks}
        for r, (fit, picked, state) in enumerate(zip(fits, picks, states, strict=True)):
            if fit is None:
                continue
            for k, f in self._forecast(fit, state, [x for _, x in picked]).items():
                if f.step_s is not None:
                    out[k][r] = f.step_s
        return out

    def _forecast(self, fit: PhaseFit, state: dict[int, tuple[PhaseWork, np.ndarray]],
                  learner: list[tuple]) -> dict[int, Forecast]:
        """`forecast` from a phase fit, the pool's steady state at each k and the steps' (learner_s, sync_s, trained
        tokens)."""
        learner_s = statistics.median(seconds for seconds, *_ in learner)  # median: robust to a hiccup
        sync_s = statistics.median(sync for _, sync, _ in learner)
        out = {}
        for k, (work, shares) in state.items():
            rollout_s = fit.seconds(work.decode_steps, work.tokens, work.resumed)
            out[k] = Forecast(rollout_s, self._step_s(k, rollout_s, learner_s, sync_s), shares)
        return out

    def _step_s(self, k: int, rollout_s: float | None, learner_s: float, sync_s: float) -> float | None:
        """Item 3's step from its generation phase and its learner's seconds."""
        if rollout_s is None:
            return None
        if self.overlap and k >= 1:
            return sync_s + max(rollout_s, learner_s - sync_s)
        return rollout_s + learner_s

    def learner_line(self) -> tuple[float, float] | None:
        """(c0, c1) of learner_s = c0 + c1 x trained completion tokens over the window (>= 0), or None with fewer
        than 3 steps that know their tokens."""
        known = [(tokens, learner) for learner, _, tokens in self.learner if tokens is not None]
        if len(known) < 3:
            return None
        coef, _ = nonnegative_fit(np.array([[1.0, t] for t, _ in known]), np.array([y for _, y in known]))
        return float(coef[0]), float(coef[1])

    def model_seconds(self, k: int, work: PhaseWork, trained_tokens: float) -> float | None:
        """Item 4's "model": the step's seconds from the fits at its realized work (None before they are
        determined)."""
        fit, line = self.phase_cost.fit(), self.learner_line()
        if fit is None or line is None:  # a line needs 3 steps in the window, so a median sync below
            return None
        sync_s = statistics.median(sync for _, sync, _ in self.learner)
        rollout_s = fit.seconds(work.decode_steps, work.tokens, work.resumed)
        return self._step_s(k, rollout_s, line[0] + line[1] * trained_tokens, sync_s)

    def observe(self, k: int, work: PhaseWork, lengths: Sequence[int], learner_s: float, step_s: float,
                sync_s: float = 0.0, trained_tokens: float | None = None) -> float | None:
        """A step at staleness bound k: its phase's work and seconds, its completions' lengths, its learner seconds
        (step_s - rollout_s), its weight push's and the completion tokens its update trained (None: not known). First
        checks the prediction from the steps before against the measured step (and rollout, and the model at this
        step's work), over the last k + 1 steps (`checks`; none in a change of bound, item 4); returns the step's
        relative error, or None without one."""
        self.bounds.append(k)
        settled = all(b == k for b in list(self.bounds)[-(max(self.bounds) + 1):])  # not in a change of bound
        found = self.forecast(len(lengths), [k]) if lengths and settled else None
        rollout_s, predicted_s = (found[k].rollout_s, found[k].step_s) if found is not None else (None, None)
        self.checks["rollout"].add(rollout_s, work.seconds, span=k + 1)
        error = self.checks["step"].add(predicted_s, step_s, span=k + 1)
        self.checks["interval"].add(predicted_s, step_s, span=max(k + 1, self.interval))
        model = None if trained_tokens is None or not settled else self.model_seconds(k, work, trained_tokens)
        self.checks["model"].add(model, step_s, span=k + 1)
        self.phase_cost.observe(work)
        self.lengths.append(list(lengths))
        self.learner.append((learner_s, sync_s, trained_tokens))
        return error
