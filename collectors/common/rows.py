"""What the root's store and its consumers (detectors, event log, /metrics) share, so that neither imports the other.

`Row` is one finalised window as the root keeps it: what `Finaliser` writes to the store and hands to every
`Finaliser.on_finalised` consumer, and what a detector's `observe(row)` reads. `CACHE_KIB` bounds the SQLite
page cache of every connection to the root's database file (the store's writer and readers, the event log).
"""

from __future__ import annotations

from dataclasses import dataclass

from collectors.common.keys import Key
from telemetry.summary import Summary

# Page cache per connection, KiB (SQLite's usual default, explicit so that no build's default changes it). The
# writer's fills as the file grows and then stays there: 0.75 MB after 100 soak-shaped jobs, 2.05 MB from job ~300
# to 1,000 (6 misses in 100,000 lookups: it writes new windows, near the end of the index). Readers (one per API
# request or goodput read, closed after) and the event log are bounded by it too.
CACHE_KIB = 2000


@dataclass
class Row:
    """One finalised window: its key, the world size it expected, the merged summary, how many late deltas were
    merged into it since it was first finalised, and when it was (time.time_ns())."""

    key: Key
    expected: int
    summary: Summary
    late: int
    finalised_ns: int
