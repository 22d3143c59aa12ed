"""The online U-statistic monitor: c1, c2, c3 of the GRPO gradient's MSE law estimated while training, and the
group size it predicts best (`algorithm.group_size: auto`). The theory and how to read the metrics are in
docs/u-statistics.md; the formulas in grpo_train/ustat/estimators.py.

Every step, for each of the step's prompts (all ranks), the per-prompt U-statistics of `estimators.prompt_moments`
come from the G rewards and the G score sketches that the learner's own backward produced
(grpo_train/ustat/sketch.py). A group whose rewards are all equal needs no scores: every kernel
h = 1/2 (r_i - r_j)(s_i - s_j) is 0 there, so its moments are exactly 0 (the learner may skip its rows). A group
with mixed rewards in which some sequence has no score (see ustat/sketch.py) is left out and counted
(ustat/unscored_groups). The window pools the last `ustat.window` steps:

    c2 = mean over prompts of 4 zeta_1(q),  c3 = mean of 2 (zeta_2(q) - 2 zeta_1(q)),
    c1 = mean of ||grad J(q)||^2 - ||grad J||^2, the second term within each step (from pairs of its prompts, which
         share the step's parameters), weighted by the step's prompts.

Intervals: a bootstrap over prompts, resampled within each step; the between-prompt term of a resample uses
pairs of distinct prompts only (a prompt drawn twice is not its own independent partner). The predicted MSE at
N completions per step is [G c1 + c2 + c3 / (G - 1)] / N (Proposition 3), minimised at G* = 1 + sqrt(c3 / c1).

Every rank gathers the step's per-prompt statistics, so every rank holds the same window and makes the same
choice; the bootstrap is seeded by (run seed, step), so a resumed run (the window is in the checkpoint's trainer
state) makes the same choices as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist
from torch import Tensor

from grpo_train.config import Config, ConfigError, group_size_candidates, rollouts_per_step
from grpo_train.ustat.estimators import VarianceComponents, prompt_moments

MIN_GROUP_SIZE = 4  # c3 needs four distinct completions of a prompt


# ---------------------------------------------------------------------------------------------------
# One step's prompts, and the pooled estimate over a window of steps
# ---------------------------------------------------------------------------------------------------
@dataclass
class StepPrompts:
    """The per-prompt statistics of one step (every rank's prompts), JSON-ready through to_json / from_json."""

    step: int
    group_size: int
    first_order: Tensor  # [B] 4 zeta_1(q), each prompt's share of c2
    second_order: Tensor  # [B] 2 (zeta_2 - 2 zeta_1), its share of c3
    grad_sq: Tensor  # [B] ||grad J(q)||^2 (unbiased, within the prompt's group)
    gram: Tensor  # [B, B] <u_k, u_l> of the prompts' U-statistics (the step's between-prompt term)

    def to_json(self) -> dict:
        return {"step": self.step, "group_size": self.group_size, "first_order": self.first_order.tolist(),
                "second_order": self.second_order.tolist(), "grad_sq": self.grad_sq.tolist(),
                "gram": self.gram.tolist()}

    @classmethod
    def from_json(cls, record: dict) -> StepPrompts:
        size = len(record["grad_sq"])
        as_tensor = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        return cls(record["step"], record["group_size"], as_tensor(record["first_order"]),
                   as_tensor(record["second_order"]), as_tensor(record["grad_sq"]),
                   as_tensor(record["gram"]).view(size, size))


def step_prompts(step: int, rewards: Tensor, scores: Tensor) -> StepPrompts:
    """rewards [B, G], scores [B, G, D] (G >= 4) -> the step's per-prompt statistics."""
    moments = prompt_moments(rewards, scores)
    return StepPrompts(step, rewards.shape[1], moments.first_order, moments.second_order, moments.grad_sq,
                       moments.u_stats @ moments.u_stats.T)


def pooled_components(records: list[StepPrompts], weights: list[Tensor] | None = None) -> tuple[Tensor, ...]:
    """(c1, c2, c3), each [R], pooled over the steps' prompts with prompt weights [R, B_s] per step (counts of a
    resample; all ones, R = 1, when weights is None). c1 uses the steps with two distinct prompts drawn; NaN
    where none has, or where no prompt was drawn at all."""
    if weights is None:
        weights = [torch.ones(1, len(r.grad_sq), dtype=torch.float64) for r in records]
    resamples = weights[0].shape[0] if weights else 1
    zeros = lambda: torch.zeros(resamples, dtype=torch.float64)  # noqa: E731
    first, second, count, between, between_count = zeros(), zeros(), zeros(), zeros(), zeros()
    for record, w in zip(records, weights, strict=True):
        drawn = w.sum(1)  # [R]
        first += w @ record.first_order
        second += w @ record.second_order
        count += drawn
        # Pairs of distinct prompts: sum_{k != l} w_k w_l <u_k, u_l> over sum_{k != l} w_k w_l.
        diagonal = torch.diagonal(record.gram)
        pair_sum = ((w @ record.gram) * w).sum(1) - (w.square() @ diagonal)
        pairs = drawn.square() - w.square().sum(1)
        usable = pairs > 0
        cross = torch.where(usable, pair_sum / pairs.clamp(min=1e-300), torch.zeros_like(pairs))
        between += torch.where(usable, w @ record.grad_sq - drawn * cross, torch.zeros_like(pairs))
        between_count += torch.where(usable, drawn, torch.zeros_like(drawn))
    nan = torch.full_like(count, float("nan"))
    c1 = torch.where(between_count > 0, between / between_count.clamp(min=1e-300), nan)
    c2 = torch.where(count > 0, first / count.clamp(min=1e-300), nan)
    c3 = torch.where(count > 0, second / count.clamp(min=1e-300), nan)
    return c1, c2, c3


def bootstrap_weights(records: list[StepPrompts], resamples: int, generator: torch.Generator) -> list[Tensor]:
    """Per step, [R, B_s] counts of each prompt in R resamples of its B_s prompts with replacement."""
    weights = []
    for record in records:
        size = len(record.grad_sq)
        draws = torch.randint(size, (resamples, size), generator=generator)
        weights.append(torch.zeros(resamples, size, dtype=torch.float64).scatter_add_(
            1, draws, torch.ones(resamples, size, dtype=torch.float64)))
    return weights


def predicted_mse(c1: Tensor, c2: Tensor, c3: Tensor, group_sizes: list[int], budget: int) -> Tensor:
    """[R, len(group_sizes)] MSE(G) = [G c1 + c2 + c3 / (G - 1)] / N for each resample's components, each
    component taken as at least 0 (they are variances; an estimate below 0 is noise)."""
    g = torch.tensor(group_sizes, dtype=torch.float64)
    c1, c2, c3 = (c.clamp(min=0)[:, None] for c in (c1, c2, c3))
    return (g * c1 + c2 + c3 / (g - 1)) / budget


def optimal_group_size(c1: Tensor, c3: Tensor) -> Tensor:
    """Continuous G* = 1 + sqrt(c3 / c1), inf where c1 <= 0 (the largest G is then never worse)."""
    ratio = c3.clamp(min=0) / c1
    return torch.where(c1 > 0, 1 + ratio.clamp(min=0).sqrt(), torch.full_like(c1, float("inf")))


@dataclass
class Estimate:
    """The pooled estimate at one step, with bootstrap intervals; every list is [point, low, high]."""

    c1: list[float]
    c2: list[float]
    c3: list[float]
    g_star: list[float]  # continuous 1 + sqrt(c3 / c1)
    candidates: list[int]
    relative_mse: list[list[float]]  # per candidate: MSE(G) / min over candidates, [point, low, high]
    best: int  # the candidate with the smallest point MSE
    prompts: int  # prompts pooled


def estimate(records: list[StepPrompts], budget: int, candidates: list[int], resamples: int, level: float,
             seed: int) -> Estimate | None:
    """The window's components, G* and relative MSE per candidate, with percentile intervals; None without a
    usable c1 (fewer than two prompts in every step) or without any signal (every group's rewards equal: every
    component 0, no G is better than another)."""
    point = pooled_components(records)
    if not all(math.isfinite(float(c)) for c in point) or not float(predicted_mse(*point, candidates, budget).max()):
        return None
    generator = torch.Generator().manual_seed(seed)
    boot = pooled_components(records, bootstrap_weights(records, resamples, generator))
    keep = torch.isfinite(boot[0])
    boot = tuple(c[keep] for c in boot)
    tail = (1 - level) / 2

    def triple(value: Tensor, samples: Tensor) -> list[float]:
        samples = samples[~samples.isnan()]  # a resample of prompts without any signal has no relative MSE
        if samples.numel() == 0:
            return [float(value), float("nan"), float("nan")]
        # "lower" / "higher": no interpolation, so infinite G* in some resamples stays a valid bound.
        return [float(value), float(np.quantile(samples.numpy(), tail, method="lower")),
                float(np.quantile(samples.numpy(), 1 - tail, method="higher"))]

    mse_point = predicted_mse(*point, candidates, budget)[0]
    mse_boot = predicted_mse(*boot, candidates, budget)
    relative_point = mse_point / mse_point.min()
    relative_boot = mse_boot / mse_boot.min(dim=1, keepdim=True).values
    return Estimate(
        c1=triple(point[0][0], boot[0]), c2=triple(point[1][0], boot[1]), c3=triple(point[2][0], boot[2]),
        g_star=triple(optimal_group_size(point[0], point[2])[0], optimal_group_size(boot[0], boot[2])),
        candidates=candidates,
        relative_mse=[triple(relative_point[j], relative_boot[:, j]) for j in range(len(candidates))],
        best=candidates[int(mse_point.argmin())],
        prompts=sum(len(r.grad_sq) for r in records),
    )


def effective_prompts(norms_sq: Tensor) -> float:
    """Participation ratio (sum w)^2 / sum w^2 of the prompts' squared gradient norms w = ||u_k||^2: how many
    prompts would carry the step's gradient signal if they shared it equally (0 when none carries any)."""
    total = float(norms_sq.clamp(min=0).sum())
    return total**2 / float(norms_sq.clamp(min=0).square().sum()) if total > 0 else 0.0


def mixed_groups(rewards: Tensor) -> Tensor:
    """[B, G] -> [B] bool: the groups whose rewards are not all equal (the only ones with a GRPO gradient)."""
    return rewards.amax(dim=1) != rewards.amin(dim=1)


def group_sketches(rewards: Tensor, sketches: Tensor, scored: Tensor,
                   starts: list[int | None]) -> tuple[Tensor, Tensor, Tensor]:
    """The step's groups for `UstatMonitor.observe`: rewards [B, G] of this rank's groups, the update batch's
    sketches [n, D] and scored [n], and each group's first row in the batch (None: not in it, e.g. dropped by
    dynamic sampling). Returns (rewards, scores [B, G, D], scored [B, G])."""
    num_groups, group_size = rewards.shape
    scores = torch.zeros(num_groups, group_size, sketches.shape[1], dtype=torch.float64)
    has = torch.zeros(num_groups, group_size, dtype=torch.bool)
    for g, start in enumerate(starts):
        if start is not None:
            scores[g], has[g] = sketches[start: start + group_size], scored[start: start + group_size]
    return rewards, scores, has


def _seed(*keys: int) -> int:
    return int(np.random.SeedSequence([int(k) for k in keys]).generate_state(1)[0])


# ---------------------------------------------------------------------------------------------------
# The monitor in the training loop
# ---------------------------------------------------------------------------------------------------
class UstatMonitor:
    """The window of recent steps, the estimate logged under ustat/, and group_size_auto's choices."""

    def __init__(self, cfg: Config, world: int):
        a, u = cfg.algorithm, cfg.ustat
        self.seed, self.world = cfg.run.seed, world
        self.auto = a.group_size_auto
        self.every = a.group_size_every
        self.resamples, self.level = u.resamples, u.level
        self.window: deque[StepPrompts] = deque(maxlen=u.window)
        self.choices: list[dict] = []  # {"step", "group_size", "reason"} of every choice group_size_auto made
        if self.auto:
            self.budget = rollouts_per_step(a)
            self.candidates = group_size_candidates(a, world)
            if not self.candidates:
                raise ConfigError(f"algorithm.rollouts_per_step: N = {self.budget} has no group size G in "
                                  f"[max(4, {a.group_size_min}), {a.group_size_max or self.budget // 2}] whose "
                                  f"B = N / G >= 2 prompts split evenly over the {world} ranks")
            # Start at the configured G if feasible, else at the feasible G nearest to it (on a log scale).
            self.group_size = min(self.candidates, key=lambda g: (abs(math.log(g / a.group_size)), g))
        else:
            self.budget = a.prompts_per_step * a.group_size
            self.candidates = [g for g in range(2, self.budget + 1) if self.budget % g == 0]
            self.group_size = a.group_size

    @property
    def prompts_per_step(self) -> int:
        return self.budget // self.group_size

    # -- group_size auto ---------------------------------------------------------------------------------
    def choose_group_size(self, step: int) -> str | None:
        """At every group_size_every-th step (not the first), set group_size to the candidate with the smallest
        predicted MSE; returns why (None when it is not a choice step)."""
        if not self.auto or step == 1 or (step - 1) % self.every:
            return None
        est = estimate(list(self.window), self.budget, self.candidates, self.resamples, self.level,
                       _seed(self.seed, step, 1))
        old = self.group_size
        if est is None:
            reason = (f"step {step}: G stays {old}: no estimate (no step with two prompts in the window, or no group "
                      "with mixed rewards in it)")
        else:
            self.group_size = est.best
            table = ", ".join(f"G={g}: {r[0]:.3f} [{r[1]:.3f}, {r[2]:.3f}]"
                              for g, r in zip(est.candidates, est.relative_mse, strict=True))
            reason = (f"step {step}: G {old} -> {self.group_size}: predicted MSE / best {table}; c1 {est.c1[0]:.4g}, "
                      f"c2 {est.c2[0]:.4g}, c3 {est.c3[0]:.4g}, G* = 1 + sqrt(c3/c1) = {est.g_star[0]:.3g} "
                      f"[{est.g_star[1]:.3g}, {est.g_star[2]:.3g}] from {est.prompts} prompts in "
                      f"{len(self.window)} steps")
        self.choices.append({"step": step, "group_size": self.group_size, "reason": reason})
        return reason

    def components(self) -> tuple[VarianceComponents, float] | None:
        """The window's pooled point estimate of (c1, c2, c3), each at least 0, and gamma_bar = E_q ||grad J(q)||^2
        (the mean of its prompts' grad_sq): what ustat/staleness.py carries to staleness k (grpo_train/pace.py).
        None without a finite estimate."""
        records = list(self.window)
        if not records:
            return None
        c1, c2, c3 = (float(c[0]) for c in pooled_components(records))
        if not all(math.isfinite(c) for c in (c1, c2, c3)):
            return None
        grad_sq = float(torch.cat([r.grad_sq for r in records]).mean())
        return VarianceComponents(max(c1, 0.0), max(c2, 0.0), max(c3, 0.0)), grad_sq

    # -- one step's observation --------------------------------------------------------------------------
    def observe(self, step: int, rewards: Tensor, scores: Tensor, scored: Tensor) -> dict[str, float]:
        """Add this rank's groups of the step (rewards [B, G], score sketches [B, G, D], scored [B, G] bool) to
        the window, gathered over ranks; returns the ustat/ metrics (the same on every rank)."""
        group_size = rewards.shape[1]
        mixed = mixed_groups(rewards)
        usable = ~mixed | scored.all(dim=1)
        metrics = {"ustat/group_size": float(group_size)}
        rows = self._gather(rewards, scores, mixed, usable)  # [B_all, 3 + G + G*D]
        mixed_all, usable_all = rows[:, 0].bool(), rows[:, 1].bool()
        metrics["ustat/mixed_share"] = float(mixed_all.double().mean())
        metrics["ustat/unscored_groups"] = float((~usable_all).sum())
        if group_size >= MIN_GROUP_SIZE:
            kept = rows[usable_all]
            all_rewards = kept[:, 2: 2 + group_size]
            all_scores = kept[:, 2 + group_size:].view(len(kept), group_size, -1)
            record = step_prompts(step, all_rewards, all_scores)
            metrics["ustat/effective_prompts"] = effective_prompts(torch.diagonal(record.gram))
            self.window.append(record)
        est = estimate(list(self.window), self.budget, self.candidates, self.resamples, self.level,
                       _seed(self.seed, step))
        if est is not None:
            metrics.update(self._estimate_metrics(est, group_size))
        return metrics

    def _gather(self, rewards: Tensor, scores: Tensor, mixed: Tensor, usable: Tensor) -> Tensor:
        """Every rank's rows [mixed, usable, rewards (G), scores (G * D)], rank-major."""
        scores = torch.where((mixed & usable)[:, None, None], scores.double(), torch.zeros((), dtype=torch.float64))
        local = torch.cat([mixed[:, None].double(), usable[:, None].double(), rewards.double(),
                           scores.flatten(1)], dim=1)
        if self.world == 1 or not dist.is_initialized():
            return local
        device = torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else "cpu"
        parts = [torch.empty_like(local, device=device) for _ in range(self.world)]
        dist.all_gather(parts, local.to(device))
        return torch.cat(parts).cpu()

    def _estimate_metrics(self, est: Estimate, group_size: int) -> dict[str, float]:
        out = {"ustat/best_group_size": float(est.best), "ustat/window_prompts": float(est.prompts)}
        for name, values in (("c1", est.c1), ("c2", est.c2), ("c3", est.c3), ("g_star", est.g_star)):
            out[f"ustat/{name}"], out[f"ustat/{name}_low"], out[f"ustat/{name}_high"] = values
        if group_size in est.candidates:
            ratio = est.relative_mse[est.candidates.index(group_size)]
            out["ustat/mse_ratio"], out["ustat/mse_ratio_low"], out["ustat/mse_ratio_high"] = ratio
        return out

    # -- checkpoint --------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"group_size": self.group_size, "window": [r.to_json() for r in self.window],
                "choices": self.choices}

    def load_state_dict(self, state: dict) -> None:
        self.group_size = state["group_size"]
        self.window.clear()
        self.window.extend(StepPrompts.from_json(r) for r in state["window"])
        self.choices = list(state["choices"])
