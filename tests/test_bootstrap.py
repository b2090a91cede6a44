"""scripts/bootstrap is quiet, says plainly what failed, and does nothing when nothing changed (issue 23 §5).

Run on a copy of the script and pyproject.toml with a stand-in interpreter in .venv (a shell script that
answers --version and plays pip), so that no install happens: what is tested is the script's own logic.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE_PYTHON = """#!/bin/sh
if [ "$1" = "--version" ]; then echo "Python 3.11.7"; exit 0; fi
echo "$@" >> "$(dirname "$0")/../pip-calls"
i=0; while [ $i -lt 200 ]; do echo "Collecting something-$i (pip noise)"; i=$((i+1)); done
if [ -f "$(dirname "$0")/../pip-fails" ]; then echo "ERROR: No matching distribution found for torch==9.9" >&2; exit 1; fi
printf '#!/bin/sh\\necho "telemetry 0.1.0"\\n' > "$(dirname "$0")/telemetry"; chmod +x "$(dirname "$0")/telemetry"
"""


def _checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(REPO / "scripts" / "bootstrap", tmp_path / "scripts" / "bootstrap")
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(FAKE_PYTHON)
    python.chmod(0o755)
    return tmp_path


def _bootstrap(checkout: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(checkout / "scripts" / "bootstrap")], capture_output=True, text=True,
                          timeout=60)


def test_a_line_per_stage_then_nothing_to_do_until_pyproject_or_native_sources_change(tmp_path):
    checkout = _checkout(tmp_path)
    first = _bootstrap(checkout)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert 2 <= len(lines) <= 5 and all(line.startswith("bootstrap: ") for line in lines), first.stdout
    assert "pip noise" not in first.stdout + first.stderr
    assert "pip noise" in (checkout / ".venv" / "bootstrap.log").read_text()
    calls = (checkout / ".venv" / "pip-calls").read_text().count("\n")
    again = _bootstrap(checkout)
    assert again.returncode == 0 and "up to date" in again.stdout and len(again.stdout.splitlines()) == 1
    assert (checkout / ".venv" / "pip-calls").read_text().count("\n") == calls, "nothing changed: no pip"
    with open(checkout / "pyproject.toml", "a") as pyproject:
        pyproject.write("\n# a new pin\n")
    changed = _bootstrap(checkout)
    assert changed.returncode == 0 and "up to date" not in changed.stdout
    calls_now = (checkout / ".venv" / "pip-calls").read_text().count("\n")
    assert calls_now > calls
    assert "up to date" in _bootstrap(checkout).stdout
    native = checkout / "telemetry" / "summary" / "native"  # the extension's sources: a change must rebuild it
    native.mkdir(parents=True)
    (native / "core.cpp").write_text("// changed\n")
    rebuilt = _bootstrap(checkout)
    assert rebuilt.returncode == 0 and "up to date" not in rebuilt.stdout
    assert (checkout / ".venv" / "pip-calls").read_text().count("\n") > calls_now


def test_a_failure_is_said_plainly_with_the_end_of_pips_output(tmp_path):
    checkout = _checkout(tmp_path)
    (checkout / ".venv" / "pip-fails").touch()
    failed = _bootstrap(checkout)
    assert failed.returncode == 1
    assert "bootstrap: FAILED while updating pip" in failed.stderr
    assert "No matching distribution found for torch==9.9" in failed.stderr, "the cause is shown"
    assert failed.stderr.count("pip noise") <= 25, "the tail, not the screens"
    assert not (checkout / ".venv" / ".bootstrap-stamp").exists()
