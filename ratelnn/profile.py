"""Profiling compiled models (docs/architecture.md §7): :func:`profile` predicts, with the NPU cost model,
the device time of a compiled TensorFlow, MXNet, ONNX or IR model: the latency of one batch, the
throughput with all cores of the device and a per-engine, per-instruction breakdown
(cycles, compute- or bandwidth-bound, weights resident or streamed).  Engines are read
from the model, no framework session runs.  What engine runs recorded is
:func:`ratelnn.npu.device_time`.
"""
from __future__ import annotations

import sys
from typing import Any, Dict, List, Mapping, Optional, Tuple

from .compiler import engine_sets
from .ir import Graph
from .npu.costmodel import Profile
from .npu.costs import engine_layers, profile_engines  # noqa: F401  (engine_layers: also public here)
from .npu.engine import Engine


def _engine_blobs(graph_npu: Any) -> List[Tuple[str, List[bytes]]]:
    """``(engine_name, [engine bytes, batch engine bytes...])`` of every engine node of a
    TensorFlow GraphDef made by ``to_npu``, an MXNet ``(symbol, arg_params, aux_params)``, an
    ONNX ``ModelProto`` or a compiled IR :class:`~ratelnn.ir.Graph`, in graph order
    (docs/multi-batch.md)."""
    if isinstance(graph_npu, Graph):
        return engine_sets(graph_npu)
    if _is_tf_graph_def(graph_npu):
        from .frontend.tensorflow import model_io as tf_model_io
        return tf_model_io.engine_sets(graph_npu)
    if isinstance(graph_npu, tuple) and graph_npu and hasattr(graph_npu[0], "tojson"):
        import json
        from .frontend.mxnet import model_io as mx_model_io
        return mx_model_io.engine_sets(json.loads(graph_npu[0].tojson())["nodes"])
    if _is_onnx_model(graph_npu):
        from .frontend.onnx import model_io as onnx_model_io
        return onnx_model_io.engine_sets(graph_npu)
    raise TypeError(f"expected a compiled TensorFlow GraphDef, MXNet (symbol, arg_params, "
                    f"aux_params), ONNX ModelProto or ratelnn IR Graph, got {type(graph_npu).__name__}")


def model_engines(graph_npu: Any) -> List[Tuple[str, Engine]]:
    """``(engine_name, Engine)`` of every engine of a compiled model, in graph order: each
    node's first engine (its only one unless it holds an engine set).  The bytes are
    validated (:class:`~ratelnn.npu.engine.EngineError` names a bad engine)."""
    return [(name, Engine.from_bytes(blobs[0], label=name)) for name, blobs in _engine_blobs(graph_npu)]


def model_engine_sets(graph_npu: Any) -> List[Tuple[str, List[Engine]]]:
    """``(engine_name, [Engine, ...])``: every engine node's engine set (docs/multi-batch.md),
    validated and checked, as one engine per compiled size (ascending; one engine when the
    model was compiled for one batch size)."""
    from .npu.batching import expand_engine_set
    return [(name, expand_engine_set(engines)) for name, engines in _decoded_sets(graph_npu)]


def _decoded_sets(graph_npu: Any) -> List[Tuple[str, List[Engine]]]:
    """Every engine node's engine set as stored (engines with their batch plans), checked."""
    from .npu.batching import check_engine_set
    sets = []
    for name, blobs in _engine_blobs(graph_npu):
        engines = [Engine.from_bytes(b, label=name) for b in blobs]
        check_engine_set(engines, name)
        sets.append((name, engines))
    return sets


def compiled_batch_sizes(graph_npu: Any) -> List[int]:
    """The batch sizes the model's engine sets were compiled for (docs/multi-batch.md); one
    size (the ``input_shapes`` batch) for a model compiled without multi-batch."""
    from .npu.batching import batch_slots
    sizes = {tuple(size for size, _, _ in batch_slots(engines)) for _, engines in _decoded_sets(graph_npu)}
    if not sizes:
        raise ValueError("the model has no NPU engine (compile it with to_npu first)")
    if len(sizes) > 1:
        raise ValueError(f"the model's engines were compiled for different batch sizes: {sorted(sizes)}")
    return list(sizes.pop())


def profile_batch_sizes(graph_npu: Any, device_info: Optional[Mapping[Any, Any]] = None) -> Dict[int, Profile]:
    """:func:`profile` at each compiled batch size: ``{batch size: Profile}`` (latency of one
    batch of that size, throughput with all cores)."""
    return {b: profile(graph_npu, b, device_info) for b in compiled_batch_sizes(graph_npu)}


def run_chunks(graph_npu: Any, batch: int) -> List[Tuple[str, List[int]]]:
    """``(engine_name, [chunk size, ...])``: how each engine node splits a run of ``batch``
    samples (:func:`ratelnn.npu.batching.plan_batches` on its predicted chunk cycles); an
    engine compiled for one batch size runs the batch as it is."""
    from .npu.batching import batch_slots, plan_batches
    found = []
    for name, engines in _decoded_sets(graph_npu):
        slots = batch_slots(engines)
        if len(slots) == 1:
            found.append((name, [int(batch)]))
        else:
            found.append((name, [size for size, _, _ in plan_batches([s for s, _, _ in slots], batch,
                                                                       [c for _, _, c in slots])]))
    return found


def run_latency(graph_npu: Any, batch: int, device_info: Optional[Mapping[Any, Any]] = None) -> float:
    """Predicted device seconds of one run of ``batch`` samples: every engine's chunks
    (:func:`run_chunks`) one after the other, each at its compiled size (padding included)
    with the latency split of :func:`profile`."""
    engines = dict(model_engine_sets(graph_npu))
    total = 0.0
    for name, chunks in run_chunks(graph_npu, batch):
        by_size = {e.batch_size: e for e in engines[name]}
        for b in chunks:
            e = by_size.get(b, engines[name][0])   # one size: that engine at any batch
            total += profile_engines([(name, e)], b, device_info).latency_s
    return total


def _is_tf_graph_def(obj: Any) -> bool:
    graph_pb2 = sys.modules.get("tensorflow.core.framework.graph_pb2")  # loaded if obj is one
    return graph_pb2 is not None and isinstance(obj, graph_pb2.GraphDef)


def _is_onnx_model(obj: Any) -> bool:
    onnx = sys.modules.get("onnx")   # loaded if obj is one
    return onnx is not None and isinstance(obj, onnx.ModelProto)


def profile(graph_npu: Any, batch_size: int = 1, device_info: Optional[Mapping[Any, Any]] = None) -> Profile:
    """Predicted device time of the compiled model ``graph_npu`` (see :func:`model_engines`).

    ``batch_size``: inferences per batch.  ``device_info`` (docs/architecture.md §2): the device and cores
    to run on; default all cores of the first engine's device.  Returns a
    :class:`~ratelnn.npu.costmodel.Profile`: ``latency_s`` (one batch through every engine in
    series, the lowest-latency split of each), ``throughput`` (inferences/s with all the
    cores, the split the compiler would choose), ``engines`` (per engine: the chosen
    ``ModelCost``s; their ``layers`` are per-instruction breakdowns), ``layers``, ``table()``.
    Raises ValueError if the model has no engine."""
    return profile_engines(model_engines(graph_npu), batch_size, device_info)
