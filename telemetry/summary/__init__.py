"""The mergeable summary (DESIGN §3) and its quantile sketch."""

from telemetry.summary.summary import OverlapError, Summary

__all__ = ["OverlapError", "Summary"]
