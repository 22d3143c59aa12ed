"""Benchmark: our verifier against Math-Verify alone, on the public labelled cases and on our adversarial suite.

    make bench-verifier                      # = .venv/bin/python scripts/bench/bench_verifier.py
    .venv/bin/python scripts/bench/bench_verifier.py --workers 2 --timeout 5 --gsm8k-repeats 20

Reports, for ../shared/data/verifier_cases_public.jsonl (610 cases, scored with their problem text where
they have it, as training scores them):
  - accuracy, false positives and false negatives of `grpo_train.verifier` (through the process pool)
    and of the baseline `math_verify.verify(parse("$" + gold + "$"), parse(response))`;
  - throughput in items/s on GSM8K-style and MATH-style cases: ours through a VerifierPool of
    `--workers` processes (started and warmed up before the clock starts, as in training where the
    pool lives for the whole run), the baseline in this single process. Both are timed in the same
    run, in alternating slices (one pass over the GSM8K cases; 50 MATH cases), so that both see the
    same load from other jobs on the machine.
and, for the adversarial suite tests/cases/verifier_attacks.py (every category; through the same pool):
  - false positives (a reward for an attack), false negatives among its correct responses, and bad golds
    not reported as status "error";
  - the time per item on its cost inputs ((99!)!, 9^{99!}, 190 nested parentheses, ...): each scored once
    by `judge_with_timeout` in this process after `warm_up`, as a worker does; p99 and max.
GSM8K cases are scored `--gsm8k-repeats` times so that the timing is long enough to measure (at 20, ours takes
~0.4 s in all: a stall of a few ms from another process moves the ratio by ~1%, not the ~5% it moved at 5); nothing is
cached on that path (numbers are compared without SymPy). MATH cases are scored once: the workers' parse
caches start empty. The gold is wrapped in $...$ for the baseline because Math-Verify's extractor only
finds LaTeX inside delimiters (a bare gold such as "\\frac{3}{56}" parses to nothing).
Writes bench/verifier.json.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import time
from pathlib import Path

from math_verify import parse, verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # the adversarial suite, tests/cases/
from cases.verifier_attacks import CASES as ATTACKS  # noqa: E402

from grpo_train.rewards.workers import VerifierPool, VerifyItem, status_counts  # noqa: E402
from grpo_train.verifier import judge_with_timeout, warm_up  # noqa: E402

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
OUT = Path(__file__).resolve().parents[2] / "bench" / "verifier.json"


def score_counts(predicted: list[bool], cases: list[dict]) -> dict:
    false_pos = [c["id"] for p, c in zip(predicted, cases, strict=True) if p and not c["expected"]]
    false_neg = [c["id"] for p, c in zip(predicted, cases, strict=True) if not p and c["expected"]]
    return {
        "accuracy": 1 - (len(false_pos) + len(false_neg)) / len(cases),
        "false_positives": len(false_pos),
        "false_negatives": len(false_neg),
        "false_positive_ids": false_pos,
        "false_negative_ids": false_neg,
    }


def baseline_verdict(case: dict) -> bool:
    return bool(verify(parse("$" + case["gold"] + "$"), parse(case["response"])))


def time_interleaved(
    pool: VerifierPool, cases: list[dict], slice_size: int
) -> tuple[list, list, float, float]:
    """Scores `cases` with both verifiers, alternating slices of `slice_size` items, so that both see
    the same machine load (other jobs share the 2 cores). Returns both results and both items/s."""
    ours: list = []
    base: list[bool] = []
    ours_s = base_s = 0.0
    for start in range(0, len(cases), slice_size):
        part = cases[start : start + slice_size]
        began = time.perf_counter()
        ours += pool.score_batch([VerifyItem(c["response"], c["gold"], c["dataset"], c.get("problem")) for c in part])
        ours_s += time.perf_counter() - began
        began = time.perf_counter()
        base += [baseline_verdict(c) for c in part]
        base_s += time.perf_counter() - began
    return ours, base, len(cases) / ours_s, len(cases) / base_s


def score_attacks(pool: VerifierPool) -> dict:
    """False positives, false negatives and unreported bad golds on the adversarial suite, per category."""
    scored = pool.score_batch([VerifyItem(c.response, c.gold, c.dataset, c.problem) for c in ATTACKS])
    false_pos = [c for c, s in zip(ATTACKS, scored, strict=True) if s.accuracy_reward > 0 and not c.expected]
    false_neg = [c for c, s in zip(ATTACKS, scored, strict=True) if s.accuracy_reward == 0 and c.expected]
    silent_gold = [c for c, s in zip(ATTACKS, scored, strict=True) if c.category == "bad_gold" and s.status != "error"]
    categories = sorted({c.category for c in ATTACKS})
    return {
        "cases": len(ATTACKS),
        "attacks": sum(not c.expected for c in ATTACKS),
        "correct_responses": sum(c.expected for c in ATTACKS),
        "false_positives": len(false_pos),
        "false_negatives": len(false_neg),
        "bad_golds_not_error": len(silent_gold),
        "by_category": {k: {"cases": sum(c.category == k for c in ATTACKS),
                            "false_positives": sum(c.category == k for c in false_pos),
                            "false_negatives": sum(c.category == k for c in false_neg)} for k in categories},
        "false_positive_whys": [f"{c.category}: {c.why}" for c in false_pos],
        "false_negative_whys": [f"{c.category}: {c.why}" for c in false_neg],
    }  # fmt: skip


def time_cost_inputs(timeout_s: float) -> dict:
    """Seconds per item on the suite's cost inputs, each scored once in this process after warm-up."""
    warm_up()
    timings = []
    for case in (c for c in ATTACKS if c.category == "cost"):
        began = time.perf_counter()
        verdict = judge_with_timeout(case.response, case.gold, case.dataset, case.problem, timeout_s=timeout_s)
        timings.append((time.perf_counter() - began, case.why, verdict.status))
    timings.sort()
    p99 = timings[min(len(timings) - 1, math.ceil(0.99 * len(timings)) - 1)][0]  # nearest rank
    return {
        "inputs": len(timings),
        "p99_ms": 1000 * p99,
        "max_ms": 1000 * timings[-1][0],
        "slowest": timings[-1][1],
        "timeouts": sum(status == "timeout" for _, _, status in timings),
    }


def run(cases: list[dict], workers: int, timeout_s: float, gsm8k_repeats: int) -> dict:
    """Scores and times both verifiers on the same cases, in this run."""
    gsm8k = [c for c in cases if c["dataset"] == "gsm8k"]
    math_cases = [c for c in cases if c["dataset"] == "math"]
    baseline_verdict({"gold": "1", "response": "$1$"})  # load Math-Verify's grammar before timing
    started = time.perf_counter()
    with VerifierPool(num_workers=workers, timeout_s=timeout_s) as pool:
        pool.wait_until_ready()
        pool_start_s = time.perf_counter() - started
        ours_gsm8k, base_gsm8k, ours_gsm8k_rate, base_gsm8k_rate = time_interleaved(
            pool, gsm8k * gsm8k_repeats, slice_size=len(gsm8k)
        )
        ours_math, base_math, ours_math_rate, base_math_rate = time_interleaved(pool, math_cases, slice_size=50)
        attacks = score_attacks(pool)
        restarts = pool.restarts

    ordered = gsm8k + math_cases  # the first pass of the GSM8K repeats, then MATH
    ours_scored = ours_gsm8k[: len(gsm8k)] + ours_math
    ours = score_counts([s.accuracy_reward > 0 for s in ours_scored], ordered)
    base = score_counts(base_gsm8k[: len(gsm8k)] + base_math, ordered)
    return {
        "cases": {"total": len(cases), "gsm8k": len(gsm8k), "math": len(math_cases),
                  "with_problem": sum("problem" in c for c in cases)},
        "ours": {**ours, "gsm8k_items_per_s": ours_gsm8k_rate, "math_items_per_s": ours_math_rate},
        "math_verify": {**base, "gsm8k_items_per_s": base_gsm8k_rate, "math_items_per_s": base_math_rate},
        "speedup": {"gsm8k": ours_gsm8k_rate / base_gsm8k_rate, "math": ours_math_rate / base_math_rate},
        "statuses": status_counts(ours_scored),
        "attacks": attacks,
        "cost": time_cost_inputs(timeout_s),
        "pool": {"workers": workers, "timeout_s": timeout_s, "start_s": pool_start_s, "restarts": restarts},
        "items_timed": {"gsm8k": len(gsm8k) * gsm8k_repeats, "math": len(math_cases)},
        "machine": {"cpus": os.cpu_count(), "load_avg_1m": os.getloadavg()[0]},
    }  # fmt: skip


def print_table(result: dict) -> None:
    ours, base, speedup = result["ours"], result["math_verify"], result["speedup"]
    cases, pool = result["cases"], result["pool"]
    print(f"{cases['total']} public cases ({cases['gsm8k']} GSM8K, {cases['math']} MATH), load average "
          f"{result['machine']['load_avg_1m']:.1f} on {result['machine']['cpus']} CPUs")  # fmt: skip
    ours_title = f"ours ({pool['workers']} workers)"
    print(f"{'':<18}{ours_title:>20}{'Math-Verify (1 proc)':>22}{'speed-up':>10}")
    rows = [
        ("accuracy", f"{ours['accuracy']:.4f}", f"{base['accuracy']:.4f}", ""),
        ("false positives", ours["false_positives"], base["false_positives"], ""),
        ("false negatives", ours["false_negatives"], base["false_negatives"], ""),
        ("GSM8K items/s", f"{ours['gsm8k_items_per_s']:.0f}", f"{base['gsm8k_items_per_s']:.0f}",
         f"x{speedup['gsm8k']:.1f}"),
        ("MATH items/s", f"{ours['math_items_per_s']:.1f}", f"{base['math_items_per_s']:.1f}",
         f"x{speedup['math']:.1f}"),
    ]  # fmt: skip
    for name, ours_value, base_value, ratio in rows:
        print(f"{name:<18}{ours_value!s:>20}{base_value!s:>22}{ratio:>10}")
    print(f"statuses {result['statuses']}, pool start {pool['start_s']:.1f} s, restarts {pool['restarts']}")
    for label, counts in (("ours", ours), ("Math-Verify", base)):
        if counts["false_positive_ids"] or counts["false_negative_ids"]:
            print(f"{label}: FP {counts['false_positive_ids']} FN {counts['false_negative_ids']}")
    attacks, cost = result["attacks"], result["cost"]
    print(f"adversarial suite ({attacks['attacks']} attacks, {attacks['correct_responses']} correct responses): "
          f"{attacks['false_positives']} false positives, {attacks['false_negatives']} false negatives, "
          f"{attacks['bad_golds_not_error']} bad golds not reported as errors")
    for why in attacks["false_positive_whys"] + attacks["false_negative_whys"]:
        print(f"  {why}")
    print(f"cost inputs ({cost['inputs']}): p99 {cost['p99_ms']:.1f} ms, max {cost['max_ms']:.1f} ms "
          f"({cost['slowest']}), {cost['timeouts']} timeouts")  # fmt: skip


def parser() -> argparse.ArgumentParser:
    """The command line (also read by tests/test_docs.py to check the commands in the docs)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=Path, default=DATA / "verifier_cases_public.jsonl")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=5.0, help="per-item timeout of the pool, seconds")
    p.add_argument("--gsm8k-repeats", type=int, default=20)
    p.add_argument("--out", type=Path, default=OUT)
    return p


def main() -> None:
    args = parser().parse_args()
    if not args.cases.exists():
        sys.exit(f"{args.cases} not found: the benchmark needs ../shared/data next to the repo")
    logging.getLogger("math_verify").setLevel(logging.ERROR)  # its per-timeout warnings flood the table
    cases = [json.loads(line) for line in args.cases.read_text().splitlines() if line.strip()]
    result = run(cases, args.workers, args.timeout, args.gsm8k_repeats)
    print_table(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
