"""The group-size advisor: which G minimises the GRPO gradient's MSE for this model, data and budget.

    grpo-train advise-group-size --config configs/tiny-cpu.yaml [--budget N] [--prompts P] [key=value ...]
    python -m grpo_train.ustat.advisor --config configs/tiny-cpu.yaml --prompts 8 --samples-per-prompt 8

At a fixed sampling budget of N = B * G completions per step (B prompts, G completions each), the minibatch
GRPO gradient has MSE(G) = [G c1 + c2 + c3 / (G - 1)] / N, minimised at G* = 1 + sqrt(c3 / c1) (Zhou et al.
2026, Proposition 3 and Theorem 7; the formulas and the estimator are in grpo_train/ustat/estimators.py). c1 is the
spread of the per-prompt gradients between prompts, c2 the oracle estimator's per-sample noise (it does not
depend on G at a fixed budget), c3 the extra noise of the leave-one-out group baseline. Steps:

1. Sample: P training prompts in a seeded order, K completions each, from the config's model and rollout
   settings (engine, temperature, max_tokens), rewarded by the verifier with the config's weights.
2. Score: s = grad_W log pi(o | q) for one weight matrix W of the last decoder layer (`--projection`:
   down_proj, the MLP output, by default; or o_proj, the attention output), with log pi computed from
   logits / T at the sampling temperature T, in fp32 on a plain transformers model. Reduced to D numbers
   (`--dim`, default 256) by a fixed seeded sketch: s_d = u_d^T grad_W v_d / sqrt(D) with u_d, v_d
   standard Gaussian, i.e. a random projection onto D rank-one directions. It preserves inner products in
   expectation (E[s . s'] = <grad_W, grad_W'>_F), so the projected c1, c2, c3 are unbiased for those of
   the full W gradient, and it never forms the [out, in] gradient: s_d = sum_t (u_d . delta_t)(v_d . x_t)
   with x_t the layer's input and delta_t the gradient at its output at token t.
3. Estimate c1, c2, c3 from the [P, K] rewards and [P, K, D] scores; predict MSE(G) for every candidate G
   (the divisors of N, or `--candidates`), and G*.
4. Bootstrap over prompts (resample the P prompts with replacement) for intervals on c1..c3, MSE(G) and G*.
5. Print the report; write advice.json and advice.png (MSE(G) relative to its minimum) to `--out`.

Cost: one forward of the prompt, and one forward plus a backward through the last layer and the output
head for each completion (the prompt's keys and values are computed once and shared by its K completions).

Scope and deviations:
- G* is a property of the parameters whose gradient is scored: here one matrix of the last layer, a proxy
  for the full model (the paper measures full gradients). `--projection o_proj` gives a second opinion.
  The whole model's score would cost a full backward per completion.
- The analysis is for mean-centred leave-one-out advantages (algorithm.advantage=rloo, the U-statistic).
  GRPO's std normalisation and Dr. GRPO's group mean rescale the gradient per group; the advisor ignores it.
- The score uses the full tempered softmax; rollout.top_p / top_k truncation is ignored, as in the learner.
- K (`--samples-per-prompt`) must be at least 4: c3 needs four distinct completions of one prompt.
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from grpo_train.config import Config, ConfigError, load_config
from grpo_train.data import PromptSampler, load_problems
from grpo_train.logprob_kernels import token_logprobs_from_logits
from grpo_train.models import resolve_model
from grpo_train.prompts import PromptRenderer
from grpo_train.rewards.functions import reward_functions
from grpo_train.rewards.scoring import verify
from grpo_train.rewards.workers import VerifierPool
from grpo_train.rollout import Rollout, SamplingSpec, make_engine, rollout_seed
from grpo_train.ustat.estimators import VarianceComponents, best_group_size, estimate_variance_components
from grpo_train.ustat.sketch import sketch_factors, sketch_products

PROJECTIONS = ("down_proj", "o_proj")  # a weight matrix of the last decoder layer


# ---------------------------------------------------------------------------------------------------
# 1. Sample: K completions for each of P prompts, and their rewards
# ---------------------------------------------------------------------------------------------------
@dataclass
class Groups:
    rollouts: list[Rollout]  # prompt-major: the K completions of prompt i are rollouts[i K : (i + 1) K]
    rewards: Tensor  # [P, K] verifier reward of each completion
    texts: list[str]  # decoded completions, same order as rollouts


def sample_groups(cfg: Config, num_prompts: int, samples_per_prompt: int, seed: int) -> Groups:
    """Sample K = samples_per_prompt completions for each of num_prompts training prompts (seeded order)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(resolve_model(cfg.model.name_or_path))
    renderer = PromptRenderer(tokenizer, cfg.data)
    problems = PromptSampler(load_problems(cfg.data, "train"), seed=seed).next_batch(num_prompts)
    max_prompt_tokens = cfg.model.max_model_len - cfg.rollout.max_tokens
    prompt_ids = [renderer.check_length(p, max_prompt_tokens) for p in problems]
    spec = SamplingSpec.from_config(cfg.rollout, n=samples_per_prompt, seed=rollout_seed(seed, num_prompts))
    engine = make_engine(cfg, seed=seed)
    try:
        rollouts = engine.generate(prompt_ids, spec)
    finally:
        engine.close()
    with VerifierPool(num_workers=cfg.reward.num_workers, timeout_s=cfg.reward.timeout_s,
                      functions=reward_functions(cfg.reward)) as pool:
        texts, scored = verify(pool, tokenizer, rollouts, problems, cfg.reward)
    rewards = torch.tensor([s.reward for s in scored], dtype=torch.float64)
    return Groups(rollouts, rewards.view(num_prompts, samples_per_prompt), texts)


# ---------------------------------------------------------------------------------------------------
# 2. Score: a random projection of grad_W log pi(o | q), per completion
# ---------------------------------------------------------------------------------------------------
class ScoreProjector:
    """Projected per-completion scores of one weight matrix W [out, in] of the model's last decoder layer."""

    def __init__(self, model_path: str, projection: str = "down_proj", dim: int = 256, seed: int = 0,
                 temperature: float = 1.0, micro_batch: int = 16) -> None:
        from transformers import AutoModelForCausalLM

        if projection not in PROJECTIONS:
            raise ValueError(f"projection {projection!r} is not one of {', '.join(PROJECTIONS)}")
        if temperature <= 0:
            raise ValueError("the score needs a sampling temperature > 0 (greedy decoding has no gradient)")
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32).eval()
        self.model.requires_grad_(False)  # gradients flow only from the hooked layer's output onwards
        # In module order the last match belongs to the last decoder layer.
        self.layer = [m for name, m in self.model.named_modules() if name.endswith(projection)][-1]
        self.temperature = temperature
        self.micro_batch = micro_batch
        out_features, in_features = self.layer.weight.shape
        # u_d, v_d as columns; the same factors as the learner's online sketch at the same seed and D
        self.out_factors, self.in_factors = sketch_factors(out_features, in_features, dim, seed)
        self.dim = dim

    def group_scores(self, prompt: list[int], completions: list[list[int]]) -> tuple[Tensor, Tensor]:
        """Scores [K, D] and log pi(o | q) [K] at the temperature of K completions of one prompt.

        The prompt (all but its last token) is run once; its key/value cache is copied for each micro-batch
        of completions, which are right-padded: causal attention keeps padding out of the real positions.
        Nothing after the last layer mixes positions, so W's output at a position reaches only that
        position's logits: the cached prompt positions contribute nothing to grad_W.
        """
        with torch.no_grad():
            prefix = self.model.model(torch.tensor([prompt[:-1]]), use_cache=True).past_key_values
        scores, logps = [], []
        for start in range(0, len(completions), self.micro_batch):
            chunk = completions[start : start + self.micro_batch]
            s, lp = self._chunk_scores(prefix, prompt[-1], chunk)
            scores.append(s)
            logps.append(lp)
        return torch.cat(scores), torch.cat(logps)

    def _chunk_scores(self, prefix, last_prompt_token: int,
                      completions: list[list[int]]) -> tuple[Tensor, Tensor]:
        rows, width = len(completions), max(len(c) for c in completions)
        # Input at step t is the token before completion token t: the prompt's last token, then o_<t.
        inputs = torch.zeros(rows, width, dtype=torch.long)
        targets = torch.zeros(rows, width, dtype=torch.long)
        valid = torch.zeros(rows, width, dtype=torch.bool)
        for row, tokens in enumerate(completions):
            inputs[row, : len(tokens)] = torch.tensor([last_prompt_token, *tokens[:-1]])
            targets[row, : len(tokens)] = torch.tensor(tokens)
            valid[row, : len(tokens)] = True
        cache = copy.deepcopy(prefix)
        cache.batch_repeat_interleave(rows)
        captured = {}

        def capture(module, args, output):
            captured["input"] = args[0].detach()  # [rows, width, in]
            captured["output"] = output.detach().requires_grad_()  # the graph starts here
            return captured["output"]

        handle = self.layer.register_forward_hook(capture)
        try:
            output = self.model.model(input_ids=inputs, past_key_values=cache, use_cache=True)
        finally:
            handle.remove()
        logits = self.model.lm_head(output.last_hidden_state[valid])  # [n_valid, V]
        token_logp, _ = token_logprobs_from_logits(logits, targets[valid], self.temperature)  # [n_valid]
        # Rows never interact, so one backward of the sum gives every row's own output gradient.
        (delta,) = torch.autograd.grad(token_logp.sum(), captured["output"])  # [rows, width, out]
        # delta is 0 at padding, so the per-position products sum to each row's sketch
        scores = sketch_products(delta, captured["input"], self.out_factors, self.in_factors).sum(1)  # [rows, D]
        row_of_token = valid.nonzero()[:, 0]
        logp = torch.zeros(rows, dtype=token_logp.dtype).index_add_(0, row_of_token, token_logp.detach())
        return scores, logp


def completion_scores(projector: ScoreProjector, rollouts: list[Rollout], samples_per_prompt: int) -> Tensor:
    """[P, K, D] scores of prompt-major rollouts with K completions per prompt."""
    groups = []
    for start in range(0, len(rollouts), samples_per_prompt):
        group = rollouts[start : start + samples_per_prompt]
        scores, _ = projector.group_scores(group[0].prompt_token_ids, [r.completion_token_ids for r in group])
        groups.append(scores)
    return torch.stack(groups).to(torch.float64)


# ---------------------------------------------------------------------------------------------------
# 3-4. Variance components, predicted MSE per G, G*, and a bootstrap over prompts
# ---------------------------------------------------------------------------------------------------
@dataclass
class Advice:
    budget: int  # N = B * G completions per step
    candidates: list[int]  # group sizes compared (divisors of the budget)
    components: VarianceComponents  # point estimates of c1, c2, c3
    components_interval: dict[str, list[float]]  # c1 / c2 / c3 -> [low, high] bootstrap interval
    mse: list[float]  # predicted MSE(G) per candidate, in squared projected-score units
    relative_mse: list[float]  # MSE(G) / min over candidates
    relative_mse_interval: list[list[float]]  # [low, high] per candidate
    recommended: int  # the candidate with the smallest predicted MSE
    optimal: float  # continuous G* = 1 + sqrt(c3 / c1) (inf when c1 <= 0)
    optimal_interval: list[float]  # [low, high] bootstrap interval of the continuous G*
    best_share: dict[int, float]  # fraction of bootstrap resamples in which each candidate is the best
    level: float  # coverage of the intervals
    resamples: int


def default_candidates(budget: int) -> list[int]:
    """Every feasible group size: the divisors G >= 2 of the budget (B = N / G prompts per step)."""
    return [g for g in range(2, budget + 1) if budget % g == 0]


def _interval(values: list[float], level: float) -> list[float]:
    """Percentile interval; 'lower'/'higher' so that infinite values (c1 <= 0) need no interpolation."""
    tail = (1 - level) / 2
    return [float(np.quantile(values, tail, method="lower")),
            float(np.quantile(values, 1 - tail, method="higher"))]


def _relative(components: VarianceComponents, candidates: list[int], budget: int) -> list[float]:
    mse = [components.minibatch_mse(g, budget) for g in candidates]
    return [m / min(mse) for m in mse]


def advise(rewards: Tensor, scores: Tensor, budget: int, candidates: list[int] | None = None,
           resamples: int = 1000, level: float = 0.9, seed: int = 0) -> Advice:
    """Advice from rewards [P, K] and projected scores [P, K, D] (K >= 4) at N = budget completions/step."""
    candidates = candidates or default_candidates(budget)
    point = estimate_variance_components(rewards, scores)
    generator = torch.Generator().manual_seed(seed)
    num_prompts = rewards.shape[0]
    boot = []
    for _ in range(resamples):
        rows = torch.randint(num_prompts, (num_prompts,), generator=generator)
        boot.append(estimate_variance_components(rewards[rows], scores[rows]))
    best = [best_group_size(c, tuple(candidates), budget) for c in boot]
    boot_relative = np.array([_relative(c, candidates, budget) for c in boot])  # [resamples, candidates]
    fields = {"c1": "between_prompt", "c2": "first_order", "c3": "second_order"}
    return Advice(
        budget=budget,
        candidates=candidates,
        components=point,
        components_interval={k: _interval([getattr(c, f) for c in boot], level) for k, f in fields.items()},
        mse=[point.minibatch_mse(g, budget) for g in candidates],
        relative_mse=_relative(point, candidates, budget),
        relative_mse_interval=[_interval(list(boot_relative[:, j]), level) for j in range(len(candidates))],
        recommended=best_group_size(point, tuple(candidates), budget),
        optimal=point.optimal_group_size(),
        optimal_interval=_interval([c.optimal_group_size() for c in boot], level),
        best_share={g: best.count(g) / resamples for g in candidates},
        level=level,
        resamples=resamples,
    )


# ---------------------------------------------------------------------------------------------------
# 5. Report, json and plot
# ---------------------------------------------------------------------------------------------------
def format_report(advice: Advice, current_group_size: int | None = None) -> str:
    c, ci = advice.components, advice.components_interval
    pct = f"{advice.level:.0%}"
    lines = [
        f"variance components ({pct} bootstrap intervals over prompts, {advice.resamples} resamples):",
        f"  c1 between prompts       {c.between_prompt:>10.4g}  [{ci['c1'][0]:.4g}, {ci['c1'][1]:.4g}]",
        f"  c2 oracle noise          {c.first_order:>10.4g}  [{ci['c2'][0]:.4g}, {ci['c2'][1]:.4g}]",
        f"  c3 group-baseline noise  {c.second_order:>10.4g}  [{ci['c3'][0]:.4g}, {ci['c3'][1]:.4g}]",
        f"predicted MSE at N = {advice.budget} completions per step (relative to the best G):",
        f"  {'G':>5} {'B':>5} {'MSE':>11} {'relative':>9} {pct + ' interval':>18} {'best in':>8}",
    ]
    for j, g in enumerate(advice.candidates):
        low, high = advice.relative_mse_interval[j]
        marks = (" <- recommended" if g == advice.recommended else "") + (
            " (config)" if g == current_group_size else "")
        lines.append(f"  {g:>5} {advice.budget // g:>5} {advice.mse[j]:>11.4g} {advice.relative_mse[j]:>9.3f}"
                     f" "
                     f"{f'[{low:.3f}, {high:.3f}]':>18} {advice.best_share[g]:>8.0%}{marks}")
    low, high = advice.optimal_interval
    lines.append(f"G* = {advice.recommended} (continuous 1 + sqrt(c3 / c1) = {advice.optimal:.3g}, "
                 f"{pct} interval [{low:.3g}, {high:.3g}])")
    if not c.between_prompt > 0:
        lines.append("note: c1 <= 0 (no measurable spread between prompts): the largest G is never worse.")
    elif math.isinf(high):
        lines.append("note: in some resamples c1 <= 0, so G* has no upper bound at this level; more prompts "
                     "(--prompts) narrow it.")
    return "\n".join(lines)


def advice_record(advice: Advice) -> dict:
    record = asdict(advice)
    record["components"] = asdict(advice.components)
    record["best_share"] = {str(g): share for g, share in advice.best_share.items()}
    return record


def plot_advice(advice: Advice, path: Path, title: str = "") -> Path:
    """MSE(G) / min over a continuous G axis, the candidates with their intervals, and G*."""
    import matplotlib

    matplotlib.use("Agg")  # files only
    import matplotlib.pyplot as plt

    c, budget = advice.components, advice.budget
    best = min(advice.mse)
    grid = np.geomspace(2, max(advice.candidates), 200)
    curve = [(g * c.between_prompt + c.first_order + c.second_order / (g - 1)) / budget / best for g in grid]
    low = [r - iv[0] for r, iv in zip(advice.relative_mse, advice.relative_mse_interval, strict=True)]
    high = [iv[1] - r for r, iv in zip(advice.relative_mse, advice.relative_mse_interval, strict=True)]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(grid, curve, color="tab:blue", lw=1.5, label="predicted [G c1 + c2 + c3/(G-1)] / N")
    ax.errorbar(advice.candidates, advice.relative_mse, yerr=[low, high], fmt="o", color="tab:blue",
                capsize=3, label=f"candidates ({advice.level:.0%} bootstrap interval)")
    ax.axvline(advice.recommended, color="tab:green", ls="--", label=f"recommended G* = {advice.recommended}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(advice.candidates, [str(g) for g in advice.candidates])
    ax.set_xlabel("group size G (B = N / G prompts)")
    ax.set_ylabel("MSE(G) / min MSE")
    ax.set_title(title or f"GRPO gradient MSE at N = {budget} completions per step")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------------------
# Entry point
# ---------------------------------------------------------------------------------------------------
def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grpo-train advise-group-size",
        description="Predict the GRPO gradient's MSE for each group size G at a fixed sampling budget, and "
        "recommend G* (Zhou et al. 2026, Theorem 7), from rollouts of the config's model on its data.",
    )
    parser.add_argument("--config", required=True, help="YAML config (its model, data, rollout, reward)")
    parser.add_argument("--budget", type=int, default=None,
                        help="completions per step N = B * G (default: prompts_per_step * group_size)")
    parser.add_argument("--prompts", type=int, default=32, help="training prompts sampled (P)")
    parser.add_argument("--samples-per-prompt", type=int, default=16, help="completions per prompt (K >= 4)")
    parser.add_argument("--projection", choices=PROJECTIONS, default="down_proj",
                        help="last-layer weight matrix whose gradient is scored")
    parser.add_argument("--dim", type=int, default=256, help="dimension D of the random projection")
    parser.add_argument("--candidates", default="", help="comma-separated G values (default: divisors of N)")
    parser.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over prompts")
    parser.add_argument("--level", type=float, default=0.9, help="coverage of the bootstrap intervals")
    parser.add_argument("--seed", type=int, default=None,
                        help="seed of prompts, sampling, projection, bootstrap (default: run.seed)")
    parser.add_argument("--out", default=None, help="output folder (default: <run.output_dir>/advisor)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted config overrides")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(f"advise-group-size: config error: {err}", file=sys.stderr)
        return 2
    if args.samples_per_prompt < 4 or args.prompts < 2:
        print("advise-group-size: need --prompts >= 2 and --samples-per-prompt >= 4", file=sys.stderr)
        return 2
    budget = args.budget or cfg.algorithm.prompts_per_step * cfg.algorithm.group_size
    candidates = [int(g) for g in args.candidates.split(",") if g] or default_candidates(budget)
    seed = cfg.run.seed if args.seed is None else args.seed
    out = Path(args.out or Path(cfg.run.output_dir) / "advisor")
    out.mkdir(parents=True, exist_ok=True)

    t0 = time.perf_counter()
    groups = sample_groups(cfg, args.prompts, args.samples_per_prompt, seed)
    t_sample = time.perf_counter() - t0
    t0 = time.perf_counter()
    projector = ScoreProjector(resolve_model(cfg.model.name_or_path), args.projection, args.dim, seed,
                               cfg.rollout.temperature)
    scores = completion_scores(projector, groups.rollouts, args.samples_per_prompt)
    t_score = time.perf_counter() - t0
    rewards = groups.rewards
    mixed = int((rewards.std(dim=1) > 0).sum())
    lengths = [len(r.completion_token_ids) for r in groups.rollouts]
    summary = {
        "config": str(args.config), "overrides": args.overrides, "model": cfg.model.name_or_path,
        "prompts": args.prompts, "samples_per_prompt": args.samples_per_prompt, "projection": args.projection,
        "dim": args.dim, "seed": seed, "temperature": cfg.rollout.temperature,
        "mean_reward": float(rewards.mean()), "prompts_with_mixed_rewards": mixed,
        "mean_completion_tokens": sum(lengths) / len(lengths),
        "truncated": sum(r.truncated for r in groups.rollouts) / len(groups.rollouts),
        "sample_s": round(t_sample, 1), "score_s": round(t_score, 1),
    }
    print(f"advise-group-size: {args.prompts} prompts x {args.samples_per_prompt} completions of "
          f"{cfg.model.name_or_path} (sampled in {t_sample:.0f} s, scored in {t_score:.0f} s); mean reward "
          f"{summary['mean_reward']:.3f}, {mixed} prompts with both right and wrong answers")
    if mixed == 0:
        # Every group's rewards are equal: every GRPO gradient is exactly 0 and there is nothing to compare.
        print("advise-group-size: no prompt had both a right and a wrong answer, so every group's GRPO "
              "gradient is 0 and the MSE cannot tell group sizes apart; use easier prompts, more samples "
              "or another model")
        (out / "advice.json").write_text(json.dumps({**summary, "advice": None}, indent=2))
        return 1
    advice = advise(rewards, scores, budget, candidates, args.resamples, args.level, seed)
    print(format_report(advice, cfg.algorithm.group_size))
    (out / "advice.json").write_text(json.dumps({**summary, "advice": advice_record(advice)}, indent=2))
    plot_advice(advice, out / "advice.png", f"{cfg.model.name_or_path}: GRPO gradient MSE at N = {budget}")
    print(f"advise-group-size: wrote {out / 'advice.json'} and {out / 'advice.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
