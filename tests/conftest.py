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
import os
import signal
import textwrap
from collections.abc import Iterator
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


# Tests whose verdict depends on how fast processes run beside each other: a slow, starved or CPU-bound rank named
# (its lead over the others is the signal), busy neighbours or spinners they start themselves, run-queue waits, a
# hang or a missing rank judged against short deadlines, stops within a bound, the wheel's build within 240 s (two
# minutes of compiler CPU: beside the ASan build it missed its bound twice in two fresh-clone runs at load 4-20).
# scripts/test's two-pass run (TELEMETRY_TEST_PARALLEL=1) runs them alone (`-m serial`) after the rest of the
# suite ran two files at a time (pytest-xdist), so that they meet no more contention than before. A file, or a test of a file by the start of its name.
# tests/test_markers.py checks that each entry still names a test.
SERIAL = (
    "tests/test_bench_detection.py",
    "tests/test_bench_sdk_overhead.py",
    "tests/test_bench_stop_time.py",
    "tests/test_cpu_starved_torchrun.py",
    "tests/test_demo.py",
    "tests/test_detectors.py::test_sim_",
    "tests/test_drop_torchrun.py",
    "tests/test_forensics_torchrun.py",
    "tests/test_integrations.py",
    "tests/test_kill_job.py",
    "tests/test_sdk_runqueue.py",
    "tests/test_service_signals.py",
    "tests/test_straggler_cpu_bound_torchrun.py",
    "tests/test_straggler_running_share.py::test_the_running_share_goes_through_real_agents",
    "tests/test_straggler_shapes.py",
    "tests/test_straggler_torchrun.py",
    "tests/test_straggler_two_ranks_torchrun.py",
    "tests/test_torch_waits.py",
    "tests/test_train_ddp.py",
    "tests/test_tree_e2e.py",
    "tests/test_wheel.py",
)


# The parallel pass's longest files, longest first (measured: docs/development.md), which its workers start with;
# the rest follow in the usual order. pytest-xdist hands a worker the next file when it finishes one, so a long
# file handed out last would run on alone at the end (the ASan build, ~4 min on a busy core, did: xdist's own
# order puts the files of fewest tests last; scripts/test's two-pass run turns that off).
FIRST = (
    "tests/test_native_asan.py",
    "tests/test_restarts_torchrun.py",
    "tests/test_native.py",
    "tests/test_straggler_cpu_work.py",
    "tests/test_host_indexes.py",
    "tests/test_forensics_limits.py",
    "tests/test_integrations_fsdp.py",
    "tests/test_crash_torchrun.py",
    "tests/test_native_ingest.py",
    "tests/test_native_add_many.py",
)


def _signals_kept() -> Iterator[None]:
    """SIGINT's and SIGTERM's handlers and the wakeup fd put back as they were when entered."""
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    wakeup = signal.set_wakeup_fd(-1)
    signal.set_wakeup_fd(wakeup)
    yield
    for sig, handler in handlers.items():
        if signal.getsignal(sig) is not handler and handler is not None:
            signal.signal(sig, handler)
    signal.set_wakeup_fd(wakeup)


@pytest.fixture(autouse=True, scope="module")
def _stop_signals_restored_per_file() -> Iterator[None]:
    """The same per file: a module-scoped fixture that starts in-process SDK runs (tests/test_watch.py's,
    tests/test_tree_security.py's) installs the crash reporter's SIGTERM handler (telemetry/sdk/lastwords.py)
    before any test's own snapshot, so the per-test restore kept it; every later file on that process then
    found it (tests/test_signal_hygiene.py failed after tests/test_watch.py on one pytest-xdist worker)."""
    yield from _signals_kept()


@pytest.fixture(autouse=True)
def _stop_signals_restored() -> Iterator[None]:
    """SIGINT's and SIGTERM's handlers and the signal wakeup fd as they were before each test. A test that runs
    `telemetry collector|agent` in-process (click's CliRunner: tests/test_demo.py, tests/test_remote_write.py)
    installs the services' StopSignals in pytest's own process, which only note SIGTERM; every process forked
    after it inherited that: tests/test_straggler_cpu_bound_torchrun.py's spinners then outlived their
    terminate(), spun on, and pytest hung at exit joining them (the serial pass of a fresh-clone two-pass run;
    in one process, a file between the two happened to put SIGTERM back). Tests that mean to change a handler
    inside a process of their own are unaffected."""
    yield from _signals_kept()


def serial(nodeid: str) -> bool:
    """Whether the test `nodeid` (tests/test_x.py::test_y[...]) is one of SERIAL's."""
    return any(nodeid == entry or nodeid.startswith(entry if ".py::" in entry else f"{entry}::")
               for entry in SERIAL)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    classifier = Classifier()
    for item in items:
        if serial(item.nodeid):
            item.add_marker(pytest.mark.serial)
        if item.get_closest_marker("integration") or item.get_closest_marker("unit"):
            continue
        function = getattr(item, "function", None)
        fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})  # pytest keeps no public map
        code = [function, *(definition.func for definitions in fixtures.values() for definition in definitions)]
        integration = any(classifier.integration(obj) for obj in code if obj is not None and _in_tests(obj))
        item.add_marker(pytest.mark.integration if integration else pytest.mark.unit)
    # scripts/test's two passes pick their tests here, not with -m: pytest keeps only the last -m, so a user's own
    # (`-m unit`, `-m 'not network'`) replaced the pass's and the serial pass ran the whole suite again (review).
    wanted = os.environ.get("TELEMETRY_TEST_PASS", "")
    if wanted:
        if wanted not in ("parallel", "serial"):
            raise pytest.UsageError(f"TELEMETRY_TEST_PASS must be 'parallel' or 'serial', got {wanted!r}")
        picked = [item for item in items if (item.get_closest_marker("serial") is not None) == (wanted == "serial")]
        if len(picked) != len(items):
            chosen = set(map(id, picked))
            config.hook.pytest_deselected(items=[item for item in items if id(item) not in chosen])
            items[:] = picked
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker collects, and must order alike: this is deterministic
        first = {path: rank for rank, path in enumerate(FIRST)}
        items.sort(key=lambda item: first.get(item.nodeid.split("::")[0], len(FIRST)))  # stable: files stay whole
