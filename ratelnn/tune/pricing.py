"""The price of a candidate: its compiled engines' predicted latency of one inference (NPU
cost model, SRAM fit) plus a host estimate for the layers it moves off the NPU."""
from __future__ import annotations

from typing import Any, Collection, List, Mapping, Optional, Tuple

import numpy as np

from ..compiler import compile_graph, engine_sets
from ..ir import Graph, registry
from ..npu.costmodel import Profile
from ..npu.costs import profile_engines
from ..npu.engine import Engine

# Assumed host throughput for layers a candidate keeps in fp32 (they leave the NPU and run on
# the CPU): 50 G multiply-adds/s, a few AVX-512 cores in float32.  Only the layers the
# candidate moves off the NPU are charged; ops every candidate leaves on the CPU are not.
HOST_FLOAT_MACS_PER_S = 50e9
HOST_LAYER_OVERHEAD_S = 2e-6   # assumed per host op (dispatch, a quantization border)


def compiled_engines(compiled: Graph) -> List[Tuple[str, Engine]]:
    """``(engine name, Engine)`` of every engine node of ``compiled`` (its first engine), in
    graph order."""
    return [(name, Engine.from_bytes(blobs[0], label=name)) for name, blobs in engine_sets(compiled)]


def price(qgraph: Graph, config: Mapping[str, Any], device_info: Optional[Mapping[Any, Any]]) -> Tuple[Graph, Profile]:
    """(compiled graph, predicted device time of one inference) of the quantized ``qgraph``;
    ValueError when it has no engine."""
    compiled = compile_graph(qgraph, config, device_info)
    return compiled, profile_engines(compiled_engines(compiled), 1, device_info or None)


def host_seconds(graph: Graph, moved: Collection[str]) -> float:
    """Host time of one inference of the nodes ``moved`` off the NPU (in fp32 although the
    all-int8 plan quantizes them), at :data:`HOST_FLOAT_MACS_PER_S`."""
    macs = sum(node_macs(graph, node) for node in graph.nodes if node.name in moved)
    return macs / HOST_FLOAT_MACS_PER_S + len(moved) * HOST_LAYER_OVERHEAD_S


def node_macs(graph: Graph, node) -> float:
    """Multiply-adds (or element operations) of one float inference of ``node``."""
    shape = [d for d in (graph.tensors[node.outputs[0]].shape if node.outputs[0] in graph.tensors else [])]
    out = float(np.prod([d for d in shape[1:] if d])) if shape else 0.0
    if registry.is_weighted(node.op) and len(node.inputs) > 1 and graph.is_param(node.inputs[1]):
        w = np.asarray(graph.params[node.inputs[1]])
        channels = [c for c in (shape[-1] if shape else None, shape[1] if len(shape) > 1 else None) if c]
        out_ch = next((d for d in (w.shape[-1], w.shape[0]) if d in channels), w.shape[-1])
        return out * w.size / max(out_ch, 1)
    return out
