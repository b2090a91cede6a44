"""The unit / integration split of tests/conftest.py on tests whose nature is known: a test that starts a root, a
Prometheus, a simulation or a torchrun job (directly, through a helper of tests/, or through one of bench/ imported
inside the test) is integration; one that feeds rows to an in-memory RootMetrics is unit."""

from __future__ import annotations

import ast
from pathlib import Path

import test_detector_settings
import test_forensics_limits
import test_prometheus_e2e
import test_root_metrics
import test_root_metrics_exposition
import test_tree_e2e
from conftest import FIRST, SERIAL, Classifier, serial


def test_tests_that_start_processes_or_servers_are_integration():
    classifier = Classifier()
    for test in (test_root_metrics.test_real_root_serves_metrics_and_events,  # make_root
                 test_root_metrics.test_promtool_check_metrics_is_clean,  # promtool, a process (prometheus_support)
                 test_forensics_limits.test_a_capture_flood_at_a_torchrun_job_leaves_its_ranks_bounded_and_its_exit_unchanged,
                 test_detector_settings.tree,  # a fixture: a root and an agent as processes (collectors.sim.procs)
                 *(getattr(module, name) for module in (test_prometheus_e2e, test_tree_e2e) for name in dir(module)
                   if name.startswith("test_"))):
        assert classifier.integration(test), test.__name__


def test_tests_of_in_memory_code_are_unit():
    classifier = Classifier()
    for test in (test_root_metrics.test_panel_figures_with_units_and_stats,
                 test_root_metrics.test_a_jobs_attempt_is_a_label_of_its_own_and_a_forgotten_attempt_leaves,
                 test_root_metrics_exposition.test_the_exposition_is_the_recorded_one):
        assert not classifier.integration(test), test.__name__


def test_every_serial_entry_names_tests_that_exist():
    """A renamed file or test would leave SERIAL's entry matching nothing, and its tests would run in the parallel
    pass beside another file: each entry must name a file of tests/, and a test of it where it names one."""
    repo = Path(__file__).resolve().parents[1]
    for entry in SERIAL:
        path, _, prefix = entry.partition("::")
        assert (repo / path).is_file(), entry
        tests = [node.name for node in ast.parse((repo / path).read_text()).body
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")]
        assert [name for name in tests if name.startswith(prefix)], entry


def test_serial_matches_a_file_whole_or_a_test_by_the_start_of_its_name():
    assert serial("tests/test_train_ddp.py::test_torchrun_example_reaches_the_root[4-2-3]")
    assert serial("tests/test_detectors.py::test_sim_clean_run_raises_no_event[21]")
    assert not serial("tests/test_detectors.py::test_clean_streams_raise_nothing")
    assert not serial("tests/test_train_ddp_more.py::test_x")  # a file whose name only starts like one
    assert not serial("tests/test_sdk.py::test_x")


def test_the_files_the_parallel_pass_starts_with_exist_and_are_not_serial():
    repo = Path(__file__).resolve().parents[1]
    for path in FIRST:
        assert (repo / path).is_file() and not any(entry.split("::")[0] == path for entry in SERIAL), path
