"""Paper Fig. 5 / Table 2 at small scale: train with each G at a fixed budget B * G; held-out accuracy.

    .venv/bin/python scripts/studies/group_size_sweep.py --config configs/advisor-smollm2.yaml --budget 16 \\
        --group-sizes 2,4,8,16 --seeds 0,1,2
    .venv/bin/python scripts/studies/group_size_sweep.py --config configs/tiny-cpu.yaml --budget 8 \\
        --group-sizes 2,4 --seeds 0 --advisor-json none run.steps=2      # plumbing check, tiny model

Zhou et al. 2026, Section 5.2: at a fixed number of sampled completions per step N = B * G, the group size
that gives the best held-out accuracy is the same at every checkpoint and every budget (the "universality"
of G*, Theorem 7). For every (G, seed) this runs the trainer as its own process through the CLI,

    grpo-train --config F algorithm.group_size=G algorithm.prompts_per_step=N/G run.seed=S run.output_dir=...

(`python -m grpo_train`, the same entry point), then reads each run's metrics.jsonl: eval/accuracy rows at
step 0, every run.eval_every steps and at the end. It reports the mean accuracy over seeds with a 95%
Student-t interval at each eval step, marks the empirical best G per step, and puts the advisor's G* next to
it: read from --advisor-json, or computed first by `python -m grpo_train.ustat.advisor --config F --budget N`
(written to <out>/advisor/advice.json). A run whose metrics already hold its final eval is not run again, so
an interrupted sweep continues where it stopped (runs go seed by seed, every G for a seed before the next seed);
`--report-only` summarises what --out holds without training. Writes sweep.json and sweep.png to --out.

Deviations from the paper: 5 seeds and G up to 128 on GSM8K with a 1.5B model there; here a 135M model on the
synthetic arithmetic set, a handful of steps and seeds (CPU), so the intervals are wide.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
from grpo_train.metrics import METRICS_FILE, read_jsonl  # noqa: E402

# Two-sided 95% Student-t quantiles by degrees of freedom (no scipy in the stack).
T_QUANTILE_95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262,
                 10: 2.228}


def mean_interval(values: list[float]) -> tuple[float, float]:
    """(mean, half-width of the 95% Student-t interval); half-width 0 for a single value."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, 0.0
    quantile = T_QUANTILE_95.get(len(values) - 1, 1.96)
    return mean, quantile * statistics.stdev(values) / len(values) ** 0.5


def eval_accuracy(run_dir: Path) -> dict[int, float]:
    """step -> eval/accuracy from a run's metrics.jsonl (empty when the run has not evaluated yet)."""
    return {row["step"]: row["eval/accuracy"] for row in read_jsonl(run_dir / METRICS_FILE)
            if row.get("eval/accuracy") is not None}


def run_training(config: str, overrides: list[str], run_dir: Path, final_step: int) -> float | None:
    """Train one (G, seed) through the CLI unless its final eval is already logged; returns the wall time
    in seconds (None when skipped). The run's console output goes to run_dir/train.log."""
    if final_step in eval_accuracy(run_dir):
        return None
    run_dir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "grpo_train", "--config", config, *overrides,
               f"run.output_dir={run_dir}", "run.resume=auto"]
    print("  $ " + " ".join(command), flush=True)
    start = time.perf_counter()
    with open(run_dir / "train.log", "a") as log:
        result = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, check=False)
    if result.returncode != 0:
        tail = (run_dir / "train.log").read_text().splitlines()[-15:]
        raise RuntimeError(f"training failed (exit {result.returncode}) in {run_dir}:\n" + "\n".join(tail))
    return time.perf_counter() - start


def advisor_group_size(args: argparse.Namespace, out: Path) -> dict | None:
    """The advisor's record (its json), computed with the sweep's config and budget unless given (or unless
    --report-only, which only reads it)."""
    if args.advisor_json == "none":
        return None
    path = Path(args.advisor_json) if args.advisor_json else out / "advisor" / "advice.json"
    if not path.exists():
        if args.report_only:  # report what is there: no advisor run either
            return None
        command = [sys.executable, "-m", "grpo_train.ustat.advisor", "--config", args.config, "--budget",
                   str(args.budget), "--candidates", ",".join(map(str, args.group_sizes)),
                   "--out", str(path.parent), *args.overrides]
        print("advisor: $ " + " ".join(command), flush=True)
        subprocess.run(command, check=False)
    record = json.loads(path.read_text())
    return record if record.get("advice") else None


def summarise(accuracy: dict[int, dict[int, dict[int, float]]]) -> dict[str, dict]:
    """accuracy[G][seed][step] -> per step: per G (mean, half-width, n) and the best G by mean."""
    steps = sorted({step for by_seed in accuracy.values() for curve in by_seed.values() for step in curve})
    table = {}
    for step in steps:
        cells = {}
        for g, by_seed in accuracy.items():
            values = [curve[step] for curve in by_seed.values() if step in curve]
            if values:
                mean, half = mean_interval(values)
                cells[g] = {"mean": mean, "half_width": half, "seeds": len(values)}
        table[str(step)] = {"by_group_size": {str(g): c for g, c in cells.items()},
                            "best_group_size": max(cells, key=lambda g: cells[g]["mean"])}
    return table


def print_table(table: dict[str, dict], group_sizes: list[int], budget: int, advised: int | None) -> None:
    print(f"\nheld-out greedy accuracy, mean over seeds +- 95% t-interval (N = {budget} completions per "
          "step; * = best G at that step)")
    header = " ".join(f"{f'G={g} (B={budget // g})':>17}" for g in group_sizes)
    print(f"{'step':>5} {header} {'best G':>7}")
    for step, row in table.items():
        cells = []
        for g in group_sizes:
            cell = row["by_group_size"].get(str(g))
            mark = "*" if g == row["best_group_size"] else " "
            cells.append(f"{cell['mean']:.3f}+-{cell['half_width']:.3f}{mark}" if cell else "-")
        print(f"{step:>5} " + " ".join(f"{c:>17}" for c in cells) + f" {row['best_group_size']:>7}")
    most = max(cell["seeds"] for row in table.values() for cell in row["by_group_size"].values())
    fewer = [f"G={g} step {step} ({cell['seeds']})" for step, row in table.items()
             for g, cell in row["by_group_size"].items() if cell["seeds"] < most]
    if fewer:
        print(f"cells with fewer than {most} seeds: " + ", ".join(fewer))
    print(f"advisor's G* = {advised if advised is not None else 'n/a'}; empirical best G at the last step = "
          f"{list(table.values())[-1]['best_group_size']}")


def plot(table: dict[str, dict], group_sizes: list[int], advised: int | None, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [int(s) for s in table]
    fig, (curves, final) = plt.subplots(1, 2, figsize=(11, 4))
    for g in group_sizes:
        points = [(int(s), row["by_group_size"][str(g)]) for s, row in table.items()
                  if str(g) in row["by_group_size"]]
        xs = [s for s, _ in points]
        means = [c["mean"] for _, c in points]
        halves = [c["half_width"] for _, c in points]
        curves.errorbar(xs, means, yerr=halves, marker="o", capsize=3, label=f"G = {g}")
    curves.set(xlabel="step", ylabel="held-out accuracy", title="accuracy during training (95% t-interval)")
    curves.legend(fontsize=8)
    curves.grid(alpha=0.3)
    last = table[str(steps[-1])]["by_group_size"]
    sizes = [g for g in group_sizes if str(g) in last]
    final.errorbar(sizes, [last[str(g)]["mean"] for g in sizes],
                   yerr=[last[str(g)]["half_width"] for g in sizes], marker="o", capsize=3, color="tab:blue",
                   label=f"step {steps[-1]}")
    if advised is not None:
        final.axvline(advised, color="tab:green", ls="--", label=f"advisor G* = {advised}")
    final.set_xscale("log", base=2)
    final.set_xticks(sizes, [str(g) for g in sizes])
    final.set(xlabel="group size G", ylabel="held-out accuracy", title="final accuracy vs G")
    final.legend(fontsize=8)
    final.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", required=True, help="training config (steps, eval_every, eval_size, ...)")
    p.add_argument("--budget", type=int, required=True, help="N = B * G completions per step")
    p.add_argument("--group-sizes", default="2,4,8,16,32", help="comma-separated G values dividing N")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds")
    p.add_argument("--advisor-json", default="",
                   help="the advisor's advice.json; 'none' to skip the advisor")
    p.add_argument("--out", default="runs/group_size_sweep")
    p.add_argument("--report-only", action="store_true",
                   help="train nothing: summarise the runs already in --out (a missing or unfinished run counts "
                        "at the eval steps it logged; each cell records its number of seeds)")
    p.add_argument("overrides", nargs="*", metavar="key=value", help="config overrides for every run")
    return p


def main() -> None:
    cli = parser()
    args = cli.parse_args()
    args.group_sizes = [int(g) for g in args.group_sizes.split(",")]
    seeds = [int(s) for s in args.seeds.split(",")]
    if any(args.budget % g for g in args.group_sizes):
        cli.error(f"every group size must divide the budget {args.budget}")
    from grpo_train.config import load_config

    cfg = load_config(args.config, args.overrides)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    advisor = advisor_group_size(args, out)
    advised = advisor["advice"]["recommended"] if advisor else None

    accuracy: dict[int, dict[int, dict[int, float]]] = {}
    wall: dict[str, float] = {}
    for seed in seeds:  # seed-major: a sweep cut short still has every G for its first seeds
        for g in args.group_sizes:
            run_dir = out / f"G{g}-seed{seed}"
            overrides = [*args.overrides, f"algorithm.group_size={g}",
                         f"algorithm.prompts_per_step={args.budget // g}", f"run.seed={seed}"]
            print(f"G = {g}, B = {args.budget // g}, seed {seed}", flush=True)
            seconds = None if args.report_only else run_training(args.config, overrides, run_dir, cfg.run.steps)
            if seconds is not None:
                wall[run_dir.name] = round(seconds, 1)
            accuracy.setdefault(g, {})[seed] = eval_accuracy(run_dir)
    table = summarise(accuracy)
    print_table(table, args.group_sizes, args.budget, advised)
    record = {"config": args.config, "overrides": args.overrides, "budget": args.budget,
              "group_sizes": args.group_sizes, "seeds": seeds, "steps": cfg.run.steps,
              "advisor_group_size": advised, "advisor": advisor, "table": table,
              "accuracy": {str(g): {str(s): curve for s, curve in by_seed.items()}
                           for g, by_seed in accuracy.items()},
              "run_wall_s": wall, "wall_s": round(time.perf_counter() - start, 1)}
    (out / "sweep.json").write_text(json.dumps(record, indent=2))
    plot(table, args.group_sizes, advised, out / "sweep.png")
    print(f"wrote {out / 'sweep.json'} and {out / 'sweep.png'} in {record['wall_s']:.0f} s")


if __name__ == "__main__":
    main()
