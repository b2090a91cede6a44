"""Which attempt (launch) of its job this process belongs to (docs/restarts.md).

Every rank of one launch must name the same attempt, without talking to the others through the tree, and a
new launch under the same job name (torchrun's default run id ``none``, kept across torchelastic restarts;
a Slurm requeue) must name a new one, or the tree would take its steps for resends of the old launch's.
In order:

1. ``telemetry.init(attempt=N)``, else ``TELEMETRY_ATTEMPT``: what the user says.
2. torchrun (``TORCHELASTIC_RESTART_COUNT`` set): the ranks agree on the launch's attempt through the
   elastic agent's own store (``TORCHELASTIC_USE_AGENT_STORE``, at MASTER_ADDR:MASTER_PORT, up before the
   workers start): the first rank to ask writes its wall clock in milliseconds under a key of this restart
   count, every rank reads that one value (an atomic compare-and-set: nobody waits for a given rank). So each
   restart and each new launch gets a later attempt. Without the store: the restart count itself.
3. Slurm (``SLURM_JOB_ID`` set): ``SLURM_JOB_ID`` * 2**28 + ``SLURM_RESTART_COUNT`` (requeues, mod 2**12)
   * 2**16 + ``SLURM_STEP_ID`` (srun steps of one allocation, mod 2**16): a requeue, a new step and a new
   submission of the same script (a new job id, same job name) each get a later attempt.
4. A single-rank job: a fresh attempt per init (the clock in milliseconds).
5. Otherwise 0 (no attempt): a second run under the name is refused by the agent while it still knows the
   first (FAILED_PRECONDITION, close() False), so pass ``attempt=`` to such launchers.
"""

from __future__ import annotations

import datetime
import logging
import os
import time

from telemetry.sdk.env import env_int

log = logging.getLogger("telemetry.sdk")

STORE_TIMEOUT_S = 10.0
STORE_KEY = "telemetry/attempt/{restart}"


def default_attempt(world_size: int) -> int:
    """The attempt this process's launch is, from the environment (see the module docstring)."""
    explicit = env_int("TELEMETRY_ATTEMPT", None)
    if explicit is not None:
        return check_attempt(explicit)
    restart = env_int("TORCHELASTIC_RESTART_COUNT", None)
    if restart is not None:
        agreed = _torchrun_attempt(restart)
        return agreed if agreed is not None else restart
    slurm_job = env_int("SLURM_JOB_ID", None)
    if slurm_job is not None:
        return slurm_attempt(slurm_job, env_int("SLURM_RESTART_COUNT", 0) or 0, env_int("SLURM_STEP_ID", 0) or 0)
    if world_size == 1:
        return _now_ms()
    return 0


def slurm_attempt(job_id: int, restarts: int, step_id: int) -> int:
    """A Slurm launch's attempt: later for a requeue (restart count), a later srun step, and a later submission
    (job ids grow), the same on every rank of one step."""
    return (job_id % 2**32) * 2**28 + (restarts % 2**12) * 2**16 + step_id % 2**16


def check_attempt(attempt: int) -> int:
    if type(attempt) is not int or not 0 <= attempt < 2**63:  # the exact type: a bool is refused
        raise ValueError(f"attempt must be an int in [0, 2**63), got {attempt!r}")
    return attempt


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _torchrun_attempt(restart: int) -> int | None:
    """The launch's attempt agreed through torchrun's agent store, or None when it cannot be reached."""
    if os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() != "true":
        return None
    host, port = os.environ.get("MASTER_ADDR"), env_int("MASTER_PORT", None)
    if not host or port is None:
        return None
    try:
        from torch.distributed import TCPStore
        store = TCPStore(host, port, is_master=False, timeout=datetime.timedelta(seconds=STORE_TIMEOUT_S),
                         wait_for_workers=False)
        agreed = store.compare_set(STORE_KEY.format(restart=restart), "", str(_now_ms()))
        return check_attempt(int(agreed))
    except Exception as exc:  # no torch, store unreachable, a foreign value: fall back to the restart count
        log.warning("telemetry: could not agree on the attempt through torchrun's store (%s); using the restart "
                    "count %d", exc, restart)
        return None
