"""Write Countdown problems as jsonl: each row {"nums": [...], "target": N}, solvable by construction.

    python examples/countdown/make_data.py                          # 2,000 train + 200 test, 3 numbers in 1-10
    python examples/countdown/make_data.py --count 4 --max-number 50 --out /tmp/cd4

Each problem: `count` numbers drawn from 1..max-number, combined in a random order by random operators into
a random binary tree; kept when the value is a positive integer no larger than --max-target (so every
problem has at least that solution). Train and test hold no (numbers, target) pair in common. Seeded.
"""

from __future__ import annotations

import argparse
import json
import random
from fractions import Fraction
from pathlib import Path

OPERATORS = {"+": Fraction.__add__, "-": Fraction.__sub__, "*": Fraction.__mul__, "/": Fraction.__truediv__}


def combine(rng: random.Random, values: list[Fraction]) -> Fraction | None:
    """A random binary tree over `values` (in their order) with random operators; None on a division by 0."""
    if len(values) == 1:
        return values[0]
    split = rng.randint(1, len(values) - 1)
    left, right = combine(rng, values[:split]), combine(rng, values[split:])
    op = rng.choice(list(OPERATORS))
    if left is None or right is None or (op == "/" and right == 0):
        return None
    return OPERATORS[op](left, right)


def draw(rng: random.Random, count: int, max_number: int, max_target: int) -> dict:
    while True:
        nums = [rng.randint(1, max_number) for _ in range(count)]
        order = rng.sample(nums, len(nums))
        value = combine(rng, [Fraction(n) for n in order])
        if value is not None and value.denominator == 1 and 0 < value <= max_target:
            return {"nums": nums, "target": int(value)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(Path(__file__).parent / "data"), help="output folder")
    parser.add_argument("--train", type=int, default=2000, help="training problems")
    parser.add_argument("--test", type=int, default=200, help="held-out problems")
    parser.add_argument("--count", type=int, default=3, help="numbers per problem")
    parser.add_argument("--max-number", type=int, default=10, help="largest number")
    parser.add_argument("--max-target", type=int, default=50, help="largest target")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = random.Random(f"countdown-{args.seed}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    seen: set[tuple] = set()
    for split, size in (("test", args.test), ("train", args.train)):
        rows = []
        for _ in range(1000 * size):
            row = draw(rng, args.count, args.max_number, args.max_target)
            key = (tuple(sorted(row["nums"])), row["target"])
            if key not in seen:  # else a repeat, or (train) a held-out problem
                seen.add(key)
                rows.append(row)
            if len(rows) == size:
                break
        else:
            raise SystemExit(f"only {len(rows)} distinct {split} problems found; raise --max-number or --count")
        path = out / f"{split}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        print(f"wrote {len(rows)} problems to {path}")


if __name__ == "__main__":
    main()
