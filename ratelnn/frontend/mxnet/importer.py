"""MXNet symbol JSON + params -> ratelnn IR, NCHW layout (docs/ir.md, docs/mxnet.md).

The symbol is read as JSON; MXNet itself is only used to load it and to infer every
tensor's static shape for the user's ``input_shapes``.  The output ``k`` of MXNet node
``name`` is the IR tensor ``name`` (k = 0) or ``name:k``; a variable is the IR tensor of
its own name.  Weights are converted to the IR's canonical layouts (Convolution OIHW ->
HWIO, FullyConnected ``[M, K]`` -> ``[K, M]``).  Operators outside the table in
docs/mxnet.md become ``Opaque`` nodes holding their node JSON.
"""
from __future__ import annotations

import difflib
import sys
import json
import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...errors import ModelError
from ...ir import Graph, Node, TensorInfo, registry
from ...mxnet_compat import import_mxnet
from .attrs import (IR_OF_CUSTOM_OP, as_bool, as_float, as_int, as_tuple, decode_custom_attrs, full_extra,
                    node_attrs)
from .model import RATEL_DTYPE_ATTR, MXModel, load_model

Ref = Tuple[int, int]  # (node index, output index)

# loss heads whose label input is dropped: inference only
_LABEL_OPS = {"SoftmaxOutput", "LinearRegressionOutput", "LogisticRegressionOutput", "MAERegressionOutput"}
# Activation act_type -> IR op
_ACTIVATIONS = {op.mx_act: op.name for op in registry.OPS if op.mx_act}
_OUTPUT_NAME = re.compile(r"^(.*)_output(\d*)$")


def tensor_name(model: MXModel, ref: Sequence[int]) -> str:
    """IR tensor name of output ``ref[1]`` of node ``ref[0]``."""
    name = model.nodes[ref[0]]["name"]
    return name if ref[1] == 0 else f"{name}:{ref[1]}"


# ---------------------------------------------------------------- names
def _resolve_inputs(model: MXModel, names: Sequence[str]) -> Dict[str, int]:
    variables = {n["name"]: i for i, n in enumerate(model.nodes) if n["op"] == "null"}
    out = {}
    for name in names:
        if name not in variables:
            candidates = [v for v in variables if model.param(v) is None] or list(variables)
            raise ModelError(f"input node {name!r} is not a variable of the symbol{_close(name, candidates)}")
        out[name] = variables[name]
    return out


def _resolve_outputs(model: MXModel, names: Sequence[str]) -> List[Ref]:
    """Node outputs named ``node``, ``node_output`` or ``node_output<k>``."""
    index = {n["name"]: i for i, n in enumerate(model.nodes)}
    refs = []
    for name in names:
        match = _OUTPUT_NAME.match(name)
        if name in index:
            refs.append((index[name], 0))
        elif match and match.group(1) in index and int(match.group(2) or 0) < model.num_outputs[index[match.group(1)]]:
            refs.append((index[match.group(1)], int(match.group(2) or 0)))
        else:
            known = list(index) + [f"{n}_output" for n in index]
            raise ModelError(f"output node {name!r} is not a node of the symbol{_close(name, known)}")
    return refs


def _close(name: str, candidates: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(candidates), n=5)
    return f"; close matches: {close}" if close else ""


def _data_inputs(node: dict) -> List[list]:
    return node["inputs"][:1] if node["op"] in _LABEL_OPS else node["inputs"]


def _reachable(model: MXModel, inputs: Dict[str, int], outputs: List[Ref]) -> List[int]:
    """Indices of the nodes the outputs depend on (label inputs of loss heads excluded),
    stopping at the inputs, in topological (= index) order."""
    stop = set(inputs.values())
    seen, stack = set(), [r[0] for r in outputs]
    while stack:
        i = stack.pop()
        if i in seen:
            continue
        seen.add(i)
        if i not in stop:
            stack.extend(ref[0] for ref in _data_inputs(model.nodes[i]))
    return sorted(seen)


# ---------------------------------------------------------------- params and shapes
def _check_params(model: MXModel, order: List[int], inputs: Dict[str, int]) -> List[str]:
    """Names of the parameter variables the outputs read; ModelError if any is missing."""
    needed = [model.nodes[i]["name"] for i in order if model.nodes[i]["op"] == "null" and i not in inputs.values()]
    missing = [n for n in needed if model.param(n) is None]
    if missing:
        readers = sorted({model.nodes[i]["name"] for i in order
                          if any(model.nodes[r[0]]["name"] in missing for r in _data_inputs(model.nodes[i]))})
        raise ModelError(f"params missing for {missing} (read by {readers}); they are neither in "
                         "arg_params/aux_params nor in input_nodes")
    return needed


def _check_input_ranks(model: MXModel, inputs: Dict[str, int], input_shapes, order: List[int]) -> None:
    for (name, idx), shape in zip(inputs.items(), input_shapes):
        declared = as_tuple(node_attrs(model.nodes[idx]).get("__shape__"))
        if declared and len(declared) != len(shape):
            raise ModelError(f"input_shapes for {name!r} has rank {len(shape)} ({list(shape)}), but the symbol "
                             f"declares shape {declared} (rank {len(declared)})")
        for i in order:
            node = model.nodes[i]
            kernel = as_tuple(node_attrs(node).get("kernel"))
            if node["op"] in ("Convolution", "Pooling", "Deconvolution") and kernel and node["inputs"] \
                    and node["inputs"][0][0] == idx and len(shape) != len(kernel) + 2:
                raise ModelError(f"input_shapes for {name!r} has rank {len(shape)} ({list(shape)}), but "
                                 f"{node['op']} {node['name']!r} with a {len(kernel)}-D kernel needs rank "
                                 f"{len(kernel) + 2}")


def _check_output_indices(model: MXModel, order: List[int], outputs: List[Ref]) -> None:
    """ModelError for an input or head reading an output a node does not have: MXNet itself
    does not check, and reads out of bounds (a segfault) when it infers shapes.  A variable
    has one output; an op as many as MXNet builds it with (its attributes, its input count)."""
    mx = import_mxnet()
    counts: Dict[int, int] = {}

    def count(i: int) -> int:
        if i not in counts:
            node = model.nodes[i]
            if node["op"] == "null":
                counts[i] = 1
            else:
                attrs = {k: v for k, v in node_attrs(node).items() if not k.startswith("__")}
                build = getattr(mx.sym, node["op"], None) or getattr(mx.sym._internal, node["op"], None)
                if build is None:   # not an MXNet op: loading the symbol fails cleanly
                    counts[i] = sys.maxsize
                    return counts[i]
                try:
                    probe = build(*[mx.sym.Variable(f"in{k}") for k in range(len(node["inputs"]))], name="probe", **attrs)
                    counts[i] = len(probe.list_outputs())
                except (mx.base.MXNetError, AttributeError, TypeError, ValueError) as e:
                    raise ModelError(f"MXNet cannot build {node['op']} node {node['name']!r}: "
                                     f"{_first_error_line(e)}") from None
        return counts[i]

    reads = [(ref, f"node {model.nodes[i]['name']!r}") for i in order for ref in _data_inputs(model.nodes[i])]
    for ref, where in reads + [(ref, "heads") for ref in outputs]:
        if ref[1] >= count(ref[0]):
            raise ModelError(f"malformed symbol JSON: {where} reads output {ref[1]} of node "
                             f"{model.nodes[ref[0]]['name']!r}, which has {count(ref[0])}")


def _infer_shapes(model: MXModel, inputs: Dict[str, int], input_shapes, params: List[str],
                  refs: List[Ref]) -> Dict[Ref, Tuple[int, ...]]:
    """Static shape of every ref in ``refs``; checks the params' shapes first."""
    mx = import_mxnet()
    try:
        sym = mx.sym.load_json(model.symbol_json([[i, k, 0] for i, k in refs]))
    except mx.base.MXNetError as e:  # MXNet's own checks of ops and attributes
        raise ModelError(f"MXNet cannot load the symbol: {_first_error_line(e)}") from e
    feeds = {name: tuple(shape) for name, shape in zip(inputs, input_shapes)}
    try:
        arg_shapes, _, aux_shapes = sym.infer_shape_partial(**feeds)
    except mx.base.MXNetError as e:
        raise ModelError(f"input_shapes {feeds} do not fit the symbol: {_first_error_line(e)}") from e
    expected = dict(zip(sym.list_arguments(), arg_shapes))
    expected.update(zip(sym.list_auxiliary_states(), aux_shapes))
    wrong = [f"{p!r}: expected {tuple(expected[p])}, got {model.param(p).shape}" for p in params
             if expected.get(p) and all(d > 0 for d in expected[p]) and tuple(expected[p]) != model.param(p).shape]
    if wrong:
        raise ModelError("params of the wrong shape: " + "; ".join(wrong))
    feeds.update({p: model.param(p).shape for p in params if p in expected})
    try:
        _, out_shapes, _ = sym.infer_shape(**feeds)
    except mx.base.MXNetError as e:
        raise ModelError(f"MXNet shape inference failed with input_shapes {list(input_shapes)}: "
                         f"{_first_error_line(e)}") from e
    if out_shapes is None:
        raise ModelError(f"MXNet cannot infer every tensor's shape from input_shapes {list(input_shapes)}")
    return {ref: tuple(int(d) for d in s) for ref, s in zip(refs, out_shapes)}


def _first_error_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if "Error" in ln or "Check failed" in ln]
    return lines[-1] if lines else str(e).splitlines()[0]


# ---------------------------------------------------------------- translation context
class _Importer:
    def __init__(self, model: MXModel, graph: Graph, shapes: Dict[Ref, Tuple[int, ...]], param_vars: List[str]):
        self.model = model
        self.graph = graph
        self.shapes = shapes
        self.param_vars = set(param_vars)
        self.uses: Dict[str, int] = {}
        self.converted: Dict[Tuple[str, str], str] = {}

    def count_uses(self, order: List[int]) -> None:
        for i in order:
            for ref in _data_inputs(self.model.nodes[i]):
                name = tensor_name(self.model, ref)
                self.uses[name] = self.uses.get(name, 0) + 1

    # -- facts
    def value(self, tensor: str) -> Optional[np.ndarray]:
        """The value of a parameter variable, else None."""
        return self.model.param(tensor) if tensor in self.param_vars else None

    def shape(self, tensor: str) -> Tuple[int, ...]:
        if tensor in self.param_vars and tensor not in self.graph.tensors:
            return tuple(self.model.param(tensor).shape)
        return self.graph.shape(tensor)

    # -- params
    def raw_param(self, var: str) -> str:
        if var not in self.graph.params:
            value = self.model.param(var)
            node = next(n for n in self.model.nodes if n["name"] == var)
            dtype = node_attrs(node).get(RATEL_DTYPE_ATTR)
            self.graph.add_param(var, value.astype(dtype) if dtype else value)
        return var

    def param(self, var: str, kind: str, convert: Callable[[np.ndarray], np.ndarray]) -> str:
        """A param holding ``convert(value of var)``; named ``var`` when ``var`` has one reader."""
        key = (var, kind)
        if key not in self.converted:
            name = var if self.uses.get(var, 0) == 1 else self.graph.unique_name(f"{var}/{kind}")
            self.converted[key] = self.graph.add_param(name, convert(self.model.param(var)))
        return self.converted[key]

    def new_param(self, base: str, value: np.ndarray) -> str:
        return self.graph.add_param(self.graph.unique_name(base), value)

    def temp(self, base: str, shape: Sequence[int], dtype: str = "float32") -> str:
        """A fresh intermediate tensor name with its static type recorded."""
        name = self.graph.unique_name(base)
        self.graph.tensors[name] = TensorInfo(tuple(shape), dtype)
        return name

    def weight(self, tensor: str, kind: str, perm: Tuple[int, ...], inverse: Tuple[int, ...]) -> str:
        """``tensor`` transposed by ``perm`` into the IR layout: a converted param, the input
        of an IR Transpose by ``inverse`` (as the exporter writes), or a new Transpose."""
        if tensor in self.param_vars:
            return self.param(tensor, kind, lambda v: np.ascontiguousarray(v.transpose(perm)))
        producer = self.graph.producer(tensor)
        if producer is not None and producer.op == "Transpose" and tuple(producer.attrs["perm"]) == inverse:
            return producer.inputs[0]
        out = self.temp(f"{tensor}/{kind}", [self.shape(tensor)[p] for p in perm], self.graph.dtype(tensor))
        self.graph.add_node(Node(out, "Transpose", [tensor], [out], {"perm": perm}))
        return out


class _MXNode:
    """One symbol-JSON node as the translators see it."""

    def __init__(self, imp: _Importer, index: int):
        node = imp.model.nodes[index]
        self.index = index
        self.name: str = node["name"]
        self.op: str = node["op"]
        self.attrs: Dict[str, str] = node_attrs(node)
        self.inputs = [tensor_name(imp.model, r) for r in _data_inputs(node)]
        self.out_shape = imp.shapes.get((index, 0))


Translator = Callable[[_Importer, _MXNode], Optional[List[Node]]]


# ---------------------------------------------------------------- translators
def _conv(imp: _Importer, n: _MXNode):
    a = n.attrs
    kernel = as_tuple(a.get("kernel"))
    if len(kernel) != 2 or a.get("layout", "NCHW") not in ("NCHW", "None"):
        return None
    pad = as_tuple(a.get("pad"), (0, 0))
    w = imp.weight(n.inputs[1], "hwio", (2, 3, 1, 0), (3, 2, 0, 1))
    bias = [] if as_bool(a.get("no_bias"), False) else n.inputs[2:3]
    return [Node(n.name, "Conv2D", [n.inputs[0], w] + bias, [n.name], {
        "strides": as_tuple(a.get("stride"), (1, 1)), "dilations": as_tuple(a.get("dilate"), (1, 1)),
        "pads": (pad[0], pad[0], pad[1], pad[1]), "groups": as_int(a.get("num_group"), 1),
        "layout": "NCHW", "act": "none", "act_alpha": 0.0})]


def _fully_connected(imp: _Importer, n: _MXNode):
    a = n.attrs
    x = n.inputs[0]
    x_shape = imp.shape(x)
    w = imp.weight(n.inputs[1], "km", (1, 0), (1, 0))
    bias = [] if as_bool(a.get("no_bias"), False) else n.inputs[2:3]
    attrs = {"transpose_a": False, "transpose_b": False, "act": "none", "act_alpha": 0.0}
    if len(x_shape) == 2:
        return [Node(n.name, "MatMul", [x, w] + bias, [n.name], attrs)]
    if as_bool(a.get("flatten"), True):
        flat = imp.temp(f"{n.name}/flatten", (x_shape[0], int(np.prod(x_shape[1:]))))
        return [Node(flat, "Flatten", [x], [flat]), Node(n.name, "MatMul", [flat, w] + bias, [n.name], attrs)]
    # flatten=False on rank > 2: the dense layer acts on the last axis
    num_rows = int(np.prod(x_shape[:-1]))
    rows = imp.temp(f"{n.name}/rows", (num_rows, x_shape[-1]))
    dense = imp.temp(f"{n.name}/dense", (num_rows, n.out_shape[-1]))
    # -1 rows: the symbol takes any batch (docs/architecture.md §3), input_shapes only fix calibration's
    return [Node(rows, "Reshape", [x], [rows], {"shape": (-1, x_shape[-1])}),
            Node(dense, "MatMul", [rows, w] + bias, [dense], attrs),
            Node(n.name, "Reshape", [dense], [n.name], {"shape": (-1, *n.out_shape[1:])})]


def _batchnorm(imp: _Importer, n: _MXNode):
    a = n.attrs
    if as_bool(a.get("output_mean_var"), False) or not all(t in imp.param_vars for t in n.inputs[1:5]):
        return None
    gamma = n.inputs[1]
    if as_bool(a.get("fix_gamma"), True):
        gamma = imp.param(gamma, "fixed", lambda v: np.ones_like(v, dtype=np.float32))
    axis = as_int(a.get("axis"), 1) % len(imp.shape(n.inputs[0]))
    return [Node(n.name, "BatchNorm", [n.inputs[0], gamma] + n.inputs[2:5], [n.name],
                 {"eps": as_float(a.get("eps"), 1e-3), "axis": axis})]


def _activation(imp: _Importer, n: _MXNode):
    op = _ACTIVATIONS.get(n.attrs.get("act_type", ""))
    return [Node(n.name, op, n.inputs[:1], [n.name])] if op else None


def _leaky_relu(imp: _Importer, n: _MXNode):
    act = n.attrs.get("act_type", "leaky")
    if act == "leaky":
        return [Node(n.name, "LeakyRelu", n.inputs[:1], [n.name], {"alpha": as_float(n.attrs.get("slope"), 0.25)})]
    alpha = imp.value(n.inputs[1]) if act == "prelu" else None
    if alpha is None:
        return None
    if alpha.size == 1:
        return [Node(n.name, "LeakyRelu", n.inputs[:1], [n.name], {"alpha": float(alpha.reshape(-1)[0])})]
    return _prelu(imp, n, alpha)


def _prelu(imp: _Importer, n: _MXNode, alpha: np.ndarray) -> List[Node]:
    """Per-channel PReLU as ``relu(x) + alpha * min(x, 0)``, alpha along axis 1."""
    x, shape = n.inputs[0], imp.shape(n.inputs[0])
    slopes = imp.param(n.inputs[1], "prelu", lambda v: v.astype(np.float32).reshape((-1,) + (1,) * (len(shape) - 2)))
    zero = imp.new_param(f"{n.name}/zero", np.zeros((1,), np.float32))
    pos, neg, scaled = (imp.temp(f"{n.name}/{part}", shape) for part in ("positive", "negative", "negative_scaled"))
    return [Node(pos, "Relu", [x], [pos]), Node(neg, "Minimum", [x, zero], [neg]),
            Node(scaled, "Mul", [neg, slopes], [scaled]), Node(n.name, "Add", [pos, scaled], [n.name])]


def _pooling(imp: _Importer, n: _MXNode):
    a = n.attrs
    x, shape = n.inputs[0], imp.shape(n.inputs[0])
    pool_type = a.get("pool_type", "max")
    if len(shape) != 4 or a.get("layout", "NCHW") not in ("NCHW", "None") or pool_type not in ("max", "avg"):
        return None
    if as_bool(a.get("global_pool"), False):
        if pool_type == "avg":
            return [Node(n.name, "Mean", [x], [n.name], {"axes": (2, 3), "keepdims": True})]
        return [Node(n.name, "MaxPool", [x], [n.name], {"ksize": tuple(shape[2:]), "strides": (1, 1),
                                                         "pads": (0, 0, 0, 0), "layout": "NCHW"})]
    kernel = as_tuple(a.get("kernel"))
    convention = a.get("pooling_convention", "valid")
    if len(kernel) != 2 or convention not in ("valid", "full"):
        return None
    stride, pad = as_tuple(a.get("stride"), (1, 1)), as_tuple(a.get("pad"), (0, 0))
    extra = [full_extra(size, k, s, p) if convention == "full" else 0
             for size, k, s, p in zip(shape[2:], kernel, stride, pad)]
    attrs = {"ksize": kernel, "strides": stride, "layout": "NCHW",
             "pads": (pad[0], pad[0] + extra[0], pad[1], pad[1] + extra[1])}
    if pool_type == "max":
        return [Node(n.name, "MaxPool", [x], [n.name], attrs)]
    if not as_bool(a.get("count_include_pad"), True) or not any(extra):
        return [Node(n.name, "AvgPool", [x], [n.name],
                     {**attrs, "count_include_pad": as_bool(a.get("count_include_pad"), True)})]
    # MXNet counts the symmetric pad cells but not the cells "full" adds at the end
    nodes = []
    if any(pad):
        padded = imp.temp(f"{n.name}/pad", shape[:2] + (shape[2] + 2 * pad[0], shape[3] + 2 * pad[1]))
        nodes.append(Node(padded, "Pad", [x], [padded], {"pads": ((0, 0), (0, 0), (pad[0],) * 2, (pad[1],) * 2),
                                                         "value": 0.0}))
        x = padded
    return nodes + [Node(n.name, "AvgPool", [x], [n.name],
                         {**attrs, "pads": (0, extra[0], 0, extra[1]), "count_include_pad": False})]


def _generic(op: registry.OpDef, mx_op: str) -> Translator:
    """One IR node of ``op`` reading the same inputs; the ``_<op>_scalar`` forms (``_r<op>``:
    the scalar first) read a new param holding the ``scalar`` attribute."""
    if mx_op.endswith("_scalar"):
        return lambda imp, n: _scalar(imp, n, op.name, mx_op.startswith("_r"))
    arity = 2 if op.form == registry.BINARY else 1
    return lambda imp, n: [Node(n.name, op.name, n.inputs[:arity], [n.name])]


def _scalar(imp: _Importer, n: _MXNode, op: str, scalar_first: bool):
    scalar = imp.new_param(f"{n.name}/scalar", np.full((1,), as_float(n.attrs.get("scalar"), 0.0), np.float32))
    operands = [scalar, n.inputs[0]] if scalar_first else [n.inputs[0], scalar]
    return [Node(n.name, op, operands, [n.name])]


def _add_n(imp: _Importer, n: _MXNode):
    nodes, acc = [], n.inputs[0]
    for k, t in enumerate(n.inputs[1:], start=1):
        out = n.name if k == len(n.inputs) - 1 else imp.temp(f"{n.name}/sum{k}", n.out_shape)
        nodes.append(Node(out, "Add", [acc, t], [out]))
        acc = out
    return nodes or None


def _clip(imp: _Importer, n: _MXNode):
    low, high = as_float(n.attrs.get("a_min"), None), as_float(n.attrs.get("a_max"), None)
    return [Node(n.name, "Relu6", n.inputs[:1], [n.name])] if (low, high) == (0.0, 6.0) else None


def _concat(imp: _Importer, n: _MXNode):
    axis = as_int(n.attrs.get("dim"), 1) % len(n.out_shape)
    return [Node(n.name, "Concat", n.inputs, [n.name], {"axis": axis})]


def _softmax(imp: _Importer, n: _MXNode):
    a = n.attrs
    if as_float(a.get("temperature"), 1.0) != 1.0 or as_bool(a.get("use_length"), False):
        return None
    axis = as_int(a.get("axis"), -1) % len(n.out_shape)
    return [Node(n.name, "Softmax", n.inputs[:1], [n.name], {"axis": axis})]


def _softmax_output(imp: _Importer, n: _MXNode):
    a, rank = n.attrs, len(n.out_shape)
    if as_bool(a.get("preserve_shape"), False):
        axis = rank - 1
    elif as_bool(a.get("multi_output"), False) or rank == 2:
        axis = 1
    else:
        return None
    return [Node(n.name, "Softmax", n.inputs[:1], [n.name], {"axis": axis})]


def _softmax_activation(imp: _Importer, n: _MXNode):
    if len(n.out_shape) != 2 and n.attrs.get("mode", "instance") != "channel":
        return None
    return [Node(n.name, "Softmax", n.inputs[:1], [n.name], {"axis": 1})]


def _pad(imp: _Importer, n: _MXNode):
    if n.attrs.get("mode", "constant") != "constant":
        return None
    widths = as_tuple(n.attrs.get("pad_width"))
    pads = tuple(tuple(widths[i:i + 2]) for i in range(0, len(widths), 2))
    return [Node(n.name, "Pad", n.inputs[:1], [n.name],
                 {"pads": pads, "value": as_float(n.attrs.get("constant_value"), 0.0)})]


def _mean(imp: _Importer, n: _MXNode):
    rank = len(imp.shape(n.inputs[0]))
    if as_bool(n.attrs.get("exclude"), False):
        return None
    axes = as_tuple(n.attrs.get("axis")) or tuple(range(rank))
    return [Node(n.name, "Mean", n.inputs[:1], [n.name],
                 {"axes": tuple(sorted(a % rank for a in axes)), "keepdims": as_bool(n.attrs.get("keepdims"), False)})]


def _squeeze(imp: _Importer, n: _MXNode):
    rank, axes = len(imp.shape(n.inputs[0])), as_tuple(n.attrs.get("axis"))
    return [Node(n.name, "Squeeze", n.inputs[:1], [n.name], {"axes": tuple(sorted(a % rank for a in axes))})] \
        if axes else None


def _transpose(imp: _Importer, n: _MXNode):
    rank = len(imp.shape(n.inputs[0]))
    perm = as_tuple(n.attrs.get("axes")) or tuple(reversed(range(rank)))
    return [Node(n.name, "Transpose", n.inputs[:1], [n.name], {"perm": perm})]


def _custom(imp: _Importer, n: _MXNode):
    op = IR_OF_CUSTOM_OP[n.op]
    attrs = decode_custom_attrs(op, n.attrs)
    outputs = [n.name] + [f"{n.name}:{k}" for k in range(1, attrs.get("num_outputs", 1))]
    return [Node(n.name, op, n.inputs, outputs, attrs)]


def _reshape_target(imp: _Importer, n: _MXNode) -> Tuple[int, ...]:
    """The inferred output shape, with -1 for dim 0 when the symbol's own ``shape`` leaves
    it to the input (``0`` copies it, ``-1`` infers it) and it is the input's dim 0: then
    the reshape follows the batch, which ``input_shapes`` only fixes for calibration."""
    out = tuple(n.out_shape)
    spec = as_tuple(n.attrs.get("shape"))
    in_shape = imp.shape(n.inputs[0])
    if spec and spec[0] in (0, -1) and out and in_shape and in_shape[0] == out[0]:
        return (-1, *out[1:])
    return out


def _reshape(imp, n) -> List[Node]:
    return [Node(n.name, "Reshape", n.inputs[:1], [n.name], {"shape": _reshape_target(imp, n)})]


# MXNet op -> translator: the ops with attributes or operands to convert here, the others
# (one IR op, same inputs) from the registry
_TRANSLATORS: Dict[str, Translator] = registry.frontend_table("mx", {
    "Convolution": _conv, "FullyConnected": _fully_connected, "BatchNorm": _batchnorm,
    "Activation": _activation, "LeakyReLU": _leaky_relu, "Pooling": _pooling, "Concat": _concat,
    "concat": _concat, "add_n": _add_n, "ElementWiseSum": _add_n, "clip": _clip,
    "Reshape": _reshape, "reshape": _reshape,
    "softmax": _softmax, "SoftmaxOutput": _softmax_output, "SoftmaxActivation": _softmax_activation,
    "Pad": _pad, "pad": _pad, "mean": _mean, "transpose": _transpose, "squeeze": _squeeze,
    **{op: _custom for op in IR_OF_CUSTOM_OP},
}, _generic)


def _translate(imp: _Importer, index: int, used: Dict[int, int]) -> None:
    n = _MXNode(imp, index)
    node_json = imp.model.nodes[index]
    translator = _TRANSLATORS.get(n.op)
    nodes = translator(imp, n) if translator else None
    if nodes is None:
        payload = {k: v for k, v in node_json.items() if k != "inputs"}
        outputs = [n.name] + [f"{n.name}:{k}" for k in range(1, used.get(index, 1))]
        nodes = [Node(n.name, "Opaque", list(n.inputs), outputs,
                      {"framework": "mxnet", "type": n.op, "payload": json.dumps(payload)})]
    for node in nodes:
        node.inputs = [imp.raw_param(t) if t in imp.param_vars and t not in imp.graph.params else t
                       for t in node.inputs]
        infos = [imp.graph.tensors.get(t) or _info(imp, index, k, node) for k, t in enumerate(node.outputs)]
        imp.graph.add_node(node, infos)


def _info(imp: _Importer, index: int, k: int, node: Node) -> TensorInfo:
    dtype = node.attrs["dtype"] if node.op == "Quant" else "float32"
    return TensorInfo(imp.shapes.get((index, k)), dtype)


# ---------------------------------------------------------------- entry point
_UNFORESEEN = (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError)


def import_symbol(graph_def, input_nodes: Sequence[str], output_nodes: Sequence[str],
                  input_shapes: Sequence[Sequence[int]]) -> Graph:
    """Translate an MXNet model (``(symbol, arg_params, aux_params)`` or checkpoint prefix)
    to the IR, with inputs specialised to ``input_shapes`` (one NCHW shape per input).
    ``output_nodes`` may be given with or without MXNet's ``_output`` suffix; the IR graph
    outputs are the node names.  Raises ModelError naming the problem (unknown names,
    wrong input rank, missing or mis-shaped params, malformed symbol)."""
    model = load_model(graph_def)
    if len(input_shapes) != len(input_nodes):
        raise ModelError(f"{len(input_shapes)} input_shapes for {len(input_nodes)} input nodes")
    inputs = _resolve_inputs(model, input_nodes)
    outputs = _resolve_outputs(model, output_nodes)
    order = _reachable(model, inputs, outputs)
    params = _check_params(model, order, inputs)
    _check_input_ranks(model, inputs, input_shapes, order)
    _check_output_indices(model, order, outputs)
    if any(model.nodes[i]["op"] in IR_OF_CUSTOM_OP for i in order):
        from ... import oplib
        oplib.mx_init()
    used: Dict[int, int] = {}
    for i in order:
        for ref in _data_inputs(model.nodes[i]):
            used[ref[0]] = max(used.get(ref[0], 0), ref[1] + 1)
    for i, k in outputs:
        used[i] = max(used.get(i, 0), k + 1)
    compute = [i for i in order if model.nodes[i]["op"] != "null"]
    refs = [(i, k) for i in compute for k in range(used.get(i, 1))]
    shapes = _infer_shapes(model, inputs, input_shapes, params, refs)

    graph = Graph(name="mxnet")
    for name, shape in zip(inputs, input_shapes):
        graph.add_input(name, shape)
    imp = _Importer(model, graph, shapes, params)
    imp.count_uses(order)
    for i in compute:
        try:
            _translate(imp, i, used)
        except ModelError:
            raise
        except _UNFORESEEN as e:  # an attribute or shape the translator did not foresee
            node = model.nodes[i]
            raise ModelError(f"cannot translate {node['op']} node {node['name']!r}: {type(e).__name__}: {e}") from e
    graph.outputs = [tensor_name(model, r) for r in outputs]
    for t in graph.outputs:
        if t in imp.param_vars:
            imp.raw_param(t)
    graph.prune()
    return graph
