"""A job's attempts (DESIGN §4, docs/restarts.md): each launch of a job is an attempt of it.

Inside the tree a job's identity is its *scoped* name, ``job@attempt`` (plain ``job`` for attempt 0, a job
without attempts), so that everything every tier keeps per job (windows, dedup, completeness, world size,
liveness, detectors, the job's lifecycle) is per attempt without a second key beside the name. On the wire
the two travel apart (``job`` and the ``attempt`` fields of RankHello, WindowKey and RankStates: old tiers
ignore the new field), and the root's outputs split them again (the API's ``job`` and ``attempt``).
``@`` cannot occur in a job name ([A-Za-z0-9_.:-]), so the scoped name is unambiguous.
"""

from __future__ import annotations

SEPARATOR = "@"


def scoped(job: str, attempt: int) -> str:
    """The tree's name for attempt `attempt` of `job`."""
    return f"{job}{SEPARATOR}{attempt}" if attempt else job


def split(name: str) -> tuple[str, int]:
    """(job, attempt) of a scoped name; attempt 0 for a plain job name."""
    job, sep, attempt = name.rpartition(SEPARATOR)
    if not sep or not attempt.isdigit():
        return name, 0
    return job, int(attempt)


def like_prefix(job: str) -> str:
    """What every scoped name of `job` but the plain one starts with (for SQL: substr(name, 1, n) = prefix)."""
    return job + SEPARATOR
