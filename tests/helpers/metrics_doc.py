"""docs/metrics.md as a list of key patterns: which logged metric keys the page does not document (used by
tests/test_metrics.py, tests/test_trainer.py and tests/test_ustat_trainer.py)."""

import re
from pathlib import Path

METRICS_DOC = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented_metric_patterns() -> list[re.Pattern]:
    """docs/metrics.md's tables name keys in backticks in their first column: `<placeholder>` parts, `/x` siblings
    (replacing the previous key's last part) and `_low`-style suffixes (added to each key of the cell)."""
    patterns = []
    page = METRICS_DOC.read_text()
    for row in page[:page.index("## `samples.jsonl`")].splitlines():  # the metrics' tables, not samples.jsonl's
        if not row.startswith("| `"):
            continue
        names: list[str] = []
        for name in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if name.startswith("/"):
                names.append(names[-1].rsplit("/", 1)[0] + name)
            elif name.startswith("_"):
                names += [n + name for n in names if not n.endswith(("_low", "_high"))]
            else:
                names.append(name)
        patterns += [re.compile("[^/]+".join(map(re.escape, re.split(r"<[^>]+>", n)))) for n in names]
    return patterns


def undocumented_metrics(keys) -> list[str]:
    """The keys docs/metrics.md does not list."""
    patterns = documented_metric_patterns()
    return sorted(k for k in keys if not any(p.fullmatch(k) for p in patterns))
