"""ratelnn IR -> MXNet ``(symbol, arg_params, aux_params)`` (docs/mxnet.md).

The symbol is written as symbol JSON and loaded with ``mx.sym.load_json``.  An IR tensor
``t`` is the output of the MXNet node named ``t`` (MXNet calls it ``t_output``), so graph
outputs keep the user's node names; a fused Conv2D/MatMul expands into the layer and its
activation, the last node named after the IR output tensor.  Params become variables
(with ``__shape__`` so that ``Module.bind`` infers their shapes) and NDArrays; weights
that are params go back to MXNet's layouts, weights computed in the graph (dequantized
integer weights) get a ``transpose`` node.  An IR op without attributes is exported from its
registry entry (ratelnn/ir/registry.py); one with attributes has its function in ``_EXPORTERS``.
"""
from __future__ import annotations

import collections

import json
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelError
from ...ir import Graph, Node, registry
from ...ir.naming import NameAllocator
from ...ir.recorded import PREFIX, decoded, recorded_texts
from ...mxnet_compat import import_mxnet
from .attrs import CUSTOM_OPS, encode_custom_attrs, float_str, full_extra, tuple_str
from .model import RATEL_DTYPE_ATTR

# numpy dtype -> (MXNet dtype code of ``__dtype__``, dtype the NDArray is stored in)
_MX_DTYPES = {"float32": (0, "float32"), "float64": (1, "float64"), "float16": (2, "float16"),
              "uint8": (3, "uint8"), "int32": (4, "int32"), "int8": (5, "int8"), "int64": (6, "int64"),
              "int16": (4, "int32")}  # MXNet 1.9 NDArrays have no int16: carried as int32

Entry = List[int]  # [node index, output index, version]


class _Exporter:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.nodes: List[Dict[str, Any]] = []
        self.names = NameAllocator(reserved=self.graph.tensors)
        self.entries: Dict[str, Entry] = {}  # IR tensor -> symbol entry
        self.params: Dict[str, np.ndarray] = {}
        uses = collections.Counter(t for n in graph.nodes for t in n.inputs)
        self.param_uses = {p: uses[p] for p in graph.params}
        self.converted: Dict[Tuple[str, str], Entry] = {}

    # -- naming
    def fresh(self, base: str) -> str:
        return self.names.fresh(base)

    def claim(self, tensor: str) -> str:
        """The node name for the node producing IR ``tensor`` (its own name if free)."""
        return self.names.claim(tensor)

    # -- building
    def add(self, name: str, op: str, inputs: Sequence[Entry], attrs: Optional[Dict[str, str]] = None) -> Entry:
        self.nodes.append({"op": op, "name": name, "attrs": dict(attrs or {}), "inputs": [list(e) for e in inputs]})
        return [len(self.nodes) - 1, 0, 0]

    def variable(self, name: str, value: Optional[np.ndarray] = None, ir_dtype: Optional[str] = None) -> Entry:
        attrs = {}
        if value is not None:
            code, stored = _MX_DTYPES.get(str(value.dtype), (None, None))
            if code is None:
                raise ModelError(f"param {name!r}: dtype {value.dtype} has no MXNet NDArray type")
            attrs = {"__shape__": tuple_str(value.shape), "__dtype__": str(code)}
            if stored != str(value.dtype):
                attrs[RATEL_DTYPE_ATTR] = str(value.dtype)
            self.params[name] = value.astype(stored)
        return self.add(name, "null", [], attrs)

    def entry(self, tensor: str) -> Entry:
        """The symbol entry of IR ``tensor``; a param becomes a variable on first use."""
        if tensor not in self.entries and tensor in self.graph.params:
            self.entries[tensor] = self.variable(self.claim(tensor), _param_array(self.graph.params[tensor]))
        return self.entries[tensor]

    def converted_param(self, tensor: str, kind: str, convert: Callable[[np.ndarray], np.ndarray]) -> Entry:
        """A variable holding ``convert(param)``, named after the param when it has one reader."""
        key = (tensor, kind)
        if key not in self.converted:
            name = self.claim(tensor) if self.param_uses.get(tensor) == 1 else self.fresh(f"{tensor}_{kind}")
            self.converted[key] = self.variable(name, convert(_param_array(self.graph.params[tensor])))
        return self.converted[key]

    def weight(self, tensor: str, kind: str, axes: Tuple[int, ...]) -> Entry:
        """``tensor`` transposed by ``axes`` into MXNet's weight layout."""
        if tensor in self.graph.params:
            return self.converted_param(tensor, kind, lambda v: np.ascontiguousarray(v.transpose(axes)))
        return self.add(self.fresh(f"{tensor}_{kind}".replace(":", "_")), "transpose", [self.entry(tensor)],
                        {"axes": tuple_str(axes)})

    def shape(self, tensor: str):
        return self.graph.shape(tensor)


def _param_array(value) -> np.ndarray:
    value = np.asarray(value)
    return value.reshape(1) if value.ndim == 0 else value  # MXNet 1.x reads shape () as unknown


# ---------------------------------------------------------------- per-op export
def _activation(ex: _Exporter, name: str, x: Entry, act: str, alpha) -> Entry:
    """The fused activation ``act`` after ``x``; ``alpha``: the ``act_alpha`` attribute."""
    if act == "prelu":
        return _prelu(ex, name, x, np.asarray(alpha, np.float32).reshape(-1))
    alpha = float(alpha)
    if act == "relu":
        return ex.add(name, "Activation", [x], {"act_type": "relu"})
    if act == "relu6":
        return ex.add(name, "clip", [x], {"a_min": "0.0", "a_max": "6.0"})
    if act == "leaky_relu":
        return ex.add(name, "LeakyReLU", [x], {"act_type": "leaky", "slope": float_str(alpha)})
    raise ModelError(f"unknown fused activation {act!r} for node {name!r}")


def _with_activation(ex: _Exporter, node: Node, out_name: str, build: Callable[[str], Entry]) -> None:
    act = node.attrs.get("act", "none")
    if act == "none":
        build(out_name)
        return
    main = build(ex.fresh(f"{out_name}_{node.op.lower()}"))
    _activation(ex, out_name, main, act, node.attrs.get("act_alpha", 0.2))


def _prelu(ex: _Exporter, name: str, x: Entry, slopes: np.ndarray) -> Entry:
    """``LeakyReLU(act_type="prelu")``: one slope per channel of axis 1, in the variable
    ``<name>_gamma``."""
    gamma = ex.variable(ex.fresh(f"{name}_gamma"), slopes)
    return ex.add(name, "LeakyReLU", [x, gamma], {"act_type": "prelu"})


def _standalone_prelu(ex: _Exporter, node: Node, out_name: str) -> None:
    shape, alpha = ex.shape(node.inputs[0]), np.asarray(ex.graph.params[node.inputs[1]], np.float32)
    full = alpha.reshape((1,) * (len(shape) - alpha.ndim) + alpha.shape) if alpha.ndim <= len(shape) else alpha
    if len(shape) < 2 or full.ndim != len(shape) or any(d != 1 for k, d in enumerate(full.shape) if k != 1):
        raise ModelError(f"{node.name}: PRelu with slopes of shape {alpha.shape} on a tensor of shape "
                         f"{shape} has no MXNet op (LeakyReLU prelu takes one slope per channel of axis 1)")
    slopes = np.ascontiguousarray(np.broadcast_to(full.reshape(-1), (shape[1],)))
    _prelu(ex, out_name, ex.entry(node.inputs[0]), slopes)


def _explicit_pad(ex: _Exporter, x: Entry, name: str, pads, value: float) -> Entry:
    top, bottom, left, right = pads
    return ex.add(ex.fresh(name), "Pad", [x], {"mode": "constant", "constant_value": float_str(value),
                                              "pad_width": tuple_str((0, 0, 0, 0, top, bottom, left, right))})


def _check_nchw(node: Node) -> None:
    if node.attrs.get("layout", "NHWC") != "NCHW":
        raise ModelError(f"{node.name}: {node.op} in layout {node.attrs.get('layout', 'NHWC')} "
                         "cannot be exported to MXNet (NCHW only)")


def _conv2d(ex: _Exporter, node: Node, out_name: str) -> None:
    _check_nchw(node)
    a = node.attrs
    kh, kw, _, cout = ex.shape(node.inputs[1])
    x = ex.entry(node.inputs[0])
    top, bottom, left, right = a.get("pads", (0, 0, 0, 0))
    if (top, left) != (bottom, right):  # MXNet Convolution pads symmetrically only
        x = _explicit_pad(ex, x, f"{out_name}_pad", (top, bottom, left, right), 0.0)
        top = left = 0
    inputs = [x, ex.weight(node.inputs[1], "oihw", (3, 2, 0, 1))]
    inputs += [ex.entry(node.inputs[2])] if len(node.inputs) > 2 else []
    attrs = {"kernel": tuple_str((kh, kw)), "stride": tuple_str(a.get("strides", (1, 1))),
             "dilate": tuple_str(a.get("dilations", (1, 1))), "pad": tuple_str((top, left)),
             "num_filter": str(cout), "num_group": str(int(a.get("groups", 1))),
             "no_bias": str(len(node.inputs) <= 2), "layout": "NCHW"}
    _with_activation(ex, node, out_name, lambda name: ex.add(name, "Convolution", inputs, attrs))


def _matmul(ex: _Exporter, node: Node, out_name: str) -> None:
    a = node.attrs
    x = ex.entry(node.inputs[0])
    if a.get("transpose_a"):
        x = ex.add(ex.fresh(f"{out_name}_transpose_a"), "transpose", [x], {"axes": "(1, 0)"})
    w_shape = ex.shape(node.inputs[1])
    if a.get("transpose_b"):  # the IR weight is already [M, K]
        w, num_hidden = ex.entry(node.inputs[1]), w_shape[0]
    else:
        w, num_hidden = ex.weight(node.inputs[1], "mk", (1, 0)), w_shape[1]
    inputs = [x, w] + ([ex.entry(node.inputs[2])] if len(node.inputs) > 2 else [])
    attrs = {"num_hidden": str(num_hidden), "no_bias": str(len(node.inputs) <= 2), "flatten": "False"}
    _with_activation(ex, node, out_name, lambda name: ex.add(name, "FullyConnected", inputs, attrs))


def _pool(ex: _Exporter, node: Node, out_name: str) -> None:
    _check_nchw(node)
    a = node.attrs
    ksize, strides = tuple(a["ksize"]), tuple(a.get("strides", (1, 1)))
    top, bottom, left, right = a.get("pads", (0, 0, 0, 0))
    is_max = node.op == "MaxPool"
    include_pad = bool(a.get("count_include_pad", False))
    x = ex.entry(node.inputs[0])
    convention = "valid"
    if (top, left) != (bottom, right):
        size = ex.shape(node.inputs[0])[2:]
        full = (top + full_extra(size[0], ksize[0], strides[0], top), left + full_extra(size[1], ksize[1], strides[1], left))
        if (bottom, right) == full and (is_max or not include_pad):
            convention = "full"  # MXNet ceil mode: the extra cells never count
        elif is_max or include_pad:
            x = _explicit_pad(ex, x, f"{out_name}_pad", (top, bottom, left, right), -np.inf if is_max else 0.0)
            top = left = 0
        else:
            raise ModelError(f"{node.name}: AvgPool with pads {a['pads']} excluding padding cells "
                             "has no MXNet equivalent")
    ex.add(out_name, "Pooling", [x], {
        "kernel": tuple_str(ksize), "stride": tuple_str(strides), "pad": tuple_str((top, left)),
        "pool_type": "max" if is_max else "avg", "pooling_convention": convention,
        "count_include_pad": str(include_pad), "layout": "NCHW"})


def _binary(ex: _Exporter, node: Node, out_name: str) -> None:
    a_shape, b_shape = (ex.shape(t) for t in node.inputs)
    same, broadcast = registry.get(node.op).mx[:2]   # the ops for equal shapes, for broadcasting
    if tuple(a_shape) == tuple(b_shape):
        ex.add(out_name, same, [ex.entry(t) for t in node.inputs])
        return
    rank = max(len(a_shape), len(b_shape))  # MXNet broadcasting needs equal ranks
    ex.add(out_name, broadcast, [_at_rank(ex, t, rank) for t in node.inputs])


def _at_rank(ex: _Exporter, tensor: str, rank: int) -> Entry:
    shape = tuple(ex.shape(tensor))
    if len(shape) == rank:
        return ex.entry(tensor)
    full = (1,) * (rank - len(shape)) + shape
    if tensor in ex.graph.params:
        return ex.converted_param(tensor, f"rank{rank}", lambda v: v.reshape(full))
    return ex.add(ex.fresh(f"{tensor}_rank{rank}".replace(":", "_")), "Reshape", [ex.entry(tensor)],
                  {"shape": tuple_str(full)})


def _bias_add(ex: _Exporter, node: Node, out_name: str) -> None:
    rank = len(ex.shape(node.inputs[0]))
    axis = 1 if node.attrs.get("layout") == "NCHW" and rank > 2 else rank - 1
    channels = ex.shape(node.inputs[1])[-1]
    shape = (1,) * axis + (channels,) + (1,) * (rank - axis - 1)
    if node.inputs[1] in ex.graph.params:
        bias = ex.converted_param(node.inputs[1], "bias", lambda v: v.reshape(shape))
    else:
        bias = ex.add(ex.fresh(f"{out_name}_bias"), "Reshape", [ex.entry(node.inputs[1])], {"shape": tuple_str(shape)})
    ex.add(out_name, "broadcast_add", [ex.entry(node.inputs[0]), bias])


def _one_input(mx_op: str, attrs_of: Callable[[_Exporter, Node], Dict[str, str]] = lambda ex, n: {}) -> Callable:
    def export(ex: _Exporter, node: Node, out_name: str) -> None:
        ex.add(out_name, mx_op, [ex.entry(node.inputs[0])], attrs_of(ex, node))
    return export


def _pad(ex: _Exporter, node: Node, out_name: str) -> None:
    pads = [tuple(p) for p in node.attrs["pads"]]
    if len(pads) not in (4, 5) or pads[:2] != [(0, 0), (0, 0)]:
        raise ModelError(f"{node.name}: MXNet Pad only pads the spatial axes of 4-D/5-D tensors, got pads {pads}")
    ex.add(out_name, "Pad", [ex.entry(node.inputs[0])], {
        "mode": "constant", "constant_value": float_str(node.attrs.get("value", 0.0)),
        "pad_width": tuple_str([v for p in pads for v in p])})


def _batchnorm(ex: _Exporter, node: Node, out_name: str) -> None:
    ex.add(out_name, "BatchNorm", [ex.entry(t) for t in node.inputs], {
        "eps": float_str(node.attrs.get("eps", 1e-3)), "axis": str(int(node.attrs.get("axis", 1))),
        "fix_gamma": "False", "use_global_stats": "True"})


def _opaque(ex: _Exporter, node: Node, out_name: str) -> None:
    if node.attrs.get("framework") != "mxnet":
        raise ModelError(f"{node.name}: Opaque {node.attrs.get('framework')} op cannot be exported to MXNet")
    payload = json.loads(node.attrs["payload"])
    payload["name"] = out_name
    payload["inputs"] = [ex.entry(t) for t in node.inputs]
    ex.nodes.append(payload)


def _custom(ex: _Exporter, node: Node, out_name: str) -> None:
    attrs = dict(node.attrs)
    if node.op == "Engine":
        attrs["num_outputs"] = len(node.outputs)
    ex.add(out_name, CUSTOM_OPS[node.op], [ex.entry(t) for t in node.inputs], encode_custom_attrs(node.op, attrs))


def _generic(op: registry.OpDef) -> Callable:
    """One node of the op's MXNet spelling (ratelnn/ir/registry.py) with the same inputs."""
    if op.form == registry.BINARY:
        return _binary
    return _one_input(op.mx[0], lambda ex, n: {"act_type": op.mx_act} if op.mx_act else {})


# IR op -> exporter: the ops with attributes or operands to convert here, the others generic
_EXPORTERS: Mapping[str, Callable[[_Exporter, Node, str], None]] = registry.exporter_table("mx", {
    "Conv2D": _conv2d, "MatMul": _matmul, "MaxPool": _pool, "AvgPool": _pool, "BiasAdd": _bias_add,
    "Relu6": _one_input("clip", lambda ex, n: {"a_min": "0.0", "a_max": "6.0"}),
    "LeakyRelu": _one_input("LeakyReLU", lambda ex, n: {"act_type": "leaky",
                                                        "slope": float_str(n.attrs.get("alpha", 0.2))}),
    "Softmax": _one_input("softmax", lambda ex, n: {"axis": str(int(n.attrs.get("axis", -1)))}),
    "Mean": _one_input("mean", lambda ex, n: {"axis": tuple_str(n.attrs["axes"]),
                                              "keepdims": str(bool(n.attrs.get("keepdims", False)))}),
    "Concat": lambda ex, n, o: ex.add(o, "Concat", [ex.entry(t) for t in n.inputs],
                                      {"dim": str(int(n.attrs["axis"])), "num_args": str(len(n.inputs))}),
    "Reshape": _one_input("Reshape", lambda ex, n: {"shape": tuple_str(n.attrs["shape"])}),
    "Transpose": _one_input("transpose", lambda ex, n: {"axes": tuple_str(n.attrs["perm"])}),
    "Squeeze": _one_input("squeeze", lambda ex, n: {"axis": tuple_str(n.attrs["axes"])}),
    "Pad": _pad, "BatchNorm": _batchnorm, "Opaque": _opaque, "PRelu": _standalone_prelu,
    **{op: _custom for op in CUSTOM_OPS},
}, _generic)


# ---------------------------------------------------------------- entry points
def export_json(graph: Graph) -> Tuple[str, Dict[str, np.ndarray]]:
    """The IR ``graph`` as symbol JSON text and its params (name -> numpy array, in the
    dtype the NDArray will hold).  Needs no MXNet."""
    ex = _Exporter(graph)
    for name in graph.inputs:
        ex.entries[name] = ex.variable(ex.claim(name))
    if graph.inputs:   # hidden attributes (``__name__``) of a variable: kept by MXNet, read by no op
        ex.nodes[ex.entries[graph.inputs[0]][0]]["attrs"].update(
            (f"__{name}__", text) for name, text in recorded_texts(graph.meta).items())
    for node in graph.nodes:
        export = _EXPORTERS.get(node.op)
        if export is None:
            raise ModelError(f"node {node.name!r}: IR op {node.op} cannot be exported to MXNet yet")
        out_name = _output_node_name(ex, node)
        export(ex, node, out_name)
        index = len(ex.nodes) - 1
        for k, t in enumerate(node.outputs):
            ex.entries[t] = [index, k, 0]
    heads = []
    for t in graph.outputs:
        entry = ex.entry(t)
        if ":" not in t and ex.nodes[entry[0]]["name"] != t:  # e.g. an output that is an input
            entry = ex.add(ex.claim(t), "_copy", [entry])
        heads.append(entry)
    sym_json = {"nodes": ex.nodes, "arg_nodes": [i for i, n in enumerate(ex.nodes) if n["op"] == "null"],
                "heads": heads, "attrs": {"mxnet_version": ["int", 10901]}}
    return json.dumps(sym_json, indent=1), ex.params


def _output_node_name(ex: _Exporter, node: Node) -> str:
    base = node.outputs[0]
    if ":" not in base and all(t == f"{base}:{k}" for k, t in enumerate(node.outputs) if k):
        return ex.claim(base)
    return ex.fresh(node.name.replace(":", "_"))


def recorded_meta(model) -> Dict[str, Any]:
    """The build records (:mod:`ratelnn.ir.recorded`) ``export_json`` wrote into the symbol
    of ``model`` (a ``(symbol, arg_params, aux_params)`` tuple or a symbol): key -> value,
    e.g. ``["accuracy_auto"]``."""
    symbol = model[0] if isinstance(model, tuple) else model
    return decoded((k.strip("_"), v) for attrs in symbol.attr_dict().values() for k, v in attrs.items()
                   if k.startswith("__" + PREFIX))


def export_symbol(graph: Graph):
    """The IR ``graph`` as ``(symbol, arg_params, aux_params)`` for plain MXNet (the graph
    outputs are ``<output name>_output``).  Graphs holding ratelnn custom ops need
    ``ratelnn.mx_init()`` first."""
    mx = import_mxnet()
    text, params = export_json(graph)
    if any(n.op in CUSTOM_OPS for n in graph.nodes):
        from ... import oplib
        oplib.mx_init()
    symbol = mx.sym.load_json(text)
    aux_names = set(symbol.list_auxiliary_states())
    arrays = {name: mx.nd.array(value, dtype=value.dtype) for name, value in params.items()}
    arg_params = {k: v for k, v in arrays.items() if k not in aux_names}
    aux_params = {k: v for k, v in arrays.items() if k in aux_names}
    return symbol, arg_params, aux_params
