"""The Prometheus remote-write 1.0 message, `prometheus.WriteRequest`, built from protobuf descriptors.

The wire format is Prometheus's `prompb/remote.proto` and `prompb/types.proto` (the remote-write 1.0
specification, https://prometheus.io/docs/specs/prw/remote_write_spec/), of which a sender needs four messages:

    message WriteRequest { repeated TimeSeries timeseries = 1; reserved 2; repeated MetricMetadata metadata = 3; }
    message TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; ... }
    message Label        { string name = 1; string value = 2; }
    message Sample       { double value = 1; int64 timestamp = 2; }   // timestamp: ms since the epoch

Declared here with the same package, names and field numbers (metadata, exemplars and histograms are left
out: a receiver skips fields it is not sent), so the classes come from protobuf itself rather than from
generated code (the upstream files import gogoproto, which protoc would need too). `encode` builds the
request and `decode` reads one back (the tests' receivers use it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

Labels = tuple[tuple[str, str], ...]  # sorted by name, "__name__" included


def _file() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(name="telemetry_prompb/remote.proto", package="prometheus",
                                               syntax="proto3")
    f = descriptor_pb2.FieldDescriptorProto
    repeated, optional = f.LABEL_REPEATED, f.LABEL_OPTIONAL

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        msg = proto.message_type.add(name=name)
        for field_name, number, label, kind, type_name in fields:
            msg.field.add(name=field_name, number=number, label=label, type=kind,
                          **({"type_name": type_name} if type_name else {}))

    message("Sample", ("value", 1, optional, f.TYPE_DOUBLE, ""), ("timestamp", 2, optional, f.TYPE_INT64, ""))
    message("Label", ("name", 1, optional, f.TYPE_STRING, ""), ("value", 2, optional, f.TYPE_STRING, ""))
    message("TimeSeries", ("labels", 1, repeated, f.TYPE_MESSAGE, ".prometheus.Label"),
            ("samples", 2, repeated, f.TYPE_MESSAGE, ".prometheus.Sample"))
    message("WriteRequest", ("timeseries", 1, repeated, f.TYPE_MESSAGE, ".prometheus.TimeSeries"))
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file())
WriteRequest: Any = message_factory.GetMessageClass(_POOL.FindMessageTypeByName("prometheus.WriteRequest"))


def encode(series: Iterable[tuple[Labels, Sequence[tuple[int, float]]]]) -> bytes:
    """A serialised WriteRequest: one TimeSeries per (labels, [(timestamp ms, value), ...]), samples in the
    order given (the caller keeps them oldest first, as receivers require per series)."""
    request = WriteRequest()
    for labels, samples in series:
        ts = request.timeseries.add()
        for name, value in labels:
            ts.labels.add(name=name, value=value)
        for timestamp, figure in samples:
            ts.samples.add(value=figure, timestamp=timestamp)
    return bytes(request.SerializeToString())


def decode(body: bytes) -> list[tuple[Labels, list[tuple[int, float]]]]:
    """The series of a serialised WriteRequest, as `encode` takes them."""
    request = WriteRequest.FromString(body)
    return [(tuple((label.name, label.value) for label in ts.labels),
             [(sample.timestamp, sample.value) for sample in ts.samples]) for ts in request.timeseries]
