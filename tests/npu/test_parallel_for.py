"""parallel_for, the worker pool of the native executor (ops/core/npu_threads.h,
docs/architecture.md §7): every unit once, chunks shared by the caller and the pool, nested
calls inline, and an exception thrown in a chunk on any thread reaches the caller, the pool
working on afterwards.  Driven through a small C++ probe (tests/helpers/parallel_for_probe.cc)."""
from __future__ import annotations

import ctypes

import pytest

from ratelnn._build import OPS_DIR, build_library

from helpers.paths import HELPERS

TOTAL = 64


@pytest.fixture(scope="module")
def probe():
    path = build_library("parallel_for_probe", [HELPERS / "parallel_for_probe.cc",
                                                OPS_DIR / "core" / "npu_threads.cc"], link_flags=["-pthread"])
    fn = ctypes.CDLL(str(path)).ratelnn_probe_parallel_for
    fn.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                   ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_size_t]

    def run(threads, sleep_us=0, throw_at=-1):
        total_sum, counts, err = ctypes.c_int64(), (ctypes.c_int64 * 5)(), ctypes.create_string_buffer(256)
        if fn(TOTAL, threads, sleep_us, throw_at, ctypes.byref(total_sum), counts, err, len(err)) != 0:
            raise RuntimeError(err.value.decode())
        return total_sum.value, dict(zip(("caller", "pool", "nested moved", "caller first", "pool first"), counts))
    run.library = str(path)
    return run


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_every_unit_once_on_the_caller_and_the_pool(probe, threads):
    got, counts = probe(threads, sleep_us=5000)
    assert got == TOTAL * (TOTAL - 1) // 2
    assert counts["caller"] >= 1 and counts["nested moved"] == 0, counts
    if threads == 1:
        assert counts["pool"] == 0, counts
    else:   # the caller sleeps 5 ms per chunk: a pool worker takes some of the 8-11 chunks
        assert counts["pool"] >= 1, counts


def test_each_thread_starts_on_its_own_range(probe):
    """With 2 threads the caller owns the first half of the chunks and the pool worker the
    second: the caller starts at unit 0, and the worker, whenever it runs anything, starts in
    the second half (it takes what is left of the first half only after its own range)."""
    for _ in range(5):
        _, counts = probe(2, sleep_us=2000)
        assert counts["caller first"] == 0, counts
        if counts["pool"]:
            assert counts["pool first"] >= TOTAL // 2, counts


def test_an_exception_in_a_chunk_reaches_the_caller(probe):
    for throw_at in (0, 40, TOTAL - 1):   # the caller's first chunk, a middle one, the last one
        with pytest.raises(RuntimeError, match=f"unit {throw_at} failed"):
            probe(2, sleep_us=500, throw_at=throw_at)
    assert probe(2)[0] == TOTAL * (TOTAL - 1) // 2   # the pool still works


@pytest.mark.parametrize("polling", [0, 1])
def test_callers_on_several_threads_share_the_pool(probe, polling):
    """Three threads calling at once, with 2 and 4 threads each, asleep and polling workers:
    every call runs each of its units exactly once (a worker offered one caller's call while
    busy with another's must never run a chunk twice, lose one, or touch a finished call)."""
    fn = ctypes.CDLL(probe.library).ratelnn_probe_concurrent_callers
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int, ctypes.c_int]
    fn.restype = ctypes.c_int64
    for threads in (2, 4):
        assert fn(3, 300, 37, threads, polling) == 0


def test_a_worker_on_the_callers_cpu_moves_off_it(probe):
    """A worker the scheduler put on the caller's CPU (as Linux does when the caller wakes it)
    moves to another CPU before it runs its chunks, instead of taking turns with the caller."""
    import os
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    fn = ctypes.CDLL(probe.library).ratelnn_probe_worker_on_caller_cpu
    fn.argtypes = [ctypes.c_int]
    fn.restype = ctypes.c_int64
    assert fn(20) == 0
