"""deploy/kubernetes/ and deploy/Containerfile: valid Kubernetes, and in agreement with the CLI and each other.

- Every object validates against the Kubernetes 1.37 schemas with `kubernetes-validate --strict` (the schemas
  ship in the package: checked with every proxy pointing nowhere), and a misspelled field fails it (the
  check can fail). The ServiceMonitor (a CRD) and the Kustomization are checked by hand.
- Every container's args parse as a `telemetry` command (click's own parser: an unknown flag fails), and the
  flags agree with the objects: the agent's socket is the SDK's default and on the hostPath the pods share,
  parents name Services and their ports, --listen/--api ports are the containers' and the Services' ports,
  the root's database is on its volume; commented example flags exist too.
- One image everywhere, tagged with the package's version; the Containerfile's user is the pods' runAsUser.
- Least privilege: no Role or binding, no API token, non-root, no privilege escalation, read-only root
  filesystems, every capability dropped (the agent's init container adds CHOWN and FOWNER, nothing else).
- Requests and limits on every container, the agent's above what bench/soak.py measured.
- The dashboards' ConfigMap is what scripts/gen_dashboard_configmap.py generates from dashboards/*.json.
- `telemetry deploy` prints and writes the files; they are package data (tests/test_wheel.py prints them from an
  installed wheel, outside the checkout).
"""

from __future__ import annotations

import copy
import fnmatch
import functools
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner

from collectors.cli import main as cli
from telemetry.sdk.env import SYSTEM_SOCKET

REPO = Path(__file__).resolve().parents[1]
K8S = REPO / "deploy" / "kubernetes"
CONTAINERFILE = REPO / "deploy" / "Containerfile"
K8S_VERSION = "1.37.0"
BY_HAND = {"ServiceMonitor", "Kustomization"}  # no schema in kubernetes-validate (a CRD, a kustomize file)
WORKLOADS = {"DaemonSet", "Deployment", "StatefulSet"}
NAMESPACE = "telemetry"


@functools.cache
def _parsed() -> list[tuple[str, dict]]:
    out = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                out.append((path.name, doc))
    return out


def documents() -> list[tuple[str, dict]]:
    """(file name, object) of every manifest, a fresh copy each call (tests may change theirs)."""
    return copy.deepcopy(_parsed())


def objects(kind: str) -> list[dict]:
    return [doc for _, doc in documents() if doc["kind"] == kind]


def one(kind: str, name: str) -> dict:
    (found,) = [doc for doc in objects(kind) if doc["metadata"]["name"] == name]
    return found


def pod_specs() -> list[tuple[str, dict]]:
    return [(doc["metadata"]["name"], doc["spec"]["template"]["spec"]) for _, doc in documents()
            if doc["kind"] in WORKLOADS]


def containers() -> list[tuple[str, dict]]:
    return [(name, c) for name, spec in pod_specs() for c in spec["containers"]]


def parsed_args(container: dict) -> tuple[str, dict]:
    """The container's args through the real `telemetry` command's parser: (subcommand, its parameters)."""
    args = [re.sub(r"\$\((\w+)\)", "node-1", arg) for arg in container["args"]]  # Kubernetes expands $(VAR)
    command = cli.commands[args[0]]
    ctx = command.make_context(args[0], args[1:], parent=click.Context(cli))
    return args[0], ctx.params


def project_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def test_every_object_validates_strictly_offline() -> None:
    checked = 0
    for _, doc in documents():
        if doc["kind"] in BY_HAND:
            continue
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)  # raises ValidationError
        checked += 1
    assert checked >= 10
    # the command line too, with every proxy pointing nowhere: the schemas must come from the package
    dead = "http://127.0.0.1:9"
    env = {**os.environ, "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "http_proxy": dead, "https_proxy": dead,
           "NO_PROXY": "", "no_proxy": ""}
    files = [str(p) for p in sorted(K8S.glob("*.yaml")) if p.name not in ("kustomization.yaml", "servicemonitor.yaml")]
    done = subprocess.run([str(Path(sys.executable).parent / "kubernetes-validate"), "--strict", "--quiet",
                           "-k", K8S_VERSION, *files], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def test_a_misspelled_field_fails_the_strict_validation() -> None:
    daemonset = one("DaemonSet", "telemetry-agent")
    daemonset["spec"]["template"]["spec"]["hostPid"] = True  # hostPID, misspelled
    with pytest.raises(kubernetes_validate.ValidationError, match="hostPid"):
        kubernetes_validate.validate(daemonset, K8S_VERSION, strict=True)


def test_the_kustomization_lists_every_manifest_and_sets_the_image() -> None:
    (kustomization,) = [doc for name, doc in documents() if name == "kustomization.yaml"]
    assert kustomization["kind"] == "Kustomization" and kustomization["namespace"] == NAMESPACE
    assert sorted(kustomization["resources"]) == sorted(p.name for p in K8S.glob("*.yaml")
                                                        if p.name != "kustomization.yaml")
    (image,) = kustomization["images"]
    assert image["newTag"] == project_version()
    for _, doc in documents():
        if doc["kind"] not in ("Kustomization", "Namespace"):
            assert doc["metadata"]["namespace"] == NAMESPACE, doc["metadata"]  # `kubectl apply -f` works too


def test_one_image_everywhere_and_the_containerfile_agrees() -> None:
    images = {c["image"] for _, spec in pod_specs() for c in [*spec["containers"], *spec.get("initContainers", [])]}
    (image,) = images
    name, tag = image.rsplit(":", 1)
    (kustomization,) = objects("Kustomization")
    assert tag == project_version() and name == kustomization["images"][0]["name"]
    text = CONTAINERFILE.read_text()
    user = re.search(r"^USER (\d+):(\d+)$", text, re.M)
    assert user is not None
    for _, spec in pod_specs():
        assert (spec["securityContext"]["runAsUser"], spec["securityContext"]["runAsGroup"]) == (
            int(user.group(1)), int(user.group(2)))
    assert re.search(r'^ENTRYPOINT \["telemetry"\]$', text, re.M)
    assert "treemetry-*.whl" in text and "pip install" in text
    exposed = {int(p) for p in re.search(r"^EXPOSE (.+)$", text, re.M).group(1).split()}
    ports = {p["containerPort"] for _, c in containers() for p in c.get("ports", [])}
    assert ports == exposed


def test_the_containers_args_are_the_clis_and_agree_with_the_objects() -> None:
    services = {doc["metadata"]["name"]: doc for doc in objects("Service")}

    def service_port(address: str) -> None:
        host, port = address.rsplit(":", 1)
        name, namespace = host.split(".")[:2]
        assert namespace == NAMESPACE and name in services, address
        assert int(port) in {p["port"] for p in services[name]["spec"]["ports"]}, address

    def container_port(container: dict, name: str) -> int:
        (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == name]
        return port

    seen = set()
    for workload, container in containers():
        command, params = parsed_args(container)
        seen.add(workload)
        if workload == "telemetry-agent":
            assert command == "agent"
            assert Path(params["socket_path"]) == SYSTEM_SOCKET  # the SDK's default address
            (spec,) = [s for n, s in pod_specs() if n == workload]
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            volumes = {v["name"]: v for v in spec["volumes"]}
            assert mounts["socket-dir"] == str(SYSTEM_SOCKET.parent)
            assert volumes["socket-dir"]["hostPath"]["path"] == str(SYSTEM_SOCKET.parent)
            assert spec["hostPID"] is True  # SO_PEERCRED pids are the host's (agent-daemonset.yaml says why)
            for address in [*params["parents"], *params["fallbacks"]]:
                service_port(address)
        elif workload == "telemetry-collector":
            assert command == "collector" and params["parents"]
            assert int(params["listen"].rsplit(":", 1)[1]) == container_port(container, "grpc")
            for address in params["parents"]:
                service_port(address)
        elif workload == "telemetry-root":
            assert command == "collector" and not params["parents"]
            assert int(params["listen"].rsplit(":", 1)[1]) == container_port(container, "grpc")
            host, port = params["api"].rsplit(":", 1)
            assert host == "0.0.0.0" and int(port) == container_port(container, "api")  # reachable by Prometheus
            mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
            assert Path(params["db"]).parent == Path(mounts["data"])
            (statefulset,) = objects("StatefulSet")
            assert statefulset["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    assert seen == {"telemetry-agent", "telemetry-collector", "telemetry-root"}
    # flags left commented as examples exist too
    commented = re.findall(r"^\s*# - (--[a-z-]+)$", (K8S / "root-statefulset.yaml").read_text(), re.M)
    assert "--remote-write" in commented
    options = {opt for param in cli.commands["collector"].params for opt in param.opts}
    assert set(commented) <= options


def test_services_and_the_servicemonitor_point_at_real_ports() -> None:
    workloads = {doc["metadata"]["name"]: doc for _, doc in documents() if doc["kind"] in WORKLOADS}
    for service in objects("Service"):
        selector = service["spec"]["selector"]
        (target,) = [w for w in workloads.values() if all(
            w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in selector.items())]
        names = {p["name"] for c in target["spec"]["template"]["spec"]["containers"] for p in c.get("ports", [])}
        for port in service["spec"]["ports"]:
            assert port["targetPort"] in names, (service["metadata"]["name"], port)
    (monitor,) = objects("ServiceMonitor")
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["path"] == "/metrics" and endpoint["honorLabels"] is True  # docs/metrics.md
    matched = [s for s in objects("Service") if all(
        s["metadata"]["labels"].get(k) == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())]
    assert [s["metadata"]["name"] for s in matched] == ["telemetry-root"]
    assert endpoint["port"] in {p["name"] for p in matched[0]["spec"]["ports"]}
    root = one("StatefulSet", "telemetry-root")
    assert root["spec"]["serviceName"] == "telemetry-root" and root["spec"]["replicas"] == 1


def test_least_privilege() -> None:
    kinds = {doc["kind"] for _, doc in documents()}
    assert not kinds & {"Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding"}  # nothing granted
    accounts = {doc["metadata"]["name"]: doc for doc in objects("ServiceAccount")}
    assert all(a["automountServiceAccountToken"] is False for a in accounts.values())
    for name, spec in pod_specs():
        assert spec["serviceAccountName"] in accounts and spec["automountServiceAccountToken"] is False
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for container in spec["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False and context["readOnlyRootFilesystem"] is True
            assert context["capabilities"] == {"drop": ["ALL"]}, (name, container["name"])
            assert "privileged" not in context
        for init in spec.get("initContainers", []):
            assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}
            assert init["securityContext"]["allowPrivilegeEscalation"] is False
        host = {key for key in ("hostPID", "hostNetwork", "hostIPC") if spec.get(key)}
        assert host == ({"hostPID", "hostNetwork"} if name == "telemetry-agent" else set()), name


def test_requests_and_limits_come_from_the_measurements() -> None:
    def mib(quantity: str) -> float:
        number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()
        return int(number) * (1024 if unit == "Gi" else 1)

    for name, container in containers():
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"], name
        assert mib(resources["limits"]["memory"]) >= 2 * mib(resources["requests"]["memory"])
    soak = json.loads((REPO / "bench" / "results" / "soak.json").read_text())
    for service, workload in (("agent", "telemetry-agent"), ("rack", "telemetry-collector"),
                              ("root", "telemetry-root")):
        rss = max(sample["services"][service]["rss_bytes"] for sample in soak["steady_phase"]["samples"]) / 2**20
        (container,) = [c for n, c in containers() if n == workload]
        assert mib(container["resources"]["requests"]["memory"]) >= rss, (workload, rss)
        assert mib(container["resources"]["limits"]["memory"]) >= 4 * rss, (workload, rss)


def test_the_dashboards_configmap_is_generated_from_the_dashboards() -> None:
    done = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_dashboard_configmap.py"), "--check"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    configmap = one("ConfigMap", "telemetry-dashboards")
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    boards = sorted((REPO / "dashboards").glob("*.json"))
    assert sorted(configmap["data"]) == [p.name for p in boards]
    for path in boards:
        assert json.loads(configmap["data"][path.name]) == json.loads(path.read_text())


def test_telemetry_deploy_prints_and_writes_the_files(tmp_path: Path) -> None:
    runner = CliRunner()
    printed = runner.invoke(cli, ["deploy", "--print", "kubernetes"])
    assert printed.exit_code == 0, printed.output
    streamed = [doc for doc in yaml.safe_load_all(printed.output) if doc]
    assert streamed == [doc for _, doc in sorted(documents(), key=lambda d: _order(d[0])) if doc["kind"] != "Kustomization"]
    systemd = runner.invoke(cli, ["deploy", "--print", "systemd"])
    assert "# ==> telemetry-agent.service <==" in systemd.output and "[Service]" in systemd.output
    written = runner.invoke(cli, ["deploy", "--write", "kubernetes", str(tmp_path / "k8s")])
    assert written.exit_code == 0, written.output
    assert {p.name: p.read_text() for p in (tmp_path / "k8s").iterdir()} == {
        p.name: p.read_text() for p in K8S.glob("*.yaml")}
    assert runner.invoke(cli, ["deploy"]).exit_code != 0  # one of --print, --write, --list


def _order(name: str) -> int:
    (kustomization,) = objects("Kustomization")
    return kustomization["resources"].index(name) if name in kustomization["resources"] else 1 << 20


def test_the_package_data_carries_every_file() -> None:
    """What `telemetry deploy` reads is package data: collectors/deploy links to deploy/, and pyproject's globs
    cover every file there (tests/test_wheel.py runs `telemetry deploy --print` from an installed wheel)."""
    link = REPO / "collectors" / "deploy"
    assert link.is_symlink() and link.resolve() == (REPO / "deploy").resolve()
    globs = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["collectors"]
    shipped = [p for p in (REPO / "deploy").rglob("*") if p.is_file()]
    assert shipped
    for path in shipped:
        relative = "deploy/" + path.relative_to(REPO / "deploy").as_posix()
        assert any(fnmatch.fnmatchcase(relative, glob) for glob in globs), relative
