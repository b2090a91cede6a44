"""Every dependency the project installs is pinned exactly (==), so a fresh clone installs what was tested (issue 29:
numpy was a range). The build requirements' setuptools is the one range left: pip's build isolation takes the newest
that builds, and pybind11, which decides the compiled module's ABI, is pinned."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
PINNED = re.compile(r"^[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])?==[0-9!][A-Za-z0-9_.!+\-]*$")


def test_every_dependency_is_pinned_exactly() -> None:
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        requirements += [r for r in extra if not r.startswith(f"{project['name']}[")]  # the project's own extras
    loose = [r for r in requirements if not PINNED.match(r.replace(" ", ""))]
    assert not loose, f"not pinned with ==: {loose}"
    assert any(r.startswith("numpy==") for r in project["dependencies"])


def test_the_compiled_module_builds_with_a_pinned_binding() -> None:
    requires = tomllib.loads(PYPROJECT.read_text())["build-system"]["requires"]
    assert [r for r in requires if r.startswith("pybind11")] == ["pybind11==3.1.0"]
