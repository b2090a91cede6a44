"""`telemetry.init()` and `Run`: what training code calls.

    run = telemetry.init(job="llama-70b")          # RANK, WORLD_SIZE, ... from torchrun
    with run.step(step):
        loss = train_step(batch)
        run.log(step, loss=loss)                   # floats, or tensors (see telemetry.torch)
    run.close(timeout=10)

`log()` only appends to a bounded in-memory buffer: no I/O, no lock, no
host-device sync (a record leaves the buffer by exactly one atomic popleft,
the sender's or an overflow's: see Run.__init__). A background thread
batches per step and streams to the node agent. If the buffer is full the oldest record is
dropped and counted; if the agent is down, training goes on.
"""

from __future__ import annotations

import collections
import logging
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from telemetry.names import ARRIVAL_METRIC as ARRIVAL
from telemetry.names import MAX_STEP, is_metric_name, job_name_problem
from telemetry.names import ONCPU_METRIC as ONCPU
from telemetry.names import RUNQUEUE_METRIC as RUNQUEUE
from telemetry.names import WAIT_METRIC as WAIT
from telemetry.names import WORK_METRIC as WORK
from telemetry.sdk.address import check_address
from telemetry.sdk.attempt import check_attempt, default_attempt
from telemetry.sdk.capture import Responder
from telemetry.sdk.env import default_agent, env_int
from telemetry.sdk.gpu import rank_device
from telemetry.sdk.lastwords import MAX_FINGERPRINTS, WITNESS
from telemetry.sdk.runqueue import RunQueueClock
from telemetry.sdk.sender import DEFAULT_BACKLOG_BYTES, Identity, Sender
from telemetry.v1 import forensics_pb2, ingest_pb2

log = logging.getLogger("telemetry.sdk")

DEFAULT_BUFFER_RECORDS = 100_000
COLLECTIVES_ENV = "TELEMETRY_COLLECTIVES"  # "0" turns the flight-recorder readers off
FINGERPRINTS_ENV = "TELEMETRY_FINGERPRINTS"  # "0" turns the collective fingerprints off (docs/forensics.md)
CAPTURES_ENV = "TELEMETRY_CAPTURES"  # "0": this rank answers no capture request (the agent looks from outside)
BACKLOG_BYTES_ENV = "TELEMETRY_MAX_BACKLOG_BYTES"  # the sender's backlog bound when init() is given none
LAST_WORDS_ENV = "TELEMETRY_LAST_WORDS"  # "0": no exit hooks, no faulthandler file (telemetry/sdk/lastwords.py)
_VALUES, _CLOSE, _STAGED = 0, 1, 2
_Record = tuple[int, int, Any]  # (kind, step, payload): values, a step's end time, or tensors still staged
# The highest step each (agent, job, attempt, rank) logged in this process, across its Runs. The tree tells one
# run from another by process (collectors/delivery/runs.py), so a later telemetry.init() of the same rank in the
# same process that logs a step again would have it taken for a resend of the earlier Run's and dropped
# unseen: such steps are dropped here instead, loudly, and close() says so (docs/restarts.md). The newest
# MAX_RUNS_REMEMBERED are kept: a process that starts Runs for months (a sweep; single-rank jobs get a new attempt
# per init, so their entries never match again) must not grow by one entry per Run.
_STEPS_LOGGED: dict[tuple[str, str, int, int], list[int]] = {}
MAX_RUNS_REMEMBERED = 4096
_LIVE_RUNS: weakref.WeakSet[Run] = weakref.WeakSet()  # for the at-fork hook (_forked_child)


class Run:
    """One rank's telemetry session; several may live in one process (the simulator runs many)."""

    def __init__(self, job: str, rank: int, world_size: int, local_rank: int = 0, agent: str | None = None,
                 device: str = "", buffer_records: int = DEFAULT_BUFFER_RECORDS, flush_interval_s: float = 0.1,
                 heartbeat_interval_s: float = 1.0, max_backlog_bytes: int | None = None,
                 collectives: bool | None = None, attempt: int = 0, fingerprints: bool | None = None,
                 captures: bool | None = None, last_words: bool | None = None) -> None:
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is not in [0, world_size={world_size})")
        problem = job_name_problem(job)
        if problem is not None:  # every tier would refuse it, later and out of sight: say so here
            raise ValueError(problem)
        self.job, self.rank, self.world_size, self.local_rank = job, rank, world_size, local_rank
        self.attempt = check_attempt(attempt)  # the job's launch this Run belongs to (docs/restarts.md)
        self.agent = check_address(agent, "agent") if agent else default_agent()
        self._records: collections.deque[_Record] = collections.deque()
        self._max_records = max(1, buffer_records)
        # The buffer is shared without a lock on log()'s path: each record leaves it by exactly one popleft()
        # (atomic), the sender's drain or the training thread's overflow drop, and whoever took it accounts for
        # it. (The drain used to peek records[0] and pop later: an overflow drop in between delivered the peeked
        # record *and* counted it dropped, and the next record vanished uncounted.) Values dropped here are
        # counted in two single-writer counters, so no update is lost: _dropped_total by the training side (the
        # lock only serialises two training threads' drops, a rare path), _dropped_reported by the drain.
        self._drop_lock = threading.Lock()
        self._dropped_total = 0
        self._dropped_reported = 0
        self._known_names: set[str] = set()
        # Values dropped from the buffer (a dropped step close drops none), not yet handed to the sender's count.
        self._dropped_values = 0
        self._logged = _STEPS_LOGGED.setdefault((self.agent, job, self.attempt, rank), [-1])
        if len(_STEPS_LOGGED) > MAX_RUNS_REMEMBERED:
            del _STEPS_LOGGED[next(iter(_STEPS_LOGGED))]  # the oldest (a dict keeps insertion order)
        self._replayed_through = self._logged[0]  # steps up to this one an earlier Run here logged: dropped
        self._replay_warned = False
        self.current_step = 0
        self.steps_completed = 0
        self.heartbeat_extras: list[Callable[[], dict[str, float] | None]] = []
        self._sender = Sender(Identity(job, rank, world_size, local_rank, device, self.attempt), self.agent,
                              self._drain, self._beat, _backlog_bytes(max_backlog_bytes), flush_interval_s,
                              heartbeat_interval_s)
        self._closed = False
        # Flight-recorder readers (telemetry.torch.collective), set up once torch.distributed is initialised.
        self._collectives_wanted = _switch(collectives, COLLECTIVES_ENV)
        self._fingerprints_wanted = _switch(fingerprints, FINGERPRINTS_ENV)
        self._collectives_lock = threading.Lock()
        self._waits_wanted = self._collectives_wanted
        self._waits: Any = None  # the process's CollectiveTimer (telemetry.torch.waits): collective_wait, work_time
        self._runqueue = RunQueueClock()  # the step thread's run-queue wait (telemetry/sdk/runqueue.py), beside them
        self._clock: Any = None
        self._progress: Any = None  # the flight-recorder reader (CollectiveProgress), once torch.distributed is up
        self._fingerprints: Any = None  # its collective fingerprints for the heartbeat (docs/forensics.md)
        # Stacks always; flight-recorder entries with them once the readers are up (docs/forensics.md).
        # The thread that runs this rank's steps: the one that made the Run, then whichever last entered a step.
        self._training_thread: int | None = threading.get_ident()
        self.captures = Responder(lambda: self._progress, self._sender.send_capture, lambda: self._training_thread)
        if _switch(captures, CAPTURES_ENV):
            self._sender.on_capture = self.captures.request
        self._open_step: int | None = None  # inside `with run.step(s)`: s
        self._loader_wait = 0.0             # wrap_loader's waits since the last step entry, outside any step
        self._loader_waits = 0
        # Why this rank ended, told to the agent on the way out (telemetry/sdk/lastwords.py).
        if _switch(last_words, LAST_WORDS_ENV):
            self._sender.on_fault_file = WITNESS.use_fault_file
            WITNESS.add(self)
        self._wait_timer()  # torch.distributed already up: wrap DDP before the job registers its own comm hook
        self._forked = False
        _LIVE_RUNS.add(self)
        self._sender.start()

    # ------------------------------------------------------------ training thread
    def log(self, step: int, **values: Any) -> None:
        """Record values for `step`. Floats, ints, or tensors (read later, without a sync). Never blocks."""
        _check_step(step)
        if step <= self._replayed_through:
            self._replayed(step, len(values))
            return
        for name in values:
            if name not in self._known_names:
                if not is_metric_name(name):
                    raise ValueError(f"metric name {name!r} must match [a-z0-9_.]{{1,64}}")
                self._known_names.add(name)
        if step > self.current_step:
            self.current_step = step
            if step > self._logged[0]:
                self._logged[0] = step
        staged = None
        for value in values.values():
            if not isinstance(value, (float, int)):
                staged = _stage(values)
                break
        self._append((_STAGED, step, staged) if staged is not None else (_VALUES, step, values))
        if self._loader_waits and self._open_step is None:
            self._take_loader_wait(step)  # a loop without run.step: the batch went to this step

    @contextmanager
    def step(self, step: int) -> Iterator[None]:
        """Times the block as `step_time` (seconds) and closes this rank's contribution to `step` on exit.

        Under torch.distributed it also logs `collective_arrival`: seconds from this rank's previous sync (the
        completion of the last step's last collective) to its last collective in this step: its own work,
        without waiting for others (see telemetry.torch.collective.ArrivalClock)."""
        _check_step(step)
        self._training_thread = threading.get_ident()
        if step <= self._replayed_through:
            self._replayed(step, 1)
            yield
            return
        if step > self.current_step:
            self.current_step = step
            if step > self._logged[0]:
                self._logged[0] = step
        clock = self._clock if self._clock is not None else self._collectives()
        since_ns = clock.begin(time.time_ns()) if clock is not None else 0
        waits = self._waits if self._waits is not None else self._wait_timer()
        queued_mark = self._runqueue.mark() if waits is not None else None
        start_ns = time.perf_counter_ns()
        if self._loader_waits:
            self._take_loader_wait(step)
        self._open_step = step
        start = time.perf_counter()
        try:
            yield
        finally:
            self._open_step = None
            values = {"step_time": time.perf_counter() - start}
            if waits is not None and (waits.seen or waits.device.attach()):  # NCCL works issued from C++ too
                wait_s, _ = waits.measure(start_ns, time.perf_counter_ns())
                if wait_s is not None:  # None: NCCL's GPU-side figure not settled yet (telemetry.torch.nccl_timing)
                    values[WAIT] = wait_s
                    values[WORK] = max(0.0, values["step_time"] - wait_s)
                spent = self._runqueue.spent(queued_mark)  # None when the step ended on another thread
                if spent is not None:  # one read: run-queue wait and CPU time (telemetry/sdk/runqueue.py)
                    values[RUNQUEUE], values[ONCPU] = spent
            end_ns = time.time_ns()
            if clock is not None:
                arrived_ns = clock.end(end_ns)
                if arrived_ns is not None:
                    values[ARRIVAL] = max(0, arrived_ns - since_ns) / 1e9
            self._append((_VALUES, step, values))
            self._append((_CLOSE, step, end_ns))
            self.steps_completed += 1

    def end_step(self, step: int) -> None:
        """Close this rank's contribution to `step` without timing it (what `step()` does on exit)."""
        _check_step(step)
        self._training_thread = threading.get_ident()
        if step <= self._replayed_through:
            return  # its values were dropped (log); there is nothing of this Run's in it to close
        if self._loader_waits:
            self._take_loader_wait(step)
        self._append((_CLOSE, step, time.time_ns()))
        self.steps_completed += 1

    def wrap_loader(self, iterable: Iterable[Any]) -> Iterator[Any]:
        """Yield from `iterable`, logging the seconds each `next()` waited as `dataloader_wait` of the step
        that consumes the batch: the step open at the time (batches fetched inside `run.step`), else the next
        step entered (the README's `for step, batch in enumerate(run.wrap_loader(loader)): with
        run.step(step):`, where the batch is fetched before its step; waits before one step are summed)."""
        iterator = iter(iterable)
        while True:
            start = time.perf_counter()
            try:
                item = next(iterator)
            except StopIteration:
                return
            waited = time.perf_counter() - start
            if self._open_step is not None:
                self.log(self._open_step, dataloader_wait=waited)
            else:
                self._loader_wait += waited
                self._loader_waits += 1
            yield item

    def _replayed(self, step: int, values: int) -> None:
        """A step an earlier Run of this rank logged in this process: dropped, counted, said once."""
        with self._drop_lock:
            self._dropped_total += values
        if not self._replay_warned:
            self._replay_warned = True
            log.warning("telemetry: step %d of job %r attempt %d rank %d was already logged by an earlier "
                        "telemetry.init() in this process; the tree would take this run's steps up to %d for resends "
                        "of that one's, so they are dropped (close() returns False). A new run needs a new attempt: "
                        "telemetry.init(attempt=...) (docs/restarts.md)", step, self.job, self.attempt, self.rank,
                        self._replayed_through)

    def _take_loader_wait(self, step: int) -> None:
        self._append((_VALUES, step, {"dataloader_wait": self._loader_wait}))
        self._loader_wait, self._loader_waits = 0.0, 0

    def _collectives(self) -> Any:
        """The ArrivalClock once torch.distributed is initialised (the collective progress reader joins the
        heartbeat then too); None before, and for good when turned off or unreadable. Never imports torch."""
        if not self._collectives_wanted or not _dist_initialised():
            return None
        with self._collectives_lock:
            if self._clock is None and self._collectives_wanted:
                try:
                    from telemetry.torch.collective import ArrivalClock
                    from telemetry.torch.integration import attach
                    progress = attach(self)
                    if progress is None:
                        raise RuntimeError("no collective progress reader")
                    progress.read()  # finds the recorder holding the default group now, not a step later
                    self._clock = ArrivalClock(progress)
                    self._progress = progress
                    if self._fingerprints_wanted:
                        from telemetry.torch.flight_recorder import Fingerprinter
                        self._fingerprints = Fingerprinter(progress)
                except Exception as e:
                    log.debug("telemetry: flight-recorder readers unavailable: %s", e)
                    self._collectives_wanted = False
        return self._clock

    def _wait_timer(self) -> Any:
        """The process's CollectiveTimer once torch.distributed is initialised (installed then: its entry points
        and DDP are wrapped); None before, and for good when collectives are turned off. Never imports torch."""
        if not self._waits_wanted or not _dist_initialised():
            return None
        try:
            from telemetry.torch.waits import timer
            found = timer()
            self._waits = found if found.install() else None
        except Exception as e:
            log.debug("telemetry: collective waits unavailable: %s", e)
        if self._waits is None:
            self._waits_wanted = False
        return self._waits

    def _append(self, record: _Record) -> None:
        records = self._records
        if len(records) >= self._max_records:
            try:
                kind, _, payload = records.popleft()
            except IndexError:  # the drain took everything meanwhile
                pass
            else:
                if kind != _CLOSE:  # a step's close holds no value
                    with self._drop_lock:
                        self._dropped_total += len(payload)
        records.append(record)

    # ------------------------------------------------------------ sender thread
    def _drain(self) -> list[ingest_pb2.RankStepBatch]:
        """Turn buffered records into per-step batches, in order; stops at a tensor copy still in flight (put
        back in front: an overflow may then drop it, counted, as the oldest record)."""
        records = self._records
        taken: list[_Record] = []
        while True:
            try:
                record = records.popleft()
            except IndexError:
                break
            if record[0] == _STAGED and not record[2].ready():
                records.appendleft(record)
                break
            taken.append(record)
        total = self._dropped_total
        dropped, self._dropped_reported = total - self._dropped_reported, total
        steps: dict[int, tuple[dict[str, list[float]], list[int]]] = {}
        for kind, step, payload in taken:
            if kind == _STAGED:
                payload, kind = payload.read(), _VALUES
            metrics, closed = steps.setdefault(step, ({}, []))
            if kind == _VALUES:
                for name, value in payload.items():
                    metrics.setdefault(name, []).append(float(value))
            else:
                closed.append(payload)
        out = []
        for step in sorted(steps):
            metrics, closed = steps[step]
            batch = ingest_pb2.RankStepBatch(step=step, closed=bool(closed), end_time_ns=max(closed, default=0))
            for name, values in metrics.items():
                batch.metrics.add(metric=name, values=values)
            out.append(batch)
        if dropped:
            self._sender.count_dropped(dropped)
        return out

    def _beat(self) -> ingest_pb2.Heartbeat:
        if self._clock is None:
            self._collectives()  # collective progress in the heartbeat from the first one after init
        beat = ingest_pb2.Heartbeat(time_ns=time.time_ns(), current_step=self.current_step,
                                    steps_completed=self.steps_completed)
        for extra in self.heartbeat_extras:
            try:
                figures = extra()
            except Exception:
                log.debug("heartbeat extra failed", exc_info=True)
                continue
            for name, value in (figures or {}).items():
                beat.extra[name] = float(value)
        if self._fingerprints is not None:
            beat.fingerprints.extend(self._fingerprints.take())
        return beat

    def say_last_words(self, words: forensics_pb2.LastWords, wait_s: float) -> bool:
        """Send the rank's last words (lastwords.Witness calls this from its hooks): this Run's step, progress
        and newest collective fingerprints added; True once the agent noted them (waits at most wait_s)."""
        if self._closed:
            return False
        words.rank = self.rank
        words.current_step, words.steps_completed = self.current_step, self.steps_completed
        words.last_enqueued = words.last_completed = -1
        progress = self._progress
        if progress is not None:
            try:
                status = progress.status()
                if status is not None:
                    words.last_enqueued, words.last_completed = int(status[0]), int(status[1])
            except Exception:
                log.debug("telemetry: collective progress unreadable for the last words", exc_info=True)
        if self._fingerprints is not None:
            words.fingerprints.extend(self._fingerprints.newest(MAX_FINGERPRINTS))
        return self._sender.send_last_words(words, wait_s)

    # ------------------------------------------------------------ lifecycle
    @property
    def connected(self) -> bool:
        return self._sender.connected.is_set()

    def wait_connected(self, timeout: float) -> bool:
        return self._sender.connected.wait(timeout)

    def _forked_child(self) -> None:
        """This process is a fork of the rank's (a DataLoader worker): the Run is the parent's. Nothing logged
        here is sent (the sender thread and its stream stayed in the parent; the child is not the rank), the
        buffer keeps one record at most, and close() returns False at once: nothing waits for a thread that is
        not here or on a lock a parent thread held at the fork."""
        self._forked = self._closed = True
        self._records = collections.deque(maxlen=1)
        self._drop_lock = threading.Lock()
        self._collectives_lock = threading.Lock()
        self._sender.forked()

    def close(self, timeout: float = 10.0) -> bool:
        """Flush everything and wait up to `timeout` s until the root holds it durably; True only if it did and
        nothing this rank logged was dropped on the way (see `stats`). In a forked child (a DataLoader worker)
        of the rank's process: False at once (nothing is sent from there)."""
        if self._forked:
            return False
        if self._closed:
            return True
        self._closed = True
        WITNESS.remove(self)
        if self._clock is not None:
            self._clock.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and (self._records or self._sender.unacknowledged()):
            self._sender.wake()
            time.sleep(0.01)
        sender = self._sender
        done = not self._records and not sender.unacknowledged()
        # Everything durable, and nothing dropped on the way (backlog overflow, refused, logged too late).
        done = done and not (self.stats["dropped_values"] or sender.refused_batches or sender.late_dropped_values)
        done = done and not sender.refused  # the agent refused the rank: nothing it logs could have arrived
        self._sender.stop(max(0.1, deadline - time.monotonic()) + 1.0)
        if not done:
            self._say_not_done(timeout)
        return done

    def _say_not_done(self, timeout: float) -> None:
        """close() returns False: say why in one line (a boolean alone was all a user saw)."""
        stats, sender = self.stats, self._sender
        if sender.refused:
            why = "the agent refused this rank (logged when it did)"
        elif not sender.ever_registered:
            why = f"the node agent at {self.agent} never answered (logged when it did not)"
        elif stats["unacknowledged_batches"]:
            why = (f"the agent at {self.agent} took them but the root has not said they are durable: is the "
                   f"agent's parent reachable? (its log says; telemetry doctor checks)")
        else:
            why = "values were dropped on the way"
        log.warning("telemetry: close(timeout=%s) for job %r rank %d: not everything is durable at the root: %s "
                    "(%s)", timeout, self.job, self.rank, why, ", ".join(f"{k}={v}" for k, v in stats.items()))

    @property
    def stats(self) -> dict[str, int]:
        # Values dropped = those the sender counted + those dropped from the buffer since its last drain.
        dropped = self._sender.dropped_values + self._dropped_total - self._dropped_reported
        return {"dropped_values": dropped, "unacknowledged_batches": self._sender.unacknowledged(),
                "refused_batches": self._sender.refused_batches,
                "late_dropped_values": self._sender.late_dropped_values}


def _forked_child() -> None:
    for run in list(_LIVE_RUNS):
        run._forked_child()


os.register_at_fork(after_in_child=_forked_child)


def _switch(given: bool | None, env: str) -> bool:
    """An on-by-default feature: `given` when said, else off only when $env says 0/false/no/off."""
    if given is not None:
        return bool(given)
    return os.environ.get(env, "1").strip().lower() not in ("0", "false", "no", "off")


def _dist_initialised() -> bool:
    """Whether torch.distributed is imported, available and initialised (never imports torch)."""
    dist = sys.modules.get("torch.distributed")
    return dist is not None and dist.is_available() and dist.is_initialized()


def _check_step(step: int) -> None:
    if type(step) is not int:  # the exact type: bool and numpy ints are refused too (say int(step))
        raise TypeError(f"step must be an int, got {type(step).__name__}")
    if not 0 <= step <= MAX_STEP:
        raise ValueError(f"step must be in [0, 2**53], got {step}")


_stage_tensors: Callable[[dict[str, Any]], Any] | None = None


def _stage(values: dict[str, Any]) -> Any:
    """Tensors go through telemetry.torch (imported only when a tensor is first logged, then kept)."""
    global _stage_tensors
    if _stage_tensors is None:
        from telemetry.torch.device_values import stage
        _stage_tensors = stage
    return _stage_tensors(values)


def _backlog_bytes(given: int | None) -> int:
    """max_backlog_bytes as given, else TELEMETRY_MAX_BACKLOG_BYTES, else 64 MiB; a bound below one byte is a
    ValueError here (nothing could be kept: every value logged while the agent is away would be lost)."""
    chosen = given if given is not None else env_int(BACKLOG_BYTES_ENV, DEFAULT_BACKLOG_BYTES)
    if chosen < 1:
        source = "max_backlog_bytes" if given is not None else BACKLOG_BYTES_ENV
        raise ValueError(f"{source}={chosen}: the SDK's backlog bound must be a positive number of bytes")
    return chosen


def init(job: str | None = None, rank: int | None = None, world_size: int | None = None,
         local_rank: int | None = None, agent: str | None = None, attempt: int | None = None,
         **options: Any) -> Run:
    """Start telemetry for this rank; every argument defaults from torchrun's environment.

    job: TORCHELASTIC_RUN_ID (else "default"); rank: RANK; world_size: WORLD_SIZE; local_rank: LOCAL_RANK;
    agent: TELEMETRY_AGENT, else the node agent's default Unix socket (unix:PATH or HOST:PORT; a malformed address
    or job name is a ValueError here rather than silence later); attempt: which launch of the job this
    is (TELEMETRY_ATTEMPT, torchrun's restarts, Slurm's, ...: telemetry/sdk/attempt.py, docs/restarts.md);
    device: the GPU's UUID where the script already initialised CUDA (telemetry/sdk/gpu.py), else "".
    """
    if not job and os.environ.get("TORCHELASTIC_RUN_ID"):
        job = os.environ["TORCHELASTIC_RUN_ID"]
        problem = job_name_problem(job)
        if problem is not None:
            raise ValueError(f"{problem}; it came from TORCHELASTIC_RUN_ID (torchrun --rdzv-id): pass job=...")
    job = job or "default"
    rank = rank if rank is not None else env_int("RANK", 0)
    world_size = world_size if world_size is not None else env_int("WORLD_SIZE", 1)
    local_rank = local_rank if local_rank is not None else env_int("LOCAL_RANK", 0)
    attempt = check_attempt(attempt) if attempt is not None else default_attempt(world_size)
    if "device" not in options:
        options["device"] = rank_device(local_rank)  # the agent files the rank's GPU readings under its job
    return Run(job, rank, world_size, local_rank, agent, attempt=attempt, **options)
