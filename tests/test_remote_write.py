"""The root's remote-write (collectors/root/remote_write.py) against a local receiver that answers as told.

The receiver is a real HTTP server on 127.0.0.1 (port 0) that decodes every request as a store would (snappy
block format, then the protobuf WriteRequest) and answers from a script (204, 503, 429 with Retry-After, 400).
Shapes: figures of a step row; headers and token; retries on 5xx/429 until delivered; a 4xx dropped at once;
the deadline; the queue's bound (oldest dropped, counted, the newest delivered); the out-of-order guard and
late rows; close() while the receiver is down; shards keeping each series in order; TLS with a client
certificate; and the accounting invariant queued == sent + dropped + pending in every case.
The end-to-end case against a real Prometheus is tests/test_remote_write_prometheus.py.
"""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import cramjam
import numpy as np
import pytest
from click.testing import CliRunner

from collectors.cli import main as cli
from collectors.common.keys import Key
from collectors.common.rows import Row
from collectors.detectors.events import EventLog
from collectors.root import prompb
from collectors.root.remote_series import SeriesMaker, labels
from collectors.root.remote_write import RemoteWriteConfig, RemoteWriter
from helpers_tree import wait_for
from telemetry import Summary


class Receiver:
    """A remote-write receiver: records decoded series; answers each request with the next scripted reply."""

    def __init__(self, replies: list[tuple[int, dict[str, str]]] | None = None, tls=None) -> None:
        self.replies = list(replies or [])
        self.requests: list[dict] = []
        self.series: dict[tuple, list[tuple[int, float]]] = {}
        self.lock = threading.Lock()
        self.default = 204
        self.refuse: set = set()  # series whose presence makes a request 400, as an out-of-order sample does
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                decoded = prompb.decode(bytes(cramjam.snappy.decompress_raw(body)))
                with outer.lock:
                    status, headers = outer.replies.pop(0) if outer.replies else (outer.default, {})
                    if any(series_labels in outer.refuse for series_labels, _ in decoded):
                        status = 400
                    outer.requests.append({"headers": dict(self.headers), "status": status,
                                           "samples": sum(len(s) for _, s in decoded)})
                    if 200 <= status < 300:
                        for series_labels, samples in decoded:
                            outer.series.setdefault(series_labels, []).extend(samples)
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                reply = b"" if status < 300 else b"scripted failure"
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        host = "localhost" if tls is not None else "127.0.0.1"
        self.url = f"{scheme}://{host}:{self.server.server_address[1]}/api/v1/write"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def delivered(self) -> int:
        with self.lock:
            return sum(len(s) for s in self.series.values())

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver():
    made: list[Receiver] = []

    def make(*args, **kwargs) -> Receiver:
        made.append(Receiver(*args, **kwargs))
        return made[-1]

    yield make
    for r in made:
        r.close()


def step_row(job: str, metric: str, step: int, values: list[float], end_ms: int, late: int = 0) -> Row:
    summary = Summary.from_arrays(np.array(values, dtype=np.float64), np.arange(len(values), dtype=np.int64),
                                  time_ns=end_ms * 1_000_000)
    return Row(Key(job, metric, step), len(values), summary, late, time.time_ns())


def samples(n: int, series: int = 1, start_ms: int = 1_700_000_000_000):
    """n samples per series, 1 s apart."""
    return [(labels("telemetry_test", (), s=str(k)), start_ms + i * 1000, float(i)) for i in range(n)
            for k in range(series)]


def writer_for(url: str, **options) -> RemoteWriter:
    config = RemoteWriteConfig(urls=(url,), **{"flush_interval_s": 0.05, "backoff_initial_s": 0.02,
                                               "backoff_max_s": 0.1, **options})
    writer = RemoteWriter(config)
    writer.start()
    return writer


def accounts(writer: RemoteWriter) -> tuple[int, int, dict[str, int], int]:
    (endpoint,) = writer.endpoints
    c = endpoint.counters
    return c.queued, c.sent, dict(c.dropped), endpoint.queued()


def balanced(writer: RemoteWriter) -> bool:
    queued, sent, dropped, pending = accounts(writer)
    return queued == sent + sum(dropped.values()) + pending


def test_a_step_row_becomes_its_figures_with_ranks_as_values() -> None:
    values = [0.5, 2.0, 1.0, 4.0, 3.0]
    row = step_row("train@2", "loss", 7, values, end_ms=1_700_000_123_456)
    out = SeriesMaker((("cluster", "a"),)).rows([row])
    by = {(dict(lab)["__name__"], dict(lab).get("stat")): (ts, v) for lab, ts, v in out}
    assert {ts for ts, _ in by.values()} == {1_700_000_123_456}  # stamped at the step's end
    assert by[("telemetry_step_figure", "count")][1] == 5
    assert by[("telemetry_step_figure", "mean")][1] == pytest.approx(2.1)
    assert by[("telemetry_step_figure", "max")][1] == 4.0 and by[("telemetry_step_figure", "min")][1] == 0.5
    assert by[("telemetry_step_argmax_rank", None)][1] == 3 and by[("telemetry_step_argmin_rank", None)][1] == 0
    assert by[("telemetry_step_index", None)][1] == 7
    p50, p90, p99 = row.summary.quantiles([0.5, 0.9, 0.99])
    assert [by[("telemetry_step_figure", s)][1] for s in ("p50", "p90", "p99")] == [p50, p90, p99]
    for lab, _, _ in out:
        assert list(lab) == sorted(lab), "labels must be sorted by name"
        names = dict(lab)
        assert names["job"] == "train" and names["attempt"] == "2" and names["cluster"] == "a"
        assert "rank" not in names
    # a second metric of the same step adds no second step index; a hardware bucket is stamped at its end
    more = SeriesMaker().rows([row, step_row("train@2", "step_time", 7, [1.0], 1_700_000_123_999)])
    assert sum(1 for lab, _, _ in more if dict(lab)["__name__"] == "telemetry_step_index") == 1
    hw = Row(Key("_host:n1", "gpu.xid_errors_delta", 1_700_000_000_000, 1000), 0,
             Summary.from_arrays(np.array([0.0, 2.0]), np.array([3, 9])), 0, 0)
    hw_out = {dict(lab)["stat"] if "stat" in dict(lab) else "argmax": (ts, v) for lab, ts, v in SeriesMaker().rows([hw])}
    assert hw_out["sum"] == (1_700_000_001_000, 2.0) and hw_out["argmax"] == (1_700_000_001_000, 9.0)
    assert SeriesMaker().rows([Row(Key("j", "progress.current_step", 0, 1000), 0, hw.summary, 0, 0)]) == []


def test_requests_carry_the_protocol_headers_and_the_token(receiver) -> None:
    r = receiver()
    writer = writer_for(r.url, token="s3cret", labels=(("cluster", "a"),))
    try:
        writer.on_finalised([step_row("j", "loss", s, [1.0, 2.0], 1_700_000_000_000 + s) for s in range(3)])
        assert writer.flush(30)
    finally:
        writer.close(2)
    headers = r.requests[0]["headers"]
    assert headers["Content-Encoding"] == "snappy" and headers["Content-Type"] == "application/x-protobuf"
    assert headers["X-Prometheus-Remote-Write-Version"] == "0.1.0"
    assert headers["Authorization"] == "Bearer s3cret"
    mean = r.series[labels("telemetry_step_figure", (("cluster", "a"),), job="j", attempt="0", metric="loss",
                           stat="mean")]
    assert mean == [(1_700_000_000_000 + s, 1.5) for s in range(3)]
    assert balanced(writer) and accounts(writer)[2] == dict.fromkeys(accounts(writer)[2], 0)


def test_5xx_and_429_are_retried_until_delivered(receiver) -> None:
    r = receiver([(503, {}), (500, {}), (429, {"Retry-After": "0.3"})])
    writer = writer_for(r.url)
    try:
        writer._put(samples(10))
        started = time.monotonic()
        assert writer.flush(30)
        assert time.monotonic() - started >= 0.3  # Retry-After honoured
    finally:
        writer.close(2)
    assert [q["status"] for q in r.requests] == [503, 500, 429, 204]
    assert r.delivered() == 10 and writer.endpoints[0].counters.retries == 3
    assert balanced(writer)


def test_a_4xx_is_dropped_at_once_and_counted(receiver) -> None:
    r = receiver([(400, {})])
    writer = writer_for(r.url)
    try:
        writer._put(samples(10))
        assert writer.flush(30)
        writer._put(samples(5, start_ms=1_800_000_000_000))
        assert writer.flush(30)
    finally:
        writer.close(2)
    _, sent, dropped, _ = accounts(writer)
    assert dropped["rejected"] == 10 and sent == 5 and r.delivered() == 5 and len(r.requests) == 2
    assert balanced(writer)


def test_a_refused_request_is_split_until_only_the_refused_series_is_lost(receiver) -> None:
    r = receiver()
    poison = labels("telemetry_test", (), s="7")
    r.refuse.add(poison)
    writer = writer_for(r.url, shards=1, flush_interval_s=0.2)
    try:
        writer._put(samples(3, series=16))
        assert writer.flush(30)
    finally:
        writer.close(2)
    _, sent, dropped, _ = accounts(writer)
    assert dropped["rejected"] == 3 and sent == 45 and r.delivered() == 45
    assert poison not in r.series and len(r.series) == 15
    assert len(r.requests) <= 2 * 4 + 1  # a bisection: about 2 log2(16) requests, not one per series
    assert balanced(writer)


def test_a_batch_retried_past_the_deadline_is_dropped_and_counted(receiver) -> None:
    r = receiver()
    r.default = 503
    writer = writer_for(r.url, retry_deadline_s=0.5)
    try:
        writer._put(samples(7))
        assert writer.flush(30)
    finally:
        writer.close(2)
    assert accounts(writer)[2]["retries_exhausted"] == 7 and len(r.requests) >= 2
    assert balanced(writer)


def test_past_the_queue_bound_the_oldest_are_dropped_and_the_rest_delivered(receiver) -> None:
    r = receiver()
    # a long flush interval and a batch larger than the queue: nothing leaves until flush()
    writer = writer_for(r.url, queue_samples=50, shards=1, batch_size=1000, flush_interval_s=30)
    try:
        writer._put(samples(120))
        queued, sent, dropped, pending = accounts(writer)
        assert (queued, sent, dropped["queue_full"], pending) == (120, 0, 70, 50)
        assert writer.flush(30)
    finally:
        writer.close(2)
    (series,) = r.series.values()
    assert [v for _, v in series] == [float(i) for i in range(70, 120)]  # the newest 50, in order
    assert balanced(writer)


def test_out_of_order_samples_and_late_rows_are_not_sent(receiver) -> None:
    r = receiver()
    writer = writer_for(r.url)
    try:
        writer.on_finalised([step_row("j", "loss", 5, [1.0], 1_700_000_005_000)])
        writer.on_finalised([step_row("j", "loss", 4, [1.0], 1_700_000_004_000)])  # finalised after step 5
        writer.on_finalised([step_row("j", "loss", 5, [1.0, 9.0], 1_700_000_005_000, late=1)])
        assert writer.flush(30)
    finally:
        writer.close(2)
    assert writer.late_rows == 1 and writer.out_of_order == 9  # step 4's 7 figures and 2 ranks (no step index)
    for series in r.series.values():
        assert [ts for ts, _ in series] == [1_700_000_005_000]


def test_steps_that_end_in_the_same_millisecond_are_all_written_1_ms_apart(receiver) -> None:
    r = receiver()
    writer = writer_for(r.url)
    try:
        writer.on_finalised([step_row("j", "loss", s, [1.0 * s], 1_700_000_000_000) for s in range(3)])
        writer.on_finalised([step_row("j", "mfu", 3, [0.5], 1_700_000_000_000)])  # a metric new at step 3
        assert writer.flush(30)
    finally:
        writer.close(2)
    mean = r.series[labels("telemetry_step_figure", (), job="j", attempt="0", metric="loss", stat="mean")]
    assert mean == [(1_700_000_000_000 + s, 1.0 * s) for s in range(3)]
    index = r.series[labels("telemetry_step_index", (), job="j", attempt="0")]
    assert index == [(1_700_000_000_000 + s, float(s)) for s in range(4)]
    assert writer.out_of_order == 0


def test_close_while_the_receiver_is_down_counts_what_is_left(receiver) -> None:
    r = receiver()
    r.default = 503
    writer = writer_for(r.url, retry_deadline_s=60, shards=2)
    writer._put(samples(40, series=4))
    started = time.monotonic()
    assert not writer.close(0.5)
    assert time.monotonic() - started < 4.0  # within the root's stop deadline (4.5 s) with the receiver down
    queued, sent, dropped, pending = accounts(writer)
    assert (queued, sent, dropped["shutdown"], pending) == (160, 0, 160, 0)
    writer._put(samples(3, start_ms=1_900_000_000_000))  # after close: counted, not queued
    assert accounts(writer)[2]["shutdown"] == 163 and balanced(writer)


def test_shards_keep_every_series_in_order(receiver) -> None:
    r = receiver([(503, {})] * 3)
    writer = writer_for(r.url, shards=4, batch_size=37)
    try:
        for i in range(20):  # 20 commits of 50 series each
            writer._put([(labels("telemetry_test", (), s=str(k)), 1_700_000_000_000 + i, float(i))
                         for k in range(50)])
        assert writer.flush(30)
    finally:
        writer.close(2)
    assert len(r.series) == 50
    for series in r.series.values():
        assert series == [(1_700_000_000_000 + i, float(i)) for i in range(20)]
    assert len({q["headers"].get("Host") for q in r.requests}) == 1 and balanced(writer)


def test_events_are_counted_per_job_and_kind(receiver) -> None:
    r = receiver()
    events = EventLog()
    config = RemoteWriteConfig(urls=(r.url,), flush_interval_s=0.05)
    writer = RemoteWriter(config, event_totals=events.totals)
    events.sinks.append(writer.on_event)
    writer.start()
    try:
        events.raise_("straggler", "j@1", step=3, ranks=[5], time=1_700_000_000.0)
        events.raise_("straggler", "j@1", step=4, ranks=[5, 6])  # an update: no new count
        events.clear("straggler", "j@1")
        events.raise_("straggler", "j@1", step=9, ranks=[2], time=1_700_000_010.0)
        assert writer.flush(30)
    finally:
        writer.close(2)
    series = r.series[labels("telemetry_job_events_total", (), job="j", attempt="1", kind="straggler")]
    assert series == [(1_700_000_000_000, 1.0), (1_700_000_010_000, 2.0)]


def test_https_with_a_client_certificate(receiver, tmp_path) -> None:
    import ssl

    from test_tree_security import Pki
    pki = Pki(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=str(pki.path("ca.pem")))
    context.load_cert_chain(str(pki.path("server.pem")), str(pki.path("server.key")))
    context.verify_mode = ssl.CERT_REQUIRED
    r = receiver(tls=context)
    writer = writer_for(r.url, ca=pki.path("ca.pem"), cert=pki.path("client.pem"), key=pki.path("client.key"))
    try:
        writer._put(samples(5))
        assert writer.flush(30)
    finally:
        writer.close(2)
    assert r.delivered() == 5
    untrusted = writer_for(r.url, retry_deadline_s=0.3)  # the system's CAs do not know this server
    try:
        untrusted._put(samples(5))
        assert untrusted.flush(30)
    finally:
        untrusted.close(2)
    assert accounts(untrusted)[2]["retries_exhausted"] == 5 and r.delivered() == 5


@pytest.mark.parametrize(("args", "message"), [
    (["--remote-write", "http://10.0.0.1:9090/api/v1/write", "--remote-write-token", "x"], "plaintext HTTP"),
    (["--remote-write", "http://127.0.0.1:9/w", "--remote-write-label", "job=x"], "series' own labels"),
    (["--remote-write", "http://127.0.0.1:9/w", "--remote-write-label", "9x=y"], "Prometheus label name"),
    (["--remote-write", "ftp://127.0.0.1/w"], "want http(s)://"),
    (["--remote-write", "http://127.0.0.1:9/w", "--parent", "127.0.0.1:1"], "is for the root"),
])
def test_the_cli_refuses_bad_remote_write_options(args, message, tmp_path) -> None:
    result = CliRunner().invoke(cli, ["collector", "--db", str(tmp_path / "r.db"), *args])
    assert result.exit_code != 0 and message in result.output, result.output


def test_the_root_exports_the_writers_counters(receiver, tmp_path) -> None:
    from collectors.root.remote_write import RemoteWriteConfig as Config
    from helpers_tree import make_root
    r = receiver()
    root = make_root(tmp_path / "root.db", api="127.0.0.1:0",
                     remote_write=Config(urls=(r.url,), labels=(("cluster", "c1"),), flush_interval_s=0.05))
    try:
        import urllib.request
        body = wait_for(lambda: urllib.request.urlopen(f"http://{root.api_address}/metrics", timeout=30).read().decode())
        assert f'telemetry_remote_write_sent_samples_total{{endpoint="{r.url}"}} 0.0' in body
        assert 'reason="queue_full"' in body and "telemetry_remote_write_pending_samples" in body
    finally:
        root.stop()


def test_a_root_writes_its_steps_as_they_are_finalised_and_goodput_when_it_stops(receiver, tmp_path) -> None:
    """The whole root in-process: steps from a child are finalised and written; stop() writes goodput last."""
    from pyroaring import BitMap

    from collectors.root.remote_write import RemoteWriteConfig as Config
    from helpers_tree import RawChild, make_root
    from telemetry.v1 import forward_pb2

    def window(step: int, end_ms: int) -> forward_pb2.WindowSummary:
        summary = Summary.from_arrays(np.array([1.0 + step, 2.0 + step]), np.array([0, 1]), time_ns=end_ms * 10**6)
        return forward_pb2.WindowSummary(key=Key("gp", "loss", step).to_proto(), summary=summary.to_proto(),
                                         expected=2)

    start_ms = time.time_ns() // 10**6 - 10_000
    r = receiver()
    root = make_root(tmp_path / "root.db", api=None,
                     remote_write=Config(urls=(r.url,), flush_interval_s=0.05, goodput_interval_s=3600))
    try:
        child = RawChild(root.address, "agent-0")
        states = forward_pb2.RankStates(job="gp", world_size=2, alive=BitMap(range(2)).serialize())
        for step in range(5):
            child.seq += 1
            child.send(forward_pb2.SummaryBatch(sender_id="agent-0", seq=child.seq, ranks=[states],
                                                windows=[window(step, start_ms + 1000 * step)]))
        child.ack_for(child.seq, forward_pb2.Ack.DURABLE)
        child.close()
        mean = labels("telemetry_step_figure", (), job="gp", attempt="0", metric="loss", stat="mean")
        wait_for(lambda: len(r.series.get(mean, [])) == 5, timeout=30, what="five steps written")
        assert [v for _, v in r.series[mean]] == [1.5 + step for step in range(5)]
        assert not any(dict(lab)["__name__"].startswith("telemetry_job_goodput") for lab in r.series)
    finally:
        root.stop()
    ratio = r.series[labels("telemetry_job_goodput_ratio", (), job="gp")]
    assert ratio == [(start_ms + 4000, 1.0)]  # at the job's latest step end; one attempt: all productive
    assert r.series[labels("telemetry_job_restarts", (), job="gp")][0][1] == 0


def _feed(root, job: str, steps: range, start_ms: int, sender: str) -> None:
    """Steps of a 2-rank job (loss) from a hand-driven child, acknowledged durable; step s ends at start + s s."""
    from pyroaring import BitMap

    from helpers_tree import RawChild
    from telemetry.v1 import forward_pb2
    child = RawChild(root.address, sender)
    states = forward_pb2.RankStates(job=job, world_size=2, alive=BitMap(range(2)).serialize())
    for step in steps:
        summary = Summary.from_arrays(np.array([1.0 + step, 2.0 + step]), np.array([0, 1]),
                                      time_ns=(start_ms + 1000 * step) * 10**6)
        child.seq += 1
        child.send(forward_pb2.SummaryBatch(sender_id=sender, seq=child.seq, ranks=[states], windows=[
            forward_pb2.WindowSummary(key=Key(job, "loss", step).to_proto(), summary=summary.to_proto(), expected=2)]))
    child.ack_for(child.seq, forward_pb2.Ack.DURABLE)
    child.close()


def test_what_a_stop_left_unsent_is_sent_by_the_next_start_and_history_is_not_resent(receiver, tmp_path) -> None:
    from collectors.root.remote_write import RemoteWriteConfig as Config
    from helpers_tree import make_root
    start_ms = time.time_ns() // 10**6 - 60_000
    mean = labels("telemetry_step_figure", (), job="wm", attempt="0", metric="loss", stat="mean")
    # 1. a root without remote-write: steps 0-4 are history
    root = make_root(tmp_path / "root.db", api=None)
    try:
        _feed(root, "wm", range(0, 5), start_ms, "a")
    finally:
        root.stop()
    # 2. remote-write turned on, the receiver down (503) the whole time: steps 5-9 are finalised, not sent
    r = receiver()
    r.default = 503
    config = Config(urls=(r.url,), flush_interval_s=0.05, backoff_max_s=0.1)
    root = make_root(tmp_path / "root.db", api=None, remote_write=config)
    try:
        _feed(root, "wm", range(5, 10), start_ms, "b")
        wait_for(lambda: root.remote_write.endpoints[0].counters.retries >= 2, timeout=30, what="retrying")
    finally:
        root.stop()
    assert root.remote_write.endpoints[0].counters.dropped["shutdown"] > 0 and not r.series
    # 3. started again with the receiver up: steps 5-9 come first, then 10-11; 0-4 (history) never
    r.default = 204
    root = make_root(tmp_path / "root.db", api=None, remote_write=config)
    try:
        _feed(root, "wm", range(10, 12), start_ms, "c")
        wait_for(lambda: len(r.series.get(mean, [])) == 7, timeout=30, what="steps 5-11 written")
        assert root.remote_write.replayed_rows == 5
    finally:
        root.stop()
    assert r.series[mean] == [(start_ms + 1000 * s, 1.5 + s) for s in range(5, 12)]
    # 4. and once sent, a restart resends nothing
    root = make_root(tmp_path / "root.db", api=None, remote_write=config)
    try:
        assert root.remote_write.replayed_rows == 0
    finally:
        root.stop()


def test_the_watermark_file(tmp_path) -> None:
    from collectors.root.remote_catchup import Watermark
    mark = Watermark(tmp_path / "root.db-remote-write.json")
    assert mark.load() is None  # never written: a first start
    mark.save(123)
    assert mark.load() == 123 and not list(tmp_path.glob("*.tmp"))
    (tmp_path / "root.db-remote-write.json").write_text("{trunc")  # e.g. a power loss mid-write
    assert mark.load() == 0  # read back the newest windows again rather than lose the unsent


def test_the_options_read_from_a_config_file(tmp_path) -> None:
    """The commented example in collectors/systemd/collector-example.toml, uncommented, is what it says."""
    import re as re_
    from pathlib import Path

    import click as click_
    example = (Path(__file__).resolve().parents[1] / "collectors" / "systemd" / "collector-example.toml").read_text()
    lines = re_.findall(r"^# (remote_write_\w+ = .+)$", example, re_.M)
    assert len(lines) == 3
    token = tmp_path / "token"
    token.write_text("t0k\n")
    config = tmp_path / "root.toml"
    config.write_text("\n".join(lines).replace("/etc/telemetry/remote-write.token", str(token)) + "\n")
    command = cli.commands["collector"]
    ctx = command.make_context("collector", ["--config", str(config)], parent=click_.Context(cli))
    assert ctx.params["remote_write_urls"] == ("https://mimir.example.internal/api/v1/push",)
    assert ctx.params["remote_write_labels"] == ("cluster=a",)
    from collectors.remote_write_cli import remote_write_config
    with ctx:
        built = remote_write_config({k: v for k, v in ctx.params.items() if k.startswith("remote_write")}, True,
                                    False)
    assert built.token == "t0k" and built.labels == (("cluster", "a"),)
