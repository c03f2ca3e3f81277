"""Engines against the quantized (QDQ) model: the part of ``compiler_check`` that holds at
every level (docs/multi-batch.md, "Compiler check").  Engine inputs are the quantized model's
codes (QDQ graph, numpy IR evaluator) of their input tensors.

- :func:`check_layers`: the quantized model lowered layer by layer, each instruction fed the
  quantized model's codes of its inputs, must give the quantized model's codes of its output
  within ``TOLERANCE_LSB`` (the two compute the same real number and may round it
  differently, docs/quantization.md §7): the integer form the compiled model is compared
  with computes the quantized model;
- :func:`check_native`: every engine set of the compiled model on the native executor (what
  the framework ops run, batch split included) gives the bits of the numpy reference executor.
Either failure is a :class:`~ratelnn.compiler.compile.CompileError` naming the layer.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ..ir import Graph
from ..ir.evaluate import evaluate
from ..npu.batching import decode_engine_set, run_engine_set
from ..npu.engine import Engine, quantize_real
from ..npu.reference import execute_instruction
from ..quantization.emit import emit_qdq
from .compile import CompileError
from .run import ir_tensor_of

TOLERANCE_LSB = 1


@dataclasses.dataclass
class CodeMatch:
    """Codes of one tensor against the quantized model's: ``equal`` (fraction bit-equal) and
    ``max_diff`` (largest |difference|, in codes)."""

    engine: str
    layer: str
    tensor: str
    equal: float
    max_diff: int


def _match(engine: str, layer: str, tensor: str, got: np.ndarray, want: np.ndarray) -> CodeMatch:
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    return CodeMatch(engine, layer, tensor, float(np.mean(diff == 0)) if diff.size else 1.0,
                     int(diff.max()) if diff.size else 0)


class QuantizedCodes:
    """The quantized (QDQ) model's values of IR tensors on the sample (lazily evaluated)."""

    def __init__(self, qgraph: Graph, config: Mapping[str, Any], feeds: Mapping[str, np.ndarray]) -> None:
        self.qgraph = qgraph
        self.qdq = emit_qdq(qgraph, config)
        producers = {t: n for n in self.qdq.nodes for t in n.outputs}
        self.names = {producers[n.inputs[0]].inputs[0]: n.outputs[0] for n in self.qdq.nodes
                      if n.op == "Dequant" and n.inputs[0] in producers and producers[n.inputs[0]].op == "Quant"}
        self.feeds = feeds
        self.values: Dict[str, np.ndarray] = {}

    def known(self, tensor: str) -> bool:
        qp = self.qgraph.qparams.get(tensor)
        return qp is not None and not qp.per_channel and tensor in self.qgraph.tensors

    def fetch(self, tensors: List[str]) -> None:
        wanted = [t for t in dict.fromkeys(tensors) if t not in self.values and self.known(t)]
        if wanted:
            got = evaluate(self.qdq, self.feeds, [self.names.get(t, t) for t in wanted])
            self.values.update((t, got[self.names.get(t, t)]) for t in wanted)

    def codes(self, spec) -> Optional[np.ndarray]:
        """Codes of engine tensor ``spec`` (named after IR ``tensor``, or ``<tensor>/nhwc``)."""
        name, nhwc = ir_tensor_of(spec.name)
        if name not in self.values:
            return None
        codes = quantize_real(self.values[name], float(self.qgraph.qparams[name].scale), spec.dtype)
        codes = np.ascontiguousarray(codes.transpose(0, 2, 3, 1)) if nhwc else codes
        return codes if codes.shape[1:] == spec.shape[1:] else None


def _check_layers(label: str, engine: Engine, inputs: List[np.ndarray], q: QuantizedCodes) -> List[CodeMatch]:
    """Each instruction on the quantized model's codes of its inputs (reference executor)."""
    rows = []
    vals: Dict[int, np.ndarray] = dict(zip(engine.proto.inputs, inputs))
    for ins in engine.instructions:
        forced = dict(vals)
        for t in ins.inputs:
            codes = q.codes(engine.tensors[t])
            if codes is not None:
                forced[t] = codes
        out = execute_instruction(engine, ins, forced)
        vals[ins.outputs[0]] = out
        spec = engine.tensors[ins.outputs[0]]
        want = q.codes(spec)
        if want is None:
            continue
        row = _match(label, ins.name, spec.name, out, want)
        rows.append(row)
        if row.max_diff > TOLERANCE_LSB:
            bad = int(np.sum(np.abs(out.astype(np.int64) - want.astype(np.int64)) > TOLERANCE_LSB))
            raise CompileError(f"compiler_check: layer {ins.name!r} lowered alone: output {spec.name!r} differs from "
                               f"the quantized model by up to {row.max_diff} codes ({bad} of {want.size} codes beyond "
                               f"{TOLERANCE_LSB} LSB) when fed the quantized model's inputs: the engine instructions "
                               f"do not compute what the quantized model computes")
    return rows


def _engine_sets(graph: Graph) -> List[tuple]:
    """(label, engine set) of every engine node of ``graph``, in graph order."""
    return [(n.attrs.get("engine_name", n.name),
             decode_engine_set(n.attrs["engine"], n.attrs.get("batch_engines", ()), n.attrs.get("engine_name", n.name)))
            for n in graph.nodes if n.op == "Engine"]


def _inputs(q: QuantizedCodes, label: str, engine: Engine) -> List[np.ndarray]:
    inputs = [q.codes(spec) for spec in engine.inputs]
    missing = [spec.name for spec, x in zip(engine.inputs, inputs) if x is None]
    if missing:
        raise CompileError(f"compiler_check: engine {label!r}: the quantized model has no codes for its "
                           f"inputs {missing}")
    return inputs


def check_layers(q: QuantizedCodes, golden: Graph) -> List[CodeMatch]:
    """Each instruction of the engines of ``golden`` (the quantized model lowered layer by
    layer) fed ``q``'s codes, within ``TOLERANCE_LSB`` of ``q``'s codes of its output; one
    row per layer.  Raises :class:`CompileError` naming the layer otherwise."""
    sets = _engine_sets(golden)
    q.fetch([ir_tensor_of(t.name)[0] for _, engines in sets for t in engines[0].tensors])
    return [row for label, engines in sets
            for row in _check_layers(label, engines[0], _inputs(q, label, engines[0]), q)]


def check_native(q: QuantizedCodes, compiled: Graph) -> None:
    """Every engine set of ``compiled`` on the native executor (batch split included) gives
    the bits of its engine on the reference executor, fed ``q``'s codes of its inputs.
    Raises :class:`CompileError` naming the engine and the layer otherwise."""
    sets = _engine_sets(compiled)
    q.fetch([ir_tensor_of(t.name)[0] for _, engines in sets for t in engines[0].inputs])
    for label, engines in sets:
        engine = engines[0]
        inputs = _inputs(q, label, engine)
        native = run_engine_set(engines, inputs, backend="native")
        reference = engine.run(inputs, backend="reference")
        producers = {t: ins.name for ins in engine.instructions for t in ins.outputs}
        for spec, got, ref in zip(engine.outputs, native, reference):
            if not np.array_equal(got, ref):
                raise CompileError(f"compiler_check: engine {label!r}, layer {producers.get(spec.id, '?')!r}: output "
                                   f"{spec.name!r} differs between the native and the reference executor")


def quantized_outputs(q: QuantizedCodes, outputs: List[str]) -> Dict[str, np.ndarray]:
    """The quantized model's values of the graph ``outputs`` (same order as its own)."""
    got = evaluate(q.qdq, q.feeds)
    return {t: got[u] for t, u in zip(outputs, q.qdq.outputs)}

