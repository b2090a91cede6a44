"""The Lightning and Hugging Face Trainer callbacks with the real libraries: 2 CPU ranks under torchrun (DDP on
gloo) against a real local tree (an in-process root and agent; the ranks are real processes on its socket).

Each rank trains twice per framework from one seed, without and with the callback (tests/integration_train.py):
the losses and final weights must be identical, every rank's figures must reach the root for every
optimizer step (gradient accumulation: one step per optimizer step), and the rank made slow must be
named by the straggler detector (judged on compute_time, as under DDP every rank's wall step time is
the slowest one's). The frameworks run one after the other in ONE torchrun job (`trained`), each as its own
telemetry job: torch, Lightning and transformers start once per rank, not once per framework (each start
was most of a test's time: ~5 s quiet, a minute or more on a loaded 2-core machine).
"""

from __future__ import annotations

import importlib.util
import json
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from collectors.detectors.suite import DetectorsConfig
from helpers_tree import api_get, make_agent, make_root, stop_all, wait_for
from helpers_tree import steps as api_steps
from torchrun_tree import JobFailed, run_job

pytest.importorskip("torch")
import torch.distributed as dist

FRAMEWORK_TIMEOUT_S = 150  # one framework's two trainings under torchrun, at most
pytestmark = [
    pytest.mark.timeout(2 * FRAMEWORK_TIMEOUT_S + 60),  # the first test starts the job of both frameworks
    pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available"),
]

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "integration_train.py"
WORLD, STEPS, ACCUMULATE = 2, 8, 2
SLOW_RANK, SLOW_FROM, SLOW_S = 1, 3, 0.12  # per micro-batch: ~10x a step's own work here
PEAK = 1e7  # a made-up CPU peak FLOP/s, so that mfu is logged
PER_STEP = ("step_time", "loss", "grad_norm", "lr", "dataloader_wait", "sync_wait", "compute_time")


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    tmp = tmp_path_factory.mktemp("integrations")
    root = agent = None
    try:
        root = make_root(tmp / "root.db",
                         detectors=DetectorsConfig.from_mapping({"straggler": {"metric": "compute_time"}}))
        # A step's window seals once both ranks closed it; the deadline only matters for a rank descheduled on a
        # loaded machine, whose late values would reach the detectors after the window they belong to.
        agent = make_agent([root.address], tmp / "agent.sock", "agent0", deadline_floor_s=2.0)
        yield {"api": root.api_address, "agent": f"unix:{agent.socket_path}"}
    finally:
        stop_all(agent, root)


def rank_lines(out: str) -> list[dict]:
    """Every rank's JSON line, found anywhere in torchrun's shared stdout (two ranks' prints can share a line)."""
    decoder, found, at = json.JSONDecoder(), [], out.find('{"rank"')
    while at >= 0:
        value, end = decoder.raw_decode(out, at)
        found.append(value)
        at = out.find('{"rank"', end)
    return found


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def run_frameworks(script: Path, frameworks: list[str], args: list[str], prefix: str, agent: str) -> dict[str, Any]:
    """`script FRAMEWORK... --job PREFIX ARGS` under torchrun (WORLD ranks, offline Hugging Face) to its end, the
    frameworks one after the other in the same ranks (framework F's telemetry job: PREFIX-F). Returns what
    `framework_ranks` reads: every rank's JSON lines (those printed before a failure too) and the job's failure,
    if any."""
    if not frameworks:
        return {"prefix": prefix, "frameworks": frameworks, "lines": [], "error": "no framework installed", "out": ""}
    try:
        out = run_job(WORLD, script, [*frameworks, "--job", prefix, *args], agent, prefix,
                      timeout=FRAMEWORK_TIMEOUT_S * len(frameworks),
                      launcher=("--rdzv-id", prefix, "--max-restarts", "0"),
                      env={"TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"})
    except JobFailed as failed:
        return {"prefix": prefix, "frameworks": frameworks, "lines": rank_lines(failed.out), "error": str(failed),
                "out": failed.out}
    return {"prefix": prefix, "frameworks": frameworks, "lines": rank_lines(out), "error": None, "out": out}


def framework_ranks(trained: dict[str, Any], framework: str) -> tuple[str, list[dict]]:
    """One framework's job and its ranks' JSON lines, by rank (from `run_frameworks`). A set-up whose every rank
    printed its line is checked whether or not the job failed later; otherwise the failure named is the set-up's
    own (each rank's traceback), or the earlier set-up that failed before it ran, or else the job's."""
    mine = [r for r in trained["lines"] if r["framework"] == framework]
    failures = [r for r in mine if "error" in r]
    if failures:
        raise AssertionError("\n".join(f"set-up {framework} failed on rank {r['rank']}:\n{r['error']}"
                                       for r in sorted(failures, key=lambda r: r["rank"])))
    if sorted(r["rank"] for r in mine) != list(range(WORLD)) and trained["error"] is not None:
        before = trained["frameworks"][:trained["frameworks"].index(framework)] \
            if framework in trained["frameworks"] else []
        failed = [f for f in before if any(r["framework"] == f and "error" in r for r in trained["lines"])]
        if failed:
            raise AssertionError(f"never ran: set-up {failed[0]} failed before it")
        raise AssertionError(f"set-up {framework}: the torchrun job of {trained['frameworks']} failed: "
                             f"{trained['error']}")
    assert sorted(r["rank"] for r in mine) == list(range(WORLD)), (framework, trained["out"][-3000:])
    return f"{trained['prefix']}-{framework}", sorted(mine, key=lambda r: r["rank"])


@pytest.fixture(scope="module")
def trained(tree: dict) -> dict[str, Any]:
    """Both frameworks (those installed) trained under DDP in one torchrun job."""
    frameworks = [f for f in ("lightning", "transformers") if installed(f)]
    return run_frameworks(SCRIPT, frameworks, ["--steps", str(STEPS), "--accumulate", str(ACCUMULATE), "--peak-flops",
                                               str(PEAK), "--slow-rank", str(SLOW_RANK), "--slow-from",
                                               str(SLOW_FROM), "--slow-seconds", str(SLOW_S)],
                          f"ddp-{uuid.uuid4().hex[:8]}", tree["agent"])


def _rows(api: str, job: str, metric: str, steps: range) -> dict[int, dict]:
    def complete() -> dict[int, dict] | None:
        rows = {row["step"]: row for row in api_steps(api, job, metric)}
        if not set(rows) >= set(steps) or any(rows[s]["count"] < WORLD for s in steps):
            return None
        return rows

    return wait_for(complete, timeout=20, what=f"{metric}: steps {steps} complete at the root")


def check_training_and_figures(api: str, job: str, ranks: list[dict],
                               per_step: tuple[str, ...] = PER_STEP) -> dict[str, dict[int, dict]]:
    """What every framework and strategy must give: no change to training, every rank's figures (`per_step`, and
    mfu) for every optimizer step, one lr on every rank."""
    for r in ranks:
        assert r["telemetry"]["losses"] == r["plain"]["losses"], "the callback changed training"
        assert r["telemetry"]["checksum"] == r["plain"]["checksum"], "the callback changed the weights"
        assert r["telemetry"]["durable"] is True, "everything logged is durable at the root"
    figures = {m: _rows(api, job, m, range(STEPS)) for m in per_step}
    figures["mfu"] = _rows(api, job, "mfu", range(1, STEPS))  # step 0 is the one whose FLOPs are counted
    for metric, rows in figures.items():
        assert max(rows) == STEPS - 1, (metric, sorted(rows))  # one step per optimizer step, not per micro-batch
        for row in rows.values():
            assert row["count"] == WORLD and row["missing"] == [] and row["expected"] == WORLD, (metric, row)
    assert all(0 < figures["mfu"][s]["min"] for s in range(1, STEPS))
    assert all(figures["lr"][s]["min"] == figures["lr"][s]["max"] for s in range(STEPS)), "one lr on every rank"
    return figures


def _check(api: str, job: str, ranks: list[dict]) -> dict[str, dict[int, dict]]:
    """Under DDP, besides: the slow rank named by the straggler detector."""
    figures = check_training_and_figures(api, job, ranks)
    # The straggler: rank SLOW_RANK's own work, not the wall step time every rank shares under DDP.
    wait_for(lambda: [e for e in api_get(api, f"/api/v1/jobs/{job}/events")[1]["events"]
                      if e["kind"] == "straggler" and e["ranks"] == [SLOW_RANK]],
             timeout=10, what=f"a straggler event naming rank {SLOW_RANK}")
    # Per step, the slow rank does the most work (a majority: a rank descheduled for a step on a loaded
    # machine may outdo it once).
    slow = [figures["compute_time"][s]["argmax"] for s in range(SLOW_FROM, STEPS)]
    assert slow.count(SLOW_RANK) > len(slow) / 2, slow
    return figures


def test_lightning_callback_under_ddp_with_accumulation(tree: dict, trained: dict) -> None:
    pytest.importorskip("lightning")
    job, ranks = framework_ranks(trained, "lightning")
    figures = _check(tree["api"], job, ranks)
    for step in range(STEPS):
        # the step's loss: each rank's micro-batch losses (Lightning divides them by the accumulation count) summed
        per_rank = [sum(r["plain"]["losses"][step * ACCUMULATE:(step + 1) * ACCUMULATE]) for r in ranks]
        assert math.isclose(figures["loss"][step]["mean"], sum(per_rank) / WORLD, rel_tol=1e-6)
        assert math.isclose(figures["lr"][step]["mean"], 0.05 * 0.9 ** step, rel_tol=1e-6), "lr of that step"
    # logged before Lightning clips to 0.5 (gradient_clip_val)
    assert max(figures["grad_norm"][s]["mean"] for s in range(STEPS)) > 0.5


def test_transformers_callback_under_ddp_with_accumulation(tree: dict, trained: dict) -> None:
    pytest.importorskip("transformers")
    job, ranks = framework_ranks(trained, "transformers")
    figures = _check(tree["api"], job, ranks)
    # The Trainer's own logged loss (logging_steps=1: mean over ranks) is what the root holds per step.
    logged = ranks[0]["plain"]["losses"]
    assert len(logged) == STEPS
    for step in range(STEPS):
        assert math.isclose(figures["loss"][step]["mean"], logged[step], rel_tol=1e-4), (step, logged)
    assert max(figures["grad_norm"][s]["mean"] for s in range(STEPS)) > 0.5  # before max_grad_norm=0.5 clips


def test_lightning_callback_without_an_agent_leaves_training_alone(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """One process, no agent listening: fit runs to the end, its end does not wait for the agent, and the
    callback says nothing was durable."""
    import time

    L = pytest.importorskip("lightning.pytorch")
    import torch

    from telemetry.integrations import lightning as integration
    from telemetry.integrations.lightning import TelemetryCallback

    closing: list[float] = []
    close_run = integration.close_run

    def timed_close(run: Any, timeout: float) -> bool:
        started = time.monotonic()
        try:
            return close_run(run, timeout)
        finally:
            closing.append(time.monotonic() - started)

    monkeypatch.setattr(integration, "close_run", timed_close)

    class Tiny(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            return self.net(batch[0]).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    data = torch.utils.data.TensorDataset(torch.randn(32, 4))
    callback = TelemetryCallback(job="no-agent", agent=f"unix:{tmp_path}/nobody.sock")
    trainer = L.Trainer(accelerator="cpu", devices=1, max_steps=6, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[callback])
    trainer.fit(Tiny(), torch.utils.data.DataLoader(data, batch_size=4))
    assert trainer.global_step == 6
    assert callback.durable is False and callback.run is None
    assert len(closing) == 1 and closing[0] < 5, f"the end of fit waited {closing} s for an absent agent"
