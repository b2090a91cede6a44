"""Input rules shared by the SDK side and every server (DESIGN §7)."""

from __future__ import annotations

from collections.abc import Iterable

from telemetry.names import JOB_NAME, MAX_STEP, METRIC_NAME

DEFAULT_MAX_METRICS_PER_JOB = 256
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_WORLD_SIZE = 1 << 20  # ranks per job; nothing a tier does may grow with a size an input declares
MAX_INDEX = MAX_STEP  # the largest step or window index any tier takes in (why 2**53: telemetry/names.py)
MAX_ATTEMPT = 2**63  # attempts are below this: what the SDK allows (telemetry/sdk/attempt.py), SQLite's integers
HEARTBEAT_WINDOW_S = 120.0  # a heartbeat stamped further than this from the agent's clock is refused


class BadInput(ValueError):
    """Input refused; `code` names the gRPC status it maps to."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "ALREADY_EXISTS"


def shown(name: str, limit: int = 80) -> str:
    """A name from an input, for an error message or a log line: never echo megabytes back."""
    return repr(name) if len(name) <= limit else f"{name[:limit]!r}... ({len(name)} characters)"


def check_metric(name: str) -> None:
    if not METRIC_NAME.fullmatch(name):
        raise BadInput("INVALID_ARGUMENT", f"metric name {shown(name)} is not [a-z0-9_.]{{1,64}}")


def check_world(world_size: int, cap: int, what: str = "world size") -> None:
    """A declared world size (or a rank id + 1) within the cap: refused before anything is sized by it."""
    if world_size > cap:
        raise BadInput("INVALID_ARGUMENT", f"{what} {world_size}: above this tier's cap of {cap} ranks "
                                           "(--max-world-size)")


def check_index(index: int, what: str = "step") -> None:
    if index > MAX_INDEX:
        raise BadInput("INVALID_ARGUMENT", f"{what} {index} is beyond this tree's limit of 2**53")


def check_attempt(attempt: int, what: str = "attempt") -> None:
    """An attempt the SDK could have sent: below 2**63 (a raw stream's 2**64-1 made lost time exceed wall time)."""
    if not 0 <= attempt < MAX_ATTEMPT:
        raise BadInput("INVALID_ARGUMENT", f"{what} {attempt} is not in [0, 2**63)")


def check_job(name: str) -> None:
    if not JOB_NAME.fullmatch(name):
        raise BadInput("INVALID_ARGUMENT", f"job name {shown(name)} is not [A-Za-z0-9_.:-]{{1,128}}")


class MetricBudget:
    """Caps the distinct metric names per job, so one buggy job cannot blow up every tier's memory."""

    def __init__(self, limit: int = DEFAULT_MAX_METRICS_PER_JOB) -> None:
        self.limit = limit
        self._names: dict[str, set[str]] = {}

    def admit(self, job: str, metric: str) -> None:
        names = self._names.get(job)
        if names is None or metric not in names:  # a name already admitted costs a set lookup: once per window
            self.admit_all(job, (metric,))

    def admitted(self, job: str, metrics: Iterable[str]) -> bool:
        """Whether every one of these names is admitted already (then `admit` of each would change nothing)."""
        names = self._names.get(job)
        return names is not None and names.issuperset(metrics)

    def admit_all(self, job: str, metrics: Iterable[str]) -> None:
        """Admit every name or none: a refused batch charges nothing (300 names in one log() call must not
        use up the job's budget and lock its real metrics out)."""
        names = self._names.setdefault(job, set())
        new = {metric for metric in metrics if metric not in names}
        if not new:
            return
        for metric in sorted(new):
            check_metric(metric)
        if len(names) + len(new) > self.limit:
            refused = sorted(new)[:3]
            raise BadInput("RESOURCE_EXHAUSTED",
                           f"job {shown(job)} would have {len(names) + len(new)} distinct metrics, over its cap of "
                           f"{self.limit} (--max-metrics); refusing {len(new)} new name(s): "
                           f"{', '.join(shown(m) for m in refused)}{'...' if len(new) > 3 else ''}")
        names.update(new)

    def forget(self, job: str) -> None:
        self._names.pop(job, None)


def check_size(message, limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
    check_length(message.ByteSize(), limit)


def check_length(size: int, limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:
    """A message of `size` bytes on the wire within the limit (check_size of a parsed one re-encodes it)."""
    if size > limit:
        raise BadInput("RESOURCE_EXHAUSTED", f"message of {size} bytes is larger than the {limit}-byte limit")
