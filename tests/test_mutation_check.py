"""scripts/maint/mutation_check.py (`make mutation-check`) breaks each feature in a scratch copy and expects its tests
to fail. A breakage whose text the code no longer holds makes the whole check stop before it runs anything, so a
refactor could switch it off unnoticed: here every breakage must still apply to the tree as it is, and name tests
that exist."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _mutation_check():
    spec = importlib.util.spec_from_file_location("mutation_check", ROOT / "scripts" / "maint" / "mutation_check.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["mutation_check"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def test_every_breakage_still_applies_to_the_tree_and_names_existing_tests():
    check = _mutation_check()
    check.check_breakages(ROOT, list(check.BREAKAGES))  # exits naming the breakage whose text moved
    for breakage in check.BREAKAGES:
        for node in breakage.tests:
            path, _, name = node.partition("::")
            assert (ROOT / path).is_file(), f"{breakage.name}: no test file {path}"
            if name:
                function = name.split("[")[0]
                assert f"def {function}(" in (ROOT / path).read_text(), f"{breakage.name}: no test {node}"


def test_a_moved_breakage_stops_the_check_naming_it(tmp_path):
    check = _mutation_check()
    breakage = check.BREAKAGES[0]
    (tmp_path / breakage.path).parent.mkdir(parents=True)
    (tmp_path / breakage.path).write_text("the code moved\n")
    with pytest.raises(SystemExit, match=breakage.name):
        check.check_breakages(tmp_path, [breakage])
