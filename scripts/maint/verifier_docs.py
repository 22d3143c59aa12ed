"""Write docs/verifier.md's rule list (the section between its "rules:" markers) from grpo_train/verifier/rules.py.

    .venv/bin/python scripts/maint/verifier_docs.py          # regenerate the section after changing RULES
    .venv/bin/python scripts/maint/verifier_docs.py --check  # exit 1 if it is stale (as tests/test_docs.py checks)

Each rule's name, stage, statement and its refused and kept examples come from RULES, the ways to credit an answer
and their examples from RECALLS, the conventions from CONVENTIONS, so the page cannot drift from the code; the rest
of docs/verifier.md is written by hand.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from grpo_train.verifier.rules import CONVENTIONS, RECALLS, RULES, Example  # noqa: E402

PAGE = ROOT / "docs" / "verifier.md"
COMMAND = ".venv/bin/python scripts/maint/verifier_docs.py"
BEGIN = f"<!-- rules: generated from grpo_train/verifier/rules.py by {COMMAND}; do not edit by hand -->"
END = "<!-- /rules -->"
SHOWN_CHARS = 60


def _cell(example: Example) -> str:
    """An example as a table cell: the response (cut at SHOWN_CHARS), the gold, and whether a problem is given."""
    response = example.response if len(example.response) <= SHOWN_CHARS else (
        f"{example.response[:SHOWN_CHARS].rstrip()} ... ({len(example.response)} chars)")
    text = f"`{response}` for `{example.gold}`"
    if example.problem is not None:
        text += " + problem"
    return text.replace("\n", "\\n").replace("|", "\\|")


def section() -> str:
    rows = [f"| {i} | `{rule.name}` | {rule.stage} | {rule.statement.replace('|', chr(92) + '|')} | "
            f"{_cell(rule.refuses)} | {_cell(rule.keeps)} |" for i, rule in enumerate(RULES, 1)]
    recalls = [f"| `{recall.name}` | {recall.statement.replace('|', chr(92) + '|')} | {_cell(recall.accepts)} | "
               f"{_cell(recall.refuses)} |" for recall in RECALLS]
    conventions = [f"{i}. {text}" for i, text in enumerate(CONVENTIONS, 1)]
    return "\n".join([
        BEGIN,
        "",
        "## The rules by name",
        "",
        "Every response scored 0 is refused by one rule, and the verifier says which: `Judgement.rule`,",
        "training's `reward/veto/<rule>` ([metrics.md](metrics.md)), `samples.jsonl`'s `rule`, and `grpo-eval`'s",
        "`veto`. The rules below run in this order (extraction first, status `no_answer`; then the comparison, status",
        "`ok`); the first that refuses names the verdict (the comparison stops at the check that refuses; a list whose",
        "items do not all match is `list_items`). Each row's examples are checked by tests/test_verifier_rules.py:",
        "the first is refused by that rule, the second scores 1. The full statements are the sections below;",
        "\"+ problem\": judged with a problem text, as training and evaluation always judge.",
        "",
        "| # | rule | stage | refuses | refused | kept |",
        "|---|---|---|---|---|---|",
        *rows,
        "",
        "The ways an answer is credited besides a marker (\"The answer is\", a box, \"####\"): the last value the",
        "response commits to for the asked quantity, and other spellings of one number. Each beside the nearest",
        "hedge it could open, which is refused (tests/test_verifier_rules.py checks both;",
        "tests/cases/verifier_attacks_commit.py holds the rest of their accepted and refused cases):",
        "",
        "| way to credit | credits | credited | refused |",
        "|---|---|---|---|",
        *recalls,
        "",
        "The conventions every rule follows (the labelling conventions of `../shared/data/README.md`; C1-C8 in the",
        "code and the sections below are the first eight):",
        "",
        *conventions,
        "",
        END,
    ])


def render(page: str | None = None) -> str:
    """docs/verifier.md with its rule list replaced by `section()`."""
    page = PAGE.read_text() if page is None else page
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{PAGE}: the markers {BEGIN!r} and {END!r} are missing")
    head, rest = page.split(BEGIN, 1)
    return head + section() + rest.split(END, 1)[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/verifier.md's rule list is stale")
    args = parser.parse_args()
    text = render()
    if args.check:
        if text != PAGE.read_text():
            print(f"{PAGE} is stale: run {COMMAND}", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
