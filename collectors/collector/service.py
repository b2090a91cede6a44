"""The Collector gRPC service: children stream SummaryBatches in, Acks flow back out."""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol, TypeVar, cast

import grpc
from pyroaring import BitMap

from collectors.common.aioserve import NOT_INLINE, Answers, Host, Parked, StreamSlots, StreamWork, serve_stream
from collectors.common.attempts import scoped, split
from collectors.common.fingerprints import ranks_of
from collectors.common.fleet import FLEET_JOB, extent
from collectors.common.keys import Key
from collectors.common.ratelog import RateLimitedLog
from collectors.common.transport import certificate_names
from collectors.common.validation import (
    DEFAULT_MAX_WORLD_SIZE,
    MAX_ATTEMPT,
    MAX_INDEX,
    BadInput,
    MetricBudget,
    check_attempt,
    check_index,
    check_job,
    check_length,
    check_world,
    shown,
)
from collectors.delivery.coverage import Coverage
from collectors.delivery.forensics import check_capture, check_exit, request_ranks, with_ranks
from collectors.delivery.lifecycle import ChildLifecycle, JobLifecycle
from collectors.delivery.node import COUNTER_FIELDS, Node, RankView
from collectors.delivery.runs import Claim, refusal_reason
from collectors.delivery.windows import Origin, Part, Refusal
from telemetry.summary import Summary, _native
from telemetry.summary.sketch import DEFAULT_MAX_CENTROIDS
from telemetry.summary.summary import DEFAULT_K, UnitWindow, read_native_unit, unit_windows
from telemetry.v1 import forensics_pb2, forward_pb2, forward_pb2_grpc, summary_pb2

log = logging.getLogger(__name__)

MAX_SENDER_ID = 256
# The one summary shape (top-k size, sketch size) of the tree: what every agent builds. Summaries merge only
# with their own shape; a shape fixed by whichever window of a job came first would let one rogue window
# lock a job's real data out (issue 14), so any other shape is refused, whoever sends it first.
TREE_SHAPE = (DEFAULT_K, DEFAULT_MAX_CENTROIDS)
UNKNOWN_INDEX = 2**32 - 1  # a Rejection's index when only its key names the window (forward.proto)


class CollectorService(forward_pb2_grpc.CollectorServicer):
    """Accepts child units into a Node; `reads` (the root's: collectors/root/reads.py) parks a unit until what it
    needs from the root's store (windows to reload, run claims to recall) is read, off the node's lock."""

    def __init__(self, node: Node, host: Host, slots: StreamSlots, budget: MetricBudget | None = None,
                 reads: UnitReads | None = None, jobs: JobLifecycle | None = None,
                 children: ChildLifecycle | None = None, max_world_size: int = DEFAULT_MAX_WORLD_SIZE) -> None:
        self.node = node
        self.max_world_size = max_world_size
        self.host = host
        self.slots = slots
        self.jobs = jobs or JobLifecycle()
        self.children = children or ChildLifecycle()
        self.budget = budget or MetricBudget()
        # Per job, the names of the last native unit whose every metric the budget had admitted (Unit.metric_names):
        # a unit of the same names needs no check (a rack's 64 children repeat their 300 names every step: 19,200 str
        # made and hashed a step, ~13 M instructions; docs/scale.md, "One block per unit"). A budget only forgets a
        # job in forget_job, which drops its entry here too; else it only grows, so what it admitted stays admitted.
        self._admitted_names: dict[str, bytes] = {}
        self.reads = reads
        self._links: dict[str, Answers] = {}
        self._links_lock = threading.Lock()
        # The children whose live stream opened with skip_received (forward.proto): their units are answered with
        # DURABLE (or REJECTED_OVERLAP) only, no plain RECEIVED: one gRPC write a unit less at either end.
        self._quiet: set[str] = set()
        self._run_log = RateLimitedLog(log)  # a refused second run has every window refused: say so, not each
        self.coverage = Coverage()  # which ranks each child may speak for (collectors/delivery/coverage.py)
        self._cover_log = RateLimitedLog(log)
        # Forensics riding on the units (docs/forensics.md), called under the node's lock: a collector passes
        # both up with its own units, the root stores captures and judges fingerprints.
        self.on_captures: Callable[[list[forensics_pb2.Capture]], None] | None = None
        self.on_fingerprints: Callable[[list[forensics_pb2.JobFingerprints]], None] | None = None
        # How ranks ended (RankExit, docs/forensics.md): a collector sends them up, the root's crash detector judges.
        self.on_exits: Callable[[list[forensics_pb2.RankExit]], None] | None = None
        # A host's index in the fleet (RegisterHost, docs/fleet.md "Host indexes"): a collector asks its parent
        # (collectors/common/host_index.py), the root answers from its table (collectors/root/host_indexes.py).
        # Blocking: run off the event loop. None: this tier hands out none.
        self.register_host: Callable[[forward_pb2.HostRegistration], forward_pb2.HostAssignment] | None = None
        self.on_work: Callable[[], None] = lambda: None  # a unit came in (Tier: wakes its flush loop)

    # Called by the node (under its lock) to answer a child about one of its units.
    def ack_down(self, origin: Origin, index: int | None = None, overlap: BitMap | None = None,
                 refused: list[Refusal] | None = None) -> None:
        sender, seq = origin
        with self._links_lock:
            link = self._links.get(sender)
        if link is None:
            return  # the child resends after it reconnects; the duplicate is then absorbed
        if index is None:
            # Settled: durable, but for the windows refused or dropped on the way up, which the child hears of
            # as rejections without overlapping sources (it tells its own senders, down to the ranks).
            link.put(forward_pb2.Ack(seq=seq, status=forward_pb2.Ack.DURABLE, rejections=[
                forward_pb2.Rejection(index=UNKNOWN_INDEX if r.index is None else r.index, key=r.key.to_proto(),
                                      reason=r.reason) for r in refused or ()]))
        else:
            link.put(forward_pb2.Ack(seq=seq, status=forward_pb2.Ack.REJECTED_OVERLAP, rejections=[
                forward_pb2.Rejection(index=index, overlapping_sources=list(overlap or ()),
                                      reason="sources already held upstream; split and resend")]))

    def route_requests(self, requests: list[forensics_pb2.CaptureRequest]) -> BitMap:
        """Send capture requests down: each child is sent the ones naming ranks it covers, narrowed to those
        ranks. Returns the ranks sent to some child (from the root's forensics, or a collector's outbox)."""
        routed = BitMap()
        with self.node.lock:
            per_child: dict[str, list[forensics_pb2.CaptureRequest]] = {}
            for request in requests:
                try:
                    ranks = request_ranks(request, self.max_world_size)
                except BadInput as exc:
                    self.node.counters["bad_inputs"] += 1
                    log.warning("refused a capture request: %s", exc)
                    continue
                job = scoped(request.job, request.attempt)
                for child, views in self.node.child_ranks.items():
                    view = views.get(job)
                    if view is None:
                        continue
                    mine = ranks & (view.covered | view.closed)
                    if mine:
                        per_child.setdefault(child, []).append(with_ranks(request, mine))
        for child, asks in per_child.items():
            with self._links_lock:
                link = self._links.get(child)
            if link is not None:
                link.put(forward_pb2.Ack(seq=0, capture_requests=asks))
                for ask in asks:
                    routed |= BitMap.deserialize(ask.ranks)
        return routed

    async def Forward(self, request_iterator: AsyncIterator[_Unit],  # SummaryBatches as `_receive` reads them
                      context: grpc.aio.ServicerContext) -> AsyncIterator[forward_pb2.Ack]:
        names = certificate_names(context)
        async for answer in serve_stream(self.host, self.slots, context, request_iterator,
                                         lambda answers: self._start(answers, names), self._count):
            yield cast(forward_pb2.Ack, answer)  # serve_stream yields what _start's work put: Acks here

    async def RegisterHost(self, request: forward_pb2.HostRegistration,
                           context: grpc.aio.ServicerContext) -> forward_pb2.HostAssignment:
        if self.register_host is None:
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "this tier hands out no host indexes")
        assert self.register_host is not None
        try:
            return await asyncio.to_thread(self.register_host, request)
        except grpc.RpcError as exc:  # the parent's answer, passed down as it came (e.g. UNAVAILABLE)
            await context.abort(exc.code(), exc.details() or "")
        except Exception as exc:  # the parent unreachable (NoParentAnswered), the root's store in trouble
            await context.abort(grpc.StatusCode.UNAVAILABLE, f"cannot register host {request.host[:64]!r} now: {exc}")
        raise AssertionError("unreachable: context.abort raises")

    def _start(self, answers: Answers, names: frozenset[str] | None) -> StreamWork:
        stream = _ChildStream(answers, names)
        return StreamWork(lambda unit: self._one(stream, unit), lambda: self._ended(stream),
                          lambda unit: self._inline(stream, unit))

    def _inline(self, stream: _ChildStream, unit: _Unit) -> object:
        """A unit read natively from a child already named, taken in on the loop when the node's lock is free now (no
        wait) and, at the root, nothing of it is to be read from the store first; else NOT_INLINE, nothing done, and
        it goes to the pool as every other unit (where the root parks it for its reads: `_handle`). The root also
        declines a unit carrying captures, fingerprints or rank exits: its hooks for them (storing captures, judging
        fingerprints and exits, detector work when the judging queue is full: collectors/root/wiring.py) are not
        bounded work for the event loop, so such a unit takes the pool's path as it always did."""
        node = self.node
        batch = unit.batch
        if (stream.sender is None or unit.read is None or node.table.native is None
                or (batch.sender_id and batch.sender_id != stream.sender)
                or (self.reads is not None and (batch.captures or batch.fingerprints or batch.exits))):
            return NOT_INLINE
        if not node.lock.acquire(blocking=False):
            return NOT_INLINE
        try:
            check_length(unit.size)
            views = self._states(batch.ranks)
            if self.reads is not None and self.reads.needs(node.table.missing(unit.read), views):
                return NOT_INLINE
            native = _NativeRead.of(unit.read, unit.groups, self.max_world_size)
            self._intake(stream.sender, batch, stream.answers, views, [], [], native)
        finally:
            node.lock.release()
        return None

    def _count(self, name: str) -> None:
        with self.node.lock:
            self.node.counters[name] += 1

    def _ended(self, stream: _ChildStream) -> None:
        if stream.sender is None:
            return
        with self._links_lock:
            if self._links.get(stream.sender) is stream.answers:
                del self._links[stream.sender]
                self._quiet.discard(stream.sender)
        with self.node.lock:
            self.children.disconnected(stream.sender, time.monotonic())

    def add_to_server(self, server: grpc.aio.Server) -> None:
        """Serve the Collector service on `server` as its generated code does, but for the Forward stream's units,
        which `_receive` deserialises (whatever RPCs the service has, registered as generated)."""
        recorder = _Registrations()
        forward_pb2_grpc.add_CollectorServicer_to_server(self, recorder)
        handlers = dict(recorder.handlers)
        handlers["Forward"] = grpc.stream_stream_rpc_method_handler(
            self.Forward, request_deserializer=self._receive, response_serializer=forward_pb2.Ack.SerializeToString)
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(recorder.service, handlers),))
        server.add_registered_method_handlers(recorder.service, handlers)

    def _receive(self, data: bytes) -> _Unit:
        """A unit's bytes, as the Forward stream receives them: its windows read in one native call (`read_unit`:
        keys checked, summaries decoded with every check of Summary.from_bytes) and the rest of the message parsed by
        protobuf. A unit with any window that read does not take (odd or bad), or that it cannot read at all, is
        parsed whole by protobuf as it always was (so bytes protobuf refuses end the stream as before), and the
        windows read did not take are judged one by one (`_parse_read`); the unit is read natively once, not again
        after protobuf's re-serialisation."""
        try:
            unit = read_native_unit(data, MAX_INDEX, MAX_ATTEMPT, self.max_world_size)
        except ValueError:
            whole = forward_pb2.SummaryBatch.FromString(data)
            return _Unit(whole, [None] * len(whole.windows), [], whole.ByteSize())
        if not unit.all_fast:
            whole = forward_pb2.SummaryBatch.FromString(data)
            return _Unit(whole, unit_windows(unit), unit.groups(), whole.ByteSize())
        # Every window is plain and valid, so protobuf accepts the unit exactly when it accepts the rest.
        return _Unit(forward_pb2.SummaryBatch.FromString(unit.rest()), [], unit.groups(), len(data), unit)

    def _one(self, stream: _ChildStream, unit: _Unit) -> Parked | None:
        """One unit from a child (as `_receive` read it), on the pool: parsed before the node's lock is taken,
        offered under it."""
        check_length(unit.size)
        batch = unit.batch
        if stream.sender is None:
            sender = batch.sender_id
            if not sender or len(sender) > MAX_SENDER_ID:
                raise BadInput("INVALID_ARGUMENT", f"the first batch must name its sender_id (1 to {MAX_SENDER_ID} "
                                                   f"characters), got {shown(sender)}")
            if stream.names is not None and sender not in stream.names:
                # Under mTLS a child is who its certificate says: it cannot speak (and take acks) for another.
                raise BadInput("PERMISSION_DENIED", f"sender_id {shown(sender)} is not an identity of this "
                                                    f"client's certificate (CN/subjectAltName: "
                                                    f"{', '.join(shown(n, 64) for n in sorted(stream.names)[:4])})")
            with self._links_lock:
                # Another live stream already speaks for this child: a second host with the same id, or an
                # impostor. Taking its acks would strand the real child's data, so the newcomer is refused
                # (a real reconnect finds the old stream gone: the kernel closes it with its process).
                if sender in self._links:
                    raise BadInput("ALREADY_EXISTS", f"a live stream already uses sender_id {shown(sender)}")
                self._links[sender] = stream.answers
                if batch.skip_received:
                    self._quiet.add(sender)
            stream.sender = sender
            with self.node.lock:
                self.children.connected(sender)
        elif batch.sender_id and batch.sender_id != stream.sender:
            raise BadInput("INVALID_ARGUMENT", f"sender_id changed from {shown(stream.sender)} to "
                                               f"{shown(batch.sender_id)} on one stream")
        return self._handle(stream.sender, unit, stream.answers)

    def _handle(self, sender: str, unit: _Unit, responses: Answers) -> Parked | None:
        """Parse without the node's lock, then take the unit in under it; or, when it needs store reads first
        (`reads`), park it: its intake then runs on the reads' thread, and the stream waits. The unit's windows
        are read already (`_receive`), and `unit.batch` is the rest of its message (or the whole of it, where a
        window read did not take)."""
        node = self.node
        batch = unit.batch
        views = self._states(batch.ranks)
        native: _NativeRead | None = None
        parsed: list[_Parsed | str] = []
        keys: list[Key | None] = []
        if unit.read is not None and node.table.native is not None:
            native = _NativeRead.of(unit.read, unit.groups, self.max_world_size)  # taken as read (_intake)
        else:
            parsed, keys = self._parse_unit(unit)
        with node.lock:
            if self.reads is not None:
                named = ([found[0] for found in parsed if not isinstance(found, str)] if native is None
                         else node.table.missing(native.unit))  # those the table holds need no read
                ready = self.reads.hold(named, views,
                                        lambda: self._intake(sender, batch, responses, views, parsed, keys, native))
                if ready is not None:
                    return Parked(ready)
            self._intake(sender, batch, responses, views, parsed, keys, native)
        return None

    def _intake(self, sender: str, batch: forward_pb2.SummaryBatch, responses: Answers, views: dict[str, RankView],
                parsed: list[_Parsed | str], keys: list[Key | None], native: _NativeRead | None = None) -> None:
        """One parsed unit into the node, under its lock (asserted). `keys`: those of the windows read natively.
        `native`: a unit read for the node's native table (then `parsed` is empty), offered in one call when every
        window passes the checks made once per job and sources; else judged window by window, as `parsed`."""
        node = self.node
        origin = (sender, batch.seq)
        node.assert_locked()
        self.on_work()  # the flush it wakes waits for the lock: it runs after this unit is in
        node.child_states(sender, views)
        for revoked in self.coverage.note(sender, views, node.runs.known):
            # One count and one line per child and job that lost ranks, not per rank (rare: once per claim).
            node.counters["bad_inputs"] += 1
            log.warning("%s no longer speaks for %d rank(s) of job %s (e.g. rank %d): it covered them without "
                        "their process, and %s names the process the run ledger accepted", shown(revoked.child, 64),
                        len(revoked.ranks), shown(revoked.job, 64), revoked.ranks.min(), shown(sender, 64))
        node.child_counters[sender] = {name: getattr(batch.counters, name) for name in COUNTER_FIELDS}
        if batch.captures or batch.fingerprints or batch.exits:
            self._forensics(sender, batch)
        if batch.seq == 0:
            responses.put(forward_pb2.Ack(seq=0, status=forward_pb2.Ack.RECEIVED))
            return
        if native is not None and not self._fast(origin, native):
            parsed, keys = self._parse_read(unit_windows(native.unit), native.groups)  # judged window by window
            native = None
        now = time.monotonic()
        for job in native.jobs if native is not None else {found[0].job for found in parsed
                                                           if not isinstance(found, str)}:
            self.jobs.touch(job, now)
        if native is not None:
            rejections = self._offer_read(origin, native.unit)
        else:
            windows = batch.windows

            def key_of(index: int) -> summary_pb2.WindowKey:
                key = keys[index]
                return windows[index].key if key is None else key.to_proto()

            rejections = self._offer(origin, parsed, key_of)
        if rejections:
            responses.put(forward_pb2.Ack(seq=batch.seq, status=forward_pb2.Ack.REJECTED_OVERLAP,
                                          rejections=rejections))
        elif sender not in self._quiet:  # a child that asked for no plain RECEIVED is answered by its DURABLE alone
            responses.put(forward_pb2.Ack(seq=batch.seq, status=forward_pb2.Ack.RECEIVED))
        node.durability.settle(origin)

    def _forensics(self, sender: str, batch: forward_pb2.SummaryBatch) -> None:
        """A child's captures, rank exits and fingerprints: checked one by one (a bad one is counted and dropped,
        never the unit), then handed on. Caller holds the node's lock."""
        captures = self._checked(sender, batch.captures, "a capture", self._capture_ranks)
        if captures and self.on_captures is not None:
            self.on_captures(captures)
        exits = self._checked(sender, batch.exits, "a rank exit", self._exit_ranks)
        if exits and self.on_exits is not None:
            self.on_exits(exits)
        fingerprints = self._checked(sender, batch.fingerprints, "fingerprints", _fingerprint_ranks)
        if fingerprints and self.on_fingerprints is not None:
            try:
                self.on_fingerprints(fingerprints)
            except (ValueError, BadInput) as exc:
                self.node.counters["bad_inputs"] += 1
                log.warning("refused fingerprints from %s: %s", sender, exc)

    def _checked(self, sender: str, items: Iterable[_AboutRanks], what: str,
                 ranks_of_item: Callable[[_AboutRanks], BitMap]) -> list[_AboutRanks]:
        """The items that pass their own check (`ranks_of_item`: the ranks an item speaks about, or ValueError /
        BadInput) and that `sender` covers; each other one counted in bad_inputs and logged (rate-limited)."""
        kept = []
        for item in items:
            try:
                self._covers(sender, item.job, item.attempt, ranks_of_item(item), what)
                kept.append(item)
            except (ValueError, BadInput) as exc:
                self.node.counters["bad_inputs"] += 1
                self._cover_log.warn("refused %s from %s: %s", what, sender, exc)
        return kept

    def _capture_ranks(self, capture: forensics_pb2.Capture) -> BitMap:
        check_capture(capture, self.max_world_size)
        return BitMap([capture.rank])

    def _exit_ranks(self, record: forensics_pb2.RankExit) -> BitMap:
        check_exit(record, self.max_world_size)
        return BitMap([record.rank])

    def _covers(self, sender: str, job: str, attempt: int, ranks: BitMap, what: str) -> None:
        """BadInput unless `sender` covers every rank of `ranks` of the job's attempt."""
        uncovered = self.coverage.uncovered(sender, scoped(job, attempt), ranks)
        if uncovered:
            raise BadInput("PERMISSION_DENIED", f"{what} about rank(s) {list(islice(uncovered, 8))} of job "
                                                f"{shown(job, 64)} attempt {attempt}, which {shown(sender, 64)} does "
                                                "not cover (a child speaks only for the ranks its rank states name)")

    def _states(self, states: Iterable[forward_pb2.RankStates]) -> dict[str, RankView]:
        """A child's rank states, parsed and checked: a malformed bitmap, a rank or world beyond the cap, or a
        job named twice refuses the whole unit (the stream ends with INVALID_ARGUMENT, the child resends)."""
        views: dict[str, RankView] = {}
        for msg in states:
            check_job(msg.job)
            check_attempt(msg.attempt, f"rank states of job {shown(msg.job, 64)}: attempt")
            check_world(msg.world_size, self.max_world_size)
            try:
                view = RankView.from_proto(msg)
            except (ValueError, OverflowError) as exc:
                raise BadInput("INVALID_ARGUMENT",
                               f"rank states of job {msg.job!r}: malformed bitmap ({exc})") from None
            for bitmap in (view.alive, view.stuck, view.dead, view.closed):
                if bitmap:
                    check_world(extent(msg.job, bitmap), self.max_world_size,
                                f"rank {bitmap.max()} implies a world size")
            job = scoped(msg.job, msg.attempt)
            if job in views:
                raise BadInput("INVALID_ARGUMENT", f"rank states of job {job!r} sent twice in one unit")
            views[job] = view
        return views

    def _parse_unit(self, unit: _Unit) -> tuple[list[_Parsed | str], list[Key | None]]:
        """`_parse_read` of a unit as `_receive` hands it over: its windows judged one by one (a window table in
        Python, the root's; or a unit not every window of which read took), not taken as read (`_NativeRead`)."""
        windows = unit.windows if unit.read is None else unit_windows(unit.read)
        return self._parse_read(windows, unit.groups, unit.batch.windows)

    def _parse_read(self, read: Sequence[UnitWindow | None], groups: list[bytes],
                    windows: Sequence[forward_pb2.WindowSummary] = ()) -> tuple[list[_Parsed | str], list[Key | None]]:
        """Each window of a unit read natively (`read_unit`: one sources bitmap per group, so a unit's windows
        of equal sources share it): its key, summary and sources, or why it is refused (checked without the node's
        lock); and its key. A window read did not take (None) is judged by `_parse`, the per-window path, from
        `windows`, so a bad one is refused in the same words as it always was."""
        bitmaps = [BitMap.deserialize(group) for group in groups]
        names: dict[tuple[str, int], str] = {}
        extents: dict[tuple[str, int], str | None] = {}  # (job, group): why its sources are refused, if they are
        out: list[_Parsed | str] = []
        keys: list[Key | None] = []
        for position, found in enumerate(read):
            if found is None:
                out.append(self._parse(windows[position]))
                keys.append(None)
                continue
            job, attempt, metric, index, width_ms, expected, summary, group, late = found
            name = names.get((job, attempt))
            if name is None:
                name = names[job, attempt] = scoped(job, attempt)
            key = Key(name, metric, index, width_ms)
            keys.append(key)
            sources = bitmaps[group]
            if (job, group) not in extents:
                extents[job, group] = _extent_refused(job, sources, self.max_world_size)
            refused = extents[job, group]
            out.append((key, summary, sources, expected, late) if refused is None else refused)
        return out, keys

    def _fast(self, origin: Origin, read: _NativeRead) -> bool:
        """Whether every window of a native unit passes `_check` (under the node's lock), judged once per job and
        sources and per job's metric names: no source beyond the world cap, none of a refused run, every source
        covered by the child, every metric admitted by the budget already. Else the unit is judged window by window,
        so that each refusal is made, counted and worded as it always was."""
        node, sender = self.node, origin[0]
        for job, sources, extent_refused in read.combos:
            if extent_refused is not None:
                return False
            refused = node.runs.refused(sender, job)
            if refused and sources.intersect(BitMap(refused)):
                return False
            if self.coverage.uncovered(sender, job, sources):
                return False
        unit = read.unit
        for job, (name, attempt) in read.jobs.items():
            names = unit.metric_names(name, attempt)
            if self._admitted_names.get(job) == names:
                continue
            if not self.budget.admitted(job, unit.metrics(name, attempt)):
                return False
            self._admitted_names[job] = names
        return True

    def _offer_read(self, origin: Origin, unit: _native.Unit) -> list[forward_pb2.Rejection]:
        """A unit that passed `_fast`, offered in one call (Node.offer_read); the rejections of its overlaps."""
        rejections = []
        for pos, verdict, overlap, sources in self.node.offer_read(origin, unit):
            if verdict == "overlap":
                job, attempt, metric, index, width_ms, _ = unit.key(pos)
                rejections.append(forward_pb2.Rejection(
                    index=pos, key=Key(scoped(job, attempt), metric, index, width_ms).to_proto(),
                    overlapping_sources=list(overlap), reason=f"{len(overlap)} of {sources} sources already held"))
        return rejections

    def _parse(self, window: forward_pb2.WindowSummary) -> _Parsed | str:
        """One window's key, summary and sources, or why it is refused (checked without the node's lock)."""
        try:
            check_job(window.key.job)
            check_attempt(window.key.attempt)
            key = Key.from_proto(window.key)
            check_index(key.index, "window index")
            check_world(window.expected, self.max_world_size, "expected world size")
            summary = Summary.from_proto(window.summary)
            refused = _extent_refused(window.key.job, summary._sources, self.max_world_size)
            if refused is not None:
                return refused
            if (summary.k, summary.max_centroids) != TREE_SHAPE:
                raise ValueError(f"summary has k={summary.k}, max_centroids={summary.max_centroids}; every tier "
                                 f"merges only k={TREE_SHAPE[0]}, max_centroids={TREE_SHAPE[1]}")
        except (ValueError, OverflowError, BadInput) as exc:
            return str(exc)
        return key, summary, summary._sources, window.expected, window.late

    def forget_job(self, job: str) -> None:
        """A finished job (JobLifecycle): what this service keeps for it goes."""
        self.budget.forget(job)
        self._admitted_names.pop(job, None)
        if self.reads is not None:
            self.reads.forget_job(job)

    def _offer(self, origin: Origin, parsed: list[_Parsed | str],
               key_of: Callable[[int], summary_pb2.WindowKey]) -> list[forward_pb2.Rejection]:
        """Offer the unit's windows that pass their checks (Node.offer_unit); the rejections, in window order.
        `key_of(index)` names a rejected window (only then: each read of a protobuf sub-message builds an object)."""
        checks = _UnitChecks([origin])
        rejections: list[forward_pb2.Rejection] = []
        offers: list[tuple[Part, int]] = []
        for index, found in enumerate(parsed):
            checked = self._check(origin, index, key_of, found, checks)
            if isinstance(checked, forward_pb2.Rejection):
                rejections.append(checked)
            else:
                offers.append(checked)
        overlaps = [forward_pb2.Rejection(index=part.index, key=key_of(part.index),
                                          overlapping_sources=list(overlap or ()),
                                          reason=f"{len(overlap or ())} of {len(part.sources)} sources already held")
                    for (part, _), (verdict, overlap) in zip(offers, self.node.offer_unit(origin, offers))
                    if verdict == "overlap"]
        if overlaps:
            rejections = sorted(rejections + overlaps, key=lambda rejection: rejection.index)
        return rejections

    def _check(self, origin: Origin, index: int, key_of: Callable[[int], summary_pb2.WindowKey],
               parsed: _Parsed | str, checks: _UnitChecks) -> tuple[Part, int] | forward_pb2.Rejection:
        """The part to offer for one window (with its expected world size), or its rejection (bad input, a refused
        run, sources not covered, the metric budget), counted and logged. Under the node's lock."""
        node = self.node
        if isinstance(parsed, str):
            node.counters["bad_inputs"] += 1
            log.warning("refused window %d of %s: %s", index, origin, parsed)
            return forward_pb2.Rejection(index=index, key=key_of(index), reason=parsed)
        key, summary, sources, expected, late = parsed
        refused = checks.refused.get(key.job)
        if refused is None:
            refused = checks.refused[key.job] = node.runs.refused(origin[0], key.job)
        if refused:
            taken = sources & BitMap(refused)
            if taken:
                node.counters["bad_inputs"] += 1
                job, attempt = split(key.job)
                reason = refusal_reason(job, attempt, taken.min(), refused[taken.min()][0])
                self._run_log.warn("refused window %d of %s: %s", index, origin, reason)
                if key.job != FLEET_JOB:
                    return forward_pb2.Rejection(index=index, key=key_of(index), reason=reason)
                # the child is to refuse these itself, from the host that named them (RunLedger.refused_above)
                node.runs.fleet_refused_windows += 1
                return forward_pb2.Rejection(index=index, key=key_of(index), reason=reason,
                                             refused_sources=list(taken))
        try:
            covered = (key.job, id(sources))  # a unit's windows share their sources' bitmap where equal (_parse_read)
            if covered not in checks.covered:
                name, attempt = split(key.job)
                try:
                    self._covers(origin[0], name, attempt, sources, "a window")  # before it costs the budget
                    checks.covered[covered] = None
                except BadInput as exc:
                    checks.covered[covered] = exc
            uncovered = checks.covered[covered]
            if uncovered is not None:
                raise uncovered
            self.budget.admit(key.job, key.metric)
        except BadInput as exc:
            node.counters["bad_inputs"] += 1
            self._cover_log.warn("refused window %d of %s: %s", index, origin, exc)
            return forward_pb2.Rejection(index=index, key=key_of(index), reason=str(exc))
        return Part(key, checks.origins, sources, index=index, built=summary, late=late), expected


# A window's key, its summary, the summary's sources, its expected world, and whether it is a late delta (the child
# sent up, or refused, the window's first parts: Window.only_late).
_Parsed = tuple[Key, Summary, BitMap, int, bool]


@dataclass
class _UnitChecks:
    """What `_offer` finds once per unit rather than once per window (under the node's lock, for one unit): the
    sources refused per job, whether the child covers a job's sources (None, or the refusal), and the one origins
    list the unit's parts share (read only: Part.origins)."""

    origins: list[Origin]
    refused: dict[str, dict[int, tuple[Claim, Claim]]] = field(default_factory=dict)
    covered: dict[tuple[str, int], BadInput | None] = field(default_factory=dict)


def _extent_refused(job: str, sources: BitMap, max_world_size: int) -> str | None:
    """Why a window's sources are refused (a source id beyond the world-size cap), or None."""
    if sources:
        try:
            check_world(extent(job, sources), max_world_size, "a source id")
        except BadInput as exc:
            return str(exc)
    return None


class UnitReads(Protocol):
    """What the intake asks of the root's store reads (collectors/root/reads.py `StoreReads`), under the lock."""

    def hold(self, keys: Iterable[Key], jobs: Iterable[str],
             resume: Callable[[], None]) -> concurrent.futures.Future[None] | None:
        """None when a unit naming these windows and jobs needs nothing read (the caller takes it in now); else
        it is held until what it needs is read, `resume` (its intake) then runs under the node's lock, and the
        future completes after."""

    def needs(self, keys: Iterable[Key], jobs: Iterable[str]) -> object:
        """Truthy when a unit naming these windows and jobs must wait for the store (`hold` would park it)."""

    def forget_job(self, job: str) -> None: ...


@dataclass
class _Unit:
    """A unit as `CollectorService._receive` hands it over: its windows as read natively, the rest of its message
    parsed by protobuf (`batch`, without windows where every window read took; else the whole message, whose windows
    `_parse` judges where read gave None), and its size on the wire (where parsed whole, as protobuf encodes it),
    which `check_length` bounds. Where every window read took, `read` holds them natively (a collector's table takes
    them as they are: `_NativeRead`) and `windows` is empty."""

    batch: forward_pb2.SummaryBatch
    windows: list[UnitWindow | None]
    groups: list[bytes]
    size: int
    read: _native.Unit | None = None


@dataclass
class _NativeRead:
    """A unit for a native table, with what `_fast` judges once per unit (made without the node's lock): per job
    and sources group, the job's scoped name, the sources and why they are refused by the world cap (or None); and
    each job's (name, attempt) by its scoped name."""

    unit: _native.Unit
    groups: list[bytes]
    combos: list[tuple[str, BitMap, str | None]]
    jobs: dict[str, tuple[str, int]]

    @classmethod
    def of(cls, unit: _native.Unit, groups: list[bytes], max_world_size: int) -> _NativeRead:
        bitmaps = [BitMap.deserialize(group) for group in groups]
        combos, jobs = [], {}
        for name, attempt, group in unit.combos():
            job = scoped(name, attempt)
            combos.append((job, bitmaps[group], _extent_refused(name, bitmaps[group], max_world_size)))
            jobs[job] = (name, attempt)
        return cls(unit, groups, combos, jobs)


class _Registrations:
    """Stands for a server while the generated code registers the Collector service's handlers on it."""

    service = ""
    handlers: dict[str, grpc.RpcMethodHandler] = {}

    def add_generic_rpc_handlers(self, handlers: object) -> None:
        """Registered by `add_to_server` itself, with the handlers taken from `add_registered_method_handlers`."""

    def add_registered_method_handlers(self, service: str, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self.service, self.handlers = service, handlers


@dataclass
class _ChildStream:
    answers: Answers
    names: frozenset[str] | None  # what the child's certificate vouches for (mTLS), else None
    sender: str | None = None


_AboutRanks = TypeVar("_AboutRanks", forensics_pb2.Capture, forensics_pb2.RankExit, forensics_pb2.JobFingerprints)


def _fingerprint_ranks(found: forensics_pb2.JobFingerprints) -> BitMap:
    """The ranks a child's merged fingerprints name (their bitmaps checked), its attempt checked."""
    check_attempt(found.attempt, "fingerprints' attempt")
    ranks = BitMap()
    for merged in found.seqs:
        ranks |= ranks_of(merged.min_ranks, "min_ranks") | ranks_of(merged.max_ranks, "max_ranks")
    return ranks
