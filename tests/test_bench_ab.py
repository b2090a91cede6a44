"""bench/ab.py runs a bench at a base revision and at the working tree, and compares their JSON figures."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))
from ab import NATIVE_SOURCES, build_native, compare, leaves, reusable_build  # noqa: E402  (bench/ is put on sys.path just above)


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
    # HEAD's build inputs are the working tree's: its build is copied, not compiled again (a reuse that silently
    # broke would compile for minutes). Fails where the tree's extension is older than its sources: rebuild it
    # (scripts/bootstrap).
    assert result["base_native"] == "copied", done.stdout
    [base_tree] = re.findall(r"^base worktree (\S+): native extension", done.stdout, re.M)
    assert "telemetry-ab-" in base_tree
    worktrees = subprocess.run(["git", "worktree", "list"], cwd=REPO, capture_output=True, text=True).stdout
    assert base_tree not in worktrees  # the base's worktree is removed after (others' runs of ab.py may be alive)


def test_the_working_trees_build_is_reused_only_for_the_same_sources(tmp_path: Path) -> None:
    """What lets the A/B above skip compiling the base: its build inputs are the working tree's, byte for byte,
    and the working tree's build is newer than all of them. On fake trees (the real one's build may be older than
    its sources, after a rebase that was not followed by a build)."""
    working, base = tmp_path / "working", tmp_path / "base"
    for tree in (working, base):
        (tree / NATIVE_SOURCES).mkdir(parents=True)
        (tree / "setup.py").write_text("# builds the extension\n")
        (tree / NATIVE_SOURCES / "core.cpp").write_text("int core() { return 1; }\n")
        (tree / NATIVE_SOURCES / "sub").mkdir()
        (tree / NATIVE_SOURCES / "sub" / "core.hpp").write_text("int core();\n")
    assert reusable_build(base, working) == []  # nothing built
    built = working / "telemetry" / "summary" / "_native.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"\x7fELF")
    sources = [working / "setup.py", working / NATIVE_SOURCES / "core.cpp", working / NATIVE_SOURCES / "sub" / "core.hpp"]
    for source in sources:
        os.utime(source, (1_000_000, 1_000_000))
    assert reusable_build(base, working) == [built]
    for source in sources:  # a build older than any one of its inputs is not reused
        os.utime(source, (1_000_000, built.stat().st_mtime + 10))
        assert reusable_build(base, working) == []
        os.utime(source, (1_000_000, 1_000_000))
    assert reusable_build(base, working) == [built]
    with (base / NATIVE_SOURCES / "core.cpp").open("a") as changed:
        changed.write("// another revision\n")
    assert reusable_build(base, working) == []
    (base / NATIVE_SOURCES / "core.cpp").write_bytes((working / NATIVE_SOURCES / "core.cpp").read_bytes())
    assert reusable_build(base, working) == [built]
    (base / NATIVE_SOURCES / "extra.hpp").write_text("// a file the working tree has not\n")
    assert reusable_build(base, working) == []
    (base / NATIVE_SOURCES / "extra.hpp").unlink()
    (base / "setup.py").write_text("# builds it another way\n")
    assert reusable_build(base, working) == []


def test_the_base_copies_another_checkouts_build_of_the_same_sources(tmp_path: Path) -> None:
    """--reuse-build: a base whose native sources are not the working tree's (the change under test is native) but are
    another checkout's (the main one), built after them, gets that checkout's build copied, not compiled again."""
    other, base = tmp_path / "other", tmp_path / "base"
    for tree in (other, base):
        (tree / NATIVE_SOURCES).mkdir(parents=True)
        (tree / "setup.py").write_text("# builds the extension\n")
        (tree / NATIVE_SOURCES / "core.cpp").write_text("int core() { return 2; }  // not the working tree's\n")
    built = other / "telemetry" / "summary" / "_native.cpython-311-x86_64-linux-gnu.so"
    built.write_bytes(b"\x7fELF other")
    for source in (other / "setup.py", other / NATIVE_SOURCES / "core.cpp"):
        os.utime(source, (1_000_000, 1_000_000))
    assert build_native(base, [other]) == f"copied from {other}"
    assert (base / built.relative_to(other)).read_bytes() == b"\x7fELF other"
