"""The demo's figures over seeds: runs `make demo`'s command once per seed, one after another, and reports the
held-out greedy accuracy before and after training, the gap, and the wall time of each run, with their mean and
spread.

    .venv/bin/python scripts/studies/demo_seeds.py                # seeds 0 1 2 -> runs/demo-seed{0,1,2}
    .venv/bin/python scripts/studies/demo_seeds.py --seeds 3 4 --config configs/smollm2-arith-demo.yaml
    .venv/bin/python scripts/studies/demo_seeds.py --report-only  # only summarise runs already there
    .venv/bin/python scripts/studies/demo_seeds.py --runs runs/no-mask --set algorithm.seq_correction=none  # a setting

Each run's report also holds the sampler/learner mismatch its steps logged (means over the steps of the train/
keys in MISMATCH_KEYS), so two settings of the correction can be compared on the same seeds.

Each run is a fresh `grpo-train` process (the wall time includes start-up, both evals and the final checkpoint,
as `make demo`); a run folder left from before is removed first. Writes runs/demo-seeds.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from grpo_train.metrics import read_jsonl  # noqa: E402

WALL_FILE = "wall_s.txt"  # written next to metrics.jsonl, so --report-only knows each run's time
MISMATCH_KEYS = ("sampler_logp_gap", "seq_weight_mean", "seq_masked_frac", "seq_capped_frac", "tis_weight_mean")


def run_seed(config: Path, seed: int, run_dir: Path, overrides: list[str]) -> float:
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [str(Path(sys.executable).parent / "grpo-train"), "--config", str(config), *overrides,
               f"run.seed={seed}", f"run.output_dir={run_dir}"]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    wall = time.perf_counter() - started
    (run_dir / WALL_FILE).write_text(f"{wall:.1f}\n")
    return wall


def seed_result(run_dir: Path) -> dict:
    rows = read_jsonl(run_dir / "metrics.jsonl")
    evals = {row["step"]: row for row in rows if "eval/accuracy" in row}
    if 0 not in evals or len(evals) < 2:
        raise SystemExit(f"{run_dir}: needs the eval before training (step 0) and at least one after")
    before, after = evals[0]["eval/accuracy"], evals[max(evals)]["eval/accuracy"]
    wall = run_dir / WALL_FILE
    return {"run_dir": str(run_dir), "before": before, "after": after, "gap_points": round(100 * (after - before), 1),
            "last_step": max(evals), "wall_s": float(wall.read_text()) if wall.exists() else None,
            "per_category": {k.removeprefix("eval/category/"): [evals[0][k], evals[max(evals)][k]]
                             for k in evals[max(evals)] if k.startswith("eval/category/") and k in evals[0]},
            "mismatch": mismatch_means(rows)}


def mismatch_means(rows: list[dict]) -> dict:
    """Each mismatch statistic's mean over the steps that logged it (train/ keys; absent ones left out)."""
    means = {}
    for key in MISMATCH_KEYS:
        values = [row[f"train/{key}"] for row in rows if f"train/{key}" in row]
        if values:
            means[key] = statistics.mean(values)
    return means


def spread(values: list[float]) -> dict:
    return {"mean": round(statistics.mean(values), 2), "min": min(values), "max": max(values),
            "std": round(statistics.stdev(values), 2) if len(values) > 1 else 0.0}


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-arith-demo.yaml")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--runs", type=Path, default=ROOT / "runs", help="folder of the runs (demo-seed<N>)")
    p.add_argument("--report-only", action="store_true", help="summarise existing runs, train nothing")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run (repeatable), e.g. algorithm.seq_correction=none")
    return p


def main() -> None:
    args = parser().parse_args()

    results = []
    for seed in args.seeds:
        run_dir = args.runs / f"demo-seed{seed}"
        if not args.report_only:
            run_seed(args.config, seed, run_dir, args.overrides)
        results.append({"seed": seed, **seed_result(run_dir)})
    walls = [r["wall_s"] for r in results if r["wall_s"] is not None]
    summary = {"config": str(args.config), "overrides": args.overrides, "seeds": results,
               "gap_points": spread([r["gap_points"] for r in results]),
               "after": spread([r["after"] for r in results]),
               "wall_s": spread(walls) if walls else None}
    out = args.runs / "demo-seeds.json"
    out.write_text(json.dumps(summary, indent=2) + "\n")
    print(f"{'seed':>4} {'before':>7} {'after':>7} {'gap':>7} {'wall min':>9}  mismatch (means over steps)")
    for r in results:
        wall = f"{r['wall_s'] / 60:.1f}" if r["wall_s"] is not None else "-"
        mismatch = " ".join(f"{k} {v:.4g}" for k, v in r["mismatch"].items())
        print(f"{r['seed']:>4} {r['before']:>7.3f} {r['after']:>7.3f} {r['gap_points']:>+7.1f} {wall:>9}  {mismatch}")
    gap = summary["gap_points"]
    print(f"gap: mean {gap['mean']:+.1f} points (min {gap['min']:+.1f}, max {gap['max']:+.1f}, std {gap['std']:.1f})")
    if walls:
        print(f"wall: mean {statistics.mean(walls) / 60:.1f} min, max {max(walls) / 60:.1f} min")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
