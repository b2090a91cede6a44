"""Input rules shared by the SDK side and every server (DESIGN §7)."""

from __future__ import annotations

from telemetry.names import JOB_NAME, METRIC_NAME
DEFAULT_MAX_METRICS_PER_JOB = 256
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_WORLD_SIZE = 1 << 20  # ranks per job; nothing a tier does may grow with a size an input declares


class BadInput(ValueError):
    """Input refused; `code` names the gRPC status it maps to."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code  # "INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "ALREADY_EXISTS"


def check_metric(name: str) -> None:
    if not METRIC_NAME.fullmatch(name):
        raise BadInput("INVALID_ARGUMENT", f"metric name {name!r} is not [a-z0-9_.]{{1,64}}")


def check_world(world_size: int, cap: int, what: str = "world size") -> None:
    """A declared world size (or a rank id + 1) within the cap: refused before anything is sized by it."""
    if world_size > cap:
        raise BadInput("INVALID_ARGUMENT", f"{what} {world_size}: above this tier's cap of {cap} ranks "
                                           "(--max-world-size)")


def check_job(name: str) -> None:
    if not JOB_NAME.fullmatch(name):
        raise BadInput("INVALID_ARGUMENT", f"job name {name!r} is not [A-Za-z0-9_.:-]{{1,128}}")


class MetricBudget:
    """Caps the distinct metric names per job, so one buggy job cannot blow up every tier's memory."""

    def __init__(self, limit: int = DEFAULT_MAX_METRICS_PER_JOB) -> None:
        self.limit = limit
        self._names: dict[str, set[str]] = {}

    def admit(self, job: str, metric: str) -> None:
        names = self._names.setdefault(job, set())
        if metric in names:
            return
        check_metric(metric)
        if len(names) >= self.limit:
            raise BadInput("RESOURCE_EXHAUSTED",
                           f"job {job!r} already has {self.limit} distinct metrics; refusing {metric!r}")
        names.add(metric)

    def forget(self, job: str) -> None:
        self._names.pop(job, None)


def check_size(message, limit: int = DEFAULT_MAX_MESSAGE_BYTES) -> None:  # type: ignore[no-untyped-def]
    size = message.ByteSize()
    if size > limit:
        raise BadInput("RESOURCE_EXHAUSTED", f"message of {size} bytes is larger than the {limit}-byte limit")
