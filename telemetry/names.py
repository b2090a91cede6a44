"""Names and limits every tier agrees on (DESIGN §7), shared by the SDK and the servers: the metric- and
job-name rules, the reserved names, the largest step. The services import them from here; the SDK never
imports the services."""

from __future__ import annotations

import re

METRIC_NAME = re.compile(r"[a-z0-9_.]{1,64}")
JOB_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,128}")

#: The largest step (and window index) any tier takes in. The root keeps steps in SQLite's signed 64-bit
#: integers and its detectors work past them (step + 1: a step of 2**63-1 broke the event store, issue 14);
#: heartbeats carry a rank's step as a float64 (progress.current_step), exact only up to 2**53. No real job
#: comes near it.
MAX_STEP = 2**53

#: The metrics an agent makes of each rank's heartbeat (time buckets): the step it is in, the steps it finished.
PROGRESS_METRIC = "progress.current_step"
STEPS_COMPLETED_METRIC = "progress.steps_completed"

#: The per-step metric the SDK logs under torch.distributed (telemetry.torch.collective.ArrivalClock): each
#: rank's seconds from its previous synchronisation to its last collective of the step.
ARRIVAL_METRIC = "collective_arrival"

#: The per-step metrics the SDK logs under torch.distributed (telemetry.torch.waits): the seconds of the step
#: each rank had a collective outstanding (waiting for its peers), and the rest of its step (its own work).
WAIT_METRIC = "collective_wait"
WORK_METRIC = "work_time"

#: The per-step metric the SDK logs beside those two (telemetry/sdk/runqueue.py): the seconds of the step the
#: rank's step thread was runnable but not running (waiting on the kernel's run queue: descheduled, not slow).
RUNQUEUE_METRIC = "runqueue_wait"

#: ... and, from the same read, the seconds of the step the step thread ran on a CPU: its CPU work (a rank that does
#: more of it than its peers queues more in proportion on a loaded host: slow by itself, not descheduled).
ONCPU_METRIC = "oncpu_time"

#: The per-step metric each rank's agent makes of those two (collectors/agent/wait_share.py): the rank's running
#: (exponentially weighted) share of its steps spent waiting in collectives; its exact argmin across ranks, merged
#: up the tree, is the rank that has waited least over its recent steps (the straggler rule's slight lanes).
WAIT_SHARE_METRIC = "collective_wait_share_ewma"

#: Characters of a collective fingerprint's readable `what` (CollectiveFingerprint.what): the SDK cuts it
#: to this, every tier refuses a longer one.
MAX_WHAT = 200

#: Bytes of one rank's capture (thread stacks, and the flight-recorder entries, each) a root asks for by default
#: (CaptureRequest.max_bytes) and the SDK keeps when a request names none (docs/forensics.md).
MAX_CAPTURE_BYTES = 64 * 1024

#: Jobs named with this prefix hold a host's own hardware windows (collectors/agent/hardware.py:
#: NICs, IB ports, GPUs no rank uses); no rank may register one.
HOST_JOB_PREFIX = "_host:"

#: The pseudo-job of the fleet's hardware windows (collectors/common/fleet.py): every host's devices, merged
#: across hosts per metric and second; no rank may register it.
FLEET_JOB = "_fleet"


def is_metric_name(name: str) -> bool:
    return METRIC_NAME.fullmatch(name) is not None


def job_name_problem(name: str) -> str | None:
    """Why every tier would refuse `name` as a job name, or None: the SDK says so at init(), not later."""
    if not JOB_NAME.fullmatch(name):
        return f"job name {name!r} must be 1-128 of [A-Za-z0-9_.:-] (no spaces or slashes)"
    if name.startswith(HOST_JOB_PREFIX):
        return f"job names starting with {HOST_JOB_PREFIX!r} are reserved for hosts' hardware windows"
    return None
