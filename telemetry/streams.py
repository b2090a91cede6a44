"""A queue as one side of a gRPC stream: what every stream in the tree is built on."""

from __future__ import annotations

import queue
from collections.abc import Iterator

END = object()
"""Put this on a stream's queue to end the stream."""


def until_end(items: queue.Queue) -> Iterator:
    """Yield what is put on `items` until END is: a request iterator for a client stream."""
    while True:
        item = items.get()
        if item is END:
            return
        yield item
