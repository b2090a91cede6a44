"""Grafana dashboards (issue 4, item 3): the committed JSON is what dashboards/generate.py makes, it
decodes into grafana-foundation-sdk's typed models (and encodes back unchanged), it has the rows and
the `job` variable the issue asks for; `telemetry dashboards push` provisions a (recording, local) Grafana
HTTP API idempotently. No Grafana server can be installed here: this is not run against a live one."""

from __future__ import annotations

import enum
import json
import sys
import threading
import types
import typing
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models import dashboard as dash_models

from collectors.cli import main as cli
from collectors.dashboards_cli import DATASOURCE_UID, FOLDER_UID

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "dashboards"))
import generate  # noqa: E402  (dashboards/ is put on sys.path just above)

register_default_plugins()
COMMITTED = sorted((REPO / "dashboards").glob("*.json"))


def test_committed_json_is_what_the_generator_makes(tmp_path):
    assert [p.name for p in COMMITTED] == sorted(generate.DASHBOARDS)
    assert generate.main(["--out", str(tmp_path)]) == 0
    for path in COMMITTED:
        assert (tmp_path / path.name).read_text() == path.read_text(), f"{path.name} is stale: run generate.py"
    assert generate.main(["--check"]) == 0


# ------------------------------------------------------------------ the SDK's types
def _check(value: object, hint: object, path: str, errors: list[str]) -> None:
    """Does `value` (as decoded by the SDK) fit the SDK's type annotation `hint`? Recurses into models."""
    if hint in (typing.Any, object) or isinstance(hint, typing.TypeVar):
        if hasattr(value, "to_json") and not isinstance(value, type):
            _check(value, type(value), path, errors)  # a plugin's options or field config: its own model
        return
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        trials = []
        for option in args:
            trial: list[str] = []
            _check(value, option, path, trial)
            if not trial:
                return
            kind = typing.get_origin(option) or option
            own = isinstance(kind, type) and isinstance(value, kind)
            trials.append((not own, len(trial), trial))
        # say why it fits none: the option of the value's own class tells the most
        errors.extend(min(trials, key=lambda t: t[:2])[2] if trials else [f"{path}: fits none of {hint}"])
        return
    if hint is type(None):
        if value is not None:
            errors.append(f"{path}: expected None")
        return
    if origin is typing.Literal:
        if value not in args:
            errors.append(f"{path}: {value!r} not in {args}")
        return
    if origin is list:
        if not isinstance(value, list):
            errors.append(f"{path}: expected a list, got {type(value).__name__}")
            return
        for i, item in enumerate(value):
            _check(item, args[0] if args else typing.Any, f"{path}[{i}]", errors)
        return
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{path}: expected a dict, got {type(value).__name__}")
            return
        for key, item in value.items():
            _check(item, args[1] if len(args) > 1 else typing.Any, f"{path}.{key}", errors)
        return
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            hint(value if not isinstance(value, enum.Enum) else value.value)
        except ValueError:
            errors.append(f"{path}: {value!r} is not a {hint.__name__} ({[m.value for m in hint]})")
        return
    if hint is bool:
        if not isinstance(value, bool):
            errors.append(f"{path}: expected bool, got {value!r:.60}")
        return
    if hint in (int, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (hint is int and isinstance(value, float)
                                                                              and not value.is_integer()):
            errors.append(f"{path}: expected {hint.__name__}, got {value!r:.60}")
        return
    if hint is str:
        if not isinstance(value, str):
            errors.append(f"{path}: expected str, got {value!r:.60}")
        return
    if isinstance(hint, type):
        if isinstance(value, dict) and hasattr(hint, "from_json"):
            # a few fields the SDK leaves as plain JSON when decoding (e.g. transformations): decode them
            # with the model they are annotated with, and check that nothing is lost
            decoded = hint.from_json(value)
            if json.loads(json.dumps(decoded, cls=JSONEncoder)) != value:
                errors.append(f"{path}: does not round-trip through {hint.__name__}")
            value = decoded
        if not isinstance(value, hint):
            errors.append(f"{path}: expected {hint.__name__}, got {type(value).__name__}")
            return
        if hasattr(value, "to_json"):  # an SDK model: check each of its annotated fields
            try:
                hints = typing.get_type_hints(type(value))
            except Exception as exc:  # pragma: no cover - an SDK class we cannot introspect
                errors.append(f"{path}: cannot read the annotations of {type(value).__name__}: {exc}")
                return
            for name, field_hint in hints.items():
                if hasattr(value, name):
                    _check(getattr(value, name), field_hint, f"{path}.{name}", errors)


@pytest.mark.parametrize("path", COMMITTED, ids=[p.name for p in COMMITTED])
def test_dashboard_json_fits_the_sdk_schema(path):
    data = json.loads(path.read_text())
    model = dash_models.Dashboard.from_json(data)
    again = json.loads(json.dumps(model, cls=JSONEncoder))
    assert again == data, "decoding with the SDK's models and encoding back must not change (or lose) anything"
    errors: list[str] = []
    _check(model, dash_models.Dashboard, "dashboard", errors)
    assert errors == []
    # the panels' options and the queries decode into their plugins' own types, not loose dicts
    typed = [p for p in model.panels if isinstance(p, dash_models.Panel)]
    assert typed and all(not isinstance(p.options, dict) for p in typed), [p.type_val for p in typed
                                                                             if isinstance(p.options, dict)]
    for panel in typed:
        for target in panel.targets or []:
            assert type(target).__module__.endswith("models.prometheus"), (panel.title, type(target))


@pytest.mark.parametrize("mutate, expected", [
    (lambda d: d["panels"][1]["options"]["legend"].update(displayMode="bogus"), "LegendDisplayMode"),
    (lambda d: d["panels"][1]["fieldConfig"]["defaults"]["custom"].update(drawStyle="zigzag"), "GraphDrawStyle"),
    (lambda d: d["panels"][1]["gridPos"].update(h="8"), "expected int"),
    (lambda d: d["templating"]["list"][1].update(refresh=7), "VariableRefresh"),
    (lambda d: d["panels"][1]["targets"][0].update(format="csv"), "PromQueryFormat"),
    (lambda d: d["panels"][1].update(bogusKey=1), "round trip"),
])
def test_the_schema_check_rejects_broken_dashboards(mutate, expected):
    """The check above has teeth: a wrong enum value, a wrong type, an unknown key each fail it."""
    data = json.loads((REPO / "dashboards" / "training-run.json").read_text())
    mutate(data)
    model = dash_models.Dashboard.from_json(data)
    errors: list[str] = []
    _check(model, dash_models.Dashboard, "dashboard", errors)
    if json.loads(json.dumps(model, cls=JSONEncoder)) != data:
        errors.append("round trip changed the JSON")
    assert any(expected.split()[0] in e for e in errors), errors


def test_training_run_has_the_rows_variable_and_panels_asked_for():
    data = json.loads((REPO / "dashboards" / "training-run.json").read_text())
    assert data["uid"] == "telemetry-training-run" and data["title"] == "Training run"
    variables = {v["name"]: v for v in data["templating"]["list"]}
    assert variables["job"]["type"] == "query" and variables["job"]["query"].startswith("label_values(")
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    # issue 17: a job's attempts are a label of their own; the adopted latest first (chosen by default), not the
    # highest number (issue 26: any process can claim one): telemetry_attempt_latest is 1 for it, 0 for the others
    assert variables["attempt"]["query"] == 'query_result(sort_desc(telemetry_attempt_latest{job="$job"}))'
    assert variables["attempt"]["regex"] == '/attempt="([^"]+)"/'
    assert variables["attempt"]["multi"] is True and variables["attempt"]["sort"] == 0  # the query's order
    rows = [p["title"] for p in data["panels"] if p["type"] == "row"]
    assert rows == ["MFU", "Loss", "Per-rank step time", "Hardware health", "Telemetry health",
                    "Goodput and restarts"]
    panels = {p["title"]: p for p in data["panels"] if p["type"] != "row"}
    loss = panels["Loss: mean with min-max band"]
    fill = [o for o in loss["fieldConfig"]["overrides"] if o["matcher"]["options"] == "max"][0]["properties"]
    assert {"id": "custom.fillBelowTo", "value": "min"} in fill
    assert any('kind="loss_spike"' in a.get("expr", "") for a in data["annotations"]["list"])
    table = panels["Top 5 slowest ranks (latest step)"]
    assert table["type"] == "table" and {t["expr"] for t in table["targets"]} == {
        'telemetry_step_time_top_seconds{job="$job",attempt=~"$attempt"}',
        'telemetry_step_time_top_rank{job="$job",attempt=~"$attempt"}'}
    step_time = " ".join(t["expr"] for t in panels["Step time across ranks"]["targets"])
    assert all(f'stat="{s}"' in step_time for s in ("p50", "p90", "p99", "max"))
    assert "telemetry_step_time_slowest_rank" in json.dumps(panels["Slowest rank"])
    assert "telemetry_collective_wait_seconds" in json.dumps(panels["Collective wait"])
    health = json.dumps(panels["Ranks reporting vs world size"]) + json.dumps(panels["Dropped and late"])
    assert all(m in health for m in ("telemetry_ranks_reporting", "telemetry_world_size", "dropped", "late"))
    ids = [p["id"] for p in data["panels"]]
    assert len(set(ids)) == len(ids) and all(i > 0 for i in ids)
    assert all(p["gridPos"]["x"] + p["gridPos"]["w"] <= 24 for p in data["panels"])
    for panel in data["panels"]:
        for target in panel.get("targets", []):
            assert target["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    exprs = [e for _, e in generate.expressions(data)]
    assert len(exprs) >= 40 and all("rank=" not in e for e in exprs)
    # per-job families are read for the chosen attempt(s); goodput is the job's, every attempt together
    goodput = {"telemetry_goodput_ratio", "telemetry_goodput_seconds_total", "telemetry_restarts_total",
               "telemetry_goodput_replay_seconds", "telemetry_goodput_steps_replayed_total"}
    for where, expr in generate.expressions(data):
        if 'job="$job"' in expr and not where.startswith("variable "):  # the Attempt variable lists attempts
            assert ('attempt=~"$attempt"' in expr) != any(name in expr for name in goodput), expr
    for title, name in (("Goodput", "telemetry_goodput_ratio"), ("Restarts", "telemetry_restarts_total"),
                        ("Steps replayed", "telemetry_goodput_steps_replayed_total"),
                        ("Time lost to restarts", 'kind=~"lost|restart_downtime"'),
                        ("Where the wall time went", "telemetry_goodput_replay_seconds")):
        assert name in " ".join(t["expr"] for t in panels[title]["targets"]), title


# ------------------------------------------------------------------ push, against a recording Grafana API
class FakeGrafana(BaseHTTPRequestHandler):
    """Enough of Grafana's HTTP API for the push: datasources by uid, folders, dashboards by uid."""

    token = "s3cret"
    requests: list[tuple[str, str, object]] = []
    datasources: dict[str, dict] = {}
    folders: dict[str, dict] = {}
    boards: dict[str, dict] = {}

    @classmethod
    def reset(cls) -> None:
        cls.requests, cls.datasources, cls.folders, cls.boards = [], {}, {}, {}

    def _reply(self, status: int, body: object) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self, method: str) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        cls = type(self)
        cls.requests.append((method, self.path, body))
        if self.headers.get("Authorization") != f"Bearer {cls.token}":
            self._reply(401, {"message": "Unauthorized"})
            return
        parts = self.path.split("?")[0].strip("/").split("/")
        if parts[:3] == ["api", "datasources", "uid"] and len(parts) == 4:
            uid = parts[3]
            if method == "GET":
                found = cls.datasources.get(uid)
                self._reply(200, found) if found else self._reply(404, {"message": "Data source not found"})
            elif method == "PUT":
                if uid not in cls.datasources:
                    self._reply(404, {"message": "Data source not found"})
                    return
                cls.datasources[uid] = {**body, "id": cls.datasources[uid]["id"], "version":
                                        cls.datasources[uid]["version"] + 1}
                self._reply(200, {"message": "Datasource updated", "datasource": cls.datasources[uid]})
            return
        if parts == ["api", "datasources"] and method == "POST":
            if any(d["name"] == body["name"] for d in cls.datasources.values()):
                self._reply(409, {"message": "data source with the same name already exists"})
                return
            cls.datasources[body["uid"]] = {**body, "id": len(cls.datasources) + 1, "version": 1}
            self._reply(200, {"message": "Datasource added", "datasource": cls.datasources[body["uid"]]})
            return
        if parts[:2] == ["api", "folders"]:
            if method == "GET" and len(parts) == 3:
                found = cls.folders.get(parts[2])
                self._reply(200, found) if found else self._reply(404, {"message": "folder not found"})
            elif method == "POST" and len(parts) == 2:
                if body["uid"] in cls.folders:
                    self._reply(409, {"message": "a folder with the same uid already exists"})
                    return
                cls.folders[body["uid"]] = {"uid": body["uid"], "title": body["title"], "id": len(cls.folders) + 1}
                self._reply(200, cls.folders[body["uid"]])
            return
        if parts == ["api", "dashboards", "db"] and method == "POST":
            dashboard = body["dashboard"]
            uid = dashboard["uid"]
            if uid in cls.boards and not body.get("overwrite"):
                self._reply(412, {"message": "The dashboard has been changed by someone else", "status":
                                  "version-mismatch"})
                return
            if body.get("folderUid") not in cls.folders:
                self._reply(400, {"message": "folder not found"})
                return
            version = cls.boards.get(uid, {}).get("version", 0) + 1
            cls.boards[uid] = {"dashboard": dashboard, "folderUid": body["folderUid"], "version": version}
            self._reply(200, {"id": 1, "uid": uid, "url": f"/d/{uid}/x", "status": "success", "version": version})
            return
        self._reply(404, {"message": f"not found: {method} {self.path}"})

    def do_GET(self) -> None:
        self._handle("GET")

    def do_POST(self) -> None:
        self._handle("POST")

    def do_PUT(self) -> None:
        self._handle("PUT")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def grafana():
    FakeGrafana.reset()
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGrafana)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def _push(url: str, *extra: str, token: str = "s3cret"):
    return CliRunner().invoke(cli, ["dashboards", "push", "--grafana-url", url, "--token", token, *extra],
                              catch_exceptions=False)


def test_push_provisions_datasource_folder_and_dashboards_idempotently(grafana):
    first = _push(grafana, "--prometheus-url", "http://prometheus:9090")
    assert first.exit_code == 0, first.output
    calls = [(m, p) for m, p, _ in FakeGrafana.requests]
    assert ("POST", "/api/datasources") in calls and ("POST", "/api/folders") in calls
    assert calls.count(("POST", "/api/dashboards/db")) == len(COMMITTED)
    created = FakeGrafana.datasources[DATASOURCE_UID]
    assert (created["type"], created["url"], created["access"]) == ("prometheus", "http://prometheus:9090", "proxy")
    posted = [b for m, p, b in FakeGrafana.requests if p == "/api/dashboards/db"][0]
    assert posted["overwrite"] is True and posted["folderUid"] == FOLDER_UID and posted["dashboard"]["id"] is None
    assert posted["dashboard"]["uid"] == "telemetry-training-run"
    assert "datasource telemetry-prometheus: created" in first.output

    FakeGrafana.requests = []
    second = _push(grafana, "--prometheus-url", "http://prometheus2:9090")
    assert second.exit_code == 0, second.output
    calls = [(m, p) for m, p, _ in FakeGrafana.requests]
    assert ("POST", "/api/datasources") not in calls and ("PUT", f"/api/datasources/uid/{DATASOURCE_UID}") in calls
    assert ("POST", "/api/folders") not in calls, "the folder exists: not created twice"
    assert len(FakeGrafana.datasources) == 1 and FakeGrafana.datasources[DATASOURCE_UID]["url"] == \
        "http://prometheus2:9090"
    assert len(FakeGrafana.folders) == 1
    assert set(FakeGrafana.boards) == {"telemetry-training-run"} and FakeGrafana.boards[
        "telemetry-training-run"]["version"] == 2, "updated in place, not duplicated"
    assert "updated" in second.output and "(version 2)" in second.output

    third = _push(grafana)  # no --prometheus-url: the datasource is left alone
    assert third.exit_code == 0 and "datasource" not in third.output
    assert FakeGrafana.boards["telemetry-training-run"]["version"] == 3


def test_push_reports_a_refused_token_and_an_unreachable_grafana(grafana):
    refused = _push(grafana, token="wrong")
    assert refused.exit_code != 0 and "refused" in refused.output and "Unauthorized" in refused.output
    unreachable = CliRunner().invoke(cli, ["dashboards", "push", "--grafana-url", "http://127.0.0.1:9",
                                           "--token", "x", "--timeout", "2"])
    assert unreachable.exit_code != 0 and "Grafana" in unreachable.output
