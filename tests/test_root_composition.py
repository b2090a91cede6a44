"""The root is composed from collaborators passed to constructors (issue 27 item 6, the pytorch/torchft model):
`RootServer(config, store=..., finaliser=..., retention=...)` uses what it is given, and the node's sink,
completion rule and run ledger, the service's reload hook and the API's routes are constructor arguments, never
attributes set on a built object from outside."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import telemetry
from collectors.root.server import RootConfig, RootServer
from collectors.root.store import Row, Store
from helpers_tree import FAST_COLLECTOR, make_agent, stop_all

REPO = Path(__file__).resolve().parents[1]


class CountingStore(Store):
    """A store whose saves a test counts: what a test could not hand the root before."""

    saves = 0

    def save(self, rows: list[Row], *args: Any, **kwargs: Any) -> None:
        type(self).saves += len(rows)
        super().save(rows, *args, **kwargs)


def test_the_root_uses_the_store_it_is_given(tmp_path):
    store = CountingStore(tmp_path / "given.db")
    root = RootServer(RootConfig(db=tmp_path / "ignored.db", node_id="root", **FAST_COLLECTOR), store=store)
    root.start()
    agent = make_agent([root.address], tmp_path / "agent.sock", "agent0")
    run = telemetry.init(job="given", rank=0, world_size=1, agent=f"unix:{tmp_path / 'agent.sock'}",
                         last_words=False, captures=False)
    try:
        assert root.store is store and root.finaliser.store is store and root.node.sink is root.finaliser
        for step in range(1, 4):
            run.log(step, loss=float(step))
            run.end_step(step)
        assert run.close(20) is True
        assert CountingStore.saves >= 3, "the windows were persisted through the store given"
        assert not (tmp_path / "ignored.db").exists(), "no second store was opened from the config"
    finally:
        run.close(0.1)
        stop_all(agent, root)


def test_no_collaborator_is_set_on_the_roots_parts_after_they_are_built():
    tree = ast.parse((REPO / "collectors" / "root" / "server.py").read_text())
    set_after = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                owner = target.value if isinstance(target, ast.Attribute) else None
                if ((isinstance(owner, ast.Attribute) or (isinstance(owner, ast.Name) and owner.id != "self"))
                        and isinstance(target, ast.Attribute) and target.attr in {"sink", "complete", "runs", "reads", "events", "forensics",
                                            "ask_forensics", "hosts", "detector_settings"}):
                    set_after.append(f"line {node.lineno}: {ast.unparse(target)}")
    assert set_after == [], set_after
