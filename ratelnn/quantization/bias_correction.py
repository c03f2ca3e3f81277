"""Bias correction (Nagel et al. 2019, section 4.2; docs/quantization.md, "Accuracy passes").

Empirical (:func:`correct_biases`):
Quantized weights and inputs shift the mean of a layer's output: ``E[W_q x_q] != E[W x]``.
For every quantized Conv2D/MatMul with a bias, in graph order (:mod:`.layerwalk`: each layer
sees its input from the already corrected layers before it), the expected error of its
pre-activation output per channel, measured on the calibration sample, is subtracted from
its int32 bias (``round(err / s_b)`` codes, saturating).  Only bias codes change: the engine
format and the executors are untouched.  Layers without a bias are left as they are.

Analytic (:func:`correct_biases_analytic`), without data: where the layer's input is the
output of a layer a BatchNorm was folded into (``graph.meta["bn_stats"]``, recorded by
``fold_batchnorm``), its per-channel mean is that of ``act(N(beta, gamma²))`` (the clipped
normal for ReLU/ReLU6) and the error of the weights alone, ``(W_q - W) E[x]``, is subtracted
from the bias (zero padding ignored).  Keras 3 freezes BatchNorm into Mul/Add before ratelnn
sees it: such graphs have no BatchNorm statistics and are left as they are.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np

from ..ir import Graph, arith, registry
from ..ir.passes import BN_STATS
from .layerwalk import Layer, walk_layers

_round = arith.ROUNDERS["half_away_from_zero"]


def dequantized(qgraph: Graph, name: str) -> np.ndarray:
    """The float value a QDQ model reads for integer param ``name``."""
    qp = qgraph.qparams[name]
    return arith.dequantize(qgraph.params[name], qp.scale, qp.axis if qp.per_channel else None)


def channel_mean(layer: Layer, diffs) -> np.ndarray:
    """Mean over the real rows (and positions) of ``diffs`` (one array per chunk), per channel."""
    axis = layer.channel_axis()
    total, count = 0.0, 0
    for d, real in zip(diffs, layer.real):
        d = np.moveaxis(np.asarray(d, np.float64)[:real], axis, -1)
        d = d.reshape(-1, d.shape[-1])
        total = total + d.sum(axis=0)
        count += d.shape[0]
    return total / max(count, 1)


def correct_layer(qgraph: Graph, layer: Layer, w: np.ndarray) -> tuple:
    """Correct ``layer``'s int32 bias in ``qgraph`` for dequantized weights ``w``; returns
    (w, corrected dequantized bias or None)."""
    q, f = layer.qnode, layer.fnode
    if len(q.inputs) < 3 or len(f.inputs) < 3:
        return w, None
    bias = q.inputs[2]
    b = dequantized(qgraph, bias)
    wf, bf = (np.asarray(f_params, np.float32) for f_params in layer.float_params)
    diffs = [layer.pre_activation(f, xq, w, b) - layer.pre_activation(f, xf, wf, bf)
             for xq, xf in zip(layer.x_q, layer.x_f)]
    err = channel_mean(layer, diffs)
    scale = np.asarray(qgraph.qparams[bias].scale, np.float64)
    lo, hi = arith.QRANGE["int32"]
    codes = np.clip(qgraph.params[bias].astype(np.float64) - _round(err / scale), lo, hi).astype(np.int32)
    qgraph.params[bias] = codes
    return w, dequantized(qgraph, bias)


def correct_biases(graph: Graph, qgraph: Graph, config: Mapping[str, Any],
                   sample: Mapping[str, np.ndarray]) -> Graph:
    """``qgraph`` (quantized from float ``graph``) with empirically corrected biases (edited
    in place and returned); ``sample``: input name -> [N, ...] calibration inputs."""
    walk_layers(graph, qgraph, config, sample,
                lambda layer: correct_layer(qgraph, layer, dequantized(qgraph, layer.qnode.inputs[1])))
    return qgraph


# ---------------------------------------------------------------- analytic
def _relu_mean(mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """E[max(X, 0)] for X ~ N(mean, std²), per channel."""
    safe = np.where(std > 0, std, 1.0)
    z = mean / safe
    pdf = np.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1.0 + np.vectorize(math.erf)(z / math.sqrt(2)))
    return np.where(std > 0, std * pdf + mean * cdf, np.maximum(mean, 0.0))


def input_mean(graph: Graph, tensor: str) -> Optional[np.ndarray]:
    """Per-channel mean of ``tensor`` from BatchNorm statistics, None if unknown."""
    stats = graph.meta.get(BN_STATS, {})
    if tensor not in stats:
        return None
    mean, std = stats[tensor]
    producer = graph.producer(tensor)
    act = producer.attrs.get("act", "none") if producer is not None else "none"
    if act == "none":
        return mean
    if act == "relu":
        return _relu_mean(mean, std)
    if act == "relu6":
        return _relu_mean(mean, std) - _relu_mean(mean - 6.0, std)
    return None


def _weight_error(graph: Graph, qgraph: Graph, fnode, qnode, mean: np.ndarray) -> Optional[np.ndarray]:
    """``(W_q - W) E[x]`` per output channel, None if the channels do not match."""
    dw = dequantized(qgraph, qnode.inputs[1]).astype(np.float64) - graph.params[fnode.inputs[1]]
    if fnode.op == "MatMul":
        dw = dw.T if fnode.attrs.get("transpose_b") else dw
        return mean @ dw if dw.shape[0] == mean.size else None
    kh, kw, cin_g, cout = dw.shape
    groups = int(fnode.attrs.get("groups", 1))
    if cin_g * groups != mean.size:
        return None
    dw = dw.reshape(kh, kw, cin_g, groups, cout // groups)
    return np.einsum("hwcgo,gc->go", dw, mean.reshape(groups, cin_g)).reshape(cout)


def correct_biases_analytic(graph: Graph, qgraph: Graph, config: Mapping[str, Any]) -> Graph:
    """``qgraph`` with the analytic correction of the module docstring (in place)."""
    floats = {n.name: n for n in graph.nodes}
    for q in qgraph.nodes:
        f = floats.get(q.name)
        if (f is None or not registry.is_weighted(q.op) or len(q.inputs) < 3
                or q.inputs[2] not in qgraph.params or qgraph.params[q.inputs[1]].dtype.kind != "i"):
            continue
        mean = input_mean(graph, f.inputs[0])
        err = None if mean is None else _weight_error(graph, qgraph, f, q, mean)
        if err is None:
            continue
        bias = q.inputs[2]
        scale = np.asarray(qgraph.qparams[bias].scale, np.float64)
        lo, hi = arith.QRANGE["int32"]
        qgraph.params[bias] = np.clip(qgraph.params[bias].astype(np.float64) - _round(err / scale),
                                      lo, hi).astype(np.int32)
    return qgraph
