"""Reference float evaluator of the IR (docs/ir.md), in numpy.

:func:`evaluate` runs a :class:`~ratelnn.ir.graph.Graph` on numpy inputs; it is the
reference the tests compare against and the engine of constant folding.  All float
arithmetic is float32.  ``Quant``/``Dequant`` follow :mod:`ratelnn.ir.arith`;
``MinMax`` passes its input through; ``Engine`` cannot be evaluated here, and ``Opaque``
only by the runner its frontend registered (:func:`register_opaque_runner`: the framework
itself runs the op, as it does in every form of the model).
"""
from __future__ import annotations

from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence

import numpy as np

from ..errors import RatelError
from . import arith, registry
from .graph import Graph, Node


class EvaluationError(RatelError, RuntimeError):
    """A node cannot be evaluated (unknown op, Opaque framework op, missing feed)."""


# IR op -> its float definition that reads the node's attributes: (node, *input arrays) -> array.
# Attribute-free ops carry theirs in the registry (OpDef.fn, ratelnn/ir/registry.py).
_NODE_FNS: Dict[str, Callable[..., np.ndarray]] = {}


def _defines(op: str) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    """Decorator: the function is the float definition of IR op ``op``."""
    def add(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        _NODE_FNS[op] = fn
        return fn
    return add


# ---------------------------------------------------------------- helpers
def _to_nhwc(x: np.ndarray, layout: str) -> np.ndarray:
    return x.transpose(0, 2, 3, 1) if layout == "NCHW" else x


def _from_nhwc(x: np.ndarray, layout: str) -> np.ndarray:
    return x.transpose(0, 3, 1, 2) if layout == "NCHW" else x


def _windows(x: np.ndarray, ksize, strides, dilations) -> np.ndarray:
    """Sliding windows of NHWC ``x``: array ``[N, OH, OW, KH, KW, C]``."""
    kh, kw = ksize
    sh, sw = strides
    dh, dw = dilations
    n, h, w, c = x.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (w - (kw - 1) * dw - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise EvaluationError(f"window {ksize} (dilation {dilations}) larger than padded input {x.shape[1:3]}")
    out = np.empty((n, oh, ow, kh, kw, c), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            out[:, :, :, i, j, :] = x[:, i * dh: i * dh + (oh - 1) * sh + 1: sh,
                                      j * dw: j * dw + (ow - 1) * sw + 1: sw, :]
    return out


def _pad_hw(x: np.ndarray, pads, value: float = 0.0) -> np.ndarray:
    top, bottom, left, right = pads
    return np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)), constant_values=value)


def apply_act(y: np.ndarray, act: str, alpha=0.2) -> np.ndarray:
    """The fused activation ``act`` of Conv2D/MatMul (docs/ir.md) on ``y`` with the output
    channels last; ``alpha``: the slope of ``leaky_relu`` (float) or of ``prelu`` (one per
    output channel)."""
    if act in (None, "none"):
        return y
    if act == "relu":
        return np.maximum(y, np.float32(0))
    if act == "relu6":
        return np.clip(y, np.float32(0), np.float32(6))
    if act == "leaky_relu":
        return np.where(y >= 0, y, (y * np.float32(alpha)).astype(np.float32))
    if act == "prelu":
        return _prelu(y, np.asarray(alpha, np.float32).reshape(-1))
    raise EvaluationError(f"unknown fused activation {act!r}")


def _prelu(x: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``x if x >= 0 else alpha * x`` with ``alpha`` broadcasting against ``x``."""
    x = _f32(x)
    return np.where(x >= 0, x, x * _f32(alpha)).astype(np.float32)


def _f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


# ---------------------------------------------------------------- ops
@_defines("Conv2D")
def _conv2d(node: Node, x, w, b=None):
    a = node.attrs
    layout = a.get("layout", "NHWC")
    groups = int(a.get("groups", 1))
    xh = _pad_hw(_to_nhwc(_f32(x), layout), a.get("pads", (0, 0, 0, 0)))
    w = _f32(w)
    kh, kw, cin_g, cout = w.shape
    if xh.shape[3] != cin_g * groups or cout % groups:
        raise EvaluationError(f"{node.name}: input channels {xh.shape[3]} / weights {w.shape} "
                              f"do not match groups={groups}")
    strides, dilations = a.get("strides", (1, 1)), a.get("dilations", (1, 1))
    if cin_g == 1 and cout == groups:
        y = _depthwise_taps(xh, w, strides, dilations)
    elif kh == kw == 1 and groups == 1:   # pointwise: one matrix product, no window copy
        xs = xh[:, ::strides[0], ::strides[1], :]
        y = (xs.reshape(-1, cin_g) @ w.reshape(cin_g, cout)).reshape(*xs.shape[:3], cout)
    else:
        win = _windows(xh, (kh, kw), strides, dilations)
        n, oh, ow = win.shape[:3]
        win = win.reshape(n, oh, ow, kh, kw, groups, cin_g)
        wg = w.reshape(kh, kw, cin_g, groups, cout // groups)
        y = np.einsum("nhwijgc,ijcgo->nhwgo", win, wg, optimize=True).reshape(n, oh, ow, cout)
    if b is not None:
        y = y + _f32(b)
    y = apply_act(y.astype(np.float32), a.get("act", "none"), a.get("act_alpha", 0.2))
    return _from_nhwc(y, layout)


def _depthwise_taps(x: np.ndarray, w: np.ndarray, strides, dilations) -> np.ndarray:
    """Depthwise conv (one filter per channel) of padded NHWC ``x`` with ``w`` [KH, KW, 1, C],
    summed tap by tap over strided views of ``x`` (no window copy): [N, OH, OW, C]. Several
    times faster than einsum, which cannot hand a per-channel product to BLAS."""
    kh, kw = w.shape[:2]
    (sh, sw), (dh, dw) = strides, dilations
    n, h, width, c = x.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (width - (kw - 1) * dw - 1) // sw + 1
    if oh <= 0 or ow <= 0:
        raise EvaluationError(f"window {(kh, kw)} (dilation {dilations}) larger than padded input {(h, width)}")
    y = np.zeros((n, oh, ow, c), np.float32)
    for i in range(kh):
        for j in range(kw):
            y += x[:, i * dh: i * dh + (oh - 1) * sh + 1: sh, j * dw: j * dw + (ow - 1) * sw + 1: sw, :] * w[i, j, 0]
    return y


@_defines("MatMul")
def _matmul(node: Node, x, w, b=None):
    a = node.attrs
    x, w = _f32(x), _f32(w)
    if a.get("transpose_a"):
        x = x.T
    if a.get("transpose_b"):
        w = w.T
    y = x @ w
    if b is not None:
        y = y + _f32(b)
    return apply_act(y.astype(np.float32), a.get("act", "none"), a.get("act_alpha", 0.2))


@_defines("MaxPool")
@_defines("AvgPool")
def _pool(node: Node, x):
    a = node.attrs
    layout = a.get("layout", "NHWC")
    pads = a.get("pads", (0, 0, 0, 0))
    xh = _to_nhwc(_f32(x), layout)
    ksize, strides = a["ksize"], a.get("strides", (1, 1))
    if node.op == "MaxPool":
        win = _windows(_pad_hw(xh, pads, -np.inf), ksize, strides, (1, 1))
        y = win.max(axis=(3, 4))
    else:
        win = _windows(_pad_hw(xh, pads), ksize, strides, (1, 1))
        total = win.sum(axis=(3, 4), dtype=np.float32)
        if a.get("count_include_pad", False):
            count = np.float32(ksize[0] * ksize[1])
        else:
            ones = _pad_hw(np.ones((1,) + xh.shape[1:3] + (1,), np.float32), pads)
            count = _windows(ones, ksize, strides, (1, 1)).sum(axis=(3, 4))
        y = total / count
    return _from_nhwc(y.astype(np.float32), layout)


@_defines("BatchNorm")
def _batchnorm(node: Node, x, gamma, beta, mean, var):
    x = _f32(x)
    axis = node.attrs.get("axis", -1) % x.ndim
    shape = [1] * x.ndim
    shape[axis] = -1
    scale = _f32(gamma) / np.sqrt(_f32(var) + np.float32(node.attrs.get("eps", 1e-3)))
    shift = _f32(beta) - _f32(mean) * scale
    return x * scale.reshape(shape) + shift.reshape(shape)


@_defines("Softmax")
def _softmax(node: Node, x):
    x = _f32(x)
    axis = node.attrs.get("axis", -1)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@_defines("BiasAdd")
def _bias_add(node: Node, x, b):
    axis = 1 if node.attrs.get("layout") == "NCHW" and np.ndim(x) > 2 else np.ndim(x) - 1
    shape = [1] * np.ndim(x)
    shape[axis] = -1
    return x + np.reshape(b, shape)


@_defines("Quant")
def _quant(node: Node, x):
    a = node.attrs
    scale = a["scales"] if a.get("scales") is not None else a["scale"]
    axis = a.get("axis") if a.get("scales") is not None else None
    return arith.quantize(x, scale, a["dtype"], axis, a.get("round_mode", "half_away_from_zero"))


@_defines("Dequant")
def _dequant(node: Node, q):
    a = node.attrs
    if a.get("scales") is not None:
        return arith.dequantize(q, a["scales"], a.get("axis"))
    return arith.dequantize(q, a["scale"])


# framework name -> runner of that framework's Opaque nodes: (node, input arrays) -> one
# array per node output; registered by the frontends (docs/architecture.md §15: the IR knows
# no framework, so the frontend lends it the framework's own kernels)
_OPAQUE_RUNNERS: Dict[str, Callable[[Node, Sequence[np.ndarray]], List[np.ndarray]]] = {}


def register_opaque_runner(framework: str, runner: Callable[[Node, Sequence[np.ndarray]], List[np.ndarray]]) -> None:
    """Let :func:`evaluate` run the ``Opaque`` nodes of ``framework`` with ``runner``."""
    _OPAQUE_RUNNERS[framework] = runner


@_defines("Opaque")
@_defines("Engine")
def _unevaluable(node: Node, *inputs):
    if node.op == "Opaque":
        raise EvaluationError(f"node {node.name!r} is an Opaque {node.attrs.get('framework')} op "
                              f"{node.attrs.get('type')!r}: the numpy evaluator cannot run it")
    raise EvaluationError(f"node {node.name!r}: op {node.op} cannot be run by the numpy evaluator")


@_defines("PRelu")
def _prelu_node(node: Node, x, alpha):
    return _prelu(x, alpha)


@_defines("LeakyRelu")
def _leaky_relu(node: Node, x):
    return np.where(x >= 0, x, x * np.asarray(node.attrs.get("alpha", 0.2), x.dtype))


@_defines("HardSigmoid")
def _hard_sigmoid(node: Node, x):
    alpha, beta = (np.float32(node.attrs.get(k, d)) for k, d in (("alpha", 0.2), ("beta", 0.5)))
    return np.clip(x * alpha + beta, np.float32(0), np.float32(1)).astype(x.dtype)


@_defines("Mean")
def _mean(node: Node, x):
    return np.mean(x, axis=tuple(node.attrs["axes"]), keepdims=bool(node.attrs.get("keepdims")))


@_defines("Concat")
def _concat(node: Node, *xs):
    return np.concatenate(xs, axis=node.attrs["axis"])


@_defines("Reshape")
def _reshape(node: Node, x):
    return np.reshape(x, tuple(node.attrs["shape"]))


@_defines("Squeeze")
def _squeeze(node: Node, x):
    return np.squeeze(x, axis=tuple(node.attrs["axes"]))


@_defines("Flatten")
def _flatten(node: Node, x):
    return np.reshape(x, (x.shape[0], -1))


@_defines("Transpose")
def _transpose(node: Node, x):
    return np.transpose(x, tuple(node.attrs["perm"]))


@_defines("Pad")
def _pad(node: Node, x):
    value = np.asarray(node.attrs.get("value", 0), x.dtype)
    return np.pad(x, [tuple(p) for p in node.attrs["pads"]], constant_values=value)


def evaluate_node(node: Node, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Outputs of ``node`` for the given input values (one array per output)."""
    runner = _OPAQUE_RUNNERS.get(node.attrs.get("framework")) if node.op == "Opaque" else None
    if runner is not None:
        return list(runner(node, inputs))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        fn = registry.float_fn(node.op)
        if fn is not None:
            out = fn(*inputs)
        elif node.op in _NODE_FNS:
            out = _NODE_FNS[node.op](node, *inputs)
        else:
            raise EvaluationError(f"node {node.name!r}: {registry.unknown_op_message(node.op)}")
    out = np.asarray(out)
    if out.dtype == np.float64:
        out = out.astype(np.float32)
    return [out]


def evaluate(graph: Graph, feeds: Mapping[str, np.ndarray],
             fetches: Optional[Iterable[str]] = None) -> Dict[str, np.ndarray]:
    """Run ``graph`` on ``feeds`` (graph input name -> array) and return
    ``{tensor name: array}`` for ``fetches`` (default: the graph outputs)."""
    fetches = list(graph.outputs if fetches is None else fetches)
    missing = [t for t in graph.inputs if t not in feeds]
    if missing:
        raise EvaluationError(f"no value fed for graph inputs {missing}")
    values: Dict[str, np.ndarray] = {k: np.asarray(v) for k, v in graph.params.items()}
    for name in graph.inputs:
        values[name] = np.asarray(feeds[name])
    needed = graph.upstream(fetches)
    for node in graph.nodes:
        if not any(t in needed for t in node.outputs):
            continue
        try:
            args = [values[t] for t in node.inputs]
        except KeyError as e:
            raise EvaluationError(f"node {node.name!r} reads tensor {e.args[0]!r} that has no value") from None
        for t, v in zip(node.outputs, evaluate_node(node, args)):
            values[t] = v
    unknown = [t for t in fetches if t not in values]
    if unknown:
        raise EvaluationError(f"cannot fetch {unknown}: not produced by graph {graph.name!r}")
    return {t: values[t] for t in fetches}
