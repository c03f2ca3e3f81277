"""``compiler_check``: the compiled model against the quantized model on a sample
(docs/multi-batch.md, "Compiler check"; Pulsar2's ``compiler.check``).

The compiled model runs its engines on the native executor (what the framework ops run,
batch split included).  It is compared with the **golden**: the quantized model in the
engines' integer arithmetic, every NPU layer lowered alone into its own engine
(``compile_graph(..., layer_by_layer=True)``: no regions, no batch split, integer codes
passed from layer to layer) and run on the numpy reference executor.  ``level``:

- 1, all close: ``|compiled - golden| <= atol + rtol * |golden|`` on every real value
  (``compiler_check_atol``, ``compiler_check_rtol``; Pulsar2's defaults 0 and 1e-5);
- 2, all equal: identical values (engine tensors: identical codes);
- 3, cosine: the cosine similarity of each tensor at least ``compiler_check_cosine`` (0.999).

``mode`` ``CheckOutput`` compares the model outputs; ``CheckPerLayer`` also the output of
every engine layer (the compiled engines re-run on the reference executor, which is
bit-identical to the native one, capturing each instruction's codes).  A failure is a
:class:`CompileError` naming the first layer, in graph order, whose output differs, and by
how much (in CheckOutput mode it is looked for once an output differs).  Whatever the level,
first (:mod:`.check_quantized`): each layer of the golden, fed the QDQ quantized model's
codes, within one code of them, and every compiled engine bit-equal on the native and the
reference executor.
"""
from __future__ import annotations

import dataclasses
import json
import math
from typing import Any, Dict, List, Mapping, Optional, Tuple

import numpy as np

from ..ir import Graph, arith
from .check_quantized import CodeMatch, QuantizedCodes, check_layers, check_native, quantized_outputs
from .compile import CompileError, compile_graph
from .run import compiled_values, in_ir_layout, ir_tensor_of, run_compiled

LEVELS = {1: "all close", 2: "all equal", 3: "cosine"}


@dataclasses.dataclass
class TensorMatch:
    """One tensor of the compiled model against the golden: ``engine`` and ``layer`` (the IR
    node; empty for a model output), IR ``tensor``, ``size`` (values), ``failed`` (values
    outside the level's tolerance; all of them when the cosine is too low), ``equal``
    (fraction identical), ``max_abs_diff`` (real units), ``max_code_diff`` (codes, engine
    tensors of one scale; None otherwise), ``cosine``, ``passed``."""

    engine: str
    layer: str
    tensor: str
    size: int
    failed: int
    equal: float
    max_abs_diff: float
    max_code_diff: Optional[int]
    cosine: float
    passed: bool

    def describe(self) -> str:
        where = f"engine {self.engine!r}, layer {self.layer!r}: output {self.tensor!r}" if self.layer \
            else f"model output {self.tensor!r}"
        codes = "" if self.max_code_diff is None else \
            f"up to {self.max_code_diff} code{'' if self.max_code_diff == 1 else 's'}, "
        return (f"{where} differs from the quantized model by {codes}max |diff| {self.max_abs_diff:.6g}, "
                f"cosine {self.cosine:.6f} ({self.failed} of {self.size} values fail)")


@dataclasses.dataclass
class Tolerance:
    """The criterion of one check level (module docstring)."""

    level: int
    rtol: float = 1e-5
    atol: float = 0.0
    min_cosine: float = 0.999

    def describe(self) -> str:
        if self.level == 1:
            return f"all close: |compiled - quantized| <= {self.atol:g} + {self.rtol:g} |quantized|"
        if self.level == 2:
            return "all equal"
        return f"cosine >= {self.min_cosine:g}"

    def match(self, engine: str, layer: str, tensor: str, got: np.ndarray, want: np.ndarray,
              codes: Optional[Tuple[np.ndarray, np.ndarray]] = None) -> TensorMatch:
        """``got`` (compiled) vs ``want`` (golden), real values; ``codes``: the two as codes."""
        g, w = np.asarray(got, np.float64).ravel(), np.asarray(want, np.float64).ravel()
        if g.shape != w.shape:
            return TensorMatch(engine, layer, tensor, int(w.size), int(w.size), 0.0, math.inf, None, 0.0, False)
        diff = np.abs(g - w)
        cosine = _cosine(g, w)
        if self.level == 1:
            failed = int(np.count_nonzero(~(diff <= self.atol + self.rtol * np.abs(w))))
        elif self.level == 2:
            failed = int(np.count_nonzero(g != w) if codes is None else np.count_nonzero(codes[0] != codes[1]))
        else:
            failed = 0 if cosine >= self.min_cosine else int(w.size)
        code_diff = None if codes is None else \
            int(np.max(np.abs(codes[0].astype(np.int64) - codes[1].astype(np.int64)), initial=0))
        return TensorMatch(engine, layer, tensor, int(w.size), failed,
                           float(np.mean(diff == 0)) if w.size else 1.0, float(np.max(diff, initial=0.0)),
                           code_diff, cosine, failed == 0)


@dataclasses.dataclass
class CheckReport:
    """What ``compiler_check`` found (module docstring).  ``outputs``: per model output and
    ``layers`` (CheckPerLayer) per engine layer, compiled vs golden; ``quantized``: per engine
    layer, fed the QDQ model's codes, against them; ``cosine``: per model output, compiled vs
    the QDQ model; ``sample``: what the sample data was."""

    level: int
    mode: str
    criterion: str
    sample: str
    outputs: List[TensorMatch]
    layers: List[TensorMatch]
    quantized: List[CodeMatch]
    cosine: Dict[str, float]

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def table(self) -> str:
        lines = [f"compiler_check {self.level} ({self.criterion}), {self.mode}: sample {self.sample}; "
                 f"compiled model against the quantized model's integer form; engines bit-equal native vs reference"]
        for title, rows in (("model outputs", self.outputs), ("layers", self.layers)):
            if rows:
                lines.append(f"  {title}: {'engine':<24} {'layer':<32} {'equal':>8} {'max diff':>10} {'cosine':>9}")
                pad = " " * len(title)
                lines += [f"  {pad}  {r.engine[:24]:<24} {(r.layer or r.tensor)[:32]:<32} {r.equal:>8.4f} "
                          f"{r.max_abs_diff:>10.4g} {r.cosine:>9.6f}" for r in rows]
        if self.quantized:
            worst = max(r.max_diff for r in self.quantized)
            lines.append(f"  {len(self.quantized)} layers fed the QDQ model's codes: within {worst} code(s) of it, "
                         f"min bit-equal fraction {min(r.equal for r in self.quantized):.4f}")
        lines += [f"  model output {t}: cosine {c:.6f} (compiled vs QDQ quantized model)"
                  for t, c in self.cosine.items()]
        return "\n".join(lines)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    return 1.0 if na == nb == 0 else float(a @ b / (na * nb)) if na and nb else 0.0


def golden_graph(qgraph: Graph, config: Mapping[str, Any], device_info: Optional[Mapping] = None) -> Graph:
    """The quantized model in the engines' integer arithmetic, layer by layer: float inputs,
    one engine per NPU layer, one batch size (module docstring)."""
    plain = dict(config, static_batch_sizes=[], max_dynamic_batch_size=0, remove_input_quant=False)
    return compile_graph(qgraph, plain, device_info, layer_by_layer=True)


def _layer_codes(graph: Graph, feeds: Mapping[str, np.ndarray]):
    """(values of every tensor, {IR tensor: (engine, layer, codes in IR layout, scale)}) of
    ``graph`` on the reference executor, instruction outputs in graph order."""
    codes: Dict[str, Tuple[str, str, np.ndarray, float]] = {}

    def record(engine, layer, spec, values) -> None:
        name, nhwc = ir_tensor_of(spec.name)
        if layer is not None and (name not in codes or not nhwc):
            codes[name] = (engine.name, layer, in_ir_layout(values, nhwc), float(spec.scale))

    return compiled_values(graph, feeds, capture=record), codes


def _layer_matches(tol: Tolerance, compiled: Graph, feeds, golden_codes) -> List[TensorMatch]:
    """Every engine layer of ``compiled`` whose IR tensor the golden holds, in graph order."""
    rows = []
    for tensor, (engine, layer, got, scale) in _layer_codes(compiled, feeds)[1].items():
        if tensor not in golden_codes:
            continue
        want, want_scale = golden_codes[tensor][2], golden_codes[tensor][3]
        same_grid = scale == want_scale and got.shape == want.shape
        rows.append(tol.match(engine, layer, tensor, got.astype(np.float64) * scale,
                              want.astype(np.float64) * want_scale, (got, want) if same_grid else None))
    return rows


def check_compiled(qgraph: Graph, compiled: Graph, config: Mapping[str, Any], feeds: Mapping[str, np.ndarray],
                   sample: str, device_info: Optional[Mapping] = None) -> CheckReport:
    """Run the check of the module docstring on ``feeds`` (graph input -> float array) with
    the config keys ``compiler_check`` (level 1..3), ``compiler_check_mode``, ``_rtol``,
    ``_atol`` and ``_cosine``; raises :class:`CompileError` on a mismatch, else returns the
    :class:`CheckReport`."""
    level, mode = int(config["compiler_check"]), config.get("compiler_check_mode", "CheckOutput")
    tol = Tolerance(level, float(config.get("compiler_check_rtol", 1e-5)),
                    float(config.get("compiler_check_atol", 0.0)), float(config.get("compiler_check_cosine", 0.999)))
    golden = golden_graph(qgraph, config, device_info)
    q = QuantizedCodes(qgraph, config, feeds)
    quantized = check_layers(q, golden)
    check_native(q, compiled)
    golden_values, golden_codes = _layer_codes(golden, feeds)
    cfeeds = _compiled_feeds(compiled, feeds, config.get("round_mode", "half_away_from_zero"))
    model = run_compiled(compiled, cfeeds, backend="native")
    outputs = [tol.match("", "", t, model[t], golden_values[t]) for t in compiled.outputs]
    layers: List[TensorMatch] = []
    if mode == "CheckPerLayer" or not all(r.passed for r in outputs):
        layers = _layer_matches(tol, compiled, cfeeds, golden_codes)
    failed = [r for r in outputs + layers if not r.passed]
    if failed:
        first = next((r for r in layers if not r.passed), None)
        near = next((r for r in layers if r.equal < 1.0), None) if first is None else None
        what = "; ".join(r.describe() for r in outputs if not r.passed)
        raise CompileError(
            f"compiler_check {level} ({tol.describe()}, {mode}) failed on {sample}: " + (what + "; " if what else "")
            + (f"the first layer that differs: {first.describe()}" if first is not None else
               f"the first layer that differs (within the tolerance): {near.describe()}" if near is not None else
               "no engine layer differs: the difference arises outside the engines"))
    qdq = quantized_outputs(q, list(compiled.outputs))
    cosine = {t: _cosine(model[t], qdq[t]) for t in compiled.outputs}
    return CheckReport(level, mode, tol.describe(), sample, outputs, layers if mode == "CheckPerLayer" else [],
                       quantized, cosine)


def _compiled_feeds(compiled: Graph, feeds: Mapping[str, np.ndarray], round_mode: str) -> Dict[str, np.ndarray]:
    """``feeds`` for the compiled graph: integer inputs (``remove_input_quant``) get the codes
    the quantized model's ``Quant`` gives them."""
    out = {}
    for t in compiled.inputs:
        qp, dtype = compiled.qparams.get(t), compiled.tensors[t].dtype
        out[t] = feeds[t] if dtype == "float32" or qp is None else arith.quantize(feeds[t], qp.scale, dtype, None,
                                                                                  round_mode)
    return out


def report_json(report: CheckReport) -> str:
    return json.dumps(report.to_dict(), indent=1)
