"""Profiling compiled models and reading the device time of engine runs (DESIGN §7).

- :func:`profile` predicts, with the cost model, the device time of a compiled model: the
  latency of one batch, the throughput with all cores of the device and a per-engine,
  per-instruction breakdown (cycles, compute- or bandwidth-bound, weights resident or
  streamed).  Engines are read from the model, no framework session runs.
- :func:`device_time` reads what the engine ops that ran in this process recorded: every
  run of a TensorFlow ``RatelEngineOp`` or an MXNet ``ratel_engine_op`` adds the cycles its
  instructions predict (the compiler's ``cycles`` of one core at the compiled batch, scaled
  to the run's batch; a batch-split engine is timed on its busiest core) under its
  ``engine_name`` (one account per op library, ops/core/device_time.cc; both are read).
"""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .. import oplib
from ..ir import Graph
from .costmodel import CostModelError, Profile, profile_layers
from .device import target_device
from .engine import Engine

_NAME_LEN = 256   # initial name buffer (grown for longer names)


def model_engines(graph_npu: Any) -> List[Tuple[str, Engine]]:
    """``(engine_name, Engine)`` of every engine of a compiled model, in graph order.

    ``graph_npu``: a TensorFlow GraphDef made by ``to_npu`` (its ``RatelEngineOp`` nodes) or
    a compiled IR :class:`~ratelnn.ir.Graph` (its ``Engine`` nodes).  The bytes are validated
    (:class:`~ratelnn.npu.engine.EngineError` names a bad engine)."""
    if isinstance(graph_npu, Graph):
        found = [(str(n.attrs.get("engine_name", n.name)), n.attrs["engine"])
                 for n in graph_npu.nodes if n.op == "Engine"]
    elif _is_tf_graph_def(graph_npu):
        found = [(nd.attr["engine_name"].s.decode(errors="replace") or nd.name, nd.attr["engine"].s)
                 for nd in graph_npu.node if nd.op == "RatelEngineOp"]
    elif isinstance(graph_npu, tuple) and graph_npu and hasattr(graph_npu[0], "tojson"):
        found = _mxnet_engines(graph_npu[0])
    else:
        raise TypeError(f"expected a compiled TensorFlow GraphDef, MXNet (symbol, arg_params, "
                        f"aux_params) or ratelnn IR Graph, got {type(graph_npu).__name__}")
    return [(name, Engine.from_bytes(data, label=name)) for name, data in found]


def _mxnet_engines(symbol: Any) -> List[Tuple[str, bytes]]:
    """(engine_name, bytes) of the ``ratel_engine_op`` nodes of an MXNet symbol."""
    import json
    from ..frontend.mxnet.attrs import decode_custom_attrs
    found = []
    for node in json.loads(symbol.tojson())["nodes"]:
        if node["op"] == "ratel_engine_op":
            attrs = decode_custom_attrs("Engine", node.get("attrs", {}))
            found.append((attrs["engine_name"] or node["name"], attrs["engine"]))
    return found


def _is_tf_graph_def(obj: Any) -> bool:
    graph_pb2 = sys.modules.get("tensorflow.core.framework.graph_pb2")  # loaded if obj is one
    return graph_pb2 is not None and isinstance(obj, graph_pb2.GraphDef)


def engine_layers(engine: Engine) -> list:
    """The cost-model layers (``LayerCost``, one per instruction, per inference) of ``engine``."""
    from ..compiler.costs import instruction_layer_cost
    return [instruction_layer_cost(engine, ins) for ins in engine.instructions]


def profile(graph_npu: Any, batch_size: int = 1, device_info: Optional[Mapping[Any, Any]] = None) -> Profile:
    """Predicted device time of the compiled model ``graph_npu`` (see :func:`model_engines`).

    ``batch_size``: inferences per batch.  ``device_info`` (DESIGN §2): the device and cores
    to run on; default all cores of the first engine's device.  Returns a
    :class:`~ratelnn.npu.costmodel.Profile`: ``latency_s`` (one batch through every engine in
    series, the lowest-latency split of each), ``throughput`` (inferences/s with all the
    cores, the split the compiler would choose), ``engines`` (per engine: the chosen
    ``ModelCost``s; their ``layers`` are per-instruction breakdowns), ``layers``, ``table()``.
    Raises ValueError if the model has no engine."""
    engines = model_engines(graph_npu)
    if not engines:
        raise ValueError("the model has no NPU engine (compile it with to_npu first)")
    if len({name for name, _ in engines}) != len(engines):
        raise ValueError(f"the model has several engines of one name: {[name for name, _ in engines]}")
    empty = [name for name, e in engines if not len(e.instructions)]
    if empty:
        raise CostModelError(f"engines {empty} have no instruction to profile")
    if not device_info:
        device_id = int(engines[0][1].proto.device_id)
        device_info = {device_id: target_device(device_id).num_cores}
    return profile_layers({name: engine_layers(e) for name, e in engines}, batch_size, device_info)


# ---------------------------------------------------------------- recorded device time


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
    """Handles on the op libraries (TensorFlow, MXNet) this process loaded."""
    libs = []
    for framework in oplib.FRAMEWORKS:
        path = oplib._library_paths.get(framework)
        if path is None:
            continue
        try:  # RTLD_NOLOAD: only if the framework already loaded this file
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        except OSError:
            continue
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
    """Recorded device time per engine name, for the engine ops (TensorFlow and MXNet) run
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
