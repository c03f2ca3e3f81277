"""What the quantizer chose, layer by layer: the rows of the quantization table that
``ratelnn build`` prints and writes beside the model (docs/cli.md, "Quantization tables").

One :class:`LayerQuant` per quantized graph input, per quantized node and per node that
``layer_configs`` keeps in fp32, in graph order: its output's dtype and scale (real value =
code x scale) and, for a layer with integer weights, their dtype and per-channel scales.
"""
from __future__ import annotations

import dataclasses
from typing import Any, List, Mapping, Optional

import numpy as np

from ..ir import Graph
from .policy import layer_data_types, make_plan

INPUT_OP = "Input"   # op of a graph input's row


@dataclasses.dataclass
class LayerQuant:
    """``layer`` (IR node, or graph input), ``op``, output ``tensor`` and its ``shape``,
    ``dtype`` (``int8``/``uint8``/``int16``, or ``fp32`` for a float layer) and ``scale``
    (None in fp32); ``weights``: the integer weight param (None without), its
    ``weight_dtype`` and ``weight_scales`` (one per output channel, or one)."""

    layer: str
    op: str
    tensor: str
    shape: List[Optional[int]]
    dtype: str
    scale: Optional[float]
    weights: Optional[str] = None
    weight_dtype: Optional[str] = None
    weight_scales: Optional[List[float]] = None

    def weight_text(self) -> str:
        """``int8 x16 [1.2e-03, 4.5e-03]``: dtype, number of scales, their range."""
        if self.weights is None:
            return ""
        lo, hi = min(self.weight_scales), max(self.weight_scales)
        count = len(self.weight_scales)
        return f"{self.weight_dtype} x{count} [{lo:.3g}, {hi:.3g}]" if count > 1 else f"{self.weight_dtype} {lo:.3g}"


def _scales(scale: Any) -> List[float]:
    return [float(s) for s in np.atleast_1d(np.asarray(scale, np.float64))]


def layer_quants(qgraph: Graph, config: Mapping[str, Any]) -> List[LayerQuant]:
    """The rows of the module docstring for the quantized graph ``qgraph`` made with ``config``."""
    plan = make_plan(qgraph, config)
    fp32 = {name for name, data_type in layer_data_types(qgraph, config).items() if data_type == "fp32"}
    rows = [LayerQuant(t, INPUT_OP, t, list(qgraph.shape(t)), qgraph.qparams[t].dtype,
                       _scales(qgraph.qparams[t].scale)[0])
            for t in qgraph.inputs if t in qgraph.qparams and not qgraph.qparams[t].per_channel]
    for node in qgraph.nodes:
        out = node.outputs[0]
        if plan.is_quantized(node) and out in qgraph.qparams:
            qp = qgraph.qparams[out]
            row = LayerQuant(node.name, node.op, out, list(qgraph.shape(out)), qp.dtype,
                             _scales(qp.scale)[0] if not qp.per_channel else None)
            weights = next((t for t in node.inputs if qgraph.is_param(t) and t in qgraph.qparams
                            and qgraph.qparams[t].dtype != "int32"), None)
            if weights is not None:
                row.weights, row.weight_dtype = weights, qgraph.qparams[weights].dtype
                row.weight_scales = _scales(qgraph.qparams[weights].scale)
            rows.append(row)
        elif node.name in fp32:
            rows.append(LayerQuant(node.name, node.op, out, list(qgraph.shape(out)), "fp32", None))
    return rows
