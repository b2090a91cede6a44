"""Issue 24 item 3: mfu_drop and dataloader_stall judged by a severity-aware rule, over a matrix of shapes.

bench/drop_rules.py builds the step series (severities x onsets x noise levels: a steady job, a typical one
with a wandering level, a loaded shared host with dips and blips) and holds each rule to BOUNDS: a large drop
or stall named within a step or two of its onset, a small one later, and nothing on 1,000 clean steps of any
noise level. Deterministic (seeded series, exact Summaries): a failure here is the rule, not the machine.
Before issue 24's rule, mfu_drop needed 40 low steps (every bounded MFU cell failed) and dataloader_stall
never named a stall under 25 % of the step.
"""

from __future__ import annotations

import pytest

from bench.drop_rules import BOUNDS, NOISES, RULES, cell, clean

SEEDS = 3


@pytest.mark.parametrize(("rule", "noise", "severity"), sorted(BOUNDS), ids=lambda v: str(v))
def test_a_fault_is_named_within_its_severitys_bound(rule: str, noise: str, severity: float) -> None:
    for onset in (30, 300):  # just after the baseline is made, and deep into a run
        found = cell(rule, noise, severity, onset, SEEDS)
        assert found["named"] == SEEDS, found
        assert found["delay_max"] <= BOUNDS[(rule, noise, severity)], found
        assert found["onset_within_3"] == SEEDS, f"the event's step is the onset, within 3: {found}"


@pytest.mark.parametrize("noise", NOISES)
@pytest.mark.parametrize("rule", sorted(RULES))
def test_no_false_alarm_in_a_thousand_clean_steps(rule: str, noise: str) -> None:
    found = clean(rule, noise, SEEDS, 1000)
    assert found["false_alarms"] == 0, found
