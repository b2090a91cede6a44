"""Reading the recordings in bench/results, which are kept gzipped when large.

The recorded detection matrices (`detection_matrix*.json`, every run's per-step waits, 1-4 MB each, ~43 MB in
all) are stored as `NAME.json.gz`: uncompressed they pushed the repository's working tree past the 64 MiB the
device tool carries to a lent GPU machine. A reader names a recording either way (`X.json` or `X.json.gz`) and
gets the same JSON; `bench/detection.py` still writes plain `.json` (gzip it with `gzip -9n` before committing).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

GZ = ".gz"


def read_json(path: Path) -> Any:
    """The JSON in `path`, or in `path` + ".gz" when only the compressed copy exists (or `path` names it)."""
    if path.suffix == GZ:
        return json.loads(gzip.decompress(path.read_bytes()))
    if not path.exists() and path.with_name(path.name + GZ).exists():
        return read_json(path.with_name(path.name + GZ))
    return json.loads(path.read_text())


def recorded(results: Path, pattern: str) -> list[Path]:
    """The recordings in `results` matching `pattern` (e.g. "detection_matrix*.json"), plain or gzipped, each once
    (the plain copy where both exist), in name order."""
    found = {path.name: path for path in results.glob(pattern + GZ)}
    found.update({path.name + GZ: path for path in results.glob(pattern)})
    return [found[name] for name in sorted(found)]


def recording_name(path: Path) -> str:
    """The recording's name as it was written (`X.json`), stored gzipped or not: what outputs label a set by."""
    return path.name.removesuffix(GZ)
