"""Empirical bias correction (Nagel et al. 2019, section 4.2; docs/quantization.md,
"Accuracy passes").

Quantized weights and inputs shift the mean of a layer's output: ``E[W_q x_q] != E[W x]``.
For every quantized Conv2D/MatMul with a bias, in graph order (:mod:`.layerwalk`: each layer
sees its input from the already corrected layers before it), the expected error of its
pre-activation output per channel, measured on the calibration sample, is subtracted from
its int32 bias (``round(err / s_b)`` codes, saturating).  Only bias codes change: the engine
format and the executors are untouched.  Layers without a bias are left as they are.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir import Graph, arith
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
