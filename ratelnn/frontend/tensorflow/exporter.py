"""ratelnn IR -> TensorFlow GraphDef of plain TF ops and the Ratel* custom ops.

NodeDefs are written directly.  Every IR tensor keeps its name as the TF tensor
reference (an IR tensor ``x`` is TF ``x:0``), so graph inputs and outputs keep the
user's names.  A fused Conv2D/MatMul expands into conv, BiasAdd and activation nodes,
the last one named after the IR output tensor.  An IR op without attributes is exported from
its registry entry (ratelnn/ir/registry.py); one with attributes has its function in
``_EXPORTERS``.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Sequence

import numpy as np

from ...errors import ModelError
from ...ir import Graph, Node, registry
from ...ir.naming import NameAllocator
from ...ir.recorded import PREFIX, decoded, recorded_texts


class _Exporter:
    def __init__(self, graph: Graph):
        from tensorflow.core.framework import graph_pb2
        self.graph = graph
        self.graph_def = graph_pb2.GraphDef()
        self.names = NameAllocator(reserved=self.graph.tensors)
        self.refs: Dict[str, str] = {}  # IR tensor -> TF tensor reference

    # -- naming
    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def claim(self, tensor: str) -> str:
        """The node name for the node producing IR ``tensor`` (its own name if free)."""
        return self.names.claim(tensor)

    def ref(self, tensor: str) -> str:
        return self.refs.get(tensor, tensor)

    # -- NodeDef building
    def add(self, name: str, op: str, inputs: Sequence[str], **attrs) -> str:
        from tensorflow.core.framework import node_def_pb2
        nd = node_def_pb2.NodeDef(name=name, op=op, input=list(inputs))
        for key, value in attrs.items():
            nd.attr[key].CopyFrom(_attr_value(value))
        self.graph_def.node.append(nd)
        return name

    def const(self, base: str, value: np.ndarray) -> str:
        import tensorflow as tf
        value = np.asarray(value)
        return self.add(self.fresh(base), "Const", [], dtype=_dtype(value.dtype),
                        value=tf.make_tensor_proto(value))

    def dtype_of(self, tensor: str):
        return _dtype(self.graph.dtype(tensor))


class _DType:
    """Marks an attr value as a TF dtype (rather than an int)."""

    def __init__(self, enum: int):
        self.enum = enum


def _dtype(np_dtype) -> _DType:
    import tensorflow as tf
    return _DType(tf.as_dtype(np.dtype(np_dtype)).as_datatype_enum)


def _attr_value(value):
    from tensorflow.core.framework import attr_value_pb2, tensor_pb2, tensor_shape_pb2
    a = attr_value_pb2.AttrValue()
    if isinstance(value, tensor_shape_pb2.TensorShapeProto):
        a.shape.CopyFrom(value)
    elif isinstance(value, _DType):
        a.type = value.enum
    elif isinstance(value, tensor_pb2.TensorProto):
        a.tensor.CopyFrom(value)
    elif isinstance(value, bool):
        a.b = value
    elif isinstance(value, int):
        a.i = value
    elif isinstance(value, float):
        a.f = value
    elif isinstance(value, (str, bytes)):
        a.s = value.encode() if isinstance(value, str) else value
    elif isinstance(value, (list, tuple)):
        if value and all(isinstance(v, _DType) for v in value):
            a.list.type.extend(v.enum for v in value)
        elif value and all(isinstance(v, tensor_shape_pb2.TensorShapeProto) for v in value):
            a.list.shape.extend(value)
        elif value and all(isinstance(v, float) for v in value):
            a.list.f.extend(value)
        elif value and all(isinstance(v, (str, bytes)) for v in value):
            a.list.s.extend(v.encode() if isinstance(v, str) else v for v in value)
        else:
            a.list.i.extend(int(v) for v in value)
        if not value:
            a.list.SetInParent()
    else:
        raise TypeError(f"cannot encode attr value {value!r}")
    return a


def _spatial(values, layout: str) -> List[int]:
    """(h, w) -> the 4-element TF list in ``layout`` order."""
    return [1, values[0], values[1], 1] if layout == "NHWC" else [1, 1, values[0], values[1]]


def _tf_pads(pads, layout: str) -> List[int]:
    top, bottom, left, right = pads
    hw = [top, bottom, left, right]
    return [0, 0] + hw + [0, 0] if layout == "NHWC" else [0, 0, 0, 0] + hw


# ---------------------------------------------------------------- per-op export
def _bias_act(ex: _Exporter, node: Node, x: str, layout: str, out_name: str) -> None:
    """Append BiasAdd and the fused activation after ``x``; the last node is ``out_name``."""
    act = node.attrs.get("act", "none")
    steps = (["bias"] if len(node.inputs) > 2 else []) + ([act] if act != "none" else [])
    for i, step in enumerate(steps):
        name = out_name if i == len(steps) - 1 else ex.fresh(f"{out_name}/{step}")
        if step == "bias":
            x = ex.add(name, "BiasAdd", [x, _bias_ref(ex, node.inputs[2], out_name)], T=_dtype("float32"),
                       data_format=layout)
        elif step == "relu":
            x = ex.add(name, "Relu", [x], T=_dtype("float32"))
        elif step == "relu6":
            x = ex.add(name, "Relu6", [x], T=_dtype("float32"))
        elif step == "leaky_relu":
            x = ex.add(name, "LeakyRelu", [x], T=_dtype("float32"), alpha=float(node.attrs.get("act_alpha", 0.2)))
        elif step == "prelu":
            slopes = np.asarray(node.attrs["act_alpha"], np.float32).reshape(-1)
            if layout == "NCHW" and node.op == "Conv2D":
                slopes = slopes.reshape(-1, 1, 1)
            x = _prelu_nodes(ex, x, ex.const(f"{out_name}/alpha", slopes), name)
        else:
            raise ModelError(f"{node.name}: unknown fused activation {step!r}")


def _bias_ref(ex: _Exporter, bias: str, out_name: str) -> str:
    """The TF reference of a fused ``bias``; one of zeros (a parameter, or its dequantized
    codes) is passed through a ``PlaceholderWithDefault``: Grappler drops a BiasAdd of constant
    zeros, and with it TF's Conv2D/MatMul + BiasAdd + activation fusion."""
    producer = ex.graph.producer(bias)
    source = producer.inputs[0] if producer is not None and producer.op == "Dequant" else bias
    value = ex.graph.params.get(source)
    if value is None or np.any(value):
        return ex.ref(bias)
    return ex.add(ex.fresh(f"{out_name}/zero_bias"), "PlaceholderWithDefault", [ex.ref(bias)],
                  dtype=_dtype("float32"), shape=_shape_proto(value.shape))


def _prelu_nodes(ex: _Exporter, x: str, alpha: str, out_name: str) -> str:
    """``Relu(x) - alpha * Relu(-x)`` (exactly ``x if x >= 0 else alpha*x`` for any slope
    sign); the Sub is ``out_name``.  ``fuse_prelu`` recognises this form on import."""
    f32 = _dtype("float32")
    positive = ex.add(ex.fresh(f"{out_name}/positive"), "Relu", [x], T=f32)
    negated = ex.add(ex.fresh(f"{out_name}/negated"), "Neg", [x], T=f32)
    magnitude = ex.add(ex.fresh(f"{out_name}/negative_magnitude"), "Relu", [negated], T=f32)
    scaled = ex.add(ex.fresh(f"{out_name}/scaled"), "Mul", [alpha, magnitude], T=f32)
    return ex.add(out_name, "Sub", [positive, scaled], T=f32)


def _main_name(ex: _Exporter, node: Node, out_name: str) -> str:
    fused = len(node.inputs) > 2 or node.attrs.get("act", "none") != "none"
    return ex.fresh(f"{out_name}/{node.op.lower()}") if fused else out_name


def _conv2d(ex: _Exporter, node: Node, out_name: str) -> None:
    a = node.attrs
    layout = a.get("layout", "NHWC")
    groups = int(a.get("groups", 1))
    w_shape = ex.graph.shape(node.inputs[1])
    kh, kw, cin_g, cout = w_shape
    strides, dilations = tuple(a.get("strides", (1, 1))), tuple(a.get("dilations", (1, 1)))
    main = _main_name(ex, node, out_name)
    x, padding = _conv_padding(ex, node, (kh, kw), strides, dilations, layout, main)
    conv_attrs = dict(T=_dtype("float32"), strides=_spatial(strides, layout),
                      dilations=_spatial(dilations, layout), data_format=layout, padding=padding)
    if groups == 1:
        ex.add(main, "Conv2D", [x, ex.ref(node.inputs[1])], **conv_attrs)
    elif cin_g == 1:  # depthwise: IR [kh, kw, 1, Cin*M] -> TF [kh, kw, Cin, M]
        w = _reshaped(ex, node.inputs[1], (kh, kw, groups, cout // groups))
        ex.add(main, "DepthwiseConv2dNative", [x, w], **conv_attrs)
    else:
        raise ModelError(f"{node.name}: grouped Conv2D with groups={groups} (not depthwise) "
                         "has no TensorFlow CPU kernel to export to")
    _bias_act(ex, node, main, layout, out_name)


def _conv_padding(ex: _Exporter, node: Node, ksize, strides, dilations, layout: str, main: str):
    """(conv input reference, TF ``padding``) for the IR pads of ``node``, in the forms
    TensorFlow's own converters write: ``VALID``, ``SAME`` when the pads are what SAME gives
    for these shapes, else a zero ``Pad`` before a ``VALID`` conv.  Never ``EXPLICIT``:
    TensorFlow's oneDNN rewrites (on by default on AVX-512 VNNI/BF16/AMX CPUs) abort the
    process on an EXPLICIT ``DepthwiseConv2dNative`` fused with its bias.  The importer folds
    the ``Pad`` back into the conv, so a round trip gives the same IR."""
    x = ex.ref(node.inputs[0])
    pads = tuple(int(p) for p in node.attrs.get("pads", (0, 0, 0, 0)))
    if not any(pads):
        return x, "VALID"
    extent = [(k - 1) * d + 1 for k, d in zip(ksize, dilations)]
    if pads == _same_pads(ex.graph.shape(node.inputs[0]), extent, strides, layout):
        return x, "SAME"
    if min(pads) < 0:
        raise ModelError(f"{node.name}: negative conv pads {pads} have no TensorFlow form")
    paddings = ex.const(f"{main}/pad/paddings", np.asarray(_tf_pads(pads, layout), np.int32).reshape(-1, 2))
    return ex.add(ex.fresh(f"{main}/pad"), "Pad", [x, paddings], T=_dtype("float32"),
                  Tpaddings=_dtype("int32")), "VALID"


def _reshaped(ex: _Exporter, tensor: str, shape) -> str:
    if ex.graph.is_param(tensor):
        return ex.const(f"{tensor}/reshaped", np.reshape(ex.graph.params[tensor], shape))
    shape_c = ex.const(f"{tensor}/shape", np.asarray(shape, np.int32))
    return ex.add(ex.fresh(f"{tensor}/reshaped"), "Reshape", [ex.ref(tensor), shape_c],
                  T=ex.dtype_of(tensor), Tshape=_dtype("int32"))


def _matmul(ex: _Exporter, node: Node, out_name: str) -> None:
    main = _main_name(ex, node, out_name)
    ex.add(main, "MatMul", [ex.ref(t) for t in node.inputs[:2]], T=_dtype("float32"),
           transpose_a=bool(node.attrs.get("transpose_a", False)),
           transpose_b=bool(node.attrs.get("transpose_b", False)))
    _bias_act(ex, node, main, "NHWC", out_name)


def _pool(ex: _Exporter, node: Node, out_name: str) -> None:
    a = node.attrs
    layout = a.get("layout", "NHWC")
    pads = tuple(a.get("pads", (0, 0, 0, 0)))
    x = ex.ref(node.inputs[0])
    padding = "VALID"
    if any(pads):
        if pads == _same_pads(ex.graph.shape(node.inputs[0]), a["ksize"], a["strides"], layout) \
                and not a.get("count_include_pad", False):
            padding = "SAME"
        elif node.op == "MaxPool" or a.get("count_include_pad", False):
            fill = -np.inf if node.op == "MaxPool" else 0.0
            x = _pad_node(ex, x, f"{out_name}/pad", _tf_pads(pads, layout), fill)
        else:
            raise ModelError(f"{node.name}: AvgPool with pads {pads} excluding padding cells "
                             "has no TensorFlow equivalent")
    ex.add(out_name, node.op, [x], T=_dtype("float32"), ksize=_spatial(a["ksize"], layout),
           strides=_spatial(a.get("strides", (1, 1)), layout), padding=padding, data_format=layout)


def _same_pads(shape, ksize, strides, layout) -> tuple:
    size = (shape[1], shape[2]) if layout == "NHWC" else (shape[2], shape[3])
    pads = []
    for n, k, s in zip(size, ksize, strides):
        total = max((-(-n // s) - 1) * s + k - n, 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def _pad_node(ex: _Exporter, x: str, name: str, flat_pads: Sequence[int], value: float) -> str:
    paddings = ex.const(f"{name}/paddings", np.asarray(flat_pads, np.int32).reshape(-1, 2))
    fill = ex.const(f"{name}/value", np.asarray(value, np.float32))
    return ex.add(ex.fresh(name), "PadV2", [x, paddings, fill], T=_dtype("float32"), Tpaddings=_dtype("int32"))


def _simple(tf_op: str, typed: bool = True) -> Callable:
    def export(ex: _Exporter, node: Node, out_name: str) -> None:
        attrs = {"T": ex.dtype_of(node.inputs[0])} if typed else {}
        ex.add(out_name, tf_op, [ex.ref(t) for t in node.inputs], **attrs)
    return export


def _with_const(tf_op: str, const_of: Callable[[Node], np.ndarray], index_attr: str, **extra) -> Callable:
    """An op whose IR attr becomes a Const second input (Reshape's shape, Mean's axes...)."""
    def export(ex: _Exporter, node: Node, out_name: str) -> None:
        c = ex.const(f"{out_name}/{index_attr.lower()}", np.asarray(const_of(node), np.int32))
        attrs = {"T": ex.dtype_of(node.inputs[0]), index_attr: _dtype("int32")}
        attrs.update({k: f(node) for k, f in extra.items()})
        ex.add(out_name, tf_op, [ex.ref(node.inputs[0]), c], **attrs)
    return export


def _concat(ex: _Exporter, node: Node, out_name: str) -> None:
    axis = ex.const(f"{out_name}/axis", np.asarray(node.attrs["axis"], np.int32))
    ex.add(out_name, "ConcatV2", [ex.ref(t) for t in node.inputs] + [axis], N=len(node.inputs),
           T=ex.dtype_of(node.inputs[0]), Tidx=_dtype("int32"))


def _pad(ex: _Exporter, node: Node, out_name: str) -> None:
    paddings = ex.const(f"{out_name}/paddings", np.asarray(node.attrs["pads"], np.int32))
    fill = ex.const(f"{out_name}/value", np.asarray(node.attrs.get("value", 0.0), ex.graph.dtype(node.inputs[0])))
    ex.add(out_name, "PadV2", [ex.ref(node.inputs[0]), paddings, fill], T=ex.dtype_of(node.inputs[0]),
           Tpaddings=_dtype("int32"))


def _flatten(ex: _Exporter, node: Node, out_name: str) -> None:
    shape = ex.graph.shape(node.inputs[0])
    target = np.asarray([-1, int(np.prod(shape[1:]))], np.int32)
    c = ex.const(f"{out_name}/shape", target)
    ex.add(out_name, "Reshape", [ex.ref(node.inputs[0]), c], T=ex.dtype_of(node.inputs[0]), Tshape=_dtype("int32"))


def _batchnorm(ex: _Exporter, node: Node, out_name: str) -> None:
    rank = len(ex.graph.shape(node.inputs[0]))
    axis = node.attrs.get("axis", -1) % rank
    if rank != 4 or axis not in (1, 3):
        raise ModelError(f"{node.name}: BatchNorm on axis {axis} of a rank-{rank} tensor has no TF op; "
                         "run fold_batchnorm first")
    ex.add(out_name, "FusedBatchNormV3", [ex.ref(t) for t in node.inputs], T=_dtype("float32"),
           U=_dtype("float32"), epsilon=float(node.attrs.get("eps", 1e-3)), is_training=False,
           data_format="NHWC" if axis == 3 else "NCHW")


def _softmax(ex: _Exporter, node: Node, out_name: str) -> None:
    rank = len(ex.graph.shape(node.inputs[0]))
    if node.attrs.get("axis", -1) % rank != rank - 1:
        raise ModelError(f"{node.name}: TF Softmax only works on the last axis, not axis {node.attrs['axis']}")
    _simple("Softmax")(ex, node, out_name)


def _opaque(ex: _Exporter, node: Node, out_name: str) -> None:
    from tensorflow.core.framework import node_def_pb2
    if node.attrs.get("framework") != "tensorflow":
        raise ModelError(f"{node.name}: Opaque {node.attrs.get('framework')} op cannot be exported to TensorFlow")
    nd = node_def_pb2.NodeDef.FromString(node.attrs["payload"])
    nd.name = out_name
    del nd.input[:]
    nd.input.extend(ex.ref(t) for t in node.inputs)
    ex.graph_def.node.append(nd)


def _scale_attrs(node: Node) -> dict:
    a = node.attrs
    if a.get("scales") is not None:
        return {"scale": 1.0, "scales": [float(s) for s in a["scales"]], "axis": int(a.get("axis", -1))}
    return {"scale": float(a["scale"]), "scales": [], "axis": -1}


def _minmax(ex: _Exporter, node: Node, out_name: str) -> None:
    optional = {k: node.attrs[k] for k in ("record", "ema_decay") if k in node.attrs}
    ex.add(out_name, "RatelMinMax", [ex.ref(node.inputs[0])], tensor_name=node.attrs["tensor_name"],
           output_dir=str(node.attrs["output_dir"]), **optional)


def _quant(ex: _Exporter, node: Node, out_name: str) -> None:
    ex.add(out_name, "RatelQuant", [ex.ref(node.inputs[0])], dtype=_dtype(node.attrs["dtype"]),
           round_mode=node.attrs.get("round_mode", "half_away_from_zero"), **_scale_attrs(node))


def _dequant(ex: _Exporter, node: Node, out_name: str) -> None:
    ex.add(out_name, "RatelDequant", [ex.ref(node.inputs[0])], T=ex.dtype_of(node.inputs[0]),
           **_scale_attrs(node))


def _engine(ex: _Exporter, node: Node, out_name: str) -> None:
    """``RatelEngineOp`` (docs/architecture.md §5); ``output_shapes`` gives TF shape inference the engine
    output shapes with a free batch dimension (-1); ``batch_engines`` (only when the node has
    an engine set, docs/multi-batch.md) the engines of the other compiled batch sizes."""
    shapes = [_shape_proto([-1, *ex.graph.shape(t)[1:]]) for t in node.outputs]
    ex.add(out_name, "RatelEngineOp", [ex.ref(t) for t in node.inputs],
           Tin=[ex.dtype_of(t) for t in node.inputs], Tout=[ex.dtype_of(t) for t in node.outputs],
           engine=bytes(node.attrs["engine"]), engine_name=str(node.attrs["engine_name"]),
           device_id=int(node.attrs.get("device_id", 0)),
           core_ids=[int(c) for c in node.attrs.get("core_ids", [0])], output_shapes=shapes,
           **({"batch_engines": [bytes(b) for b in node.attrs["batch_engines"]]}
              if node.attrs.get("batch_engines") else {}))


# IR op -> exporter: the ops with attributes or operands to convert here; the others are one
# node of the op's TensorFlow spelling (ratelnn/ir/registry.py) with the same inputs
_EXPORTERS: Mapping[str, Callable[[_Exporter, Node, str], None]] = registry.exporter_table("tf", {
    "Conv2D": _conv2d, "MatMul": _matmul, "MaxPool": _pool, "AvgPool": _pool,
    "BiasAdd": lambda ex, n, o: ex.add(o, "BiasAdd", [ex.ref(t) for t in n.inputs], T=ex.dtype_of(n.inputs[0]),
                                       data_format=n.attrs.get("layout", "NHWC")),
    "LeakyRelu": lambda ex, n, o: ex.add(o, "LeakyRelu", [ex.ref(n.inputs[0])], T=ex.dtype_of(n.inputs[0]),
                                         alpha=float(n.attrs.get("alpha", 0.2))),
    "PRelu": lambda ex, n, o: _prelu_nodes(ex, ex.ref(n.inputs[0]), ex.ref(n.inputs[1]), o),
    "Softmax": _softmax, "BatchNorm": _batchnorm, "Concat": _concat, "Pad": _pad, "Flatten": _flatten,
    "Mean": _with_const("Mean", lambda n: list(n.attrs["axes"]), "Tidx",
                        keep_dims=lambda n: bool(n.attrs.get("keepdims", False))),
    "Reshape": _with_const("Reshape", lambda n: list(n.attrs["shape"]), "Tshape"),
    "Transpose": _with_const("Transpose", lambda n: list(n.attrs["perm"]), "Tperm"),
    "Squeeze": lambda ex, n, o: ex.add(o, "Squeeze", [ex.ref(n.inputs[0])], T=ex.dtype_of(n.inputs[0]),
                                       squeeze_dims=list(n.attrs["axes"])),
    "Opaque": _opaque, "MinMax": _minmax, "Quant": _quant, "Dequant": _dequant, "Engine": _engine,
}, lambda op: _simple(op.tf[0]))


# ---------------------------------------------------------------- entry point
def export_graphdef(graph: Graph):
    """The IR ``graph`` as a ``tf.compat.v1.GraphDef`` (inputs are Placeholders of their
    specialised shapes, except that an input the original model took at any batch,
    ``graph.meta["free_batch_inputs"]``, keeps a free batch; params are Consts)."""
    ex = _Exporter(graph)
    free_batch = set(graph.meta.get("free_batch_inputs", ()))
    for name in graph.inputs:
        info = graph.tensors[name]
        shape = [-1 if d is None else d for d in info.shape]
        if name in free_batch and shape:
            shape[0] = -1
        ex.refs[name] = ex.add(ex.claim(name), "Placeholder", [], dtype=_dtype(info.dtype),
                               shape=_shape_proto(shape))
    needed = _needed_params(graph)
    for name, value in graph.params.items():
        if name in needed:
            ex.refs[name] = _claimed_const(ex, name, value)
    for node in graph.nodes:
        export = _EXPORTERS.get(node.op)
        if export is None:
            raise ModelError(f"node {node.name!r}: IR op {node.op} cannot be exported to TensorFlow yet")
        out_name = _output_node_name(ex, node)
        export(ex, node, out_name)
        for k, t in enumerate(node.outputs):
            ex.refs[t] = out_name if k == 0 else f"{out_name}:{k}"
    for t in graph.outputs:
        if ex.ref(t) != t and ":" not in t:  # an output whose producer could not take its name
            ex.add(ex.claim(t), "Identity", [ex.ref(t)], T=ex.dtype_of(t))
    for name, text in recorded_texts(graph.meta).items():   # read by nothing: metadata only
        _claimed_const(ex, name.replace(".", "/"), np.array(text.encode(), dtype=object))
    return ex.graph_def


def recorded_meta(graph_def) -> Dict[str, Any]:
    """The build records (:mod:`ratelnn.ir.recorded`) ``export_graphdef`` wrote into
    ``graph_def``: key -> value, e.g. ``["accuracy_auto"]``, the automatic decision."""
    return decoded((n.name.replace("/", ".", 1), n.attr["value"].tensor.string_val[0].decode())
                   for n in graph_def.node if n.op == "Const" and n.name.startswith(PREFIX.rstrip(".") + "/")
                   and n.attr["value"].tensor.string_val)


def _claimed_const(ex: _Exporter, name: str, value) -> str:
    import tensorflow as tf
    value = np.asarray(value)
    return ex.add(ex.claim(name), "Const", [], dtype=_dtype(value.dtype), value=tf.make_tensor_proto(value))


def _output_node_name(ex: _Exporter, node: Node) -> str:
    if node.op == "Engine":  # engines are named for viewers: TensorBoard, Netron
        return ex.claim(str(node.attrs["engine_name"]))
    base = node.outputs[0]
    if ":" not in base and all(t == f"{base}:{k}" for k, t in enumerate(node.outputs) if k):
        return ex.claim(base)
    return ex.fresh(node.name)


def _needed_params(graph: Graph) -> set:
    used = {t for n in graph.nodes for t in n.inputs} | set(graph.outputs)
    return {p for p in graph.params if p in used}


def _shape_proto(shape: Sequence[int]):
    from tensorflow.core.framework import tensor_shape_pb2
    proto = tensor_shape_pb2.TensorShapeProto()
    for d in shape:
        proto.dim.add(size=d)
    return proto
