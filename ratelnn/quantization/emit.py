"""Emitters of the calibration graph and of the quantized (Quant/Dequant) graph.

Both insert nodes into a copy of the graph and never rename the user's inputs or outputs:

- an inserted node that produces the value of a graph output *outputs the original tensor
  name*; the original producer's output is renamed ``<name>/raw``, and when that producer
  had the output's name as its node name (TensorFlow ``node:0``) the inserted node takes
  the node name and the producer becomes ``<node>/raw``;
- elsewhere the original tensor keeps its name and the consumers that must see the new
  value are rewired to the inserted node's output (``<name>/minmax``, ``<name>/dequant``).

Derived names replace ``:`` by ``_`` so that they are valid framework node names.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Mapping

import numpy as np

from ..config import ConfigError
from ..ir import Graph, GraphError, Node, QParams, TensorInfo
from .policy import QuantPlan, calibration_tensors, make_plan

# build(source tensor, result tensor, node name) -> the nodes computing result from source
NodeBuilder = Callable[[str, str, str], List[Node]]


def _base(tensor: str) -> str:
    return tensor.replace(":", "_")


def _scale_attrs(qp: QParams) -> Dict[str, Any]:
    """``scale`` (Python float) or ``scales`` (list of floats, exact float32 values) + ``axis``."""
    if qp.per_channel:
        return {"scales": [float(s) for s in np.asarray(qp.scale, dtype=np.float32)],
                "axis": int(qp.axis)}
    return {"scale": float(np.float32(qp.scale))}


def _splice_output(g: Graph, tensor: str, suffix: str, build: NodeBuilder) -> None:
    """Make the nodes of ``build`` produce ``tensor`` (a node output) from its old value,
    now called ``<tensor>/raw``; every reader of ``tensor`` then sees the new value."""
    producer = g.producer(tensor)
    raw = g.unique_name(f"{_base(tensor)}/raw")
    producer.outputs = [raw if t == tensor else t for t in producer.outputs]
    g.tensors[raw] = TensorInfo(g.tensors[tensor].shape, g.tensors[tensor].dtype)
    name = g.unique_name(f"{_base(tensor)}/{suffix}")
    if producer.outputs == [raw] and producer.name == tensor:
        name, producer.name = producer.name, raw
    g.nodes.extend(build(raw, tensor, name))


def _splice_readers(g: Graph, tensor: str, suffix: str, build: NodeBuilder,
                    readers: List[Node]) -> None:
    """Make ``readers`` read the new value computed by ``build`` from ``tensor``."""
    result = g.unique_name(f"{_base(tensor)}/{suffix}")
    for n in readers:
        n.inputs = [result if t == tensor else t for t in n.inputs]
    g.tensors[result] = TensorInfo(g.tensors[tensor].shape, "float32")
    g.nodes.extend(build(tensor, result, result))


def _output_dir(config: Mapping[str, Any]) -> str:
    output_dir = config.get("output_dir")
    if not output_dir:
        raise ConfigError("config key 'output_dir' is required")
    return os.path.abspath(os.fspath(output_dir))


def emit_calibration(graph: Graph, config: Mapping[str, Any]) -> Graph:
    """Copy of the float ``graph`` with a ``MinMax`` node on every calibration tensor
    (:func:`.policy.calibration_tensors`); attrs ``tensor_name`` (the statistics key, the
    tensor's name in ``graph``), ``output_dir`` (absolute path) and ``ema_decay`` (config
    ``ema_decay``, weight of the previous EMA value per batch)."""
    output_dir = _output_dir(config)
    ema_decay = float(config.get("ema_decay", 0.9))
    g = graph.copy()

    def minmax(tensor: str) -> NodeBuilder:
        def build(src: str, dst: str, name: str) -> List[Node]:
            attrs = {"tensor_name": tensor, "output_dir": output_dir, "ema_decay": ema_decay}
            return [Node(name, "MinMax", [src], [dst], attrs)]
        return build

    for t in calibration_tensors(graph, config):
        if t in g.outputs and g.producer(t) is not None:
            _splice_output(g, t, "minmax", minmax(t))
        else:
            _splice_readers(g, t, "minmax", minmax(t), g.consumers(t))
    g.toposort()
    return g


def _dequant_node(name: str, src: str, dst: str, qp: QParams) -> Node:
    return Node(name, "Dequant", [src], [dst], _scale_attrs(qp))


def _check_quantized(qgraph: Graph, plan: QuantPlan) -> None:
    missing = [t for t in plan.anchors + list(plan.shared) if t not in qgraph.qparams]
    missing += [u.param for u in plan.param_uses if u.param not in qgraph.qparams]
    if missing:
        raise GraphError(f"emit_qdq needs a graph made by quantize(): no qparams for {missing}")


def emit_qdq(qgraph: Graph, config: Mapping[str, Any]) -> Graph:
    """The quantized model in float form: ``Quant``->``Dequant`` after every anchor point,
    ``Dequant`` after every integer parameter, so that the graph computes in float32 on the
    dequantized values (docs/quantization.md).  ``qgraph`` is the result of ``quantize``."""
    plan = make_plan(qgraph, config)
    _check_quantized(qgraph, plan)
    round_mode = config.get("round_mode", "half_away_from_zero")
    g = qgraph.copy()
    quantized_ids = {id(n) for n in g.nodes if plan.is_quantized(n)}

    def qdq(tensor: str, qp: QParams) -> NodeBuilder:
        def build(src: str, dst: str, name: str) -> List[Node]:
            codes = g.unique_name(f"{_base(tensor)}/quant")
            g.tensors[codes] = TensorInfo(g.tensors[tensor].shape, qp.dtype)
            g.qparams[codes] = qp
            quant = Node(codes, "Quant", [src], [codes],
                         {"dtype": qp.dtype, **_scale_attrs(qp), "round_mode": round_mode})
            return [quant, _dequant_node(name, codes, dst, qp)]
        return build

    for p, qp in qgraph.qparams.items():
        if p in qgraph.params:
            _splice_readers(g, p, "dequant", lambda src, dst, name, qp=qp:
                            [_dequant_node(name, src, dst, qp)], g.consumers(p))
    for t in plan.anchors:
        build = qdq(t, g.qparams[t])
        if t in plan.border:
            readers = [n for n in g.consumers(t) if id(n) in quantized_ids]
            _splice_readers(g, t, "dequant", build, readers)
        elif t in g.outputs:
            _splice_output(g, t, "dequant", build)
        else:
            _splice_readers(g, t, "dequant", build, g.consumers(t))
    g.toposort()
    return g
