"""Float-preserving graph passes run by every frontend after import (docs/ir.md).

Each pass edits the graph in place and keeps the float outputs unchanged up to float
rounding.  Graph input and output tensor names are never changed: when a node that
produces a graph output is fused away, the fused node takes over that output's name.
"""
from __future__ import annotations

import dataclasses
from typing import AbstractSet, List, Optional, Tuple

import numpy as np

from . import registry
from .evaluate import evaluate_node
from .graph import Graph, Node

# graph.meta key: output tensor of a layer a BatchNorm was folded into -> (beta, |gamma|), the
# per-channel mean and standard deviation of its pre-activation the BatchNorm was trained for
# (analytic bias correction, docs/quantization.md "Accuracy passes")
BN_STATS = "bn_stats"


# ---------------------------------------------------------------- remove_identity
def remove_identity(graph: Graph) -> None:
    """Drop ``Identity`` nodes.  An identity producing a graph output is removed by
    renaming its producer's output to the graph output name; it is kept only when that
    is impossible (its input is a graph input, a param, another graph output, or an
    output of a multi-output node)."""
    for node in graph.nodes_of(("Identity",)):
        src, dst = node.inputs[0], node.outputs[0]
        if dst not in graph.outputs:
            graph.remove_nodes([node])
            graph.replace_uses(dst, src)
            continue
        producer = graph.producer(src)
        if producer is None or len(producer.outputs) != 1 or src in graph.outputs:
            continue
        graph.remove_nodes([node])
        _rename_output(graph, producer, dst)


def _rename_output(graph: Graph, producer: Node, new: str) -> None:
    """Make ``producer`` (single output) write tensor ``new``; its old readers follow."""
    old = producer.outputs[0]
    producer.outputs = [new]
    graph.replace_uses(old, new)
    bn_stats = graph.meta.get(BN_STATS)
    if bn_stats and old in bn_stats:   # the statistics describe the producer's pre-activation
        bn_stats[new] = bn_stats.pop(old)
    graph.tensors.pop(old, None)
    graph.qparams.pop(old, None)


# ---------------------------------------------------------------- fold_constants
def fold_constants(graph: Graph) -> None:
    """Replace every node whose inputs are all params by params holding its outputs."""
    folded = []
    for node in graph.nodes:
        if node.op in registry.NOT_FOLDABLE_OPS or not node.inputs or not all(graph.is_param(t) for t in node.inputs):
            continue
        values = evaluate_node(node, [graph.params[t] for t in node.inputs])
        for t, v in zip(node.outputs, values):
            graph.add_param(t, v)
        folded.append(node)
    graph.remove_nodes(folded)


# ---------------------------------------------------------------- affine folding helpers
def _channel_axis(node: Node) -> int:
    """Axis of the output channels of a Conv2D/MatMul output."""
    if node.op == "Conv2D":
        return 1 if node.attrs.get("layout") == "NCHW" else 3
    return 1


def _per_channel(graph: Graph, node: Node, operand: str) -> Optional[np.ndarray]:
    """``operand`` as a float vector over the output channels of ``node`` (Conv2D/MatMul)
    if it is a float param that broadcasts only along the channel axis, else None."""
    if not graph.is_param(operand):
        return None
    return _channel_vector(graph, node, np.asarray(graph.params[operand]))


def _channel_vector(graph: Graph, node: Node, value: np.ndarray) -> Optional[np.ndarray]:
    """Float array ``value`` as a float32 vector over the output channels of ``node``
    (Conv2D/MatMul) if it broadcasts only along the channel axis, else None."""
    out_shape = graph.shape(node.outputs[0])
    if value.dtype.kind != "f" or out_shape is None or value.ndim > len(out_shape):
        return None
    axis = _channel_axis(node)
    channels = out_shape[axis]
    full = value.reshape((1,) * (len(out_shape) - value.ndim) + value.shape)
    if any(d != 1 for i, d in enumerate(full.shape) if i != axis) or full.shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(full.reshape(-1), (channels,)).astype(np.float32)


def _bias_vector(graph: Graph, bias_add: Node, node: Node) -> Optional[np.ndarray]:
    """The bias of ``bias_add`` (a BiasAdd reading ``node``'s output) if it adds along
    ``node``'s channel axis, else None."""
    if not graph.is_param(bias_add.inputs[1]):
        return None
    if node.op == "Conv2D" and (bias_add.attrs.get("layout", "NHWC") != node.attrs.get("layout", "NHWC")):
        return None
    vec = np.asarray(graph.params[bias_add.inputs[1]], np.float32).reshape(-1)
    return vec if vec.size == graph.shape(node.outputs[0])[_channel_axis(node)] else None


def _foldable_producer(graph: Graph, tensor: str) -> Optional[Node]:
    """The Conv2D/MatMul producing ``tensor`` if its weights are a param, it has no fused
    activation, and ``tensor`` has exactly one reader and is not a graph output."""
    node = graph.producer(tensor)
    if node is None or not registry.is_weighted(node.op) or node.attrs.get("act", "none") != "none":
        return None
    if not graph.is_param(node.inputs[1]) or tensor in graph.outputs:
        return None
    if len(graph.consumers(tensor)) != 1:
        return None
    if len(node.inputs) > 2 and not graph.is_param(node.inputs[2]):
        return None
    return node


def _weights_and_bias(graph: Graph, node: Node) -> Tuple[np.ndarray, np.ndarray]:
    """Weights with output channels on the last axis, and the bias (zeros if none)."""
    w = np.asarray(graph.params[node.inputs[1]], dtype=np.float32)
    if node.op == "MatMul" and node.attrs.get("transpose_b"):
        w = w.T
    channels = w.shape[-1]
    b = (np.asarray(graph.params[node.inputs[2]], dtype=np.float32).reshape(-1)
         if len(node.inputs) > 2 else np.zeros(channels, np.float32))
    return w, b


def set_weights_and_bias(graph: Graph, node: Node, w: Optional[np.ndarray], b: Optional[np.ndarray],
                         label: str = "folded") -> None:
    """Store new weights (output channel last) / bias as fresh float32 params of ``node``,
    named ``<node>/<label>_weights`` and ``<node>/<label>_bias``; None leaves one as it is."""
    if w is not None:
        if node.op == "MatMul" and node.attrs.get("transpose_b"):
            w = w.T
        node.inputs[1] = graph.add_param(graph.unique_name(f"{node.name}/{label}_weights"),
                                         np.ascontiguousarray(w, dtype=np.float32))
    if b is not None:
        name = graph.add_param(graph.unique_name(f"{node.name}/{label}_bias"), b.astype(np.float32))
        if len(node.inputs) > 2:
            node.inputs[2] = name
        else:
            node.inputs.append(name)


def _absorb(graph: Graph, node: Node, ops: AbstractSet[str]) -> bool:
    """Fold ``node`` (a per-channel affine op in ``ops``) into the Conv2D/MatMul that
    produces its data operand; True if it was folded."""
    if node.op not in ops or len(node.inputs) != 2:
        return False
    for data_pos in (0, 1):
        if data_pos == 1 and not registry.get(node.op).commutative:
            break  # BiasAdd's bias and Sub's subtrahend are the second operand
        data, const = node.inputs[data_pos], node.inputs[1 - data_pos]
        producer = _foldable_producer(graph, data)
        if producer is None:
            continue
        if node.op == "BiasAdd":
            vec = _bias_vector(graph, node, producer)
        else:
            vec = _per_channel(graph, producer, const)
        if vec is None:
            continue
        w, b = _weights_and_bias(graph, producer)
        affine = registry.get(node.op).affine
        if affine == "mul":
            set_weights_and_bias(graph, producer, w * vec, b * vec)
        elif affine == "sub":
            set_weights_and_bias(graph, producer, None, b - vec)
        else:
            set_weights_and_bias(graph, producer, None, b + vec)
        graph.remove_nodes([node])
        _rename_output(graph, producer, node.outputs[0])
        return True
    return False


def _fold_affine(graph: Graph, ops: AbstractSet[str]) -> None:
    """Fold affine ops in ``ops`` into convs/matmuls until none is left to fold.
    Only the visited node itself is ever removed, so iterating a snapshot is safe."""
    changed = True
    while changed:
        changed = any([_absorb(graph, n, ops) for n in graph.nodes_of(ops)])


# ---------------------------------------------------------------- fold_batchnorm
def fold_batchnorm(graph: Graph) -> None:
    """Fold inference BatchNorm (and the per-channel Mul / Add / Sub / BiasAdd by params
    that Keras 3 freezes BatchNorm to) into the preceding Conv2D/MatMul weights and
    bias.  A BatchNorm with nothing to fold into becomes ``Mul`` + ``Add`` by
    per-channel params."""
    expanded = {}
    for node in graph.nodes_of(("BatchNorm",)):
        if all(graph.is_param(t) for t in node.inputs[1:]):
            expanded[id(node)] = _batchnorm_to_mul_add(graph, node)
    if expanded:
        graph.nodes = [m for n in graph.nodes for m in expanded.get(id(n), (n,))]
    _fold_affine(graph, registry.AFFINE_OPS)


def _batchnorm_to_mul_add(graph: Graph, node: Node) -> Tuple[Node, Node]:
    """The ``Mul`` + ``Add`` by params computing BatchNorm ``node`` (to take its place)."""
    gamma, beta, mean, var = (np.asarray(graph.params[t], np.float32) for t in node.inputs[1:])
    scale = gamma / np.sqrt(var + np.float32(node.attrs.get("eps", 1e-3)))
    shift = beta - mean * scale
    graph.meta.setdefault(BN_STATS, {})[node.outputs[0]] = (beta.reshape(-1).astype(np.float64),
                                                            np.abs(gamma).reshape(-1).astype(np.float64))
    shape = graph.shape(node.inputs[0])
    rank = len(shape)
    axis = node.attrs.get("axis", -1) % rank
    bshape = (-1,) + (1,) * (rank - 1 - axis)
    scale_p = graph.add_param(graph.unique_name(f"{node.name}/scale"), scale.reshape(bshape))
    shift_p = graph.add_param(graph.unique_name(f"{node.name}/shift"), shift.reshape(bshape))
    scaled = graph.unique_name(f"{node.name}/scaled")
    graph.tensors[scaled] = graph.tensors[node.outputs[0]]
    mul = Node(graph.unique_name(f"{node.name}/mul"), "Mul", [node.inputs[0], scale_p], [scaled])
    add = Node(node.name, "Add", [scaled, shift_p], list(node.outputs))
    return mul, add


# ---------------------------------------------------------------- fuse_bias_activation
def fuse_bias_activation(graph: Graph) -> None:
    """Fuse ``BiasAdd`` / ``Add`` of a per-channel param into the Conv2D/MatMul bias, then
    a following Relu/Relu6/LeakyRelu into its ``act`` attribute."""
    _fold_affine(graph, registry.BIAS_OPS)
    for node in graph.nodes_of(registry.FUSABLE_ACT_OPS):
        producer = graph.producer(node.inputs[0])
        if producer is None or not registry.is_weighted(producer.op):
            continue
        if producer.attrs.get("act", "none") != "none" or node.inputs[0] in graph.outputs:
            continue
        if len(graph.consumers(node.inputs[0])) != 1:
            continue
        producer.attrs["act"] = registry.fused_act(node.op)
        if node.op == "LeakyRelu":
            producer.attrs["act_alpha"] = float(node.attrs.get("alpha", 0.2))
        graph.remove_nodes([node])
        _rename_output(graph, producer, node.outputs[0])


# ---------------------------------------------------------------- fuse_prelu
@dataclasses.dataclass
class PReluPattern:
    """A PReLU written with elementwise ops: ``x if x >= 0 else alpha * x``.

    ``x``: the input tensor; ``alpha``: float32 slopes broadcasting against ``x`` (shape as in
    the graph's constant); ``nodes``: the ops computing it, the last one producing the result."""

    x: str
    alpha: np.ndarray
    nodes: List[Node]


def match_prelu(graph: Graph, node: Node) -> Optional[PReluPattern]:
    """The PReLU that ``node`` (an ``Add``/``Sub``) completes, or None.  Recognised forms,
    with ``c`` a float param and ``neg(x)`` either ``Relu(Neg(x))`` (= -min(x, 0): Keras,
    ratelnn's exporters) or ``Minimum(x, 0)`` (MXNet's importer)::

        Add(Relu(x), Mul(c, neg(x)))   Sub(Relu(x), Mul(c, neg(x)))   (Add/Mul operands in any order)

    Every intermediate tensor must have this pattern as its only reader, and be neither a graph
    output nor a quantization point, so the nodes can be replaced by one op."""
    if node.op not in registry.ADDITIVE_OPS or len(node.inputs) != 2 or len(node.outputs) != 1:
        return None
    op = registry.get(node.op)
    orders = [(0, 1), (1, 0)] if op.commutative else [(0, 1)]
    for p_pos, m_pos in orders:
        found = _match_prelu_operands(graph, node.inputs[p_pos], node.inputs[m_pos])
        if found is not None:
            x, c, sign, inner = found
            sign *= 1.0 if op.affine == "add" else -1.0
            if graph.shape(node.outputs[0]) != graph.shape(x):
                return None   # alpha would broadcast x to a larger shape
            return PReluPattern(x, (np.float32(sign) * c).astype(np.float32), inner + [node])
    return None


def _match_prelu_operands(graph: Graph, positive: str, scaled: str):
    """``(x, c, sign, nodes)`` if ``positive`` is ``Relu(x)`` and ``scaled`` is
    ``Mul(c, neg(x))``, where ``neg(x) == sign * min(x, 0)``; else None."""
    relu = _sole_producer(graph, positive, "Relu")
    mul = _sole_producer(graph, scaled, "Mul")
    if relu is None or mul is None or len(mul.inputs) != 2:
        return None
    x = relu.inputs[0]
    for c_pos in (0, 1):
        c, t = mul.inputs[c_pos], mul.inputs[1 - c_pos]
        if not graph.is_param(c) or np.asarray(graph.params[c]).dtype.kind != "f":
            continue
        negative = _negative_part(graph, t, x)
        if negative is not None:
            sign, nodes = negative
            return x, np.asarray(graph.params[c], np.float32), sign, [relu] + nodes + [mul]
    return None


def _negative_part(graph: Graph, tensor: str, x: str):
    """``(sign, nodes)`` if ``tensor`` is ``Relu(Neg(x))`` (sign -1) or ``Minimum(x, 0)``
    with a one-element zero param (sign +1), computed only for this use, else None."""
    relu = _sole_producer(graph, tensor, "Relu")
    if relu is not None:
        neg = _sole_producer(graph, relu.inputs[0], "Neg")
        return (-1.0, [neg, relu]) if neg is not None and neg.inputs[0] == x else None
    minimum = _sole_producer(graph, tensor, "Minimum")
    if minimum is None or x not in minimum.inputs or len(minimum.inputs) != 2:
        return None
    zero = minimum.inputs[1 - minimum.inputs.index(x)]
    if graph.is_param(zero) and np.asarray(graph.params[zero]).size == 1 and not np.any(graph.params[zero]):
        return 1.0, [minimum]
    return None


def _sole_producer(graph: Graph, tensor: str, op: str) -> Optional[Node]:
    """The ``op`` node producing ``tensor`` if ``tensor`` has exactly one reader and is
    neither a graph output nor a quantization point."""
    node = graph.producer(tensor)
    if node is None or node.op != op or tensor in graph.outputs or tensor in graph.qparams:
        return None
    return node if len(graph.consumers(tensor)) == 1 else None


def fuse_prelu(graph: Graph) -> None:
    """Replace PReLU decompositions (:func:`match_prelu`) by one op: the fused activation
    ``act="prelu"`` (``act_alpha``: float32 slopes, one per output channel) of the
    Conv2D/MatMul producing ``x`` when nothing else reads ``x`` and the slopes are per
    channel; else a ``PRelu(x, alpha)`` node."""
    for node in graph.nodes_of(registry.ADDITIVE_OPS):   # only ever ends a pattern
        pattern = match_prelu(graph, node)
        if pattern is None or _fuse_prelu_into_producer(graph, pattern):
            continue
        alpha = graph.add_param(graph.unique_name(f"{node.name}/alpha"), pattern.alpha)
        graph.replace_node(node, Node(node.name, "PRelu", [pattern.x, alpha], list(node.outputs)))
        graph.remove_nodes(pattern.nodes[:-1])


def _fuse_prelu_into_producer(graph: Graph, pattern: PReluPattern) -> bool:
    producer = graph.producer(pattern.x)
    if (producer is None or not registry.is_weighted(producer.op) or len(producer.outputs) != 1
            or producer.attrs.get("act", "none") != "none" or pattern.x in graph.outputs
            or pattern.x in graph.qparams):
        return False
    pattern_ids = {id(n) for n in pattern.nodes}
    if any(id(n) not in pattern_ids for n in graph.consumers(pattern.x)):
        return False
    alpha = _channel_vector(graph, producer, pattern.alpha)
    if alpha is None:
        return False
    producer.attrs["act"] = "prelu"
    producer.attrs["act_alpha"] = alpha
    graph.remove_nodes(pattern.nodes)
    _rename_output(graph, producer, pattern.nodes[-1].outputs[0])
    return True


# ---------------------------------------------------------------- pipeline
def run_default_passes(graph: Graph) -> Graph:
    """The default pipeline of docs/ir.md; returns ``graph`` (edited in place)."""
    remove_identity(graph)
    fold_constants(graph)
    fold_batchnorm(graph)
    fuse_bias_activation(graph)
    fuse_prelu(graph)
    graph.prune()
    return graph
