"""ratelnn IR -> ONNX ``ModelProto`` (docs/onnx.md).

IR tensors keep their names, so graph inputs and outputs are the user's.  Params become
initializers; weights go back to ONNX's layouts (HWIO -> OIHW for ``Conv``; ``Gemm`` reads
the IR's ``[K, M]``); a weight that is the dequantized value of an integer param is written
as the transposed integer initializer with a ``DequantizeLinear`` on the moved axis, the form
ONNX Runtime's QDQ fusions recognise.  ``Quant``/``Dequant`` are ``QuantizeLinear`` /
``DequantizeLinear`` with a zero zero point of the integer type; ``MinMax`` and ``Engine`` are
``RatelMinMax`` / ``RatelEngineOp`` in the domain ``ratelnn``; ``Opaque`` ONNX nodes are
written back as they came.  An input the original model took at any batch keeps its
symbolic batch dimension, and so do the outputs that follow it.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelError
from ...ir import Graph, Node, registry
from ...ir.naming import NameAllocator
from ...ir.recorded import decoded, recorded_texts
from .model_io import DOMAIN, DOMAIN_VERSION, MIN_OPSET, import_onnx, max_opset

QDQ_INT16_OPSET = 21   # QuantizeLinear/DequantizeLinear take int16 from this opset on
# ONNX ops through which ONNX Runtime's QDQ propagation moves a DequantizeLinear
_ORT_PROPAGATED = frozenset(("Reshape", "Transpose", "Squeeze", "Unsqueeze", "Slice", "MaxPool"))  # not IR ops


class _Exporter:
    def __init__(self, graph: Graph, opset: int):
        self.onnx = import_onnx()
        self.graph = graph
        self.opset = opset
        self.nodes: List[Any] = []
        self.initializers: Dict[str, np.ndarray] = {}
        self.names = NameAllocator(reserved=set(graph.tensors) | {n.name for n in graph.nodes})
        self.converted: Dict[Tuple[str, str], str] = {}
        # a compiled graph: Quant keeps the IR's rounding (RatelQuant), not QuantizeLinear's
        self.exact_quant = any(n.op == "Engine" for n in graph.nodes)

    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def add(self, op: str, inputs: Sequence[str], outputs: Sequence[str], name: Optional[str] = None,
            domain: str = "", **attrs: Any) -> str:
        self.nodes.append(self.onnx.helper.make_node(op, list(inputs), list(outputs), name=name or outputs[0],
                                                     domain=domain or None, **attrs))
        return outputs[0]

    def const(self, base: str, value: np.ndarray) -> str:
        name = self.fresh(base)
        self.initializers[name] = np.asarray(value)
        return name

    def converted_param(self, tensor: str, kind: str, convert: Callable[[np.ndarray], np.ndarray]) -> str:
        key = (tensor, kind)
        if key not in self.converted:
            self.converted[key] = self.const(f"{tensor}/{kind}", convert(np.asarray(self.graph.params[tensor])))
        return self.converted[key]

    def weight(self, tensor: str, perm: Tuple[int, ...], kind: str) -> str:
        """``tensor`` transposed by ``perm`` into ONNX's weight layout (see the module doc)."""
        if tensor in self.graph.params:
            return self.converted_param(tensor, kind, lambda v: np.ascontiguousarray(v.transpose(perm)))
        producer = self.graph.producer(tensor)
        if producer is not None and producer.op == "Dequant" and producer.inputs[0] in self.graph.params:
            codes = self.converted_param(producer.inputs[0], kind, lambda v: np.ascontiguousarray(v.transpose(perm)))
            attrs = dict(producer.attrs)
            if attrs.get("axis") is not None:
                attrs["axis"] = perm.index(int(attrs["axis"]) % len(perm))
            return _dequantize(self, codes, self.fresh(f"{tensor}/{kind}"), attrs,
                               str(self.graph.params[producer.inputs[0]].dtype))
        out = self.fresh(f"{tensor}/{kind}")
        return self.add("Transpose", [tensor], [out], perm=list(perm))


# ---------------------------------------------------------------- per-op export
def _activation(ex: _Exporter, x: str, out: str, act: str, alpha: Any) -> None:
    if act == "relu":
        ex.add("Relu", [x], [out])
    elif act == "relu6":
        _clip6(ex, x, out)
    elif act == "leaky_relu":
        ex.add("LeakyRelu", [x], [out], alpha=float(alpha))
    elif act == "prelu":
        slopes = np.asarray(alpha, np.float32).reshape(-1, 1, 1)
        ex.add("PRelu", [x, ex.const(f"{out}/slopes", slopes)], [out])
    else:
        raise ModelError(f"unknown fused activation {act!r} for tensor {out!r}")


def _clip6(ex: _Exporter, x: str, out: str) -> None:
    ex.add("Clip", [x, ex.const(f"{out}/min", np.float32(0)), ex.const(f"{out}/max", np.float32(6))], [out])


def _with_activation(ex: _Exporter, node: Node, build: Callable[[str], None]) -> None:
    act = node.attrs.get("act", "none")
    if act == "none":
        build(node.outputs[0])
        return
    main = ex.fresh(f"{node.outputs[0]}/{node.op.lower()}")
    build(main)
    _activation(ex, main, node.outputs[0], act, node.attrs.get("act_alpha", 0.0))


def _check_nchw(node: Node) -> None:
    if node.attrs.get("layout", "NHWC") != "NCHW":
        raise ModelError(f"{node.name}: {node.op} in layout {node.attrs.get('layout', 'NHWC')} cannot be "
                         "exported to ONNX (NCHW only)")


def _conv2d(ex: _Exporter, node: Node) -> None:
    _check_nchw(node)
    a = node.attrs
    kh, kw = ex.graph.shape(node.inputs[1])[:2]
    top, bottom, left, right = a.get("pads", (0, 0, 0, 0))
    inputs = [node.inputs[0], ex.weight(node.inputs[1], (3, 2, 0, 1), "oihw")] + list(node.inputs[2:3])
    attrs = dict(kernel_shape=[kh, kw], strides=list(a.get("strides", (1, 1))),
                 dilations=list(a.get("dilations", (1, 1))), pads=[top, left, bottom, right],
                 group=int(a.get("groups", 1)))
    _with_activation(ex, node, lambda out: ex.add("Conv", inputs, [out], name=out, **attrs))


def _matmul(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    inputs = list(node.inputs[:3])
    attrs = dict(transA=int(bool(a.get("transpose_a"))), transB=int(bool(a.get("transpose_b"))))
    if len(ex.graph.shape(node.inputs[0])) != 2:
        raise ModelError(f"{node.name}: MatMul of a rank-{len(ex.graph.shape(node.inputs[0]))} operand")
    _with_activation(ex, node, lambda out: ex.add("Gemm", inputs, [out], name=out, **attrs))


def _bias_add(ex: _Exporter, node: Node) -> None:
    rank = len(ex.graph.shape(node.inputs[0]))
    axis = 1 if node.attrs.get("layout") == "NCHW" and rank > 2 else rank - 1
    shape = (-1,) + (1,) * (rank - axis - 1)
    if node.inputs[1] in ex.graph.params:
        bias = ex.converted_param(node.inputs[1], "bias", lambda v: v.reshape(shape))
    else:
        bias = ex.add("Reshape", [node.inputs[1], ex.const(f"{node.outputs[0]}/shape", np.asarray(shape, np.int64))],
                      [ex.fresh(f"{node.outputs[0]}/bias")])
    ex.add("Add", [node.inputs[0], bias], node.outputs)


def _pool(ex: _Exporter, node: Node) -> None:
    _check_nchw(node)
    a = node.attrs
    top, bottom, left, right = a.get("pads", (0, 0, 0, 0))
    x = node.inputs[0]
    kh, kw = a["ksize"]
    if node.op == "MaxPool" and (max(top, bottom) >= kh or max(left, right) >= kw):
        # ONNX Runtime wants pads below the kernel: pad with -inf first (a pad never wins a max)
        flat = np.asarray([0, 0, top, left, 0, 0, bottom, right], np.int64)
        x = ex.add("Pad", [x, ex.const(f"{node.outputs[0]}/pads", flat),
                           ex.const(f"{node.outputs[0]}/value", np.float32(-np.inf))],
                   [ex.fresh(f"{node.outputs[0]}/padded")], mode="constant")
        top = bottom = left = right = 0
    attrs = dict(kernel_shape=list(a["ksize"]), strides=list(a.get("strides", (1, 1))),
                 pads=[top, left, bottom, right])
    if node.op == "AvgPool":
        attrs["count_include_pad"] = int(bool(a.get("count_include_pad", False)))
    ex.add("MaxPool" if node.op == "MaxPool" else "AveragePool", [x], node.outputs, **attrs)


def _axes_operand(ex: _Exporter, node: Node, op: str, axes: Sequence[int], since: int, **attrs: Any) -> None:
    """``op`` with ``axes`` as an attribute before opset ``since``, as an input from it on."""
    if ex.opset >= since:
        ex.add(op, [node.inputs[0], ex.const(f"{node.outputs[0]}/axes", np.asarray(axes, np.int64))],
               node.outputs, **attrs)
    else:
        ex.add(op, node.inputs[:1], node.outputs, axes=list(axes), **attrs)


def _mean(ex: _Exporter, node: Node) -> None:
    _axes_operand(ex, node, "ReduceMean", node.attrs["axes"], 18, keepdims=int(bool(node.attrs.get("keepdims"))))


def _reshape(ex: _Exporter, node: Node) -> None:
    shape = np.asarray(node.attrs["shape"], np.int64)
    ex.add("Reshape", [node.inputs[0], ex.const(f"{node.outputs[0]}/shape", shape)], node.outputs)


def _pad(ex: _Exporter, node: Node) -> None:
    pads = [tuple(p) for p in node.attrs["pads"]]
    flat = np.asarray([p[0] for p in pads] + [p[1] for p in pads], np.int64)
    value = np.asarray(node.attrs.get("value", 0.0), np.float32)
    ex.add("Pad", [node.inputs[0], ex.const(f"{node.outputs[0]}/pads", flat),
                   ex.const(f"{node.outputs[0]}/value", value)], node.outputs, mode="constant")


def _zero_point(ex: _Exporter, base: str, dtype: str, attrs: Dict[str, Any]) -> str:
    """Zeros of the integer type, one per scale (per-axis quantization needs the same shape)."""
    shape = (len(attrs["scales"]),) if attrs.get("scales") is not None else ()
    return ex.const(f"{base}/zero_point", np.zeros(shape, dtype))


def _scale_operand(ex: _Exporter, base: str, attrs: Dict[str, Any]) -> Tuple[str, Dict[str, Any]]:
    if attrs.get("scales") is not None:
        return (ex.const(f"{base}/scale", np.asarray(attrs["scales"], np.float32)), {"axis": int(attrs["axis"])})
    return ex.const(f"{base}/scale", np.float32(attrs["scale"])), {}


def _dequantize(ex: _Exporter, codes: str, out: str, attrs: Dict[str, Any], dtype: str) -> str:
    scale, extra = _scale_operand(ex, out, attrs)
    return ex.add("DequantizeLinear", [codes, scale, _zero_point(ex, out, dtype, attrs)], [out], **extra)


def _quant(ex: _Exporter, node: Node) -> None:
    if ex.exact_quant and node.attrs.get("round_mode", "half_to_even") != "half_to_even":
        a = node.attrs   # QuantizeLinear rounds half to even: the engines' inputs need the IR's rounding
        extra = {"scales": [float(s) for s in a["scales"]], "axis": int(a["axis"])} if a.get("scales") is not None \
            else {"scale": float(a["scale"])}
        ex.add("RatelQuant", node.inputs, node.outputs, domain=DOMAIN, dtype=str(a["dtype"]),
               round_mode=str(a["round_mode"]), **extra)
        return
    scale, extra = _scale_operand(ex, node.outputs[0], node.attrs)
    ex.add("QuantizeLinear", [node.inputs[0], scale, _zero_point(ex, node.outputs[0], node.attrs["dtype"], node.attrs)],
           node.outputs, **extra)


def _dequant(ex: _Exporter, node: Node) -> None:
    _dequantize(ex, node.inputs[0], node.outputs[0], node.attrs, ex.graph.dtype(node.inputs[0]))


def _minmax(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    ex.add("RatelMinMax", node.inputs, node.outputs, domain=DOMAIN, tensor_name=str(a["tensor_name"]),
           output_dir=str(a["output_dir"]), ema_decay=float(a.get("ema_decay", 0.9)))


def _engine(ex: _Exporter, node: Node) -> None:
    a = node.attrs
    attrs: Dict[str, Any] = dict(engine=bytes(a["engine"]), engine_name=str(a.get("engine_name", node.name)),
                                 device_id=int(a.get("device_id", 0)))
    if a.get("core_ids"):
        attrs["core_ids"] = [int(c) for c in a["core_ids"]]
    if a.get("batch_engines"):
        attrs["batch_engines"] = [bytes(b) for b in a["batch_engines"]]
    ex.add("RatelEngineOp", node.inputs, node.outputs, name=node.name, domain=DOMAIN, **attrs)


def _opaque(ex: _Exporter, node: Node) -> None:
    if node.attrs.get("framework") != "onnx":
        raise ModelError(f"{node.name}: Opaque {node.attrs.get('framework')} op cannot be exported to ONNX")
    proto = ex.onnx.NodeProto()
    proto.ParseFromString(bytes(node.attrs["payload"]))
    inputs, outputs = list(proto.input), list(proto.output)
    for slot, t in zip(node.attrs.get("input_slots", range(len(node.inputs))), node.inputs):
        inputs[slot] = t
    for slot, t in zip(node.attrs.get("output_slots", range(len(node.outputs))), node.outputs):
        outputs[slot] = t
    del proto.input[:], proto.output[:]
    proto.input.extend(inputs)
    proto.output.extend(outputs)
    ex.nodes.append(proto)


def _one_input(op: str, attrs_of: Callable[[Node], Dict[str, Any]] = lambda n: {}) -> Callable:
    return lambda ex, node: ex.add(op, node.inputs[:1], node.outputs, **attrs_of(node))


def _generic(op: registry.OpDef) -> Callable:
    """One node of the op's ONNX spelling with the same inputs."""
    return lambda ex, node: ex.add(op.onnx[0], node.inputs, node.outputs)


# IR op -> exporter: ops with attributes or operands to convert here, the others generic
_EXPORTERS: Mapping[str, Callable[[_Exporter, Node], None]] = registry.exporter_table("onnx", {
    "Conv2D": _conv2d, "MatMul": _matmul, "BiasAdd": _bias_add, "MaxPool": _pool, "AvgPool": _pool,
    "BatchNorm": lambda ex, n: ex.add("BatchNormalization", n.inputs, n.outputs,
                                      epsilon=float(n.attrs.get("eps", 1e-3))),
    "Relu6": lambda ex, n: _clip6(ex, n.inputs[0], n.outputs[0]),
    "LeakyRelu": _one_input("LeakyRelu", lambda n: {"alpha": float(n.attrs.get("alpha", 0.2))}),
    "HardSigmoid": _one_input("HardSigmoid", lambda n: {"alpha": float(n.attrs.get("alpha", 0.2)),
                                                        "beta": float(n.attrs.get("beta", 0.5))}),
    "Softmax": _one_input("Softmax", lambda n: {"axis": int(n.attrs.get("axis", -1))}),
    "Mean": _mean, "Reshape": _reshape, "Pad": _pad,
    "Concat": lambda ex, n: ex.add("Concat", n.inputs, n.outputs, axis=int(n.attrs["axis"])),
    "Squeeze": lambda ex, n: _axes_operand(ex, n, "Squeeze", n.attrs["axes"], 13),
    "Flatten": _one_input("Flatten", lambda n: {"axis": 1}),
    "Transpose": _one_input("Transpose", lambda n: {"perm": list(n.attrs["perm"])}),
    "Rsqrt": lambda ex, n: ex.add("Reciprocal", [ex.add("Sqrt", n.inputs, [ex.fresh(f"{n.outputs[0]}/sqrt")])],
                                  n.outputs),
    "Square": lambda ex, n: ex.add("Mul", [n.inputs[0], n.inputs[0]], n.outputs),
    "Quant": _quant, "Dequant": _dequant, "MinMax": _minmax, "Engine": _engine, "Opaque": _opaque,
}, _generic)


# ---------------------------------------------------------------- entry point
def _opset_for(graph: Graph) -> int:
    """The model's own opset (at least the oldest the frontend reads), raised to the first
    with int16 QuantizeLinear when the graph quantizes to int16."""
    opset = max(int(graph.meta.get("onnx_opset", max_opset())), MIN_OPSET)
    int16 = any(n.op in registry.QDQ_OPS and ("int16" in (n.attrs.get("dtype"), graph.dtype(n.inputs[0])))
                for n in graph.nodes)
    return max(opset, QDQ_INT16_OPSET) if int16 else opset


def _value_info(ex: _Exporter, graph: Graph, tensor: str, batch: Optional[str]) -> Any:
    onnx = ex.onnx
    info = graph.tensors[tensor]
    dims: List[Any] = list(info.shape) if info.shape is not None else None
    if batch and dims:
        dims[0] = batch
    elem = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(info.dtype))
    return onnx.helper.make_tensor_value_info(tensor, elem, dims)


def export_model(graph: Graph) -> Any:
    """The IR ``graph`` as an ONNX ``ModelProto`` (see the module doc).  Models holding
    ``RatelMinMax``/``RatelEngineOp`` need ratelnn's custom ops registered in ONNX Runtime
    (``ratelnn.onnx_session``)."""
    onnx = import_onnx()
    ex = _Exporter(graph, _opset_for(graph))
    for node in graph.nodes:
        export = _EXPORTERS.get(node.op)
        if export is None:
            raise ModelError(f"node {node.name!r}: IR op {node.op} cannot be exported to ONNX yet")
        export(ex, node)
    if ex.opset >= QDQ_INT16_OPSET:
        _requantize_propagated(ex)
    outputs = []
    for t in graph.outputs:
        if graph.producer(t) is None:   # an input or a param given back as an output
            alias = ex.fresh(f"{t}/output")
            ex.add("Identity", [t], [alias])
            t = alias
        outputs.append(t)
    free = graph.meta.get("free_batch_inputs", ())
    dim_names = graph.meta.get("onnx_batch_dims", {})
    batch_sizes = {graph.shape(t)[0] for t in free if graph.shape(t)}
    batch_name = dim_names.get(free[0], "N") if free else None
    inputs = [_value_info(ex, graph, t, dim_names.get(t, "N") if t in free else None) for t in graph.inputs]
    out_infos = []
    for t, source in zip(outputs, graph.outputs):
        shape = graph.tensors[source].shape
        follows = bool(free) and bool(shape) and shape[0] in batch_sizes
        info = _value_info(ex, graph, source, batch_name if follows else None)
        info.name = t
        out_infos.append(info)
    read = {t for n in ex.nodes for t in n.input}
    values = {**{p: v for p, v in graph.params.items() if p in read}, **ex.initializers}
    inits = [onnx.numpy_helper.from_array(np.asarray(v), name) for name, v in values.items()]
    onnx_graph = onnx.helper.make_graph(ex.nodes, graph.name, inputs, out_infos, inits)
    opsets = [onnx.helper.make_opsetid("", ex.opset)]
    if any(n.domain == DOMAIN for n in ex.nodes):
        opsets.append(onnx.helper.make_opsetid(DOMAIN, DOMAIN_VERSION))
    model = onnx.helper.make_model(onnx_graph, opset_imports=opsets, producer_name="ratelnn")
    model.ir_version = min(model.ir_version, _max_ir_version())
    onnx.helper.set_model_props(model, recorded_texts(graph.meta))
    return model


def recorded_meta(model) -> Dict[str, Any]:
    """The build records (:mod:`ratelnn.ir.recorded`) ``export_model`` wrote into the
    ``metadata_props`` of ``model``: key -> value, e.g. ``["accuracy_auto"]``."""
    return decoded((p.key, p.value) for p in model.metadata_props)


def _requantize_propagated(ex: _Exporter) -> None:
    """Quantize again, at the same scale and type, the result of every value-keeping op
    (:data:`_ORT_PROPAGATED`) that reads an 8-bit ``DequantizeLinear`` of one scale and is
    read by anything but a ``QuantizeLinear``.  The values are on that grid already, so
    nothing changes; without the pair ONNX Runtime (1.32) cannot load an int8 model of
    opset 21 or newer: its QDQ propagation inserts such a pair itself and rejects it
    ("output_dtype INT8 does not match y_zero_point type UINT8")."""
    producer = {t: n for n in ex.nodes for t in n.output}
    quantized = {n.input[0] for n in ex.nodes if n.op_type == "QuantizeLinear"}
    nodes, ex.nodes = ex.nodes, []
    for node in nodes:
        ex.nodes.append(node)
        dq = producer.get(node.input[0]) if node.input and node.op_type in _ORT_PROPAGATED and not node.domain \
            else None
        if dq is None or dq.op_type != "DequantizeLinear" or len(dq.input) < 3 or node.output[0] in quantized:
            continue
        scale, zero = (np.asarray(ex.initializers.get(t, ())) for t in dq.input[1:3])
        if scale.size != 1 or zero.dtype.itemsize != 1:
            continue
        result = node.output[0]
        node.output[0] = ex.fresh(f"{result}/moved")
        codes = ex.add("QuantizeLinear", [node.output[0], dq.input[1], dq.input[2]], [ex.fresh(f"{result}/requant")])
        ex.add("DequantizeLinear", [codes, dq.input[1], dq.input[2]], [result], name=ex.fresh(f"{result}/redequant"))
        producer[result] = ex.nodes[-1]   # a chain of such ops is requantized op by op


def _max_ir_version() -> int:
    """The newest IR version ONNX Runtime and onnx both read (ONNX Runtime may lag onnx)."""
    onnx = import_onnx()
    return min(onnx.IR_VERSION, 11)
