"""The device time engine runs recorded (docs/architecture.md §7): every run of a TensorFlow
``RatelEngineOp``, an MXNet ``ratel_engine_op`` or an ONNX ``RatelEngineOp`` in
``ratelnn.onnx_session`` adds the cycles its instructions predict (the compiler's ``cycles``
of one core at the compiled batch, scaled to the run's batch; a batch-split engine is timed
on its busiest core) under its ``engine_name``, one account per op library
(ops/core/device_time.cc); :func:`device_time` reads them all.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass
from typing import Dict, List, Optional

from .. import oplib
from .device import target_device

_NAME_LEN = 256   # initial name buffer (grown for longer names)


@dataclass(frozen=True)
class DeviceTime:
    """Predicted device time of engine runs: ``runs`` (op executions), ``samples`` (sum of
    their batch sizes), ``cycles`` (of the busiest core, summed) and ``seconds``."""

    runs: int = 0
    samples: int = 0
    cycles: float = 0.0
    seconds: float = 0.0

    def __add__(self, other: "DeviceTime") -> "DeviceTime":
        return DeviceTime(self.runs + other.runs, self.samples + other.samples,
                          self.cycles + other.cycles, self.seconds + other.seconds)


def _loaded_op_libraries() -> List[ctypes.CDLL]:
    """Handles on the op libraries (TensorFlow, MXNet, ONNX Runtime) this process loaded."""
    libs = []
    for lib in oplib.loaded_libraries():
        if not hasattr(lib, "ratelnn_engine_time_count"):   # a library without the account
            continue
        lib.ratelnn_engine_time_count.restype = ctypes.c_int64
        lib.ratelnn_engine_time_entry.restype = ctypes.c_int64
        lib.ratelnn_engine_time_entry.argtypes = [ctypes.c_int64, ctypes.c_char_p, ctypes.c_int64] + \
            [ctypes.POINTER(ctypes.c_int64)] * 3 + [ctypes.POINTER(ctypes.c_double)]
        lib.ratelnn_engine_time_reset.restype = None
        libs.append(lib)
    return libs


def _library_times(lib: ctypes.CDLL) -> Dict[str, DeviceTime]:
    times: Dict[str, DeviceTime] = {}
    name = ctypes.create_string_buffer(_NAME_LEN)
    device_id, runs, samples, cycles = ctypes.c_int64(), ctypes.c_int64(), ctypes.c_int64(), ctypes.c_double()
    for index in range(lib.ratelnn_engine_time_count()):
        length = -1
        while length < 0 or length >= len(name):   # grow the buffer for a long name
            if length >= len(name):
                name = ctypes.create_string_buffer(length + 1)
            length = lib.ratelnn_engine_time_entry(index, name, len(name), ctypes.byref(device_id),
                                                   ctypes.byref(runs), ctypes.byref(samples), ctypes.byref(cycles))
            if length < 0:   # reset by another thread meanwhile
                return times
        clock_hz = target_device(int(device_id.value)).core.clock_hz
        times[name.value.decode(errors="replace")] = DeviceTime(int(runs.value), int(samples.value),
                                                                float(cycles.value), float(cycles.value) / clock_hz)
    return times


def device_times() -> Dict[str, DeviceTime]:
    """Recorded device time per engine name, for the engine ops (TensorFlow, MXNet, ONNX) run
    in this process since start (or :func:`reset_device_time`).  Seconds use the clock of
    each engine's device."""
    times: Dict[str, DeviceTime] = {}
    for lib in _loaded_op_libraries():
        for name, t in _library_times(lib).items():
            times[name] = times[name] + t if name in times else t
    return times


def device_time(engine_name: Optional[str] = None) -> DeviceTime:
    """Recorded device time of the engine ``engine_name``, or of all engines (None).
    An engine that never ran gives zeros."""
    times = device_times()
    if engine_name is not None:
        return times.get(engine_name, DeviceTime())
    return sum(times.values(), DeviceTime())


def reset_device_time() -> None:
    """Forget every recorded run (e.g. between two measurements)."""
    for lib in _loaded_op_libraries():
        lib.ratelnn_engine_time_reset()
