"""Regenerate the README's pictures from a real demo run: the live view and the demo's plot.

    .venv/bin/python scripts/readme_images.py            # writes docs/images/live-view.svg and docs/images/demo.png

It runs `telemetry demo`'s defaults (64 simulated ranks, 60 steps, the straggler, loss spike, NaN and hang
injected; about a minute and a half), records the live view as the job ends (rich's Console(record=True)
.save_svg: the frame a user sees then) and writes the plot the demo's --plot writes. Nothing is drawn by hand:
rerun it when the view or the plot changes.
"""

from __future__ import annotations

import argparse
import io
import sys
from pathlib import Path
from typing import Any

from rich.console import Console

from collectors.demo.plot import plot
from collectors.demo.run import Demo, DemoConfig
from collectors.demo.view import render

IMAGES = Path(__file__).resolve().parents[1] / "docs" / "images"
WIDTH = 150  # columns of the recorded frame
INJECTED = {"straggler", "loss_spike", "nonfinite", "hang"}


class RecordingDemo(Demo):
    """The demo, keeping the frame of the live view at the job's end."""

    frame: Any = None

    def _job_ended(self) -> None:
        super()._job_ended()
        assert self.watcher is not None
        self.frame = render(self.watcher.snapshot(), self.world, self.config.steps, self.scenario.describe(False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=IMAGES, help="folder for live-view.svg and demo.png")
    parser.add_argument("--api-port", type=int, default=0, help="the root's API port (0: any free one)")
    args = parser.parse_args()
    progress = Console(file=sys.stderr)
    demo = RecordingDemo(DemoConfig(api_port=args.api_port, live=False), progress)
    try:
        report = demo.run()
    finally:
        demo.sim.cleanup()
    if demo.frame is None:
        raise SystemExit("the job never ended: no frame recorded")
    raised = {event["kind"] for event in report.get("events_as_raised", [])}
    if not raised >= INJECTED:  # a machine too loaded for the demo's timing: not a picture to publish
        raise SystemExit(f"the run raised {sorted(raised)}, not every injected fault {sorted(INJECTED)}: "
                         "nothing written; rerun on a less loaded machine")
    args.out.mkdir(parents=True, exist_ok=True)
    recorder = Console(record=True, width=WIDTH, file=io.StringIO(), force_terminal=True, color_system="truecolor")
    recorder.print(demo.frame)
    recorder.save_svg(str(args.out / "live-view.svg"), title="telemetry demo: the live view as the job ends")
    plot(report, demo.watcher.hardware_history if demo.watcher else [], args.out / "demo.png")
    print(f"wrote {args.out / 'live-view.svg'} and {args.out / 'demo.png'}")


if __name__ == "__main__":
    main()
