"""`rollout.max_staleness: auto`: the staleness bound k, and with algorithm.group_size auto the group size G, chosen
together every `rollout.max_staleness_every` steps by the smallest predicted gradient MSE per second of wall time
(docs/u-statistics.md#the-pace-chosen-for-you). The trainer calls it in two places:

    pace = Pace(cfg, world)                          # set-up; the rollout pool is built at capacity max_staleness_max
    reason = pace.choose(step, monitor, rounds)       # step 0: sets the pool's bound (and G); a line, or None
    metrics.update(pace.observe(step, monitor, phase, lengths, seconds, update_stats))   # after the step

The two sides of a candidate (G, k):

- Time (rollout/step_cost.py): the step's seconds at each k from the run's own phases (decode steps, tokens,
  resumed requests, a constant; refit every step, coefficients >= 0, hiccups left out), the lengths and the learner
  seconds (median) of the last PACE_RECENT steps, checked every step against the measured step at the k in force
  (`pace/step_s_error`; `pace/step_s_model_error`: the same model at the step's realized work, the learner's
  seconds a line in its trained tokens, which tests the model without the step's own draws of lengths and trained
  groups; `pace/interval_step_s_error`: the forecast over a choice's interval of steps, the mean step it is for).
  The last full fit stays as the prior of the terms a later window cannot determine (resumed requests, after
  a stretch at k = 0), so k >= 1 keeps a prediction; a run that has not resumed any request yet takes a resumed
  request's cost as one decode step's.
- Quality (ustat/staleness.py): MSE_k(G; N) = rho_k^2 ||grad J||^2 + [G c1_k + c2_k + c3_k / (G - 1)] / N from the
  monitor's on-policy constants (c1, c2, c3: its sketches are the unweighted scores) and two moments of the applied
  behaviour weights c = min(pi_prox / pi_behav, tis_cap) at k: m2 = E c^2 and rho = E (w - C)+. Those come from a
  drift model of the trained tokens' log-ratios: a token a versions old has log w ~ Normal(-v_a / 2, v_a) (mean-one
  weights) with v_a = v_0 + d a^2 (v_0: the sampler/learner mismatch, d: the policy's drift per version squared),
  fitted by least squares to the variances the learner measures per age (train/behaviour_log_ratio{,_sq}/<a>), and
  the shares of the trained tokens of each age at k from the pool's rule over the measured lengths
  (`StepCost.forecast`, from the same simulation of the pool as the time side). Token weights are applied per
  token, so their moments are taken per token (the per-completion derivation with one token per completion; an
  approximation for longer ones).

The score of a candidate is the MSE of the gradient averaged over one second of training: bias^2 + variance x
step_s (1 / step_s steps a second average the variance, not the bias). Only candidates with both sides predicted
compete, and a k >= 1 only where it has earned its staleness: its score beats every smaller k's (same G) in at
least PACE_CONFIDENCE of PACE_RESAMPLES bootstrap resamples of the steps and phases behind the time side
(`StepCost.resampled`); otherwise the fresher tokens are kept. A choice leaves the (G, k) in force only for a
candidate whose score is lower by more than `rollout.max_staleness_margin` (hysteresis). The run starts at k = 1
(k = 0 measures neither resumed requests nor stale weights): a measurement, not a choice, so the first choice with
predictions takes the best candidate whatever the margin (ties go to the smaller k).
With several ranks every rank fits its own phases, and rank 0's choice is the one applied (broadcast).

Wall-clock times drive the choice, so a run with max_staleness auto is not bit-reproducible across machines or
loads; a resumed run restores the k in force, the windows and the choices (`state_dict`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass

import numpy as np
import torch.distributed as dist

from grpo_train.config import Config
from grpo_train.rollout import Phase
from grpo_train.rollout.step_cost import PhaseWork, StepCost
from grpo_train.ustat.staleness import WeightMoments, stale_components

PACE_WINDOW = 32  # steps of phases, lengths, learner seconds and log-ratio moments the predictions use
# Of those, the steps whose lengths and learner seconds a forecast draws on: what the policy writes and how many of
# its groups carry a reward spread move as it learns (the demo's update 4.65 s a step, median of steps 2-8, then
# 2.16 s over steps 10-16), while the phase fit's constants are the machine's.
PACE_RECENT = 8
# A larger k must earn its staleness: it competes only where its score beats every smaller k's (same G) in at least
# PACE_CONFIDENCE of PACE_RESAMPLES bootstrap resamples of the steps and phases behind the forecast
# (`StepCost.resampled`). Where the run's own steps cannot tell two k apart, the fresher tokens are kept: the stale
# ones' cost beyond the model (a bias the cap hides, a drift the fit has not seen) is never negative.
PACE_RESAMPLES = 100
PACE_CONFIDENCE = 0.9


# ---------------------------------------------------------------------------------------------------
# The quality side: behaviour weights at staleness k from the measured drift of the log-ratios
# ---------------------------------------------------------------------------------------------------
def _normal_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def lognormal_weight_moments(variance: float, cap: float | None) -> WeightMoments:
    """(rho, m2) of c = min(w, C) for mean-one lognormal weights, log w ~ Normal(-v / 2, v):
        m2  = e^v Phi((ln C - 3v/2) / s) + C^2 (1 - Phi((ln C + v/2) / s)),   s = sqrt(v)
        rho = E (w - C)+ = Phi((v/2 - ln C) / s) - C Phi((-v/2 - ln C) / s)
    and without a cap m2 = e^v, rho = 0. v = 0: on-policy."""
    if variance <= 0.0:
        return WeightMoments.on_policy()
    if cap is None:
        return WeightMoments(removed=0.0, mean_sq=math.exp(variance))
    s, log_cap = math.sqrt(variance), math.log(cap)
    below = math.exp(variance) * _normal_cdf((log_cap - 1.5 * variance) / s)
    above = cap * cap * (1.0 - _normal_cdf((log_cap + 0.5 * variance) / s))
    removed = _normal_cdf((0.5 * variance - log_cap) / s) - cap * _normal_cdf((-0.5 * variance - log_cap) / s)
    return WeightMoments(removed=max(removed, 0.0), mean_sq=below + above)


def mixed_weight_moments(variances: list[float], shares: np.ndarray, cap: float | None) -> WeightMoments:
    """The moments over tokens of ages 0 .. k with these shares, age a's log-ratio variance variances[a]."""
    parts = [lognormal_weight_moments(v, cap) for v in variances]
    return WeightMoments(removed=float(sum(p * w.removed for p, w in zip(shares, parts, strict=True))),
                         mean_sq=float(sum(p * w.mean_sq for p, w in zip(shares, parts, strict=True))))


class Drift:
    """The log-ratio's variance by age, v_a = v_0 + d a^2, from the window's per-age (tokens, mean, mean square)."""

    def __init__(self, ages: int, window: int = PACE_WINDOW) -> None:
        self.ages = ages
        self.steps: deque[list[tuple[float, float, float]]] = deque(maxlen=window)  # per step, per age
        self.last: tuple[float, float] | None = None  # the last (v_0, d) fitted with a stale age in the window

    def observe(self, update_stats: dict[str, float]) -> None:
        """The update's train/behaviour_log_ratio{,_sq}/<a> means and the tokens' shares of each age."""
        row = []
        for a in range(self.ages):
            mean = update_stats.get(f"behaviour_log_ratio/{a}")
            mean_sq = update_stats.get(f"behaviour_log_ratio_sq/{a}")
            row.append((1.0, mean, mean_sq) if mean is not None and mean_sq is not None else (0.0, 0.0, 0.0))
        self.steps.append(row)

    def fit(self) -> tuple[float, float] | None:
        """(v_0, d), both >= 0: least squares of each age's variance (steps weighted alike) on [1, a^2]; the last
        fit with a stale age when the window has only age 0; None before any."""
        ages, variances = [], []
        for a in range(self.ages):
            seen = [(m, q) for n, m, q in (step[a] for step in self.steps) if n]
            if seen:
                mean = sum(m for m, _ in seen) / len(seen)
                ages.append(a)
                variances.append(max(sum(q for _, q in seen) / len(seen) - mean * mean, 0.0))
        if not ages:
            return self.last
        if max(ages) == 0:
            return (variances[0], self.last[1]) if self.last is not None else None
        x = np.array([[1.0, a * a] for a in ages])
        (v0, d), *_ = np.linalg.lstsq(x, np.array(variances), rcond=None)
        if d < 0 or v0 < 0:  # a negative part is noise: fit the other alone
            v0, d = (0.0, float(np.dot(x[:, 1], variances) / np.dot(x[:, 1], x[:, 1]))) if v0 < 0 else (
                float(np.mean(variances)), 0.0)
        self.last = (max(float(v0), 0.0), max(float(d), 0.0))
        return self.last

    def state_dict(self) -> dict:
        return {"steps": [list(map(list, step)) for step in self.steps], "last": self.last}

    def load_state_dict(self, state: dict) -> None:
        self.steps.clear()
        self.steps.extend([tuple(age) for age in step] for step in state["steps"])
        self.last = tuple(state["last"]) if state["last"] is not None else None


# ---------------------------------------------------------------------------------------------------
# The choice
# ---------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Candidate:
    """One (G, k): its predicted step seconds, gradient MSE (bias^2 included) and score (MSE per second)."""

    group_size: int
    k: int
    step_s: float
    mse: float
    bias_sq: float
    ess_fraction: float  # m1^2 / m2 of the applied weights: 1 on-policy
    g_star: float  # 1 + sqrt(c3_k / c1_k): the monitor's G* carried to k

    @property
    def score(self) -> float:
        """bias^2 + variance x step_s: the MSE of the gradient averaged over one second of training."""
        return self.score_at(self.step_s)

    def score_at(self, step_s):
        """The score were a step `step_s` seconds (a float, or an array of them)."""
        return self.bias_sq + (self.mse - self.bias_sq) * step_s


class Pace:
    """The k in force, the windows behind its predictions, and the choices (module docstring)."""

    def __init__(self, cfg: Config, world: int = 1) -> None:
        r, a = cfg.rollout, cfg.algorithm
        self.k_max, self.every, self.margin = r.max_staleness, r.max_staleness_every, r.max_staleness_margin
        self.group_size_auto = a.group_size_auto
        self.cap = a.tis_cap if a.tis_cap > 0 else None  # the token-level cap the loss applies (None: uncapped)
        self.world = world
        self.k = min(1, self.k_max)
        self.cost = StepCost(self.k_max, window=PACE_WINDOW, recent=PACE_RECENT, interval=self.every)
        self.drift = Drift(self.k_max + 1)
        self.choices: list[dict] = []  # {"step", "k", "group_size", "reason"}
        self.warm = False  # this process has trained a step: its first (compilation, allocation) stays out
        self.informed = False  # a choice with predictions was made (the hysteresis applies from the next one)
        self.earned_shares: dict[int, float] = {}  # the last choice's `earned`, per k at its G: logged once

    # -- the two sides ------------------------------------------------------------------------------------
    def candidates(self, monitor, completions: int) -> list[Candidate] | None:
        """Every (G, k) both sides predict (G: the monitor's candidates with group_size auto, else the G in
        force); None before the monitor has constants or the cost has a fit."""
        forecast = self.cost.forecast(completions)
        constants = monitor.components()
        drift = self.drift.fit()
        if forecast is None or constants is None:
            return None
        on_policy, grad_sq = constants
        sizes = monitor.candidates if self.group_size_auto else [monitor.group_size]
        out = []
        for k, f in forecast.items():
            if f.step_s is None or (drift is None and k >= 1):
                continue
            v0, d = drift if drift is not None else (0.0, 0.0)
            weights = mixed_weight_moments([v0 + d * a * a for a in range(k + 1)], f.age_shares, self.cap)
            stale = stale_components(on_policy, grad_sq, weights)
            for g in sizes:
                out.append(Candidate(g, k, f.step_s, stale.minibatch_mse(g, monitor.budget), stale.bias_sq,
                                     weights.ess_fraction, stale.optimal_group_size()))
        return out

    # -- step 0: the choice -------------------------------------------------------------------------------
    def choose(self, step: int, monitor, rounds) -> str | None:
        """At every max_staleness_every-th step (not the first): the candidate of smallest score, if it beats the
        (G, k) in force by more than the margin; sets the pool's bound (and the monitor's G with group_size auto,
        resizing the pool's groups from the first deadline with none in flight). Returns the console's line."""
        if step == 1 or (step - 1) % self.every:
            rounds.pool.set_bound(self.k)  # the run's start (and a resumed one): the k in force
            return None
        completions = len(self.cost.lengths[-1]) if self.cost.lengths else 0
        found = self.candidates(monitor, completions) if completions else None
        current = next((c for c in found or [] if c.k == self.k and c.group_size == monitor.group_size), None)
        if not found:
            reason, choice = f"step {step}: k stays {self.k}: no prediction yet (the monitor's constants, the " \
                             f"phase fit or the log-ratios' drift)", (monitor.group_size, self.k)
        else:
            earned = self.earned(found, completions, step)
            best = min((c for c in found if earned[c.group_size, c.k] >= PACE_CONFIDENCE),
                       key=lambda c: (c.score, c.k, c.group_size))
            # The start at k = 1 is a measurement, not a choice: the first choice with predictions takes the best.
            first, self.informed = not self.informed, True
            keep = not first and current is not None and best.score >= (1 - self.margin) * current.score
            choice = (monitor.group_size, self.k) if keep else (best.group_size, best.k)
            self.earned_shares = {k: share for (g, k), share in earned.items() if g == choice[0]}
            table = ", ".join(f"k={c.k}: {c.step_s:.2f} s, MSE x{c.mse / found_k0(found, c).mse:.3f}"
                              + (f", beats k < {c.k} in {earned[c.group_size, c.k]:.0%}" if c.k else "")
                              for c in sorted(found, key=lambda c: c.k) if c.group_size == choice[0])
            side = "the first choice with predictions" if first else (
                f"{'within' if keep else 'beyond'} the {self.margin:.0%} margin")
            reason = (f"step {step}: (G, k) {(monitor.group_size, self.k)} -> {choice} ({side}; best "
                      f"{(best.group_size, best.k)}): {table}")
        choice = _rank0(choice, self.world)
        resized = ""
        if choice[0] != monitor.group_size:
            monitor.group_size = choice[0]
            resized = rounds.resize(monitor.group_size, monitor.prompts_per_step // rounds.tools.engine_ranks.count,
                                    step)
        self.k = choice[1]
        rounds.pool.set_bound(self.k)
        self.choices.append({"step": step, "k": self.k, "group_size": monitor.group_size, "reason": reason})
        return reason + resized

    def earned(self, found: list[Candidate], completions: int, step: int) -> dict[tuple[int, int], float]:
        """Per (G, k) of `found`: the share of PACE_RESAMPLES resamples of the forecast's steps and phases in which
        its score is below that of every candidate of its G with a smaller k (1 for the smallest k: nothing to
        beat). The scores' quality side is the point estimate; seeded by the step, so a resumed run repeats it."""
        ks = sorted({c.k for c in found})
        draws = self.cost.resampled(completions, PACE_RESAMPLES, seed=step, ks=ks) or {
            k: np.full(PACE_RESAMPLES, np.nan) for k in ks}  # nothing to resample: the smallest k only
        scores = {(c.group_size, c.k): c.score_at(draws[c.k]) for c in found}  # [resamples]
        out = {}
        for (g, k), score in scores.items():
            beats = np.ones(PACE_RESAMPLES, bool)
            for (g2, k2), other in scores.items():
                if g2 == g and k2 < k:
                    beats &= score < other  # a resample without a prediction (NaN) beats nothing
            out[g, k] = float(beats.mean())
        return out

    # -- after the step: the windows and the metrics -----------------------------------------------------
    def observe(self, step: int, monitor, phase: Phase, lengths: list[int], seconds: dict[str, float],
                update_stats: dict[str, float]) -> dict[str, float]:
        """Add the step at the k in force (its phase, its trained completions' lengths, its seconds, the update's
        log-ratio moments by age; not this process's first step); returns pace/ metrics (docs/metrics.md)."""
        metrics = {"pace/k": float(self.k)}
        if not self.warm:  # this process's first step: start-up costs, not the step's
            self.warm = True
            return metrics
        work = PhaseWork(phase.engine_steps, phase.tokens, phase.resumed, phase.seconds)
        trained = update_stats.get("trained_seq_frac")  # the share of the step's completions its update trained
        self.cost.observe(self.k, work, lengths, seconds["step"] - seconds["rollout"], seconds["step"],
                          trained_tokens=None if trained is None else trained * sum(lengths))
        fit = self.cost.phase_cost.fit()
        if fit is not None and fit.source == "fit":  # kept as the prior of the terms a later window cannot fit
            known = dict(fit.coefficients)
            if known["resumed_s"] is None:  # never resumed yet (every completion finished in its phase): one step's
                known["resumed_s"] = known["decode_step_s"]  # cost, the prefill the model assumes fits in one
            if all(v is not None for v in known.values()):
                self.cost.phase_cost.prior = known
        self.drift.observe(update_stats)
        # This step's checks (rollout/step_cost.py item 4): the forecast, its generation phase, the model at the
        # step's own work.
        for check, key in (("step", "step_s_error"), ("rollout", "rollout_s_error"), ("model", "step_s_model_error"),
                           ("interval", "interval_step_s_error")):
            errors = self.cost.checks[check]
            if errors.last is not None:
                metrics[f"pace/{key}"], metrics[f"pace/{key}_median"] = errors.last, errors.median()
        found = self.candidates(monitor, len(lengths)) or []
        for c in found:
            if c.group_size == monitor.group_size:
                metrics[f"pace/step_s/{c.k}"] = c.step_s
                metrics[f"pace/mse_ratio/{c.k}"] = c.mse / found_k0(found, c).mse
                metrics[f"pace/ess_fraction/{c.k}"] = c.ess_fraction
                metrics[f"pace/g_star/{c.k}"] = c.g_star
        metrics.update({f"pace/earned/{k}": share for k, share in self.earned_shares.items()})
        self.earned_shares = {}  # the choice's step only
        predicted = metrics.get(f"pace/step_s/{self.k}")
        if predicted is not None:
            metrics["pace/step_s_predicted"] = predicted
        return metrics

    # -- checkpoint ---------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        c = self.cost
        return {"k": self.k, "informed": self.informed, "choices": self.choices, "drift": self.drift.state_dict(),
                "prior": c.phase_cost.prior, "phases": [asdict(w) for w in c.phase_cost.phases],
                "lengths": [list(n) for n in c.lengths], "learner": [list(x) for x in c.learner],
                "bounds": list(c.bounds),
                "checks": {name: {"errors": e.errors, "missing": e.missing, "pairs": [list(p) for p in e.pairs]}
                           for name, e in c.checks.items()}}

    def load_state_dict(self, state: dict) -> None:
        c = self.cost
        self.k, self.informed, self.choices = int(state["k"]), bool(state["informed"]), list(state["choices"])
        self.drift.load_state_dict(state["drift"])
        c.phase_cost.prior = state["prior"]
        c.phase_cost.phases.clear()
        c.phase_cost.phases.extend(PhaseWork(**w) for w in state["phases"])
        c.lengths.clear()
        c.lengths.extend(list(n) for n in state["lengths"])
        c.learner.clear()
        c.learner.extend((*x, None)[:3] for x in state["learner"])  # a checkpoint before the trained tokens: None
        c.bounds.clear()
        c.bounds.extend(state.get("bounds", []))  # a checkpoint before the bounds were kept: none (settled)
        for name, e in state["checks"].items():
            c.checks[name].errors, c.checks[name].missing = list(e["errors"]), int(e["missing"])
            c.checks[name].pairs = [tuple(p) for p in e["pairs"]]


def found_k0(found: list[Candidate], c: Candidate) -> Candidate:
    """The k = 0 candidate of c's G (the MSE ratios' reference), or c itself when k = 0 has no prediction."""
    return next((o for o in found if o.k == 0 and o.group_size == c.group_size), c)


def _rank0(choice: tuple[int, int], world: int) -> tuple[int, int]:
    """Rank 0's (G, k) on every rank (each rank fits its own engine's phases)."""
    if world == 1 or not dist.is_initialized():
        return choice
    box = [choice]
    dist.broadcast_object_list(box, src=0)
    return tuple(box[0])
