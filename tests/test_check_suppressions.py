"""scripts/check_suppressions.py: every type: ignore / noqa says why (the codebase issue, item 3)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("check_suppressions", REPO / "scripts" / "check_suppressions.py")
assert _spec is not None and _spec.loader is not None
check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check)


def test_the_rule_wants_a_separator_and_three_words(tmp_path: Path) -> None:
    source = tmp_path / "sample.py"
    source.write_text(
        "import os  # noqa: F401  (re-exported for the tests)\n"
        "x = 1  # type: ignore[misc]  # a base chosen at run time\n"
        "y = 2  # noqa: E731\n"
        "z = 3  # type: ignore[arg-type]  # ndarray\n"
        "w = 4  # noqa: E721 (bool refused)\n"
        "s = '# noqa: E402'\n"  # a string, not a comment
        "# ruff: noqa\n")
    assert [line for line, _ in check.unexplained(source)] == [3, 4, 5, 7]


def test_the_repository_has_no_suppression_without_a_reason() -> None:
    assert check.main([]) == 0
