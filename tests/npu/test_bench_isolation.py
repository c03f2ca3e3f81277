"""bench/isolated.py's wait for quiet contender processes: a process that spins on a core
(as a runtime's pool threads do after a run) holds the next turn until it stops."""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import time

import pytest

from helpers.paths import BENCH

# bench/isolated.py loaded from its file (no import-path edit: tests/packaging/test_no_sys_path_edits.py)
_spec = importlib.util.spec_from_file_location("isolated", BENCH / "isolated.py")
isolated = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(isolated)
process_cpu_seconds, wait_until_idle = isolated.process_cpu_seconds, isolated.wait_until_idle

SPIN_SECONDS = 0.3

SPINNER = f"""
import sys, time
print("ready", flush=True)
end = time.perf_counter() + {SPIN_SECONDS}
while time.perf_counter() < end:
    pass
time.sleep(30)
"""


class Child:
    """A process seen as wait_until_idle sees a contender."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self):
        return process_cpu_seconds(self.pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread CPU time is read from Linux /proc")
def test_waits_while_a_process_spins_and_not_after():
    proc = subprocess.Popen([sys.executable, "-c", SPINNER], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        start = time.perf_counter()
        waited = wait_until_idle([Child(proc.pid)], timeout=5.0)
        spun = time.perf_counter() - start
        used = process_cpu_seconds(proc.pid)
        time.sleep(0.05)
        assert process_cpu_seconds(proc.pid) - used < 0.01  # idle once the wait returned
        assert 0.5 * SPIN_SECONDS < waited < 5.0 and waited <= spun
        assert wait_until_idle([Child(proc.pid)], timeout=5.0) < 0.2  # idle: three short spans
    finally:
        proc.kill()
        proc.wait()
    assert process_cpu_seconds(proc.pid) is None  # ended: unknown, so not waited for
