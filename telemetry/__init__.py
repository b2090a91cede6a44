"""Telemetry for large distributed PyTorch training runs: the library and SDK that training code imports.

Public names are re-exported here; the modules behind them are internal.
"""

from telemetry.sdk import Run, init
from telemetry.summary import OverlapError, Summary

__all__ = ["OverlapError", "Run", "Summary", "init"]
__version__ = "0.1.0"
