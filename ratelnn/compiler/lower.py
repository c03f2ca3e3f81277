"""Lowering: one NPU region of the quantized IR -> one engine (docs/npu-supported-ops.md).

:func:`is_lowerable` says whether a quantized node has a form the engine instructions
support (:func:`lowering_refusal`: why not, in words); :func:`lower_region` turns a region (``ratelnn.compiler.partition.Region``) of such nodes
into an :class:`~ratelnn.npu.engine.Engine` with :class:`~ratelnn.npu.engine.EngineBuilder`.

Arithmetic: every instruction computes the real number the quantized (QDQ) model computes
and rounds it once to the output's codes (docs/npu-arithmetic.md); requantization
multipliers come from :func:`~ratelnn.npu.engine.quantize_multiplier`.

Layouts: engines are NHWC inside.  An IR tensor of an NCHW model may be held in an engine in
two *views*: ``"ir"`` (the IR tensor as it is) and ``"nhwc"`` (``transpose(0, 2, 3, 1)`` of a
rank-4 IR tensor).  Spatial ops of ``layout="NCHW"`` read and write the ``"nhwc"`` view;
ops whose meaning depends on the element order (Reshape, Flatten, Squeeze, FC, Softmax on
another axis) and the engine inputs/outputs use the ``"ir"`` view.  A view is made from the
other with one TRANSPOSE the first time it is needed.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import ModelError
from ..ir import Graph, Node, registry
from ..ir.evaluate import evaluate_node
from ..npu.batching import estimate_cycles
from ..npu.engine import (MAX_SHIFT, Engine, EngineBuilder, make_lut, make_softmax_table, qabs, qrange,
                          quantize_multiplier)
from .partition import Region

TO_NHWC = (0, 2, 3, 1)   # NCHW -> NHWC
TO_NCHW = (0, 3, 1, 2)   # NHWC -> NCHW
NHWC_AXIS_OF_NCHW = (0, 3, 1, 2)   # NCHW axis k is NHWC axis NHWC_AXIS_OF_NCHW[k]

LOWERABLE_OPS = registry.NPU_OPS   # which op lowers to which instructions: ratelnn/ir/registry.py
FUSED_ACTS = ("none", "relu", "relu6", "leaky_relu", "prelu")


# ------------------------------------------------------------------ what can be lowered
def _acts(graph: Graph, node: Node) -> List[str]:
    return [t for t in node.inputs if not graph.is_param(t)]


def _rank_ok(graph: Graph, tensors: Sequence[str]) -> bool:
    for t in tensors:
        shape = graph.tensors[t].shape if t in graph.tensors else None
        if shape is None or not 1 <= len(shape) <= 6 or any(d is None or d < 1 for d in shape):
            return False
    return True


def _axis(axis: int, rank: int) -> int:
    return axis % rank


def is_lowerable(graph: Graph, node: Node) -> bool:
    """True when ``node`` (a quantized node) maps onto engine instructions: a supported op
    with static shapes of rank 1..6, the batch dimension kept, and supported attributes."""
    return lowering_refusal(graph, node) is None


def lowering_refusal(graph: Graph, node: Node) -> Optional[str]:
    """Why ``node`` (a quantized node) has no engine form, in words; None when it has one."""
    if node.op not in LOWERABLE_OPS:
        return f"the NPU has no instruction for op {node.op}"
    if len(node.outputs) != 1:
        return f"{len(node.outputs)} outputs (an engine instruction writes one)"
    acts, out = _acts(graph, node), node.outputs[0]
    if not acts:
        return "no activation input"
    if not _rank_ok(graph, acts + [out]):
        return "a tensor without a static shape of rank 1..6"
    batch = graph.shape(out)[0]
    if any(graph.shape(t)[0] != batch for t in acts):
        return "it changes the batch dimension"
    lowering = registry.lowering(node.op)
    check = _CHECKS.get(lowering)
    if check(graph, node) if check else len(node.inputs) == 1:
        return None
    return f"attributes or operands the NPU's {lowering} instruction does not take"


def _act_ok(graph: Graph, node: Node) -> bool:
    """A fused activation CONV2D/FULLY_CONNECTED express: any slope sign (``M_neg`` is signed),
    finite slopes, one per output channel for ``prelu``."""
    act = node.attrs.get("act", "none")
    if act not in FUSED_ACTS:
        return False
    if act not in ("leaky_relu", "prelu"):
        return True
    slopes = np.asarray(node.attrs.get("act_alpha", 0.2), dtype=np.float64).reshape(-1)
    spatial = registry.lowering(node.op) == "conv2d"
    cout = graph.shape(node.outputs[0])[3 if spatial and node.attrs.get("layout") != "NCHW" else 1]
    return bool(np.isfinite(slopes).all()) and slopes.size in ((1,) if act == "leaky_relu" else (cout,))


def _check_conv(graph: Graph, node: Node) -> bool:
    a = node.attrs
    if len(node.inputs) not in (2, 3) or not all(graph.is_param(t) for t in node.inputs[1:]):
        return False
    if a.get("layout", "NHWC") not in ("NHWC", "NCHW") or len(graph.shape(node.inputs[0])) != 4:
        return False
    if not _act_ok(graph, node):
        return False
    kh, kw = graph.params[node.inputs[1]].shape[:2]
    dh, dw = a.get("dilations", (1, 1))
    top, bottom, left, right = a.get("pads", (0, 0, 0, 0))
    return max(top, bottom) < dh * (kh - 1) + 1 and max(left, right) < dw * (kw - 1) + 1


def _check_matmul(graph: Graph, node: Node) -> bool:
    a = node.attrs
    if len(node.inputs) not in (2, 3) or not all(graph.is_param(t) for t in node.inputs[1:]):
        return False
    if not _act_ok(graph, node):
        return False
    return not a.get("transpose_a", False) and len(graph.shape(node.inputs[0])) == 2


def _check_binary(graph: Graph, node: Node) -> bool:
    if len(node.inputs) != 2 or graph.is_param(node.inputs[0]) and not registry.get(node.op).commutative:
        return False
    out_rank = len(graph.shape(node.outputs[0]))
    for t in node.inputs:
        if graph.is_param(t):
            c = graph.params[t]
            if c.ndim > out_rank or (c.ndim == out_rank and c.shape[0] != 1):
                return False
        elif len(graph.shape(t)) != out_rank:
            return False
    return True


def _check_concat(graph: Graph, node: Node) -> bool:
    rank = len(graph.shape(node.outputs[0]))
    return not any(graph.is_param(t) for t in node.inputs) and _axis(node.attrs["axis"], rank) != 0


def _check_pool(graph: Graph, node: Node) -> bool:
    a = node.attrs
    kh, kw = a["ksize"]
    top, bottom, left, right = a.get("pads", (0, 0, 0, 0))
    return (len(graph.shape(node.inputs[0])) == 4 and a.get("layout", "NHWC") in ("NHWC", "NCHW")
            and max(top, bottom) < kh and max(left, right) < kw)


def _check_mean(graph: Graph, node: Node) -> bool:
    rank = len(graph.shape(node.inputs[0]))
    axes = [_axis(x, rank) for x in node.attrs["axes"]]
    return 0 not in axes and len(set(axes)) == len(axes) and len(node.inputs) == 1


def _check_pad(graph: Graph, node: Node) -> bool:
    pads = np.asarray(node.attrs["pads"]).reshape(-1, 2)
    return len(node.inputs) == 1 and (pads >= 0).all() and not pads[0].any()


def _check_transpose(graph: Graph, node: Node) -> bool:
    return len(node.inputs) == 1 and tuple(node.attrs["perm"])[0] == 0


def _check_softmax(graph: Graph, node: Node) -> bool:
    rank = len(graph.shape(node.inputs[0]))
    return len(node.inputs) == 1 and rank >= 2 and _axis(node.attrs.get("axis", -1), rank) == rank - 1


# lowering routine (OpDef.lowering) -> the forms it supports; without a check: one input
_CHECKS: Dict[str, Callable[[Graph, Node], bool]] = {
    "conv2d": _check_conv, "matmul": _check_matmul, "binary": _check_binary, "concat": _check_concat,
    "pool": _check_pool, "mean": _check_mean, "pad": _check_pad, "transpose": _check_transpose,
    "softmax": _check_softmax,
}


# ------------------------------------------------------------------ integer parameters
def _capped(real: float, out_dtype, divisor: int = 1) -> float:
    """``real`` capped at ``(qabs(out_dtype) + 1) * divisor``, sign kept.  A requantization of
    integers (codes, accumulators: |x| >= 1 unless 0) divided by ``divisor`` with a larger
    ratio saturates every nonzero input, as the capped ratio does: same outputs, and a
    multiplier that fits (an output calibrated to ~0 behind a wide input, e.g. ReLU of
    negative values, gives ratios of 1e10; docs/reliability.md)."""
    cap = float((qabs(out_dtype) + 1) * int(divisor))
    return float(np.sign(real)) * min(abs(float(real)), cap)


def _divisor_multiplier(real: float, acc_bound: int, divisor: int) -> Tuple[int, int]:
    """``quantize_multiplier`` with the extra bound ``divisor * 2**s <= 2**62`` of the
    instructions that divide by ``cells * 2**s`` (AVG_POOL, MEAN)."""
    m, s = quantize_multiplier(real, acc_bound)
    excess = s - (MAX_SHIFT - (int(divisor) - 1).bit_length())
    if excess > 0:
        m, s = int(np.floor(m / 2.0 ** excess + 0.5)), s - excess
    return m, s


def _pair_multipliers(ra: float, rb: float, bound_a: int, bound_b: int) -> Tuple[int, int, int]:
    """``(Ma, Mb, s)`` with one shift for ADD/SUB: ``Ma/2**s ≈ ra``, ``Mb/2**s ≈ rb``, both
    below 2**31 and ``bound_a*Ma + bound_b*Mb <= 2**62``; the most precise such choice."""
    for s in range(MAX_SHIFT, -1, -1):
        ma, mb = (int(np.floor(r * 2.0 ** s + 0.5)) for r in (ra, rb))
        if max(ma, mb) < 2 ** 31 and bound_a * ma + bound_b * mb <= 2 ** 62:
            return ma, mb, s
    raise ModelError(f"rescale ratios {ra}, {rb} are too large for an integer ADD/SUB")


def _signed_multiplier(real: float, acc_bound: int) -> Tuple[int, int]:
    """``quantize_multiplier`` of ``|real|`` carrying the sign of ``real`` (CONV2D/FULLY_CONNECTED
    ``M_neg``, the one signed multiplier, docs/npu-arithmetic.md)."""
    m, s = quantize_multiplier(abs(real), acc_bound)
    return (-m if real < 0 else m), s


def _channel_scales(qp, channels: int) -> np.ndarray:
    return np.broadcast_to(np.asarray(qp.scale, dtype=np.float64).reshape(-1), (channels,))


def _act_clamp(act: str, out_qp) -> Tuple[Optional[int], Optional[int]]:
    """Clamp bounds (output codes) of a fused/standalone ReLU or ReLU6."""
    if act == "relu":
        return 0, None
    if act == "relu6":
        return 0, int(min(np.floor(6.0 / out_qp.scale + 0.5), qrange(out_qp.dtype)[1]))
    return None, None


# ------------------------------------------------------------------ lowering
class _RegionLowering:
    """State of lowering one region: the builder and the engine tensors of each IR tensor."""

    def __init__(self, graph: Graph, builder: EngineBuilder) -> None:
        self.graph = graph
        self.b = builder
        self.views: Dict[str, Dict[str, int]] = {}

    # ---- tensors
    def qp(self, tensor: str):
        return self.graph.qparams[tensor]

    def ir_shape(self, tensor: str) -> Tuple[int, ...]:
        return tuple(self.graph.shape(tensor))

    def new(self, tensor: str, view: str, shape=None, qp=None) -> int:
        """A new engine tensor holding ``tensor`` in ``view`` (default shape/QParams: the IR's)."""
        qp = qp or self.qp(tensor)
        if shape is None:
            shape = self.ir_shape(tensor)
            if view == "nhwc":
                shape = tuple(shape[p] for p in TO_NHWC)
        name = tensor if view == "ir" else f"{tensor}/nhwc"
        tid = self.b.tensor(name, shape, qp.dtype, float(qp.scale))
        self.views.setdefault(tensor, {})[view] = tid
        return tid

    def temp(self, name: str, shape, qp) -> int:
        return self.b.tensor(name, shape, qp.dtype, float(qp.scale))

    def get(self, tensor: str, view: str, node: Node) -> int:
        """The engine tensor of ``tensor`` in ``view``, transposing the other view if needed."""
        held = self.views[tensor]
        if view not in held:
            other = "ir" if view == "nhwc" else "nhwc"
            tid = self.new(tensor, view)
            self.b.add("TRANSPOSE", [held[other]], [tid], name=node.name,
                       perm=TO_NHWC if view == "nhwc" else TO_NCHW)
        return held[view]

    def shape_of(self, tid: int) -> Tuple[int, ...]:
        return tuple(self.b.proto.tensors[tid].shape)

    def any_view(self, tensors: Sequence[str]) -> str:
        """``"nhwc"`` when every tensor is rank 4 and already held NHWC, else ``"ir"``."""
        if all("nhwc" in self.views[t] for t in tensors):
            return "nhwc"
        return "ir"

    # ---- ops
    def lower(self, node: Node) -> None:
        getattr(self, "op_" + registry.get(node.op).lowering)(node)

    def _weighted(self, node: Node, x: int, w: np.ndarray, out: int, opcode: str, k: int, **attrs) -> None:
        """CONV2D / FULLY_CONNECTED: ``w`` has output channels last, ``k`` products per output."""
        g = self.graph
        x_t, out_t = node.inputs[0], node.outputs[0]
        cout = w.shape[-1]
        w_qp = g.qparams[node.inputs[1]]
        bias = (np.asarray(g.params[node.inputs[2]], dtype=np.int32).reshape(cout) if len(node.inputs) > 2
                else np.zeros(cout, np.int32))
        sx, sy = float(self.qp(x_t).scale), float(self.qp(out_t).scale)
        real = sx * _channel_scales(w_qp, cout) / sy
        prod = k * qabs(self.qp(x_t).dtype) * qabs(w.dtype)
        bounds = [prod + abs(int(b)) for b in bias]
        y_dtype = self.qp(out_t).dtype
        pos = [quantize_multiplier(_capped(r, y_dtype), bd) for r, bd in zip(real, bounds)]
        name = node.name
        consts = [self.b.const(f"{name}/weights", w), self.b.const(f"{name}/bias", bias),
                  self.b.const(f"{name}/multipliers", np.array([m for m, _ in pos], np.int32)),
                  self.b.const(f"{name}/shifts", np.array([s for _, s in pos], np.int32))]
        act = node.attrs.get("act", "none")
        if act in ("leaky_relu", "prelu"):
            slopes = np.broadcast_to(np.asarray(node.attrs.get("act_alpha", 0.2), np.float64).reshape(-1), (cout,))
            neg = [_signed_multiplier(_capped(r * a, y_dtype), bd) for r, a, bd in zip(real, slopes, bounds)]
            consts += [self.b.const(f"{name}/neg_multipliers", np.array([m for m, _ in neg], np.int32)),
                       self.b.const(f"{name}/neg_shifts", np.array([s for _, s in neg], np.int32))]
        lo, hi = _act_clamp(act, self.qp(out_t))
        self.b.add(opcode, [x], [out], consts=consts, name=name, act_min=lo, act_max=hi, **attrs)

    def op_conv2d(self, node: Node) -> None:
        a = node.attrs
        view = "nhwc" if a.get("layout", "NHWC") == "NCHW" else "ir"
        x = self.get(node.inputs[0], view, node)
        w = np.asarray(self.graph.params[node.inputs[1]])
        out = self.new(node.outputs[0], view)
        kh, kw, cg, _ = w.shape
        self._weighted(node, x, w, out, "CONV2D", kh * kw * cg, strides=a.get("strides", (1, 1)),
                       dilations=a.get("dilations", (1, 1)), pads=a.get("pads", (0, 0, 0, 0)),
                       groups=int(a.get("groups", 1)))

    def op_matmul(self, node: Node) -> None:
        x = self.get(node.inputs[0], "ir", node)
        w = np.asarray(self.graph.params[node.inputs[1]])
        if node.attrs.get("transpose_b", False):
            w = np.ascontiguousarray(w.T)
        out = self.new(node.outputs[0], "ir")
        self._weighted(node, x, w, out, "FULLY_CONNECTED", w.shape[0])

    def op_binary(self, node: Node) -> None:
        g = self.graph
        a_t, b_t = node.inputs
        if g.is_param(a_t):            # Add/Mul are commutative: the constant goes second
            a_t, b_t = b_t, a_t
        tensors = [t for t in (a_t, b_t) if not g.is_param(t)]
        rank = len(self.ir_shape(node.outputs[0]))
        view = self.any_view(tensors) if rank == 4 else "ir"
        inputs = [self.get(t, view, node) for t in tensors]
        consts = []
        if g.is_param(b_t):
            c = np.asarray(g.params[b_t])
            c = c.reshape((1,) * (rank - c.ndim) + c.shape)
            if view == "nhwc":
                c = c.transpose(TO_NHWC)
            consts.append(self.b.const(b_t, np.ascontiguousarray(c)))
        out_t = node.outputs[0]
        out = self.new(out_t, view)
        qa, qb, qy = self.qp(a_t), g.qparams[b_t], self.qp(out_t)
        if registry.get(node.op).affine == "mul":
            m, s = quantize_multiplier(_capped(float(qa.scale) * float(qb.scale) / float(qy.scale), qy.dtype),
                                       qabs(qa.dtype) * qabs(qb.dtype))
            mults, shift = [m], s
        else:
            ma, mb, shift = _pair_multipliers(float(qa.scale) / float(qy.scale), float(qb.scale) / float(qy.scale),
                                              qabs(qa.dtype), qabs(qb.dtype))
            mults = [ma, mb]
        self.b.add(registry.get(node.op).npu[0], inputs, [out], consts=consts, name=node.name, multipliers=mults,
                   shifts=[shift])

    def op_concat(self, node: Node) -> None:
        rank = len(self.ir_shape(node.outputs[0]))
        axis = _axis(node.attrs["axis"], rank)
        view = self.any_view(node.inputs) if rank == 4 else "ir"
        inputs = [self.get(t, view, node) for t in node.inputs]
        out_t = node.outputs[0]
        out = self.new(out_t, view)
        sy = float(self.qp(out_t).scale)
        y_dtype = self.qp(out_t).dtype
        params = [quantize_multiplier(_capped(float(self.qp(t).scale) / sy, y_dtype), qabs(self.qp(t).dtype))
                  for t in node.inputs]
        self.b.add("CONCAT", inputs, [out], name=node.name, axis=NHWC_AXIS_OF_NCHW[axis] if view == "nhwc" else axis,
                   multipliers=[m for m, _ in params], shifts=[s for _, s in params])

    def op_pool(self, node: Node) -> None:
        a = node.attrs
        view = "nhwc" if a.get("layout", "NHWC") == "NCHW" else "ir"
        x_t, out_t = node.inputs[0], node.outputs[0]
        x = self.get(x_t, view, node)
        out = self.new(out_t, view)
        attrs = dict(ksize=a["ksize"], strides=a.get("strides", (1, 1)), pads=a.get("pads", (0, 0, 0, 0)))
        opcode = registry.get(node.op).npu[0]
        if opcode == "AVG_POOL":
            kh, kw = a["ksize"]
            m, s = _divisor_multiplier(_capped(float(self.qp(x_t).scale) / float(self.qp(out_t).scale),
                                               self.qp(out_t).dtype, kh * kw),
                                       kh * kw * qabs(self.qp(x_t).dtype), kh * kw)
            attrs.update(multipliers=[m], shifts=[s], count_include_pad=bool(a.get("count_include_pad", False)))
        self.b.add(opcode, [x], [out], name=node.name, **attrs)

    def op_mean(self, node: Node) -> None:
        x_t, out_t = node.inputs[0], node.outputs[0]
        shape = self.ir_shape(x_t)
        axes = sorted(_axis(x, len(shape)) for x in node.attrs["axes"])
        keepdims = bool(node.attrs.get("keepdims", False))
        view = "ir"
        if len(shape) == 4 and "nhwc" in self.views[x_t]:
            kept = [NHWC_AXIS_OF_NCHW[d] for d in range(4) if d not in axes]
            if keepdims or kept == sorted(kept):   # the result's element order is the IR's
                view = "nhwc"
        x = self.get(x_t, view, node)
        engine_axes = sorted(NHWC_AXIS_OF_NCHW[d] for d in axes) if view == "nhwc" else axes
        out = self.new(out_t, "nhwc" if view == "nhwc" and keepdims else "ir")
        cells = int(np.prod([shape[d] for d in axes]))
        m, s = _divisor_multiplier(_capped(float(self.qp(x_t).scale) / float(self.qp(out_t).scale),
                                           self.qp(out_t).dtype, cells),
                                   cells * qabs(self.qp(x_t).dtype), cells)
        self.b.add("MEAN", [x], [out], name=node.name, axes=engine_axes, keepdims=keepdims,
                   multipliers=[m], shifts=[s])

    def op_reshape(self, node: Node) -> None:
        x = self.get(node.inputs[0], "ir", node)
        out_t = node.outputs[0]
        out = self.new(out_t, "ir")
        self.b.add("RESHAPE", [x], [out], name=node.name)

    def op_transpose(self, node: Node) -> None:
        x_t = node.inputs[0]
        perm = tuple(int(p) for p in node.attrs["perm"])
        if "nhwc" in self.views[x_t] and "ir" not in self.views[x_t]:
            x, perm = self.views[x_t]["nhwc"], tuple(TO_NCHW[p] for p in perm)
        else:
            x = self.get(x_t, "ir", node)
        out = self.new(node.outputs[0], "ir")
        self.b.add("TRANSPOSE", [x], [out], name=node.name, perm=perm)

    def op_pad(self, node: Node) -> None:
        x_t, out_t = node.inputs[0], node.outputs[0]
        pads = np.asarray(node.attrs["pads"], dtype=np.int64).reshape(-1, 2)
        view = self.any_view([x_t]) if len(pads) == 4 else "ir"
        x = self.get(x_t, view, node)
        if view == "nhwc":
            pads = pads[list(TO_NHWC)]
        out = self.new(out_t, view)
        qy = self.qp(out_t)
        value = float(node.attrs.get("value", 0.0))
        if value != 0.0:   # own output scale: requantize first, then pad with the value's code
            tmp = self.temp(f"{out_t}/requant", self.shape_of(x), qy)
            m, s = quantize_multiplier(_capped(float(self.qp(x_t).scale) / float(qy.scale), qy.dtype),
                                       qabs(self.qp(x_t).dtype))
            self.b.add("REQUANT", [x], [tmp], name=node.name, multipliers=[m], shifts=[s])
            x = tmp
        lo, hi = qrange(qy.dtype)
        code = int(np.clip(np.sign(value) * np.floor(abs(value) / float(qy.scale) + 0.5), lo, hi))
        self.b.add("PAD", [x], [out], name=node.name, pads=pads.reshape(-1), pad_value=code)

    def op_table(self, node: Node) -> None:
        x_t, out_t = node.inputs[0], node.outputs[0]
        view = self.any_view([x_t])
        x = self.get(x_t, view, node)
        out = self.new(out_t, view)
        qx, qy = self.qp(x_t), self.qp(out_t)

        def fn(real: np.ndarray) -> np.ndarray:   # the IR's own float32 definition of the op
            return evaluate_node(node, [real.astype(np.float32)])[0]

        table = make_lut(fn, qx.dtype, float(qx.scale), qy.dtype, float(qy.scale))
        self.b.add("LUT", [x], [out], consts=[self.b.const(f"{node.name}/table", table)], name=node.name)

    def op_relu(self, node: Node) -> None:
        x_t, out_t = node.inputs[0], node.outputs[0]
        view = self.any_view([x_t])
        x = self.get(x_t, view, node)
        out = self.new(out_t, view)
        qx, qy = self.qp(x_t), self.qp(out_t)
        m, s = quantize_multiplier(_capped(float(qx.scale) / float(qy.scale), qy.dtype), qabs(qx.dtype))
        lo, hi = _act_clamp(registry.fused_act(node.op), qy)
        self.b.add("REQUANT", [x], [out], name=node.name, multipliers=[m], shifts=[s], act_min=lo, act_max=hi)

    def op_softmax(self, node: Node) -> None:
        x_t, out_t = node.inputs[0], node.outputs[0]
        x = self.get(x_t, "ir", node)
        out = self.new(out_t, "ir")
        qx, qy = self.qp(x_t), self.qp(out_t)
        table, m, s = make_softmax_table(qx.dtype, float(qx.scale), float(qy.scale), self.ir_shape(x_t)[-1])
        self.b.add("SOFTMAX", [x], [out], consts=[self.b.const(f"{node.name}/exp_table", table)],
                   name=node.name, multipliers=[m], shifts=[s])


def _spatial_axes(layout: str) -> Tuple[int, int]:
    """(H axis, W axis) of a rank-4 tensor in ``layout``."""
    return (2, 3) if layout == "NCHW" else (1, 2)


def fold_pads(graph: Graph, region: Region) -> List[Node]:
    """The region's nodes with each zero ``Pad`` that only a ``Conv2D`` of the region reads
    folded into that convolution's ``pads`` (the conv reads the Pad's input; the Pad is
    dropped).  Exact: the padding value 0.0 is code 0 (symmetric quantization), the Pad's
    input and output share their QParams, and a convolution's padding taps read code 0.
    Only spatial padding is folded, and only while the summed pads stay below the dilated
    kernel (the CONV2D limit); anything else keeps its ``PAD`` instruction."""
    readers = graph.consumer_map()
    kept = set(region.outputs) | set(graph.outputs)
    folded: Dict[str, Node] = {}
    dropped = set()
    for pad in region.nodes:
        if pad.op != "Pad" or float(pad.attrs.get("value", 0.0)) != 0.0 or pad.outputs[0] in kept:
            continue
        users = readers.get(pad.outputs[0], [])
        conv = users[0] if len(users) == 1 else None
        if conv is None or conv.op != "Conv2D" or conv not in region.nodes or conv.inputs[0] != pad.outputs[0]:
            continue
        qx, qy = graph.qparams.get(pad.inputs[0]), graph.qparams.get(pad.outputs[0])
        if qx is None or qy is None or qx.dtype != qy.dtype or float(qx.scale) != float(qy.scale):
            continue
        widths = np.asarray(pad.attrs["pads"], dtype=np.int64).reshape(-1, 2)
        h_axis, w_axis = _spatial_axes(conv.attrs.get("layout", "NHWC"))
        if len(widths) != 4 or any(widths[d].any() for d in range(4) if d not in (h_axis, w_axis)):
            continue
        t, b, l, r = (int(v) for v in conv.attrs.get("pads", (0, 0, 0, 0)))
        new = (t + int(widths[h_axis][0]), b + int(widths[h_axis][1]),
               l + int(widths[w_axis][0]), r + int(widths[w_axis][1]))
        kh, kw = np.asarray(graph.params[conv.inputs[1]]).shape[:2]
        dh, dw = conv.attrs.get("dilations", (1, 1))
        if max(new[:2]) >= (kh - 1) * dh + 1 or max(new[2:]) >= (kw - 1) * dw + 1:
            continue
        folded[conv.name] = Node(conv.name, conv.op, [pad.inputs[0]] + conv.inputs[1:], conv.outputs,
                                 dict(conv.attrs, pads=new))
        dropped.add(pad.name)
    return [folded.get(n.name, n) for n in region.nodes if n.name not in dropped]


def lower_region(graph: Graph, region: Region, engine_name: str, device_id: int = 0,
                 core_ids: Sequence[int] = (0,)) -> Engine:
    """Compile ``region`` of the quantized ``graph`` into a validated engine.

    Engine inputs/outputs are ``region.inputs``/``region.outputs`` in order, with the IR
    shapes, the dtypes and scales of their QParams.  Every instruction is named after its IR
    node and carries its cycle estimate on one core of device ``device_id``."""
    batch = graph.shape(region.nodes[0].outputs[0])[0]
    builder = EngineBuilder(engine_name, batch)
    low = _RegionLowering(graph, builder)
    inputs = [low.new(t, "ir") for t in region.inputs]
    for node in fold_pads(graph, region):
        low.lower(node)
    outputs = [low.get(t, "ir", graph.producer(t)) for t in region.outputs]
    builder.set_io(inputs, outputs)
    builder.set_placement(device_id, core_ids, "SPLIT_BATCH" if len(core_ids) > 1 else "SPLIT_NONE")
    estimate_cycles(builder.proto)
    return builder.build()
