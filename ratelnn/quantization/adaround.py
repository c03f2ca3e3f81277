"""AdaRound: adaptive rounding of the weights (Nagel et al. 2020, "Up or Down? Adaptive
Rounding for Post-Training Quantization"; docs/quantization.md, "Accuracy passes").

For every quantized Conv2D/MatMul, in graph order (:mod:`.layerwalk`: its input comes from
the already rounded layers before it), each weight code is chosen between ``floor(w/s)`` and
``floor(w/s) + 1`` to minimise the squared error of the layer's pre-activation output on the
calibration sample, ``||W~ x_q + b_q - (W x + b)||²`` (summed over channels, averaged over
rows and positions).  The choice is relaxed to ``h(V) = clip(sigmoid(V)·1.2 - 0.1, 0, 1)``,
optimised with Adam for ``adaround_iterations`` steps with the regulariser
``λ Σ 1 - |2h - 1|^β`` (β annealed from 20 to 2) that drives each ``h`` to 0 or 1, then
rounded.  The loss is a quadratic form in the weights, so the sample enters only through
``XᵀX`` and ``XᵀT`` per group (K×K and K×C_out matrices), whatever its size.  A layer keeps
its round-to-nearest codes when AdaRound does not lower that loss on the sample.

Only integer weight codes change (scales, dtypes, the engine format are untouched); codes stay
in [-qmax, qmax].

Within :func:`code_cache` (``tune`` opens one per search), a layer's codes are looked up by a
digest of everything they depend on (the normal equations, the float weights, the scales,
``qmax``, the iterations) before they are optimised: candidates that share the configuration
upstream of a layer share its codes, the same codes the optimisation would give again
(docs/architecture.md §12).
"""
from __future__ import annotations

import contextlib
import contextvars
import hashlib
from typing import Any, Dict, Iterator, Mapping, Optional, Tuple

import numpy as np

from ..ir import Graph, arith
from .bias_correction import dequantized
from .layerwalk import Layer, check_time, walk_layers

ZETA, GAMMA = 1.1, -0.1          # rectified sigmoid stretch (paper, section 3.3)
REG_WEIGHT = 0.01                # λ
BETA_START, BETA_END = 20.0, 2.0
WARMUP = 0.2                     # fraction of the steps without the regulariser
LEARNING_RATE = 0.02
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-8

# digest -> codes [g, K, cout_g] (float64), or None: no cache; set by code_cache()
_CODES: contextvars.ContextVar[Optional[Dict[str, np.ndarray]]] = contextvars.ContextVar("adaround_codes", default=None)


@contextlib.contextmanager
def code_cache(store: Optional[Dict[str, np.ndarray]]) -> Iterator[Dict[str, np.ndarray]]:
    """Within the block, AdaRound reads and fills ``store`` (digest -> codes; None: a new
    dict), yielded; see the module docstring."""
    store = {} if store is None else store
    token = _CODES.set(store)
    try:
        yield store
    finally:
        _CODES.reset(token)


def _digest(*arrays, extra: tuple = ()) -> str:
    h = hashlib.sha256(repr(extra).encode())
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{a.shape}".encode())
        h.update(a.tobytes())
    return h.hexdigest()


# ---------------------------------------------------------------- layer as a matrix product
def _im2col(node, x: np.ndarray, groups: int, kernel: Tuple[int, int]) -> np.ndarray:
    """Conv2D input ``x`` -> ``[groups, rows, kh*kw*cin_g]`` patches (the weight order of
    ``w.reshape(kh, kw, cin_g, groups, cout_g)``)."""
    a = node.attrs
    if a.get("layout") == "NCHW":
        x = x.transpose(0, 2, 3, 1)
    t, b, l, r = a.get("pads", (0, 0, 0, 0))
    x = np.pad(x, ((0, 0), (t, b), (l, r), (0, 0)))
    (kh, kw), (sh, sw), (dh, dw) = kernel, a.get("strides", (1, 1)), a.get("dilations", (1, 1))
    win = np.lib.stride_tricks.sliding_window_view(x, ((kh - 1) * dh + 1, (kw - 1) * dw + 1), axis=(1, 2))
    win = win[:, ::sh, ::sw, :, ::dh, ::dw]                     # n, oh, ow, c, kh, kw
    n, oh, ow, c = win.shape[:4]
    win = win.transpose(0, 1, 2, 4, 5, 3).reshape(n * oh * ow, kh, kw, groups, c // groups)
    return win.transpose(3, 0, 1, 2, 4).reshape(groups, n * oh * ow, -1)


def _as_groups(layer: Layer, w: np.ndarray) -> np.ndarray:
    """Weights in the layer's layout -> ``[groups, K, cout_g]``."""
    node = layer.fnode
    if node.op == "MatMul":
        return (w.T if node.attrs.get("transpose_b") else w)[np.newaxis]
    kh, kw, cin_g, cout = w.shape
    g = int(node.attrs.get("groups", 1))
    return w.reshape(kh, kw, cin_g, g, cout // g).transpose(3, 0, 1, 2, 4).reshape(g, kh * kw * cin_g, cout // g)


def _from_groups(layer: Layer, wg: np.ndarray, shape) -> np.ndarray:
    node = layer.fnode
    if node.op == "MatMul":
        return wg[0].T if node.attrs.get("transpose_b") else wg[0]
    kh, kw, cin_g, cout = shape
    g = wg.shape[0]
    return wg.reshape(g, kh, kw, cin_g, cout // g).transpose(1, 2, 3, 0, 4).reshape(shape)


def _rows(layer: Layer, x: np.ndarray, groups: int, kernel) -> np.ndarray:
    if layer.fnode.op == "MatMul":
        return np.asarray(x, np.float64)[np.newaxis]
    return _im2col(layer.fnode, np.asarray(x, np.float64), groups, kernel)


def _targets(layer: Layer, y: np.ndarray, groups: int) -> np.ndarray:
    """Pre-activation output ``[n, ..., cout]`` (channel axis of the layer) -> ``[groups, rows, cout_g]``."""
    y = np.moveaxis(np.asarray(y, np.float64), layer.channel_axis(), -1)
    y = y.reshape(-1, groups, y.shape[-1] // groups)
    return y.transpose(1, 0, 2)


def normal_equations(layer: Layer, bias_q) -> tuple:
    """(XᵀX [g,K,K], XᵀT [g,K,cout_g], TᵀT, rows) of the layer on the sample: X the quantized
    model's input patches, T the float pre-activation minus the quantized bias."""
    w_f, b_f = layer.float_params
    wg_shape = _as_groups(layer, np.asarray(w_f)).shape
    groups = wg_shape[0]
    kernel = np.asarray(w_f).shape[:2]
    xtx = np.zeros((groups, wg_shape[1], wg_shape[1]))
    xtt = np.zeros(wg_shape)
    ttt, rows = 0.0, 0
    for xq, xf, real in zip(layer.x_q, layer.x_f, layer.real):
        target = layer.pre_activation(layer.fnode, xf[:real], w_f, b_f)
        if bias_q is not None:
            target = target - np.reshape(bias_q, [-1 if i == layer.channel_axis() % target.ndim else 1
                                                  for i in range(target.ndim)])
        x = _rows(layer, xq[:real], groups, kernel)
        t = _targets(layer, target, groups)
        xt = x.transpose(0, 2, 1)
        xtx += xt @ x           # batched BLAS; einsum would not use it
        xtt += xt @ t
        ttt += float(np.sum(t * t))
        rows += x.shape[1]
    return xtx, xtt, ttt, max(rows, 1)


def _loss(wt: np.ndarray, xtx, xtt, ttt: float, rows: int) -> float:
    """Mean over rows of the squared output error of weights ``wt`` [g, K, cout_g]."""
    return (float(np.einsum("gko,gkl,glo->", wt, xtx, wt)) - 2.0 * float(np.sum(wt * xtt)) + ttt) / rows


# ---------------------------------------------------------------- the optimisation
def _h(v: np.ndarray) -> np.ndarray:
    return np.clip(1.0 / (1.0 + np.exp(-v)) * (ZETA - GAMMA) + GAMMA, 0.0, 1.0)


def adaround_codes(w: np.ndarray, scale: np.ndarray, qmax: int, xtx, xtt, rows: int, iterations: int) -> np.ndarray:
    """AdaRound codes of weights ``w`` [g, K, cout_g] with scales ``scale`` (broadcasting)."""
    ws = w / scale
    base = np.floor(ws)
    rest = np.clip(ws - base, 1e-4, 1 - 1e-4)
    p = (rest - GAMMA) / (ZETA - GAMMA)
    v = np.log(p / (1.0 - p))
    m, s2 = np.zeros_like(v), np.zeros_like(v)
    warm = int(WARMUP * iterations)
    for step in range(iterations):
        if step % 64 == 0:
            check_time("AdaRound")
        sig = 1.0 / (1.0 + np.exp(-v))
        raw = sig * (ZETA - GAMMA) + GAMMA
        h = np.clip(raw, 0.0, 1.0)
        wt = scale * (base + h)
        grad_h = 2.0 * (xtx @ wt - xtt) / rows * scale
        if step >= warm:
            beta = BETA_END + (BETA_START - BETA_END) * (1 - (step - warm) / max(iterations - warm, 1))
            u = 2.0 * h - 1.0
            grad_h += -REG_WEIGHT * beta * np.abs(u) ** (beta - 1) * np.sign(u) * 2.0
        grad = grad_h * ((raw > 0) & (raw < 1)) * sig * (1 - sig) * (ZETA - GAMMA)
        m = ADAM_B1 * m + (1 - ADAM_B1) * grad
        s2 = ADAM_B2 * s2 + (1 - ADAM_B2) * grad * grad
        mh, sh = m / (1 - ADAM_B1 ** (step + 1)), s2 / (1 - ADAM_B2 ** (step + 1))
        v = v - LEARNING_RATE * mh / (np.sqrt(sh) + ADAM_EPS)
    return np.clip(base + (_h(v) >= 0.5), -qmax, qmax)


def adaround_layer(qgraph: Graph, layer: Layer, iterations: int) -> tuple:
    """Re-round ``layer``'s integer weights in ``qgraph`` (module docstring); returns the
    dequantized (weights, None) the walk continues with."""
    name = layer.qnode.inputs[1]
    qp = qgraph.qparams[name]
    bias_q = dequantized(qgraph, layer.qnode.inputs[2]) if len(layer.qnode.inputs) > 2 else None
    w_f = np.asarray(layer.float_params[0], np.float64)
    xtx, xtt, ttt, rows = normal_equations(layer, bias_q)
    shape = w_f.shape
    if qp.per_channel:
        s = np.ones(w_f.ndim, int)
        s[qp.axis] = -1
        scale = _as_groups(layer, np.broadcast_to(np.asarray(qp.scale, np.float64).reshape(s), shape).copy())
    else:
        scale = np.float64(qp.scale)
    nearest = _as_groups(layer, qgraph.params[name].astype(np.float64))
    wg, qmax, store = _as_groups(layer, w_f), arith.qmax_of(qp.dtype), _CODES.get()
    key = None if store is None else _digest(xtx, xtt, wg, scale, extra=(qmax, rows, iterations))
    codes = None if key is None else store.get(key)
    if codes is None:
        codes = adaround_codes(wg, scale, qmax, xtx, xtt, rows, iterations)
        if key is not None:
            store[key] = codes
    if _loss(scale * codes, xtx, xtt, ttt, rows) < _loss(scale * nearest, xtx, xtt, ttt, rows):
        qgraph.params[name] = _from_groups(layer, codes, shape).astype(qgraph.params[name].dtype)
    return dequantized(qgraph, name), None


def adaround(graph: Graph, qgraph: Graph, config: Mapping[str, Any], sample: Mapping[str, np.ndarray]) -> Graph:
    """``qgraph`` (quantized from float ``graph``) with AdaRound weight codes, edited in place
    and returned; ``sample``: input name -> [N, ...] calibration inputs."""
    iterations = int(config["adaround_iterations"])
    walk_layers(graph, qgraph, config, sample, lambda layer: adaround_layer(qgraph, layer, iterations))
    return qgraph
