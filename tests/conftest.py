"""Every test is marked `unit` or `integration` at collection, so `pytest -m unit` is a short loop beside the full
suite (docs/development.md); a plain `pytest` (scripts/test, CI) still runs every test.

`integration`: the test starts processes, servers or torchrun. It is read from the code, not declared: the test
function, the fixtures it asks for, and every function or class of tests/ or bench/ it names or imports
(helpers_tree, its own module's helpers, bench.torchrun_jobs, ...), followed transitively, are searched for the
names that start one (`INTEGRATION_NAMES`). Code of the packages (collectors/, telemetry/) is not followed: a test
that starts a service through it names the service's class or helper (`RootServer`, `make_root`, `Simulation`,
...), which is in the list. A test may also say it itself (`@pytest.mark.integration` or `@pytest.mark.unit`, or a
module's `pytestmark`); what it says wins.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import linecache
import textwrap
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
BENCH = TESTS.parent / "bench"
# Names that start a process, a server or torchrun, or reach one: a test naming any of them (directly or through
# a helper of tests/) is an integration test.
INTEGRATION_NAMES = frozenset({
    # processes
    "subprocess", "Popen", "check_call", "check_output", "multiprocessing", "fork", "spawn", "torchrun",
    "spawn_root", "Simulation", "CliRunner", "running_prometheus", "promtool_check", "executable", "Proc",
    "python_module", "stop_process",
    # servers and the clients of one
    "make_root", "make_collector", "make_agent", "RootServer", "CollectorServer", "AgentServer", "FakeParent",
    "RawChild", "server", "serve", "HTTPServer", "ThreadingHTTPServer", "free_port", "insecure_channel",
    "secure_channel", "unix_socket_channel", "socket",
})


def _names(tree: ast.AST) -> tuple[set[str], list[ast.ImportFrom]]:
    """The names `tree` uses, and its `from ... import` statements (for `_imported`): one walk for both."""
    names: set[str] = set()
    imports: list[ast.ImportFrom] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.update(node.name.split("."))
        elif isinstance(node, ast.ImportFrom):
            imports.append(node)
    return names, imports


@functools.cache
def _file_in_tests(source: str) -> bool:
    return any(Path(source).resolve().is_relative_to(folder) for folder in (TESTS, BENCH))


def _in_tests(obj: object) -> bool:
    try:
        source = inspect.getsourcefile(obj)  # TypeError for builtins
    except TypeError:
        return False
    return source is not None and _file_in_tests(source)


def _imported(imports: list[ast.ImportFrom]) -> dict[str, object]:
    """What a function imports inside itself (`from bench.x import f`) from tests/ or bench/, by the name it uses."""
    found: dict[str, object] = {}
    for node in imports:
        if not node.module or node.level:
            continue
        top = node.module.split(".")[0]
        if top != "bench" and not (TESTS / f"{top}.py").exists():
            continue
        try:
            module = importlib.import_module(node.module)
        except Exception:  # an optional dependency missing here: the test skips itself at run time
            continue
        for alias in node.names:
            if hasattr(module, alias.name):
                found[alias.asname or alias.name] = getattr(module, alias.name)
    return found


@functools.cache
def _definitions(source: str) -> dict[tuple[str, object], ast.AST]:
    """Every definition in the file `source`, parsed once: a function by the line it starts at (its first
    decorator's, as its code's co_firstlineno), a class by its qualified name (the first in the file, as
    inspect.getsource finds it). inspect.getsource re-tokenises the file for each function and re-parses it
    whole for each class: that was most of the collection's marking (3.8 s of CPU for 1,700 tests)."""
    found: dict[tuple[str, object], ast.AST] = {}

    def visit(node: ast.AST, scope: tuple[str, ...]) -> None:
        # definitions are statements: only the statement lists are followed (bodies, branches, handlers, cases)
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            for child in getattr(node, field, ()):
                if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    start = min([child.lineno, *(d.lineno for d in child.decorator_list)])
                    found.setdefault(("def", start), child)
                    visit(child, (*scope, child.name, "<locals>"))
                elif isinstance(child, ast.ClassDef):
                    found.setdefault(("class", ".".join((*scope, child.name))), child)
                    visit(child, (*scope, child.name))
                elif isinstance(child, ast.AST):
                    visit(child, scope)

    visit(ast.parse("".join(linecache.getlines(source))), ())
    return found


def _definition(obj: object) -> ast.AST:
    """The syntax tree of a function's or class's definition (what inspect.getsource gives, parsed)."""
    target = obj.__func__ if inspect.ismethod(obj) else obj
    source = inspect.getsourcefile(target) if inspect.isfunction(target) or inspect.isclass(target) else None
    if source is not None:
        key: tuple[str, object] = (("def", target.__code__.co_firstlineno) if inspect.isfunction(target)
                                   else ("class", target.__qualname__))
        node = _definitions(source).get(key)
        if node is not None:
            return node
    return ast.parse(textwrap.dedent(inspect.getsource(obj)))


class Classifier:
    """Whether code of tests/ reaches `INTEGRATION_NAMES`, each function or class read once."""

    def __init__(self) -> None:
        self._seen: dict[object, bool] = {}

    def integration(self, obj: object) -> bool:
        if obj in self._seen:
            return self._seen[obj]
        self._seen[obj] = False  # a recursive helper: no more than what the rest of it finds
        try:
            tree = _definition(obj)
        except (OSError, TypeError, SyntaxError):
            return False
        names, imports = _names(tree)
        found = bool(names & INTEGRATION_NAMES)
        if not found:
            module = inspect.getmodule(obj)
            scope = {**(vars(module) if module is not None else {}), **getattr(obj, "__globals__", {}),
                     **_imported(imports)}
            found = any(self.integration(scope[name]) for name in sorted(names)
                        if name in scope and (inspect.isfunction(scope[name]) or inspect.isclass(scope[name]))
                        and _in_tests(scope[name]))
        self._seen[obj] = found
        return found


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    classifier = Classifier()
    for item in items:
        if item.get_closest_marker("integration") or item.get_closest_marker("unit"):
            continue
        function = getattr(item, "function", None)
        fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})  # pytest keeps no public map
        code = [function, *(definition.func for definitions in fixtures.values() for definition in definitions)]
        integration = any(classifier.integration(obj) for obj in code if obj is not None and _in_tests(obj))
        item.add_marker(pytest.mark.integration if integration else pytest.mark.unit)
