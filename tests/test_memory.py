"""Freed heap memory goes back to the OS after jobs are forgotten (collectors/common/memory.py)."""

from __future__ import annotations

import platform

import pytest

import telemetry
from collectors.common.memory import FreedMemory
from helpers_tree import make_agent, make_root, stop_all, wait_for


def test_release_is_rate_limited():
    freed = FreedMemory(min_interval_s=30.0)
    if freed._trim is None:
        pytest.skip("no glibc malloc_trim here")
    assert freed.release(100.0) and not freed.release(110.0) and freed.release(131.0)
    assert freed.trims == 2


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_agent_and_root_trim_after_forgetting_a_finished_job(tmp_path):
    root = make_root(tmp_path / "root.db")
    agent = make_agent([root.address], tmp_path / "a.sock", "agent0")
    try:
        run = telemetry.init(job="trimmed", rank=0, world_size=1, agent=f"unix:{agent.socket_path}")
        with run.step(1):
            run.log(1, loss=1.0)
        assert run.close(10)
        assert agent.freed.trims == root.freed.trims == 0  # nothing forgotten yet (a closed job has a grace)
        wait_for(lambda: agent.freed.trims >= 1 and root.freed.trims >= 1, timeout=40,
                 what="both tiers trimmed after forgetting the job (the only job they saw)")
    finally:
        stop_all(agent, root)


_THRESHOLD_PROBE = r"""
import ctypes, os, sys, threading
sys.path.insert(0, os.getcwd())
class MI2(ctypes.Structure):
    _fields_ = [(f, ctypes.c_size_t) for f in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]
libc = ctypes.CDLL("libc.so.6")
libc.mallinfo2.restype = MI2
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    from collectors.common.memory import FreedMemory
    FreedMemory()
out = []
def thread():  # in a thread of its own, as the root's API requests are (a thread arena, not the main heap)
    libc.free(libc.malloc(1 << 20))  # glibc's dynamic thresholds rise to 1 MiB here, unless fixed
    before = libc.mallinfo2().hblkhd
    p = libc.malloc(1 << 20)
    out.append(libc.mallinfo2().hblkhd - before >= 1 << 20)  # mmapped (given back on free), not from the arena
    libc.free(p)
t = threading.Thread(target=thread)
t.start()
t.join()
print("mmapped" if out[0] else "arena")
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc thresholds")
@pytest.mark.parametrize("mode, expected", [("dynamic", "arena"), ("fixed", "mmapped")])
def test_large_buffers_freed_by_threads_do_not_stay_in_their_arenas(mode, expected):
    """Without fixed thresholds, one 1 MiB buffer freed makes the next ones come from (and stay in) the arena
    of the thread that asks: the root's RSS grew 7 MiB over 900 soak jobs that way (collectors/common/memory.py).
    A FreedMemory (every service makes one) fixes the thresholds, so such buffers are mmapped and given back."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run([sys.executable, "-c", _THRESHOLD_PROBE, mode], capture_output=True, text=True, timeout=60,
                          env=env, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == expected


_ARENA_PROBE = r"""
import ctypes, os, sys, threading
sys.path.insert(0, os.getcwd())
if sys.argv[1] == "tuned":
    from collectors.common.memory import tune_allocator
    assert tune_allocator()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype, libc.malloc.argtypes = ctypes.c_void_p, [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
held = []
def thread():  # each thread allocates while the others hold theirs: glibc gives a busy arena's newcomer another
    held.append(libc.malloc(4096))
    barrier.wait()
barrier = threading.Barrier(4)
threads = [threading.Thread(target=thread) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.malloc_stats()  # one "Arena N:" block per arena, on stderr
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas")
@pytest.mark.parametrize("mode, most", [("default", None), ("tuned", 1)])
def test_a_service_process_keeps_one_malloc_arena(mode, most):
    """A service (`telemetry collector`/`agent`: collectors/cli.py _serve) tunes the allocator before its threads
    start, so the buffers one thread makes and another frees stay in one arena (collectors/common/memory.py:
    0.81x of a rack's CPU). Without it, threads that allocate get arenas of their own."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "GLIBC_TUNABLES"))}
    done = subprocess.run([sys.executable, "-c", _ARENA_PROBE, mode], capture_output=True, text=True, timeout=60,
                          env=env, cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0, done.stderr
    arenas = sum(line.startswith("Arena ") for line in done.stderr.splitlines())
    if most is None:
        assert arenas > 1, done.stderr
    else:
        assert 1 <= arenas <= most, done.stderr


def _thread_arenas(pid: int) -> int:
    """glibc's thread arenas in a live process: each is a heap of HEAP_MAX_SIZE (64 MiB on 64-bit) reserved at an
    address aligned to that size, its used part read-write, the rest PROT_NONE."""
    heap = 64 << 20
    maps = []
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            span, perms = line.split()[:2]
            lo, hi = (int(x, 16) for x in span.split("-"))
            maps.append((lo, hi, perms))
    arenas = 0
    for i, (lo, hi, perms) in enumerate(maps):
        if lo % heap or not perms.startswith("rw"):
            continue
        end = hi
        for nlo, nhi, nperms in maps[i + 1:]:
            if nlo != end or not nperms.startswith("---"):
                break
            end = nhi
        arenas += end - lo == heap
    return arenas


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc arenas")
def test_a_running_collector_has_no_thread_arenas(tmp_path):
    """`telemetry collector` tunes the allocator before its threads start (collectors/cli.py _serve): a live root,
    its gRPC and API threads running, holds no thread arena (15 of them before this was done, idle)."""
    from collectors.sim.procs import Proc, python_module
    proc = Proc("root", python_module("collectors.cli", "collector", "--id", "root", "--listen", "127.0.0.1:0",
                                      "--db", str(tmp_path / "root.db"), "--api", "127.0.0.1:0"), tmp_path).start()
    try:
        assert proc.popen is not None
        assert _thread_arenas(proc.popen.pid) == 0
    finally:
        proc.stop()


def test_sqlite_page_caches_are_bounded(tmp_path):
    """Every connection the root holds has an explicit page cache bound (collectors/root/store.py CACHE_KIB)."""
    from contextlib import closing

    from collectors.detectors.events import EventLog
    from collectors.root.store import CACHE_KIB, Store

    store = Store(tmp_path / "root.db")
    events = EventLog(store.path)
    try:
        with closing(store.reader()) as reader:
            for db in (store._db, events._db, reader):
                assert db.execute("PRAGMA cache_size").fetchone()[0] == -CACHE_KIB
    finally:
        events.close()
        store.close()
