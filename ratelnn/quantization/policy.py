"""Quantization policy: which ops run quantized and which tensors are quantization points.

The quantized model simulates an integer NPU: every input of a quantized op is an integer
tensor, and every output of a quantized op is an integer tensor.  The policy decides, from the
graph and the configuration only (never from parameter values or dtypes, so that it gives the
same answer on the float graph and on the quantized graph):

- which nodes are quantized (:data:`QUANTIZED_OPS`, with usable operands, not forced to
  ``fp32`` by ``layer_configs``);
- the *anchors*: quantization points with their own statistics (outputs of quantized ops that
  are not scale-preserving, and float tensors read by quantized ops: graph inputs and outputs
  of float ops, the *border* points);
- the *shared* points: outputs of scale-preserving ops, which reuse their input's QParams;
- the parameter operands of quantized ops and their role (weight, bias, constant).

A fused activation (``act`` of Conv2D/MatMul: relu, relu6, leaky_relu, prelu) is part of its op:
the anchor is the activation's output, with its own statistics.  A standalone ``PRelu`` (slopes
not per output channel of a conv/dense layer) stays a float op.

:func:`calibration_tensors` (the anchors) is used by both the calibration emitter and the
quantizer, so the statistics recorded are always the statistics needed.
See docs/quantization.md.
"""
from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Dict, List, Mapping, Optional, Set

from ..config import QUANT_CFG_DEFAULTS, ConfigError
from ..config_forms import DEFAULT_LAYER
from ..ir import Graph, Node, registry

# Which ops are quantized, their operands and quant_cfg roles: ratelnn/ir/registry.py.
QUANTIZED_OPS = registry.QUANTIZED_OPS

# data_type values layer_configs may give a graph input (it is quantized where a quantized op
# reads it, so it cannot stay float on its own).
INPUT_DATA_TYPES = ("int8", "uint8", "int16")

# Output roles that name the int32 accumulator of the weighted ops: per channel
# (``s_in * s_w[c]``) is what per-channel weights give it; the requantized output activation
# stays per tensor.
ACCUMULATOR_ROLES = frozenset(op.output_role for op in registry.OPS if op.form == registry.WEIGHTED)


# graph.meta key: node names kept float whatever the config says (pre-quantized graphs)
FLOAT_LAYERS_META = "float_layers"


@dataclasses.dataclass
class ParamUse:
    """A parameter read by a quantized node: ``node.inputs[slot] == param``.

    ``role``: ``"weight"`` (Conv2D/MatMul ``w``), ``"bias"`` (their ``b``) or ``"constant"``
    (a constant operand of Add/Sub/Mul/Concat).
    """

    node: str
    slot: int
    param: str
    role: str


@dataclasses.dataclass
class QuantPlan:
    """Where the quantized model has integer tensors (see the module docstring).

    ``anchors``: tensors with their own statistics, in graph order.
    ``shared``: scale-preserving output tensor -> the anchor whose QParams it reuses.
    ``border``: anchors that are graph inputs or produced by float nodes.
    ``activation_bits``: anchor -> 8 or 16 (from ``quant_cfg`` roles).
    ``forced_dtype``: anchor -> dtype forced by ``layer_configs`` (``int8``/``uint8``/``int16``;
    op outputs and graph inputs).
    """

    quantized_nodes: List[str]
    anchors: List[str]
    shared: Dict[str, str]
    border: Set[str]
    param_uses: List[ParamUse]
    activation_bits: Dict[str, int]
    forced_dtype: Dict[str, str]

    def is_quantized(self, node: Node) -> bool:
        return node.name in self._quantized_set

    def __post_init__(self) -> None:
        self._quantized_set = set(self.quantized_nodes)


def quant_cfg_for(config: Mapping[str, Any], role: str) -> Dict[str, Any]:
    """``quant_cfg`` settings (``is_per_channel``, ``num_bits``) of a tensor role, defaults filled."""
    settings = dict(QUANT_CFG_DEFAULTS.get(role, QUANT_CFG_DEFAULTS["activations"]))
    settings.update((config.get("quant_cfg") or {}).get(role, {}))
    return settings


def is_scale_preserving(node: Node) -> bool:
    """True for ops whose integer output is exactly computable at the input's scale: they
    only move, drop or compare codes; ``Pad`` joins them when it pads with 0."""
    if node.op == "Pad":
        return float(node.attrs.get("value", 0.0)) == 0.0
    return node.op in registry.BY_NAME and registry.BY_NAME[node.op].scale_preserving


def activation_inputs(graph: Graph, node: Node) -> List[str]:
    """The non-parameter inputs of ``node``, in order."""
    return [t for t in node.inputs if not graph.is_param(t)]


def _is_float32(graph: Graph, tensor: str) -> bool:
    info = graph.tensors.get(tensor)
    return info is None or info.dtype == "float32"


def _operands_quantizable(graph: Graph, node: Node) -> bool:
    """Whether the operands of a QUANTIZED_OPS node have the form the NPU supports."""
    acts = activation_inputs(graph, node)
    if len(node.outputs) != 1 or not acts or not all(_is_float32(graph, t) for t in acts + node.outputs):
        return False
    form = registry.get(node.op).form
    if form == registry.WEIGHTED:   # x, param weight, optional param bias
        return (len(node.inputs) in (2, 3) and acts == [node.inputs[0]]
                and acts[0] not in node.inputs[1:])
    if form == registry.BINARY:
        return len(node.inputs) == 2
    return form == registry.VARIADIC or len(node.inputs) == 1


def _subgraph_nodes(graph: Graph, starts: List[str], ends: List[str]) -> Set[str]:
    """Names of nodes downstream of a ``starts`` tensor and upstream of an ``ends`` tensor."""
    reached = set(starts)
    downstream = set()
    for n in graph.nodes:
        if any(t in reached for t in n.inputs):
            downstream.add(n.name)
            reached.update(n.outputs)
    needed = set(ends)
    upstream = set()
    for n in reversed(graph.nodes):
        if any(t in needed for t in n.outputs):
            upstream.add(n.name)
            needed.update(n.inputs)
    return downstream & upstream


def _names(value: Any) -> Set[str]:
    return {value} if isinstance(value, str) else set(value)


def whole_model_entry(entry: Mapping[str, Any]) -> bool:
    """Whether a ``layer_configs`` entry is the whole-model subgraph (``start_tensor_names``
    and ``end_tensor_names`` both ``[DEFAULT]``, docs/architecture.md §14): the model's default
    data type, which entries naming a layer or an op type override."""
    return _names(entry.get("start_tensor_names", [])) == _names(entry.get("end_tensor_names", [])) == {DEFAULT_LAYER}


def layer_data_types(graph: Graph, config: Mapping[str, Any]) -> Dict[str, str]:
    """Node name -> ``data_type`` from ``layer_configs``.

    An entry matches by ``layer_name`` (node name or one of its output tensors, or a graph
    input: the input's own dtype, ``int8``/``uint8``/``int16`` only), by ``op_type`` (the IR
    op name, docs/ir.md, or its TensorFlow, MXNet or ONNX spelling; an unknown one is a
    ConfigError) or by a subgraph (``start_tensor_names`` / ``end_tensor_names``; both
    ``[DEFAULT]``: every node).
    Priority: layer name > op type > subgraph; among entries of the same kind the later one
    wins.  An entry that matches no node is reported with a warning (names can disappear in
    graph passes, e.g. a BatchNorm folded into its convolution).  Graph inputs appear in the
    result under their tensor name.
    """
    by_kind: List[Dict[str, str]] = [{}, {}, {}]  # subgraph, op type, layer name
    for entry in config.get("layer_configs") or []:
        data_type = entry.get("data_type")
        if "layer_name" in entry:
            names = _names(entry["layer_name"])
            matched = [n.name for n in graph.nodes if n.name in names or names.intersection(n.outputs)]
            graph_inputs = [t for t in graph.inputs if t in names]
            if graph_inputs and data_type not in INPUT_DATA_TYPES:
                raise ConfigError(f"layer_configs entry {entry!r}: graph input {graph_inputs[0]!r} "
                                  f"can only be {' or '.join(INPUT_DATA_TYPES)} (to keep it in "
                                  "float, make its readers fp32)")
            matched += graph_inputs
            kind = 2
        elif "op_type" in entry:
            ops = set().union(*(registry.config_op_types(name, f"layer_configs entry {entry!r}: op_type")
                                for name in _names(entry["op_type"])))
            matched = [n.name for n in graph.nodes if n.op in ops]
            kind = 1
        elif whole_model_entry(entry):
            matched = [n.name for n in graph.nodes]
            kind = 0
        elif "start_tensor_names" in entry or "end_tensor_names" in entry:
            matched = sorted(_subgraph_nodes(graph, list(entry.get("start_tensor_names", [])),
                                             list(entry.get("end_tensor_names", []))))
            kind = 0
        else:
            raise ConfigError(f"layer_configs entry {entry!r} names no layer_name, op_type "
                              "or start_tensor_names/end_tensor_names")
        if not matched:
            warnings.warn(f"layer_configs entry {entry!r} matches no node of graph "
                          f"{graph.name!r}; it has no effect", UserWarning, stacklevel=3)
        for name in matched:
            by_kind[kind][name] = data_type
    result: Dict[str, str] = {}
    for level in by_kind:
        result.update(level)
    return result


def _activation_role(node: Node, slot: Optional[int]) -> str:
    """quant_cfg role of ``node``'s input ``slot`` (None: its output)."""
    op = registry.get(node.op)
    return op.output_role if slot is None else op.input_role


def _role_bits(config: Mapping[str, Any], role: str) -> int:
    settings = quant_cfg_for(config, role)
    if settings.get("is_per_channel") and role not in ACCUMULATOR_ROLES:
        raise ConfigError(f"quant_cfg[{role!r}].is_per_channel: activations are quantized per "
                          "tensor only; per-channel applies to weight roles and to conv_output/"
                          "matmul_output (the int32 accumulator)")
    return int(settings.get("num_bits", 8))


FORCED_DTYPES = ("int8", "uint8", "int16")   # layer_configs data types that set an anchor's dtype


def make_plan(graph: Graph, config: Mapping[str, Any]) -> QuantPlan:
    """The quantization plan of ``graph`` (nodes must be in topological order)."""
    data_types = layer_data_types(graph, config)
    # layers a pre-quantized graph gives no ranges for stay float (quantization/prequant.py)
    data_types.update((name, "fp32") for name in graph.meta.get(FLOAT_LAYERS_META, ()))
    producers = {t: n for n in graph.nodes for t in n.outputs}
    quantized: List[str] = []
    anchors: List[str] = []
    shared: Dict[str, str] = {}
    param_uses: List[ParamUse] = []
    bits: Dict[str, int] = {}
    forced: Dict[str, str] = {}

    def anchor_of(t: str) -> str:
        return shared.get(t, t)

    def note_bits(t: str, role: str) -> None:
        a = anchor_of(t)
        bits[a] = max(bits.get(a, 8), _role_bits(config, role))

    for node in graph.nodes:
        if node.op not in QUANTIZED_OPS or data_types.get(node.name) == "fp32":
            continue
        if not _operands_quantizable(graph, node):
            continue
        quantized.append(node.name)
        for slot, t in enumerate(node.inputs):
            if graph.is_param(t):
                role = ("constant" if registry.get(node.op).form != registry.WEIGHTED
                        else "weight" if slot == 1 else "bias")
                param_uses.append(ParamUse(node.name, slot, t, role))
                continue
            if t not in bits and t not in shared:
                anchors.append(t)
                if t in graph.inputs and t in data_types:
                    forced[t] = data_types[t]
                elif t in producers and data_types.get(producers[t].name) in FORCED_DTYPES:
                    # a border: the output of a float op the config gives a dtype
                    forced[t] = data_types[producers[t].name]
            note_bits(t, _activation_role(node, slot))
        out = node.outputs[0]
        if is_scale_preserving(node):
            shared[out] = anchor_of(node.inputs[0])
            # its output anchor is its input's: a dtype forced on it goes there (unless that
            # anchor's own producer or an earlier reader already forced one)
            if data_types.get(node.name) in FORCED_DTYPES:
                forced.setdefault(shared[out], data_types[node.name])
        else:
            anchors.append(out)
            if data_types.get(node.name) in FORCED_DTYPES:
                forced[out] = data_types[node.name]
        note_bits(out, _activation_role(node, None))

    quantized_set = set(quantized)
    border = {t for t in anchors
              if t not in producers or producers[t].name not in quantized_set}
    return QuantPlan(quantized, anchors, shared, border, param_uses, bits, forced)


def calibration_tensors(graph: Graph, config: Mapping[str, Any]) -> List[str]:
    """Tensors whose statistics the quantizer needs, in graph order (the plan's anchors)."""
    return list(make_plan(graph, config).anchors)
