"""What the harness reads from a training job's shared torchrun log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def done_lines(log: Path) -> list[dict[str, Any]]:
    """Each rank's closing JSON line in a torchrun log (see done_in)."""
    return done_in(log.read_text(errors="replace"))


def done_in(text: str) -> list[dict[str, Any]]:
    """Each rank's closing JSON line (the ranks share torchrun's output, so look inside every line)."""
    out, marker, decoder = [], '{"event": "done"', json.JSONDecoder()
    for line in text.splitlines():
        at = line.find(marker)
        while at >= 0:  # two ranks' prints can land on one line: `{...rank 1...}{...rank 2...}`
            try:
                out.append(decoder.raw_decode(line, at)[0])
            except ValueError:
                pass
            at = line.find(marker, at + 1)
    return out
