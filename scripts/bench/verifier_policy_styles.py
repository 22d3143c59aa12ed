"""Our verifier beside Math-Verify on responses in the forms policies write:
tests/cases/verifier_policy_styles.py, honest answers in the spellings and commitments of the labelling conventions
1-3 (grpo_train/verifier/rules.py's CONVENTIONS) beside wrong answers and hedges in the same forms.

    .venv/bin/python scripts/bench/verifier_policy_styles.py [--show]

Prints, for each verifier, the honest answers it misses (scored 0) and the wrong answers or hedges it credits; the
baseline is `math_verify.verify(parse("$" + gold + "$"), parse(response))`, as scripts/bench/bench_verifier.py runs it.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from math_verify import parse, verify

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run from a checkout without installing
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))  # tests/cases/
from cases.verifier_policy_styles import STYLES  # noqa: E402

from grpo_train.verifier import judge_with_timeout  # noqa: E402


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--show", action="store_true", help="print each case each verifier gets wrong")
    return parser


def main() -> None:
    args = parser().parse_args()
    logging.disable(logging.WARNING)  # Math-Verify warns that its own timeouts are off, once per call
    honest = sum(expected for *_, expected, _ in STYLES)
    wrong = {"ours": {"missed": [], "credited": []}, "Math-Verify": {"missed": [], "credited": []}}
    for response, gold, dataset, problem, expected, why in STYLES:
        verdicts = {"ours": judge_with_timeout(response, gold, dataset, problem).correct,
                    "Math-Verify": bool(verify(parse(f"${gold}$"), parse(response)))}  # fmt: skip
        for name, credited in verdicts.items():
            if credited != expected:
                wrong[name]["credited" if credited else "missed"].append(why)
    print(f"{len(STYLES)} responses: {honest} honest, {len(STYLES) - honest} wrong or hedged")
    print(f"{'':12s} {'honest missed':>14s} {'wrong credited':>15s}")
    for name, counts in wrong.items():
        print(f"{name:12s} {len(counts['missed']):14d} {len(counts['credited']):15d}")
        if args.show:
            for kind, whys in counts.items():
                print("\n".join(f"    {kind}: {why}" for why in whys))


if __name__ == "__main__":
    main()
