"""bench/core_hop.py, the core-to-core hop the speed benches sample before each round: a
positive latency between two CPUs, None where the process may run on one CPU only."""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from helpers.paths import BENCH

# loaded from its file (no import-path edit: tests/packaging/test_no_sys_path_edits.py)
_spec = importlib.util.spec_from_file_location("core_hop", BENCH / "core_hop.py")
core_hop = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(core_hop)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
def test_the_hop_between_two_cpus_is_a_latency():
    before = os.sched_getaffinity(0)
    ns = core_hop.hop_ns(2000)
    # one cache line between cores: tens to hundreds of ns, never zero (no shared line) nor ms
    assert ns is not None and 5 < ns < 100_000, ns
    assert os.sched_getaffinity(0) == before  # the calling thread is not left pinned


def test_one_cpu_gives_none():
    code = (f"import importlib.util, os\n"
            f"os.sched_setaffinity(0, {{min(os.sched_getaffinity(0))}})\n"
            f"spec = importlib.util.spec_from_file_location('core_hop', {str(BENCH / 'core_hop.py')!r})\n"
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
            "print(m.hop_ns(100))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "None"
