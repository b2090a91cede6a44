"""The `telemetry` command: one entry point for every service and tool."""

from __future__ import annotations

import faulthandler
import json
import logging
import os
import signal
import sys
import threading
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from collectors.common.signals import SERVICES, StopSignals, early

EARLY_SIGNALS = early(sys.argv)  # before click, grpc and numpy are imported: a SIGTERM from here on is clean

import click  # noqa: E402  (after EARLY_SIGNALS, which must come first)

from collectors.common.fleet import DEFAULT_FLEET_GRACE_S, DEFAULT_ID_FILE  # noqa: E402  (after EARLY_SIGNALS, which must come first)
from collectors.common.lifetime import die_with_parent  # noqa: E402  (after EARLY_SIGNALS, which must come first)
from collectors.remote_write_cli import remote_write_config, remote_write_options  # noqa: E402  (after EARLY_SIGNALS too)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="treemetry", prog_name="telemetry",
                      message="%(prog)s %(version)s (the package: pip install %(package)s)")
@click.pass_context
def main(ctx: click.Context) -> None:
    """Hierarchical, mergeable telemetry for large distributed PyTorch training runs.

    Ranks log through the SDK to a node agent; agents forward per-step
    summaries up a tree of collectors; the root finalises each step and
    serves a JSON API (and Prometheus metrics).
    """
    if ctx.invoked_subcommand in SERVICES:
        # Made at import for `telemetry agent|collector`; here for callers that invoke the group in-process.
        ctx.obj = EARLY_SIGNALS or StopSignals()
    die_with_parent()


def _load_config(ctx: click.Context, _param: click.Parameter, path: str | None) -> str | None:
    """--config FILE.toml: keys are option names (dashes or underscores); the command line wins."""
    if path is None:
        return None
    try:
        data = tomllib.loads(Path(path).read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise click.BadParameter(f"cannot read {path}: {exc}") from None
    defaults = {key.replace("-", "_"): value for key, value in data.items()}
    known = {p.name for p in ctx.command.params}
    unknown = sorted(set(defaults) - known)
    if unknown:
        raise click.BadParameter(f"{path}: unknown keys {', '.join(unknown)}")
    ctx.default_map = {**(ctx.default_map or {}), **defaults}
    return path


config_option = click.option("--config", type=click.Path(dir_okay=False), callback=_load_config, is_eager=True,
                             expose_value=False, help="TOML file of option defaults (e.g. /etc/telemetry/agent.toml).")


class _HostIndex(click.ParamType):
    """--host-index: 'auto' (the tree hands one out), 'off' (the per-host layout) or an index 0..2^24-1."""

    name = "auto|off|N"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int | str:
        if isinstance(value, int) or value in ("auto", "off"):
            return value
        try:
            index = int(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither 'auto', 'off' nor a host index", param, ctx)
        if not 0 <= index < 1 << 24:
            self.fail(f"{index} is outside 0..{(1 << 24) - 1}", param, ctx)
        return index


class _FleetGrace(click.ParamType):
    """--fleet-grace: seconds >= 0, or 'all' (None: wait for every host, until the window's deadline)."""

    name = "SECONDS|all"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float | None:
        if value is None or value == "all":
            return None
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is neither a number of seconds nor 'all'", param, ctx)
        if not seconds >= 0.0 or seconds == float("inf"):
            self.fail(f"{value!r} is not a finite number of seconds >= 0 (or 'all')", param, ctx)
        return seconds


def _security(cert: str | None, key: str | None, ca: str | None, token: str | None,
              server_name: str | None = None):
    from collectors.common.transport import Security
    if not any((cert, key, ca, token)):
        return None
    return Security(Path(cert) if cert else None, Path(key) if key else None, Path(ca) if ca else None,
                    token, server_name)


def _token(value: str | None, file: str | None, option: str) -> str | None:
    """The token from its file, else from the option or its environment variable; one given on the command
    line works but is warned about (every user of the host sees it in `ps`)."""
    if file:
        token = Path(file).read_text().strip()
        if not token:  # a secret mount left empty must not start the service with no authentication at all
            raise click.UsageError(f"{option}-file {file} is empty (or only whitespace): refusing to start "
                                   f"without authentication; put the token in it, or leave {option}-file out")
        return token
    name = option.lstrip("-").replace("-", "_")
    context = click.get_current_context()
    envvar = next((p.envvar for p in context.command.params if p.name == name), None)
    if (value is not None and not value.strip()) or (
            value is None and isinstance(envvar, str) and envvar in os.environ and not os.environ[envvar].strip()):
        # click takes an empty environment variable for an unset one: the service would start open, silently
        raise click.UsageError(f"{option} (or ${envvar}) is set but empty or whitespace: refusing to start "
                               "without authentication; set a token, or unset it")
    source = context.get_parameter_source(name)
    if value and source == click.core.ParameterSource.COMMANDLINE:
        click.echo(f"warning: {option} on the command line is visible to every user of this host (ps); "
                   f"use {option}-file or the environment variable instead", err=True)
    return value


def _plaintext_token(token: str | None, tls: bool, addresses: list[str], what: str, allow: bool) -> None:
    """A bearer token sent or accepted over plaintext TCP can be read off the wire: refused unless allowed."""
    tcp = [address for address in addresses if not address.startswith("unix:")]
    if token and not tls and tcp and not allow:
        raise click.UsageError(f"a bearer token {what} over plaintext TCP ({', '.join(tcp)}) can be read by anyone "
                               "on the path; add TLS, or pass --allow-insecure-token to accept that")


def _signals() -> StopSignals:
    """The StopSignals made before the imports (or by the group)."""
    obj = click.get_current_context().find_root().obj
    return obj if obj is not None else StopSignals()


STOP_DEADLINE_S = 4.5
EXIT_STOP_OVERRAN = 70  # EX_SOFTWARE: a clean stop took longer than STOP_DEADLINE_S and was cut short
EXIT_CANNOT_LISTEN = 69  # EX_UNAVAILABLE: an address to listen on is taken or not this host's (one line on stderr)


def _serve(signals: StopSignals, make: Callable[[], Any], describe: Callable[[Any], dict[str, Any]]) -> None:
    """Build and start the server, announce readiness (a JSON line on stdout, and READY=1 to systemd), ping
    the watchdog while flushes succeed, and stop cleanly on SIGTERM/SIGINT within STOP_DEADLINE_S."""
    from collectors.common.memory import tune_allocator
    from collectors.common.sdnotify import Notifier, WatchdogPinger
    from collectors.common.transport import CannotListen
    tune_allocator()  # before the server's threads exist (collectors/common/memory.py)
    notifier = Notifier()
    signals.hold()  # a signal before here ended the process at once; from here the server has things to close
    try:
        server = make()
        if signals.received is None:
            server.start()
    except CannotListen as exc:  # a busy port is a one-line answer, not a traceback
        sys.stderr.write(f"telemetry: {exc}\n")
        _exit_now(EXIT_CANNOT_LISTEN)  # half-started servers' threads would hold a normal exit
    if signals.received is None:
        ready = describe(server)
        print(json.dumps({"ready": True, **ready}), flush=True)
        notifier.ready(f"{ready['role']} listening")
        pinger = WatchdogPinger(notifier, healthy=server.healthy)
        pinger.start()
        signals.wait()
        pinger.stop()
    notifier.stopping()
    _stop_within(server, STOP_DEADLINE_S)
    _exit_now(0)


def _exit_now(code: int) -> None:
    """Leave without the interpreter's teardown, once the server has closed everything it holds (store, sockets,
    streams) or never opened it. The teardown is a few full garbage collections over the whole heap (gRPC,
    protobuf, numpy, the service's tables: hundreds of thousands of objects) and the clearing of every module;
    with the CPU shared it took 1-3 s of the 5 s a stop may take (the thread dump of a stop that overran showed
    the main thread "Garbage-collecting" after server.stop() had returned; bench/stop_time.py measures it)."""
    logging.shutdown()  # flush the log handlers, as the interpreter's exit would
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _stop_within(server: Any, deadline_s: float) -> None:
    """Stop the server; if that overruns, dump every thread's stack and exit EXIT_STOP_OVERRAN regardless."""
    def overran() -> None:
        sys.stderr.write(f"stop took longer than {deadline_s} s; exiting anyway. Threads:\n")
        faulthandler.dump_traceback(all_threads=True)
        os._exit(EXIT_STOP_OVERRAN)

    timer = threading.Timer(deadline_s, overran)
    timer.daemon = True
    timer.start()
    server.stop()
    timer.cancel()


def _logging(verbose: int) -> None:
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # `kill -USR1 PID` dumps every thread's stack
    level = logging.WARNING - 10 * min(verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


parent_options = [
    click.option("--parent", "parents", multiple=True, help="Parent collector address (HOST:PORT or unix:PATH)."),
    click.option("--fallback-parent", "fallbacks", multiple=True, help="Used when the parent does not answer."),
    click.option("--parent-ca", type=click.Path(exists=True), help="CA to verify the parent (enables TLS)."),
    click.option("--parent-cert", type=click.Path(exists=True), help="Client certificate for mTLS to the parent."),
    click.option("--parent-key", type=click.Path(exists=True), help="Client key for mTLS to the parent."),
    click.option("--parent-token", envvar="TELEMETRY_PARENT_TOKEN", help="Bearer token for the parent."),
    click.option("--parent-token-file", type=click.Path(exists=True), help="File holding the parent's token."),
    click.option("--parent-server-name", help="TLS name to expect from the parent (default: its host)."),
    click.option("--allow-insecure-token", is_flag=True,
                 help="Send (and, for a collector, accept) a bearer token over plaintext TCP anyway."),
]


lifecycle_options = [
    click.option("--job-idle-timeout", type=click.FloatRange(min=0.1), default=600.0, show_default=True,
                 help="Seconds after which a job nothing arrived of is finished and forgotten (a job whose ranks "
                      "all closed goes after a 10 s grace); also how long a disconnected child is waited for."),
    click.option("--max-world-size", type=click.IntRange(min=1), default=1 << 20, show_default=True,
                 help="Largest world size a job may declare; a rank (or a child's window) beyond it is refused "
                      "with INVALID_ARGUMENT."),
]


def window_options(deadline_factor: float) -> list:
    """The window options every tier has beside its deadline floor: the deadline's factor (its default per tier),
    the metric budget, then the job lifecycle's."""
    return [
        click.option("--deadline-factor", type=float, default=deadline_factor, show_default=True,
                     help="Deadline as a multiple of the job's median step time, when larger than the floor."),
        click.option("--max-metrics", type=int, default=256, show_default=True, help="Distinct metric names per job."),
        click.option("--window-budget-mb", type=click.IntRange(min=1), default=512, show_default=True,
                     help="MiB of windows this tier holds in memory. Past it, windows already durable are forgotten "
                          "early (no loss); only if none is left is unstored data dropped (dropped_windows)."),
        click.option("--outbox-budget-mb", type=click.IntRange(min=1), default=256, show_default=True,
                     help="MiB of units (their wire size) an agent or collector keeps for its parent until they are "
                          "durable, e.g. while the parent is away. Past it the oldest are dropped (dropped_windows, "
                          "their ranks told). Not used by the root."),
        *lifecycle_options,
    ]


def with_options(options):
    def decorate(func):
        for option in reversed(options):
            func = option(func)
        return func
    return decorate


@main.command()
@config_option
@click.option("--socket", "socket_path", type=click.Path(), help="Unix socket ranks connect to "
              "[default: /run/telemetry/agent.sock, else a per-user runtime dir].")
@click.option("--tcp", help="Also listen on this loopback TCP address, e.g. 127.0.0.1:7400 (no peer check: TCP "
              "carries no credentials).")
@click.option("--allowed-uids", multiple=True, type=click.IntRange(min=0), metavar="UID",
              help="A uid whose processes may send (repeatable), besides the agent's own and root's; checked with "
              "SO_PEERCRED, see docs/reliability.md.")
@click.option("--id", "node_id", default="", help="This agent's id in the tree [default: agent-HOST-PID].")
@with_options(parent_options)
@click.option("--deadline-floor", type=float, default=2.0, show_default=True,
              help="Seconds a step may wait for a slow local rank (at least).")
@with_options(window_options(deadline_factor=3.0))
@click.option("--stuck-after", type=float, default=10.0, show_default=True,
              help="Seconds without a heartbeat before a live rank counts as stuck.")
@click.option("--max-ranks", type=click.IntRange(min=1), default=512, show_default=True,
              help="Rank streams served at once; one more is refused with RESOURCE_EXHAUSTED (and counted).")
@click.option("--gpu-probe/--no-gpu-probe", default=True, show_default=True,
              help="Sample every GPU with NVML (without NVML, a driver or a GPU: one log line, then off).")
@click.option("--nic-probe/--no-nic-probe", default=True, show_default=True,
              help="Sample NIC and InfiniBand error counters, port state and rate from sysfs.")
@click.option("--probe-interval", type=click.FloatRange(min=0.05), default=1.0, show_default=True,
              help="Seconds between hardware samples (their windows are 1 s time buckets).")
@click.option("--sysfs-root", type=click.Path(file_okay=False), default="/sys", show_default=True,
              help="Where the NIC probe reads class/net and class/infiniband.")
@click.option("--nic-exclude", multiple=True, help="Interface name patterns the NIC probe skips (repeatable; "
              "replaces the default) [default: the virtual ones: lo, veth*, docker*, br-*, ifb*, tunnels, overlays; "
              "VIRTUAL_NICS in collectors/probes/nic.py, docs/hardware.md].")
@click.option("--nvlink-every", type=click.IntRange(min=1), default=1, show_default=True,
              help="Read the NVLink error counters on every Nth sample only.")
@click.option("--host-id", default="", help="Name of this host's hardware pseudo-job _host:NAME "
              "[default: the hostname]. Give each agent its own when several share one machine (simulations).")
@click.option("--host-index", type=_HostIndex(), default=None, metavar="auto|off|N",
              help="This host's index in the fleet (docs/fleet.md): its NIC, IB and rank-less GPU readings go to "
                   "the fleet-wide windows (job _fleet) merged across hosts. 'auto' (the default, unless "
                   "--host-registry is given): the tree hands one out and remembers it (keyed by --host-id and "
                   "/etc/machine-id); N: this one (0..16777215), refused by the tree when another host holds it; "
                   "'off': the per-host layout, the host's own pseudo-job _host:NAME (one window per host at the "
                   "root: for a few hosts only).")
@click.option("--machine-id", default=None, help="This machine's stable id, by which the tree tells two hosts "
              "of one name apart (--host-index auto) [default: /etc/machine-id].")
@click.option("--id-file", default=DEFAULT_ID_FILE, show_default=True,
              help="Where this agent keeps its installation id (a random id written once, kept across restarts): "
                   "tells two machines of one --host-id apart where their machine ids cannot (none, as in some "
                   "containers, or cloned with an image). Keep it on storage that outlives the agent; '' for none.")
@click.option("--host-registry", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A file listing the fleet's host names, one a line, the same on every agent: this host's "
                   "index is its position in it (instead of --host-index).")
@click.option("--capture-timeout", type=click.FloatRange(min=0.1), default=3.0, show_default=True,
              help="Seconds a rank has to answer a capture request (docs/forensics.md) before the agent dumps it "
                   "from outside (py-spy, else /proc).")
@click.option("-v", "--verbose", count=True)
def agent(socket_path: str | None, tcp: str | None, allowed_uids: tuple[int, ...], node_id: str,
          parents: tuple[str, ...], fallbacks: tuple[str, ...],
          parent_ca: str | None, parent_cert: str | None, parent_key: str | None, parent_token: str | None,
          parent_token_file: str | None, parent_server_name: str | None, allow_insecure_token: bool,
          deadline_floor: float,
          deadline_factor: float, stuck_after: float, max_metrics: int, window_budget_mb: int,
          outbox_budget_mb: int, max_world_size: int, job_idle_timeout: float, max_ranks: int, gpu_probe: bool,
          nic_probe: bool,
          probe_interval: float, sysfs_root: str, nic_exclude: tuple[str, ...], nvlink_every: int, host_id: str,
          host_index: int | str | None, machine_id: str | None, id_file: str, host_registry: str | None,
          capture_timeout: float,
          verbose: int) -> None:
    """Run the node agent: ranks on this host stream to it; it forwards sealed step summaries to --parent."""
    signals = _signals()
    from collectors.agent.hardware import DEFAULT_NIC_EXCLUDE
    from collectors.agent.server import AgentConfig, AgentServer
    _logging(verbose)
    if not parents:
        raise click.UsageError("an agent needs --parent ADDR (its rack collector, or the root)")
    parent_token = _token(parent_token, parent_token_file, "--parent-token")
    _plaintext_token(parent_token, bool(parent_ca), [*parents, *fallbacks], "sent to the parent",
                     allow_insecure_token)
    security = _security(parent_cert, parent_key, parent_ca, parent_token, parent_server_name)
    if host_registry is not None and host_index is not None:
        raise click.UsageError("--host-index and --host-registry are alternatives: give one")
    # No --host-index: 'auto', as deployed (docs/fleet.md), unless --host-registry gives the index.
    auto = host_index == "auto" or (host_index is None and host_registry is None)
    if host_index in ("auto", "off"):
        host_index = None
    if host_registry is not None:
        import socket

        from collectors.common.fleet import index_from_registry
        try:
            host_index = index_from_registry(host_registry, host_id or socket.gethostname())
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--host-registry") from None
    config = AgentConfig(
        parents=[*parents, *fallbacks], socket=Path(socket_path) if socket_path else None, tcp=tcp,
        allowed_uids=allowed_uids,
        node_id=node_id, parent_security=security, deadline_floor_s=deadline_floor,
        deadline_factor=deadline_factor, stuck_after_s=stuck_after, max_metrics_per_job=max_metrics,
        window_budget_bytes=window_budget_mb << 20, outbox_budget_bytes=outbox_budget_mb << 20, max_ranks=max_ranks,
        job_idle_timeout_s=job_idle_timeout,
        max_world_size=max_world_size, gpu_probe=gpu_probe,
        nic_probe=nic_probe, probe_interval_s=probe_interval,
        sysfs_root=sysfs_root, nic_exclude=tuple(nic_exclude) or DEFAULT_NIC_EXCLUDE, nvlink_every=nvlink_every,
        host_id=host_id,
        host_index=host_index if isinstance(host_index, int) else None, host_index_auto=auto, machine_id=machine_id,
        id_file=id_file or None,
        capture_timeout_s=capture_timeout)
    _serve(signals, lambda: AgentServer(config),
           lambda server: {"role": "agent", "id": server.node.node_id, "addresses": server.addresses})


@main.command()
@config_option
@click.option("--listen", default="127.0.0.1:7500", show_default=True, help="gRPC address children connect to "
              "(port 0 picks a free one).")
@click.option("--id", "node_id", default="", help="This collector's id in the tree.")
@with_options(parent_options)
@click.option("--tls-cert", type=click.Path(exists=True), help="Serve TLS with this certificate.")
@click.option("--tls-key", type=click.Path(exists=True), help="Key for --tls-cert.")
@click.option("--tls-client-ca", type=click.Path(exists=True), help="Require client certificates from this CA (mTLS).")
@click.option("--token", envvar="TELEMETRY_TOKEN", help="Require this bearer token from children.")
@click.option("--token-file", type=click.Path(exists=True), help="File holding the token children must send.")
@click.option("--db", type=click.Path(), default="telemetry-root.db", show_default=True,
              help="Root only: SQLite file of finalised windows.")
@click.option("--api", default="127.0.0.1:7600", show_default=True,
              help="Root only: HTTP JSON API address (loopback by default).")
@click.option("--api-token", envvar="TELEMETRY_API_TOKEN",
              help="Root only: require this bearer token on the HTTP API (all but /healthz).")
@click.option("--api-token-file", type=click.Path(exists=True), help="File holding the API's token.")
@click.option("--api-client-connections", type=click.IntRange(1, 128), default=32, show_default=True,
              help="Root only: API connections one client address may hold at once (of 128 in all). Behind a "
                   "reverse proxy or NAT every client shares the proxy's address: raise it to 128 and limit "
                   "clients at the proxy (docs/reliability.md).")
@click.option("--durability", type=click.Choice(["process", "power"]), default="process", show_default=True,
              help="Root only: what a DURABLE acknowledgement promises. process: the data survives a crash of "
                   "the root process (SQLite synchronous=NORMAL); power: it survives a power loss too "
                   "(synchronous=FULL, an fsync per commit; cost in bench/store_sync.py).")
@click.option("--retention", "retention", multiple=True, metavar="KIND=DURATION",
              help="Root only: how long the store keeps each kind (repeatable; docs/fleet.md): seconds (raw 1 s "
                   "windows, default 1h), minutes (their 1 min rollups, 7d), hours (1 h rollups, 400d), steps "
                   "(raw step windows, 7d), step-blocks (blocks of 100 steps, 400d), events (closed ones, 90d); "
                   "DURATION like 90s, 30m, 6h, 14d, or off.")
@click.option("--host-index-reuse-after", "host_index_reuse_after", default="retention", show_default=True,
              metavar="DURATION|retention|off",
              help="Root only: a fleet host index handed out by the tree whose host no tier has reported for this "
                   "long may go to a new host (docs/fleet.md, \"Host indexes\"). retention: as long as the store "
                   "keeps fleet windows (--retention seconds/minutes/hours: 400d by default; never if one is off); "
                   "off: never.")
@click.option("--deadline-floor", type=float, default=None,
              help="Seconds a window may wait for slow children [default: 3 (collector), 4 (root)].")
@with_options(window_options(deadline_factor=4.0))
@click.option("--fleet-grace", type=_FleetGrace(), default=DEFAULT_FLEET_GRACE_S, show_default=True,
              help="Seconds after the hosts sampled a fleet second (hosts' hardware, 0.7 s into it, docs/fleet.md) "
                   "that this tier passes it on without the hosts not in yet (twice that above a rack); their "
                   "readings follow as late deltas, "
                   "merged exactly. 'all': wait for every host, up to the window's deadline (--deadline-floor).")
@click.option("--max-children", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Child streams (agents, collectors) served at once; one more is refused with "
                   "RESOURCE_EXHAUSTED (and counted).")
@with_options(remote_write_options)
@click.option("--detectors", "detectors_config", metavar="FILE|JSON", envvar="TELEMETRY_DETECTORS",
              help="Root only: detector settings, a .toml/.json file or inline JSON (docs/detectors.md) "
                   "[env: TELEMETRY_DETECTORS; default: built-in defaults].")
@click.option("-v", "--verbose", count=True)
def collector(listen: str, node_id: str, parents: tuple[str, ...], fallbacks: tuple[str, ...],
              parent_ca: str | None, parent_cert: str | None, parent_key: str | None, parent_token: str | None,
              parent_token_file: str | None, parent_server_name: str | None, allow_insecure_token: bool,
              tls_cert: str | None,
              tls_key: str | None, tls_client_ca: str | None, token: str | None, token_file: str | None, db: str,
              api: str, api_token: str | None, api_token_file: str | None, api_client_connections: int,
              deadline_floor: float | None,
              deadline_factor: float, max_metrics: int, window_budget_mb: int, outbox_budget_mb: int,
              fleet_grace: float | None, retention: tuple[str, ...], host_index_reuse_after: str,
              durability: str, max_world_size: int, job_idle_timeout: float, max_children: int,
              detectors_config: str | None, verbose: int, **remote_write: Any) -> None:
    """Run a collector (rack or cluster tier); with no --parent it is the root (store, API)."""
    signals = _signals()
    from collectors.detectors.suite import DetectorsConfig
    detectors = DetectorsConfig()
    if detectors_config:
        try:
            detectors = DetectorsConfig.load(detectors_config)  # checked on every tier; the root is given it
        except (OSError, ValueError) as exc:
            raise click.BadParameter(str(exc), param_hint="--detectors") from None
    remote = remote_write_config(remote_write, not parents, allow_insecure_token)
    _logging(verbose)
    if bool(tls_cert) != bool(tls_key):
        raise click.UsageError("--tls-cert and --tls-key go together")
    token = _token(token, token_file, "--token")
    _plaintext_token(token, bool(tls_cert), [listen], "required from children", allow_insecure_token)
    parent_token = _token(parent_token, parent_token_file, "--parent-token")
    _plaintext_token(parent_token, bool(parent_ca), [*parents, *fallbacks], "sent to the parent",
                     allow_insecure_token)
    api_token = _token(api_token, api_token_file, "--api-token")
    # The API is plain HTTP: its token is safe on loopback only (or behind a TLS proxy, with the flag).
    loopback = api.rsplit(":", 1)[0] in ("127.0.0.1", "localhost", "[::1]")
    _plaintext_token(api_token, False, [] if loopback else [api], "required by the HTTP API", allow_insecure_token)
    security = _security(tls_cert, tls_key, tls_client_ca, token)
    parent_security = _security(parent_cert, parent_key, parent_ca, parent_token, parent_server_name)
    # Root only, but checked on every tier: a rack given a wrong one says so at start, as the root would.
    from collectors.root.retention import RetentionConfig, parse_duration
    lifecycle = RetentionConfig()
    for spec in retention:
        try:
            lifecycle.set(spec)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--retention") from None
    reuse_after: float | None = None
    if host_index_reuse_after != "retention":
        try:
            reuse_after = parse_duration(host_index_reuse_after)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--host-index-reuse-after") from None
    if not parents:
        from collectors.root.server import RootConfig, RootServer
        root = RootConfig(
            listen=listen, node_id=node_id, security=security, db=Path(db), api=api, api_token=api_token,
            api_client_connections=api_client_connections,
            deadline_floor_s=4.0 if deadline_floor is None else deadline_floor, deadline_factor=deadline_factor,
            max_metrics_per_job=max_metrics, max_children=max_children, job_idle_timeout_s=job_idle_timeout,
            max_world_size=max_world_size, durability=durability, detectors=detectors,
            window_budget_bytes=window_budget_mb << 20, remote_write=remote, retention=lifecycle,
            fleet_grace_s=fleet_grace, host_index_reuse_after_s=reuse_after)
        _serve(signals, lambda: RootServer(root),
               lambda server: {"role": "root", "id": server.node.node_id, "address": server.address,
                               "api": server.api_address})
        return
    from collectors.collector.server import CollectorConfig, CollectorServer
    config = CollectorConfig(
        listen=listen, parents=[*parents, *fallbacks], node_id=node_id, security=security,
        parent_security=parent_security, deadline_floor_s=3.0 if deadline_floor is None else deadline_floor,
        deadline_factor=deadline_factor, max_metrics_per_job=max_metrics, max_children=max_children,
        job_idle_timeout_s=job_idle_timeout, max_world_size=max_world_size, window_budget_bytes=window_budget_mb << 20,
        outbox_budget_bytes=outbox_budget_mb << 20, fleet_grace_s=fleet_grace)
    _serve(signals, lambda: CollectorServer(config),
           lambda server: {"role": "collector", "id": server.node.node_id, "address": server.address, "api": None})


@main.command()
@click.option("--ranks", type=click.IntRange(1, 1_000_000), default=64, show_default=True, help="World size.")
@click.option("--ranks-per-node", type=click.IntRange(1, 64), default=8, show_default=True)
@click.option("--nodes-per-rack", type=click.IntRange(1, 1024), default=4, show_default=True)
@click.option("--ranks-per-process", type=click.IntRange(1), default=32, show_default=True,
              help="Simulated ranks per process (threads, each with its own SDK Run).")
@click.option("--steps", type=click.IntRange(1), default=30, show_default=True)
@click.option("--step-interval", type=click.FloatRange(0.01), default=0.5, show_default=True,
              help="Seconds between steps.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--job", default="sim", show_default=True)
@click.option("--inject", "injects", multiple=True, metavar="KIND:key=value,...",
              help="straggler:rank=R,from=S,factor=F[,until=S] | spike:step=S,factor=F | nan:rank=R,step=S | "
                   "hang:rank=R,step=S | dead:rank=R,step=S | restart:step=S,resume=K[,world=W] (the job crashes "
                   "after step S; a new attempt resumes at step K <= S on W ranks) (repeatable).")
@click.option("--chaos", is_flag=True, help="SIGKILL and restart a rack collector, an agent and the root mid-run.")
@click.option("--sync-collectives/--no-sync-collectives", default=True, show_default=True,
              help="Ranks synchronise through collectives each step: step_time is the slowest rank's compute plus "
                   "a rank's own overhead, and each rank logs its own compute as collective_arrival. Off: a job "
                   "without collectives (step_time is a rank's own compute).")
@click.option("--truth", "truth_path", type=click.Path(dir_okay=False), help="Write every logged value (JSON lines).")
@click.option("--report", "report_path", type=click.Path(dir_okay=False), help="Write the run's report (JSON).")
@click.option("--verify/--no-verify", default=True, show_default=True,
              help="Check the root's steps against the ground truth; exit 1 on any mismatch.")
@click.option("--workdir", type=click.Path(file_okay=False), help="Keep sockets, logs and the root's DB here.")
def sim(ranks: int, ranks_per_node: int, nodes_per_rack: int, ranks_per_process: int, steps: int,
        step_interval: float, seed: int, job: str, injects: tuple[str, ...], chaos: bool, sync_collectives: bool,
        truth_path: str | None, report_path: str | None, verify: bool, workdir: str | None) -> None:
    """Simulate a training job on a real local tree (root, racks, one agent per node) over loopback gRPC."""
    from rich.console import Console

    from collectors.sim.model import check_injections, parse_injection
    from collectors.sim.orchestrate import SimConfig, Simulation
    from collectors.sim.verify import compare
    try:
        injections = [parse_injection(text) for text in injects]
        check_injections(injections, ranks, steps)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--inject") from None
    console = Console(stderr=True)
    config = SimConfig(ranks=ranks, ranks_per_node=ranks_per_node, nodes_per_rack=nodes_per_rack,
                       ranks_per_process=ranks_per_process, steps=steps,
                       step_interval=step_interval, seed=seed, job=job, injections=injections,
                       inject_texts=list(injects), chaos=chaos, sync_collectives=sync_collectives,
                       workdir=Path(workdir) if workdir else None)
    with console.status("starting") as status:
        simulation = Simulation(config, progress=lambda msg: status.update(msg))
        report = simulation.run()
    if truth_path:
        shutil_copy(report["truth_file"], truth_path)
    problems = compare(report["metrics"], Path(report["truth_file"]), report["world_sizes"] or ranks) if verify else []
    report["verification"] = {"checked": verify, "problems": problems[:200], "problem_count": len(problems)}
    if report_path:
        Path(report_path).write_text(json.dumps(report, indent=1))
    latency = report["latency_ms"]
    console.print(f"{ranks} ranks, {steps} steps: {len(report['metrics']['step_time'])} step_time windows finalised; "
                  f"latency p50 {latency['p50']} ms, p99 {latency['p99']} ms; delivery {report['delivery']}")
    for event in report["events"]:
        detail = event.get("detail", {})
        console.print(f"event {event['kind']}: ranks {event['ranks']} from step {event['step']}, raised at step "
                      f"{detail.get('detected_step', event['step'])} ({event['status']}): {detail.get('summary', '')}")
    if verify:
        console.print(f"verification: {'OK' if not problems else f'{len(problems)} problems'}")
        for line in problems[:20]:
            console.print(f"  {line}")
    if not workdir:
        simulation.cleanup()
    if problems:
        sys.exit(1)


@main.command()
@click.option("--ranks", type=click.IntRange(2, 4096), default=64, show_default=True,
              help="Simulated ranks (8 to a node, 4 nodes to a rack).")
@click.option("--steps", type=click.IntRange(20), default=60, show_default=True)
@click.option("--step-interval", type=click.FloatRange(0.05), default=0.5, show_default=True,
              help="Seconds between simulated steps.")
@click.option("--train", is_flag=True,
              help="Instead of simulated ranks, run examples/train_ddp.py under torchrun (CPU: gloo) against the tree.")
@click.option("--train-ranks", type=click.IntRange(2, 64), default=4, show_default=True,
              help="torchrun --nproc-per-node with --train.")
@click.option("--job", default="demo", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--api-port", type=click.IntRange(0, 65535), default=7600, show_default=True,
              help="The root's JSON API and /metrics on 127.0.0.1 (0: any free port).")
@click.option("--live/--no-live", default=None,
              help="The live terminal view [default: when stdout is a terminal; otherwise progress lines].")
@click.option("--linger", type=click.FloatRange(0), default=0.0, show_default=True,
              help="Seconds to keep the tree (API, /metrics) up after the job, e.g. for a Prometheus scrape.")
@click.option("--report", "report_path", type=click.Path(dir_okay=False),
              help="Write the run's report (JSON, as sim's).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False),
              help="Write a PNG: loss, step time, MFU, hardware, with the events marked (needs matplotlib).")
@click.option("--workdir", type=click.Path(file_okay=False), help="Keep sockets, logs and the root's DB here.")
def demo(ranks: int, steps: int, step_interval: float, train: bool, train_ranks: int, job: str, seed: int,
         api_port: int, live: bool | None, linger: float, report_path: str | None, plot_path: str | None,
         workdir: str | None) -> None:
    """A local tree and a job with a straggler, a loss spike, a NaN and a hang injected, watched live.

    Starts a root (API and /metrics on 127.0.0.1:--api-port), racks and one agent per node, then a
    simulated job on the real SDK (or, with --train, the torch example under torchrun), and shows what
    the root sees: MFU, loss, per-rank step time, hardware, and the detectors' events as they are raised.
    """
    from rich.console import Console

    from collectors.demo.run import Demo, DemoConfig
    console = Console()
    if train:
        from collectors.demo.train import example_path
        try:
            example_path()
        except (FileNotFoundError, RuntimeError) as exc:
            raise click.UsageError(str(exc)) from None
    if api_port:
        from collectors.common.transport import listen_problem
        problem = listen_problem(f"127.0.0.1:{api_port}")  # as the root will bind it: TIME_WAIT is no owner
        if problem is not None:
            raise click.BadParameter(f"127.0.0.1:{api_port} is taken ({problem}); pass another port, or 0 for any "
                                     "free one", param_hint="--api-port")
    config = DemoConfig(ranks=ranks, steps=steps, step_interval=step_interval, train=train, train_ranks=train_ranks,
                        api_port=api_port, job=job, seed=seed, live=console.is_terminal if live is None else live,
                        linger=linger, workdir=Path(workdir) if workdir else None)
    runner = Demo(config, console)
    report = runner.run()
    runner.print_summary(report)
    if report_path:
        Path(report_path).parent.mkdir(parents=True, exist_ok=True)
        Path(report_path).write_text(json.dumps(report, indent=1))
        console.print(f"report: {report_path}")
    if plot_path:
        from collectors.demo.plot import plot
        plot(report, runner.watcher.hardware_history if runner.watcher else [], Path(plot_path))
        console.print(f"plot: {plot_path}")
    if not workdir:
        runner.sim.cleanup()


def shutil_copy(src: str, dst: str) -> None:
    import shutil
    shutil.copyfile(src, dst)


main.add_command(__import__("collectors.dashboards_cli", fromlist=["dashboards"]).dashboards)  # telemetry dashboards
main.add_command(__import__("collectors.watch_cli", fromlist=["watch"]).watch)  # telemetry watch
main.add_command(__import__("collectors.forensics_cli", fromlist=["forensics"]).forensics)  # telemetry forensics
main.add_command(__import__("collectors.detectors_cli", fromlist=["detectors"]).detectors)  # telemetry detectors
main.add_command(__import__("collectors.deploy_cli", fromlist=["deploy"]).deploy)  # telemetry deploy
main.add_command(__import__("collectors.doctor_cli", fromlist=["doctor"]).doctor)  # telemetry doctor

if __name__ == "__main__":
    main()
