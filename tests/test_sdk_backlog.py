"""The SDK's backlog is bounded in bytes (issue 27): what a rank keeps while its agent is away is measured in the
batches' wire size, not in values, so a few long-named single values weigh what they cost; the drop counter stays
exact (logged = kept + counted dropped) and reaches the agent in the heartbeat."""

from __future__ import annotations

import pytest

from telemetry.sdk import run as run_module
from telemetry.sdk.run import Run
from telemetry.sdk.sender import DEFAULT_BACKLOG_BYTES, Identity, Sender
from telemetry.v1 import ingest_pb2


def _steps(first: int, count: int, metrics: int, values: int, name_len: int) -> list[ingest_pb2.RankStepBatch]:
    out = []
    for step in range(first, first + count):
        batch = ingest_pb2.RankStepBatch(step=step, closed=True)
        for m in range(metrics):
            name = f"m{m:03d}".ljust(name_len, "x")
            batch.metrics.add(metric=name, values=[float(v) for v in range(values)])
        out.append(batch)
    return out


def _sender(bound: int, pending: list[list[ingest_pb2.RankStepBatch]]) -> Sender:
    """A sender with no agent and no thread: each _batch_once takes the next drain from `pending`."""
    def drain() -> list[ingest_pb2.RankStepBatch]:
        return pending.pop(0) if pending else []
    return Sender(Identity("bl", 0, 1, 0), "unix:/nonexistent.sock", drain, ingest_pb2.Heartbeat,
                  max_backlog_bytes=bound)


def _kept_bytes(sender: Sender) -> int:
    return sum(len(kept.message) for kept in sender._kept._units.values())


@pytest.mark.parametrize("shape", [
    pytest.param((20, 1, 64), id="many-long-names-one-value"),
    pytest.param((1, 2000, 4), id="one-metric-many-values"),
    pytest.param((5, 40, 16), id="mixed"),
])
def test_the_backlog_keeps_at_most_its_bytes_and_counts_every_value_it_drops(shape):
    metrics, values, name_len = shape
    bound = 64 << 10
    per_batch = 4
    drains = [_steps(1 + i * per_batch, per_batch, metrics, values, name_len) for i in range(300)]
    logged = sum(len(m.values) for d in drains for s in d for m in s.metrics)
    one_batch = max(ingest_pb2.RankMessage(batch=ingest_pb2.RankBatch(job="bl", rank=0, seq=10**6, steps=d))
                    .ByteSize() for d in drains)
    sender = _sender(bound, drains)
    while drains:
        sender._batch_once()
        kept = _kept_bytes(sender)
        assert kept <= bound or len(sender._kept) == 1, f"{kept} bytes kept past a bound of {bound}"
        assert sender._kept.weight == kept, "the bound's running weight is the kept batches' wire bytes"
    assert _kept_bytes(sender) > bound - one_batch, "the bound is used, not left mostly empty"
    kept_values = sum(len(m.values) for kept in sender._kept._units.values()
                      for s in ingest_pb2.RankMessage.FromString(kept.message).batch.steps for m in s.metrics)
    assert kept_values + sender.dropped_values == logged, "every value logged is kept or counted dropped"
    assert sender._beat().dropped == sender.dropped_values, "the heartbeat reports the drops"


def test_the_bound_is_configurable_from_init_and_the_environment(monkeypatch, tmp_path):
    monkeypatch.setattr(Sender, "start", lambda self: None)
    made = []

    def make(**options) -> Run:
        run = Run(f"bytes{len(made)}", 0, 1, agent=f"unix:{tmp_path / 'nobody.sock'}", collectives=False,
                  captures=False, last_words=False, **options)
        run._closed = True  # its thread never ran: nothing to stop
        made.append(run)
        return run

    assert make()._sender.max_backlog_bytes == DEFAULT_BACKLOG_BYTES
    assert make(max_backlog_bytes=12345)._sender.max_backlog_bytes == 12345
    monkeypatch.setenv(run_module.BACKLOG_BYTES_ENV, "4096")
    assert make()._sender.max_backlog_bytes == 4096
    with pytest.raises(ValueError, match="TELEMETRY_MAX_BACKLOG_BYTES"):
        monkeypatch.setenv(run_module.BACKLOG_BYTES_ENV, "0")
        make()
    with pytest.raises(ValueError, match="max_backlog_bytes"):
        make(max_backlog_bytes=-1)
