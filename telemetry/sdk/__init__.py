"""The SDK training code imports: `init()` gives a `Run`; `run.log()` never blocks or does I/O."""

from telemetry.sdk.run import Run, init

__all__ = ["Run", "init"]
