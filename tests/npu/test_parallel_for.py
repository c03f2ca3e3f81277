"""parallel_for on lent threads (ops/core/npu_threads.h ScopedExecutor, docs/architecture.md §7):
chunks run on the caller and the lender's threads only, every unit once, nested calls inline,
and an exception in a chunk on a lent thread reaches the caller; the library's own pool
still serves callers without a lender.  A stand-in pool (tests/helpers/parallel_for_probe.cc)
plays TensorFlow's; tests/frontend/test_tf_engine_threads.py runs the real one."""
from __future__ import annotations

import ctypes

import pytest

from ratelnn._build import OPS_DIR, build_library

from helpers.paths import HELPERS


@pytest.fixture(scope="module")
def probe():
    path = build_library("parallel_for_probe", [HELPERS / "parallel_for_probe.cc", OPS_DIR / "core" / "npu_threads.cc"],
                         link_flags=["-pthread"])
    lib = ctypes.CDLL(str(path))
    lib.ratelnn_probe_parallel_for.argtypes = [ctypes.c_int64, ctypes.c_int, ctypes.c_int, ctypes.c_int64,
                                               ctypes.c_int64, ctypes.POINTER(ctypes.c_int64),
                                               ctypes.POINTER(ctypes.c_int64), ctypes.c_char_p, ctypes.c_size_t]

    def run(total, threads, foreign, sleep_us=0, throw_at=-1):
        total_sum, counts, err = ctypes.c_int64(), (ctypes.c_int64 * 4)(), ctypes.create_string_buffer(256)
        rc = lib.ratelnn_probe_parallel_for(total, threads, int(foreign), sleep_us, throw_at,
                                            ctypes.byref(total_sum), counts, err, len(err))
        if rc != 0:
            raise RuntimeError(err.value.decode())
        return total_sum.value, dict(zip(("caller", "lent", "own pool", "nested moved"), counts))
    return run


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_chunks_run_on_the_caller_and_the_lent_threads_only(probe, threads):
    total = 64
    got, counts = probe(total, threads, foreign=True, sleep_us=5000)
    assert got == total * (total - 1) // 2
    assert counts["own pool"] == 0 and counts["nested moved"] == 0, counts
    assert counts["caller"] >= 1
    if threads > 1:   # the caller sleeps 5 ms per chunk: the lent threads get some of the 8-12
        assert counts["lent"] >= 1, counts
    else:
        assert counts["lent"] == 0, counts


def test_without_a_lender_the_own_pool_helps(probe):
    got, counts = probe(64, 2, foreign=False, sleep_us=5000)
    assert got == 64 * 63 // 2
    assert counts["lent"] == 0 and counts["own pool"] >= 1 and counts["nested moved"] == 0, counts


@pytest.mark.parametrize("foreign", [True, False])
def test_an_exception_in_a_chunk_reaches_the_caller(probe, foreign):
    for throw_at in (0, 40, 63):   # the caller's first chunk, a middle one, the last one
        with pytest.raises(RuntimeError, match=f"unit {throw_at} failed"):
            probe(64, 2, foreign=foreign, sleep_us=500, throw_at=throw_at)
    assert probe(64, 2, foreign=foreign)[0] == 64 * 63 // 2   # and the pool still works
