"""The unit / integration split of tests/conftest.py on tests whose nature is known: a test that starts a root, a
Prometheus, a simulation or a torchrun job (directly, through a helper of tests/, or through one of bench/ imported
inside the test) is integration; one that feeds rows to an in-memory RootMetrics is unit."""

from __future__ import annotations

import test_detector_settings
import test_forensics_limits
import test_prometheus_e2e
import test_root_metrics
import test_root_metrics_exposition
import test_tree_e2e
from conftest import Classifier


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
