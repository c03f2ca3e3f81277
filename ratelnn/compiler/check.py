"""``compiler_check``: the compiled engines against the quantized model on sample data
(docs/multi-batch.md, "Compiler check").

For every engine node, the engine inputs are the quantized model's codes (QDQ graph, numpy
IR evaluator) of its input tensors.  Then:

- the engine set on the native executor (what the framework ops run, batch split included)
  and the engine on the numpy reference executor must give the same bits;
- layer by layer, each instruction fed the quantized model's codes of its inputs must give
  the quantized model's codes of its output within ``TOLERANCE_LSB`` (the two compute the same
  real number and may round it differently, docs/quantization.md §7).
Either failure is a :class:`~ratelnn.compiler.compile.CompileError` naming the engine and the
layer.  The report gives, per engine output, the fraction of codes equal to the quantized
model's and the largest difference, the cosine of each model output (compiled model,
engines native, against the quantized model) and with level 2 one row per layer.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from ..ir import Graph
from ..ir.evaluate import evaluate
from ..npu.batching import decode_engine_set, run_engine_set
from ..npu.engine import Engine, quantize_real
from ..npu.reference import execute_instruction
from ..quantization.emit import emit_qdq
from .compile import CompileError
from .run import run_compiled

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


@dataclasses.dataclass
class CheckReport:
    """What ``compiler_check`` found (module docstring).  ``outputs``: per engine output;
    ``layers``: per layer (level 2 only); ``cosine``: per model output; ``sample``: what the
    sample data was."""

    level: int
    sample: str
    outputs: List[CodeMatch]
    layers: List[CodeMatch]
    cosine: Dict[str, float]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def table(self) -> str:
        lines = [f"compiler_check {self.level}: sample {self.sample}; engines bit-equal native vs reference"]
        lines += [f"  model output {t}: cosine {c:.6f} (compiled vs quantized)" for t, c in self.cosine.items()]
        for title, rows in (("engine outputs", self.outputs), ("layers", self.layers)):
            if rows:
                lines.append(f"  {title}: {'engine':<24} {'layer':<32} {'equal':>8} {'max diff':>8}")
                pad = " " * len(title)
                lines += [f"  {pad}  {r.engine[:24]:<24} {r.layer[:32]:<32} {r.equal:>8.4f} {r.max_diff:>8d}"
                          for r in rows]
        return "\n".join(lines)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 1.0 if na == nb == 0 else float(a @ b / (na * nb)) if na and nb else 0.0


def _match(engine: str, layer: str, tensor: str, got: np.ndarray, want: np.ndarray) -> CodeMatch:
    diff = np.abs(got.astype(np.int64) - want.astype(np.int64))
    return CodeMatch(engine, layer, tensor, float(np.mean(diff == 0)) if diff.size else 1.0,
                     int(diff.max()) if diff.size else 0)


class _QuantizedCodes:
    """The quantized model's codes of IR tensors on the sample (lazily evaluated)."""

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
        name, nhwc = (spec.name[:-5], True) if spec.name.endswith("/nhwc") else (spec.name, False)
        if name not in self.values:
            return None
        qp = self.qgraph.qparams[name]
        codes = quantize_real(self.values[name], float(qp.scale), spec.dtype)
        codes = np.ascontiguousarray(codes.transpose(0, 2, 3, 1)) if nhwc else codes
        return codes if codes.shape[1:] == spec.shape[1:] else None


def _check_layers(label: str, engine: Engine, inputs: List[np.ndarray], q: _QuantizedCodes) -> List[CodeMatch]:
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
            raise CompileError(f"compiler_check: engine {label!r}, layer {ins.name!r}: output {spec.name!r} differs "
                               f"from the quantized model by up to {row.max_diff} codes ({bad} of {want.size} codes "
                               f"beyond {TOLERANCE_LSB} LSB) when fed the quantized model's inputs")
    return rows


def check_compiled(qgraph: Graph, compiled: Graph, config: Mapping[str, Any], feeds: Mapping[str, np.ndarray],
                   level: int, sample: str) -> CheckReport:
    """Run the check of the module docstring on ``feeds`` (graph input -> array); raises
    :class:`CompileError` on a mismatch, else returns the :class:`CheckReport`."""
    q = _QuantizedCodes(qgraph, config, feeds)
    nodes = [n for n in compiled.nodes if n.op == "Engine"]
    sets = {n.name: decode_engine_set(n.attrs["engine"], n.attrs.get("batch_engines", ()),
                                      n.attrs.get("engine_name", n.name)) for n in nodes}
    q.fetch([t.name[:-5] if t.name.endswith("/nhwc") else t.name
             for engines in sets.values() for t in engines[0].tensors] + list(qgraph.outputs))
    outputs, layers = [], []
    for node in nodes:
        label, engines = node.attrs.get("engine_name", node.name), sets[node.name]
        engine = engines[0]
        inputs = [q.codes(spec) for spec in engine.inputs]
        missing = [spec.name for spec, x in zip(engine.inputs, inputs) if x is None]
        if missing:
            raise CompileError(f"compiler_check: engine {label!r}: the quantized model has no codes for its "
                               f"inputs {missing}")
        native = run_engine_set(engines, inputs, backend="native")
        reference = engine.run(inputs, backend="reference")
        producers = {t: ins.name for ins in engine.instructions for t in ins.outputs}
        for spec, got, ref in zip(engine.outputs, native, reference):
            if not np.array_equal(got, ref):
                raise CompileError(f"compiler_check: engine {label!r}, layer {producers.get(spec.id, '?')!r}: output "
                                   f"{spec.name!r} differs between the native and the reference executor")
        rows = _check_layers(label, engine, inputs, q)
        if level >= 2:
            layers += rows
        for spec, got in zip(engine.outputs, native):
            want = q.codes(spec)
            if want is not None:
                outputs.append(_match(label, producers.get(spec.id, "?"), spec.name, got, want))
    model = run_compiled(compiled, _compiled_feeds(compiled, feeds), backend="native")
    quantized = evaluate(q.qdq, feeds)
    cosine = {t: _cosine(model[t], quantized[u]) for t, u in zip(compiled.outputs, q.qdq.outputs)}
    return CheckReport(int(level), sample, outputs, layers, cosine)


def _compiled_feeds(compiled: Graph, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """``feeds`` for the compiled graph: integer inputs (``remove_input_quant``) get codes."""
    out = {}
    for t in compiled.inputs:
        qp, dtype = compiled.qparams.get(t), compiled.tensors[t].dtype
        out[t] = feeds[t] if dtype == "float32" or qp is None else quantize_real(feeds[t], float(qp.scale), dtype)
    return out


def report_json(report: CheckReport) -> str:
    return json.dumps(report.to_dict(), indent=1)
