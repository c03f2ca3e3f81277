"""The quantizer: float IR + calibration statistics -> quantized IR (docs/quantization.md).

:func:`quantize` returns a copy of the graph whose ``qparams`` hold a :class:`QParams` for
every quantization point (:mod:`.policy`), weight and bias, and whose ``params`` hold the
integer weights (int8/int16), int32 biases and integer constant operands of quantized ops.
Scales are float32 values (stored as Python floats, or float32 arrays per channel).

With ``auto_int16`` (default True) the activations whose 8-bit quantization loses most,
measured by the SQNR expected from their histogram (:func:`auto_int16_tensors`), become int16.
"""
from __future__ import annotations

import math
from collections import Counter
from typing import Any, List, Mapping, Optional, Set, Tuple

import numpy as np

from ..config import ConfigError
from ..errors import CalibrationError, ModelError
from ..ir import Graph, QParams, TensorInfo
from ..ir import arith
from .policy import QuantPlan, make_plan, quant_cfg_for
from .thresholds import max_abs, sqnr_db, threshold_for

# Smallest scale ever used (2**-40, exact in float32): a tensor or weight channel whose
# range is (nearly) zero still gets a usable, non-zero scale; bias scales s_in*s_w then stay
# >= 2**-80, a normal float32.
MIN_SCALE = 2.0 ** -40

# auto_int16 defaults: promote 8-bit activations whose expected SQNR is below this many dB
# (docs/quantization.md, "auto_int16"), at most this fraction of all activation anchors.
AUTO_INT16_SQNR_DB = 25.0
AUTO_INT16_MAX_FRACTION = 0.1

# Largest bias code the weight scales are chosen for (half the int32 range: the accumulator
# the bias is added to keeps room for the products).
BIAS_CODE_LIMIT = 2.0 ** 30

_DTYPE_OF_BITS = {8: "int8", 16: "int16"}
_round_half_away = arith.ROUNDERS["half_away_from_zero"]


def scale_for(magnitude: float, qmax: int) -> float:
    """float32(max(magnitude / qmax, MIN_SCALE)) as a Python float (division in float64)."""
    return float(np.float32(max(float(magnitude) / qmax, MIN_SCALE)))


def activation_dtype(calibrated_min: float, bits: int, forced: Optional[str] = None) -> str:
    """``forced`` if given, else int16 for 16 bits, uint8 when the minimum is >= 0, else int8."""
    if forced is not None:
        return forced
    if bits == 16:
        return "int16"
    return "uint8" if calibrated_min >= 0 else "int8"


def activation_qparams(tensor: str, stats: Any, config: Mapping[str, Any], bits: int = 8,
                       forced: Optional[str] = None, node_name: Optional[str] = None,
                       full_range: bool = False) -> QParams:
    """Per-tensor QParams of an activation from its statistics: the threshold of the config's
    method, or with ``full_range`` the calibrated max |x|."""
    dtype = activation_dtype(float(stats.min), bits, forced)
    threshold = max_abs(stats) if full_range else threshold_for(tensor, stats, config, node_name, dtype)
    return QParams(dtype, scale_for(threshold, arith.qmax_of(dtype)))


def full_range_anchors(graph: Graph, plan: QuantPlan, config: Mapping[str, Any]) -> Set[str]:
    """The anchors quantized over their whole calibrated range (max |x|) with config
    ``full_range_outputs`` (default True): those of the graph's outputs (an output a
    scale-preserving op makes shares its input's anchor).  A clipping threshold (the EMA
    extremes, ``kld``, ``percentile``, ``mse``) caps the very values a consumer reads from an
    output: a detector's highest scores, a classifier's top logit."""
    if not config.get("full_range_outputs", True):
        return set()
    return {plan.shared.get(t, t) for t in graph.outputs} & set(plan.anchors)


def _config_number(config: Mapping[str, Any], key: str, default: float, lo: float,
                   hi: float) -> float:
    value = config.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ConfigError(f"config key {key!r} must be a number in [{lo}, {hi}], got {value!r}")
    return float(value)


def auto_int16_tensors(plan: QuantPlan, stats: Mapping[str, Any], qparams: Mapping[str, QParams],
                       config: Mapping[str, Any]) -> List[str]:
    """The 8-bit activation anchors ``auto_int16`` promotes to int16, most sensitive first.

    Candidates: anchors quantized to int8/uint8 whose dtype ``layer_configs`` does not force
    and whose statistics have a histogram. Each gets the SQNR its 8-bit QParams are expected
    to reach on the calibration data (:func:`.thresholds.sqnr_db`, rounding and clipping
    error from the histogram). Those below ``auto_int16_sqnr_db`` (default 25 dB) are
    promoted, lowest SQNR first (ties: graph order), at most
    ``max(1, floor(auto_int16_max_fraction * len(plan.anchors)))`` of them (default 10%; none
    when the fraction is 0).
    """
    limit_db = _config_number(config, "auto_int16_sqnr_db", AUTO_INT16_SQNR_DB, -math.inf, math.inf)
    fraction = _config_number(config, "auto_int16_max_fraction", AUTO_INT16_MAX_FRACTION, 0.0, 1.0)
    # at least one when the fraction is not 0: floor() alone gives small graphs no budget
    budget = max(int(math.floor(fraction * len(plan.anchors))), 1 if fraction > 0 else 0)
    scored = []
    for order, t in enumerate(plan.anchors):
        qp = qparams[t]
        if qp.dtype not in ("int8", "uint8") or t in plan.forced_dtype:
            continue
        if getattr(stats[t], "histogram", None) is None:
            continue
        threshold = float(qp.scale) * arith.qmax_of(qp.dtype)
        sqnr = sqnr_db(stats[t], threshold, qp.dtype)
        if sqnr < limit_db:
            scored.append((sqnr, order, t))
    return [t for _, _, t in sorted(scored)[:budget]]


def _float_param(name: str, value: np.ndarray) -> np.ndarray:
    if value.dtype.kind != "f":
        raise ModelError(f"parameter {name!r} has dtype {value.dtype}, expected float "
                         "(is the graph already quantized?)")
    if not np.all(np.isfinite(value)):
        raise ModelError(f"parameter {name!r} contains NaN or Inf")
    return value.astype(np.float32)


def quantize_weight(w: np.ndarray, bits: int = 8, axis: Optional[int] = None,
                    min_scale: Optional[np.ndarray] = None) -> Tuple[np.ndarray, QParams]:
    """Symmetric weight quantization, per channel along ``axis`` (None: per tensor).

    scale_c = float32(max(max|w_c| / qmax, min_scale_c)); an all-zero channel gets scale 1.
    ``min_scale`` (one value per channel, or one for per tensor) floors the scales: see
    :func:`bias_weight_scale_floor`.  Codes: round half away from zero of float32(w / scale_c),
    saturated.
    """
    if bits not in _DTYPE_OF_BITS:
        raise ConfigError(f"weights must have 8 or 16 bits, got num_bits={bits!r}")
    dtype = _DTYPE_OF_BITS[bits]
    qmax = arith.qmax_of(dtype)
    w = np.asarray(w, dtype=np.float32)
    if axis is None:
        magnitudes = np.array([np.max(np.abs(w), initial=0.0)], dtype=np.float64)
    else:
        axis = axis % w.ndim
        other = tuple(i for i in range(w.ndim) if i != axis)
        magnitudes = np.max(np.abs(w), axis=other, initial=0.0).astype(np.float64)
    scales = np.array([1.0 if m == 0 else scale_for(m, qmax) for m in magnitudes], dtype=np.float32)
    if min_scale is not None:
        floor = np.asarray(min_scale, np.float64)
        floor = np.full(1, np.max(floor)) if axis is None else np.broadcast_to(floor, scales.shape)
        scales = np.where(floor > scales, floor, scales).astype(np.float32)
    if axis is None:
        scale = float(scales[0])
        return arith.quantize(w, scale, dtype), QParams(dtype, scale)
    return arith.quantize(w, scales, dtype, axis=axis), QParams(dtype, scales, axis)


def bias_weight_scale_floor(b: np.ndarray, input_scale: float) -> np.ndarray:
    """Smallest weight scale per channel (float64, shape of ``b``) at which bias ``b`` fits in
    BIAS_CODE_LIMIT codes at scale s_in * s_w: 16-bit weights, above all with int16 inputs,
    make s_in * s_w so small that a plain bias would saturate int32 (coarser weights lose far
    less than a clipped bias)."""
    b = np.abs(np.asarray(b, np.float64))
    return b / (np.float64(input_scale) * BIAS_CODE_LIMIT) * (1.0 + 2.0 ** -20)


def quantize_bias(b: np.ndarray, input_scale: float, weight: QParams) -> Tuple[np.ndarray, QParams]:
    """int32 bias at scale float32(s_in * s_w[c]): round half away from zero of
    b / scale computed in float64, saturated to the int32 range."""
    b = np.asarray(b, dtype=np.float32)
    w_scale = np.asarray(weight.scale, dtype=np.float64)
    scale = (np.float64(input_scale) * w_scale).astype(np.float32)
    if weight.per_channel and b.shape != scale.shape:
        raise ModelError(f"bias of shape {b.shape} does not match {scale.size} output channels")
    codes = _round_half_away(b.astype(np.float64) / scale.astype(np.float64))
    lo, hi = arith.QRANGE["int32"]
    q = np.clip(codes, lo, hi).astype(np.int32)
    if weight.per_channel:
        return q, QParams("int32", scale, 0)
    return q, QParams("int32", float(scale))


def quantize_constant(c: np.ndarray, bits: int = 8) -> Tuple[np.ndarray, QParams]:
    """A constant operand (of Add/Sub/Mul/Concat): per tensor, scale = max|c| / qmax; 8 bits:
    uint8 if all values are >= 0 else int8; 16 bits: int16."""
    if bits not in _DTYPE_OF_BITS:
        raise ConfigError(f"constants must have 8 or 16 bits, got {bits!r}")
    c = np.asarray(c, dtype=np.float32)
    dtype = "int16" if bits == 16 else "uint8" if c.size == 0 or np.min(c) >= 0 else "int8"
    scale = scale_for(np.max(np.abs(c), initial=0.0), arith.qmax_of(dtype))
    return arith.quantize(c, scale, dtype), QParams(dtype, scale)


def check_statistics(tensors, stats: Mapping[str, Any]) -> None:
    """Raise CalibrationError naming every tensor of ``tensors`` without usable statistics."""
    missing = [t for t in tensors if t not in stats]
    if missing:
        shown = ", ".join(repr(t) for t in missing[:20])
        more = f" and {len(missing) - 20} more" if len(missing) > 20 else ""
        raise CalibrationError(
            f"no calibration statistics for {len(missing)} tensor(s): {shown}{more}; run the "
            "calibration model (to_cal) on calibration data with this output_dir first")
    empty = [t for t in tensors if getattr(stats[t], "batches", 1) == 0]
    if empty:
        raise CalibrationError(f"calibration statistics of {empty} recorded no batch")


def _weight_axis(node, weight: np.ndarray) -> int:
    """Output-channel axis of a Conv2D (HWIO) or MatMul weight."""
    if node.op == "MatMul" and node.attrs.get("transpose_b", False):
        return 0
    return weight.ndim - 1


def _quantize_params(q: Graph, plan: QuantPlan, config: Mapping[str, Any],
                     weights: Optional[Mapping[str, Tuple[np.ndarray, QParams]]] = None) -> None:
    """Replace the parameter operands of quantized nodes by integer params with qparams.

    A parameter read more than once gets one integer copy per quantized use
    (``<param>/<node>``), so float readers and other uses keep their own values.
    ``weights``: weight param -> (codes, QParams) given by the model itself (a pre-quantized
    graph's fake-quantized weights, :mod:`.prequant`), used as they are.
    """
    uses = Counter(t for n in q.nodes for t in n.inputs)
    nodes = {n.name: n for n in q.nodes}
    originals = dict(q.params)
    for use in plan.param_uses:
        node = nodes[use.node]
        value = _float_param(use.param, originals[use.param])
        if use.role == "weight" and weights and use.param in weights:
            codes, qp = weights[use.param]
        elif use.role == "weight":
            role = "conv_weights" if node.op == "Conv2D" else "matmul_weights"
            settings = quant_cfg_for(config, role)
            axis = _weight_axis(node, value) if settings.get("is_per_channel", True) else None
            bias = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] in originals else None
            floor = None if bias is None else bias_weight_scale_floor(
                originals[bias], q.qparams[node.inputs[0]].scale)
            codes, qp = quantize_weight(value, int(settings.get("num_bits", 8)), axis, floor)
        elif use.role == "bias":
            codes, qp = quantize_bias(value, q.qparams[node.inputs[0]].scale, q.qparams[node.inputs[1]])
        else:   # a constant is as precise as the op's output: an int16 op gets int16 operands
            codes, qp = quantize_constant(value, 16 if q.qparams[node.outputs[0]].dtype == "int16" else 8)
        name = use.param
        if uses[use.param] > 1 or use.param in q.outputs:
            name = q.unique_name(f"{use.param}/{node.name}")
        q.params[name] = codes
        q.tensors[name] = TensorInfo(tuple(codes.shape), str(codes.dtype))
        q.qparams[name] = qp
        node.inputs[use.slot] = name
    read = {t for n in q.nodes for t in n.inputs} | set(q.outputs)
    for name in {u.param for u in plan.param_uses} - read:
        del q.params[name]
        q.tensors.pop(name, None)


def quantize(graph: Graph, stats: Mapping[str, Any], config: Mapping[str, Any]) -> Graph:
    """Quantized copy of ``graph`` from ``stats`` (tensor name -> TensorStats).

    Raises CalibrationError naming tensors without statistics or with NaN/Inf statistics,
    ConfigError for unsupported settings, ModelError for non-float or non-finite params.
    """
    plan = make_plan(graph, config)
    check_statistics(plan.anchors, stats)
    q = graph.copy()
    producer_names = {t: n.name for n in q.nodes for t in n.outputs}
    full = full_range_anchors(graph, plan, config)
    for t in plan.anchors:
        q.qparams[t] = activation_qparams(t, stats[t], config, plan.activation_bits[t],
                                          plan.forced_dtype.get(t), producer_names.get(t), t in full)
    if config.get("auto_int16", True):
        for t in auto_int16_tensors(plan, stats, q.qparams, config):
            q.qparams[t] = activation_qparams(t, stats[t], config, 16, "int16", producer_names.get(t), t in full)
    for t, anchor in plan.shared.items():
        q.qparams[t] = QParams(q.qparams[anchor].dtype, q.qparams[anchor].scale)
    _quantize_params(q, plan, config)
    return q
