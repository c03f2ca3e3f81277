"""Recover the quantized IR from a quantized (Quant/Dequant) model: the inverse of
:func:`ratelnn.quantization.emit.emit_qdq`.

A quantized model imported back from a framework (``handler.import_quantized``) computes in
float between ``Quant``->``Dequant`` pairs, with ``Dequant`` nodes after its integer params.
The compiler wants the quantized IR instead: float-typed activations with ``qparams``,
integer params read directly by the quantized ops (docs/quantization.md).
"""
from __future__ import annotations

from typing import Dict, Optional

import numpy as np

from ..ir import Graph, GraphError, Node, QParams, registry
from ..ir.passes import fuse_prelu
from .policy import is_scale_preserving



def _qparams(dtype: str, attrs: Dict) -> QParams:
    if attrs.get("scales") is not None:
        return QParams(dtype, np.asarray(attrs["scales"], np.float32), int(attrs.get("axis", -1)))
    return QParams(dtype, float(np.float32(attrs["scale"])))


def record_qdq_qparams(graph: Graph) -> None:
    """Fill ``graph.qparams`` of an imported quantized model from its nodes: the output of
    every ``Quant`` and every integer param read by a ``Dequant``."""
    for node in graph.nodes:
        if node.op == "Quant":
            graph.qparams[node.outputs[0]] = _qparams(node.attrs["dtype"], node.attrs)
        elif node.op == "Dequant" and graph.is_param(node.inputs[0]):
            param = node.inputs[0]
            graph.qparams[param] = _qparams(str(graph.params[param].dtype), node.attrs)


def _single_producer(graph: Graph, tensor: str) -> Optional[Node]:
    node = graph.producer(tensor)
    return node if node is not None and len(node.outputs) == 1 else None


def _strip_param_dequants(g: Graph) -> None:
    """``Dequant(int param)`` -> the param itself, with its QParams."""
    for d in [n for n in g.nodes if n.op == "Dequant" and g.is_param(n.inputs[0])]:
        p = d.inputs[0]
        g.qparams[p] = _qparams(str(np.asarray(g.params[p]).dtype), d.attrs)
        g.remove_nodes([d])
        g.replace_uses(d.outputs[0], p)


def _strip_pairs(g: Graph) -> None:
    """``src -> Quant -> Dequant -> readers``: readers read ``src``, which gets the QParams.
    When the Dequant produced a graph output, ``src`` takes that output's name (and its
    producer the Dequant's node name if it had been renamed after its output)."""
    for d in [n for n in g.nodes if n.op == "Dequant"]:
        q = _single_producer(g, d.inputs[0])
        if q is None or q.op != "Quant":
            continue
        src, out = q.inputs[0], d.outputs[0]
        qp = _qparams(q.attrs["dtype"], q.attrs)
        g.remove_nodes([d])
        if not g.consumers(q.outputs[0]) and q.outputs[0] not in g.outputs:
            g.remove_nodes([q])
            g.qparams.pop(q.outputs[0], None)
        producer = _single_producer(g, src)
        if out in g.outputs and producer is not None and src not in g.outputs:
            producer.outputs = [out]
            g.replace_uses(src, out)
            if producer.name == src:
                producer.name = d.name
            g.tensors.pop(src, None)
            g.qparams[out] = qp
        else:
            g.replace_uses(out, src)
            g.qparams[src] = qp


def _fuse_bias_and_activation(g: Graph) -> None:
    """Undo the framework export of a fused Conv2D/MatMul: ``BiasAdd`` of an int32 param
    and a following activation whose input is no quantization point fold back in."""
    for node in list(g.nodes):
        if node.op != "BiasAdd" and node.op not in registry.FUSABLE_ACT_OPS:
            continue
        x = node.inputs[0]
        producer = _single_producer(g, x)
        if (producer is None or not registry.is_weighted(producer.op) or x in g.qparams
                or x in g.outputs or len(g.consumers(x)) != 1 or producer.attrs.get("act", "none") != "none"):
            continue
        if node.op == "BiasAdd":
            bias = node.inputs[1]
            if len(producer.inputs) != 2 or not g.is_param(bias) or np.asarray(g.params[bias]).dtype != np.int32:
                continue
            producer.inputs.append(bias)
        else:
            producer.attrs["act"] = registry.fused_act(node.op)
            if node.op == "LeakyRelu":
                producer.attrs["act_alpha"] = float(node.attrs.get("alpha", 0.2))
        g.remove_nodes([node])
        producer.outputs = [node.outputs[0]]
        g.tensors.pop(x, None)
        if producer.name == x:
            producer.name = node.name


def _share_through_scale_preserving(g: Graph) -> None:
    """Outputs of scale-preserving ops (no Quant/Dequant in the quantized model) take their
    input's QParams, as the quantizer gave them."""
    for node in g.nodes:
        out = node.outputs[0] if len(node.outputs) == 1 else None
        if out is not None and out not in g.qparams and is_scale_preserving(node) and node.inputs[0] in g.qparams:
            qp = g.qparams[node.inputs[0]]
            g.qparams[out] = QParams(qp.dtype, qp.scale)


def strip_qdq(graph: Graph) -> Graph:
    """The quantized IR of a Quant/Dequant model (see the module docstring): a copy of
    ``graph`` without its Quant/Dequant nodes, with ``qparams`` for every quantization
    point and integer param.  ``strip_qdq(emit_qdq(q, config))`` reproduces ``q``."""
    g = graph.copy()
    _strip_param_dequants(g)
    _strip_pairs(g)
    _fuse_bias_and_activation(g)
    fuse_prelu(g)   # the exporters write act="prelu" and PRelu as elementwise ops
    left = [n.name for n in g.nodes if n.op in registry.QDQ_OPS]
    if left:
        raise GraphError(f"strip_qdq: Quant/Dequant nodes {left} are not part of a Quant->Dequant pair or "
                         "of a Dequant of an integer constant; the model is not a quantized model made by to_quant")
    g.prune()
    g.toposort()
    _share_through_scale_preserving(g)
    return g
