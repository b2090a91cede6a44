"""Issue 24 item 4: detector settings changed while the root runs, with a real root process and agent.

POST /api/v1/detectors (all jobs) and /api/v1/jobs/{job}/detectors (one job) change thresholds and switch
detectors on or off without a restart; bad values are a 400 naming the field; writes need the API's token; events
raised under an override record it (detail.settings); the overrides survive a restart of the root (its database);
`telemetry detectors` does the same from a shell.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import telemetry
from collectors.sim.procs import Proc, python_module, stop_process
from helpers_tree import wait_for

TOKEN = "s3cret-settings-token"
REPO = Path(__file__).resolve().parents[1]


def _call(api: str, path: str, body: object | None = None, token: str | None = TOKEN) -> tuple[int, dict]:
    request = urllib.request.Request(f"http://{api}{path}", data=None if body is None else json.dumps(body).encode(),
                                     method="GET" if body is None else "POST",
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Tree:
    """A root (restartable on the same database) and an agent under it, as processes."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        (tmp / "api.token").write_text(TOKEN + "\n")
        self.root: Proc | None = None
        self.agent: Proc | None = None

    def start_root(self) -> str:
        # a fixed listen address across restarts: the agent reconnects to the same parent
        listen = self.root.ready["address"] if self.root is not None else "127.0.0.1:0"
        self.root = Proc("root", python_module(
            "collectors.cli", "collector", "--listen", listen, "--db", str(self.tmp / "root.db"), "--api",
            "127.0.0.1:0", "--api-token-file", str(self.tmp / "api.token"), "--detectors",
            '{"hang": {"enabled": false}}'), self.tmp).start()
        return self.root.ready["api"]

    def start_agent(self) -> str:
        sock = self.tmp / "agent.sock"
        assert self.root is not None
        self.agent = Proc("agent", python_module("collectors.cli", "agent", "--socket", str(sock), "--parent",
                                                 self.root.ready["address"]), self.tmp).start()
        return f"unix:{sock}"

    def stop_root(self) -> None:
        assert self.root is not None and self.root.popen is not None
        stop_process(self.root.popen)

    def close(self) -> None:
        for proc in (self.agent, self.root):
            if proc is not None and proc.popen is not None and proc.popen.poll() is None:
                stop_process(proc.popen)


@pytest.fixture
def tree(tmp_path: Path) -> Iterator[Tree]:
    found = Tree(tmp_path)
    try:
        yield found
    finally:
        found.close()


def _mfu_job(agent: str, job: str, drop_at: int = 20, steps: int = 26) -> None:
    """One rank logging a steady MFU that falls 75 % at `drop_at` (the README's lines)."""
    run = telemetry.init(job=job, rank=0, world_size=1, agent=agent)
    for step in range(steps):
        with run.step(step):
            run.log(step, mfu=0.4 if step < drop_at else 0.1)
    assert run.close(timeout=30)


def _events(api: str, job: str, kind: str) -> list[dict]:
    status, body = _call(api, f"/api/v1/jobs/{job}/events?kind={kind}")
    assert status == 200, body
    return body["events"]


@pytest.mark.timeout(180)
def test_settings_change_at_runtime_per_job_are_recorded_in_events_and_survive_a_restart(tree: Tree) -> None:
    api = tree.start_root()
    agent = tree.start_agent()
    # writes need the token, like every path of a root with one
    assert _call(api, "/api/v1/detectors", {"mfu_drop": {"noise_k": 3}}, token=None)[0] == 401
    assert _call(api, "/api/v1/detectors", {"mfu_drop": {"noise_k": 3}}, token="wrong")[0] == 401
    # bad values: a 400 naming the field, and nothing changes
    for body, field in (({"mfu_drop": {"noise_k": -1}}, "mfu_drop.noise_k"),
                        ({"mfu_drop": {"noise_k": "high"}}, "mfu_drop.noise_k"),
                        ({"mfu_drop": {"nosie_k": 3}}, "mfu_drop.nosie_k"),
                        ({"straggler": {"enabled": "no"}}, "straggler.enabled"),
                        ({"loss_spike": {"severity": "loud"}}, "loss_spike.severity"),
                        ({"mfu_drop": {"lanes": [[0.1]]}}, "mfu_drop.lanes"),
                        ({"straggler": {"wait_threshold": 0}}, "straggler.wait_threshold"),
                        ({"straggler": {"oncpu_steps": 0}}, "straggler.oncpu_steps"),
                        ({"straggler": {"starved_window": 0}}, "straggler.starved_window"),
                        ({"sinks": {"webhook_url": "http://127.0.0.1:1/"}}, "sinks"),
                        ({"no_such": {}}, "no_such"),
                        (["mfu_drop"], "body")):
        status, answer = _call(api, "/api/v1/detectors", body)
        assert status == 400 and answer["error"].startswith(f"{field}:"), (body, status, answer)
    status, answer = _call(api, "/api/v1/detectors")
    assert status == 200 and answer["version"] == 0 and answer["all_jobs"] == {}, answer
    # all jobs: a stricter noise allowance; job "quiet": mfu_drop off; job "tuned": its own lanes
    status, answer = _call(api, "/api/v1/detectors", {"mfu_drop": {"noise_k": 3}})
    assert status == 200 and answer["all_jobs"] == {"mfu_drop": {"noise_k": 3.0}}, answer
    assert answer["effective"]["mfu_drop"]["noise_k"] == 3.0
    assert _call(api, "/api/v1/jobs/quiet/detectors", {"mfu_drop": {"enabled": False}})[0] == 200
    status, answer = _call(api, "/api/v1/jobs/tuned/detectors", {"mfu_drop": {"lanes": [[0.2, 0.5]]}})
    assert status == 200 and answer["version"] == 3 and answer["this_job"] == {"mfu_drop": {"lanes": [[0.2, 0.5]]}}
    assert answer["effective"]["mfu_drop"]["noise_k"] == 3.0, "the all-jobs override under the job's own"

    for job in ("plain", "quiet", "tuned"):
        _mfu_job(agent, job)
    plain = wait_for(lambda: _events(api, "plain", "mfu_drop") or None, timeout=20, what="plain's mfu_drop")[0]
    assert plain["step"] == 20 and plain["detail"]["settings"] == {
        "version": 1, "all_jobs": {"noise_k": 3.0}, "this_job": {}}, plain  # the change that made them
    tuned = wait_for(lambda: _events(api, "tuned", "mfu_drop") or None, timeout=20, what="tuned's mfu_drop")[0]
    assert tuned["detail"]["settings"]["this_job"] == {"lanes": [[0.2, 0.5]]} and tuned["detail"]["lane"] == "lane 0"
    wait_for(lambda: len(_call(api, "/api/v1/jobs/quiet/steps?metric=mfu")[1]["steps"]) == 26 or None, timeout=20,
             what="quiet's steps at the root")
    assert _events(api, "quiet", "mfu_drop") == [], "switched off for this job"

    tree.stop_root()
    api = tree.start_root()
    status, answer = _call(api, "/api/v1/detectors")
    assert status == 200 and answer["version"] == 3, answer
    assert answer["all_jobs"] == {"mfu_drop": {"noise_k": 3.0}}
    assert answer["jobs"] == {"quiet": {"mfu_drop": {"enabled": False}}, "tuned": {"mfu_drop": {"lanes": [[0.2, 0.5]]}}}
    status, answer = _call(api, "/api/v1/jobs/quiet/detectors")
    assert answer["effective"]["mfu_drop"]["enabled"] is False and answer["effective"]["mfu_drop"]["noise_k"] == 3.0
    # and they still apply after the restart: a new job under the restarted root
    _mfu_job(agent, "after")
    after = wait_for(lambda: _events(api, "after", "mfu_drop") or None, timeout=30, what="after's mfu_drop")[0]
    assert after["detail"]["settings"]["all_jobs"] == {"noise_k": 3.0}, after
    # a null removes an override; an empty one leaves the job on the all-jobs settings
    status, answer = _call(api, "/api/v1/jobs/quiet/detectors", {"mfu_drop": None})
    assert status == 200 and answer["this_job"] == {} and answer["effective"]["mfu_drop"]["enabled"] is True


def _cli(*args: str, api: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "collectors.cli", "detectors", *args], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={"PATH": "/usr/bin:/bin", "TELEMETRY_ROOT_API": api,
                                                      "TELEMETRY_API_TOKEN": TOKEN})


@pytest.mark.timeout(120)
def test_the_telemetry_detectors_command(tree: Tree) -> None:
    api = tree.start_root()
    done = _cli("set", "mfu_drop.noise_k=3", "dataloader_stall.severity=critical", "hang.grace_s=30", api=api)
    assert done.returncode == 0, done.stderr
    assert "all jobs:" in done.stdout and '"noise_k": 3.0' in done.stdout and '"critical"' in done.stdout
    done = _cli("set", "--job", "llama", "straggler.enabled=false", "--json", api=api)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    assert answer["this_job"] == {"straggler": {"enabled": False}} and answer["effective"]["hang"]["grace_s"] == 30.0
    done = _cli("set", "mfu_drop.noise_k=high", api=api)
    assert done.returncode == 1 and "HTTP 400 mfu_drop.noise_k: must be a finite number" in done.stderr, done.stderr
    done = _cli("set", "mfu_drop.noise_k", api=api)
    assert done.returncode == 2 and "SECTION.OPTION=VALUE" in done.stderr
    done = _cli("unset", "mfu_drop.noise_k", "hang", api=api)
    assert done.returncode == 0, done.stderr
    status, answer = _call(api, "/api/v1/detectors")
    assert answer["all_jobs"] == {"dataloader_stall": {"severity": "critical"}} and answer["version"] == 3
    done = _cli("show", "--job", "llama", api=api)
    assert done.returncode == 0 and 'job llama: {"straggler": {"enabled": false}}' in done.stdout, done.stdout
    env_less = subprocess.run([sys.executable, "-m", "collectors.cli", "detectors", "show", "--root", api], cwd=REPO,
                              capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert env_less.returncode == 1 and "HTTP 401" in env_less.stderr


def test_a_change_rebuilds_only_what_it_changes_and_switching_off_closes_the_jobs_events() -> None:
    """In-process (the routing of Detectors): a job's own override gets its own instance of that detector only;
    others keep theirs, with their state; a detector switched off for a job closes its open events."""
    from collectors.common.keys import Key
    from collectors.common.rows import Row
    from collectors.detectors.events import EventLog
    from collectors.detectors.settings import RuntimeSettings
    from collectors.detectors.suite import Detectors, DetectorsConfig
    from collectors.root.wiring import _dry_build
    from helpers_tree import summary_of

    events, settings, base = EventLog(None), RuntimeSettings(None), DetectorsConfig()
    suite = Detectors(events, base, None, settings)

    def feed(step: int, value: float) -> None:
        suite.on_rows([Row(Key(job, "mfu", step, 0), 1, summary_of({0: value}), 0, 0) for job in ("a@0", "b@0")])

    for step in range(30):
        feed(step, 0.4 if step < 20 else 0.1)
    assert {e["job"] for e in events.query(None, kind="mfu_drop", status="open")} == {"a@0", "b@0"}
    shared = suite.instance("b@0", "mfu_drop")
    settings.patch("a", {"straggler": {"factor": 2.0}}, base, check=_dry_build)
    suite.apply_settings()
    assert suite.instance("a@0", "mfu_drop") is shared and suite.instance("b@0", "mfu_drop") is shared
    assert suite.instance("a@0", "straggler") is not suite.instance("b@0", "straggler")
    assert suite.instance("a@0", "straggler").config.factor == 2.0  # type: ignore[union-attr]  # not switched off
    settings.patch("a", {"mfu_drop": {"enabled": False}}, base, check=_dry_build)
    suite.apply_settings()
    assert suite.instance("a@0", "mfu_drop") is None and suite.instance("b@0", "mfu_drop") is shared
    (closed,) = events.query("a@0", kind="mfu_drop")
    assert closed["status"] == "closed" and closed["detail"]["closed_because"] == "detector switched off"
    assert events.query("b@0", kind="mfu_drop")[0]["status"] == "open"
    for step in range(30, 40):
        feed(step, 0.4)  # b's instance kept its baseline: back to normal, its event closes
    assert events.query("b@0", kind="mfu_drop")[0]["status"] == "closed"
