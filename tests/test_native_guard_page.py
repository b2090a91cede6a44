"""The native decoder reads nothing past its input's end: every cut of the fast-path tests' summaries is decoded
from a buffer that ends where an inaccessible page begins, in a child process (a read past the end is a SIGSEGV
there, a failure here, not the end of pytest).

Why a guard page: Python `bytes` always carry a NUL after their last byte and no protobuf tag is 0, so a one-byte
over-read of a tag from `bytes` changes nothing and not even AddressSanitizer sees it (session 43's review: both of
Reader::next_tag's bounds checks could be removed with every other test, and the sanitized fuzz, passing)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parent

SCRIPT = r"""
import ctypes, mmap, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import telemetry.summary._native  # the compiled decoder, not a fallback
from telemetry import Summary
import test_summary_decode_fast_paths as cases

page = mmap.PAGESIZE
buf = mmap.mmap(-1, 2 * page)
start = ctypes.addressof(ctypes.c_char.from_buffer(buf))
if ctypes.CDLL(None).mprotect(ctypes.c_void_p(start + page), page, 0) != 0:
    sys.exit("mprotect failed")
cuts = accepted = 0
for data in cases._summaries():
    assert len(data) <= page, len(data)
    for cut in range(len(data) + 1):
        piece = data[:cut]
        buf[page - len(piece):page] = piece
        try:
            Summary.from_bytes(memoryview(buf)[page - len(piece):page])
            accepted += 1
        except ValueError:
            pass
        cuts += 1
print(cuts, accepted)
"""


def test_every_cut_decodes_against_a_guard_page_without_reading_past_its_end() -> None:
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(TESTS), str(TESTS.parent)], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-3000:])
    cuts, accepted = map(int, proc.stdout.split())
    assert cuts > 1000 and 0 < accepted < cuts, (cuts, accepted)
