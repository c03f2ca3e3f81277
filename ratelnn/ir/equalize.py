"""Cross-layer equalization and high-bias absorption (Nagel et al. 2019, "Data-Free
Quantization"), a float-preserving IR pass (docs/quantization.md, "Accuracy passes").

A *pair* is a Conv2D/MatMul ``P`` whose output channel ``i`` reaches only input channel ``i``
of one Conv2D/MatMul ``C``, through ops that commute with a positive per-channel scale:

- ``P``'s fused activation is ``none``, ``relu``, ``leaky_relu`` or ``prelu`` (``f(x/s) =
  f(x)/s`` for ``s > 0``).  ``relu6`` is **not**: ``relu6(x/s)·s = clamp(x, 0, 6s)``, so a pair
  behind a ReLU6 is left alone (exactness first);
- between ``P`` and ``C`` only ``MaxPool``, ``AvgPool`` and ``Pad`` with value 0 (same layout),
  each read only by the next op of the chain and none a graph output.

Equalizing a pair divides ``P``'s output channel ``i`` (weights and bias) by ``s_i`` and
multiplies ``C``'s input channel ``i`` by ``s_i`` with ``s_i = sqrt(r1_i / r2_i)``, ``r1_i`` the
largest ``|w|`` of that output channel of ``P`` and ``r2_i`` the largest ``|w|`` reading input
channel ``i`` of ``C``: both become ``sqrt(r1_i r2_i)``.  Pairs share layers (``dw -> pw -> dw``),
so all pairs are swept ``iterations`` times (or until no scale moves by more than 0.1%).
The float function is unchanged up to float32 rounding.

High-bias absorption, only where it is exact for every input: ``P`` without activation and
``C`` a MatMul or an unpadded Conv2D read directly (no pool or pad between).  Then ``P``'s bias
``b`` moves into ``C``'s bias (``C(y + b) = C(y) + C(b)``) and stops inflating the range of the
tensor between them.  Behind a ReLU the paper's ``max(0, beta - 3 gamma)`` rule changes the float
outputs for pre-activations below it; ratelnn does not apply it.
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional

import numpy as np

from . import registry
from .evaluate import evaluate_node
from .graph import Graph, Node
from .passes import BN_STATS, set_weights_and_bias

_HOMOGENEOUS_ACTS = ("none", "relu", "leaky_relu", "prelu")
_CONVERGED = 1e-3   # a sweep moving no scale by more than this relative amount ends the loop


@dataclasses.dataclass
class Pair:
    """``producer``'s output channels feed ``consumer``'s input channels one to one through
    ``between`` (pools / zero pads)."""

    producer: Node
    consumer: Node
    between: List[Node]


def _layout(node: Node) -> str:
    return node.attrs.get("layout", "NHWC")


def _weights_ok(graph: Graph, node: Node) -> bool:
    if not registry.is_weighted(node.op) or len(node.inputs) not in (2, 3):
        return False
    if node.op == "MatMul" and node.attrs.get("transpose_a"):
        return False
    return all(graph.is_param(t) and np.asarray(graph.params[t]).dtype.kind == "f"
               for t in node.inputs[1:])


def _sole_reader(graph: Graph, tensor: str, consumers) -> Optional[Node]:
    readers = consumers.get(tensor, [])
    if tensor in graph.outputs or len(readers) != 1:
        return None
    return readers[0]


def find_pairs(graph: Graph) -> List[Pair]:
    """Every equalizable pair (module docstring), in graph order of the producer."""
    consumers = graph.consumer_map()
    pairs = []
    for p in graph.nodes:
        if not _weights_ok(graph, p) or p.attrs.get("act", "none") not in _HOMOGENEOUS_ACTS:
            continue
        between: List[Node] = []
        node = _sole_reader(graph, p.outputs[0], consumers)
        while node is not None and node.op in registry.CHANNELWISE_OPS and p.op == "Conv2D":
            if _layout(node) != _layout(p) or (node.op == "Pad" and float(node.attrs.get("value", 0.0)) != 0.0):
                node = None
                break
            if node.op == "Pad" and not _pad_keeps_channels(node, _layout(p)):
                node = None
                break
            between.append(node)
            node = _sole_reader(graph, node.outputs[0], consumers)
        if node is None or node.op != p.op or not _weights_ok(graph, node):
            continue
        if node.inputs[0] != (between[-1].outputs[0] if between else p.outputs[0]):
            continue
        if node.op == "Conv2D" and _layout(node) != _layout(p):
            continue
        pairs.append(Pair(p, node, between))
    return pairs


def _pad_keeps_channels(node: Node, layout: str) -> bool:
    """A Pad node pads no channel (its ``pads`` are zero on the channel axis)."""
    pads = node.attrs.get("pads")
    if pads is None:
        return False
    pads = np.asarray(pads).reshape(-1, 2)
    axis = 1 if layout == "NCHW" else pads.shape[0] - 1
    return pads.shape[0] == 4 and not np.any(pads[axis])


# ---------------------------------------------------------------- weight views
def _out_major(graph: Graph, node: Node) -> np.ndarray:
    """``node``'s weights as float64 with the output channel last (a copy)."""
    w = np.asarray(graph.params[node.inputs[1]], np.float64)
    return w.T.copy() if node.op == "MatMul" and node.attrs.get("transpose_b") else w.copy()


def _bias(graph: Graph, node: Node, channels: int) -> np.ndarray:
    if len(node.inputs) > 2:
        return np.asarray(graph.params[node.inputs[2]], np.float64).reshape(-1).copy()
    return np.zeros(channels, np.float64)


def _input_channel_index(node: Node, w: np.ndarray, channels: int):
    """For each input channel ``i`` of ``node`` (weights ``w``, output channel last): the
    index expression selecting the weights that read it."""
    if node.op == "MatMul":
        return [(i, slice(None)) for i in range(channels)]
    groups = int(node.attrs.get("groups", 1))
    cin_g, cout = w.shape[2], w.shape[3]
    cout_g = cout // groups
    return [(slice(None), slice(None), i % cin_g, slice((i // cin_g) * cout_g, (i // cin_g + 1) * cout_g))
            for i in range(channels)]


def _equalize_pair(graph: Graph, pair: Pair) -> float:
    """Equalize one pair in place; returns the largest relative change of a scale."""
    w1, w2 = _out_major(graph, pair.producer), _out_major(graph, pair.consumer)
    channels = w1.shape[-1]
    index = _input_channel_index(pair.consumer, w2, channels)
    if pair.consumer.op == "Conv2D" and w2.shape[2] * int(pair.consumer.attrs.get("groups", 1)) != channels:
        return 0.0
    if pair.consumer.op == "MatMul" and w2.shape[0] != channels:
        return 0.0
    r1 = np.max(np.abs(w1.reshape(-1, channels)), axis=0)
    r2 = np.array([np.max(np.abs(w2[ix]), initial=0.0) for ix in index])
    s = np.ones(channels)
    live = (r1 > 0) & (r2 > 0)
    s[live] = np.sqrt(r1[live] / r2[live])
    if not np.any(np.abs(s - 1.0) > 1e-6):
        return 0.0
    b1 = _bias(graph, pair.producer, channels)
    for i, ix in enumerate(index):
        w2[ix] *= s[i]
    # (PReLU/LeakyReLU slopes, per channel or not, commute with a positive scale)
    set_weights_and_bias(graph, pair.producer, w1 / s, b1 / s if len(pair.producer.inputs) > 2 else None,
                         "equalized")
    _update_bn_stats(graph, pair.producer, scale=s)
    set_weights_and_bias(graph, pair.consumer, w2, None, "equalized")
    return float(np.max(np.abs(s - 1.0)))


# ---------------------------------------------------------------- high-bias absorption
def _absorb_bias(graph: Graph, pair: Pair) -> bool:
    """Move ``pair.producer``'s bias into ``pair.consumer`` where exact (module docstring)."""
    p, c = pair.producer, pair.consumer
    if pair.between or p.attrs.get("act", "none") != "none" or len(p.inputs) < 3:
        return False
    if c.op == "Conv2D" and any(int(v) for v in c.attrs.get("pads", (0, 0, 0, 0))):
        return False
    b1 = np.asarray(graph.params[p.inputs[2]], np.float32).reshape(-1)
    if not np.any(b1):
        return False
    w2 = np.asarray(graph.params[c.inputs[1]])
    probe = dataclasses.replace(c, attrs=dict(c.attrs, act="none"))
    if c.op == "MatMul":
        x = b1.reshape(1, -1)
    else:
        kh, kw = w2.shape[:2]
        dh, dw = c.attrs.get("dilations", (1, 1))
        size = ((kh - 1) * dh + 1, (kw - 1) * dw + 1)
        shape = (1, b1.size) + size if _layout(c) == "NCHW" else (1,) + size + (b1.size,)
        axis = 1 if _layout(c) == "NCHW" else 3
        x = np.broadcast_to(b1.reshape([-1 if i == axis else 1 for i in range(4)]), shape)
    shift = np.asarray(evaluate_node(probe, [x, w2])[0], np.float64).reshape(-1)
    b2 = _bias(graph, c, shift.size) + shift
    name = graph.add_param(graph.unique_name(f"{c.name}/absorbed_bias"), b2.astype(np.float32))
    if len(c.inputs) > 2:
        c.inputs[2] = name
    else:
        c.inputs.append(name)
    p.inputs[2] = graph.add_param(graph.unique_name(f"{p.name}/absorbed_bias"), np.zeros_like(b1))
    _update_bn_stats(graph, p, shift=b1.astype(np.float64))
    return True


def _update_bn_stats(graph: Graph, node: Node, scale=None, shift=None) -> None:
    """Keep the BatchNorm statistics of ``node``'s pre-activation (passes.BN_STATS) true
    after its channels were divided by ``scale`` or its bias lowered by ``shift``."""
    stats = graph.meta.get(BN_STATS, {})
    if node.outputs[0] not in stats:
        return
    mean, std = stats[node.outputs[0]]
    if scale is not None and mean.size == scale.size:
        mean, std = mean / scale, std / scale
    if shift is not None and mean.size == shift.size:
        mean = mean - shift
    stats[node.outputs[0]] = (mean, std)


def equalize(graph: Graph, iterations: int = 8, absorb_bias: bool = True) -> int:
    """Cross-layer equalization of every pair of ``graph`` (edited in place), then high-bias
    absorption where exact; returns the number of pairs.  Unused params are pruned."""
    pairs = find_pairs(graph)
    for _ in range(max(int(iterations), 1)):
        if max([_equalize_pair(graph, pair) for pair in pairs], default=0.0) <= _CONVERGED:
            break
    if absorb_bias:
        for pair in pairs:
            _absorb_bias(graph, pair)
    graph.prune()
    return len(pairs)
