"""Pre-quantized (quantization-aware-trained) graphs -> quantized IR, without calibration
(docs/quantization.md "Importing pre-quantized (QAT) graphs").

A frontend reads the graph's fake-quantization nodes (TensorFlow: ``frontend/tensorflow/
fake_quant.py``) into

- one :class:`Grid` per fake-quant node on an activation, the node left in the IR (an
  ``Opaque`` node whose first input is the quantized tensor): the lattice its output lies on,
  ``real = code * scale`` with codes ``[lo, hi]`` once the zero point is taken out;
- weight steps: constant weights the frontend already replaced by their fake-quantized values
  (on the lattice), param name -> step per element (broadcastable to the param).

:func:`quantize_prequantized` maps them onto the NPU's symmetric arithmetic (zero point 0,
:func:`map_grid`) and returns the quantized IR the compiler takes, like ``quantizer.quantize``
does from statistics.  A range held differently (an asymmetric one: same lattice, other clamp)
is named in one UserWarning; a range without a static lattice is a :class:`QuantizationError`
naming its node.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..errors import QuantizationError
from ..ir import Graph, Node, QParams
from .policy import FLOAT_LAYERS_META, QuantPlan, make_plan

# dtype -> code range, in the order tried
DTYPE_RANGES = {"uint8": (0, 255), "int8": (-128, 127), "int16": (-32768, 32767)}
# a weight value lies on its lattice when |w - code * step| <= this fraction of the step
# (float32 rounding of TF's ``code * step + nudged_min``)
GRID_TOLERANCE = 2.0 ** -10


@dataclasses.dataclass
class Grid:
    """The lattice of one fake-quant node on an activation: its output is ``code * scale`` with
    integer ``code`` in ``[lo, hi]`` (zero point taken out).  ``describe``: the range as the
    node states it (for messages); ``problem``: why it has no static per-tensor lattice (a
    range computed at run time, per-channel ranges), None if it has one."""

    node: str
    op: str
    scale: float
    lo: int
    hi: int
    describe: str
    problem: Optional[str] = None

    def label(self) -> str:
        return f"{self.op} node {self.node!r}"


@dataclasses.dataclass(frozen=True)
class GridMapping:
    """A fake-quant lattice on the NPU: ``qparams``, and ``note`` saying how it differs from the
    node's (None: the same lattice and clamp, up to the one-code ends of :func:`map_grid`)."""

    qparams: QParams
    note: Optional[str] = None


def map_grid(grid: Grid) -> GridMapping:
    """The NPU's form of ``grid`` (symmetric: zero at code 0).

    - Exact: the codes ``[lo, hi]`` are a dtype's range, or within one code of it at each end
      (TF's nudging puts ``[-a, a]`` at codes ``[-127, 128]`` or ``[-128, 127]``;
      ``narrow_range`` gives ``[-127, 127]``): that dtype at the node's step.
    - Same lattice, other clamp (an asymmetric range, e.g. ``[-1.3, 2.7]`` -> codes
      ``[-83, 172]``, or fewer than 8 bits): the narrowest dtype holding the codes at the node's
      step.  Every value of the range is exact; values beyond it are clipped at the dtype's
      range instead of the node's (the note says where).
    - Codes beyond int16 (an asymmetric 16-bit range): int16 over the range's larger side; the
      note gives the largest error on the node's lattice.

    Raises QuantizationError naming the node for a range without a static lattice or a step
    that is not a positive finite number."""
    if grid.problem:
        raise QuantizationError(f"{grid.label()}: {grid.problem}")
    if not np.isfinite(grid.scale) or grid.scale <= 0:
        raise QuantizationError(f"{grid.label()}: range {grid.describe} gives step {grid.scale}; "
                                "the NPU needs a positive finite scale")
    step = float(np.float32(grid.scale))
    for dtype, (qmin, qmax) in DTYPE_RANGES.items():
        if abs(grid.lo - qmin) <= 1 and abs(grid.hi - qmax) <= 1:
            return GridMapping(QParams(dtype, step))
    where = (f"{grid.label()}: range {grid.describe}, codes [{grid.lo}, {grid.hi}] with zero at code "
             f"{-grid.lo} of {grid.hi - grid.lo + 1}")
    for dtype, (qmin, qmax) in DTYPE_RANGES.items():
        if qmin <= grid.lo and grid.hi <= qmax:
            return GridMapping(QParams(dtype, step), (
                f"{where}: held as {dtype} at its step {step:.6g}, every value of the range exact; values "
                f"beyond it are clipped at [{qmin * step:.6g}, {qmax * step:.6g}] instead of "
                f"[{grid.lo * step:.6g}, {grid.hi * step:.6g}]"))
    qmin, qmax = DTYPE_RANGES["int16"]
    wide = float(np.float32(max(-grid.lo, grid.hi) * step / qmax))
    values = np.arange(grid.lo, grid.hi + 1, dtype=np.float64) * step
    error = float(np.max(np.abs(values - np.clip(np.rint(values / wide), qmin, qmax) * wide)))
    return GridMapping(QParams("int16", wide), (
        f"{where}: mapped onto int16 at step {wide:.6g}, largest error {error:.3g} ({error / step:.2f} of its "
        "step) on the range's values"))


def grid_qparams(grid: Grid) -> QParams:
    """Per-tensor QParams of ``grid`` (see :func:`map_grid`)."""
    return map_grid(grid).qparams


def weight_codes(values: np.ndarray, steps: np.ndarray, axis: int, label: str) -> Tuple[np.ndarray, QParams]:
    """Integer weights and QParams of fake-quantized weights ``values`` whose lattice step is
    ``steps`` (broadcastable to ``values``): codes ``rint(values / steps)``, per channel along
    ``axis`` (the output channels) or per tensor when ``steps`` is one number.  The codes
    reproduce the values up to float32 rounding (checked); int8 when they fit, else int16.
    An all-zero channel of step 0 gets scale 1.  ``label`` names the node in errors."""
    values = np.asarray(values, np.float32)
    steps = np.asarray(steps, np.float32)
    per_tensor = steps.size == 1
    full = np.broadcast_to(steps, values.shape).astype(np.float64)
    axis = axis % values.ndim
    moved = np.moveaxis(full, axis, -1).reshape(-1, values.shape[axis])
    if not per_tensor and np.any(moved.max(axis=0) != moved.min(axis=0)):
        raise QuantizationError(f"{label}: the weights are quantized per channel along another "
                                f"axis than the output channels (axis {axis}); the NPU scales "
                                "weights per output channel")
    channel = moved[0] if moved.size else np.ones(values.shape[axis])
    if np.any(channel < 0) or not np.all(np.isfinite(channel)):
        raise QuantizationError(f"{label}: weight steps {channel} are not positive finite numbers")
    zero = channel == 0
    if np.any(zero):
        dead = np.moveaxis(values, axis, -1).reshape(-1, values.shape[axis])[:, zero]
        if np.any(dead != 0):
            raise QuantizationError(f"{label}: a weight channel with range [0, 0] holds non-zero values")
        channel = np.where(zero, 1.0, channel)
    shape = [1] * values.ndim
    shape[axis] = -1
    step = channel.reshape(shape) if not per_tensor else np.float64(channel[0] if channel.size else 1.0)
    codes = np.rint(values.astype(np.float64) / step)
    off = np.abs(values - codes * step) / np.broadcast_to(step, values.shape)
    if off.size and np.max(off) > GRID_TOLERANCE:
        raise QuantizationError(f"{label}: the fake-quantized weights are not multiples of their "
                                f"step (off by {np.max(off):.3g} steps): zero is not a code")
    for dtype in ("int8", "int16"):
        lo, hi = np.iinfo(dtype).min, np.iinfo(dtype).max
        if codes.size == 0 or (codes.min() >= lo and codes.max() <= hi):
            if per_tensor:
                return codes.astype(dtype), QParams(dtype, float(np.float32(step)))
            return codes.astype(dtype), QParams(dtype, channel.astype(np.float32), axis)
    raise QuantizationError(f"{label}: weight codes reach {codes.min():.0f}..{codes.max():.0f}, "
                            "beyond int16")


# ------------------------------------------------------------------ the graph
def _absorb(g: Graph, node: Node) -> Optional[str]:
    """Remove fake-quant ``node`` so that the tensor it quantizes takes its place; returns that
    tensor's name, or None (node kept) when its output is a graph output that no single-output
    producer can take over."""
    x, y = node.inputs[0], node.outputs[0]
    if y not in g.outputs:
        g.remove_nodes([node])
        g.replace_uses(y, x)
        g.tensors.pop(y, None)
        return x
    producer = g.producer(x)
    if producer is None or len(producer.outputs) != 1 or x in g.outputs:
        return None
    g.remove_nodes([node])
    producer.outputs = [y]
    g.replace_uses(x, y)
    g.tensors.pop(x, None)
    if producer.name == x:
        producer.name = node.name
    return y


def _absorb_all(g: Graph, grids: Mapping[str, Grid]) -> Dict[str, List[Grid]]:
    """Absorb every node named in ``grids`` (graph order); tensor -> the grids put on it."""
    on: Dict[str, List[Grid]] = {}
    for node in [n for n in g.nodes if n.name in grids]:
        tensor = _absorb(g, node)
        if tensor is None:
            continue
        for old in [t for t in on if t not in g.tensors]:   # renamed to a graph output it took over
            on.setdefault(tensor, []).extend(on.pop(old))
        on.setdefault(tensor, []).append(grids[node.name])
    return on


def _float_fallback(g: Graph, ranged: Mapping[str, Any], config: Mapping[str, Any]) -> Tuple[QuantPlan, List[str]]:
    """The plan once every quantized layer reading or writing a tensor without a range is kept
    float (repeated until every anchor has one); the layers kept float go in ``g.meta``."""
    kept: set = set(g.meta.get(FLOAT_LAYERS_META, ()))
    missing_all: List[str] = []
    while True:
        g.meta[FLOAT_LAYERS_META] = sorted(kept)
        plan = make_plan(g, config)
        missing = [a for a in plan.anchors if a not in ranged]
        if not missing:
            return plan, missing_all
        missing_all += missing
        for a in missing:
            producer = g.producer(a)
            if producer is not None and plan.is_quantized(producer):
                kept.add(producer.name)
            kept.update(r.name for r in g.consumers(a) if plan.is_quantized(r))


def _tensor_qparams(tensor: str, grids: List[Grid]) -> QParams:
    qps = [grid_qparams(gr) for gr in grids]
    if any((q.dtype, q.scale) != (qps[0].dtype, qps[0].scale) for q in qps[1:]):
        raise QuantizationError(f"tensor {tensor!r} is fake-quantized twice with different ranges: "
                                + ", ".join(f"{gr.label()} {gr.describe}" for gr in grids))
    return qps[0]


def _weight_axis(node: Node, weight: np.ndarray) -> int:
    return 0 if node.op == "MatMul" and node.attrs.get("transpose_b", False) else weight.ndim - 1


def quantize_prequantized(graph: Graph, grids: Mapping[str, Grid], weight_steps: Mapping[str, np.ndarray],
                          config: Mapping[str, Any], weight_labels: Optional[Mapping[str, str]] = None) -> Graph:
    """Quantized IR of a pre-quantized float IR ``graph`` (default passes run): activation
    ranges from ``grids`` (fake-quant node name -> Grid), weight lattices from ``weight_steps``
    (param -> steps).  Fake-quant nodes on tensors the NPU quantizes are removed (their tensor
    gets the QParams); the others stay framework ops.  Layers reading or writing a tensor
    without a range stay float (a UserWarning lists them).  ``weight_labels``: param -> the
    fake-quant node it came from, for messages.  Raises QuantizationError naming the node."""
    from .quantizer import _quantize_params
    labels = dict(weight_labels or {})
    trial = graph.copy()
    on = _absorb_all(trial, grids)
    plan, missing = _float_fallback(trial, on, config)
    planned = set(plan.anchors) | set(plan.shared)
    absorbed = {gr.node for t, grs in on.items() if t in planned for gr in grs}
    g = graph.copy()
    on = _absorb_all(g, {name: gr for name, gr in grids.items() if name in absorbed})
    g.meta[FLOAT_LAYERS_META] = trial.meta[FLOAT_LAYERS_META]
    plan = make_plan(g, config)
    if not plan.quantized_nodes:
        raise QuantizationError(f"pre-quantized graph {graph.name!r}: no layer has fake-quant ranges on "
                                f"all its inputs and outputs (tensors without one: {missing[:10]})")
    if g.meta[FLOAT_LAYERS_META]:
        warnings.warn(f"pre-quantized graph {graph.name!r}: tensors {missing[:10]} have no fake-quant "
                      f"range; layers {g.meta[FLOAT_LAYERS_META]} stay float", UserWarning, stacklevel=3)
    notes = list(dict.fromkeys(m.note for t in plan.anchors for m in map(map_grid, on[t]) if m.note))
    if notes:
        warnings.warn(f"pre-quantized graph {graph.name!r}: ranges the NPU's symmetric arithmetic holds "
                      f"differently: {'; '.join(notes)}", UserWarning, stacklevel=3)
    for t in plan.anchors:
        g.qparams[t] = _tensor_qparams(t, on[t])
    for t, anchor in plan.shared.items():
        qp = g.qparams[anchor]
        if t in on and (_tensor_qparams(t, on[t]).scale, _tensor_qparams(t, on[t]).dtype) != (qp.scale, qp.dtype):
            raise QuantizationError(f"{on[t][0].label()}: its range {on[t][0].describe} differs from "
                                    f"the range of {anchor!r}, which {g.producer(t).name!r} "
                                    f"({g.producer(t).op}) passes through unchanged on the NPU")
        g.qparams[t] = QParams(qp.dtype, qp.scale)
    nodes = {n.name: n for n in g.nodes}
    weights = {}
    for use in plan.param_uses:
        if use.role == "weight" and use.param in weight_steps and use.param not in weights:
            value = np.asarray(g.params[use.param])
            weights[use.param] = weight_codes(value, weight_steps[use.param], _weight_axis(nodes[use.node], value),
                                              labels.get(use.param, f"weights {use.param!r}"))
    for param in weight_steps:
        if param not in g.params:
            raise QuantizationError(
                f"{labels.get(param, repr(param))}: the fake-quantized weights are changed after their "
                "fake-quant node (a BatchNorm or per-channel Mul folded into the layer reading them); "
                "fold the BatchNorm before the weights' fake-quant node")
    _quantize_params(g, plan, config, weights)
    _check_biases(g, plan)
    return g


def _check_biases(g: Graph, plan: QuantPlan) -> None:
    """QuantizationError when a bias saturated int32 at scale s_in * s_w (the weight scales of a
    pre-quantized graph are given, so they cannot be coarsened to make it fit)."""
    nodes = {n.name: n for n in g.nodes}
    for use in plan.param_uses:
        node = nodes[use.node]
        if use.role != "bias" or len(node.inputs) < 3:
            continue
        codes = np.asarray(g.params[node.inputs[2]], np.int64)
        if np.any(np.abs(codes) >= 2 ** 31 - 1):
            raise QuantizationError(f"layer {node.name!r}: its bias does not fit int32 at scale s_in * s_w "
                                    "(input and weight steps too small for it)")
