"""Frozen TensorFlow GraphDef -> ratelnn IR (docs/ir.md, docs/tensorflow.md).

Static shapes come from TensorFlow itself: the GraphDef is imported into a fresh
``tf.Graph`` with its inputs mapped to placeholders of the user's ``input_shapes``, and
every tensor's inferred shape is read back.  Ops outside the IR vocabulary (or whose
operands the IR cannot express) become ``Opaque`` nodes holding their NodeDef.
"""
from __future__ import annotations

import difflib
import re
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ...errors import ModelError
from ...frameworks import import_tensorflow
from ...ir import Graph, Node, TensorInfo, registry
from ...ir.evaluate import register_opaque_runner
from .opaque import run_opaque

# the numpy evaluator runs the Opaque nodes this module makes with TensorFlow's kernels
register_opaque_runner("tensorflow", run_opaque)

# ops that only exist in graphs whose variables have not been turned into constants
_VARIABLE_OPS = {
    "VariableV2", "Variable", "VarHandleOp", "ReadVariableOp", "ResourceGather",
    "ResourceGatherNd", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "VarIsInitializedOp", "Assign", "AssignAdd", "AssignSub", "TemporaryVariable",
}
# TF1 control flow (tf.cond, tf.while_loop) and its functional forms: not supported
_CONTROL_FLOW_OPS = {
    "Switch", "RefSwitch", "Merge", "RefMerge", "Enter", "RefEnter", "Exit", "RefExit",
    "NextIteration", "RefNextIteration", "LoopCond", "If", "StatelessIf", "While",
    "StatelessWhile", "Case", "StatelessCase", "_SwitchN",
}
# one-input pass-through ops (IdentityN has several)
_IDENTITY_OPS = set(registry.get("Identity").tf) - {"IdentityN"}


def tensor_name(ref: str) -> str:
    """IR name of a TF tensor reference: ``node:0`` -> ``node``, ``node:k`` kept."""
    return ref[:-2] if ref.endswith(":0") else ref


def _node_of(ref: str) -> str:
    return ref.lstrip("^").split(":")[0]


# ---------------------------------------------------------------- validation
def _check_graph_def(graph_def) -> Dict[str, object]:
    """Name -> NodeDef, after checking the GraphDef is well formed and frozen."""
    if not isinstance(graph_def, import_tensorflow().compat.v1.GraphDef):
        raise ModelError(f"expected a frozen tf.compat.v1.GraphDef, got {type(graph_def).__name__}")
    nodes: Dict[str, object] = {}
    for nd in graph_def.node:
        if nd.name in nodes:
            raise ModelError(f"malformed GraphDef: duplicate node name {nd.name!r}")
        nodes[nd.name] = nd
    for nd in graph_def.node:
        if nd.op in _VARIABLE_OPS:
            raise ModelError(f"graph is not frozen: variable op {nd.name!r} ({nd.op}); freeze it with "
                             "ratelnn.frontend.tensorflow.freeze_keras/freeze_saved_model")
        for ref in nd.input:
            if _node_of(ref) not in nodes:
                raise ModelError(f"malformed GraphDef: node {nd.name!r} reads {ref!r}, "
                                 f"but there is no node {_node_of(ref)!r}")
    _check_acyclic(nodes)
    return nodes


def _check_acyclic(nodes: Dict[str, object]) -> None:
    state: Dict[str, int] = {}
    for root in nodes:
        if state.get(root) == 2:
            continue
        stack = [(root, iter(nodes[root].input))]
        state[root] = 1
        while stack:
            name, it = stack[-1]
            ref = next(it, None)
            if ref is None:
                state[name] = 2
                stack.pop()
                continue
            dep = _node_of(ref)
            if state.get(dep) == 1 and nodes[dep].op not in ("NextIteration", "RefNextIteration"):
                loops = [n for n, nd in nodes.items() if nd.op in _CONTROL_FLOW_OPS]
                if loops:
                    raise ModelError(f"control flow is not supported: node {dep!r} "
                                     f"({nodes[dep].op}) is part of a loop (tf.while_loop; "
                                     f"control flow nodes such as {loops[:3]})")
                raise ModelError(f"malformed GraphDef: cycle through node {dep!r}")
            if dep not in state:
                state[dep] = 1
                stack.append((dep, iter(nodes[dep].input)))


def _resolve_names(names: Sequence[str], nodes: Dict[str, object], what: str) -> List[str]:
    """IR tensor names for the user's ``input_nodes``/``output_nodes``."""
    out = []
    for name in names:
        node_name = name.split(":")[0]
        if node_name not in nodes:
            close = difflib.get_close_matches(node_name, list(nodes), n=5)
            hint = f"; close matches: {close}" if close else ""
            raise ModelError(f"{what} {name!r} is not a node of the GraphDef{hint}")
        out.append(tensor_name(name))
    return out


# ---------------------------------------------------------------- shape inference
def _infer_shapes(graph_def, inputs: List[str], input_shapes, nodes) -> object:
    """A tf.Graph holding the GraphDef under the prefix ``import/`` with the inputs
    replaced by placeholders of ``input_shapes``."""
    import tensorflow as tf
    graph = tf.Graph()
    input_map = {}
    with graph.as_default():
        for i, (name, shape) in enumerate(zip(inputs, input_shapes)):
            nd = nodes[name.split(":")[0]]
            _check_input_shape(name, nd, shape)
            dtype = tf.as_dtype(nd.attr["dtype"].type) if "dtype" in nd.attr else tf.float32
            ph = tf.compat.v1.placeholder(dtype, shape, name=f"ratelnn_input_{i}")
            input_map[name if ":" in name else name + ":0"] = ph
        try:
            tf.compat.v1.import_graph_def(graph_def, input_map=input_map, name="import")
        except (ValueError, TypeError, tf.errors.OpError) as e:  # OpError: unknown op types
            found = re.search(r"\{\{node import/([^}]+?)\}\}", str(e))
            if found and found[1] in nodes:
                nd = nodes[found[1]]
                raise ModelError(f"input_shapes {input_shapes}: node {nd.name!r} ({nd.op}) cannot take "
                                 f"them: {str(e).split(' for ')[0]}") from e
            raise ModelError(f"TensorFlow cannot import the GraphDef with input_shapes {input_shapes}: {e}") from e
    return graph


def _check_input_shape(name: str, nd, shape) -> None:
    """The rank must match the placeholder's; fixed dims may change (docs/architecture.md
    §14): TensorFlow infers every shape again and names a node that cannot take them."""
    if "shape" not in nd.attr or nd.attr["shape"].shape.unknown_rank:
        return
    declared = [d.size for d in nd.attr["shape"].shape.dim]
    if len(declared) != len(shape):
        raise ModelError(f"input_shapes for {name!r} has rank {len(shape)} ({list(shape)}), "
                         f"but the placeholder has rank {len(declared)} ({declared})")


# ---------------------------------------------------------------- translation
class _Importer:
    def __init__(self, nodes, tf_graph, graph: Graph, inputs: List[str], probe_graph=None):
        self.nodes = nodes
        self.tf_graph = tf_graph
        self.graph = graph
        self.placeholders = {name: tf_graph.get_tensor_by_name(f"ratelnn_input_{i}:0")
                             for i, name in enumerate(inputs)}
        # () -> the tf.Graph with the free-batch inputs at another batch (built on first use)
        self.probe_graph = probe_graph
        self._probe_tf_graph = None

    def batch_dims(self, ref: str) -> Optional[List[int]]:
        """The dims of ``ref``'s static shape that follow the batch of the graph inputs whose
        placeholders leave it free (found by inferring the shapes again at another batch);
        None when there is no free batch or the shapes are not static."""
        if self.probe_graph is None:
            return None
        if self._probe_tf_graph is None:
            self._probe_tf_graph = self.probe_graph()
        name, _, idx = ref.partition(":")
        probe = self._probe_tf_graph.get_tensor_by_name(f"import/{name}:{idx or 0}").shape
        static = self.info(ref).shape
        if probe.rank is None or static is None or probe.rank != len(static) or None in static:
            return None
        probe = probe.as_list()
        if None in probe:
            return None
        return [i for i, (a, b) in enumerate(zip(static, probe)) if a != b]

    # -- facts about TF tensors
    def tf_tensor(self, ref: str):
        if ref in self.placeholders:
            return self.placeholders[ref]
        name, _, idx = ref.partition(":")
        return self.tf_graph.get_tensor_by_name(f"import/{name}:{idx or 0}")

    def info(self, ref: str) -> TensorInfo:
        t = self.tf_tensor(ref)
        shape = None if t.shape.rank is None else tuple(t.shape.as_list())
        return TensorInfo(shape, t.dtype.as_numpy_dtype.__name__ if t.dtype.is_numpy_compatible else t.dtype.name)

    def const(self, ref: str) -> Optional[np.ndarray]:
        """Value of ``ref`` if it is a Const (possibly behind Identity ops), else None."""
        import tensorflow as tf
        nd = self.nodes[_node_of(ref)]
        while nd.op in _IDENTITY_OPS:
            nd = self.nodes[_node_of(nd.input[0])]
        return tf.make_ndarray(nd.attr["value"].tensor) if nd.op == "Const" else None

    def rank(self, ref: str) -> Optional[int]:
        shape = self.info(ref).shape
        return None if shape is None else len(shape)

    # -- building
    def translate(self, nd) -> None:
        inputs = [tensor_name(r) for r in nd.input if not r.startswith("^")]
        n_out = len(self.tf_graph.get_operation_by_name(f"import/{nd.name}").outputs)
        outputs = [nd.name] + [f"{nd.name}:{k}" for k in range(1, n_out)]
        if nd.op == "Const":
            self.graph.add_param(nd.name, self.const(nd.name))
            return
        if nd.op in ("Placeholder", "PlaceholderV2", "PlaceholderWithDefault") and not inputs:
            raise ModelError(f"the outputs depend on placeholder {nd.name!r}, which is not in input_nodes")
        translator = _TRANSLATORS.get(nd.op)
        # integer or boolean arithmetic (index computations before an embedding's Gather)
        # stays a framework op: IR ops compute on real numbers and are quantized (ratelnn's
        # own ops and Cast convert between integers and reals on purpose)
        integer = not nd.op.startswith("Ratel") and nd.op != "Cast" and \
            any(not self.info(t).dtype.startswith(("float", "bfloat")) for t in outputs)
        node = translator(self, nd, inputs) if translator and not integer else None
        if node is None:
            node = Node(nd.name, "Opaque", inputs, outputs,
                        {"framework": "tensorflow", "type": nd.op, "payload": nd.SerializeToString()})
        else:
            node.outputs = outputs[:len(node.outputs)]
        self.graph.add_node(node, [self.info(t) for t in node.outputs])


def _attr(nd, key, default=None):
    if key not in nd.attr:
        return default
    a = nd.attr[key]
    kind = a.WhichOneof("value")
    if kind == "list":
        lst = a.list
        return list(lst.i) or list(lst.f) or [s.decode() for s in lst.s]
    if kind == "s":
        return a.s.decode()
    if kind == "type":
        import tensorflow as tf
        return tf.as_dtype(a.type).name
    return getattr(a, kind)


def _layout(nd) -> str:
    return _attr(nd, "data_format", "NHWC")


def _hw(values: Sequence[int], layout: str):
    """The (h, w) entries of a 4-element strides/dilations/ksize list."""
    return (values[1], values[2]) if layout == "NHWC" else (values[2], values[3])


def _pads(imp: _Importer, nd, x: str, ksize, strides, dilations) -> Optional[tuple]:
    """Explicit (top, bottom, left, right) pads for TF's SAME / VALID / EXPLICIT."""
    layout = _layout(nd)
    padding = _attr(nd, "padding")
    if padding == "VALID":
        return (0, 0, 0, 0)
    if padding == "EXPLICIT":
        p = _attr(nd, "explicit_paddings")  # (before, after) per dim, in layout order
        return tuple(p[2:6]) if layout == "NHWC" else tuple(p[4:8])
    shape = imp.info(x).shape
    if shape is None:
        return None
    size = _hw(shape, layout)
    pads = []
    for n, k, s, d in zip(size, ksize, strides, dilations):
        if n is None:
            return None
        out = -(-n // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - n, 0)
        pads += [total // 2, total - total // 2]
    return tuple(pads)


def _conv(imp: _Importer, nd, inputs):
    layout = _layout(nd)
    strides = _hw(_attr(nd, "strides"), layout)
    dilations = _hw(_attr(nd, "dilations", [1, 1, 1, 1]), layout)
    w_info = imp.info(inputs[1])
    if w_info.shape is None or None in w_info.shape:
        return None
    kh, kw, cin, mult = w_info.shape
    pads = _pads(imp, nd, inputs[0], (kh, kw), strides, dilations)
    if pads is None:
        return None
    attrs = {"strides": strides, "dilations": dilations, "pads": pads, "groups": 1,
             "layout": layout, "act": "none", "act_alpha": 0.0}
    weights = inputs[1]
    if nd.op == "DepthwiseConv2dNative":
        attrs["groups"] = cin
        weights = _depthwise_weights(imp, nd, inputs[1], (kh, kw, cin, mult))
        if weights is None:
            return None
    return Node(nd.name, "Conv2D", [inputs[0], weights], [nd.name], attrs)


def _depthwise_weights(imp: _Importer, nd, ref: str, tf_shape) -> Optional[str]:
    """IR weights ``[kh, kw, 1, Cin*M]`` of a depthwise conv whose TF weights
    ``[kh, kw, Cin, M]`` are ``ref``: a constant (reshaped into a new param), or a TF Reshape
    of a tensor already in the IR layout (the exporter's form, e.g. of a Dequant output)."""
    kh, kw, cin, mult = tf_shape
    value = imp.const(ref)
    if value is not None:
        return imp.graph.add_param(imp.graph.unique_name(f"{nd.name}/depthwise_weights"),
                                   value.reshape(kh, kw, 1, cin * mult))
    producer = imp.nodes[_node_of(ref)]
    while producer.op in _IDENTITY_OPS:
        producer = imp.nodes[_node_of(producer.input[0])]
    if producer.op == "Reshape":
        source = tensor_name(producer.input[0])
        if imp.info(source).shape == (kh, kw, 1, cin * mult):
            return source
    return None


def _matmul(imp, nd, inputs):
    return Node(nd.name, "MatMul", inputs[:2], [nd.name],
                {"transpose_a": bool(_attr(nd, "transpose_a", False)),
                 "transpose_b": bool(_attr(nd, "transpose_b", False)), "act": "none", "act_alpha": 0.0})


def _pool(imp, nd, inputs):
    layout = _layout(nd)
    ksize = _hw(_attr(nd, "ksize"), layout)
    strides = _hw(_attr(nd, "strides"), layout)
    pads = _pads(imp, nd, inputs[0], ksize, strides, (1, 1))
    if pads is None:
        return None
    attrs = {"ksize": ksize, "strides": strides, "pads": pads, "layout": layout}
    op = "MaxPool" if nd.op == "MaxPool" else "AvgPool"
    if op == "AvgPool":
        attrs["count_include_pad"] = False
    return Node(nd.name, op, inputs[:1], [nd.name], attrs)


def _axes(imp, ref: str, data: str) -> Optional[tuple]:
    value, rank = imp.const(ref), imp.rank(data)
    if value is None or rank is None:
        return None
    return tuple(sorted(int(a) % rank for a in np.atleast_1d(value)))


def _mean(imp, nd, inputs):
    axes = _axes(imp, inputs[1], inputs[0])
    if axes is None:
        return None
    return Node(nd.name, "Mean", inputs[:1], [nd.name], {"axes": axes, "keepdims": bool(_attr(nd, "keep_dims"))})


def _concat(imp, nd, inputs):
    axis = imp.const(inputs[-1])
    rank = imp.rank(inputs[0])
    if axis is None or rank is None:
        return None
    return Node(nd.name, "Concat", inputs[:-1], [nd.name], {"axis": int(axis) % rank})


def _reshape(imp, nd, inputs):
    shape = imp.const(inputs[1])
    if shape is None:  # computed shape (e.g. Keras Flatten): use the static result shape,
        static = imp.info(nd.name).shape   # with -1 for the one dim that follows a free batch
        if static is None or None in static:
            return None
        shape = list(static)
        follow = imp.batch_dims(nd.name)
        if follow is not None and len(follow) == 1:
            shape[follow[0]] = -1
    return Node(nd.name, "Reshape", inputs[:1], [nd.name], {"shape": tuple(int(d) for d in shape)})


def _expand_dims(imp, nd, inputs):
    """``ExpandDims`` with a constant axis: a Reshape to its static result shape (the batch
    dimension kept free as -1), e.g. Keras' Conv1D (ExpandDims -> Conv2D -> Squeeze)."""
    static = imp.info(nd.name).shape
    if imp.const(inputs[1]) is None or static is None or None in static[1:]:
        return None
    axis = int(np.asarray(imp.const(inputs[1])).reshape(-1)[0]) % len(static)
    shape = tuple(int(d) if d is not None else -1 for d in static)
    if axis != 0:
        shape = (-1,) + shape[1:]
    return Node(nd.name, "Reshape", inputs[:1], [nd.name], {"shape": shape})


def _squeeze(imp, nd, inputs):
    shape = imp.info(inputs[0]).shape
    if shape is None:
        return None
    axes = _attr(nd, "squeeze_dims", [])
    if not axes:  # every size-1 dim; a free batch that is 1 only in input_shapes stays TF's
        follow = imp.batch_dims(inputs[0])
        if follow and any(shape[i] == 1 for i in follow):
            return None
    axes = tuple(sorted(a % len(shape) for a in axes)) if axes else tuple(i for i, d in enumerate(shape) if d == 1)
    return Node(nd.name, "Squeeze", inputs[:1], [nd.name], {"axes": axes})


def _pad(imp, nd, inputs):
    pads = imp.const(inputs[1])
    value = imp.const(inputs[2]) if nd.op == "PadV2" else 0
    if pads is None or value is None:
        return None
    return Node(nd.name, "Pad", inputs[:1], [nd.name],
                {"pads": tuple(tuple(int(v) for v in p) for p in pads), "value": float(value)})


def _transpose(imp, nd, inputs):
    perm = imp.const(inputs[1])
    if perm is None:
        return None
    return Node(nd.name, "Transpose", inputs[:1], [nd.name], {"perm": tuple(int(p) for p in perm)})


def _softmax(imp, nd, inputs):
    rank = imp.rank(inputs[0])
    return None if rank is None else Node(nd.name, "Softmax", inputs, [nd.name], {"axis": rank - 1})


def _batchnorm(imp, nd, inputs):
    if _attr(nd, "is_training", True):
        return None
    op = imp.tf_graph.get_operation_by_name(f"import/{nd.name}")
    if any(out.consumers() for out in op.outputs[1:]):
        return None
    axis = 3 if _layout(nd) == "NHWC" else 1
    return Node(nd.name, "BatchNorm", inputs[:5], [nd.name], {"eps": float(_attr(nd, "epsilon", 1e-3)), "axis": axis})


def _identity(imp, nd, inputs):
    return Node(nd.name, "Identity", inputs, [nd.name]) if len(inputs) == 1 else None


def _quant(imp, nd, inputs):
    attrs = {"dtype": _attr(nd, "dtype"), "round_mode": _attr(nd, "round_mode", "half_away_from_zero")}
    attrs.update(_scale_attrs(nd))
    return Node(nd.name, "Quant", inputs, [nd.name], attrs)


def _engine(imp, nd, inputs):
    """``RatelEngineOp`` -> IR ``Engine`` (attrs of docs/ir.md; the bytes are not decoded)."""
    n_outputs = len(nd.attr["Tout"].list.type)
    return Node(nd.name, "Engine", inputs, [nd.name] * n_outputs, {
        "engine": bytes(nd.attr["engine"].s), "engine_name": _attr(nd, "engine_name"),
        "device_id": int(_attr(nd, "device_id", 0)), "core_ids": [int(c) for c in _attr(nd, "core_ids", [0])],
        **({"batch_engines": list(nd.attr["batch_engines"].list.s)} if "batch_engines" in nd.attr else {})})


def _scale_attrs(nd) -> dict:
    scales = _attr(nd, "scales", [])
    if scales:
        return {"scales": [float(s) for s in scales], "axis": int(_attr(nd, "axis", -1))}
    return {"scale": float(_attr(nd, "scale"))}


# TF op type -> translator: the ops with attributes or operands to convert here, the others
# (one IR op, same inputs) from the registry
_TRANSLATORS: Dict[str, Callable] = registry.frontend_table("tf", {
    "Conv2D": _conv, "DepthwiseConv2dNative": _conv, "MatMul": _matmul,
    "BiasAdd": lambda imp, nd, i: Node(nd.name, "BiasAdd", i, [nd.name], {"layout": _layout(nd)}),
    "LeakyRelu": lambda imp, nd, i: Node(nd.name, "LeakyRelu", i, [nd.name], {"alpha": float(_attr(nd, "alpha"))}),
    "MaxPool": _pool, "AvgPool": _pool, "Mean": _mean, "ConcatV2": _concat, "Reshape": _reshape,
    "Squeeze": _squeeze, "Pad": _pad, "PadV2": _pad, "Transpose": _transpose, "Softmax": _softmax,
    "ExpandDims": _expand_dims,
    "FusedBatchNorm": _batchnorm, "FusedBatchNormV3": _batchnorm,
    "IdentityN": _identity,
    "RatelMinMax": lambda imp, nd, i: Node(nd.name, "MinMax", i, [nd.name], {
        key: _attr(nd, key) for key in ("tensor_name", "output_dir", "record", "ema_decay") if key in nd.attr}),
    "RatelQuant": _quant, "RatelEngineOp": _engine,
    "RatelDequant": lambda imp, nd, i: Node(nd.name, "Dequant", i, [nd.name], _scale_attrs(nd)),
}, lambda op, tf_op: lambda imp, nd, i: Node(nd.name, op.name, i, [nd.name]))


# ---------------------------------------------------------------- entry point
_UNFORESEEN = (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError)


def import_graphdef(graph_def, input_nodes: Sequence[str], output_nodes: Sequence[str],
                    input_shapes: Sequence[Sequence[int]],
                    max_expanded_constant_bytes: Optional[int] = None) -> Graph:
    """Translate a frozen GraphDef to the IR, with inputs specialised to ``input_shapes``
    (one shape per input node).  Raises ModelError for a malformed or unfrozen GraphDef,
    unknown node names, input shapes that do not fit the placeholders, control flow the
    outputs depend on, or compressed constants expanding beyond
    ``max_expanded_constant_bytes`` (checked before any constant is expanded)."""
    nodes = _check_graph_def(graph_def)
    if len(input_shapes) != len(input_nodes):
        raise ModelError(f"{len(input_shapes)} input_shapes for {len(input_nodes)} input nodes")
    inputs = _resolve_names(input_nodes, nodes, "input node")
    outputs = _resolve_names(output_nodes, nodes, "output node")
    needed = _needed(nodes, inputs, outputs)
    flow = [nodes[n] for n in needed if nodes[n].op in _CONTROL_FLOW_OPS]
    if flow:
        shown = ", ".join(f"{nd.name!r} ({nd.op})" for nd in flow[:3])
        raise ModelError(f"control flow is not supported: the outputs depend on {shown}"
                         f"{f' and {len(flow) - 3} more' if len(flow) > 3 else ''} (tf.cond / "
                         "tf.while_loop); export the model without it, or make the part after "
                         "it a separate model")
    if max_expanded_constant_bytes is not None:
        _check_constant_sizes([nodes[n] for n in needed], max_expanded_constant_bytes)
    if any(nd.op.startswith("Ratel") for nd in nodes.values()):
        from ... import oplib
        oplib.tf_init()
    tf_graph = _infer_shapes(graph_def, inputs, input_shapes, nodes)
    free_batch = [name for name in inputs if _has_free_batch(nodes[_node_of(name)])]
    probe_shapes = [[(shape[0] or 1) + 1, *shape[1:]] if name in free_batch and len(shape) else shape
                    for name, shape in zip(inputs, input_shapes)]

    graph = Graph(name="tensorflow")
    # input_shapes fix the batch for calibration and compilation only: the exported graphs
    # keep the original placeholders' free batch (docs/architecture.md §3)
    graph.meta["free_batch_inputs"] = free_batch
    imp = _Importer(nodes, tf_graph, graph, inputs,
                    (lambda: _infer_shapes(graph_def, inputs, probe_shapes, nodes)) if free_batch else None)
    for name in inputs:
        graph.add_input(name, imp.info(name).shape, imp.info(name).dtype)
    for nd in _reachable(nodes, inputs, outputs):
        try:
            imp.translate(nd)
        except ModelError:
            raise
        except _UNFORESEEN as e:  # an attribute or constant the translator did not foresee
            raise ModelError(f"cannot translate {nd.op} node {nd.name!r}: {type(e).__name__}: {e}") from e
    graph.outputs = list(outputs)
    try:
        graph.toposort()
    except ValueError as e:
        raise ModelError(f"GraphDef cannot be translated: {e}") from e
    fold_conv_pads(graph)
    graph.prune()
    return graph


def _has_free_batch(nd) -> bool:
    """Whether a graph input's placeholder leaves its batch (dim 0) free: unknown rank or -1."""
    if "shape" not in nd.attr or nd.attr["shape"].shape.unknown_rank:
        return True
    dims = nd.attr["shape"].shape.dim
    return len(dims) > 0 and dims[0].size < 0


def fold_conv_pads(graph: Graph) -> None:
    """Fold a zero ``Pad`` of the spatial dims into the ``Conv2D`` nodes reading it (their
    ``pads`` grow by it).  This is how the exporter writes a conv whose pads are not SAME's
    (``Pad`` + ``VALID``, the form TensorFlow's converters use), and how Keras writes
    ``ZeroPadding2D`` + conv; the IR then has one conv either way.  The ``Pad`` stays for
    any other reader (``prune`` drops it when none is left)."""
    for pad in [n for n in graph.nodes if n.op == "Pad"]:
        if float(pad.attrs.get("value", 0.0)) != 0.0:
            continue
        rows = [tuple(int(v) for v in r) for r in pad.attrs["pads"]]
        for conv in graph.consumers(pad.outputs[0]):
            if conv.op != "Conv2D" or conv.inputs[0] != pad.outputs[0] or pad.outputs[0] in conv.inputs[1:]:
                continue
            spatial = (1, 2) if conv.attrs.get("layout", "NHWC") == "NHWC" else (2, 3)
            if len(rows) != 4 or any(rows[d] != (0, 0) for d in range(4) if d not in spatial) \
                    or min(min(rows[d]) for d in spatial) < 0:
                continue
            (top, bottom), (left, right) = rows[spatial[0]], rows[spatial[1]]
            t, b, l, r = conv.attrs.get("pads", (0, 0, 0, 0))
            conv.attrs["pads"] = (t + top, b + bottom, l + left, r + right)
            conv.inputs[0] = pad.inputs[0]


def _needed(nodes, inputs: List[str], outputs: List[str]) -> List[str]:
    """Names of the nodes the outputs depend on (data edges, stopping at the inputs), in no
    particular order; safe on cyclic (while-loop) graphs."""
    stop = {_node_of(i) for i in inputs}
    seen: set = set()
    order: List[str] = []
    stack = [_node_of(o) for o in outputs]
    while stack:
        name = stack.pop()
        if name in seen or name in stop:
            continue
        seen.add(name)
        order.append(name)
        stack.extend(_node_of(r) for r in nodes[name].input if not r.startswith("^"))
    return order


def _const_bytes(nd) -> tuple:
    """(bytes the Const's value takes expanded, bytes the NodeDef stores), without expanding."""
    import tensorflow as tf
    proto = nd.attr["value"].tensor
    elements = 1
    for d in proto.tensor_shape.dim:
        elements *= max(int(d.size), 0)
    try:
        itemsize = tf.as_dtype(proto.dtype).size
    except (TypeError, ValueError):
        itemsize = 1
    return elements * max(itemsize, 1), proto.ByteSize()


def _check_constant_sizes(needed_nodes, limit: int) -> None:
    """ModelError before folding if the constants a GraphDef stores compressed (a splat value
    or fewer values than elements) would expand to more than ``limit`` bytes in total."""
    total, worst = 0, None
    for nd in needed_nodes:
        if nd.op != "Const" or "value" not in nd.attr:
            continue
        expanded, stored = _const_bytes(nd)
        if expanded > 2 * stored + 1024:
            total += expanded
            if worst is None or expanded > worst[1]:
                worst = (nd, expanded)
    if total > limit:
        nd, size = worst
        shape = [int(d.size) for d in nd.attr["value"].tensor.tensor_shape.dim]
        raise ModelError(
            f"constant {nd.name!r} of shape {shape} expands from {nd.ByteSize()} bytes to "
            f"{size:,} bytes; the compressed constants of this GraphDef would take {total:,} "
            f"bytes, more than max_expanded_constant_bytes = {limit:,} (a config key; raise it "
            "if the model really needs them)")


def _reachable(nodes, inputs: List[str], outputs: List[str]) -> list:
    """NodeDefs the outputs depend on through data edges, stopping at the inputs, in
    topological order."""
    stop = {_node_of(i) for i in inputs}
    order, done = [], set()
    for out in outputs:
        stack = [(_node_of(out), False)]
        while stack:
            name, expanded = stack.pop()
            if name in done or name in stop:
                continue
            if expanded:
                done.add(name)
                order.append(nodes[name])
                continue
            stack.append((name, True))
            for ref in nodes[name].input:
                if not ref.startswith("^"):
                    stack.append((_node_of(ref), False))
    return order
