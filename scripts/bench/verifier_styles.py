"""Correct answers written the way models write them, over every GSM8K test item and MATH-500 problem: how many
the verifier scores 0, per style. A false-negative check beside the adversarial suite (docs/verifier.md#model-styles).

    .venv/bin/python scripts/bench/verifier_styles.py [--data ../shared/data] [--show 2]

Each style takes the item's reference solution and ends it as a model does: MetaMath's "The answer is: N" after a
statement that is a calculation, a "####" line after one, Llama's step headings, an "Answer:" heading over the
working, a recap of the last step under a condition after the box, a sum of prices, a negative value restated in
prose, a reasoning block before the answer, an end-of-turn token. Every response is correct by the labelling
conventions of ../shared/data/README.md.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path

from grpo_train.verifier import judge_with_timeout

CALCULATION = re.compile(r"<<([^=<>]+)=([^<>]+)>>")  # GSM8K's calculator notes: <<16-3-4=9>>
PRICE_CHAIN = re.compile(r"(\$?[\d,.]+(?:\s*[-+*x×/]\s*\$?[\d,.]+)+)\s*=\s*\$([\d,.]+)")


def gsm8k_gold(item: dict) -> str:
    return item["answer"].split("####")[-1].strip().replace(",", "")


def gsm8k_styles(item: dict) -> list[tuple[str, str]]:
    """(style, response) for one GSM8K item whose last calculation gives the gold."""
    body, gold = item["answer"].split("####")[0].rstrip(), gsm8k_gold(item)
    text = re.sub(r"<<[^>]*>>", "", body)
    calculations = CALCULATION.findall(body)
    if not calculations or calculations[-1][1].strip() != gold:
        return []
    work = calculations[-1][0]
    styles = [
        ("metamath: a calculation, then 'The answer is: N'",
         f"{text}\nSo the answer is {work} = {gold}.\nThe answer is: {gold}"),
        ("a calculation stated, then '#### N'", f"{text}\nThe answer is {work} = {gold}.\n#### {gold}"),
        ("step headings ('Calculate the final answer')",
         f"## Step 1: Work out the quantities\n{text}\n\n## Step 2: Calculate the final answer\n"
         f"{work} = {gold}\n\n#### {gold}"),
        ("an 'Answer:' heading over the working", f"**Answer:**\n\n{text}\n\n#### {gold}"),
        ("a recap under a condition after the box",
         f"The answer is $\\boxed{{{gold}}}$.\n\nIf we redo the last step, the result would be {work} = {gold}."),
        ("a reasoning block, then '#### N'", f"<think>\n{text}\n</think>\n\n#### {gold}"),
        ("an end-of-turn token after '#### N'", f"{text}\n#### {gold}<|im_end|>"),
    ]
    for line in reversed(text.split("\n")):
        chain = PRICE_CHAIN.search(line)
        if chain and line.count("$") >= 2 and chain.group(2).replace(",", "").rstrip(".") in (gold, gold + ".00"):
            statement = f"So the answer is {chain.group(1)} = ${chain.group(2).rstrip('.')}."
            styles.append(("a sum or product of prices", f"{text}\n{statement}"))
            break
    return styles


def math_styles(item: dict) -> list[tuple[str, str]]:
    """(style, response) for one MATH-500 problem."""
    solution, gold = item["solution"], item["answer"]
    styles = [("a reasoning block, then the solution", f"<think>\nLet me work through it.\n</think>\n\n{solution}")]
    if re.fullmatch(r"-\d+|-\\frac\{\d+\}\{\d+\}", gold):
        styles.append(("a negative value restated after the box", f"{solution}\n\nSo the answer is {gold}."))
    return styles


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[3] / "shared" / "data"),
                        help="the folder with gsm8k_test.jsonl and math500_test.jsonl")
    parser.add_argument("--show", type=int, default=0, help="print this many refused responses per style")
    return parser


def main() -> None:
    args = parser().parse_args()
    data = Path(args.data)
    cases = []
    for line in (data / "gsm8k_test.jsonl").open():
        item = json.loads(line)
        gold = gsm8k_gold(item)
        cases += [(style, response, gold, "gsm8k", item["question"]) for style, response in gsm8k_styles(item)]
    for line in (data / "math500_test.jsonl").open():
        item = json.loads(line)
        cases += [(style, response, item["answer"], "math", item["problem"]) for style, response in math_styles(item)]
    total, refused, shown = Counter(), Counter(), Counter()
    for style, response, gold, dataset, problem in cases:
        total[style] += 1
        verdict = judge_with_timeout(response, gold, dataset, problem)
        if not verdict.correct:
            refused[style] += 1
            if shown[style] < args.show:
                shown[style] += 1
                print(f"  [{style}] {verdict.status} {verdict.answer!r}: ...{response[-160:]!r}")
    print(f"{'style':58s} {'correct':>8s} {'scored 0':>9s}")
    for style in total:
        print(f"{style:58s} {total[style]:8d} {refused[style]:9d}")
    print(f"{'all':58s} {sum(total.values()):8d} {sum(refused.values()):9d}")


if __name__ == "__main__":
    main()
