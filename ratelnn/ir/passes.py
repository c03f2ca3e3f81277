"""Float-preserving graph passes run by every frontend after import (docs/ir.md).

Each pass edits the graph in place and keeps the float outputs unchanged up to float
rounding.  Graph input and output tensor names are never changed: when a node that
produces a graph output is fused away, the fused node takes over that output's name.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

from .evaluate import evaluate_node
from .graph import Graph, Node

# ops that must survive constant folding: they carry quantization or framework semantics
_NOT_FOLDABLE = {"Opaque", "Engine", "MinMax", "Quant", "Dequant"}
_ACTIVATIONS = {"Relu": "relu", "Relu6": "relu6", "LeakyRelu": "leaky_relu"}


# ---------------------------------------------------------------- remove_identity
def remove_identity(graph: Graph) -> None:
    """Drop ``Identity`` nodes.  An identity producing a graph output is removed by
    renaming its producer's output to the graph output name; it is kept only when that
    is impossible (its input is a graph input, a param, another graph output, or an
    output of a multi-output node)."""
    for node in [n for n in graph.nodes if n.op == "Identity"]:
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
    graph.tensors.pop(old, None)
    graph.qparams.pop(old, None)


# ---------------------------------------------------------------- fold_constants
def fold_constants(graph: Graph) -> None:
    """Replace every node whose inputs are all params by params holding its outputs."""
    kept = []
    for node in graph.nodes:
        if node.op in _NOT_FOLDABLE or not node.inputs or not all(graph.is_param(t) for t in node.inputs):
            kept.append(node)
            continue
        values = evaluate_node(node, [graph.params[t] for t in node.inputs])
        for t, v in zip(node.outputs, values):
            graph.add_param(t, v)
    graph.nodes = kept


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
    value = np.asarray(graph.params[operand])
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
    if node is None or node.op not in ("Conv2D", "MatMul") or node.attrs.get("act", "none") != "none":
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


def _set_weights_and_bias(graph: Graph, node: Node, w: Optional[np.ndarray], b: Optional[np.ndarray]) -> None:
    """Store new weights (output channel last) / bias as fresh params of ``node``."""
    if w is not None:
        if node.op == "MatMul" and node.attrs.get("transpose_b"):
            w = w.T
        node.inputs[1] = graph.add_param(graph.unique_name(f"{node.name}/folded_weights"),
                                         np.ascontiguousarray(w, dtype=np.float32))
    if b is not None:
        name = graph.add_param(graph.unique_name(f"{node.name}/folded_bias"), b.astype(np.float32))
        if len(node.inputs) > 2:
            node.inputs[2] = name
        else:
            node.inputs.append(name)


def _absorb(graph: Graph, node: Node, ops: Tuple[str, ...]) -> bool:
    """Fold ``node`` (a per-channel affine op in ``ops``) into the Conv2D/MatMul that
    produces its data operand; True if it was folded."""
    if node.op not in ops or len(node.inputs) != 2:
        return False
    for data_pos in (0, 1):
        if node.op in ("BiasAdd", "Sub") and data_pos == 1:
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
        if node.op == "Mul":
            _set_weights_and_bias(graph, producer, w * vec, b * vec)
        elif node.op == "Sub":
            _set_weights_and_bias(graph, producer, None, b - vec)
        else:
            _set_weights_and_bias(graph, producer, None, b + vec)
        graph.remove_nodes([node])
        _rename_output(graph, producer, node.outputs[0])
        return True
    return False


def _fold_affine(graph: Graph, ops: Tuple[str, ...]) -> None:
    """Fold affine ops in ``ops`` into convs/matmuls until none is left to fold.
    Only the visited node itself is ever removed, so iterating a snapshot is safe."""
    changed = True
    while changed:
        changed = any([_absorb(graph, n, ops) for n in list(graph.nodes)])


# ---------------------------------------------------------------- fold_batchnorm
def fold_batchnorm(graph: Graph) -> None:
    """Fold inference BatchNorm (and the per-channel Mul / Add / Sub / BiasAdd by params
    that Keras 3 freezes BatchNorm to) into the preceding Conv2D/MatMul weights and
    bias.  A BatchNorm with nothing to fold into becomes ``Mul`` + ``Add`` by
    per-channel params."""
    for node in [n for n in graph.nodes if n.op == "BatchNorm"]:
        if all(graph.is_param(t) for t in node.inputs[1:]):
            _batchnorm_to_mul_add(graph, node)
    _fold_affine(graph, ("Mul", "Add", "Sub", "BiasAdd"))


def _batchnorm_to_mul_add(graph: Graph, node: Node) -> None:
    gamma, beta, mean, var = (np.asarray(graph.params[t], np.float32) for t in node.inputs[1:])
    scale = gamma / np.sqrt(var + np.float32(node.attrs.get("eps", 1e-3)))
    shift = beta - mean * scale
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
    idx = graph.nodes.index(node)
    graph.nodes[idx:idx + 1] = [mul, add]


# ---------------------------------------------------------------- fuse_bias_activation
def fuse_bias_activation(graph: Graph) -> None:
    """Fuse ``BiasAdd`` / ``Add`` of a per-channel param into the Conv2D/MatMul bias, then
    a following Relu/Relu6/LeakyRelu into its ``act`` attribute."""
    _fold_affine(graph, ("BiasAdd", "Add"))
    for node in [n for n in graph.nodes if n.op in _ACTIVATIONS]:
        producer = graph.producer(node.inputs[0])
        if producer is None or producer.op not in ("Conv2D", "MatMul"):
            continue
        if producer.attrs.get("act", "none") != "none" or node.inputs[0] in graph.outputs:
            continue
        if len(graph.consumers(node.inputs[0])) != 1:
            continue
        producer.attrs["act"] = _ACTIVATIONS[node.op]
        if node.op == "LeakyRelu":
            producer.attrs["act_alpha"] = float(node.attrs.get("alpha", 0.2))
        graph.remove_nodes([node])
        _rename_output(graph, producer, node.outputs[0])


# ---------------------------------------------------------------- pipeline
def run_default_passes(graph: Graph) -> Graph:
    """The default pipeline of docs/ir.md; returns ``graph`` (edited in place)."""
    remove_identity(graph)
    fold_constants(graph)
    fold_batchnorm(graph)
    fuse_bias_activation(graph)
    graph.prune()
    return graph
