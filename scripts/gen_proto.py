"""Regenerate telemetry/v1/ from proto/telemetry/v1/*.proto.

The generated code lives only in telemetry/v1/ (nothing hand-written there),
is committed, and is produced by this one script with the grpcio-tools pinned
in pyproject.toml, so every checkout generates byte-identical code.
tests/test_proto_codegen.py fails when the committed code drifts from it.

Usage: python scripts/gen_proto.py [--out DIR]   (DIR defaults to the repo root)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from grpc_tools import protoc

REPO = Path(__file__).resolve().parent.parent
PROTO_ROOT = REPO / "proto"
PACKAGE_DIR = Path("telemetry") / "v1"
INIT_TEXT = '"""Generated protobuf and gRPC code (scripts/gen_proto.py). Do not edit."""\n'


def generate(out_root: Path) -> list[Path]:
    """Run protoc into out_root and return the files written, sorted."""
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in (PROTO_ROOT / PACKAGE_DIR).glob("*.proto"))
    if not protos:
        raise SystemExit(f"no .proto files under {PROTO_ROOT / PACKAGE_DIR}")
    target = out_root / PACKAGE_DIR
    target.mkdir(parents=True, exist_ok=True)
    for stale in target.glob("*_pb2*.py*"):
        stale.unlink()
    include = str(Path(protoc.__file__).parent / "_proto")
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *protos,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    (target / "__init__.py").write_text(INIT_TEXT)
    return sorted(p for p in target.iterdir() if p.is_file() and p.suffix in {".py", ".pyi"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=REPO, help="output root (default: the repository root)")
    args = parser.parse_args(argv)
    for path in generate(args.out.resolve()):
        print(path.relative_to(args.out.resolve()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
