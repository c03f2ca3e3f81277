"""Per-layer precision analysis: float model vs quantized or compiled model (docs/architecture.md §10).

:func:`analyze` (``ConvertImpl.analyze``) runs, on the same batches,

- the float IR with the numpy evaluator (:mod:`ratelnn.ir.evaluate`);
- ``against="quant"``: the quantized model as a QDQ IR (``emit_qdq(quantized_ir())``) with
  the same evaluator; every layer's value is the dequantized value its readers see;
- ``against="npu"``: the compiled graph, engines on the reference executor, each engine
  instruction's output codes captured and dequantized with the engine tensor's scale
  (engine tensors are named after IR tensors; ``<tensor>/nhwc`` views are transposed back).

and compares every quantized layer's output (one :class:`LayerRow`) and every graph
output: the *EndToEnd* columns, where each layer reads the model's own (quantized) values so
errors accumulate.  With ``method="PerLayer"`` (config ``precision_analysis_method``) each
quantized layer is also fed the *float* model's values of its inputs (quantized to the
inputs' QParams, as the layer's integer form needs them) and its output compared to the float
layer's: the per-layer columns isolate the layer's own error (:class:`_PerLayer`).  Metrics, over all real samples: cosine similarity, SQNR in dB
(``10 log10(sum f^2 / sum (f - q)^2)``, capped at :data:`SQNR_CAP_DB`), max absolute
error, and the percent of float values outside the tensor's integer range (saturated by
the clip).  ``sqnr_drop_db`` is how much SQNR the layer itself loses: the lowest SQNR of
its inputs (at most the ideal SQNR of its dtype) minus its own.  Suggestions (:func:`_suggest`)
re-quantize the worst layers, worst first, in int16 (then fp32) on top of the suggestions
already kept, and keep what recovers the layer without lowering the SQNR of the model's
output; a kept one makes its readers candidates and the layers are ranked again.  Found on
the first batch, they are then checked on all the analyzed data (:func:`_checked`): the model
with them must reach at least the first output's cosine and SQNR of the model without them,
else the last suggestions are dropped until it does (``Report.suggestion_check``).
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from typing import Any, Dict, List, Mapping, Optional

import numpy as np

from .ir import arith

SQNR_CAP_DB = 200.0        # SQNR of an exact match
SUGGEST_DROP_DB = 6.0      # a layer losing this much SQNR (one bit) is a candidate
RECOVERED_DROP_DB = 3.0    # a precision change leaving at most this drop (or half the
                           # original drop) fixes the layer
OUTPUT_TOLERANCE_DB = 0.1  # a suggestion may not lower the output SQNR by more (dB)
MAX_SUGGESTIONS = 3
MAX_TRIES = 2 * MAX_SUGGESTIONS   # layers re-quantized at most, when looking for suggestions
AGAINST = ("quant", "npu")
METHODS = ("EndToEnd", "PerLayer")      # config precision_analysis_method
MODES = {"Reference": "quant", "NPUBackend": "npu"}   # config precision_analysis_mode -> against
PER_LAYER = "\0per_layer:"   # accumulator key prefix of the PerLayer measurements
INPUT_OP = "Input"         # LayerRow.op of a quantized graph input


def ideal_sqnr_db(dtype: str) -> float:
    """SQNR of uniform quantization of a full-scale signal with ``dtype``'s bits
    (6.02 b + 1.76 dB): a layer at least this precise loses nothing to its inputs."""
    bits = {"int8": 8, "uint8": 8, "int16": 16}.get(dtype, 32)
    return 6.02 * bits + 1.76


# ------------------------------------------------------------------ metrics
class _Accumulator:
    """Running sums of one tensor's float vs quantized values (float64)."""

    def __init__(self, low: float = -math.inf, high: float = math.inf, channel_axis: int = -1) -> None:
        self.low, self.high = low, high
        self.axis = channel_axis
        self.ff = self.qq = self.fq = self.ee = 0.0
        self.channel_ff: Optional[np.ndarray] = None
        self.channel_ee: Optional[np.ndarray] = None
        self.max_abs = 0.0
        self.saturated = 0
        self.count = 0

    def add(self, f: np.ndarray, q: np.ndarray) -> None:
        f, q = np.asarray(f, np.float64), np.asarray(q, np.float64)
        if f.shape != q.shape:
            raise ValueError(f"float and quantized values differ in shape ({f.shape} vs {q.shape})")
        if f.ndim:
            fc = np.moveaxis(f, self.axis, -1).reshape(-1, f.shape[self.axis])
            ec = fc - np.moveaxis(q, self.axis, -1).reshape(fc.shape)
            ff_c, ee_c = (fc * fc).sum(axis=0), (ec * ec).sum(axis=0)
            self.channel_ff = ff_c if self.channel_ff is None else self.channel_ff + ff_c
            self.channel_ee = ee_c if self.channel_ee is None else self.channel_ee + ee_c
        f, q = f.reshape(-1), q.reshape(-1)
        e = f - q
        self.ff += float(f @ f)
        self.qq += float(q @ q)
        self.fq += float(f @ q)
        self.ee += float(e @ e)
        self.max_abs = max(self.max_abs, float(np.max(np.abs(e), initial=0.0)))
        self.saturated += int(np.count_nonzero((f > self.high) | (f < self.low)))
        self.count += f.size

    def merge(self, other: "_Accumulator") -> None:
        """Add the sums of ``other`` (the same tensor measured on other samples)."""
        self.ff += other.ff
        self.qq += other.qq
        self.fq += other.fq
        self.ee += other.ee
        if other.channel_ff is not None:
            self.channel_ff = other.channel_ff if self.channel_ff is None else self.channel_ff + other.channel_ff
            self.channel_ee = other.channel_ee if self.channel_ee is None else self.channel_ee + other.channel_ee
        self.max_abs = max(self.max_abs, other.max_abs)
        self.saturated += other.saturated
        self.count += other.count

    @property
    def cosine(self) -> float:
        if self.ff == 0 and self.qq == 0:
            return 1.0
        if self.ff == 0 or self.qq == 0:
            return 0.0
        return float(np.clip(self.fq / math.sqrt(self.ff * self.qq), -1.0, 1.0))

    @property
    def sqnr_db(self) -> float:
        if self.ee == 0:
            return SQNR_CAP_DB
        if self.ff == 0:
            return -SQNR_CAP_DB
        return float(min(10.0 * math.log10(self.ff / self.ee), SQNR_CAP_DB))

    @property
    def channel_sqnr_db(self) -> float:
        """Mean over channels (with signal) of each channel's SQNR: low when the tensor's
        scale, set by a few large channels, leaves the others with few codes."""
        if self.channel_ff is None:
            return self.sqnr_db
        live = self.channel_ff > 0
        if not np.any(live):
            return self.sqnr_db
        with np.errstate(divide="ignore"):
            per = 10.0 * np.log10(self.channel_ff[live] / self.channel_ee[live])
        return float(np.mean(np.clip(per, -SQNR_CAP_DB, SQNR_CAP_DB)))

    @property
    def saturated_percent(self) -> float:
        return 100.0 * self.saturated / self.count if self.count else 0.0


def similarity(f: np.ndarray, q: np.ndarray) -> Dict[str, float]:
    """cosine, sqnr_db and max_abs_error of two arrays of the same size."""
    acc = _Accumulator()
    acc.add(f, q)
    return {"cosine": acc.cosine, "sqnr_db": acc.sqnr_db, "max_abs_error": acc.max_abs}


# ------------------------------------------------------------------ report
@dataclasses.dataclass
class LayerRow:
    """One quantized layer: IR node ``name``, its ``op``, output ``tensor`` with its
    quantized ``dtype`` and ``shape``, and the metrics of the module docstring
    (``channel_sqnr_db``: mean of the per-channel SQNRs; ``sqnr_drop_db`` is computed on it).
    A quantized graph input is a row too: ``op`` :data:`INPUT_OP`, ``name`` = ``tensor`` = the
    input's name, its drop measured from its dtype's ideal SQNR."""

    name: str
    op: str
    tensor: str
    dtype: str
    shape: List[Optional[int]]
    cosine: float
    sqnr_db: float
    channel_sqnr_db: float
    sqnr_drop_db: float
    max_abs_error: float
    saturated_percent: float
    per_layer_cosine: Optional[float] = None     # method PerLayer: the layer fed float inputs
    per_layer_sqnr_db: Optional[float] = None


@dataclasses.dataclass
class Suggestion:
    """Run layer ``layer`` in ``data_type``: the channel SQNR of the layer it fixes (itself, or
    the graph input it reads) goes from ``sqnr_db`` to ``sqnr_db_after`` and the first
    output's from ``output_sqnr_db`` to ``output_sqnr_db_after`` (measured on the first
    analysis batch, quantized model, with the suggestions before it applied)."""

    layer: str
    data_type: str
    sqnr_db: float
    sqnr_db_after: float
    output_sqnr_db: float
    output_sqnr_db_after: float
    reason: str


@dataclasses.dataclass
class Report:
    """Result of :func:`analyze`.

    ``rows``: one :class:`LayerRow` per quantized layer, in graph order.
    ``output_similarity``: graph output -> {cosine, sqnr_db, max_abs_error[, top1_agreement]}.
    ``suggestions``: :class:`Suggestion` list, most useful first.
    ``suggestion_check``: the first output's cosine and SQNR on all the analyzed samples
    without (``"without"``) and with (``"with"``) the suggestions kept, and how many of the
    suggestions found were dropped because they lowered either (``"dropped"``); empty when
    nothing was suggested.
    ``method``: ``"PerLayer"`` when the rows also hold the per-layer columns, else ``"EndToEnd"``.
    """

    against: str
    num_samples: int
    rows: List[LayerRow]
    output_similarity: Dict[str, Dict[str, float]]
    suggestions: List[Suggestion]
    suggestion_check: Dict[str, Any] = dataclasses.field(default_factory=dict)
    method: str = "EndToEnd"

    def worst(self, n: int = 5) -> List[LayerRow]:
        """The ``n`` rows with the largest SQNR drop."""
        return sorted(self.rows, key=lambda r: r.sqnr_drop_db, reverse=True)[:n]

    def layer_configs(self) -> List[Dict[str, str]]:
        """``layer_configs`` entries applying the suggestions (config key of docs/architecture.md §3)."""
        return [{"layer_name": s.layer, "data_type": s.data_type} for s in self.suggestions]

    def table(self) -> str:
        """The rows, output similarity and suggestions as aligned text."""
        per_layer = self.method == "PerLayer"
        head = ("layer", "op", "dtype", "shape", "cosine", "SQNR dB") + (
            ("PerLayer cos", "PerLayer SQNR") if per_layer else ()) + (
            "chan SQNR dB", "drop dB", "max abs err", "sat %")
        body = [(r.name, r.op, r.dtype, "x".join("?" if d is None else str(d) for d in r.shape),
                 f"{r.cosine:.6f}", f"{r.sqnr_db:.2f}") + (
                     (f"{r.per_layer_cosine:.6f}", f"{r.per_layer_sqnr_db:.2f}") if per_layer else ()) + (
                 f"{r.channel_sqnr_db:.2f}", f"{r.sqnr_drop_db:.2f}",
                 f"{r.max_abs_error:.4g}", f"{r.saturated_percent:.3f}") for r in self.rows]
        widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
        lines = [f"float vs {self.against} on {self.num_samples} samples" + (
            " (cosine, SQNR: end to end; PerLayer: each layer fed the float inputs)" if per_layer else "")]
        for i, row in enumerate([head] + body):
            lines.append("  ".join(str(c).ljust(w) if j < 4 else str(c).rjust(w)
                                   for j, (c, w) in enumerate(zip(row, widths))))
            if i == 0:
                lines.append("  ".join("-" * w for w in widths))
        return "\n".join(lines + self.summary_lines())

    def summary_lines(self) -> List[str]:
        """The lines of :meth:`table` after the rows: output similarity, suggestions."""
        lines = [f"output {out}: " + ", ".join(f"{k} {v:.6g}" for k, v in sim.items())
                 for out, sim in self.output_similarity.items()]
        check = self.suggestion_check
        if check:
            w, wo = check["with"], check["without"]
            lines.append(f"suggestions checked on {self.num_samples} samples: output cosine "
                         f"{wo['cosine']:.6f} -> {w['cosine']:.6f}, SQNR {wo['sqnr_db']:.2f} -> "
                         f"{w['sqnr_db']:.2f} dB" + (f"; {check['dropped']} dropped for lowering them"
                                                     if check["dropped"] else ""))
        if self.suggestions:
            for s in self.suggestions:
                lines.append(f"suggest {s.data_type} for {s.layer}: {s.reason}")
        elif any(r.sqnr_drop_db >= SUGGEST_DROP_DB for r in self.rows):
            lines.append(f"no int16 or fp32 change of the layers losing {SUGGEST_DROP_DB:g} dB or more "
                         "recovers them without lowering the output SQNR: nothing to suggest")
        else:
            lines.append(f"no layer loses more than {SUGGEST_DROP_DB:g} dB of SQNR: nothing to suggest")
        return lines

    def __str__(self) -> str:
        return self.table()

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def to_json(self, path: Optional[str] = None) -> str:
        """The report as JSON text (also written to ``path`` if given, atomically)."""
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            from .fileio import write_atomic
            write_atomic(path, text.encode())
        return text

    @classmethod
    def from_json(cls, text: str) -> "Report":
        d = json.loads(text)
        return cls(d["against"], d["num_samples"], [LayerRow(**r) for r in d["rows"]],
                   d["output_similarity"], [Suggestion(**s) for s in d["suggestions"]],
                   d.get("suggestion_check", {}), d.get("method", "EndToEnd"))


# ------------------------------------------------------------------ model values
def _clip_range(qp) -> tuple:
    """Float values outside (low, high) saturate when quantized with ``qp``."""
    lo, hi = arith.QRANGE[qp.dtype]
    scale = float(np.max(np.asarray(qp.scale, np.float64)))
    return (lo - 0.5) * scale, (hi + 0.5) * scale


def _dequantized_names(qdq) -> Dict[str, str]:
    """QDQ graph: quantized tensor -> the tensor holding its dequantized value."""
    producers = {t: n for n in qdq.nodes for t in n.outputs}
    result = {}
    for n in qdq.nodes:
        if n.op == "Dequant" and n.inputs[0] in producers and producers[n.inputs[0]].op == "Quant":
            result[producers[n.inputs[0]].inputs[0]] = n.outputs[0]
    return result


def _real_rows(value: np.ndarray, batch_size: int, size: int) -> np.ndarray:
    if size < batch_size and value.ndim and value.shape[0] == batch_size:
        return value[:size]
    return value


class _CompiledRunner:
    """The compiled graph with engines on the reference executor, capturing every engine
    tensor named after an IR tensor of ``wanted`` as dequantized float."""

    def __init__(self, compiled, wanted) -> None:
        self.graph = compiled
        self.wanted = set(wanted)

    def run(self, feeds: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        from .compiler.run import compiled_values, in_ir_layout, ir_tensor_of
        captured: Dict[str, np.ndarray] = {}

        def record(engine, layer, spec, codes) -> None:
            name, nhwc = ir_tensor_of(spec.name)
            if name in self.wanted and (name not in captured or not nhwc):
                captured[name] = in_ir_layout(codes.astype(np.float32) * np.float32(spec.scale), nhwc)

        values = compiled_values(self.graph, feeds, capture=record)
        for t in self.wanted - set(captured):
            info = self.graph.tensors.get(t)
            if t in values and (info is None or info.dtype == "float32"):
                captured[t] = values[t]
        return captured


class _QuantModel:
    """The quantized model as a QDQ IR on the numpy evaluator: ``run(feeds, tensors)`` ->
    {IR tensor: the dequantized value its readers see}."""

    def __init__(self, qgraph, config: Mapping[str, Any]) -> None:
        from .quantization.emit import emit_qdq
        self.qdq = emit_qdq(qgraph, config)
        self.names = _dequantized_names(self.qdq)

    def run(self, feeds, tensors) -> Dict[str, np.ndarray]:
        from .ir.evaluate import evaluate
        fetched = evaluate(self.qdq, feeds, [self.names.get(t, t) for t in tensors])
        return {t: fetched[self.names.get(t, t)] for t in tensors}


class _CompiledModel:
    """The compiled model, engines on the reference executor: ``run(feeds, tensors)`` ->
    {IR tensor: value} (engine tensors dequantized)."""

    def __init__(self, qgraph, config: Mapping[str, Any], device_info) -> None:
        from .compiler import compile_graph
        self.compiled = compile_graph(qgraph, config, device_info)
        self.runners: Dict[tuple, _CompiledRunner] = {}

    def run(self, feeds, tensors) -> Dict[str, np.ndarray]:
        key = tuple(tensors)
        if key not in self.runners:
            self.runners[key] = _CompiledRunner(self.compiled, tensors)
        got = self.runners[key].run(feeds)
        missing = [t for t in tensors if t not in got]
        if missing:
            raise RuntimeError(f"the compiled model holds no float or engine value for {missing}")
        return got

    def __getstate__(self):   # runners hold decoded engines: rebuilt where the model runs
        return {"compiled": self.compiled, "runners": {}}


def _model(conv, against: str, qgraph, config: Mapping[str, Any]):
    """The quantized (``against="quant"``) or compiled model made from ``qgraph``."""
    if against == "quant":
        return _QuantModel(qgraph, config)
    return _CompiledModel(qgraph, config, conv.device_info)


class _Measure:
    """Float model vs quantized/compiled model on blocks of batches (picklable, so a
    ``ratelnn.distributed.RayExecutor`` can run it on its workers).

    ``measure(block)``, ``block`` an iterable of ``(feeds, real samples)`` batches: the
    accumulators of every measured tensor (and, with ``per_layer``, of every layer fed the
    float inputs, keyed ``PER_LAYER + tensor``) and the real rows of every graph output, float
    and model, in batch order."""

    def __init__(self, graph, model, tensors: List[str], outputs: List[str],
                 accumulators: Mapping[str, _Accumulator], batch_size: int, per_layer=None) -> None:
        self.graph, self.model, self.per_layer = graph, model, per_layer
        self.tensors, self.outputs = tensors, outputs
        self.fetch = tensors + [o for o in outputs if o not in tensors]
        self.accumulators = accumulators
        self.batch_size = batch_size

    def __call__(self, block, on_batch=None):
        from .ir.evaluate import evaluate
        acc = copy.deepcopy(self.accumulators)
        float_out: Dict[str, List[np.ndarray]] = {o: [] for o in self.outputs}
        model_out: Dict[str, List[np.ndarray]] = {o: [] for o in self.outputs}
        samples = 0
        for feeds, size in block:
            f_vals = evaluate(self.graph, feeds, self.fetch)
            q_vals = self.model.run(feeds, self.fetch)
            for t, v in (self.per_layer.run(f_vals) if self.per_layer else {}).items():
                acc[PER_LAYER + t].add(_real_rows(f_vals[t], self.batch_size, size),
                                       _real_rows(v, self.batch_size, size))
            for t in self.fetch:
                f = _real_rows(f_vals[t], self.batch_size, size)
                q = _real_rows(q_vals[t], self.batch_size, size)
                if t in acc:
                    acc[t].add(f, q)
                if t in float_out:
                    float_out[t].append(f)
                    model_out[t].append(q)
            samples += size
            if on_batch is not None:
                on_batch()
        return acc, float_out, model_out, samples


class _PerLayer:
    """Method PerLayer: every quantized layer of ``qgraph`` fed the float model's values of its
    activation inputs.  ``against="quant"`` (mode Reference): the layer as the quantized model
    computes it (inputs Quant->Dequant at their QParams, float32 op on dequantized params,
    output Quant->Dequant); ``"npu"`` (mode NPUBackend): the layer compiled alone into an engine
    and run on the reference executor (bit-exact with the native one), inputs quantized at the
    engine border.  The two differ by the 1-LSB rounding differences of
    docs/quantization.md §7, not by construction identical."""

    def __init__(self, conv, qgraph, nodes, against: str, config: Mapping[str, Any]) -> None:
        from .quantization.policy import activation_inputs
        self.qgraph, self.nodes = qgraph, nodes
        self.round_mode = config.get("round_mode", "half_away_from_zero")
        self.inputs = {n.name: activation_inputs(qgraph, n) for n in nodes}
        self.params = {t: self._dequantized_param(t) for n in nodes for t in n.inputs if qgraph.is_param(t)}
        self.engines: Dict[str, _CompiledModel] = {}
        if against == "npu":
            plain = dict(config, remove_input_quant=False, static_batch_sizes=[])
            for n in nodes:
                self.engines[n.name] = _CompiledModel(self._layer_graph(n), plain, conv.device_info)

    def _dequantized_param(self, t: str) -> np.ndarray:
        qp = self.qgraph.qparams.get(t)
        value = np.asarray(self.qgraph.params[t])
        return value if qp is None else arith.dequantize(value, qp.scale, qp.axis)

    def _qdq(self, x: np.ndarray, t: str) -> np.ndarray:
        qp = self.qgraph.qparams[t]
        return arith.dequantize(arith.quantize(x, qp.scale, qp.dtype, qp.axis, self.round_mode), qp.scale, qp.axis)

    def _layer_graph(self, node):
        """A graph of ``node`` alone: its activation inputs as graph inputs, its params."""
        from .ir import Graph
        q = self.qgraph
        g = Graph(name=f"{q.name}_{node.name}".replace("/", "_"))
        for t in self.inputs[node.name]:
            g.add_input(t, q.tensors[t].shape, "float32")
        for t in node.inputs:
            if q.is_param(t) and t not in g.params:
                g.add_param(t, q.params[t])
        g.add_node(copy.deepcopy(node), [copy.deepcopy(q.tensors[node.outputs[0]])])
        g.outputs = [node.outputs[0]]
        g.qparams = {t: q.qparams[t] for t in list(g.tensors) if t in q.qparams}
        return g

    def run(self, float_values: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
        """Output tensor of every layer -> its per-layer (dequantized) value."""
        from .ir.evaluate import evaluate_node
        out = {}
        for n in self.nodes:
            t = n.outputs[0]
            if n.name in self.engines:
                out[t] = self.engines[n.name].run({i: float_values[i] for i in self.inputs[n.name]}, [t])[t]
                continue
            args = [self.params[i] if i in self.params else self._qdq(float_values[i], i) for i in n.inputs]
            out[t] = self._qdq(evaluate_node(n, args)[0], t)
        return out


# ------------------------------------------------------------------ analysis
def _channel_axis(conv, tensor: str) -> int:
    """Channel axis of an IR tensor: 1 for rank-4 NCHW tensors (MXNet, or a producer with
    ``layout="NCHW"``), else the last axis."""
    shape = conv.graph.tensors[tensor].shape
    if len(shape) != 4:
        return -1
    producer = conv.graph.producer(tensor)
    layout = producer.attrs.get("layout") if producer is not None else None
    if layout is None:
        layout = "NCHW" if conv.handler.framework in ("mxnet", "onnx") else "NHWC"
    return 1 if layout == "NCHW" else -1


def _layers(qgraph, config):
    """(quantized nodes, tensors to measure) of the quantized IR."""
    from .quantization.policy import activation_inputs, make_plan
    plan = make_plan(qgraph, config)
    nodes = [n for n in qgraph.nodes if plan.is_quantized(n)]
    tensors = []
    for n in nodes:
        for t in activation_inputs(qgraph, n) + [n.outputs[0]]:
            if t not in tensors:
                tensors.append(t)
    return nodes, tensors


def _output_similarity(float_out: Dict[str, List[np.ndarray]], model_out: Dict[str, List[np.ndarray]]):
    result = {}
    for name in float_out:
        f, q = np.concatenate(float_out[name]), np.concatenate(model_out[name])
        sim = similarity(f, q)
        if f.ndim == 2 and f.shape[1] > 1:
            sim["top1_agreement"] = float(np.mean(np.argmax(f, 1) == np.argmax(q, 1)))
        result[name] = sim
    return result


def _accumulators(conv, qgraph, tensors) -> Dict[str, _Accumulator]:
    return {t: _Accumulator(*(_clip_range(qgraph.qparams[t]) if t in qgraph.qparams else (-math.inf, math.inf)),
                            channel_axis=_channel_axis(conv, t))
            for t in tensors}


def _rows(conv, qgraph, nodes, acc: Mapping[str, _Accumulator]) -> List[LayerRow]:
    """One LayerRow per quantized graph input, then per quantized node (module docstring)."""
    from .quantization.policy import activation_inputs

    def row(name: str, op: str, t: str, input_sqnrs: List[float]) -> LayerRow:
        dtype, own = qgraph.qparams[t].dtype, acc[t].channel_sqnr_db
        drop = max(min(input_sqnrs + [ideal_sqnr_db(dtype)]) - own, 0.0)
        return LayerRow(name, op, t, dtype, list(conv.graph.tensors[t].shape), acc[t].cosine,
                        acc[t].sqnr_db, own, drop, acc[t].max_abs, acc[t].saturated_percent)

    return ([row(t, INPUT_OP, t, []) for t in conv.graph.inputs if t in acc and t in qgraph.qparams]
            + [row(n.name, n.op, n.outputs[0],
                   [acc[i].channel_sqnr_db for i in activation_inputs(qgraph, n) if i in acc])
               for n in nodes])


def _quant_rows(conv, stats, extra_layer_configs, feeds, float_values) -> tuple:
    """(rows, SQNR of the first output) of the quantized model with ``extra_layer_configs``
    appended to the config, on one batch (``float_values``: the float model's tensors on
    ``feeds``; any it lacks are evaluated)."""
    from .ir.evaluate import evaluate
    config = copy.deepcopy(conv.config)
    config["layer_configs"] = list(config.get("layer_configs") or []) + extra_layer_configs
    qgraph = conv.quantize(stats, config)
    nodes, tensors = _layers(qgraph, config)
    out = conv.graph.outputs[0]
    got = _QuantModel(qgraph, config).run(feeds, tensors + [out])
    missing = [t for t in dict.fromkeys(tensors + [out]) if t not in float_values]   # out: fp32 layers may end the model
    float_values = dict(float_values, **(evaluate(conv.graph, feeds, missing) if missing else {}))
    acc = _accumulators(conv, qgraph, tensors)
    for t in tensors:
        acc[t].add(float_values[t], got[t])
    return _rows(conv, qgraph, nodes, acc), similarity(float_values[out], got[out])["sqnr_db"]


def layer_rows(conv, feeds: Mapping[str, np.ndarray]) -> List[LayerRow]:
    """The :class:`LayerRow` of every quantized layer of ``conv``'s quantized model (its
    config, statistics in its ``output_dir``) against the float model on one batch ``feeds``;
    raises ``ratelnn.ir.evaluate.EvaluationError`` when the numpy evaluator cannot run the
    graph (Opaque framework ops)."""
    from .calibration.stats import load_statistics
    return _quant_rows(conv, load_statistics(conv.config["output_dir"]), [], feeds, {})[0]


def _precision_options(conv, row: LayerRow) -> List[tuple]:
    """(data_type, layer_configs entries) to try for ``row``, in order: the layer in int16, then
    in fp32; a graph input cannot be fp32 itself, so its fp32 option is its readers in fp32."""
    if row.op != INPUT_OP:
        return [(dt, [{"layer_name": row.name, "data_type": dt}]) for dt in ("int16", "fp32")]
    readers = [{"layer_name": n.name, "data_type": "fp32"} for n in conv.graph.consumers(row.tensor)]
    return [("int16", [{"layer_name": row.name, "data_type": "int16"}])] + ([("fp32", readers)] if readers else [])


def _suggest(conv, stats, rows: List[LayerRow], feeds, float_values, output_sqnr: float) -> List[Suggestion]:
    """Greedy: the worst candidate layer not tried yet (drop >= SUGGEST_DROP_DB) in int16, else
    fp32, on top of the suggestions kept so far.  Candidates: the layers dropping that much in
    ``rows``, and the direct readers of a layer once a suggestion for it is kept (fixing a layer
    can expose its reader: a Sub of per-feature means behind an int8 graph input); after each
    suggestion kept, the layers are ranked again on the first batch with it applied."""
    result: List[Suggestion] = []
    accepted: List[Dict[str, str]] = []
    candidates = {r.name for r in rows if r.sqnr_drop_db >= SUGGEST_DROP_DB}
    tried = set()
    for _ in range(MAX_TRIES):
        untried = candidates - tried
        row = next((r for r in sorted(rows, key=lambda r: r.sqnr_drop_db, reverse=True)
                    if r.sqnr_drop_db >= SUGGEST_DROP_DB and r.name in untried), None)
        if row is None or len(result) >= MAX_SUGGESTIONS:
            break
        tried.add(row.name)
        input_sqnr = row.channel_sqnr_db + row.sqnr_drop_db
        for data_type, entries in _precision_options(conv, row):
            new_rows, out_sqnr = _quant_rows(conv, stats, accepted + entries, feeds, float_values)
            sqnr = next((r.channel_sqnr_db for r in new_rows if r.name == row.name), SQNR_CAP_DB)
            recovers = input_sqnr - sqnr <= max(RECOVERED_DROP_DB, row.sqnr_drop_db / 2)
            # a change that makes the model's output worse is no suggestion, whatever it
            # does to the layer itself
            if (recovers or data_type == "fp32") and out_sqnr >= output_sqnr - OUTPUT_TOLERANCE_DB:
                for entry in entries:
                    reason = (f"{row.name} loses {row.sqnr_drop_db:.1f} dB SQNR in {row.dtype} "
                              f"({row.saturated_percent:.2f}% saturated); with {entry['layer_name']} in "
                              f"{data_type}: its channel SQNR {row.channel_sqnr_db:.1f} -> {sqnr:.1f} dB, "
                              f"output SQNR {output_sqnr:.1f} -> {out_sqnr:.1f} dB")
                    result.append(Suggestion(entry["layer_name"], data_type, row.channel_sqnr_db, sqnr,
                                             output_sqnr, out_sqnr, reason))
                accepted.extend(entries)
                candidates.update(n.name for n in conv.graph.consumers(row.tensor))
                rows, output_sqnr = new_rows, out_sqnr
                break
    return result


def analyze(conv, data: Any = None, against: Optional[str] = None, batch_size: Optional[int] = None,
            max_batches: Optional[int] = None, progress: bool = False, executor: Any = None,
            method: Optional[str] = None) -> Report:
    """The :class:`Report` of converter ``conv`` on ``data`` (any calibration data form; None:
    the config's ``precision_analysis_data``, else its ``calibration_data``).

    ``against``: ``"quant"`` or ``"npu"``; default from config ``precision_analysis_mode``
    (``Reference`` -> quant, ``NPUBackend`` -> npu).  ``method``: ``"PerLayer"`` (adds the
    per-layer columns) or ``"EndToEnd"``; default config ``precision_analysis_method``
    (PerLayer).
    ``executor``: measure blocks of batches elsewhere, e.g. on the workers of a
    ``ratelnn.distributed.RayExecutor`` (docs/distributed.md); the sums of the shards are
    added in batch order, so the report equals the one-process report up to float64
    summation order (the suggestions, made on the first batch here, are the same)."""
    import itertools

    from .calibration.progress import Progress
    from .calibration.stats import load_statistics
    from .config import ConfigError
    from .ir.evaluate import evaluate
    mode = conv.config.get("precision_analysis_mode", "Reference")
    method = method or conv.config.get("precision_analysis_method", "PerLayer")
    if mode not in MODES:
        raise ConfigError(f"config key 'precision_analysis_mode' must be one of {tuple(MODES)}, got {mode!r}")
    if method not in METHODS:
        raise ConfigError(f"precision_analysis_method must be one of {METHODS}, got {method!r}")
    against = against or MODES[mode]
    if against not in AGAINST:
        raise ValueError(f"against must be one of {AGAINST}, got {against!r}")
    if data is None:
        data = conv.config.get("precision_analysis_data") or conv.config.get("calibration_data")
        if data is None:
            raise ValueError("analyze() needs data: pass it, or set the config key precision_analysis_data "
                             "or calibration_data")
    stats = load_statistics(conv.config["output_dir"])
    qgraph = conv.quantize(stats)
    nodes, tensors = _layers(qgraph, conv.config)
    outputs = list(conv.graph.outputs)
    batches = conv.calibration_data(data, batch_size)
    per_layer = _PerLayer(conv, qgraph, nodes, against, conv.config) if method == "PerLayer" else None
    accumulators = _accumulators(conv, qgraph, tensors)
    accumulators.update((PER_LAYER + n.outputs[0], _Accumulator()) for n in (nodes if per_layer else ()))
    measure = _Measure(conv.graph, _model(conv, against, qgraph, conv.config), tensors, outputs,
                       accumulators, batches.batch_size, per_layer)
    total = batches.num_batches if max_batches is None else min(max_batches, batches.num_batches or max_batches)
    first: List[Any] = []

    def feeds():
        for batch in itertools.islice(batches, max_batches):
            if not first:
                first.append(batch.feeds)
            yield batch.feeds, batch.size

    if executor is None:
        with Progress(total, f"analyze ({against})", enabled=progress) as bar:
            parts = [measure(feeds(), bar.update)]
    else:
        parts = executor.map_blocks(measure, feeds(), total=total, label=f"analyze ({against})",
                                    progress=progress)
    if not first:
        raise ValueError("analyze() got no data: the data source yielded no batch")
    acc, float_out, model_out, samples = parts[0]
    for part_acc, part_float, part_model, part_samples in parts[1:]:
        for t, a in part_acc.items():
            acc[t].merge(a)
        for o in outputs:
            float_out[o].extend(part_float[o])
            model_out[o].extend(part_model[o])
        samples += part_samples
    rows = _rows(conv, qgraph, nodes, acc)
    for row in rows if per_layer else ():
        if row.op == INPUT_OP:    # a graph input's own quantization is all there is
            row.per_layer_cosine, row.per_layer_sqnr_db = row.cosine, row.sqnr_db
        else:
            row.per_layer_cosine = acc[PER_LAYER + row.tensor].cosine
            row.per_layer_sqnr_db = acc[PER_LAYER + row.tensor].sqnr_db
    output_sim = _output_similarity(float_out, model_out)
    first_values = evaluate(conv.graph, first[0], measure.fetch)
    suggestions = _suggest(conv, stats, rows, first[0], first_values, output_sim[outputs[0]]["sqnr_db"])

    def run_all(model) -> tuple:
        """(float, model) first-output values per batch over all the analyzed batches."""
        check = _Measure(conv.graph, model, [], outputs[:1], {}, batches.batch_size)
        block = ((b.feeds, b.size) for b in itertools.islice(batches, max_batches))
        blocks = (check(block),) if executor is None else \
            executor.map_blocks(check, block, total=total, label="analyze (check)", progress=progress)
        return ([v for b in blocks for v in b[1][outputs[0]]], [v for b in blocks for v in b[2][outputs[0]]])

    suggestions, check = _checked(conv, stats, against, suggestions, run_all,
                                  float_out[outputs[0]], model_out[outputs[0]])
    return Report(against, samples, rows, output_sim, suggestions, check, method)


def _checked(conv, stats, against: str, suggestions: List[Suggestion], run_all,
             float_first: List[np.ndarray], model_first: List[np.ndarray]):
    """(suggestions kept, check) — the suggestions found on the first batch, evaluated on
    every analyzed batch (``run_all(model)``): the first output's cosine and SQNR against
    those of the model without them (``float_first``/``model_first``: per batch); the last
    ones are dropped until neither metric is lower."""
    if not suggestions:
        return suggestions, {}

    def metric(fs, qs) -> Dict[str, float]:
        acc = _Accumulator()
        for f, q in zip(fs, qs):
            acc.add(f, q)
        return {"cosine": acc.cosine, "sqnr_db": acc.sqnr_db}

    base = metric(float_first, model_first)
    kept = list(suggestions)
    while kept:
        config = copy.deepcopy(conv.config)
        config["layer_configs"] = list(config.get("layer_configs") or []) + \
            [{"layer_name": s.layer, "data_type": s.data_type} for s in kept]
        with_them = metric(*run_all(_model(conv, against, conv.quantize(stats, config), config)))
        if with_them["cosine"] >= base["cosine"] and with_them["sqnr_db"] >= base["sqnr_db"]:
            return kept, {"without": base, "with": with_them, "dropped": len(suggestions) - len(kept)}
        kept.pop()
    return [], {"without": base, "with": base, "dropped": len(suggestions)}
