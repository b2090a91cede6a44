"""The server side of the tree's bidirectional streams: a reader thread in, a queue of answers out."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator

import grpc

from collectors.common.validation import BadInput
from telemetry.streams import END


def answer(requests: Iterator, context: grpc.ServicerContext,
           consume: Callable[[Iterator, queue.SimpleQueue], None]) -> tuple[Iterator, queue.SimpleQueue]:
    """Run `consume(requests, answers)` on its own thread; return the response iterator and the answers queue.

    `consume` puts answers (and, for a refusal, a BadInput, which ends the stream with its status)
    and must put END last.
    """
    # SimpleQueue: put and get in C. A collector answers every child unit twice (received, durable), and
    # queue.Queue's Python-level locking and notify were a visible share of a rack's CPU.
    answers: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=consume, args=(requests, answers), daemon=True).start()

    def responses() -> Iterator:
        while True:
            item = answers.get()
            if item is END:
                return
            if isinstance(item, BadInput):
                context.abort(getattr(grpc.StatusCode, item.code), str(item))
            yield item

    return responses(), answers
