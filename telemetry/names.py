"""Names every tier agrees on: the metric-name rule (DESIGN §7), shared by the SDK and the servers."""

from __future__ import annotations

import re

METRIC_NAME = re.compile(r"[a-z0-9_.]{1,64}")
JOB_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")


def is_metric_name(name: str) -> bool:
    return METRIC_NAME.fullmatch(name) is not None
