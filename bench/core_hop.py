"""How far apart the first two CPUs of this process are: the one-way latency of a cache line
bounced between a thread pinned to each (bench/core_hop.cc, built on first use).

On the 2-vCPU VMs the benches run on, the host moves the two vCPUs between cores sharing an
L3 (AMD EPYC Zen 4: ~27 ns) and cores on different chiplets (~170 ns) for stretches of seconds
to minutes; a two-thread run in the far state pays that for every cache line one thread wrote
and the other reads.  The speed benches sample it per round so that each figure says which
state it saw (docs/benchmarks.md, "Two-core episodes")."""
from __future__ import annotations

import ctypes
import functools
import os
from pathlib import Path
from typing import Optional

FAR_NS = 100.0  # above this the two CPUs share no cache level (measured states: ~27 vs ~170 ns)


@functools.lru_cache(maxsize=None)
def _library():
    from ratelnn._build import build_library
    path = build_library("core_hop", [Path(__file__).with_name("core_hop.cc")],
                         compile_flags=["-O2", "-std=c++17", "-fPIC"], link_flags=["-pthread"])
    fn = ctypes.CDLL(str(path)).ratelnn_core_hop_ns
    fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    fn.restype = ctypes.c_double
    return fn


def hop_ns(round_trips: int = 20000) -> Optional[float]:
    """ns per one-way hop between the process's first two CPUs (~5 ms at 20,000 round trips
    on the far state); None on a machine with one CPU or where threads cannot be pinned."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None
    ns = _library()(cpus[0], cpus[1], round_trips)
    return None if ns < 0 else ns
