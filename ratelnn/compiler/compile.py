"""The compiler: quantized IR -> compiled IR with ``Engine`` nodes (docs/architecture.md §6).

:func:`compile_graph` partitions the quantized graph into maximal acyclic NPU regions
(``ratelnn.compiler.partition.find_regions``), lowers each to an engine (:mod:`.lower`) and
replaces it by one ``Engine`` node.  Integer tensors cross the border of the float part of
the graph through ``Quant`` (float -> engine input) and ``Dequant`` (engine output -> float
readers and graph outputs) nodes.  Names: an engine output ``t`` is the integer tensor
``t/quant``; its ``Dequant`` produces ``t`` itself, so float readers and the user's output
names are unchanged.  Supported ops: docs/npu-supported-ops.md.
"""
from __future__ import annotations

import os
import re
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from ..config import ConfigError
from ..errors import ModelError, RatelError
from ..fileio import write_atomic
from ..ir import Graph, Node, QParams, TensorInfo
from ..npu.device import resolve_device_info
from ..npu.batching import with_batch_plans
from ..npu.engine import ACTIVATION_DTYPES, MAX_TENSOR_ELEMENTS, MAX_TOTAL_BYTES, EngineError
from .partition import Region, find_regions
from ..quantization.policy import QuantPlan, make_plan
from .input_processors import InputProcessor, attach
from .lower import lower_region, lowering_refusal
from .splits import SPLITS_META, engine_splits

INPUT_SCALE_FILE = "input_quant_nodes.txt"
# what a compiler bug on an unforeseen graph raises; turned into a CompileError naming the node
_UNFORESEEN = (KeyError, IndexError, AttributeError, TypeError, ValueError)


class CompileError(ModelError):
    """The compiler cannot handle a node of the quantized graph: the message names the node,
    its op and what is unsupported."""


def _describe(node: Node) -> str:
    return f"node {node.name!r} ({node.op})"


def is_npu_supported(graph: Graph, node: Node, plan: QuantPlan) -> bool:
    """A quantized node the NPU runs: lowerable, with per-tensor int8/uint8/int16 QParams on
    every activation input and output."""
    return npu_refusal(graph, node, plan) is None


def npu_refusal(graph: Graph, node: Node, plan: QuantPlan) -> Optional[str]:
    """Why ``node`` stays on the CPU, in words; None when the NPU runs it."""
    if not plan.is_quantized(node):
        if node.op == "Opaque":
            return f"{node.attrs.get('framework')} op {node.attrs.get('type')} has no quantized form (runs in float)"
        return "not quantized (float in the quantized model)"
    refusal = lowering_refusal(graph, node)
    if refusal:
        return refusal
    for t in [t for t in node.inputs if not graph.is_param(t)] + node.outputs:
        qp = graph.qparams.get(t)
        if qp is None:
            return f"tensor {t!r} has no quantization parameters"
        if qp.per_channel:
            return f"tensor {t!r} is quantized per channel"
        if qp.dtype not in ACTIVATION_DTYPES:
            return f"tensor {t!r} is {qp.dtype}, not an NPU activation type"
    return None


def _scale_attrs(qp: QParams) -> Dict[str, Any]:
    if qp.per_channel:
        return {"scales": [float(s) for s in np.asarray(qp.scale, np.float32)], "axis": int(qp.axis)}
    return {"scale": float(np.float32(qp.scale))}


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text) or "model"


class _Assembler:
    """Builds the compiled graph from the quantized graph ``src`` and its regions."""

    def __init__(self, src: Graph, config: Mapping[str, Any]) -> None:
        self.src = src
        self.round_mode = config.get("round_mode", "half_away_from_zero")
        self.out = Graph(src.name)
        self.out.inputs = list(src.inputs)
        self.out.outputs = list(src.outputs)
        self.out.tensors = dict(src.tensors)
        self.out.params = dict(src.params)
        self.out.qparams = dict(src.qparams)
        self.out.meta = dict(src.meta)
        self.used = set(src.tensors) | {n.name for n in src.nodes}
        self.integer: Dict[str, str] = {}    # IR tensor -> integer tensor holding its codes
        self.dequantized: Dict[str, str] = {}  # integer param / input -> its float tensor
        self.float_node_names: set = set()     # nodes of src kept as they are
        self.on_grid_outputs: set = set()      # outputs of kept quantized nodes, fake-quantized

    def fresh(self, base: str) -> str:
        name, i = base, 1
        while name in self.used:
            name, i = f"{base}_{i}", i + 1
        self.used.add(name)
        return name

    def node_names(self) -> set:
        """Node names taken in the compiled graph: its nodes and the float nodes to come."""
        return {n.name for n in self.out.nodes} | self.float_node_names

    def add(self, node: Node, infos: List[TensorInfo]) -> None:
        self.out.add_node(node, infos)

    def integer_input(self, t: str, qp: Optional[QParams] = None) -> str:
        """The integer codes of ``t`` for an engine input: an engine output, an integer graph
        input, or a new ``Quant`` of a float tensor (by ``qp``, default its own QParams)."""
        if t not in self.integer:
            qp = qp or self.src.qparams[t]
            codes = self.fresh(f"{t}/quant")
            self.add(Node(codes, "Quant", [t], [codes],
                          {"dtype": qp.dtype, **_scale_attrs(qp), "round_mode": self.round_mode}),
                     [TensorInfo(self.out.tensors[t].shape, qp.dtype)])
            self.out.qparams[codes] = qp
            self.integer[t] = codes
        return self.integer[t]

    def float_of(self, t: str) -> str:
        """The float value of an integer param or integer graph input, for a float reader."""
        if t not in self.dequantized:
            qp = self.out.qparams[t]
            name = self.fresh(f"{t}/dequant")
            self.add(Node(name, "Dequant", [t], [name], _scale_attrs(qp)),
                     [TensorInfo(self.out.tensors[t].shape, "float32")])
            self.dequantized[t] = name
        return self.dequantized[t]

    def on_grid(self, t: str) -> str:
        """A float tensor holding ``t`` rounded to its quantization grid (what the quantized
        model's readers of a quantization point see)."""
        codes = self.integer_input(t)
        return self.float_of(codes) if codes != t else self.float_of(t)

    def float_node(self, node: Node, quantized: bool, engine_outputs: set) -> None:
        """Keep ``node`` as a float op.  A quantized node that could not be lowered keeps the
        quantized model's semantics: it reads its inputs and writes its output on their
        quantization grids (Quant->Dequant), and engines read its output's codes."""
        node = Node(node.name, node.op, list(node.inputs), list(node.outputs), dict(node.attrs))
        inputs = []
        for t in node.inputs:
            if _is_integer(self.out, t):
                t = self.float_of(t)
            elif quantized and t in self.src.qparams and t not in engine_outputs and t not in self.on_grid_outputs:
                t = self.on_grid(t)
            inputs.append(t)
        node.inputs = inputs
        self.out.nodes.append(node)
        if not quantized:
            return
        for k, t in enumerate(node.outputs):
            qp = self.src.qparams.get(t)
            if qp is None:
                continue
            raw = self.fresh(f"{t}/raw")
            self.out.tensors[raw] = TensorInfo(self.src.shape(t), "float32")
            node.outputs[k] = raw
            codes = self.integer_input(raw, qp)
            self.integer[t] = codes
            self.add(Node(self.fresh(f"{t}/dequant"), "Dequant", [codes], [t], _scale_attrs(qp)),
                     [TensorInfo(self.src.shape(t), "float32")])
            self.on_grid_outputs.add(t)

    def engine(self, region, engine, engine_name: str, device_id: int, core_ids: List[int],
               float_readers: Dict[str, bool]) -> None:
        """One ``Engine`` node for ``region``: ``engine`` holds every compiled batch size
        (its batch plans; docs/multi-batch.md)."""
        inputs = [self.integer_input(t) for t in region.inputs]
        outputs = []
        for t in region.outputs:
            codes = self.fresh(f"{t}/quant")
            self.out.tensors[codes] = TensorInfo(self.src.shape(t), self.src.qparams[t].dtype)
            self.out.qparams[codes] = self.src.qparams[t]
            self.integer[t] = codes
            outputs.append(codes)
        self.used.add(engine_name)
        self.add(Node(engine_name, "Engine", inputs, outputs,
                      {"engine": engine.to_bytes(), "engine_name": engine_name,
                       "device_id": int(device_id), "core_ids": [int(c) for c in core_ids]}),
                 [self.out.tensors[c] for c in outputs])
        for t, codes in zip(region.outputs, outputs):
            if float_readers[t]:
                node_name = t if t not in self.node_names() else self.fresh(f"{t}/dequant")
                self.add(Node(node_name, "Dequant", [codes], [t], _scale_attrs(self.src.qparams[t])),
                         [TensorInfo(self.src.shape(t), "float32")])


def engine_batch_sizes(config: Mapping[str, Any]) -> List[int]:
    """The batch sizes every region is compiled for (docs/multi-batch.md): ``static_batch_sizes``
    (sorted, distinct), or for ``max_dynamic_batch_size`` N the powers of two below N and N;
    ``[]`` when neither is set: one engine at the batch of ``input_shapes``."""
    static = sorted({int(b) for b in config.get("static_batch_sizes") or []})
    dynamic = int(config.get("max_dynamic_batch_size") or 0)
    if static and dynamic:
        raise ConfigError("config keys 'static_batch_sizes' and 'max_dynamic_batch_size' exclude each other")
    if dynamic:
        return [1 << k for k in range(dynamic.bit_length()) if 1 << k < dynamic] + [dynamic]
    return static


def engine_sets(graph: Graph) -> List[Tuple[str, List[bytes]]]:
    """``(engine name, [engine bytes, batch engine bytes...])`` of every ``Engine`` node of
    the compiled ``graph``, in graph order: each node's engine set (docs/multi-batch.md; one
    engine with its batch plans, or one per size in models compiled before them)."""
    return [(str(n.attrs.get("engine_name", n.name)), [n.attrs["engine"], *n.attrs.get("batch_engines", [])])
            for n in graph.nodes if n.op == "Engine"]


def engine_regions(src: Graph, plan: QuantPlan, layer_by_layer: bool = False
                   ) -> Tuple[Dict[str, Optional[str]], List[Tuple[str, Region]]]:
    """(node name -> why the NPU does not run it, None where it does; ``(engine name,
    Region)`` of every engine :func:`compile_graph` makes of the sorted quantized ``src``
    under ``plan``, in order)."""
    refusals = {n.name: npu_refusal(src, n, plan) for n in src.nodes}
    regions = find_regions(src, lambda g, n: refusals[n.name] is None, merge=not layer_by_layer)
    model = _safe_name(src.name)
    return refusals, [(f"{model}_{'layer' if layer_by_layer else 'engine'}_{k}", r) for k, r in enumerate(regions)]


def compile_graph(qgraph: Graph, config: Mapping[str, Any], device_info: Optional[Mapping] = None,
                  layer_by_layer: bool = False, processors: Sequence[InputProcessor] = ()) -> Graph:
    """The compiled graph of the quantized ``qgraph`` (made by ``quantize``).

    ``layer_by_layer``: every NPU-supported node lowered alone into its own engine
    (``<model>_layer_<k>``, no regions), engines passing integer codes to each other: the
    quantized model in the engines' integer arithmetic, layer by layer (what
    ``compiler_check`` compares the compiled model with).

    ``device_info`` (docs/architecture.md §2) picks the device and cores written into every engine
    (default: all cores of device 0).  With ``config["remove_input_quant"]`` the graph
    inputs take integer codes ``q = round(x / in_scale)`` and the scales are written to
    ``input_quant_nodes.txt`` in ``config["output_dir"]`` and in the working directory.
    ``static_batch_sizes`` / ``max_dynamic_batch_size`` compile every engine for several batch
    sizes (:func:`engine_batch_sizes`; its batch plans, one copy of the weights, docs/multi-batch.md).
    ``processors`` (:func:`~ratelnn.compiler.input_processors.input_processors`) make those
    inputs take the raw uint8 image, converted and normalised in the first engine."""
    src = qgraph.copy()
    raw_inputs = attach(src, list(processors))
    src.toposort()
    plan = make_plan(src, config)
    refusals, named = engine_regions(src, plan, layer_by_layer)
    names, regions = [name for name, _ in named], [r for _, r in named]
    placement = resolve_device_info(device_info)
    device_id = next(iter(placement))
    core_ids = placement[device_id]
    asm = _Assembler(src, config)
    batch_sizes = engine_batch_sizes(config)
    remove_input_quant = bool(config.get("remove_input_quant", False))
    if remove_input_quant:
        _integer_inputs(asm, src.inputs)
    _integer_inputs(asm, raw_inputs)

    in_region = {id(n) for r in regions for n in r.nodes}
    asm.float_node_names = {n.name for n in src.nodes if id(n) not in in_region}
    engine_outputs = {t for r in regions for t in r.outputs}
    for node in src.nodes:   # nodes left outside the engines first: they may fix integer codes
        if id(node) not in in_region:
            try:
                asm.float_node(node, plan.is_quantized(node), engine_outputs)
            except RatelError:
                raise
            except _UNFORESEEN as e:
                raise CompileError(f"{_describe(node)} stays on the CPU, but its inputs "
                                   f"{list(node.inputs)} cannot be wired to it: {type(e).__name__}: {e}") from e
    consumers = src.consumer_map()
    for name, region in zip(names, regions):
        try:
            engine = lower_region(src, region, name, device_id, core_ids)
        except RatelError:
            raise
        except _UNFORESEEN as e:
            nodes = ", ".join(_describe(n) for n in region.nodes[:8]) + (", ..." if len(region.nodes) > 8 else "")
            raise CompileError(f"cannot lower NPU region {name} ({nodes}): {type(e).__name__}: {e}") from e
        for b in batch_sizes or [engine.batch_size]:   # each compiled batch size (docs/multi-batch.md)
            _check_engine_size(engine, b, config)
        if batch_sizes:
            engine = with_batch_plans(engine, batch_sizes)
        readers = {t: t in src.outputs or any(id(c) not in in_region for c in consumers.get(t, []))
                   for t in region.outputs}
        asm.engine(region, engine, name, device_id, core_ids, readers)
    asm.out.toposort()
    asm.out.prune()
    if not layer_by_layer:   # why the model has more than one engine (docs/architecture.md §6)
        asm.out.meta[SPLITS_META] = engine_splits(src, regions, refusals, names)
    if remove_input_quant:
        write_input_scales(asm.out, config)
    return asm.out


def _check_engine_size(engine, batch: int, config: Mapping[str, Any]) -> None:
    """CompileError naming the tensor when an engine at a compiled ``batch`` exceeds the config
    keys max_tensor_elements / max_total_bytes (the run-time limits are checked by every
    loader at the run batch: docs/reliability.md, "Engines")."""
    try:
        engine.check_size(batch, int(config.get("max_tensor_elements", MAX_TENSOR_ELEMENTS)),
                          int(config.get("max_total_bytes", MAX_TOTAL_BYTES)))
    except EngineError as e:
        raise CompileError(f"{e}; raise the config key to compile it") from None


def _is_integer(graph: Graph, tensor: str) -> bool:
    """A quantized integer param or graph input: integer codes with QParams (read by a float
    node, it needs a Dequant).  An integer tensor without QParams is a real integer value (an
    ``ExpandDims`` axis, a ``StridedSlice`` begin/end/strides, a ``Reshape`` shape, token
    ids...): float readers take it as it is."""
    info = graph.tensors.get(tensor)
    return ((tensor in graph.params or tensor in graph.inputs) and info is not None
            and info.dtype != "float32" and tensor in graph.qparams)


def _integer_inputs(asm: _Assembler, inputs: Sequence[str]) -> None:
    """Graph ``inputs`` become their integer codes (``remove_input_quant``: every input; raw
    image inputs of input processors)."""
    for t in inputs:
        qp = asm.src.qparams.get(t)
        if qp is None or qp.per_channel:
            raise ConfigError(f"remove_input_quant: graph input {t!r} is not quantized (no quantized op "
                              "reads it), so it cannot take integer codes")
        asm.out.tensors[t] = TensorInfo(asm.src.shape(t), qp.dtype)
        asm.integer[t] = t


def write_input_scales(graph: Graph, config: Mapping[str, Any]) -> List[str]:
    """Write ``in_scale: <float>`` (one line per graph input, in input order) to
    ``input_quant_nodes.txt`` in ``output_dir`` and in the working directory; returns the
    paths.  Files are replaced atomically."""
    text = "".join(f"in_scale: {float(np.float32(graph.qparams[t].scale))!r}\n" for t in graph.inputs)
    output_dir = config.get("output_dir")
    if not output_dir:
        raise ConfigError("config key 'output_dir' is required")
    paths = []
    for folder in (os.fspath(output_dir), os.getcwd()):
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, INPUT_SCALE_FILE)
        write_atomic(path, text.encode())
        paths.append(path)
    return paths
