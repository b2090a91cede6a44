"""The root's store reads on /metrics (issue 27 item 2, collectors/root/reads.py): how often the intake had to wait
for the store, how much it read, and whether reads fail.

One small collector (a `Declared` of exposition.py: its families declared once, as `describe()` names them and
`collect()` fills them; registered on `RootMetrics.registry` by `RootServer`), reading `StoreReads`' counters each
scrape.
"""

from __future__ import annotations

from collectors.root.exposition import Declared, Family, Spec
from collectors.root.reads import StoreReads

PARKED = Spec("telemetry_store_reads_parked_units", "Units from children that waited for a read of the root's store "
              "(a window it no longer held in memory, a job's run claims) before they were taken in.", (), counter=True)
WAITING = Spec("telemetry_store_reads_waiting_units", "Units waiting for a read of the root's store now.", ())
WINDOWS = Spec("telemetry_store_reads_windows", "Windows read back from the root's store for the intake (each a resend "
               "after a restart or a window forgotten for the budget).", (), counter=True)
FAILURES = Spec("telemetry_store_read_failures", "Batches of the intake's store reads that failed (each retried; the "
                "units waiting meanwhile are not acknowledged).", (), counter=True)


class StoreReadsMetrics(Declared):
    SPECS = (PARKED, WAITING, WINDOWS, FAILURES)

    def __init__(self, reads: StoreReads) -> None:
        self.reads = reads

    def fill(self, families: dict[str, Family]) -> None:
        reads = self.reads
        families[PARKED.name].add_metric([], reads.parked)
        families[WAITING.name].add_metric([], reads.waiting())
        families[WINDOWS.name].add_metric([], reads.windows_read)
        families[FAILURES.name].add_metric([], reads.read_failures)
