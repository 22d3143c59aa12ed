"""The experiment of docs/u-statistics.md: at a fixed budget of N completions per step, fixed G against
`algorithm.group_size: auto` and dynamic sampling, several seeds, held-out greedy accuracy against steps, rollout
tokens and wall time.

    .venv/bin/python scripts/studies/ustat_experiment.py                # the demo at N = 32, 16 steps, 7 x 3 seeds
    .venv/bin/python scripts/studies/ustat_experiment.py --report-only  # summarise what --out holds
    .venv/bin/python scripts/studies/ustat_experiment.py --config configs/tiny-cpu.yaml --budget 8 \\
        --settings G4,auto,dapo-G4 --seeds 0 run.steps=2 run.eval_size=4 run.eval_every=1  # plumbing check, tiny model

Settings (`--settings`, default all): G<g> (fixed G = g, B = N / g prompts), auto (group_size auto at N, G chosen
every algorithm.group_size_every steps by the online monitor), dapo-G<g> (DAPO dynamic sampling at G = g: extra
prompts until B groups have mixed rewards) and auto-dapo. Every run has the U-statistic monitor on (ustat/ metrics:
the fixed-G runs log the G* they would have chosen). Each (setting, seed) runs through the CLI like the group-size
sweep (`scripts/studies/group_size_sweep.py`'s runner: its own process, console in <run>/train.log,
`run.resume=auto`), so an interrupted experiment continues where it stopped: a run whose final eval is logged is not
run again, a run cut short resumes from its last checkpoint (set run.checkpoint_every to make that worth it). Runs go
seed by seed.

Report (experiment.json, experiment.png in --out): per setting and eval step, the mean held-out accuracy over seeds
with a 95% t-interval, the mean rollout tokens (drawn, dynamic sampling's extra rounds included) and wall time
(sum of perf/step_s) up to that step; the best fixed G per eval step; under auto, G per step for each seed; and the
monitor's G* (the last logged ustat/g_star and ustat/best_group_size of each fixed-G run) next to the empirical
best G.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the sweep's runner, beside this file
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
from group_size_sweep import eval_accuracy, mean_interval, run_training  # noqa: E402

from grpo_train.metrics import METRICS_FILE, read_jsonl  # noqa: E402

DEFAULT_SETTINGS = "G2,G4,G8,G16,auto,dapo-G8,auto-dapo"
USTAT = ["ustat.enabled=true"]


def setting_overrides(name: str, budget: int) -> list[str]:
    """The config overrides of one setting at N = budget completions per step."""
    fixed = re.fullmatch(r"(dapo-)?G(\d+)", name)
    if fixed:
        g = int(fixed.group(2))
        if budget % g:
            raise ValueError(f"setting {name}: G = {g} does not divide the budget {budget}")
        dapo = ["algorithm.dynamic_sampling=dapo"] if fixed.group(1) else []
        return [f"algorithm.group_size={g}", f"algorithm.prompts_per_step={budget // g}", *dapo, *USTAT]
    if name in ("auto", "auto-dapo"):
        dapo = ["algorithm.dynamic_sampling=dapo"] if name == "auto-dapo" else []
        return ["algorithm.group_size=auto", f"algorithm.rollouts_per_step={budget}", *dapo, *USTAT]
    raise ValueError(f"unknown setting {name!r}: G<g>, dapo-G<g>, auto or auto-dapo")


def run_curves(run_dir: Path, budget: int) -> dict:
    """From a run's metrics: eval accuracy per step, and the cumulative rollout tokens and step seconds at each
    step; G per step and the monitor's last estimate."""
    rows = read_jsonl(run_dir / METRICS_FILE)
    tokens = seconds = 0.0
    cumulative: dict[int, tuple[float, float]] = {0: (0.0, 0.0)}
    group_sizes, last = {}, {}
    for row in rows:
        if "perf/step_s" in row:  # a training step (step 0 holds only the eval before training)
            drawn = budget + (row.get("train/dynamic_extra_rollouts") or 0)
            tokens += row["train/completion_len_mean"] * drawn
            seconds += row["perf/step_s"]
            cumulative[row["step"]] = (tokens, seconds)
        if row.get("ustat/group_size") is not None:
            group_sizes[row["step"]] = int(row["ustat/group_size"])
        for key in ("ustat/g_star", "ustat/g_star_low", "ustat/g_star_high", "ustat/best_group_size"):
            if key in row:
                last[key] = row[key]
    return {"accuracy": eval_accuracy(run_dir), "cumulative": cumulative, "group_size": group_sizes,
            "monitor": last}


def summarise(curves: dict[str, dict[int, dict]]) -> dict[str, dict]:
    """curves[setting][seed] -> per eval step and setting: accuracy mean and 95% half-width, mean rollout tokens
    and seconds up to that step; the best fixed-G setting per step."""
    steps = sorted({s for by_seed in curves.values() for c in by_seed.values() for s in c["accuracy"]})
    table = {}
    for step in steps:
        cells = {}
        for name, by_seed in curves.items():
            runs = [c for c in by_seed.values() if step in c["accuracy"]]
            if not runs:
                continue
            mean, half = mean_interval([c["accuracy"][step] for c in runs])
            spent = [c["cumulative"].get(step, (float("nan"), float("nan"))) for c in runs]
            cells[name] = {"mean": mean, "half_width": half, "seeds": len(runs),
                           "rollout_tokens": sum(t for t, _ in spent) / len(spent),
                           "step_seconds": sum(s for _, s in spent) / len(spent)}
        fixed = {n: c for n, c in cells.items() if n.startswith("G")}
        table[str(step)] = {"by_setting": cells,
                            "best_fixed": max(fixed, key=lambda n: fixed[n]["mean"]) if fixed else None}
    return table


def print_report(table: dict[str, dict], curves: dict[str, dict[int, dict]], budget: int) -> None:
    print(f"\nheld-out greedy accuracy, mean over seeds +- 95% t-interval, at N = {budget} completions per step "
          "[mean rollout tokens, mean step seconds so far]")
    for step, row in table.items():
        print(f"step {step}: best fixed setting {row['best_fixed']}")
        for name, cell in row["by_setting"].items():
            print(f"  {name:>10} {cell['mean']:.3f} +- {cell['half_width']:.3f} ({cell['seeds']} seeds) "
                  f"[{cell['rollout_tokens']:.0f} tokens, {cell['step_seconds']:.0f} s]")
    for name, by_seed in curves.items():
        if name.startswith("auto"):
            for seed, c in by_seed.items():
                trajectory = " ".join(str(c["group_size"][s]) for s in sorted(c["group_size"]))
                print(f"G under {name}, seed {seed}: {trajectory}")
        else:
            for seed, c in by_seed.items():
                m = c["monitor"]
                if "ustat/g_star" in m:
                    print(f"monitor in {name}, seed {seed}: G* = {m['ustat/g_star']} [{m.get('ustat/g_star_low')}, "
                          f"{m.get('ustat/g_star_high')}], best candidate G {m.get('ustat/best_group_size')}")


def plot(table: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = sorted({n for row in table.values() for n in row["by_setting"]})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4))
    for name in names:
        points = [(int(s), row["by_setting"][name]) for s, row in table.items() if name in row["by_setting"]]
        for ax, x in zip(axes, ([s for s, _ in points], [c["rollout_tokens"] for _, c in points],
                                [c["step_seconds"] for _, c in points]), strict=True):
            ax.errorbar(x, [c["mean"] for _, c in points], yerr=[c["half_width"] for _, c in points], marker="o",
                        capsize=3, label=name, ls="--" if "dapo" in name else "-")
    for ax, label in zip(axes, ("step", "rollout tokens", "step seconds"), strict=True):
        ax.set(xlabel=label, ylabel="held-out accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/smollm2-arith-demo.yaml", help="training config")
    p.add_argument("--budget", type=int, default=32, help="N completions per step")
    p.add_argument("--settings", default=DEFAULT_SETTINGS, help="comma-separated settings (see above)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated run seeds")
    p.add_argument("--out", default="runs/ustat_experiment")
    p.add_argument("--report-only", action="store_true", help="train nothing: summarise what --out holds")
    p.add_argument("overrides", nargs="*", metavar="key=value",
                   help="config overrides for every run (default, as the group-size sweep's: run.steps=16 "
                   "run.eval_every=8 run.checkpoint_every=8 run.keep_last=1 run.samples_every=0)")
    return p


def main() -> None:
    args = parser().parse_args()
    settings = args.settings.split(",")
    seeds = [int(s) for s in args.seeds.split(",")]
    per_setting = {name: setting_overrides(name, args.budget) for name in settings}  # errors before any run
    # keep_last=1: one checkpoint per run is enough to resume; the demo model's take ~2 GB each (weights and Adam).
    overrides = args.overrides or ["run.steps=16", "run.eval_every=8", "run.checkpoint_every=8", "run.keep_last=1",
                                   "run.samples_every=0"]
    from grpo_train.config import load_config

    final_step = load_config(args.config, [*overrides, *per_setting[settings[0]]]).run.steps
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    curves: dict[str, dict[int, dict]] = {}
    wall: dict[str, float] = {}
    for seed in seeds:
        for name in settings:
            run_dir = out / f"{name}-seed{seed}"
            print(f"{name}, seed {seed}", flush=True)
            if not args.report_only:
                seconds = run_training(args.config, [*overrides, *per_setting[name], f"run.seed={seed}"], run_dir,
                                       final_step)
                if seconds is not None:
                    wall[run_dir.name] = round(seconds, 1)
            curves.setdefault(name, {})[seed] = run_curves(run_dir, args.budget)
    table = summarise(curves)
    print_report(table, curves, args.budget)
    record = {"config": args.config, "budget": args.budget, "settings": per_setting, "seeds": seeds,
              "overrides": overrides, "steps": final_step, "table": table,
              "curves": {n: {str(s): c for s, c in by_seed.items()} for n, by_seed in curves.items()},
              "run_wall_s": wall, "wall_s": round(time.perf_counter() - start, 1)}
    (out / "experiment.json").write_text(json.dumps(record, indent=2, default=str))
    plot(table, out / "experiment.png")
    print(f"wrote {out / 'experiment.json'} and {out / 'experiment.png'}")


if __name__ == "__main__":
    main()
