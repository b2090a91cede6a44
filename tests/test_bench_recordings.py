"""bench/recordings.py: the recorded matrices are stored gzipped; every reader names them either way."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from bench.recordings import read_json, recorded, recording_name

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def test_a_recording_reads_the_same_by_either_name_and_plain_wins_where_both_exist(tmp_path: Path) -> None:
    (tmp_path / "detection_matrix_a.json.gz").write_bytes(gzip.compress(b'{"runs": [1]}'))
    (tmp_path / "detection_matrix_b.json").write_text('{"runs": [2]}')
    (tmp_path / "detection_matrix_b.json.gz").write_bytes(gzip.compress(b'{"runs": ["stale"]}'))
    (tmp_path / "other.json").write_text("{}")
    assert read_json(tmp_path / "detection_matrix_a.json") == read_json(tmp_path / "detection_matrix_a.json.gz")
    assert read_json(tmp_path / "detection_matrix_a.json") == {"runs": [1]}
    found = recorded(tmp_path, "detection_matrix*.json")
    assert [p.name for p in found] == ["detection_matrix_a.json.gz", "detection_matrix_b.json"]
    assert [read_json(p)["runs"] for p in found] == [[1], [2]]
    assert [recording_name(p) for p in found] == ["detection_matrix_a.json", "detection_matrix_b.json"]


def test_the_committed_matrices_are_all_readable_recordings() -> None:
    """Every committed matrix is found and holds runs (a bad gzip or a name the glob misses fails here)."""
    found = recorded(RESULTS, "detection_matrix*.json")
    assert len(found) >= 35, [p.name for p in found]
    for path in found:
        body = read_json(path)
        assert isinstance(body["runs"], list) and body["runs"], path.name
        json.dumps(body["runs"][0])
