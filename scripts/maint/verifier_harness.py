"""The verifier's regression harness: verdicts lost and gained against a base commit, over tens of thousands of honest
answers in model styles and every labelled and adversarial case in the repo.

    .venv/bin/python scripts/maint/verifier_harness.py --base main            # lost / gained against main
    .venv/bin/python scripts/maint/verifier_harness.py --base HEAD~1 --show 5 # and up to 5 examples of each
    .venv/bin/python scripts/maint/verifier_harness.py --list                 # the case sets and their sizes

Every change to grpo_train/verifier/ states its figure ("harness: 0 lost / 0 gained against <rev>") in its commit.

The cases (the same list for both sides: always built by this file, from the working tree):
  - honest: correct answers as models write them, generated from the reference solutions of GSM8K train + test and
    MATH-500 (../shared/data): each item gets `--styles-per-item` styles drawn with `--seed` from the styles below and
    scripts/bench/verifier_styles.py's (MetaMath, "####", Minerva's "Final Answer: ... I hope it is correct.", boxes
    in \\( \\) or $$, a reasoning block, bold "Answer:", an end-of-turn token, thousands commas, ...);
  - public: the 610 labelled cases of ../shared/data/verifier_cases_public.jsonl;
  - attacks: tests/cases/ (all passes) and tests/test_verifier_styles.py's model styles with their attacks.
Without ../shared/data the honest and public sets are skipped (said on stdout) and the rest still runs.

A verdict is lost when the base scores the response correct and the working tree does not, gained the other way;
changes of status or extracted answer with the same reward are counted apart, and so are changes of the refusing
rule's name alone. It also prints how many cases each rule refuses now, per set (honest / public / attacks): a rule
refusing honest answers is a false negative to look at. The base runs from a temporary
`git worktree` of `--base` (its grpo_train/ imported in place of this tree's), beside the working tree's run; its
verdicts are cached by commit and case-set hash under ~/.cache/grpo_train/verifier_harness/.
Exit status 1 when any verdict is lost or gained (so a script can require 0 / 0).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT.parent / "shared" / "data"
CACHE = Path.home() / ".cache" / "grpo_train" / "verifier_harness" / "v2"  # v2: verdicts carry the rule
KINDS = ("lost", "gained", "changed", "rule")
sys.path.insert(0, str(ROOT / "tests"))  # tests/cases/ and the model styles' test cases
sys.path.insert(0, str(ROOT / "scripts" / "bench"))  # verifier_styles.py


# ---------------------------------------------------------------- honest answers in model styles
def _gsm8k_gold(item: dict) -> str:
    return item["answer"].split("####")[-1].strip().replace(",", "")


def _commas(number: str) -> str:
    """12345 -> 12,345 (models often group thousands)."""
    return f"{int(number):,}" if re.fullmatch(r"\d{4,}", number) else number


def gsm8k_honest(item: dict, rng: random.Random, k: int) -> list[tuple[str, str]]:
    """(style, response) pairs for one GSM8K item, `k` drawn from the styles, each correct by the conventions of
    ../shared/data/README.md."""
    from verifier_styles import gsm8k_styles

    body, gold = item["answer"].split("####")[0].rstrip(), _gsm8k_gold(item)
    text = re.sub(r"<<[^>]*>>", "", body)
    shown = _commas(gold) if rng.random() < 0.5 else gold
    styles = [
        ("gsm8k: '#### N'", f"{text}\n#### {gold}"),
        ("boxed in $...$", f"{text}\nThe answer is $\\boxed{{{shown}}}$."),
        ("boxed in \\[...\\] under a heading", f"{text}\n\n**Final Answer**\n\\[\n\\boxed{{{shown}}}\n\\]"),
        ("boxed in \\(...\\)", f"{text}\n\nTherefore, the answer is \\(\\boxed{{{gold}}}\\)."),
        ("minerva: 'Final Answer: ... I hope it is correct.'",
         f"{text}\nFinal Answer: The final answer is ${gold}$. I hope it is correct."),
        ("llama: 'Therefore, the final answer is: $\\boxed{N}$'",
         f"{text}\n\nTherefore, the final answer is: $\\boxed{{{gold}}}$. I hope it is correct."),
        ("metamath: 'The answer is: N'", f"{text}\nThe answer is: {gold}"),
        ("bold 'Answer:'", f"{text}\n\n**Answer:** {shown}"),
        ("'The answer is N.' with a newline", f"{text}\n\nThe answer is {shown}."),
        ("a reasoning block, then a box", f"<think>\n{text}\n</think>\n\nThe answer is $\\boxed{{{gold}}}$."),
        ("box, then an end-of-turn token", f"{text}\n\n$\\boxed{{{gold}}}$<|im_end|>"),
        ("two agreeing statements", f"{text}\nSo the final answer is {gold}.\n#### {gold}"),
    ]
    styles += [(f"verifier_styles: {name}", response) for name, response in gsm8k_styles(item)]
    return rng.sample(styles, min(k, len(styles)))


def _unboxed(solution: str) -> str:
    """The solution with its \\boxed{X} written as X (models that state the answer in words instead)."""
    out, i = [], 0
    while (start := solution.find("\\boxed{", i)) != -1:
        depth, j = 0, start + len("\\boxed")
        for j in range(start + len("\\boxed"), len(solution)):  # noqa: B007 - j is the closing brace
            depth += {"{": 1, "}": -1}.get(solution[j], 0)
            if depth == 0:
                break
        out += [solution[i:start], solution[start + len("\\boxed{") : j]]
        i = j + 1
    return "".join(out) + solution[i:]


def math_honest(item: dict, rng: random.Random, k: int) -> list[tuple[str, str]]:
    """(style, response) pairs for one MATH-500 problem, `k` drawn from the styles."""
    from verifier_styles import math_styles

    solution, gold = item["solution"], item["answer"]
    plain = _unboxed(solution)
    styles = [
        ("math: the reference solution (boxed)", solution),
        ("math: solution, then Minerva's 'Final Answer'",
         f"{plain}\n\nFinal Answer: The final answer is ${gold}$. I hope it is correct."),
        ("math: solution, then 'the final answer is: $\\boxed{X}$'",
         f"{plain}\n\nTherefore, the final answer is: $\\boxed{{{gold}}}$."),
        ("math: solution, then '**Final Answer**' and a display box",
         f"{plain}\n\n**Final Answer**\n\\[\n\\boxed{{{gold}}}\n\\]"),
        ("math: the answer alone", f"${gold}$"),
        ("math: the answer boxed alone", f"\\(\\boxed{{{gold}}}\\)"),
        ("math: a reasoning block, then a box", f"<think>\n{plain}\n</think>\n\nThe answer is $\\boxed{{{gold}}}$."),
        ("math: 'The answer is $X$.'", f"{plain}\n\nThe answer is ${gold}$."),
    ]
    styles += [(f"verifier_styles: {name}", response) for name, response in math_styles(item)]
    return rng.sample(styles, min(k, len(styles)))


# ---------------------------------------------------------------- the case sets
def build_cases(data: Path, seed: int, per_item: int) -> tuple[list[dict], list[str]]:
    """Every case as {"set", "style", "response", "gold", "dataset", "problem"}, and notes on sets skipped."""
    cases, notes = [], []
    rng = random.Random(seed)
    if (data / "gsm8k_test.jsonl").exists():
        for name in ("gsm8k_train.jsonl", "gsm8k_test.jsonl"):
            for line in (data / name).open():
                item = json.loads(line)
                for style, response in gsm8k_honest(item, rng, per_item):
                    cases.append({"set": "honest", "style": style, "response": response, "gold": _gsm8k_gold(item),
                                  "dataset": "gsm8k", "problem": item["question"]})
        for line in (data / "math500_test.jsonl").open():
            item = json.loads(line)
            for style, response in math_honest(item, rng, per_item + 2):  # fewer items: more styles each
                cases.append({"set": "honest", "style": style, "response": response, "gold": item["answer"],
                              "dataset": "math", "problem": item["problem"]})
        for line in (data / "verifier_cases_public.jsonl").open():
            case = json.loads(line)
            cases.append({"set": "public", "style": case["id"], "response": case["response"], "gold": case["gold"],
                          "dataset": case["dataset"], "problem": case.get("problem")})
    else:
        notes.append(f"{data} is absent: the honest (GSM8K, MATH-500) and public sets are skipped")
    from cases.verifier_attacks import CASES

    for case in CASES:
        cases.append({"set": "attacks", "style": f"{case.category}: {case.why}", "response": case.response,
                      "gold": case.gold, "dataset": case.dataset, "problem": case.problem})
    from test_verifier_styles import STYLES

    for response, gold, dataset, problem, _, why in STYLES:
        cases.append({"set": "attacks", "style": f"styles: {why}", "response": response, "gold": gold,
                      "dataset": dataset, "problem": problem})
    return cases, notes


def case_hash(cases: list[dict]) -> str:
    digest = hashlib.sha256()
    for case in cases:
        digest.update(json.dumps(case, sort_keys=True).encode())
    return digest.hexdigest()[:16]


# ---------------------------------------------------------------- verdicts (run in a child process per side)
def verdicts(cases: list[dict]) -> list[list]:
    """[correct, status, answer, rule] per case, by the grpo_train first on sys.path (rule: the refusing rule's name,
    None before the verifier named its rules)."""
    from grpo_train.verifier import judge_with_timeout, warm_up

    logging.getLogger("math_verify").setLevel(logging.ERROR)  # "Timeout is disabled ...": the verifier's choice
    warm_up()
    out = []
    for case in cases:
        verdict = judge_with_timeout(case["response"], case["gold"], case["dataset"], case["problem"], timeout_s=20.0)
        out.append([verdict.correct, verdict.status, verdict.answer, getattr(verdict, "rule", None)])
    return out


def _child(args: argparse.Namespace) -> None:
    """--score: the verdicts of `--verifier-root`'s grpo_train on the cases file, written as JSON."""
    sys.path.insert(0, args.verifier_root)
    cases = json.loads(Path(args.cases).read_text())
    import grpo_train

    assert Path(grpo_train.__file__).resolve().is_relative_to(Path(args.verifier_root).resolve()), grpo_train.__file__
    Path(args.score).write_text(json.dumps(verdicts(cases)))


def _spawn(root: Path, cases_file: Path, out: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(root)}
    command = [sys.executable, __file__, "--verifier-root", str(root), "--cases", str(cases_file), "--score", str(out)]
    return subprocess.Popen(command, env=env)


def compare(cases: list[dict], base: list[list], head: list[list]) -> dict:
    """(case, base verdict, new verdict) per kind of change: lost, gained, changed (same reward, another status or
    answer), rule (only the refusing rule's name, where the base names one)."""
    report: dict = {kind: [] for kind in KINDS}
    for case, old, new in zip(cases, base, head, strict=True):
        kind = "lost" if old[0] and not new[0] else "gained" if new[0] and not old[0] else None
        if kind is None and old[:3] != new[:3]:
            kind = "changed"
        elif kind is None and old[3] is not None and old[3] != new[3]:
            kind = "rule"
        if kind is not None:
            report[kind].append((case, old, new))
    return report


def _by_rule(cases: list[dict], verdicts: list[list], sizes: dict[str, int]) -> list[tuple[str, list[int]]]:
    """(rule, [count per set, in `sizes`' order]) for each rule that refused a case, by decreasing total."""
    counts: dict[str, dict[str, int]] = {}
    for case, verdict in zip(cases, verdicts, strict=True):
        if verdict[3] is not None:
            per_set = counts.setdefault(verdict[3], dict.fromkeys(sizes, 0))
            per_set[case["set"]] += 1
    rows = [(rule, list(per_set.values())) for rule, per_set in counts.items()]
    return sorted(rows, key=lambda row: -sum(row[1]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", help="the commit (or branch) to compare the working tree's verifier with")
    parser.add_argument("--data", default=str(DATA), help="the folder of gsm8k_*.jsonl, math500_test.jsonl, ...")
    parser.add_argument("--seed", type=int, default=0, help="draws the styles of each honest answer")
    parser.add_argument("--styles-per-item", type=int, default=4, help="honest responses per GSM8K item (MATH: +2)")
    parser.add_argument("--show", type=int, default=3, help="examples printed per kind of change")
    parser.add_argument("--list", action="store_true", help="print the case sets and their sizes, then exit")
    parser.add_argument("--no-cache", action="store_true", help="score the base again even when cached")
    parser.add_argument("--verifier-root", help=argparse.SUPPRESS)  # the child process's options
    parser.add_argument("--cases", help=argparse.SUPPRESS)
    parser.add_argument("--score", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.score:
        _child(args)
        return 0
    started = time.perf_counter()
    cases, notes = build_cases(Path(args.data), args.seed, args.styles_per_item)
    for note in notes:
        print(f"note: {note}")
    sizes: dict[str, int] = {}
    for case in cases:
        sizes[case["set"]] = sizes.get(case["set"], 0) + 1
    print(f"cases: {len(cases)} ({', '.join(f'{name} {n}' for name, n in sizes.items())}); seed {args.seed}")
    if args.list or not args.base:
        if not args.list:
            parser.error("--base is required (or --list)")
        styles: dict[str, int] = {}
        for case in cases:
            if case["set"] == "honest":
                styles[case["style"]] = styles.get(case["style"], 0) + 1
        for style, n in sorted(styles.items()):
            print(f"  {n:6d}  {style}")
        return 0
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", f"{args.base}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()
    CACHE.mkdir(parents=True, exist_ok=True)
    cached = CACHE / f"{sha[:12]}-{case_hash(cases)}.json"
    with tempfile.TemporaryDirectory(prefix="verifier_harness_") as tmp:
        cases_file, head_file = Path(tmp) / "cases.json", Path(tmp) / "head.json"
        cases_file.write_text(json.dumps(cases))
        head_run = _spawn(ROOT, cases_file, head_file)
        if args.no_cache or not cached.exists():
            tree = Path(tmp) / "base"
            subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", str(tree), sha],
                           check=True)
            try:
                if _spawn(tree, cases_file, cached).wait() != 0:
                    raise SystemExit(f"scoring at base {args.base} ({sha[:12]}) failed")
            finally:
                subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)
        if head_run.wait() != 0:
            raise SystemExit("scoring the working tree failed")
        base, head = json.loads(cached.read_text()), json.loads(head_file.read_text())
    report = compare(cases, base, head)
    print(f"base {args.base} ({sha[:12]}) -> working tree, {time.perf_counter() - started:.0f} s")
    for name in sizes:
        counts = [sum(case["set"] == name for case, _, _ in report[kind]) for kind in KINDS]
        correct = sum(new[0] for case, new in zip(cases, head, strict=True) if case["set"] == name)
        print(f"  {name:8s} {sizes[name]:6d} cases, {correct:6d} scored correct now: "
              f"{counts[0]} lost, {counts[1]} gained, {counts[2]} other changes (status or answer), "
              f"{counts[3]} rule names")
    print("  refused now, by rule (docs/verifier.md#the-rules-by-name): " + ", ".join(
        f"{rule} {' / '.join(str(n) for n in per_set)}" for rule, per_set in _by_rule(cases, head, sizes)))
    for kind in KINDS:
        for case, old, new in report[kind][: args.show]:
            print(f"  {kind}: [{case['set']}: {case['style']}] gold {case['gold']!r}, base {old}, now {new}\n"
                  f"      ...{case['response'][-200:]!r}")
    lost, gained = len(report["lost"]), len(report["gained"])
    print(f"harness: {lost} lost / {gained} gained against {args.base} ({sha[:12]}), {len(cases)} cases")
    return 1 if lost or gained else 0


if __name__ == "__main__":
    sys.exit(main())
