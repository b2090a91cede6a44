"""`telemetry doctor`'s checks of one node: what must hold for a rank's values to reach the root.

Each check is a small function returning `Finding`s; none raises and none waits longer than its timeout. The
order is the path a value takes: the SDK's agent address, the agent's socket (exists, this user may connect),
the agent answering, its parent answering, then what the agent samples (NVML) and the clock the steps' times
come from. A `fail` is why nothing arrives; a `warn` is something that works less well than it could.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import email.utils
import grp
import logging
import os
import pwd
import stat
import time
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from collectors.common.transport import Security, make_channel
from telemetry.sdk.address import check_address, socket_path
from telemetry.sdk.env import AGENT_ENV, default_agent

OK, WARN, FAIL, SKIP = "ok", "warn", "fail", "skip"
#: adjtimex(2)'s answer when the kernel's clock is not kept in sync (no NTP, chrony or PTP discipline).
TIME_ERROR = 5
MAX_SKEW_S = 2.0


@dataclass
class Finding:
    check: str
    status: str  # OK, WARN, FAIL or SKIP
    detail: str

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


def agent_address(given: str | None) -> tuple[str | None, list[Finding]]:
    """The address the SDK would use here (--agent, else TELEMETRY_AGENT, else the default socket)."""
    try:
        if given:
            return check_address(given, "--agent"), [Finding("agent address", OK, f"{given} (from --agent)")]
        address = default_agent()
    except ValueError as exc:
        return None, [Finding("agent address", FAIL, str(exc))]
    source = f"from {AGENT_ENV}" if os.environ.get(AGENT_ENV) else f"the default: {AGENT_ENV} is not set"
    return address, [Finding("agent address", OK, f"{address} ({source})")]


def check_socket(address: str) -> list[Finding]:
    """The agent's Unix socket: there, a socket, and open to this user (the agent makes it 0660, group 'telemetry'
    under the shipped unit)."""
    path = socket_path(address)
    if path is None:
        return []
    if not path.exists():
        return [Finding("agent socket", FAIL, f"no socket at {path}: the agent is not running here or listens "
                        f"elsewhere (systemctl status telemetry-agent; set {AGENT_ENV}=unix:PATH)")]
    info = path.stat()
    if not stat.S_ISSOCK(info.st_mode):
        return [Finding("agent socket", FAIL, f"{path} is not a socket")]
    owner = f"{_user(info.st_uid)}:{_group(info.st_gid)} mode {stat.S_IMODE(info.st_mode):04o}"
    if not os.access(path, os.R_OK | os.W_OK):
        return [Finding("agent socket", FAIL, f"{path} ({owner}): this user ({_user(os.getuid())}) may not connect; "
                        f"add it to group {_group(info.st_gid)!r} (usermod -aG), then log in again")]
    found = [Finding("agent socket", OK, f"{path} ({owner}); this user may connect")]
    if info.st_mode & stat.S_IWOTH:
        found.append(Finding("agent socket", WARN, f"{path} is writable by every user: any process on the host "
                             f"can send as a rank (the agent still checks uids: --allowed-uids)"))
    return found


def check_health(what: str, address: str, timeout_s: float, security: Security | None = None) -> Finding:
    """gRPC health of the service at `address` (every tier serves grpc.health.v1, token or not)."""
    channel = make_channel(address, security)
    try:
        stub: Any = health_pb2_grpc.HealthStub(channel)  # the stubs package declares no methods on it
        answer = stub.Check(health_pb2.HealthCheckRequest(), timeout=timeout_s)
    except grpc.RpcError as exc:
        code = exc.code().name if hasattr(exc, "code") else "error"
        return Finding(what, FAIL, f"{address} does not answer within {timeout_s:g} s ({code}); "
                       f"is it running and reachable from here?")
    finally:
        channel.close()
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)
    if answer.status != health_pb2.HealthCheckResponse.SERVING:
        return Finding(what, WARN, f"{address} answers {status} (starting, or stopping)")
    return Finding(what, OK, f"{address} answers ({status})")


def check_parents(parents: list[str], timeout_s: float, security: Security | None) -> list[Finding]:
    if not parents:
        return [Finding("parent", SKIP, "no --parent given and no agent config read (--config)")]
    found = [check_health("parent", address, timeout_s, security) for address in parents]
    if all(f.status == FAIL for f in found):
        found.append(Finding("parent", FAIL, "no parent answers: the agent keeps what it gets, but nothing "
                             "becomes durable (close() returns False) until one does"))
    return found


def check_nvml(open_probe: Callable[[logging.Logger], Any] | None = None) -> Finding:
    """What the agent's GPU probe would see: NVML, the driver and the GPUs, one sample read."""
    from collectors.probes.gpu import open_gpu_probe
    said: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            said.append(record.getMessage())

    quiet = logging.getLogger("telemetry.doctor.nvml")
    quiet.propagate = False
    quiet.handlers = [_Keep()]
    probe = (open_probe or (lambda log: open_gpu_probe(log, events=False)))(quiet)
    if probe is None:
        return Finding("NVML", WARN, (said[0] if said else "NVML unavailable") + " (fine on a host without GPUs)")
    try:
        readings = probe.sample()
        names = sorted({gpu.name for gpu in probe.gpus})
        return Finding("NVML", OK, f"{len(probe.gpus)} GPU(s) ({', '.join(names)}); one sample: {len(readings)} "
                       f"readings")
    finally:
        probe.close()


def check_clock(root_api: str | None, timeout_s: float) -> list[Finding]:
    """The kernel's view of its clock (adjtimex: synchronised or not) and, given the root's API, the skew to it:
    steps' end times and arrival lags are compared across hosts."""
    found = []
    state = _clock_state()
    if state is None:
        found.append(Finding("clock", SKIP, "adjtimex is not available here"))
    elif state == TIME_ERROR:
        found.append(Finding("clock", WARN, "the kernel says this clock is not synchronised (no NTP, chrony or "
                             "PTP?): times from this host may disagree with the others'"))
    else:
        found.append(Finding("clock", OK, "synchronised (adjtimex)"))
    if root_api:
        url = root_api.rstrip("/") if root_api.startswith("http") else f"http://{root_api}"
        try:
            sent = time.time()
            with urllib.request.urlopen(f"{url}/healthz", timeout=timeout_s) as answer:
                date = answer.headers.get("Date")
            now = (sent + time.time()) / 2
            theirs = email.utils.parsedate_to_datetime(date).timestamp() if date else None
        except (OSError, ValueError) as exc:
            found.append(Finding("clock", WARN, f"cannot read the root's time from {url}/healthz: {exc}"))
        else:
            if theirs is None:
                found.append(Finding("clock", SKIP, f"{url} sends no Date header"))
            else:
                skew = now - theirs  # the Date header has 1 s resolution: a skew under ~1 s is noise
                status = WARN if abs(skew) > MAX_SKEW_S else OK
                found.append(Finding("clock", status, f"{skew:+.1f} s from the root's clock (±1 s resolution)"))
    return found


def check_py_spy() -> Finding:
    """The agent's fallback for a rank that does not answer a capture (docs/forensics.md)."""
    from collectors.probes.snapshot import pyspy_path
    where = pyspy_path()
    if where is None:
        return Finding("py-spy", WARN, "not installed: a wedged rank's stacks fall back to /proc (no Python frames)")
    return Finding("py-spy", OK, where)


def _clock_state() -> int | None:
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    try:
        adjtimex = ctypes.CDLL(libc_name, use_errno=True).adjtimex
    except (OSError, AttributeError):
        return None
    timex = ctypes.create_string_buffer(512)  # struct timex (208 bytes on x86-64), zeroed: modes 0 reads only
    state = int(adjtimex(timex))
    return None if state < 0 else state


def _user(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def run_checks(agent: str | None, parents: list[str], parent_security: Security | None, root_api: str | None,
               timeout_s: float, nvml: bool = True) -> list[Finding]:
    address, found = agent_address(agent)
    if address is not None:
        found += check_socket(address)
        if not any(f.status == FAIL for f in found):
            found.append(check_health("agent", address, timeout_s))
    found += check_parents(parents, timeout_s, parent_security)
    found.append(check_nvml() if nvml else Finding("NVML", SKIP, "--no-nvml"))
    found += check_clock(root_api, timeout_s)
    found.append(check_py_spy())
    return found


def config_parents(path: Path) -> tuple[list[str], Security | None]:
    """The parents (and TLS towards them) an agent's --config file names."""
    import tomllib
    data = {key.replace("-", "_"): value for key, value in tomllib.loads(path.read_text()).items()}
    parents = [*_strings(data.get("parents")), *_strings(data.get("fallbacks"))]
    files = {key: Path(data[key]) for key in ("parent_ca", "parent_cert", "parent_key") if data.get(key)}
    if not files:
        return parents, None
    return parents, Security(cert=files.get("parent_cert"), key=files.get("parent_key"), ca=files.get("parent_ca"),
                             server_name=data.get("parent_server_name"))


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    return [str(v) for v in value] if isinstance(value, list) else []
