"""Asynchronous GRPO (rollout.max_staleness k, partial rollouts) against the synchronous loop (k = 0): the demo's
model and task over seeds, at equal steps (the same prompts and completions per step, so about equal trained tokens),
and a long-tail setting where a synchronous batch waits on its longest completion.

    .venv/bin/python scripts/studies/async_study.py                         # demo setting, seeds 0 1 2, k 0 1 2
    .venv/bin/python scripts/studies/async_study.py --long-tail --seeds 0   # max_tokens 256, spread lengths
    .venv/bin/python scripts/studies/async_study.py --steps 8 --eval-size 50 --seeds 0 --ks 0 1
    .venv/bin/python scripts/studies/async_study.py --report-only           # summarise the runs already there
    .venv/bin/python scripts/studies/async_study.py --ks 0 1 2 auto         # and rollout.max_staleness=auto

Per run (runs/async[-long-tail]/k<K>-seed<S>, one fresh `grpo-train` process each, one after another): trained
completion tokens, rollout seconds per 1k trained tokens (generation only; scoring is perf/reward_s), mean step
seconds, the engine's idle seconds per step (k >= 1: perf/engine_idle_s; k = 0: step - rollout), the trained
tokens' mean staleness, and the held-out greedy accuracy before and after training. Steps 1 .. warm-up are left
out of the time figures (start-up compilation). Writes <runs>/async-study.json and prints the table with the
ratios to k = 0 (means over seeds).

The long-tail setting (`--long-tail`): the demo with `rollout.max_tokens=256` instead of 48: most completions stop
on their own after ~30 tokens, a few run on to the limit, and a synchronous step that draws one waits for it with an
emptying batch. `--long-tail chat` is the first long-tail setting measured (the chat template without worked
examples: completions of 118-181 tokens on average, many running to the limit, and a model that learns little).
Also reported per run: the engine's decode steps per step (k >= 1: rollout/engine_steps; k = 0: the step's longest
completion, which a synchronous batch decodes to), the count that partial rollouts cut whatever a decode step costs
(scripts/studies/decode_cost.py measures that cost against the batch).

Where the rollout time goes (`cost_fit`, printed under the table): one least-squares line over every measured step of
every run, rollout seconds = a decode step's cost x decode steps + a token's cost x tokens decoded + a resumed
request's cost x requests resumed + a constant (one for k = 0's `generate`, one for the pool). From it, per k >= 1:
the rollout time a step would take if the pool decoded k = 0's tokens in steps of its whole batch ((k + 1) x B x G
sequences) and resumed nothing, against k = 0's: the most any schedule within the bound k could save on that machine
(decoding costs no less than the fitted line). The trainer-side online form of this line, and of the decode steps a
phase takes at each k from the completion lengths: grpo_train/rollout/step_cost.py.

`auto` among `--ks` (runs/.../k<auto>-seed<S> with `rollout.max_staleness=auto`, grpo_train/pace.py; the console's
lines also go to its console.log) is in the table above (its staleness and times are those of whatever k it chose),
and a second table follows, per run and averaged over seeds, for every k: the k in force at the last step (pace/k)
and the share of the steps spent at each k (every training step, the first included); the median |pace/step_s_error|
over the run (the step-time prediction against the measured step at the k in force; target within 15%) and
|pace/step_s_model_error| (the cost model at each step's realized work: without the step's own draws of its longest
completion and its trained groups) and |pace/interval_step_s_error| (the forecast over the steps between two choices,
whose mean step a choice is for); beside the first, the same median for a constant step time known in hindsight
(`hindsight_error`: the best one, and the run's mean step, which a forecast for the choice aims at): what the steps'
own spread leaves to any forecast that knows neither a step's draws nor a trend; the training minutes (every
training step at the mean perf/step_s of the steps after the warm-up: the run's training wall-clock without its
start-up compilation, which falls mostly on whichever run comes first, and without evaluations); and the held-out
accuracy per training minute, (accuracy after - accuracy before) / those minutes (none without evaluations,
`--eval-size 0`). Then auto's "max_staleness auto:" lines, per run. The cost fit leaves auto's runs out. """

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing
from grpo_train.metrics import read_jsonl  # noqa: E402
from grpo_train.rollout.step_cost import least_squares  # noqa: E402

LONG_TAIL = {"demo": ["rollout.max_tokens=256"],
             "chat": ["rollout.max_tokens=256", "data.template=chat", "data.num_shots=0"]}


AUTO = "auto"


def staleness(value: str) -> int | str:
    """A value of --ks: a number k >= 0, or auto."""
    if value == AUTO:
        return AUTO
    try:
        k = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: a number k >= 0 or auto") from None
    if k < 0:
        raise argparse.ArgumentTypeError(f"{value!r}: a number k >= 0 or auto")
    return k


def run(config: Path, k: int | str, seed: int, run_dir: Path, overrides: list[str]) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)
    command = [str(Path(sys.executable).parent / "grpo-train"), "--config", str(config), *overrides,
               f"rollout.max_staleness={k}", f"run.seed={seed}", f"run.output_dir={run_dir}"]
    if k != AUTO:
        subprocess.run(command, cwd=ROOT, check=True)
        return
    # auto: the console (stderr) shown as it comes and kept, for its "max_staleness auto:" lines
    lines = []
    with subprocess.Popen(command, cwd=ROOT, stderr=subprocess.PIPE, text=True, bufsize=1) as process:
        for line in process.stderr:
            sys.stderr.write(line)
            lines.append(line)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "console.log").write_text("".join(lines))
    if process.returncode:
        raise subprocess.CalledProcessError(process.returncode, command)


def _read(run_dir: Path, warmup: int) -> tuple[list[dict], list[dict], int]:
    """A run's metric rows, its measured steps' rows (after the warm-up) and its completions per step."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    measured = [r for r in rows if "train/loss" in r and r["step"] > warmup]
    if not measured:
        raise SystemExit(f"{run_dir}: no step after the {warmup} warm-up steps")
    config = yaml.safe_load((run_dir / "config.yaml").read_text())
    return rows, measured, config["algorithm"]["prompts_per_step"] * config["algorithm"]["group_size"]


def _decode_steps(row: dict) -> int:
    """A step's decode steps: k >= 1, the pool's engine steps; k = 0, its longest completion (a synchronous batch
    decodes to it)."""
    return row.get("rollout/engine_steps", row["train/completion_len_max"])


def result(run_dir: Path, warmup: int) -> dict:
    rows, measured, rollouts = _read(run_dir, warmup)
    steps = [r for r in rows if "train/loss" in r]
    tokens = [r["train/completion_len_mean"] * rollouts for r in measured]
    # rollout servers: the servers' idle time; colocated k >= 1: the engine's; colocated k = 0: all but the rollout
    idle = [r.get("perf/server_idle_s", r.get("perf/engine_idle_s", r["perf/step_s"] - r["perf/rollout_s"]))
            for r in measured]
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    return {
        "run_dir": str(run_dir), "steps": len(steps), "measured_steps": len(measured), "completions_per_step": rollouts,
        "trained_tokens": round(sum(r["train/completion_len_mean"] * rollouts for r in steps)),
        "rollout_s_per_1k_tokens": round(1000 * sum(r["perf/rollout_s"] for r in measured) / sum(tokens), 4),
        "mean_step_s": round(statistics.mean(r["perf/step_s"] for r in measured), 3),
        "engine_idle_s": round(statistics.mean(idle), 3),
        "decode_steps": round(statistics.mean(_decode_steps(r) for r in measured), 1),
        "staleness_mean": round(statistics.mean(r.get("rollout/staleness_mean", 0.0) for r in steps), 3),
        "completion_len_mean": round(statistics.mean(r["train/completion_len_mean"] for r in steps), 1),
        "accuracy_before": evals.get(0), "accuracy_after": evals[max(evals)] if evals else None,
    }


def pace_result(run_dir: Path, k: int | str, warmup: int) -> dict:
    """A run's pace figures (module docstring): the k in force at its last step, the share of its steps at each k,
    the median |pace/step_s_error|, its training minutes and held-out accuracy gained per training minute."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    steps = [r for r in rows if "train/loss" in r]
    in_force = [int(r["pace/k"]) if "pace/k" in r else k for r in steps]
    errors = [abs(r["pace/step_s_error"]) for r in steps if r.get("pace/step_s_error") is not None]
    # The check's measured seconds: each checked step's sum over its span (k + 1 steps at the k in force).
    spans = [(x + 1, sum(r["perf/step_s"] for r in steps[max(0, i - x): i + 1]))
             for i, (r, x) in enumerate(zip(steps, in_force, strict=True)) if r.get("pace/step_s_error") is not None]
    model = [abs(r["pace/step_s_model_error"]) for r in steps if r.get("pace/step_s_model_error") is not None]
    interval = [abs(r["pace/interval_step_s_error"]) for r in steps if r.get("pace/interval_step_s_error") is not None]
    evals = {r["step"]: r["eval/accuracy"] for r in rows if "eval/accuracy" in r}
    measured = [r["perf/step_s"] for r in steps if r["step"] > warmup]
    minutes = len(steps) * statistics.mean(measured) / 60 if measured else 0.0
    gain = evals[max(evals)] - evals[0] if len(evals) > 1 and 0 in evals else None
    log = run_dir / "console.log"
    return {
        "k_last": in_force[-1], "k_steps": "".join(str(x) for x in in_force),
        "k_share": {str(x): round(in_force.count(x) / len(in_force), 3) for x in sorted(set(in_force))},
        "step_s_error_median": round(statistics.median(errors), 4) if errors else None,
        "step_s_model_error_median": round(statistics.median(model), 4) if model else None,
        "interval_error_median": round(statistics.median(interval), 4) if interval else None,
        "step_s_error_hindsight": round(hindsight_error(spans), 4) if spans else None,
        "step_s_error_mean": round(hindsight_error(spans, mean=True), 4) if spans else None,
        "train_minutes": round(minutes, 3),
        "accuracy_per_minute": round(gain / minutes, 4) if gain is not None and minutes else None,
        "choices": [line.strip() for line in log.read_text().splitlines() if line.startswith("max_staleness auto:")]
        if log.exists() else [],
    }


def hindsight_error(spans: list[tuple[int, float]], mean: bool = False, grid: int = 2000) -> float:
    """The median |relative error| over the checked spans ((steps, measured seconds) pairs) of a constant step time
    known in hindsight: the best one (on a `grid`-point grid between the fastest and the slowest step), or with
    `mean` the run's mean step, which a forecast for the choice aims at (seconds per step: the mean, not the typical
    step). Neither knows a step's own draws (its longest completion, how many groups it trains) or a trend."""
    per_step = [m / n for n, m in spans]
    candidates = [sum(m for _, m in spans) / sum(n for n, _ in spans)] if mean else np.linspace(
        min(per_step), max(per_step), grid)
    return float(min(statistics.median(abs(c * n - m) / m for n, m in spans) for c in candidates))


def _share(share: dict) -> str:
    return " ".join(f"{x}:{v:.0%}" for x, v in share.items())


# The pace table's error columns: (key of pace_result, header, width), printed as percentages.
ERROR_COLUMNS = (("step_s_error_median", "|step err| med", 14), ("step_s_error_hindsight", "hindsight", 9),
                 ("step_s_error_mean", "mean", 6), ("interval_error_median", "|interval err| med", 18),
                 ("step_s_model_error_median", "|model err| med", 15))


def mean_known(values) -> float | None:
    """The mean of the values that are not None; None without any."""
    known = [v for v in values if v is not None]
    return statistics.mean(known) if known else None


def _cell(value: float | None, spec: str = ".1%") -> str:
    return "-" if value is None else format(value, spec)


def pace_table(results: list[dict], ks: list) -> None:
    """The second table (module docstring): per run, then the means over seeds per k."""
    errors = " ".join(f"{header:>{width}}" for _, header, width in ERROR_COLUMNS)
    print(f"{'k':>4} {'seed':>4} {'k at end':>8} {'steps at each k':>20} {errors} {'train min':>9} "
          f"{'acc gain/min':>12}  k per step")
    for r in results:
        errors = " ".join(f"{_cell(r.get(key)):>{width}}" for key, _, width in ERROR_COLUMNS)
        print(f"{r['k']!s:>4} {r['seed']:>4} {r['k_last']:>8} {_share(r['k_share']):>20} {errors} "
              f"{r['train_minutes']:>9.2f} {_cell(r['accuracy_per_minute'], '.4f'):>12}  {r['k_steps']}")
    for k in ks:
        mine = [r for r in results if r["k"] == k]
        share = {x: statistics.mean(r["k_share"].get(x, 0.0) for r in mine)
                 for x in sorted({x for r in mine for x in r["k_share"]})}
        errors = " ".join(f"{_cell(mean_known(r.get(key) for r in mine)):>{width}}" for key, _, width in ERROR_COLUMNS)
        print(f"{k!s:>4} {'mean':>4} {','.join(str(r['k_last']) for r in mine):>8} {_share(share):>20} {errors} "
              f"{statistics.mean(r['train_minutes'] for r in mine):>9.2f} "
              f"{_cell(mean_known(r['accuracy_per_minute'] for r in mine), '.4f'):>12}")
    for r in results:  # auto's choices, as its console printed them
        for line in r["choices"]:
            print(f"k{r['k']}-seed{r['seed']}: {line}")


def engine_work(run_dir: Path, warmup: int) -> list[dict]:
    """Per measured step: the engine's decode steps, the tokens it decoded, the requests it resumed, the rollout
    seconds. k = 0 (no pool metrics): a synchronous batch decodes to its longest completion and resumes nothing."""
    _, measured, rollouts = _read(run_dir, warmup)
    return [{"pool": "rollout/engine_steps" in r, "decode_steps": _decode_steps(r),
             "tokens": r.get("rollout/phase_tokens", r["train/completion_len_mean"] * rollouts),
             "resumed": r.get("rollout/resumed", 0), "rollout_s": r["perf/rollout_s"]} for r in measured]


def cost_fit(work: list[dict]) -> dict:
    """The least-squares line through every step of `engine_work` (module docstring): seconds per decode step, per
    token, per resumed request, the constants of `generate` (k = 0) and of the pool, and R^2."""
    x = np.array([[w["decode_steps"], w["tokens"], w["resumed"], not w["pool"], w["pool"]] for w in work], float)
    solved = least_squares(x, np.array([w["rollout_s"] for w in work]))
    if solved is None:
        raise ValueError(f"cost fit: {len(work)} steps do not determine its {x.shape[1]} terms (too few steps, or "
                         f"terms that move together: it needs k = 0 and pool steps, with varied counts)")
    coef, r2 = solved
    return {"decode_step_s": float(coef[0]), "token_s": float(coef[1]), "resumed_s": float(coef[2]),
            "sync_s": float(coef[3]), "pool_s": float(coef[4]), "r2": r2, "steps": len(work)}


def parts(fit: dict, work: list[dict]) -> dict:
    """The fitted rollout seconds per step of `work` (one k), split into its terms (means over the steps)."""
    pool = work[0]["pool"]
    return {"decode_steps_s": fit["decode_step_s"] * statistics.mean(w["decode_steps"] for w in work),
            "tokens_s": fit["token_s"] * statistics.mean(w["tokens"] for w in work),
            "resumed_s": fit["resumed_s"] * statistics.mean(w["resumed"] for w in work),
            "constant_s": fit["pool_s"] if pool else fit["sync_s"],
            "measured_s": statistics.mean(w["rollout_s"] for w in work)}


def ceiling(fit: dict, sync: list[dict], batch: int) -> float:
    """The fitted rollout seconds per step if k = 0's tokens (`sync`) were decoded in steps of `batch` sequences each
    and nothing was resumed, over k = 0's fitted seconds: the lowest ratio a pool of `batch` can reach."""
    tokens = statistics.mean(w["tokens"] for w in sync)
    best = fit["decode_step_s"] * tokens / batch + fit["token_s"] * tokens + fit["pool_s"]
    return best / sum(v for key, v in parts(fit, sync).items() if key != "measured_s")


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, default=ROOT / "configs" / "smollm2-arith-demo.yaml")
    p.add_argument("--ks", type=staleness, nargs="+", default=[0, 1, 2],
                   help="values of rollout.max_staleness: numbers, or auto (grpo_train/pace.py)")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    p.add_argument("--steps", type=int, default=0, help="run.steps (0: the config's)")
    p.add_argument("--eval-size", type=int, default=-1, help="run.eval_size (-1: the config's)")
    p.add_argument("--warmup", type=int, default=2, help="first steps left out of the time figures")
    p.add_argument("--long-tail", nargs="?", const="demo", choices=sorted(LONG_TAIL),
                   help=f"a long-tail setting: demo (the default) {' '.join(LONG_TAIL['demo'])}; "
                   f"chat {' '.join(LONG_TAIL['chat'])}")
    p.add_argument("--runs", type=Path, default=ROOT / "runs")
    p.add_argument("--keep-checkpoints", action="store_true",
                   help="keep each run's final checkpoint (by default removed once the run ends: ~2 GB a run)")
    p.add_argument("--report-only", action="store_true", help="summarise existing runs, train nothing")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                   help="a config override for every run (repeatable)")
    return p


def main() -> None:
    args = parser().parse_args()
    overrides = [*(LONG_TAIL[args.long_tail] if args.long_tail else []), *args.overrides, "run.samples_every=0",
                 "run.checkpoint_every=0"]
    if args.steps:
        overrides.append(f"run.steps={args.steps}")
    if args.eval_size >= 0:
        overrides.append(f"run.eval_size={args.eval_size}")
    folder = args.runs / {None: "async", "demo": "async-long-tail", "chat": "async-long-tail-chat"}[args.long_tail]
    results = []
    for k in args.ks:
        for seed in args.seeds:
            run_dir = folder / f"k{k}-seed{seed}"
            if not args.report_only:
                run(args.config, k, seed, run_dir, overrides)
                if not args.keep_checkpoints:
                    shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)  # the figures come from metrics.jsonl
            results.append({"k": k, "seed": seed, **result(run_dir, args.warmup)})
            if AUTO in args.ks:
                results[-1].update(pace_result(run_dir, k, args.warmup))
    means = {}
    for k in args.ks:
        mine = [r for r in results if r["k"] == k]
        means[k] = {key: statistics.mean(r[key] for r in mine) for key in
                    ("rollout_s_per_1k_tokens", "mean_step_s", "engine_idle_s", "decode_steps", "staleness_mean",
                     "trained_tokens")}
        after = [r["accuracy_after"] for r in mine if r["accuracy_after"] is not None]
        means[k]["accuracy_after"] = statistics.mean(after) if after else None
        means[k]["accuracy_after_spread"] = [min(after), max(after)] if after else None
        if AUTO in args.ks:
            means[k]["k_last"] = [r["k_last"] for r in mine]
            for key in ("step_s_error_median", "step_s_model_error_median", "interval_error_median"):
                means[k][key] = mean_known(r.get(key) for r in mine)
            means[k]["train_minutes"] = statistics.mean(r["train_minutes"] for r in mine)
            means[k]["accuracy_per_minute"] = mean_known(r["accuracy_per_minute"] for r in mine)
    base = means.get(0)
    summary = {"config": str(args.config), "overrides": overrides, "runs": results, "means": means}
    fixed = [k for k in args.ks if k != AUTO]  # the cost fit's: auto's k moves within a run
    work = {k: [w for r in results if r["k"] == k for w in engine_work(Path(r["run_dir"]), args.warmup)]
            for k in fixed}
    per_step = results[0]["completions_per_step"]
    try:
        fit = cost_fit([w for k in fixed for w in work[k]]) if 0 in work and len(work) > 1 else None
    except ValueError as e:
        print(e)  # (say, every step decoded to max_tokens: its decode steps are its constant)
        fit = None
    if fit:
        summary["cost_fit"] = {**fit, "parts": {k: parts(fit, work[k]) for k in fixed},
                               "ceiling": {k: ceiling(fit, work[0], (k + 1) * per_step) for k in fixed if k}}
    out = folder / "async-study.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(summary, indent=2) + "\n")
    w = 4 if AUTO in args.ks else 2  # the k column
    print(f"{'k':>{w}} {'seeds':>5} {'tokens':>7} {'rollout s/1k':>12} {'x k=0':>6} {'step s':>7} {'x k=0':>6} "
          f"{'idle s':>7} {'decode':>6} {'x k=0':>6} {'stale':>6} {'acc after (min-max)':>20}")
    for k, m in means.items():
        acc = (f"{m['accuracy_after']:.3f} ({m['accuracy_after_spread'][0]:.3f}-{m['accuracy_after_spread'][1]:.3f})"
               if m["accuracy_after"] is not None else "-")

        def ratio(key: str, m: dict = m) -> str:
            return f"{m[key] / base[key]:.2f}" if base else "-"

        print(f"{k!s:>{w}} {len(args.seeds):>5} {m['trained_tokens']:>7.0f} {m['rollout_s_per_1k_tokens']:>12.3f} "
              f"{ratio('rollout_s_per_1k_tokens'):>6} {m['mean_step_s']:>7.2f} {ratio('mean_step_s'):>6} "
              f"{m['engine_idle_s']:>7.2f} {m['decode_steps']:>6.1f} {ratio('decode_steps'):>6} "
              f"{m['staleness_mean']:>6.2f} {acc:>20}")
    if fit:
        print(f"rollout s per step ~ {1000 * fit['decode_step_s']:.2f} ms x decode steps + {1000 * fit['token_s']:.3f} "
              f"ms x tokens + {1000 * fit['resumed_s']:.2f} ms x resumed requests + {fit['sync_s']:.3f} s (k = 0) or "
              f"{fit['pool_s']:.3f} s (pool); R^2 {fit['r2']:.3f} over {fit['steps']} steps")
        for k, p in summary["cost_fit"]["parts"].items():
            best = summary["cost_fit"]["ceiling"].get(k)
            print(f"k = {k}: measured {p['measured_s']:.3f} s = decode steps {p['decode_steps_s']:.3f} + tokens "
                  f"{p['tokens_s']:.3f} + resumed {p['resumed_s']:.3f} + constant {p['constant_s']:.3f}"
                  + (f"; every step full ({(k + 1) * per_step} sequences), none resumed: {best:.2f}x k = 0"
                     if best else ""))
    if AUTO in args.ks:
        pace_table(results, args.ks)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
