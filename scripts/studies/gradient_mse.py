"""Paper Fig. 4 on a real model: MSE of the vanilla, GRPO-type and oracle policy-gradient estimators vs G.

    .venv/bin/python scripts/studies/gradient_mse.py  # SmolLM2-135M, both templates
    .venv/bin/python scripts/studies/gradient_mse.py --templates fewshot --prompts 8 --samples 32  # a quick look

Zhou et al. 2026, Section 5.1: on synthetic integer arithmetic, the GRPO-type estimator's MSE lies between
the vanilla REINFORCE estimator's and that of an oracle that knows the value V(q), and approaches the
oracle's as G grows (Corollaries 4 and 5). Here, for each prompt template (`chat` = zero-shot and
`fewshot` = three worked examples, standing in for the paper's Instruct and ICL models):

1. Sample P training prompts, M scored completions and E reward-only completions each (advisor.sample_groups:
   the config's engine and temperature, verifier rewards).
2. Score the M completions: a seeded random projection of grad_W log pi(o | q) of the last layer's down_proj
   (or --projection o_proj) at the sampling temperature (advisor.ScoreProjector; D = --dim).
3. For each G: split the M completions of a prompt at random into M / G disjoint groups, R times; compute each
   group's three estimates with estimators.gradient_estimates (the trainer's own advantage code). All three are
   unbiased for grad J(q), so their MSE is their variance, estimated without knowing grad J(q) by the sample
   variance of the M / G independent group estimates; averaged over the R splits and then over prompts, this
   is E_q MSE(g | q), which is B times the MSE of the minibatch gradient over a fixed set of B prompts (the
   paper's eq. 8 evaluation). The oracle's baseline is a Monte-Carlo value: the mean reward of the prompt's
   other M - G + E completions (independent of the group, so the estimator stays unbiased); the extra MSE
   that this estimated value adds, Var(V_hat) E||s||^2 / G, is estimated and subtracted.
4. 90% bootstrap intervals over prompts for each MSE and for the ratios GRPO / oracle and vanilla / oracle.
5. The theory lines of Theorem 2, c2 / G (oracle) and c2 / G + c3 / (G (G - 1)) (GRPO), with c2, c3 estimated
   from all M completions by estimators.estimate_variance_components.

Writes gradient_mse.json and gradient_mse.png to --out (default runs/gradient_mse).

Deviations: the paper uses Qwen2.5-0.5B, 500 questions and (we assume) full gradients; here SmolLM2-135M, P
questions and one projected layer. Without the correction in step 3 the Monte-Carlo oracle's MSE would exceed
the exact oracle's by about 1 / (M - G + E) of it for 0/1 rewards: 3% at M = 64, G = 32, E = 0, as large as
the GRPO-type estimator's own excess there.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
from grpo_train.config import load_config  # noqa: E402
from grpo_train.models import resolve_model  # noqa: E402
from grpo_train.ustat.advisor import PROJECTIONS, ScoreProjector, completion_scores, sample_groups  # noqa: E402
from grpo_train.ustat.estimators import estimate_variance_components, gradient_estimates  # noqa: E402

ESTIMATORS = ("vanilla", "grpo", "oracle")
COLORS = {"vanilla": "tab:blue", "grpo": "tab:orange", "oracle": "tab:green"}


def per_prompt_mse(rewards: torch.Tensor, scores: torch.Tensor, extra_rewards: torch.Tensor, group_size: int,
                   splits: int, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """Unbiased estimates of MSE(g | q) for each prompt and estimator at one group size.

    rewards [P, M], scores [P, M, D]; extra_rewards [P, E] of reward-only completions (E may be 0).
    Returns name -> [P]: the sample variance (trace) of the M / G group estimates, averaged over splits.
    The oracle's baseline V_hat is the mean reward of the n = M - G + E completions outside the group; being
    independent of the group it keeps the estimator unbiased, but adds Var(V_hat) E||s||^2 / G to its MSE,
    which is subtracted (Var(V_hat) estimated by the sample variance of those n rewards over n, E||s||^2 by
    the group's mean squared score), so that "oracle" estimates the MSE with the true V(q).
    """
    num_prompts, num_samples = rewards.shape
    groups = num_samples // group_size
    outside = num_samples - group_size + extra_rewards.shape[1]  # n
    reward_sum = rewards.sum(1, keepdim=True) + extra_rewards.sum(1, keepdim=True)  # [P, 1]
    reward_sq_sum = rewards.square().sum(1, keepdim=True) + extra_rewards.square().sum(1, keepdim=True)
    total = {name: torch.zeros(num_prompts, dtype=torch.float64) for name in ESTIMATORS}
    for _ in range(splits):
        order = torch.argsort(torch.rand(num_prompts, num_samples, generator=generator), dim=1)  # [P, M]
        used = order[:, : groups * group_size]
        r = rewards.gather(1, used).view(num_prompts * groups, group_size)  # [P * groups, G]
        s = scores[torch.arange(num_prompts)[:, None], used].view(num_prompts * groups, group_size, -1)
        r_by_prompt = r.view(num_prompts, groups, group_size)
        outside_sum = reward_sum - r_by_prompt.sum(-1)  # [P, groups]
        outside_sq_sum = reward_sq_sum - r_by_prompt.square().sum(-1)
        baseline = outside_sum / outside  # V_hat per group
        baseline_variance = (outside_sq_sum - outside_sum.square() / outside) / (outside - 1) / outside
        mean_sq_score = s.square().sum(-1).mean(-1).view(num_prompts, groups)  # [P, groups]
        estimates = gradient_estimates(r, s, baseline.flatten())  # name -> [P * groups, D]
        for name, estimate in estimates.items():
            per_group = estimate.view(num_prompts, groups, -1)
            deviation = per_group - per_group.mean(dim=1, keepdim=True)
            total[name] += deviation.square().sum(dim=(1, 2)) / (groups - 1)
        total["oracle"] -= (baseline_variance * mean_sq_score).mean(dim=1) / group_size
    return {name: value / splits for name, value in total.items()}


def baseline_diagnostics(rewards: torch.Tensor, scores: torch.Tensor) -> dict[str, float]:
    """Why vanilla can beat the oracle: over prompts with mixed rewards, the mean squared score of right and
    wrong completions, and the MSE-optimal constant baseline b*(q) = E[r ||s||^2] / E[||s||^2] (minimiser
    of E||(r - b) s||^2) next to V(q) = E[r]. The oracle baseline V is optimal only when ||s|| does not
    depend on r (the paper's Assumption 2); b* near 0 favours vanilla (b = 0).
    rewards [P, M] (0/1), scores [P, M, D]."""
    mixed = rewards.std(dim=1) > 0
    r, sq_norm = rewards[mixed], scores[mixed].square().sum(-1)  # [P', M]
    right = r > 0
    return {
        "score_sq_norm_right": float(sq_norm[right].mean()),
        "score_sq_norm_wrong": float(sq_norm[~right].mean()),
        "optimal_baseline": float(((r * sq_norm).sum(1) / sq_norm.sum(1)).mean()),
        "value": float(r.mean()),
    }


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when the denominator is 0 (no prompt with mixed rewards)."""
    return float(numerator / denominator) if denominator else float("nan")


def boot_ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return numerator / denominator


def bootstrap_means(values: dict[str, np.ndarray], resamples: int, seed: int) -> dict[str, np.ndarray]:
    """Means over prompts of each [P] array for `resamples` resamples of the prompts: name -> [resamples]."""
    rng = np.random.default_rng(seed)
    num_prompts = len(next(iter(values.values())))
    rows = rng.integers(num_prompts, size=(resamples, num_prompts))
    return {name: v[rows].mean(axis=1) for name, v in values.items()}


def interval(samples: np.ndarray, level: float = 0.9) -> list[float]:
    tail = (1 - level) / 2
    # Resamples without any prompt of mixed rewards give 0 / 0 ratios: the interval is over the rest.
    return [float(np.nanquantile(samples, tail)), float(np.nanquantile(samples, 1 - tail))]


def study(template: str, args: argparse.Namespace) -> dict:
    """The whole study for one prompt template; returns its json record."""
    overrides = [f"model.name_or_path={args.model}", f"data.template={template}",
                 f"rollout.max_tokens={args.max_tokens}", f"rollout.temperature={args.temperature}",
                 *args.overrides]
    cfg = load_config(args.config, overrides)
    per_prompt = args.samples + args.extra
    t0 = time.perf_counter()
    sampled = sample_groups(cfg, args.prompts, per_prompt, args.seed)
    t_sample = time.perf_counter() - t0
    scored = [r for i, r in enumerate(sampled.rollouts) if i % per_prompt < args.samples]
    rewards = sampled.rewards[:, : args.samples]  # [P, M]
    extra_rewards = sampled.rewards[:, args.samples :]  # [P, E]
    t0 = time.perf_counter()
    projector = ScoreProjector(resolve_model(cfg.model.name_or_path), args.projection, args.dim, args.seed,
                               cfg.rollout.temperature)
    scores = completion_scores(projector, scored, args.samples)  # [P, M, D]
    t_score = time.perf_counter() - t0

    generator = torch.Generator().manual_seed(args.seed)
    components = estimate_variance_components(rewards, scores)
    rows = []
    for g in args.group_sizes:
        mse = per_prompt_mse(rewards, scores, extra_rewards, g, args.splits, generator)
        values = {name: v.numpy() for name, v in mse.items()}
        boot = bootstrap_means(values, args.resamples, args.seed + g)
        rows.append({
            "group_size": g,
            **{name: float(v.mean()) for name, v in values.items()},
            **{f"{name}_interval": interval(boot[name]) for name in ESTIMATORS},
            "grpo_over_oracle": ratio(values["grpo"].mean(), values["oracle"].mean()),
            "grpo_over_oracle_interval": interval(boot_ratio(boot["grpo"], boot["oracle"])),
            "vanilla_over_grpo": ratio(values["vanilla"].mean(), values["grpo"].mean()),
            "vanilla_over_grpo_interval": interval(boot_ratio(boot["vanilla"], boot["grpo"])),
            "theory_oracle": components.first_order / g,
            "theory_grpo": components.first_order / g + components.second_order / (g * (g - 1)),
            "per_prompt": {name: v.tolist() for name, v in values.items()},  # [P] each
        })
    lengths = [len(r.completion_token_ids) for r in sampled.rollouts]
    return {
        "template": template, "prompts": args.prompts, "samples": args.samples, "extra": args.extra,
        "mean_reward": float(sampled.rewards.mean()),
        "prompts_with_mixed_rewards": int((rewards.std(dim=1) > 0).sum()),
        "mean_completion_tokens": sum(lengths) / len(lengths),
        "truncated": sum(r.truncated for r in sampled.rollouts) / len(sampled.rollouts),
        "components": {"c1": components.between_prompt, "c2": components.first_order,
                       "c3": components.second_order},
        "diagnostics": baseline_diagnostics(rewards, scores),
        "sample_s": round(t_sample, 1), "score_s": round(t_score, 1), "rows": rows,
        "rewards": rewards.tolist(), "score_sq_norms": scores.square().sum(-1).tolist(),  # [P, M] each
    }


def print_table(record: dict) -> None:
    print(f"\n{record['template']}: mean reward {record['mean_reward']:.3f}, "
          f"{record['prompts_with_mixed_rewards']}/{record['prompts']} prompts with mixed rewards, "
          f"{record['mean_completion_tokens']:.0f} tokens per completion; "
          f"sampled in {record['sample_s']:.0f} s, "
          f"scored in {record['score_s']:.0f} s")
    d = record["diagnostics"]
    print(f"prompts with mixed rewards: mean ||s||^2 {d['score_sq_norm_right']:.4g} (right) vs "
          f"{d['score_sq_norm_wrong']:.4g} (wrong); MSE-optimal baseline b* {d['optimal_baseline']:.3f} "
          f"vs V {d['value']:.3f}")
    print(f"{'G':>4} {'vanilla':>10} {'grpo':>10} {'oracle':>10} {'grpo/oracle [90%]':>22} "
          f"{'vanilla/grpo [90%]':>22} {'theory grpo/oracle':>19}")
    for row in record["rows"]:
        go, vg = row["grpo_over_oracle_interval"], row["vanilla_over_grpo_interval"]
        print(f"{row['group_size']:>4} {row['vanilla']:>10.4g} {row['grpo']:>10.4g} {row['oracle']:>10.4g} "
              f"{row['grpo_over_oracle']:>7.3f} [{go[0]:.3f}, {go[1]:.3f}] "
              f"{row['vanilla_over_grpo']:>7.3f} [{vg[0]:.3f}, {vg[1]:.3f}] "
              f"{ratio(row['theory_grpo'], row['theory_oracle']):>19.3f}")


def plot(records: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, len(records), figsize=(5.5 * len(records), 7.5), squeeze=False)
    for col, record in enumerate(records):
        rows = record["rows"]
        sizes = [row["group_size"] for row in rows]
        ax = axes[0, col]
        for name in ESTIMATORS:
            ax.plot(sizes, [row[name] for row in rows], "o-", color=COLORS[name], label=name)
            ax.fill_between(sizes, *zip(*[row[f"{name}_interval"] for row in rows], strict=True),
                            color=COLORS[name], alpha=0.2)
        ax.plot(sizes, [row["theory_grpo"] for row in rows], "--", color=COLORS["grpo"], label="grpo theory")
        ax.plot(sizes, [row["theory_oracle"] for row in rows], "--", color=COLORS["oracle"],
                label="oracle theory")
        ax.set(xscale="log", yscale="log", xlabel="group size G", ylabel="E_q MSE(g | q)",
               title=f"{record['template']} (mean reward {record['mean_reward']:.2f})")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(g) for g in sizes])
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        ax = axes[1, col]
        for key, color in (("grpo_over_oracle", COLORS["grpo"]), ("vanilla_over_grpo", COLORS["vanilla"])):
            ax.plot(sizes, [row[key] for row in rows], "o-", color=color, label=key.replace("_over_", " / "))
            ax.fill_between(sizes, *zip(*[row[f"{key}_interval"] for row in rows], strict=True), color=color,
                            alpha=0.2)
        theory = [ratio(row["theory_grpo"], row["theory_oracle"]) for row in rows]
        ax.plot(sizes, theory, "--", color=COLORS["grpo"], label="grpo / oracle theory")
        ax.axhline(1.0, color="gray", lw=1)
        ax.set(xlabel="group size G", ylabel="MSE ratio")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [str(g) for g in sizes])
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=None, help="base YAML config (default: the built-in defaults)")
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--templates", default="chat,fewshot", help="comma-separated data.template values")
    p.add_argument("--prompts", type=int, default=32, help="P synthetic training prompts")
    p.add_argument("--samples", type=int, default=64, help="M scored completions per prompt")
    p.add_argument("--extra", type=int, default=64, help="E reward-only completions per prompt (oracle)")
    p.add_argument("--group-sizes", default="2,4,8,16,32", help="G values; each must be <= M / 2")
    p.add_argument("--splits", type=int, default=16, help="R random partitions into groups per G")
    p.add_argument("--projection", choices=PROJECTIONS, default="down_proj", help="last-layer matrix")
    p.add_argument("--dim", type=int, default=256, help="D of the score projection")
    p.add_argument("--max-tokens", type=int, default=128, help="completion length cap")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature")
    p.add_argument("--resamples", type=int, default=2000, help="bootstrap resamples over prompts")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/gradient_mse")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="extra dotted config overrides")
    return p


def main() -> None:
    cli = parser()
    args = cli.parse_args()
    args.group_sizes = [int(g) for g in args.group_sizes.split(",")]
    if max(args.group_sizes) * 2 > args.samples:
        cli.error("every G needs at least two disjoint groups: max G <= --samples / 2")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    records = []
    for template in args.templates.split(","):
        records.append(study(template, args))
        print_table(records[-1])
    wall = time.perf_counter() - start
    settings = {k: v for k, v in vars(args).items() if k != "overrides"} | {"overrides": args.overrides}
    (out / "gradient_mse.json").write_text(json.dumps({"settings": settings, "wall_s": round(wall, 1),
                                                       "studies": records}, indent=2))
    plot(records, out / "gradient_mse.png")
    print(f"\nwrote {out / 'gradient_mse.json'} and {out / 'gradient_mse.png'} in {wall:.0f} s")


if __name__ == "__main__":
    main()
