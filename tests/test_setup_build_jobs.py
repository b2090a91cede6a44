"""setup.py's TELEMETRY_BUILD_JOBS (the native build's parallel compilers): a bad value is a clear error, not a
bare int() traceback (review); unset, the CPUs this process may use."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest
import setuptools


def _setup_module(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    monkeypatch.setattr(setuptools, "setup", lambda **kwargs: None)  # load setup.py's functions, build nothing
    spec = importlib.util.spec_from_file_location("telemetry_setup", Path(__file__).resolve().parents[1] / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("given, want", [("3", 3), ("0", 1), ("-4", 1)])
def test_build_jobs_takes_a_whole_number_of_compilers(monkeypatch, given, want):
    monkeypatch.setenv("TELEMETRY_BUILD_JOBS", given)
    assert _setup_module(monkeypatch).build_jobs() == want


def test_build_jobs_unset_is_the_usable_cpus(monkeypatch):
    import os
    monkeypatch.delenv("TELEMETRY_BUILD_JOBS", raising=False)
    assert _setup_module(monkeypatch).build_jobs() == max(1, len(os.sched_getaffinity(0)))


@pytest.mark.parametrize("given", ["junk", "2.5", "two"])
def test_a_bad_build_jobs_value_says_what_it_must_be(monkeypatch, given):
    monkeypatch.setenv("TELEMETRY_BUILD_JOBS", given)
    with pytest.raises(SystemExit, match="TELEMETRY_BUILD_JOBS must be a whole number"):
        _setup_module(monkeypatch).build_jobs()
