#!/usr/bin/env python3
"""List the `type: ignore` and `noqa` comments that do not say why, in the repository's tracked Python files.

Why: a suppression silences a finding for good. mypy (ignore-without-code) and ruff already make each one name
its codes; this makes each one name its reason too, so that the next reader can tell whether it still holds and
what removing it would take (the codebase issue, item 3). scripts/test runs it after mypy.

The rule, for each comment (read with tokenize: a string or docstring that mentions a suppression is not one)
holding a suppression, i.e. `# type: ignore`, `# type: ignore[CODES]`, `# noqa`, `# noqa: CODES`, or the
file-wide `# ruff: noqa` / `# flake8: noqa` (with or without codes): the text after the last suppression in
that comment must be a reason, which means
  - after optional spaces it starts with a separator: `#`, `(`, `--`, `-`, an en dash or an em dash;
  - what follows the separator holds at least 3 words, a word being a whitespace-separated piece with a letter.
So `# type: ignore[misc]  # a base chosen at run time` and `# noqa: E402  (sys.path is set above)` pass, while
`# noqa: E402`, `# type: ignore[arg-type]  # ndarray` and `# noqa: E721 (bool refused)` do not. One reason may
follow several suppressions on a line (`# type: ignore[misc]  # noqa: B009  # ...`).

Which files: `git ls-files '*.py'` (tests/ and bench/ included), less protoc's output (telemetry/v1/*_pb2*.py);
--paths narrows the run to some folders or files. That a suppression still suppresses something is checked by
the tools themselves: mypy's warn_unused_ignores and ruff's RUF100 (pyproject.toml).

Exit status: 0 when none is found, 1 when some are (each printed as `path:line: comment`), 2 when a file
cannot be read or the file list cannot be had from git.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tokenize
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]

_CODE = r"[A-Z]+[0-9]+"
SUPPRESSION = re.compile(
    r"#\s*(?:"
    r"type:\s*ignore(?:\[[^\]]*\])?"
    rf"|(?:(?i:ruff|flake8)\s*:\s*)?(?i:noqa)(?::\s*{_CODE}(?:(?:\s*,\s*|\s+){_CODE})*)?"
    r")"
)
REASON = re.compile(r"\s*(?:#|\(|--|-|\u2013|\u2014)(?P<text>.*)")
MIN_WORDS = 3


def has_reason(after: str) -> bool:
    """Whether `after`, the comment's text after its last suppression, is a reason (the rule above)."""
    match = REASON.match(after)
    if match is None:
        return False
    words = [piece for piece in match["text"].split() if any(ch.isalpha() for ch in piece)]
    return len(words) >= MIN_WORDS


def unexplained(path: Path) -> list[tuple[int, str]]:
    """(line, comment) of each suppression in `path` without a reason; raises OSError, SyntaxError, ..."""
    found = []
    with tokenize.open(path) as source:
        for token in tokenize.generate_tokens(source.readline):
            if token.type != tokenize.COMMENT:
                continue
            suppressions = list(SUPPRESSION.finditer(token.string))
            if suppressions and not has_reason(token.string[suppressions[-1].end():]):
                found.append((token.start[0], token.string))
    return found


def tracked_python_files() -> list[str]:
    """The tracked *.py files, as paths relative to the repository root."""
    listed = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=ROOT, check=True, capture_output=True)
    return [name for name in listed.stdout.decode().split("\0") if name]


def under(path: str, prefixes: Iterable[str]) -> bool:
    """Whether `path` is one of `prefixes` or lies in one of them (folders given with or without "/")."""
    parts = PurePosixPath(path).parts
    for prefix in prefixes:
        wanted = PurePosixPath(prefix.rstrip("/")).parts
        if wanted == ("",) or wanted == () or parts[: len(wanted)] == wanted:
            return True
    return False


def generated(path: str) -> bool:
    """protoc's output (scripts/gen_proto.py writes it): not ours to annotate."""
    pure = PurePosixPath(path)
    return pure.parent == PurePosixPath("telemetry/v1") and "_pb2" in pure.name


def selected(files: Iterable[str], paths: Sequence[str] | None) -> list[str]:
    chosen = []
    for name in files:
        if generated(name):
            continue
        if paths is not None and not under(name, paths):
            continue
        chosen.append(name)
    return chosen


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0] if __doc__ else None)
    parser.add_argument("--paths", nargs="+", metavar="PATH",
                        help="only these folders or files (relative to the repository root)")
    args = parser.parse_args(argv)
    paths = None if args.paths is None else [PurePosixPath(p).as_posix() for p in args.paths]
    try:
        files = tracked_python_files()
    except (OSError, subprocess.CalledProcessError) as exc:
        said = exc.stderr.decode(errors="replace").strip() if isinstance(exc, subprocess.CalledProcessError) else ""
        print(f"check_suppressions: cannot list the tracked files with git: {exc} {said}".rstrip(), file=sys.stderr)
        return 2
    bad = 0
    unreadable = 0
    for name in selected(files, paths):
        try:
            found = unexplained(ROOT / name)
        except (OSError, SyntaxError, tokenize.TokenError) as exc:
            print(f"{name}: cannot read: {exc}", file=sys.stderr)
            unreadable += 1
            continue
        for line, comment in found:
            print(f"{name}:{line}: {comment}")
        bad += len(found)
    if unreadable:
        return 2
    if bad:
        print(f"check_suppressions: {bad} suppression(s) without a reason: after the code(s), write a separator "
              f"(# or a parenthesis or a dash) and at least {MIN_WORDS} words saying why (the rule: this script's "
              "docstring)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
