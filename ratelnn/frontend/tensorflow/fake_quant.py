"""Fake-quantization nodes of pre-quantized (quantization-aware-trained) GraphDefs, read with
TensorFlow's own semantics (docs/quantization.md "Importing pre-quantized (QAT) graphs").

- ``FakeQuantWithMinMaxArgs/Vars/VarsPerChannel``: ``[min, max]`` is *nudged* so that zero is
  a code: ``step = (max - min) / (qmax - qmin)`` (float32; ``qmin`` = 1 with
  ``narrow_range`` else 0, ``qmax = 2^bits - 1``), zero point ``zp = round(qmin - min / step)``
  clamped to ``[qmin, qmax]``; outputs ``(k - zp) * step`` for ``k`` in ``[qmin, qmax]``.
- ``QuantizeAndDequantizeV2/V3/V4``: symmetric by construction, ``step = max / qmax_s`` or
  ``min / qmin_s`` (the side that scales less), codes ``[qmin_s, qmax_s]`` = ``[-2^(b-1)
  (+1 narrow), 2^(b-1) - 1]`` signed, ``[0, 2^b - 1]`` unsigned.

Nodes whose input is constant (weights) are evaluated by TensorFlow and become ``Const``
nodes holding the fake-quantized values; the others (activations) stay and are described by
a :class:`ratelnn.quantization.prequant.Grid`.
"""
from __future__ import annotations

from typing import Dict, Optional, Set, Tuple

import numpy as np

from ...errors import ModelError
from ...quantization.prequant import Grid

FAKE_QUANT_OPS = ("FakeQuantWithMinMaxArgs", "FakeQuantWithMinMaxVars", "FakeQuantWithMinMaxVarsPerChannel")
QDQ_OPS = ("QuantizeAndDequantizeV2", "QuantizeAndDequantizeV3", "QuantizeAndDequantizeV4")
OPS = FAKE_QUANT_OPS + QDQ_OPS
_SOURCES = ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault")
_F32 = np.float32


def has_fake_quant(graph_def) -> bool:
    """Whether ``graph_def`` holds any node of :data:`OPS`."""
    return any(nd.op in OPS for nd in getattr(graph_def, "node", ()))


def _attr(nd, key, default):
    if key not in nd.attr:
        return default
    a = nd.attr[key]
    return getattr(a, a.WhichOneof("value"))


# ------------------------------------------------------------------ TF's arithmetic
def nudge(lo, hi, qmin: int, qmax: int) -> Tuple[np.ndarray, np.ndarray]:
    """TF's ``Nudge`` (fake_quant_ops_functor.h) in float32, elementwise: ``(step, zero_point)``."""
    lo, hi = np.asarray(lo, _F32), np.asarray(hi, _F32)
    with np.errstate(divide="ignore", invalid="ignore"):
        step = ((hi - lo) / _F32(qmax - qmin)).astype(_F32)
        from_min = (_F32(qmin) - lo / step).astype(_F32)
    rounded = np.sign(from_min) * np.floor(np.abs(from_min) + 0.5)   # std::round
    zp = np.where(from_min < qmin, qmin, np.where(from_min > qmax, qmax, np.nan_to_num(rounded)))
    return step, zp.astype(np.int64)


def qdq_step(lo, hi, min_q: int, max_q: int) -> np.ndarray:
    """The dequantization step of QuantizeAndDequantizeV2/V3/V4 (``inverse_scale``), float32."""
    lo, hi = np.asarray(lo, _F32), np.asarray(hi, _F32)
    big = np.finfo(_F32).max
    with np.errstate(divide="ignore", invalid="ignore"):
        from_min = np.where(min_q * lo > 0, _F32(min_q) / lo, big)
        from_max = np.where(max_q * hi > 0, _F32(max_q) / hi, big)
        return np.where(from_min < from_max, lo / _F32(min_q or 1), hi / _F32(max_q)).astype(_F32)


def _qdq_codes(nd, num_bits: int) -> Tuple[int, int]:
    signed = bool(_attr(nd, "signed_input", True))
    narrow = bool(_attr(nd, "narrow_range", False))
    if signed:
        return -(1 << (num_bits - 1)) + (1 if narrow else 0), (1 << (num_bits - 1)) - 1
    return 0, (1 << num_bits) - 1


def lattice(nd, lo, hi, num_bits: int, data: Optional[np.ndarray] = None):
    """``(steps, code_lo, code_hi, text)`` of fake-quant node ``nd`` with range inputs ``lo``,
    ``hi`` (scalars, or per channel), ``data``: the constant input (QDQ without ``range_given``
    reads its range from it).  ``steps`` broadcast like ``lo``."""
    narrow = bool(_attr(nd, "narrow_range", False))
    if nd.op in FAKE_QUANT_OPS:
        qmin, qmax = (1 if narrow else 0), (1 << num_bits) - 1
        step, zp = nudge(lo, hi, qmin, qmax)
        nudged = ((qmin - zp) * step.astype(np.float64), (qmax - zp) * step.astype(np.float64))
        text = (f"[{_fmt(lo)}, {_fmt(hi)}] ({num_bits} bits{', narrow_range' if narrow else ''}; "
                f"nudged to [{_fmt(nudged[0])}, {_fmt(nudged[1])}])")
        return step, qmin - zp, qmax - zp, text
    min_q, max_q = _qdq_codes(nd, num_bits)
    if data is not None and not bool(_attr(nd, "range_given", nd.op == "QuantizeAndDequantizeV3")):
        axis = int(_attr(nd, "axis", -1))
        if axis == -1:
            lo, hi = np.min(data), np.max(data)
        else:
            other = tuple(i for i in range(data.ndim) if i != axis % data.ndim)
            lo, hi = np.min(data, axis=other), np.max(data, axis=other)
    step = qdq_step(lo, hi, min_q, max_q)
    signed = "signed" if bool(_attr(nd, "signed_input", True)) else "unsigned"
    text = f"[{_fmt(lo)}, {_fmt(hi)}] ({num_bits} bits {signed}{', narrow_range' if narrow else ''})"
    return step, np.full(np.shape(step), min_q), np.full(np.shape(step), max_q), text


def _fmt(v) -> str:
    v = np.asarray(v, np.float64)
    return f"{float(v):.6g}" if v.size == 1 else f"per-channel {np.array2string(v, precision=4, threshold=6)}"


# ------------------------------------------------------------------ the GraphDef
def _constant_nodes(nodes) -> Set[str]:
    """Names of the nodes computed from Const nodes only (no placeholder upstream)."""
    memo: Dict[str, bool] = {}

    def const(name: str) -> bool:
        stack = [name]
        while stack:
            top = stack[-1]
            if top in memo:
                stack.pop()
                continue
            nd = nodes[top]
            deps = [r.split(":")[0] for r in nd.input if not r.startswith("^")]
            todo = [d for d in deps if d not in memo]
            if todo and nd.op not in _SOURCES:
                stack.extend(todo)
                continue
            memo[top] = nd.op == "Const" or (nd.op not in _SOURCES and bool(deps) and all(memo[d] for d in deps))
            stack.pop()
        return memo[name]

    return {name for name in nodes if const(name)}


def _range_refs(nd) -> Tuple[Optional[str], Optional[str], Optional[str]]:
    """TF tensor names of the (min, max, num_bits) inputs of ``nd`` (None: an attribute)."""
    refs = [r if ":" in r else r + ":0" for r in nd.input if not r.startswith("^")]
    if nd.op == "FakeQuantWithMinMaxArgs":
        return None, None, None
    return refs[1], refs[2], (refs[3] if nd.op == "QuantizeAndDequantizeV3" else None)


def fold_fake_quant(graph_def):
    """``(graph_def', grids, weight_steps, labels)``: a copy of ``graph_def`` whose fake-quant
    nodes on constant inputs are ``Const`` nodes of their (TF-computed) outputs;
    ``weight_steps``: such node name -> lattice step (broadcastable to its value);
    ``grids``: every other fake-quant node -> its :class:`Grid`; ``labels``: node name ->
    ``"<op> node '<name>'"`` for messages."""
    import tensorflow as tf
    from tensorflow.core.framework import graph_pb2
    if any(nd.op.startswith("Ratel") for nd in graph_def.node):
        raise ModelError("the graph holds both ratelnn ops and fake-quant nodes; pass either a "
                         "quantized model made by to_quant or a quantization-aware-trained graph")
    nodes = {nd.name: nd for nd in graph_def.node}
    constant = _constant_nodes(nodes)
    fq = [nd for nd in graph_def.node if nd.op in OPS]
    fetch: Dict[str, str] = {}
    for nd in fq:
        refs = [nd.input[0] if ":" in nd.input[0] else nd.input[0] + ":0", *_range_refs(nd)]
        for ref in refs[1:]:
            if ref is not None and ref.split(":")[0] in constant:
                fetch[ref] = ref
        if nd.name in constant:
            fetch[refs[0]] = refs[0]
            fetch[nd.name + ":0"] = nd.name + ":0"
    values = _evaluate(graph_def, list(fetch))
    out = graph_pb2.GraphDef()
    out.CopyFrom(graph_def)
    grids, steps, labels = {}, {}, {}
    for nd in fq:
        label = f"{nd.op} node {nd.name!r}"
        labels[nd.name] = label
        lo_ref, hi_ref, bits_ref = _range_refs(nd)
        num_bits = int(_attr(nd, "num_bits", 8)) if bits_ref is None else values.get(bits_ref)
        if nd.op == "FakeQuantWithMinMaxArgs":
            lo, hi = _attr(nd, "min", -6.0), _attr(nd, "max", 6.0)
        else:
            lo, hi = values.get(lo_ref), values.get(hi_ref)
        if nd.name in constant:
            data = values[nd.input[0] if ":" in nd.input[0] else nd.input[0] + ":0"]
            step, _, _, _ = lattice(nd, lo, hi, int(num_bits), data)
            if nd.op in QDQ_OPS:
                step = _along(step, int(_attr(nd, "axis", -1)), np.ndim(data))
            steps[nd.name] = step
            _to_const(out, nd.name, values[nd.name + ":0"], tf)
            continue
        grids[nd.name] = _activation_grid(nd, lo, hi, num_bits, label)
    return out, grids, steps, labels


def _along(step: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """Per-channel steps of a QDQ node along ``axis`` shaped to broadcast against its input."""
    if np.ndim(step) == 0 or axis == -1:
        return step
    return np.reshape(step, (-1,) + (1,) * (ndim - 1 - axis % ndim))


def _activation_grid(nd, lo, hi, num_bits, label: str) -> Grid:
    if lo is None or hi is None or num_bits is None:
        return Grid(nd.name, nd.op, 0.0, 0, 0, "?", "its min/max (or num_bits) are computed at run "
                    "time, not constants of the graph; the NPU needs a static range")
    if nd.op in QDQ_OPS and not bool(_attr(nd, "range_given", nd.op == "QuantizeAndDequantizeV3")):
        return Grid(nd.name, nd.op, 0.0, 0, 0, "?", "range_given is false: the range is each input's "
                    "own min/max at run time; the NPU needs a static range")
    lo, hi = np.asarray(lo, _F32).reshape(-1), np.asarray(hi, _F32).reshape(-1)
    if np.ptp(lo) != 0 or np.ptp(hi) != 0:
        return Grid(nd.name, nd.op, 0.0, 0, 0, f"per-channel min {lo} max {hi}",
                    "per-channel ranges on an activation; the NPU quantizes activations per tensor")
    lo, hi = lo[:1].reshape(()), hi[:1].reshape(())
    if not lo <= hi or (lo == 0 and hi == 0):
        return Grid(nd.name, nd.op, 0.0, 0, 0, f"[{float(lo):g}, {float(hi):g}]", "the range is empty")
    step, code_lo, code_hi, text = lattice(nd, lo, hi, int(num_bits))
    return Grid(nd.name, nd.op, float(step), int(code_lo), int(code_hi), text)


def _evaluate(graph_def, refs) -> Dict[str, np.ndarray]:
    """Values of the constant tensors ``refs`` of ``graph_def``, computed by TensorFlow."""
    import tensorflow as tf
    if not refs:
        return {}
    graph = tf.Graph()
    with graph.as_default():
        try:
            tf.compat.v1.import_graph_def(graph_def, name="")
        except (ValueError, TypeError) as e:
            raise ModelError(f"TensorFlow cannot import the GraphDef: {e}") from e
    with tf.compat.v1.Session(graph=graph) as sess:
        got = sess.run(refs)
    return dict(zip(refs, [np.asarray(v) for v in got]))


def _to_const(graph_def, name: str, value: np.ndarray, tf) -> None:
    """Replace node ``name`` of ``graph_def`` by a Const holding ``value``."""
    nd = next(n for n in graph_def.node if n.name == name)
    device = nd.device
    nd.Clear()
    nd.name, nd.op, nd.device = name, "Const", device
    nd.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    nd.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))


def depthwise_steps(graph, graph_def, steps: Dict[str, np.ndarray], labels: Dict[str, str]) -> None:
    """Give the IR weights of depthwise convs (``[kh, kw, 1, Cin*M]``, reshaped from a folded
    ``[kh, kw, Cin, M]`` Const by the importer) the steps of that Const, in their layout."""
    nodes = {nd.name: nd for nd in graph_def.node}
    reshaped = set()
    for node in graph.nodes:
        nd = nodes.get(node.name)
        if node.op != "Conv2D" or nd is None or nd.op != "DepthwiseConv2dNative" or node.inputs[1] in steps:
            continue
        src = nd.input[1].split(":")[0]
        while nodes[src].op in ("Identity", "Snapshot") and src not in steps:
            src = nodes[src].input[0].split(":")[0]
        if src not in steps:
            continue
        tf_shape = tuple(d.size for d in nodes[src].attr["value"].tensor.tensor_shape.dim)
        step = steps[src]
        if np.size(step) != 1:
            step = np.broadcast_to(step, tf_shape).reshape(graph.tensors[node.inputs[1]].shape)
        steps[node.inputs[1]] = step
        labels[node.inputs[1]] = labels[src]
        reshaped.add(src)
    for src in reshaped:   # read only through the reshaped copies
        del steps[src]
