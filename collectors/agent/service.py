"""The Agent gRPC service: one stream per rank (hello, batches, heartbeats in; acks out)."""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from itertools import islice
from typing import Any, cast

import grpc
from pyroaring import BitMap

from collectors.agent.captures import Captures
from collectors.agent.exits import FaultFiles, check_words, exit_record, watch_process
from collectors.agent.intake import OpenBeat, OpenStep, RankValues, beat_key
from collectors.agent.peercred import PeerCheck
from collectors.agent.ranks import RankInfo, RankRegistry
from collectors.agent.wait_share import WaitShares
from collectors.common.aioserve import Answers, Host, StreamSlots, StreamWork, serve_stream
from collectors.common.attempts import split
from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from collectors.common.validation import (
    HEARTBEAT_WINDOW_S,
    BadInput,
    MetricBudget,
    check_attempt,
    check_index,
    check_size,
)
from collectors.delivery.lifecycle import JobLifecycle
from collectors.delivery.node import Node
from collectors.delivery.windows import Origin, Part, Refusal
from collectors.probes.process import ProcessStatus
from collectors.probes.snapshot import process_facts
from telemetry.names import PROGRESS_METRIC, STEPS_COMPLETED_METRIC, WAIT_SHARE_METRIC
from telemetry.streams import END
from telemetry.v1 import forensics_pb2, ingest_pb2, ingest_pb2_grpc

log = logging.getLogger(__name__)

LIVENESS_EVERY_S = 0.5
FINGERPRINT_SLACK = 64  # fingerprints a beat may carry past the collective progress it reports
ENQUEUED_METRIC = "collective.last_enqueued"  # telemetry/torch/collective.py ENQUEUED (no torch imported here)
WATCH_AFTER_STREAM_END_S = 2.0  # after a rank's stream ends, its process is looked at every 50 ms this long
WATCH_EVERY_S = 0.05
COMPLETED_METRIC = "collective.last_completed"  # telemetry/torch/collective.py COMPLETED
MAX_OPEN_STEPS_PER_JOB = 1024  # a rank logging into ever more steps seals the oldest early, not memory without end


class AgentService(ingest_pb2_grpc.AgentServicer):
    def __init__(self, node: Node, registry: RankRegistry, budget: MetricBudget, host: Host,
                 slots: StreamSlots, lifecycle: JobLifecycle, peers: PeerCheck | None = None,
                 captures: Captures | None = None, fingerprints: Any = None,
                 fault_files: FaultFiles | None = None,
                 on_exit: Callable[[forensics_pb2.RankExit], None] | None = None,
                 on_work: Callable[[], None] = lambda: None) -> None:
        self.node = node
        self.on_work = on_work  # something came that the next flush may have to act on (AgentServer: its wake)
        self.host = host
        self.slots = slots
        self.lifecycle = lifecycle
        self.registry = registry
        self.budget = budget
        self.peers = peers  # None: no peer check (in-process harnesses that call the service directly)
        self.steps: dict[tuple[str, int], OpenStep] = {}
        self.beats: dict[Key, OpenBeat] = {}
        self._open_per_job: dict[str, int] = {}
        self._late_log = RateLimitedLog(log)
        self._beat_log = RateLimitedLog(log)
        self._enqueued: dict[tuple[str, int], float] = {}  # (job, rank) -> most collectives it said it enqueued
        self._views_at = 0.0
        # Forensics (docs/forensics.md): capture requests for this agent's ranks, and the ranks' collective
        # fingerprints merged for the parent (a FingerprintTable). None: not kept (in-process harnesses).
        self.captures = captures
        self.fingerprints = fingerprints
        # When ranks die (docs/forensics.md): fault files handed to the ranks, and where each RankExit goes.
        self.fault_files = fault_files
        self.on_exit = on_exit
        self._watch_until = 0.0  # a stream ended: look for dead processes at every flush until then
        self.wait_shares = WaitShares()  # each rank's running wait share, sealed with its steps (wait_share.py)

    # ------------------------------------------------------------ acks down
    def ack_down(self, origin: Origin, index: int | None = None, overlap: BitMap | None = None,
                 refused: list[Refusal] | None = None) -> None:
        """A rank's batch is settled upstream: DURABLE, or REFUSED when any of its windows was refused or
        dropped on the way (the SDK counts the batch as refused, and close() is not True)."""
        stream, seq = origin
        job, _, rank = stream.rpartition("/")
        if index is not None:
            log.error("a single-rank part of %s was refused as a partial overlap; this cannot happen", stream)
            return
        info = self.registry.ranks.get((job, int(rank)))
        if info is None:
            return
        if refused:
            first = refused[0]
            reason = (f"{len(refused)} window(s) of this batch were not stored, e.g. {first.key.metric} at "
                      f"{first.key.index}: {first.reason[:200]}")
            info.remember_refused(seq, reason)
            ack = ingest_pb2.RankAck(status=ingest_pb2.RankAck.REFUSED, seq=seq, reason=reason)
        else:
            ack = ingest_pb2.RankAck(status=ingest_pb2.RankAck.DURABLE, seq=seq)
        if info.link is not None:
            info.link.put(ack)

    # ------------------------------------------------------------ the stream
    async def Stream(self, request_iterator: AsyncIterator[ingest_pb2.RankMessage],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[ingest_pb2.RankAck]:
        peer = context.peer()
        async for answer in serve_stream(self.host, self.slots, context, request_iterator,
                                         lambda answers: self._start(answers, peer), self._count):
            # serve_stream yields what this service puts on the stream's answers: RankAcks (END and a BadInput
            # end the stream there, never yielded).
            yield cast(ingest_pb2.RankAck, answer)

    def _start(self, answers: Answers, peer: str) -> StreamWork:
        stream = _RankStream(answers, peer)
        def one(message: ingest_pb2.RankMessage) -> None:
            try:
                self._one(stream, message)
            finally:
                self.on_work()

        def ended() -> None:
            self._ended(stream)
            self.on_work()
        return StreamWork(one, ended)

    def _count(self, name: str) -> None:
        with self.node.lock:
            self.node.counters[name] += 1

    def _ended(self, stream: _RankStream) -> None:
        with self.node.lock:
            if stream.info is not None and stream.info.link is stream.answers:
                stream.info.link = None
                if stream.info.exits is not None:
                    # Its process may be gone: the kernel closes a dead process's sockets.
                    stream.info.exits.stream_ended_ns = time.time_ns()
                    self._watch_until = time.monotonic() + WATCH_AFTER_STREAM_END_S

    def _one(self, stream: _RankStream, message: ingest_pb2.RankMessage) -> None:
        """One message from a rank, on the pool."""
        check_size(message)
        which = message.WhichOneof("body")
        if which == "capture":
            self._capture(stream, message.capture)
            return
        if which == "last_words":
            self._last_words(stream, message.last_words)
            return
        with self.node.lock:
            if which == "hello":
                if stream.info is not None:  # one stream speaks for one rank, registered once
                    raise BadInput("INVALID_ARGUMENT", f"a second hello on a stream registered for rank "
                                                       f"{stream.info.rank} of {stream.info.job!r}: one stream, "
                                                       "one rank")
                if self.peers is not None:
                    self.peers.check(stream.peer, message.hello.pid)
                stream.info = self._hello(message.hello, stream.answers)
            elif stream.info is None:
                raise BadInput("INVALID_ARGUMENT", "the first message on a rank stream must be a hello")
            elif which == "batch":
                self._batch(stream.info, message.batch, stream.answers)
            elif which == "heartbeat":
                self._heartbeat(stream.info, message.heartbeat)
            elif which == "bye":
                self._bye(stream.info)
                stream.answers.put(END)
            self.lifecycle.touch(stream.info.job, time.monotonic())

    # ------------------------------------------------------------ forensics
    def request_captures(self, requests: list[forensics_pb2.CaptureRequest]) -> None:
        """Capture requests from the parent (on the outbox's client loop): each hosted rank named is asked."""
        if self.captures is None:
            return
        now = time.monotonic()
        with self.node.lock:
            for request in requests:
                try:
                    self.captures.request(request, now)
                except BadInput as exc:
                    self.node.counters["bad_inputs"] += 1
                    log.warning("refused a capture request from the parent: %s", exc)
        self.on_work()

    def _capture(self, stream: _RankStream, capture: forensics_pb2.RankCapture) -> None:
        """A rank's answer to a capture; its /proc facts are read before the node's lock is taken."""
        info = stream.info
        if info is None:
            raise BadInput("INVALID_ARGUMENT", "the first message on a rank stream must be a hello")
        if self.captures is None:
            return
        facts = process_facts(info.pid)
        with self.node.lock:
            self.captures.answered(info, capture, facts)

    def _hello(self, hello: ingest_pb2.RankHello, responses: Answers) -> RankInfo:
        check_attempt(hello.attempt)
        info = self.registry.register(hello, responses)
        self._note_dropped(info, hello.dropped)
        if info.exits is None:
            watch = info.exits = watch_process(info.pid, "")
            if self.fault_files is not None:
                watch.fault_file = self.fault_files.make(info.job, info.rank, info.pid, watch.uid)
        responses.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.REGISTERED, seq=info.last_seq,
                                         fault_file=info.exits.fault_file))
        return info

    # ------------------------------------------------------------ when ranks die
    def _last_words(self, stream: _RankStream, words: forensics_pb2.LastWords) -> None:
        """A rank's last words: bound to the stream's registration and its connection's peer credentials."""
        info = stream.info
        if info is None:
            raise BadInput("INVALID_ARGUMENT", "the first message on a rank stream must be a hello")
        if words.rank != info.rank or (words.pid and words.pid != info.pid):
            raise BadInput("PERMISSION_DENIED", f"last words for rank {words.rank} (pid {words.pid}) on the stream "
                                                f"of rank {info.rank} (pid {info.pid}): refused")
        bad = check_words(words)
        if bad is not None:
            raise BadInput("INVALID_ARGUMENT", bad)
        if self.peers is not None:
            self.peers.check(stream.peer, info.pid)  # the connection is still the registered process's
        with self.node.lock:
            if info.exits is not None:
                info.exits.note(words)
            if words.kind != "thread_exception" and not info.closed:
                # Its own words say it is ending (its exit may take seconds: atexit, DataLoader workers): dead
                # from now on for sealing and liveness, and its account goes up at the next flush.
                self.registry.ending(info)
        stream.answers.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.NOTED))

    def _report_exits(self) -> None:
        """A RankExit for each rank newly found dead (not closed); caller holds the node's lock."""
        if self.on_exit is None:
            return
        observed = time.time_ns()
        for info in self.registry.ranks.values():
            watch = info.exits
            if info.verdict != "dead" or info.closed or watch is None or watch.reported:
                continue
            watch.reported = True
            fault = self.fault_files.read(watch.fault_file) if self.fault_files is not None else ("", 0)
            job, attempt = split(info.job)
            record = exit_record(watch, job=job, attempt=attempt, rank=info.rank, host=info.host, pid=info.pid,
                                 current_step=info.current_step, exit_status=info.exit_status,
                                 observed_ns=observed, fault=fault)
            log.warning("rank %d of job %r (pid %d) ended: %s: %s", info.rank, info.job, info.pid, record.cause,
                        record.why)
            self.on_exit(record)

    def _batch(self, info: RankInfo, batch: ingest_pb2.RankBatch, responses: Answers) -> None:
        if batch.job and batch.job != split(info.job)[0]:
            raise BadInput("INVALID_ARGUMENT", f"batch for job {batch.job!r} on a stream registered for {info.job!r}")
        if batch.rank != info.rank:
            raise BadInput("INVALID_ARGUMENT",
                           f"batch for rank {batch.rank} on a stream registered for rank {info.rank}")
        origin = (f"{info.job}/{info.rank}", batch.seq)
        if batch.seq <= info.last_seq:
            # A resend of something this agent already holds: it is acked durable when the original is (or
            # refused again, when the original was refused upstream while the rank was away).
            responses.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.RECEIVED, seq=batch.seq))
            reason = info.refused.get(batch.seq)
            if reason is not None:
                responses.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.REFUSED, seq=batch.seq, reason=reason))
            else:
                self.node.durability.settle(origin)
            return
        try:
            for step_batch in batch.steps:
                check_index(step_batch.step)
            self.budget.admit_all(info.job, {v.metric for s in batch.steps for v in s.metrics})
        except BadInput as exc:
            # Name the refused batch first, so the SDK drops exactly it and resends the rest when it
            # reconnects; then end the stream with the status (counted once, by _consume).
            info.last_seq = batch.seq
            responses.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.REFUSED, seq=batch.seq, reason=str(exc)))
            raise
        now = time.monotonic()
        highest = 0
        rank = info.rank
        hold = self.node.durability.hold
        for step_batch in batch.steps:
            step = step_batch.step
            highest = max(highest, step)
            open_step = self._open_step(info, step, now)
            stamp = step_batch.end_time_ns or time.time_ns()
            metrics = open_step.metrics
            for values in step_batch.metrics:
                by_rank = metrics.get(values.metric)
                if by_rank is None:
                    by_rank = metrics[values.metric] = {}
                rv = by_rank.get(rank)
                if rv is None:
                    rv = by_rank[rank] = RankValues(first_ns=stamp, last_ns=stamp)
                elif stamp > rv.last_ns:
                    rv.last_ns = stamp
                rv.values += values.values
                if not rv.origins or rv.origins[-1] != origin:
                    rv.origins.append(origin)
                    hold(origin)
            if step_batch.closed:
                open_step.closed.add(rank)
        for (job, step), open_step in self.steps.items():
            if job == info.job and step < highest:
                open_step.closed.add(info.rank)  # moving on closes earlier steps
        info.last_seq = batch.seq
        if info.exits is not None and highest > info.exits.last_step:
            info.exits.last_step = highest
        responses.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.RECEIVED, seq=batch.seq))
        self.node.durability.settle(origin)

    def _bye(self, info: RankInfo) -> None:
        """The rank closed its run: it closes every step it has open and is waited for no more."""
        self.registry.close(info)
        for (job, _), open_step in self.steps.items():
            if job == info.job:
                open_step.closed.add(info.rank)

    def open_steps(self, job: str) -> int:
        return self._open_per_job.get(job, 0)

    def forget_job(self, job: str) -> None:
        """A finished job (JobLifecycle): what this service keeps for it goes."""
        for key in [key for key in self.steps if key[0] == job]:
            del self.steps[key]
            log.warning("job %s was given up with step %d still open; its values there are dropped", job, key[1])
        self._open_per_job.pop(job, None)
        self.wait_shares.forget(job)
        if self.fault_files is not None:
            for (rank_job, _), info in self.registry.ranks.items():
                if rank_job == job and info.exits is not None:
                    self.fault_files.remove(info.exits.fault_file)
        if self.captures is not None:
            self.captures.forget_job(job)
        if self.fingerprints is not None:
            self.fingerprints.forget(*split(job))
        for window_key in [window_key for window_key in self.beats if window_key.job == job]:
            del self.beats[window_key]
        for key in [key for key in self._enqueued if key[0] == job]:
            del self._enqueued[key]
        self.budget.forget(job)

    def _open_step(self, info: RankInfo, step: int, now: float) -> OpenStep:
        found = self.steps.get((info.job, step))
        if found is None:
            if self._open_per_job.get(info.job, 0) >= MAX_OPEN_STEPS_PER_JOB:
                self._seal_step((info.job, min(s for j, s in self.steps if j == info.job)))
            self._open_per_job[info.job] = self._open_per_job.get(info.job, 0) + 1
            deadline = self.node.table.deadlines.for_window(Key(info.job, "", step), now, time.time_ns())
            found = self.steps[(info.job, step)] = OpenStep(info.job, step, info.world_size, deadline)
        return found

    def _note_dropped(self, info: RankInfo, dropped: int) -> None:
        """The rank's own drop count (cumulative, in its hello and heartbeats): what is new goes to sdk_dropped."""
        if dropped > info.reported_dropped:
            self.node.counters["sdk_dropped"] += dropped - info.reported_dropped
            info.reported_dropped = dropped

    def _heartbeat(self, info: RankInfo, beat: ingest_pb2.Heartbeat) -> None:
        info.last_beat = time.monotonic()  # a sign of life, whatever the beat says
        self._note_dropped(info, beat.dropped)
        now_ns = time.time_ns()
        stamp = beat.time_ns or now_ns
        if abs(stamp - now_ns) > HEARTBEAT_WINDOW_S * 1e9:
            # A clock this far from the agent's (the same host's) is a bug or a lie: its buckets would be
            # windows far in the future or past (50,000 future buckets grew an agent by 67 MB), so refused.
            self.node.counters["bad_inputs"] += 1
            self._beat_log.warn("rank %d of %s: a heartbeat stamped %.0f s from this agent's clock (beyond %g s) "
                                "refused and counted (bad_inputs)", info.rank, info.job, (stamp - now_ns) / 1e9,
                                HEARTBEAT_WINDOW_S)
            return
        info.current_step = beat.current_step
        figures = {PROGRESS_METRIC: float(beat.current_step), STEPS_COMPLETED_METRIC: float(beat.steps_completed)}
        self.budget.admit_all(info.job, beat.extra)
        figures.update(beat.extra)
        if info.exits is not None:  # its collective progress, for the account of its end (a NaN is not a seq)
            for name, attr in ((ENQUEUED_METRIC, "last_enqueued"), (COMPLETED_METRIC, "last_completed")):
                value = beat.extra.get(name)
                if value is not None and math.isfinite(value) and 0 <= value < 2**62:
                    setattr(info.exits, attr, int(value))
        if beat.fingerprints and self.fingerprints is not None:
            self._fingerprints(info, beat)
        for metric, value in figures.items():
            key = beat_key(info.job, metric, stamp)
            open_beat = self.beats.get(key)
            if open_beat is None:
                open_beat = self.beats[key] = OpenBeat(key, info.world_size)
            open_beat.values[info.rank] = (value, stamp)

    def _fingerprints(self, info: RankInfo, beat: ingest_pb2.Heartbeat) -> None:
        """A beat's fingerprints, bounded by the rank's own collective progress: a sequence number beyond the
        most collectives it said it enqueued (plus FINGERPRINT_SLACK, for one enqueued between its reading
        and its fingerprints) is refused, beat and all fingerprints of it, and counted. Before, 512 fingerprints
        near 2**53 from one rank pushed the job's real ones out of every tier's table."""
        key = (info.job, info.rank)
        enqueued = max(self._enqueued.get(key, 0.0), beat.extra.get(ENQUEUED_METRIC, 0.0))
        self._enqueued[key] = enqueued
        highest = max(fp.seq for fp in beat.fingerprints)
        if highest > enqueued + FINGERPRINT_SLACK:
            self.node.counters["bad_inputs"] += 1
            self._beat_log.warn("rank %d of %s: fingerprint seq %d is beyond its own collective progress (%d "
                                "enqueued): refused and counted (bad_inputs)", info.rank, info.job, highest,
                                enqueued)
            return
        job, attempt = split(info.job)
        try:
            self.fingerprints.add(job, attempt, info.rank, beat.fingerprints)
        except ValueError as exc:
            raise BadInput("INVALID_ARGUMENT", f"heartbeat fingerprints: {exc}") from None

    def _dropped_late(self, piece: Part) -> None:
        """Values a rank logged into a step it had closed: its contribution there is sealed and a source
        counts once per window, so they are dropped - counted here and told to the rank (run.stats)."""
        dropped = len(piece.raw.values) if piece.raw is not None else piece.summary.count
        self.node.counters["late_dropped"] += dropped
        job, step, metric = piece.key.job, piece.key.index, piece.key.metric
        for rank in piece.sources:
            link = self.registry.link(job, rank)
            if link is not None:
                link.put(ingest_pb2.RankAck(status=ingest_pb2.RankAck.DROPPED_LATE, dropped_values=dropped,
                                            reason=f"{metric} at step {step}, logged after the rank closed it"))
        self._late_log.warn("rank %s logged %d value(s) of %s into step %d after closing it; dropped and counted "
                            "(late_dropped)", list(islice(piece.sources, 8)), dropped, metric, step)

    # ------------------------------------------------------------ sealing
    def _seal_step(self, key: tuple[str, int]) -> None:
        node = self.node
        open_step = self.steps.pop(key)
        self._open_per_job[open_step.job] -= 1
        self.wait_shares.add_to(open_step, node.durability.hold, self._admits_wait_share)
        for part, expected in open_step.parts():
            # A rank that logs into a step after its contribution was sealed must not take the
            # other ranks' late values down with it: offer rank by rank then (its own piece is refused).
            _, offered = node.offer_split(part, expected, preheld=True, held_too=True)
            for piece, verdict in offered:
                if verdict != "accepted":
                    self._dropped_late(piece)

    def _admits_wait_share(self, job: str) -> bool:
        try:
            self.budget.admit(job, WAIT_SHARE_METRIC)
        except BadInput:
            return False
        return True

    def liveness_due(self, now: float) -> bool:
        """Whether the next seal refreshes the ranks' liveness (reads /proc per rank: not on every flush)."""
        since = now - self._views_at
        return since >= LIVENESS_EVERY_S or self.registry.changed or (now < self._watch_until
                                                                       and since >= WATCH_EVERY_S)

    def next_due(self, now: float) -> float | None:
        """When (monotonic) the next seal has something to do that no message will announce: the ranks' liveness
        (while there are ranks), a step's deadline, a heartbeat second's end, a capture's answer timeout. None:
        nothing (an agent with no ranks). Caller holds the lock."""
        times = []
        if self.registry.ranks:
            times.append(self._views_at + LIVENESS_EVERY_S)
        if now < self._watch_until:
            times.append(min(self._views_at + WATCH_EVERY_S, self._watch_until))
        if self.steps:
            times.append(min(open_step.deadline for open_step in self.steps.values()))
        if self.beats:
            due_ns = min(open_beat.due_ns for open_beat in self.beats.values())
            times.append(now + (due_ns - time.time_ns()) / 1e9)
        if self.captures is not None:
            deadline = self.captures.next_deadline()
            if deadline is not None:
                times.append(deadline)
        return min(times) if times else None

    def seal(self, now: float, statuses: dict[int, ProcessStatus] | None = None) -> None:
        """Move finished steps and heartbeat buckets into the node's window table; caller holds the lock.
        `statuses`: the ranks' /proc reads, taken by the caller before the lock (RankRegistry.read_statuses)."""
        node = self.node
        if self.captures is not None:
            self.captures.tick(now)
        if self.liveness_due(now):
            node.own_ranks = self.registry.views(now, statuses)
            self._views_at, self.registry.changed = now, False
            self._report_exits()
        views = node.own_ranks
        for key, open_step in list(self.steps.items()):
            view = views.get(open_step.job)
            waiting_for = (view.alive | view.stuck) if view else BitMap()
            if now >= open_step.deadline or waiting_for.issubset(open_step.closed):
                self._seal_step(key)
        now_ns = time.time_ns()
        for window_key, open_beat in list(self.beats.items()):
            if open_beat.due(now_ns):
                del self.beats[window_key]
                for part, expected in open_beat.parts():
                    # A beat delivered after its second was sealed: the rank's value for that
                    # second is already counted; only ranks new to the bucket go on.
                    node.offer_split(part, expected)


@dataclass
class _RankStream:
    answers: Answers
    peer: str  # grpc's name for the connection (context.peer()): the key to its SO_PEERCRED
    info: RankInfo | None = None
