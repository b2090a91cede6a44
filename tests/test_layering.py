"""The layering of the services (docs/architecture.md, "The tree"): the root is built on the tiers below it, never
the other way round. No module of telemetry/ or collectors/ imports `collectors.root` but the root's own, the
command line (collectors/cli.py and its *_cli.py siblings), the demo and the simulator. The rack/cluster tier,
the delivery core, the agent and the detectors know nothing of the root; what the detectors share with it (the
`Row` they read) lives in collectors/common/rows.py.

Checked on the source with ast: every `import`/`from ... import` (at any depth: a function's lazy import counts)
and every `__import__("...")` / `importlib.import_module("...")` with a literal name.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROOT_PACKAGE = "collectors.root"


def _allowed(path: Path) -> bool:
    relative = path.relative_to(REPO)
    parts = relative.parts
    if parts[:2] in (("collectors", "root"), ("collectors", "demo"), ("collectors", "sim")):
        return True
    return len(parts) == 2 and parts[0] == "collectors" and (parts[1] == "cli.py" or parts[1].endswith("_cli.py"))


def _module_of(path: Path) -> str:
    relative = path.relative_to(REPO).with_suffix("")
    parts = list(relative.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    """(line, module name) of every import in the file, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = _module_of(path).rsplit(".", 1)[0] if path.name != "__init__.py" else _module_of(path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            yield node.lineno, base
            if not _imports_root(base):
                for alias in node.names:  # `from collectors import root`
                    yield node.lineno, f"{base}.{alias.name}"
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant) \
                and isinstance(node.args[0].value, str):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name in ("__import__", "import_module"):
                yield node.lineno, node.args[0].value


def _sources() -> list[Path]:
    return sorted(p for folder in ("telemetry", "collectors") for p in (REPO / folder).rglob("*.py")
                  if "__pycache__" not in p.parts)


def _imports_root(name: str) -> bool:
    return name == ROOT_PACKAGE or name.startswith(ROOT_PACKAGE + ".")


def test_only_the_root_the_cli_the_demo_and_the_simulator_import_the_root() -> None:
    found = [f"{path.relative_to(REPO)}:{line}: imports {name}" for path in _sources() if not _allowed(path)
             for line, name in _imports(path) if _imports_root(name)]
    assert not found, "modules outside the root, the CLI, the demo and the simulator import the root:\n" + \
        "\n".join(found)


def test_the_check_sees_the_imports_it_is_about() -> None:
    """The check itself: it finds the root's imports where they are allowed (lazy ones included), so that an
    empty answer above means none, not a parser that finds nothing."""
    cli = REPO / "collectors" / "cli.py"
    assert any(_imports_root(name) for _, name in _imports(cli)), "the CLI builds the root (a lazy import)"
    server = REPO / "collectors" / "root" / "server.py"
    assert {"collectors.collector.tier", "collectors.root.wiring"} <= {name for _, name in _imports(server)}
    assert not _allowed(REPO / "collectors" / "collector" / "server.py")
    assert not _allowed(REPO / "collectors" / "detectors" / "suite.py")
    assert _allowed(REPO / "collectors" / "watch_cli.py") and _allowed(REPO / "collectors" / "demo" / "watch.py")


def test_the_event_log_knows_no_destination_the_sinks_module_does():
    """Event sinks live in collectors/detectors/sinks.py (issue 27): the event log keeps and persists events, and
    reaches no network itself; the sinks import the log, never the other way round."""
    events = REPO / "collectors" / "detectors" / "events.py"
    imported = {name for _, name in _imports(events)}
    assert not imported & {"urllib", "urllib.request", "queue", "grafana_client", "collectors.detectors.sinks"}, imported
    tree = ast.parse(events.read_text())
    classes = {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
    assert not {name for name in classes if name.endswith("Sink") and name != "CountingSink"}, classes
