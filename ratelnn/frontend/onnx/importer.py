"""ONNX ``ModelProto`` -> ratelnn IR, NCHW layout (docs/ir.md, docs/onnx.md).

ONNX names tensors, so an IR tensor is the ONNX tensor of the same name and an IR node is
named after its first output.  Initializers and ``Constant`` nodes become params; weights go
to the IR's canonical layouts (``Conv`` OIHW -> HWIO, ``Gemm`` with ``transB`` -> ``[K, M]``),
activations keep ONNX's NCHW and every spatial op says so in its ``layout``.  Static shapes
come from ONNX shape inference at the user's ``input_shapes`` (ONNX Runtime fills in what it
cannot infer).  An input whose batch dimension is symbolic in the model keeps it free in every
exported form (``graph.meta["free_batch_inputs"]``).  Standard ops outside the translation
table become ``Opaque`` nodes holding their serialized ``NodeProto``: they stay float ONNX
nodes in every form.
"""
from __future__ import annotations

import difflib
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelError
from ...ir import Graph, Node, TensorInfo, registry
from ...ir.evaluate import register_opaque_runner
from .model_io import DOMAIN, default_opset, import_onnx, load_model
from .runtime import run_opaque

register_opaque_runner("onnx", run_opaque)

CUSTOM_OPS = {"RatelMinMax": "MinMax", "RatelEngineOp": "Engine"}   # domain ratelnn


def _dtype_name(elem_type: int) -> str:
    onnx = import_onnx()
    return str(onnx.helper.tensor_dtype_to_np_dtype(elem_type))


class _ONNXNode:
    """One NodeProto as the translators see it: ``name`` is its first output."""

    def __init__(self, proto: Any):
        onnx = import_onnx()
        self.proto = proto
        self.op: str = proto.op_type
        self.domain: str = proto.domain
        self.inputs: List[str] = list(proto.input)
        self.outputs: List[str] = list(proto.output)
        self.name: str = self.outputs[0]
        self.attrs: Dict[str, Any] = {a.name: onnx.helper.get_attribute_value(a) for a in proto.attribute}

    def attr(self, key: str, default: Any = None) -> Any:
        value = self.attrs.get(key, default)
        return value.decode() if isinstance(value, bytes) else value

    def label(self) -> str:
        return f"{self.op} node {self.proto.name or self.name!r}"


class _Importer:
    def __init__(self, graph: Graph, consts: Dict[str, np.ndarray], infos: Dict[str, TensorInfo], opset: int,
                 batch_axes: Optional[Dict[str, int]] = None):
        self.graph = graph
        self.consts = consts
        self.infos = infos
        self.opset = opset
        self.batch_axes = batch_axes or {}   # tensor -> the axis that grows with a free batch

    def value(self, tensor: str) -> Optional[np.ndarray]:
        """The constant value of ``tensor`` (initializer or Constant), else None."""
        return self.consts.get(tensor) if tensor else None

    def shape(self, tensor: str) -> Tuple[int, ...]:
        if tensor in self.consts:
            return tuple(self.consts[tensor].shape)
        return tuple(self.infos[tensor].shape)

    def new_param(self, base: str, value: np.ndarray) -> str:
        name = self.graph.unique_name(base)
        self.consts[name] = np.asarray(value)
        return name

    def temp(self, base: str, shape: Sequence[int], dtype: str = "float32") -> str:
        name = self.graph.unique_name(base)
        self.infos[name] = TensorInfo(tuple(shape), dtype)
        self.graph.tensors[name] = self.infos[name]
        return name

    def weight(self, tensor: str, perm: Tuple[int, ...], nodes: List[Node]) -> str:
        """``tensor`` transposed by ``perm`` into the IR layout: a transposed param; the
        DequantizeLinear of a param (a quantized model's weight) re-made on the transposed
        param with its axis moved; otherwise a Transpose node appended to ``nodes``."""
        value = self.value(tensor)
        if value is not None:
            return self.new_param(f"{tensor}/ir", np.ascontiguousarray(value.transpose(perm)))
        producer = self.graph.producer(tensor)
        if producer is not None and producer.op == "Dequant" and self.value(producer.inputs[0]) is not None:
            codes = self.new_param(f"{producer.inputs[0]}/ir",
                                   np.ascontiguousarray(self.value(producer.inputs[0]).transpose(perm)))
            attrs = dict(producer.attrs)
            if attrs.get("axis") is not None:
                attrs["axis"] = perm.index(int(attrs["axis"]) % len(perm))
            out = self.temp(f"{tensor}/ir", [self.shape(tensor)[p] for p in perm])
            nodes.append(Node(out, "Dequant", [codes], [out], attrs))
            return out
        out = self.temp(f"{tensor}/ir", [self.shape(tensor)[p] for p in perm], self.infos[tensor].dtype)
        nodes.append(Node(out, "Transpose", [tensor], [out], {"perm": tuple(perm)}))
        return out

    def batch_follows(self, tensor: str) -> bool:
        """Whether dim 0 of ``tensor`` grows with the batch of a free-batch input."""
        return self.batch_axes.get(tensor) == 0


Translator = Callable[[_Importer, _ONNXNode], Optional[List[Node]]]


# ---------------------------------------------------------------- helpers
def _ints(value, default=()) -> Tuple[int, ...]:
    return tuple(int(v) for v in (default if value is None else value))


def _spatial_pads(imp: _Importer, n: _ONNXNode, kernel: Sequence[int], strides, dilations) -> Optional[Tuple[int, ...]]:
    """IR ``pads`` (top, bottom, left, right) of a 2-D window op, from ``pads`` or
    ``auto_pad``; None for an input that is not 4-D."""
    shape = imp.shape(n.inputs[0])
    if len(shape) != 4 or len(kernel) != 2:
        return None
    auto = n.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = _ints(n.attr("pads"), (0, 0, 0, 0)) if auto == "NOTSET" else (0, 0, 0, 0)
        return (p[0], p[2], p[1], p[3])
    out = []
    for size, k, s, d in zip(shape[2:], kernel, strides, dilations):
        total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        out.append((small, large) if auto == "SAME_UPPER" else (large, small))
    return (out[0][0], out[0][1], out[1][0], out[1][1])


def _ceil_extra(size: int, k: int, s: int, before: int, after: int) -> int:
    """Cells ``ceil_mode`` adds at the end of one axis (the last window must start inside)."""
    span = size + before + after - k
    floor_out, ceil_out = span // s + 1, -(-span // s) + 1
    if ceil_out > floor_out and (ceil_out - 1) * s >= size + before:
        ceil_out -= 1
    return (ceil_out - floor_out) * s


def _free_batch_shape(imp: _Importer, result: str, shape: Sequence[int]) -> Tuple[int, ...]:
    """``shape`` (of the reshape's ``result``) with -1 on the axis that grows with a free
    batch, whichever it is: the exported reshape then takes any batch (docs/architecture.md
    §3)."""
    shape = tuple(int(d) for d in shape)
    axis = imp.batch_axes.get(result)
    return shape[:axis] + (-1,) + shape[axis + 1:] if axis is not None else shape


# ---------------------------------------------------------------- translators
def _conv(imp: _Importer, n: _ONNXNode):
    w = imp.shape(n.inputs[1])
    kernel = _ints(n.attr("kernel_shape"), w[2:])
    strides, dilations = _ints(n.attr("strides"), (1, 1)), _ints(n.attr("dilations"), (1, 1))
    pads = _spatial_pads(imp, n, kernel, strides, dilations)
    if pads is None:
        return None
    nodes: List[Node] = []
    weight = imp.weight(n.inputs[1], (2, 3, 1, 0), nodes)
    bias = [t for t in n.inputs[2:3] if t]
    return nodes + [Node(n.name, "Conv2D", [n.inputs[0], weight] + bias, [n.name], {
        "strides": strides, "dilations": dilations, "pads": pads, "groups": int(n.attr("group", 1)),
        "layout": "NCHW", "act": "none", "act_alpha": 0.0})]


def _gemm(imp: _Importer, n: _ONNXNode):
    alpha, beta = float(n.attr("alpha", 1.0)), float(n.attr("beta", 1.0))
    b_value = imp.value(n.inputs[1])
    if alpha != 1.0 and b_value is None:
        return None
    nodes: List[Node] = []
    if n.attr("transB", 0):
        weight = imp.weight(n.inputs[1], (1, 0), nodes) if alpha == 1.0 else \
            imp.new_param(f"{n.inputs[1]}/ir", np.ascontiguousarray(alpha * b_value.T).astype(b_value.dtype))
    elif alpha != 1.0:
        weight = imp.new_param(f"{n.inputs[1]}/ir", (alpha * b_value).astype(b_value.dtype))
    else:
        weight = n.inputs[1]
    bias = []
    if len(n.inputs) > 2 and n.inputs[2]:
        c = imp.value(n.inputs[2])
        out_cols = imp.shape(n.name)[1]
        if c is None or c.size not in (1, out_cols) or (c.ndim == 2 and c.shape[0] != 1):
            return None
        full = beta * np.broadcast_to(c.reshape(-1), (out_cols,))
        bias = [imp.new_param(f"{n.inputs[2]}/ir", full.astype(c.dtype))]
    return nodes + [Node(n.name, "MatMul", [n.inputs[0], weight] + bias, [n.name],
                         {"transpose_a": bool(n.attr("transA", 0)), "transpose_b": False,
                          "act": "none", "act_alpha": 0.0})]


def _matmul(imp: _Importer, n: _ONNXNode):
    if len(imp.shape(n.inputs[0])) != 2 or len(imp.shape(n.inputs[1])) != 2:
        return None
    return [Node(n.name, "MatMul", n.inputs[:2], [n.name],
                 {"transpose_a": False, "transpose_b": False, "act": "none", "act_alpha": 0.0})]


def _batchnorm(imp: _Importer, n: _ONNXNode):
    if len(n.outputs) > 1 or n.attr("training_mode", 0) or any(imp.value(t) is None for t in n.inputs[1:5]):
        return None
    return [Node(n.name, "BatchNorm", n.inputs[:5], [n.name], {"eps": float(n.attr("epsilon", 1e-5)), "axis": 1})]


def _clip(imp: _Importer, n: _ONNXNode):
    bounds = []
    for t, default in zip((n.inputs + ["", ""])[1:3], (-np.inf, np.inf)):
        v = imp.value(t) if t else np.float32(default)
        if v is None:
            return None
        bounds.append(float(np.asarray(v).reshape(-1)[0]))
    if bounds == [0.0, 6.0]:
        return [Node(n.name, "Relu6", n.inputs[:1], [n.name])]
    if bounds == [0.0, np.inf]:
        return [Node(n.name, "Relu", n.inputs[:1], [n.name])]
    return None


def _window(imp: _Importer, n: _ONNXNode, op: str):
    kernel = _ints(n.attr("kernel_shape"))
    strides = _ints(n.attr("strides"), (1,) * len(kernel))
    dilations = _ints(n.attr("dilations"), (1,) * len(kernel))
    if len(n.outputs) > 1 or any(d != 1 for d in dilations) or n.attr("storage_order", 0):
        return None
    pads = _spatial_pads(imp, n, kernel, strides, dilations)
    if pads is None:
        return None
    include_pad = bool(n.attr("count_include_pad", 0))
    if n.attr("ceil_mode", 0):
        size = imp.shape(n.inputs[0])[2:]
        extra = [_ceil_extra(size[a], kernel[a], strides[a], pads[2 * a], pads[2 * a + 1]) for a in (0, 1)]
        if any(extra) and op == "AvgPool" and include_pad:
            return None   # ONNX counts the symmetric pads but not the ceil cells
        pads = (pads[0], pads[1] + extra[0], pads[2], pads[3] + extra[1])
    attrs = {"ksize": kernel, "strides": strides, "pads": pads, "layout": "NCHW"}
    if op == "AvgPool":
        attrs["count_include_pad"] = include_pad
    return [Node(n.name, op, n.inputs[:1], [n.name], attrs)]


def _global_pool(imp: _Importer, n: _ONNXNode, op: str):
    shape = imp.shape(n.inputs[0])
    if len(shape) != 4:
        return None
    if op == "Mean":
        return [Node(n.name, "Mean", n.inputs[:1], [n.name], {"axes": (2, 3), "keepdims": True})]
    return [Node(n.name, "MaxPool", n.inputs[:1], [n.name], {"ksize": tuple(shape[2:]), "strides": (1, 1),
                                                              "pads": (0, 0, 0, 0), "layout": "NCHW"})]


def _axes(imp: _Importer, n: _ONNXNode, rank: int) -> Optional[Tuple[int, ...]]:
    """Axes from the ``axes`` attribute or (newer opsets) the second input; () when absent;
    None when given by a computed tensor."""
    if "axes" in n.attrs:
        axes = n.attrs["axes"]
    elif len(n.inputs) > 1 and n.inputs[1]:
        axes = imp.value(n.inputs[1])
        if axes is None:
            return None
    else:
        axes = ()
    return tuple(sorted(int(a) % rank for a in np.asarray(axes).reshape(-1)))


def _reduce_mean(imp: _Importer, n: _ONNXNode):
    rank = len(imp.shape(n.inputs[0]))
    axes = _axes(imp, n, rank)
    if axes is None or (not axes and n.attr("noop_with_empty_axes", 0)):
        return None
    return [Node(n.name, "Mean", n.inputs[:1], [n.name],
                 {"axes": axes or tuple(range(rank)), "keepdims": bool(n.attr("keepdims", 1))})]


def _squeeze(imp: _Importer, n: _ONNXNode):
    shape = imp.shape(n.inputs[0])
    axes = _axes(imp, n, len(shape))
    if axes is None:
        return None
    if not axes:   # every size-1 dim, but never a free batch that is 1 only in input_shapes
        axes = tuple(a for a, d in enumerate(shape) if d == 1 and imp.batch_axes.get(n.inputs[0]) != a)
    return [Node(n.name, "Squeeze", n.inputs[:1], [n.name], {"axes": axes})]


def _reshape_to_output(imp: _Importer, n: _ONNXNode):
    """A Reshape to the statically inferred output shape (Reshape, Unsqueeze, Flatten with
    another axis), following a free batch; an Identity when the shape does not change (as
    tf2onnx writes the NHWC -> NCHW move of a one-channel input taken as NCHW)."""
    if imp.shape(n.name) is None:
        return None
    if imp.shape(n.name) == imp.shape(n.inputs[0]):
        return [Node(n.name, "Identity", n.inputs[:1], [n.name])]
    return [Node(n.name, "Reshape", n.inputs[:1], [n.name],
                 {"shape": _free_batch_shape(imp, n.name, imp.shape(n.name))})]


def _flatten(imp: _Importer, n: _ONNXNode):
    if int(n.attr("axis", 1)) % max(len(imp.shape(n.inputs[0])), 1) == 1:
        return [Node(n.name, "Flatten", n.inputs[:1], [n.name])]
    return _reshape_to_output(imp, n)


def _transpose(imp: _Importer, n: _ONNXNode):
    rank = len(imp.shape(n.inputs[0]))
    perm = _ints(n.attr("perm"), tuple(reversed(range(rank))))
    return [Node(n.name, "Transpose", n.inputs[:1], [n.name], {"perm": perm})]


def _pad(imp: _Importer, n: _ONNXNode):
    if n.attr("mode", "constant") != "constant" or (len(n.inputs) > 3 and n.inputs[3]):
        return None
    pads = imp.value(n.inputs[1])
    value = imp.value(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else np.float32(0)
    if pads is None or value is None:
        return None
    pads = [int(p) for p in pads.reshape(-1)]
    rank = len(pads) // 2
    return [Node(n.name, "Pad", n.inputs[:1], [n.name],
                 {"pads": tuple((pads[i], pads[i + rank]) for i in range(rank)),
                  "value": float(np.asarray(value).reshape(-1)[0])})]


def _concat(imp: _Importer, n: _ONNXNode):
    rank = len(imp.shape(n.name))
    return [Node(n.name, "Concat", n.inputs, [n.name], {"axis": int(n.attr("axis")) % rank})]


def _softmax(imp: _Importer, n: _ONNXNode):
    rank = len(imp.shape(n.name))
    return [Node(n.name, "Softmax", n.inputs[:1], [n.name], {"axis": int(n.attr("axis", -1)) % rank})]


def _div(imp: _Importer, n: _ONNXNode):
    """Division by a float constant -> multiplication by its reciprocal (quantized and run
    on the NPU, where Div is not); any other Div stays an IR Div."""
    divisor = imp.value(n.inputs[1])
    if divisor is None or divisor.dtype.kind != "f" or not np.all(divisor != 0):
        return [Node(n.name, "Div", n.inputs[:2], [n.name])]
    reciprocal = imp.new_param(f"{n.inputs[1]}/reciprocal", (1 / divisor.astype(np.float64)).astype(divisor.dtype))
    return [Node(n.name, "Mul", [n.inputs[0], reciprocal], [n.name])]


def _binary_two(op: str) -> Translator:
    """``Max``/``Min`` of exactly two operands."""
    return lambda imp, n: [Node(n.name, op, n.inputs, [n.name])] if len(n.inputs) == 2 else None


def _quant(imp: _Importer, n: _ONNXNode, op: str):
    """QuantizeLinear/DequantizeLinear with a zero zero point -> Quant/Dequant (symmetric)."""
    scale = imp.value(n.inputs[1])
    zero = imp.value(n.inputs[2]) if len(n.inputs) > 2 and n.inputs[2] else np.zeros((), np.uint8)
    if scale is None or zero is None or np.any(zero != 0) or n.attr("block_size", 0):
        return None
    attrs: Dict[str, Any] = {}
    scale = np.asarray(scale, np.float32).reshape(-1) if scale.ndim else np.asarray(scale, np.float32)
    if scale.ndim and scale.size > 1:
        rank = len(imp.shape(n.inputs[0]))
        attrs.update(scales=[float(s) for s in scale], axis=int(n.attr("axis", 1)) % rank)
    else:
        attrs["scale"] = float(scale.reshape(-1)[0])
    if op == "Quant":
        attrs.update(dtype=str(zero.dtype), round_mode="half_to_even")
    return [Node(n.name, op, n.inputs[:1], [n.name], attrs)]


def _custom(imp: _Importer, n: _ONNXNode):
    op = CUSTOM_OPS[n.op]
    attrs = {k: (v.decode() if isinstance(v, bytes) and k != "engine" else v) for k, v in n.attrs.items()}
    if op == "Engine":
        attrs["core_ids"] = list(attrs.get("core_ids", []))
        attrs["batch_engines"] = list(attrs.get("batch_engines", []))
    return [Node(n.name, op, n.inputs, n.outputs, attrs)]


def _generic(op: registry.OpDef, spelling: str) -> Translator:
    """One IR node of ``op`` reading the same inputs."""
    arity = 2 if op.form == registry.BINARY else 1
    return lambda imp, n: [Node(n.name, op.name, n.inputs[:arity], [n.name])]


# ONNX op (default domain) -> translator: ops with attributes or operands to convert here,
# the others (one IR op, same inputs) from the registry's ONNX spellings
_TRANSLATORS: Mapping[str, Translator] = registry.frontend_table("onnx", {
    "Conv": _conv, "Gemm": _gemm, "MatMul": _matmul, "BatchNormalization": _batchnorm, "Clip": _clip,
    "LeakyRelu": lambda imp, n: [Node(n.name, "LeakyRelu", n.inputs[:1], [n.name],
                                      {"alpha": float(n.attr("alpha", 0.01))})],
    "HardSigmoid": lambda imp, n: [Node(n.name, "HardSigmoid", n.inputs[:1], [n.name],
                                        {"alpha": float(n.attr("alpha", 0.2)), "beta": float(n.attr("beta", 0.5))})],
    "Div": _div, "Max": _binary_two("Maximum"), "Min": _binary_two("Minimum"),
    "MaxPool": lambda imp, n: _window(imp, n, "MaxPool"), "AveragePool": lambda imp, n: _window(imp, n, "AvgPool"),
    "GlobalMaxPool": lambda imp, n: _global_pool(imp, n, "MaxPool"),
    "GlobalAveragePool": lambda imp, n: _global_pool(imp, n, "Mean"),
    "ReduceMean": _reduce_mean, "Squeeze": _squeeze, "Reshape": _reshape_to_output, "Flatten": _flatten,
    "Transpose": _transpose, "Pad": _pad, "Concat": _concat, "Softmax": _softmax,
    "QuantizeLinear": lambda imp, n: _quant(imp, n, "Quant"),
    "DequantizeLinear": lambda imp, n: _quant(imp, n, "Dequant"),
    "Dropout": lambda imp, n: [Node(n.name, "Identity", n.inputs[:1], [n.name])] if len(n.outputs) == 1 else None,
}, _generic)
# ONNX ops with no IR op of their own, translated to one that has
_UNREGISTERED: Dict[str, Translator] = {"Unsqueeze": _reshape_to_output}


# ---------------------------------------------------------------- shapes
def _known(dim: Any) -> bool:
    """Whether a ``TensorShapeProto.Dimension`` has a size: some exporters (Paddle's) write
    -1 for a dimension they leave open."""
    return dim.HasField("dim_value") and dim.dim_value >= 0


def _specialised(proto: Any, input_shapes: Dict[str, Sequence[int]]) -> Any:
    """``proto`` with its inputs at ``input_shapes`` and the open dimensions written as -1
    made unknown (shape inference would otherwise take -1 as a size that contradicts)."""
    onnx = import_onnx()
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.name in input_shapes:
            del dims[:]
            for d in input_shapes[vi.name]:
                dims.add().dim_value = int(d)
        for d in dims:
            if d.HasField("dim_value") and not _known(d):
                d.ClearField("dim_value")
    return model


def _value_infos(model: Any) -> Dict[str, TensorInfo]:
    out = {}
    for vi in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        tt = vi.type.tensor_type
        if not tt.HasField("shape") or not tt.elem_type:
            continue
        dims = [d.dim_value if _known(d) else None for d in tt.shape.dim]
        if all(d is not None for d in dims):
            out[vi.name] = TensorInfo(tuple(int(d) for d in dims), _dtype_name(tt.elem_type))
    return out


def _infer_shapes(proto: Any, input_shapes: Dict[str, Sequence[int]], needed: Sequence[str]) -> Dict[str, TensorInfo]:
    """Static shape and dtype of every tensor in ``needed`` at ``input_shapes``: ONNX shape
    inference, then one ONNX Runtime run on zeros for the tensors it leaves open."""
    onnx = import_onnx()
    model = _specialised(proto, input_shapes)
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as e:
        raise ModelError(f"input_shapes {dict(input_shapes)} do not fit the model: {_first_line(e)}") from e
    infos = _value_infos(inferred)
    missing = [t for t in needed if t not in infos]
    if missing:
        from .runtime import probe_shapes
        infos.update(probe_shapes(model, input_shapes, missing))
    return infos


def _batch_axes(proto: Any, input_shapes: Dict[str, Sequence[int]], free: Sequence[str],
                infos: Dict[str, TensorInfo], needed: Sequence[str]) -> Dict[str, int]:
    """tensor -> the one axis whose size grows with the batch of the ``free`` inputs: the
    shapes inferred again with those batches doubled, compared with ``infos``.  A tensor
    whose shape does not change (or whose batch moved into no single axis) has none; a model
    that cannot take another batch gives none at all."""
    if not free:
        return {}
    doubled = {name: ([2 * int(shape[0])] + list(shape[1:]) if name in free else shape)
               for name, shape in input_shapes.items()}
    try:
        other = _infer_shapes(proto, doubled, needed)
    except ModelError:
        return {}
    axes = {}
    for t in needed:
        if t in infos and t in other and len(infos[t].shape) == len(other[t].shape):
            grew = [a for a, (d, e) in enumerate(zip(infos[t].shape, other[t].shape)) if d != e]
            if len(grew) == 1 and other[t].shape[grew[0]] == 2 * infos[t].shape[grew[0]]:
                axes[t] = grew[0]
    return axes


def _first_line(e: Exception) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


# ---------------------------------------------------------------- entry point
def _close(name: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=5)
    return f"; close matches: {close}" if close else ""


def _constants(proto: Any) -> Dict[str, np.ndarray]:
    onnx = import_onnx()
    from onnx import numpy_helper
    consts = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
            attr = node.attribute[0]
            value = onnx.helper.get_attribute_value(attr)
            if attr.name == "value":
                consts[node.output[0]] = numpy_helper.to_array(value)
            elif attr.name in ("value_float", "value_int", "value_floats", "value_ints"):
                dtype = np.float32 if "float" in attr.name else np.int64
                consts[node.output[0]] = np.asarray(value, dtype)
            else:
                raise ModelError(f"Constant node {node.name or node.output[0]!r}: attribute {attr.name!r} "
                                 "is not supported")
    return consts


def _reachable(nodes: List[Any], outputs: Sequence[str], stop: Sequence[str]) -> List[int]:
    producer = {t: i for i, n in enumerate(nodes) for t in n.output}
    seen, stack = set(), [producer[t] for t in outputs if t in producer]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        stack.extend(producer[t] for t in nodes[i].input if t and t in producer and t not in stop)
    return sorted(seen)


def _opaque_allowed(n: _ONNXNode) -> None:
    """ModelError unless ONNX Runtime can run the node as a float fallback: a standard op."""
    onnx = import_onnx()
    if n.domain not in ("", "ai.onnx") or not onnx.defs.has(n.op, n.domain):
        raise ModelError(f"{n.label()} (domain {n.domain or 'ai.onnx'!r}) is neither translated by ratelnn "
                         "nor a standard ONNX op that ONNX Runtime runs; it cannot be kept as a float node")


_UNFORESEEN = (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError)


def import_model(model: Any, input_nodes: Sequence[str], output_nodes: Sequence[str],
                 input_shapes: Sequence[Sequence[int]]) -> Graph:
    """Translate an ONNX model (``ModelProto`` or path) to the IR with its inputs specialised
    to ``input_shapes`` (one NCHW shape per input).  Raises ModelError naming the problem
    (unknown input or output names, a wrong input rank, an op ONNX Runtime cannot run, bad
    external data, an opset out of range, control flow)."""
    proto, _ = load_model(model)
    g = proto.graph
    consts = _constants(proto)
    declared = {vi.name: vi for vi in g.input if vi.name not in consts}
    if len(input_shapes) != len(input_nodes):
        raise ModelError(f"{len(input_shapes)} input_shapes for {len(input_nodes)} input nodes")
    for name, shape in zip(input_nodes, input_shapes):
        if name not in declared:
            raise ModelError(f"input node {name!r} is not an input of the ONNX graph{_close(name, declared)}")
        dims = declared[name].type.tensor_type.shape.dim
        if len(dims) and len(dims) != len(shape):
            raise ModelError(f"input_shapes for {name!r} has rank {len(shape)} ({list(shape)}), but the model "
                             f"declares rank {len(dims)}")
    produced = {t for n in g.node for t in n.output} | set(declared) | set(consts)
    for name in output_nodes:
        if name not in produced:
            raise ModelError(f"output node {name!r} is not a tensor of the ONNX graph"
                             f"{_close(name, [o.name for o in g.output] + [t for n in g.node for t in n.output])}")
    order = _reachable(list(g.node), output_nodes, input_nodes)
    nodes = [_ONNXNode(g.node[i]) for i in order if g.node[i].op_type != "Constant"]
    for n in nodes:   # before shape inference, which would fail on them less clearly
        if not (n.domain == DOMAIN and n.op in CUSTOM_OPS) and n.domain not in ("", "ai.onnx"):
            _opaque_allowed(n)
    read = {t for n in nodes for t in n.inputs if t}
    missing = sorted(t for t in read if t not in produced)
    if missing:
        raise ModelError(f"tensors {missing} are read but neither produced, nor initializers, nor graph inputs")
    needed = [t for n in nodes for t in n.outputs if t] + list(output_nodes)
    shapes = dict(zip(input_nodes, input_shapes))
    infos = _infer_shapes(proto, shapes, [t for t in needed if t not in consts])

    graph = Graph(name="onnx")
    for name, shape in zip(input_nodes, input_shapes):
        elem = declared[name].type.tensor_type.elem_type
        graph.add_input(name, shape, _dtype_name(elem) if elem else "float32")
    free = []
    for name in input_nodes:
        dims = declared[name].type.tensor_type.shape.dim
        if len(dims) and not _known(dims[0]):
            free.append(name)
    graph.meta["free_batch_inputs"] = free
    graph.meta["onnx_batch_dims"] = {name: declared[name].type.tensor_type.shape.dim[0].dim_param or "N"
                                     for name in free}
    graph.meta["onnx_opset"] = default_opset(proto)
    batch_axes = _batch_axes(proto, shapes, free, infos, [t for t in needed if t not in consts])
    batch_axes.update((name, 0) for name in free)
    imp = _Importer(graph, consts, infos, default_opset(proto), batch_axes)
    for n in nodes:
        try:
            _translate(imp, n)
        except ModelError:
            raise
        except _UNFORESEEN as e:
            raise ModelError(f"cannot translate {n.label()}: {type(e).__name__}: {e}") from e
    for t in list(output_nodes):
        if t in consts and t not in graph.params:
            graph.add_param(t, consts[t])
    graph.outputs = list(output_nodes)
    graph.prune()
    return graph


def _translate(imp: _Importer, n: _ONNXNode) -> None:
    if n.domain == DOMAIN and n.op in CUSTOM_OPS:
        translated = _custom(imp, n)
    elif n.domain in ("", "ai.onnx") and (n.op in _TRANSLATORS or n.op in _UNREGISTERED):
        translated = (_TRANSLATORS.get(n.op) or _UNREGISTERED[n.op])(imp, n)
    else:
        translated = None
    if translated is None:
        _opaque_allowed(n)
        # optional operands and results left out ("") are not IR tensors: the slots say
        # where the IR's inputs and outputs go back in the NodeProto
        translated = [Node(n.name, "Opaque", [t for t in n.inputs if t], [t for t in n.outputs if t], {
            "framework": "onnx", "type": n.op, "payload": n.proto.SerializeToString(),
            "input_slots": [k for k, t in enumerate(n.inputs) if t],
            "output_slots": [k for k, t in enumerate(n.outputs) if t]})]
    for node in translated:
        for t in node.inputs:
            if t and t in imp.consts and t not in imp.graph.params:
                imp.graph.add_param(t, imp.consts[t])
        infos = [imp.graph.tensors.get(t) or imp.infos.get(t) for t in node.outputs]
        if any(i is None for i in infos):
            unknown = [t for t, i in zip(node.outputs, infos) if i is None]
            raise ModelError(f"{n.label()}: no static shape for {unknown}")
        if node.op == "Quant":
            infos = [TensorInfo(infos[0].shape, node.attrs["dtype"])]
        imp.graph.add_node(node, infos)
