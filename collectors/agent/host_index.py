"""The agent's side of the fleet's host indexes (issue 28, docs/fleet.md "Host indexes").

`telemetry agent --host-index auto` asks the tree for its host's index (collectors/common/host_index.py) on a
thread of its own, again and again until the root answers: until then the host's readings wait unsent (counted
in `SamplerStats.awaiting_index`). With an explicit ``--host-index N`` the agent uses N at once and registers it
in the background, so that the root never hands N to another host (a refusal, N held by another host, is logged
as an error: the tree refuses the host's windows anyway, docs/fleet.md "Bad input").
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import grpc

from collectors.common.host_index import NoParentAnswered, ask
from collectors.common.transport import Security
from telemetry.backoff import Backoff
from telemetry.v1 import forward_pb2

log = logging.getLogger(__name__)

REFUSED_RETRY_S = 60.0  # a refused or unanswerable registration is asked again this often (the tree may be fixed)


class HostIndexRegistration:
    """Registers the host with the tree until the root answers; `on_index(index)` is called once with the
    index the root gave (or confirmed)."""

    def __init__(self, parents: list[str], security: Security | None, host: str, machine_id: str,
                 explicit: int | None, on_index: Callable[[int], None], backoff: Backoff | None = None,
                 retry_s: float = REFUSED_RETRY_S, instance: str = "") -> None:
        self.parents = parents
        self.security = security
        self.request = forward_pb2.HostRegistration(host=host, machine_id=machine_id, instance=instance)
        if explicit is not None:
            self.request.explicit_index = explicit
        self.on_index = on_index
        self.backoff = backoff or Backoff(initial_s=0.2, maximum_s=10.0)
        self.index: int | None = None
        self.refused = ""  # the root's last refusal
        self.unable = ""  # why the parent last could not register at all (UNIMPLEMENTED: an older tree), "" if it can
        self.retry_s = retry_s
        self.attempts = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="agent-host-index", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        host = self.request.host
        while not self._stop.is_set():
            self.attempts += 1
            try:
                answer = ask(self.parents, self.security, self.request)
            except NoParentAnswered as exc:
                if self.attempts == 1 or self.attempts % 10 == 0:
                    log.warning("host %s: no parent answered its host index registration yet (%s); asking again",
                                host, exc)
                self._stop.wait(self.backoff.next_delay())
                continue
            except grpc.RpcError as exc:
                # An older tree (UNIMPLEMENTED) or one that refuses this agent's credentials: said once, then asked
                # again every retry_s, so that an upgraded (or reconfigured) tree is used without an agent restart.
                said = f"{exc.code().name}: {exc.details()}"
                if said != self.unable:
                    log.error("host %s: the parent cannot register host indexes (%s); %s; asking again every %.0f s",
                              host, said, "the host's fleet readings stay unsent until it can: upgrade the tree (its "
                              "collectors and root) to one that registers host indexes, or run the agent with "
                              "--host-index off (its hardware in its host's own windows)" if not
                              self.request.HasField("explicit_index") else "its --host-index is used unregistered",
                              self.retry_s)
                self.unable = said
                self._stop.wait(self.retry_s)
                continue
            if answer.refused:
                if answer.refused != self.refused:
                    log.error("host %s: the tree refuses its host index registration: %s", host, answer.refused)
                self.refused = answer.refused
                self._stop.wait(self.retry_s)
                continue
            self.index, self.refused = answer.index, ""
            log.info("host %s is fleet host index %d (%s%s)", host, answer.index,
                     "as before" if answer.known else "new, from the root",
                     "; the tree registers host indexes now" if self.unable else "")
            self.unable = ""
            self.on_index(answer.index)
            return
