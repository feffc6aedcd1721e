"""How the test processes allocate memory: freed memory reused, not zeroed again (glibc only).

glibc serves every allocation over 32 MiB -- every big numpy array -- with a fresh ``mmap`` and hands it back
to the kernel on ``free``; the next array of that size faults in and zeroes every page again.  The SIMT model
and the numpy reference allocate and free such arrays op after op, plan after plan (the real-size checks, the
model fixtures, fusionstitching's search over them), and on a VM like this project's CI zeroing pages is slow:
``perf`` put a third of ``swiglu_4096x11008``'s real-size check in the kernel's ``clear_page_erms`` (19.6 s
in all; 11.6 s with freed memory kept, on 2 cores).

:func:`keep_freed_memory` (``tests/conftest.py`` calls it in every test process) turns glibc's mmap off and
its trim threshold up, so freed blocks stay in the heap and are reused, and numpy's transparent huge pages
off (a huge page fault zeroes 2 MiB at once); :func:`trim` hands the free memory
back (after each test module).  One kind of test must not keep it: the heap then fragments around
gigabyte arrays (log_softmax 8192x32000 peaks at 4.18 GB instead of 3.25), so the few whose inputs pass
:data:`HEAP_LIMIT_BYTES` run under :func:`returned_to_kernel`, glibc's default.  Elsewhere (macOS, musl) all
three do nothing.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Iterable

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD, M_MMAP_MAX = -1, -3, -4     # glibc's malloc.h
MMAP_MAX_DEFAULT = 65536                      # glibc's DEFAULT_MMAP_MAX
MMAP_THRESHOLD_USUAL = 32 * 2**20             # where glibc's sliding threshold settles (DEFAULT_MMAP_THRESHOLD_MAX)
TRIM_KEPT = 2**31 - 1                         # the largest threshold mallopt takes: never trim on free

#: inputs larger than this run with glibc's default (the suite's peak memory, README "Testing")
HEAP_LIMIT_BYTES = 512 * 2**20

_libc = None


def keep_freed_memory() -> bool:
    """Keep freed memory in this process's heap, and numpy's arrays off huge pages (call it before numpy is
    imported).  False where the C library is not glibc, or where ``ASTITCH_TEST_MALLOC=default`` asks for
    glibc's and numpy's own policy, to compare."""
    global _libc
    if os.environ.get("ASTITCH_TEST_MALLOC", "") == "default":
        return False
    if "numpy" not in sys.modules:       # numpy reads it once, at import: no huge pages for its arrays
        os.environ.setdefault("NUMPY_MADVISE_HUGEPAGE", "0")
    try:
        libc = ctypes.CDLL(None)
        _ = libc.mallopt, libc.malloc_trim              # glibc has both
    except (OSError, AttributeError):
        return False
    if libc.mallopt(M_MMAP_MAX, 0) != 1 or libc.mallopt(M_TRIM_THRESHOLD, TRIM_KEPT) != 1:
        return False
    _libc = libc
    return True


def trim() -> None:
    """Hand the heap's free memory back to the kernel."""
    if _libc is not None:
        _libc.malloc_trim(0)


@contextlib.contextmanager
def returned_to_kernel():
    """glibc's default for a block of code: big arrays mmapped and unmapped (no fragmentation, no reuse)."""
    if _libc is None:
        yield
        return
    trim()
    # once mallopt has been called glibc's threshold no longer slides up from 128 KiB: set where it settles,
    # or every mid-size array is mmapped too (log_softmax 8192x32000: 103 s instead of 60)
    _libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_USUAL)
    _libc.mallopt(M_MMAP_MAX, MMAP_MAX_DEFAULT)
    try:
        yield
    finally:
        _libc.mallopt(M_MMAP_MAX, 0)


def for_inputs(inputs: Iterable):
    """The policy for a test over these inputs: :func:`returned_to_kernel` past :data:`HEAP_LIMIT_BYTES`."""
    big = sum(getattr(a, "nbytes", 0) for a in inputs) > HEAP_LIMIT_BYTES
    return returned_to_kernel() if big else contextlib.nullcontext()
