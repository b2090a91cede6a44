"""bench/ab.py runs a bench at a base revision and at the working tree, and compares their JSON figures."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from ab import NATIVE_SOURCES, compare, leaves, reusable_build  # noqa: E402  (bench/ is put on sys.path just above)


def test_leaves_and_ratios() -> None:
    doc = {"a": {"b": [1, 2.5], "ok": True, "name": "x"}, "c": 4}
    assert leaves(doc) == {"a.b.0": 1.0, "a.b.1": 2.5, "c": 4.0}
    rows = compare([{"c": 4}, {"c": 6}], [{"c": 6}, {"c": 9}], keys=None)
    assert rows == [{"figure": "c", "base": [4.0, 6.0], "head": [6.0, 9.0], "base_mean": 5.0, "head_mean": 7.5,
                     "ratio": 1.5}]
    assert compare([{"c": 0, "d": 1}], [{"c": 1}], keys="c")[0]["ratio"] is None  # d: only one side has it


def test_ab_runs_a_bench_at_both_revisions(tmp_path: Path) -> None:
    out = tmp_path / "ab.json"
    done = subprocess.run([sys.executable, str(REPO / "bench" / "ab.py"), "--base", "HEAD", "--rounds", "1",
                           "--keys", "commits_per_s", "--json", str(out), "--", "bench/store_sync.py", "--rounds", "1",
                           "--commits", "5", "--windows", "4", "--dir", "{out}", "--out", "{out}"], check=True,
                          timeout=300, capture_output=True, cwd=REPO, text=True)
    result = json.loads(out.read_text())
    assert {row["figure"] for row in result["table"]} == {"commits_per_s.process", "commits_per_s.power"}
    assert len(result["runs"]["base"]) == len(result["runs"]["head"]) == 1
    [base_tree] = re.findall(r"^base worktree (\S+): native extension", done.stdout, re.M)
    assert "telemetry-ab-" in base_tree
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert base_tree not in worktrees  # the base's worktree is removed after (others' runs of ab.py may be alive)


def test_the_working_trees_build_is_reused_only_for_the_same_sources(tmp_path: Path) -> None:
    """What lets the A/B above skip compiling the base: its build inputs are the working tree's, byte for byte."""
    if not list(REPO.glob("telemetry/summary/_native*.so")):
        pytest.skip("the native extension is not built in this tree")
    shutil.copy2(REPO / "setup.py", tmp_path / "setup.py")
    shutil.copytree(REPO / NATIVE_SOURCES, tmp_path / NATIVE_SOURCES)
    assert reusable_build(tmp_path) == sorted(REPO.glob("telemetry/summary/_native*.so"))
    with (tmp_path / NATIVE_SOURCES / "core.cpp").open("a") as changed:
        changed.write("// another revision\n")
    assert reusable_build(tmp_path) == []
    (tmp_path / NATIVE_SOURCES / "core.cpp").write_bytes((REPO / NATIVE_SOURCES / "core.cpp").read_bytes())
    (tmp_path / NATIVE_SOURCES / "extra.hpp").write_text("// a file the working tree has not\n")
    assert reusable_build(tmp_path) == []
