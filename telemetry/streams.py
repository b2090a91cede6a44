"""A queue as one side of a gRPC stream, and the status code of a broken one: what every stream is built on."""

from __future__ import annotations

import queue
from collections.abc import Iterator
from typing import Any

import grpc

END = object()
"""Put this on a stream's queue to end the stream."""


def until_end(items: queue.Queue[Any] | queue.SimpleQueue[Any]) -> Iterator[Any]:
    """Yield what is put on `items` until END is: a request iterator for a client stream."""
    while True:
        item = items.get()
        if item is END:
            return
        yield item


def rpc_code(exc: BaseException) -> grpc.StatusCode | None:
    """The status code of a gRPC error, where it carries one."""
    try:
        code: grpc.StatusCode | None = exc.code()  # type: ignore[attr-defined]  # RpcError's subclasses have it
        return code
    except Exception:
        return None
