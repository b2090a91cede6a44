"""The committed generated code in telemetry/v1/ must be exactly what scripts/gen_proto.py produces."""

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_committed_generated_code_matches_the_generator(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "scripts" / "gen_proto.py"), "--out", str(tmp_path)],
                   check=True, capture_output=True)
    fresh = tmp_path / "telemetry" / "v1"
    committed = REPO / "telemetry" / "v1"
    fresh_names = sorted(p.name for p in fresh.iterdir() if p.suffix in {".py", ".pyi"})
    committed_names = sorted(p.name for p in committed.iterdir() if p.suffix in {".py", ".pyi"})
    assert fresh_names == committed_names, "generated file set differs: run python scripts/gen_proto.py"
    for name in fresh_names:
        assert (fresh / name).read_bytes() == (committed / name).read_bytes(), (
            f"telemetry/v1/{name} differs from the generator's output: run python scripts/gen_proto.py")
