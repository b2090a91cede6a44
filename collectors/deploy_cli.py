"""`telemetry deploy`: print or write the deployment files the installed package carries.

    telemetry deploy --print kubernetes | kubectl apply -f -     # every manifest, one YAML stream
    telemetry deploy --print systemd                             # the units and example configs
    telemetry deploy --write kubernetes ./deploy                 # the files themselves (kustomization.yaml too)

The files are package data (collectors/deploy is a link to the checkout's deploy/, collectors/systemd holds the
units), so they come with the wheel and match the version installed: docs/deploy.md.
"""

from __future__ import annotations

from pathlib import Path

import click

HERE = Path(__file__).resolve().parent
KUBERNETES = HERE / "deploy" / "kubernetes"
CONTAINERFILE = HERE / "deploy" / "Containerfile"
SYSTEMD = HERE / "systemd"
KINDS = ("kubernetes", "systemd", "containerfile")


def kubernetes_files() -> list[Path]:
    """The manifests in kustomization.yaml's order (namespace first), then kustomization.yaml itself."""
    kustomization = KUBERNETES / "kustomization.yaml"
    if not kustomization.exists():
        raise click.ClickException(f"no Kubernetes manifests in {KUBERNETES} (a broken install?)")
    listed, inside = [], False
    for line in kustomization.read_text().splitlines():
        if not line.startswith((" ", "-")):
            inside = line.startswith("resources:")
            continue
        if inside and line.strip().startswith("- "):
            listed.append(KUBERNETES / line.strip()[2:].strip())
    return [*listed, kustomization]


def files_of(kind: str) -> list[Path]:
    if kind == "kubernetes":
        return kubernetes_files()
    if kind == "systemd":
        return sorted(p for p in SYSTEMD.iterdir() if p.is_file())
    return [CONTAINERFILE]


def render(kind: str) -> str:
    """What --print shows: Kubernetes as one YAML stream `kubectl apply -f -` takes (kustomization.yaml is
    not a resource: left out); systemd's files one after the other, each under a comment naming it."""
    out = []
    if kind == "kubernetes":
        for path in kubernetes_files()[:-1]:
            out.append(f"---\n# Source: deploy/kubernetes/{path.name}\n{path.read_text().rstrip()}\n")
        return "".join(out)
    for path in files_of(kind):
        out.append(f"# ==> {path.name} <==\n{path.read_text().rstrip()}\n\n")
    return "".join(out).rstrip() + "\n"


@click.command("deploy")
@click.option("--print", "print_kind", type=click.Choice(KINDS), help="Print the files of this kind.")
@click.option("--write", "write", nargs=2, metavar="KIND DIR", help="Write the files of KIND into DIR (made if "
              "missing; existing files of the same names are replaced).")
@click.option("--list", "list_files", is_flag=True, help="List the files of every kind and where they are.")
def deploy(print_kind: str | None, write: tuple[str, str] | None, list_files: bool) -> None:
    """The Kubernetes manifests, systemd units and container recipe of this version (docs/deploy.md)."""
    if sum(map(bool, (print_kind, write, list_files))) != 1:
        raise click.UsageError("give one of --print KIND, --write KIND DIR, --list")
    if list_files:
        for kind in KINDS:
            for path in files_of(kind):
                click.echo(f"{kind}\t{path}")
        return
    if print_kind:
        click.echo(render(print_kind), nl=False)
        return
    assert write is not None
    kind, directory = write
    if kind not in KINDS:
        raise click.BadParameter(f"{kind!r}: want one of {', '.join(KINDS)}", param_hint="--write")
    target = Path(directory)
    target.mkdir(parents=True, exist_ok=True)
    for path in files_of(kind):
        (target / path.name).write_text(path.read_text())
        click.echo(str(target / path.name))
