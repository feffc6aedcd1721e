"""The test processes' memory policy (tests/malloc_policy.py) does what the suite's time and peak rely on:
a freed big array's pages are reused without faulting in again, and under ``returned_to_kernel`` (the
8192x32000 real-size checks) an array the heap cannot hold is mmapped (and unmapped on free), so the heap
never grows around gigabyte arrays."""
from __future__ import annotations

import ctypes
import resource

import numpy as np
import pytest

import malloc_policy

MIB = 2**20
#: page faults at most when a 64 MiB array reuses freed memory (none, give or take a stray page; a fresh one
#: takes 16384, or 32 where the kernel backs it with 2 MiB pages)
REUSED = 4


class MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2`` (2.33+)."""
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


def mallinfo() -> MallInfo2:
    f = malloc_policy._libc.mallinfo2
    f.restype = MallInfo2
    return f()


@pytest.fixture
def glibc():
    if malloc_policy._libc is None:
        pytest.skip("the C library here is not glibc: the policy is off and changes nothing")
    if not hasattr(malloc_policy._libc, "mallinfo2"):
        pytest.skip("glibc older than 2.33: no mallinfo2 to read the heap with")


def faults_of_a_second_array() -> int:
    """Minor page faults taken by filling a 64 MiB array right after an equal one was filled and freed."""
    a = np.ones(64 * MIB // 8)
    del a
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    b = np.ones(64 * MIB // 8)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
    del b
    return faults


def mmapped_bytes_of_an_array_past_the_free_heap() -> int:
    """How many more bytes glibc holds in mmapped blocks while an array larger than all the heap's free
    memory is alive (never touched: address space only, no pages)."""
    info = mallinfo()
    before = info.hblkhd
    a = np.empty(info.fordblks + 64 * MIB, np.uint8)
    grown = mallinfo().hblkhd - before
    del a
    return grown


def test_a_freed_array_is_reused_without_faulting_in_again(glibc):
    assert faults_of_a_second_array() < REUSED
    assert mmapped_bytes_of_an_array_past_the_free_heap() == 0          # the heap grows instead


def test_returned_to_kernel_mmaps_what_the_heap_cannot_hold_and_then_keeps_freed_memory_again(glibc):
    with malloc_policy.returned_to_kernel():
        assert mmapped_bytes_of_an_array_past_the_free_heap() >= 64 * MIB
        small = [np.ones(4 * MIB // 8) for _ in range(8)]               # under 32 MiB: still from the heap
        del small
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        small = [np.ones(4 * MIB // 8) for _ in range(8)]
        assert resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before < REUSED
        del small
    assert mmapped_bytes_of_an_array_past_the_free_heap() == 0
    assert faults_of_a_second_array() < REUSED


def test_only_inputs_past_the_limit_are_returned_to_the_kernel(glibc):
    small = [np.zeros(10), np.zeros((2, 3), np.float32)]
    big = [np.empty(malloc_policy.HEAP_LIMIT_BYTES // 4 + 1, np.float32)]      # never touched: no pages
    with malloc_policy.for_inputs(small):
        assert mmapped_bytes_of_an_array_past_the_free_heap() == 0
    with malloc_policy.for_inputs(big):
        assert mmapped_bytes_of_an_array_past_the_free_heap() >= 64 * MIB
