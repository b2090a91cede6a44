"""The value distributions the Summary sketch is measured and tested on, and the rank error it is judged by.

Shared by bench/sketch.py and the Summary tests (tests/summary_support.py), so that both judge the sketch on the
same data by the same measure.
"""

from __future__ import annotations

import numpy as np

DISTRIBUTIONS = ("uniform", "lognormal", "bimodal", "pareto")


def draw(name: str, rng: np.random.Generator, n: int) -> np.ndarray:
    """n values of a named distribution (seconds, for the step-time-like ones)."""
    if name == "uniform":
        return rng.uniform(0.0, 1.0, n)
    if name == "lognormal":
        return rng.lognormal(0.0, 1.0, n)
    if name == "bimodal":
        # straggler: 99 % of steps near 0.5 s, 1 % near 1.35 s
        values = rng.normal(0.5, 0.01, n)
        slow = rng.random(n) < 0.01
        values[slow] = rng.normal(1.35, 0.02, int(slow.sum()))
        return values
    if name == "pareto":
        return rng.pareto(1.5, n) + 1.0
    raise ValueError(name)


def rank_error(sorted_values: np.ndarray, estimate: float, q: float) -> float:
    """Distance from q to the fraction of exact values <= estimate.

    With ties (or an estimate equal to a value) any fraction between
    #(< estimate)/n and #(<= estimate)/n is exact, so the distance is to that interval.
    The estimate is given a relative slack of 1e-12: t-digest interpolation between
    tied centroids can land an ulp off the tied value (e.g. -924.9999999999999 for
    -925), which is no value error but would read as a rank error of the whole tie.
    """
    n = sorted_values.size
    slack = 1e-12 * abs(estimate)
    lo = np.searchsorted(sorted_values, estimate - slack, side="left") / n
    hi = np.searchsorted(sorted_values, estimate + slack, side="right") / n
    if lo <= q <= hi:
        return 0.0
    return float(min(abs(q - lo), abs(q - hi)))
