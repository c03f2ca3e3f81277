"""Accuracy-driven search of quantization choices (docs/architecture.md §12,
docs/quantization.md "Accuracy tuning"): :func:`tune` (``ConvertImpl.tune``).

Every candidate is a plain dict of config keys (``quantize_algorithm``, ``auto_int16``,
``layer_configs`` and the accuracy passes' keys).  It is quantized from statistics already
recorded, compiled (``compile_graph``), priced with the NPU cost model
(:func:`ratelnn.profile.profile`: predicted latency of one inference, SRAM fit) plus a host
estimate for layers it moves off the NPU (:data:`HOST_FLOAT_MACS_PER_S`), and judged by
running the compiled model in its framework on ``data`` (engines on the emulated NPU: the
integer arithmetic the NPU computes).  Search, each step budgeted (``max_evals``,
``time_budget_s``):

1. methods: ``naive``, ``kld``, ``percentile``, ``mse`` (all int8, ``auto_int16`` off); the
   ``naive`` one is the *all-int8 baseline* whose latency ``max_latency_ratio`` refers to;
2. passes on the best so far, one at a time, kept when they raise the metric:
   ``equalization``, ``bias_correction`` (a key the config does not know is skipped; they
   cost no latency);
3. while the target is not met, the *int16 budget* (:meth:`Tuner._stage_budget`): int16 on
   the layers losing most SQNR per predicted second (:meth:`Tuner._int16_prices`), as many as
   the estimate fits in the latency limit;
4. while it is not met: ``auto_int16`` at its defaults and with a larger budget; then
   *recurrences* (:func:`recurrence_layers`): int16 on every quantized Add/Sub/Mul lying on a
   path of at least :data:`MIN_CHAIN` of them (an unrolled recurrence, such as an LSTM's cell
   state), kept when it raises the metric;
5. while it is not met, *borders* (:meth:`Tuner._border_moves`): every quantized tensor a
   numerically sensitive float op reads (:data:`SENSITIVE_OPS`: Log, Div, Sqrt, Pow, ...)
   kept fp32 jointly with int16 on the quantized region upstream of it (back to the previous
   sensitive op or graph input), all borders at once, then each on its own;
6. while it is not met: int16, then fp32, on the k least precise layers (k = 1, 2, 4, ...;
   :meth:`Tuner._prefixes`), by the SQNR each loses (``analysis.layer_rows``) or, where the
   numpy evaluator cannot run the graph, by the 8-bit SQNR its histogram predicts; then,
   while it is not met, ``adaround_iterations`` (:data:`LATE_PASSES`: minutes per try on a
   large model, so after every cheap dtype move) kept when it raises the metric;
7. once met: layer entries dropped again, one at a time, while the target still holds.

AdaRound codes are cached per layer across candidates (``quantization.adaround.code_cache``).

Statistics: one calibration per set of pass settings that needs its own (a pass that changes
the float graph, or whose quantizer reads statistics the base calibration lacks), each in
``<output_dir>/tune/<name>``; every method reads the same histograms.  ``TuneResult.config``
names that folder, so ``converter(graph_def, dict(config, **result.config))`` rebuilds the
chosen model without calibrating (engines byte-identical).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import time
import warnings
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np

from .errors import CalibrationError, RatelError, TimeLimitExceeded
from .ir import registry

METHODS = ("naive", "kld", "percentile", "mse")
# accuracy passes (issue 14): config key -> values tried, in order; skipped while the
# config does not know the key (docs/quantization.md)
PASSES: Tuple[Tuple[str, Tuple[Any, ...]], ...] = (
    ("equalization", (True,)),
    ("bias_correction", ("empirical", "analytic")),
    ("adaround_iterations", (200,)),
)
PASS_OFF = {"equalization": False, "bias_correction": "none", "adaround_iterations": 0}
# tried after the int16 budget: an optimisation per layer, minutes per try on a large model
LATE_PASSES = ("adaround_iterations",)
# Assumed host throughput for layers a candidate keeps in fp32 (they leave the NPU and run on
# the CPU): 50 G multiply-adds/s, a few AVX-512 cores in float32.  Only the layers the
# candidate moves off the NPU are charged; ops every candidate leaves on the CPU are not.
HOST_FLOAT_MACS_PER_S = 50e9
HOST_LAYER_OVERHEAD_S = 2e-6   # assumed per host op (dispatch, a quantization border)
# auto_int16 (docs/quantization.md §4) at its defaults, then with a larger budget
AUTO_INT16 = (("auto_int16", {"auto_int16": True}),
              ("auto_int16 (40 dB, 30%)", {"auto_int16": True, "auto_int16_sqnr_db": 40.0,
                                           "auto_int16_max_fraction": 0.3}))
# quantized elementwise ops in a row (nothing weighted between them) that make a recurrence:
# an unrolled LSTM's cell state c_t = f * c_{t-1} + i * g is a chain of 2 per step, and its
# rounding errors add up along it (TFLite keeps the cell state 16-bit for that reason)
CHAIN_OPS = registry.QUANTIZED_BINARY_OPS
MIN_CHAIN = 8
MIN_GAIN = 1e-4          # a change is kept when it raises the metric by more than this
# float ops whose result is sensitive to small absolute errors of their input over a wide
# dynamic range (stage 4, "borders"): IR op names and the framework types of Opaque nodes,
# lower case (the registry's sensitive ops)
SENSITIVE_OPS = registry.SENSITIVE_OP_TYPES


# ------------------------------------------------------------------ results
@dataclasses.dataclass
class Point:
    """One evaluated candidate: ``settings`` (config keys), ``metric`` (None: not run, see
    ``note``), ``latency_s`` (predicted, one inference: engines + host time of its fp32
    layers), ``fits_sram`` (every engine's weights and working set fit a core's SRAM)."""

    label: str
    settings: Dict[str, Any]
    metric: Optional[float]
    latency_s: float
    fits_sram: bool
    seconds: float
    note: str = ""
    engines_sha256: str = ""   # of the compiled model's engine bytes, in graph order


@dataclasses.dataclass
class TuneResult:
    """What :func:`tune` found.

    ``config``: the chosen candidate's config keys (with its ``output_dir``), a plain dict;
    ``metric``, ``latency_s``: its figures; ``baseline_latency_s``: the all-int8 latency;
    ``met``: whether it meets ``target`` within ``max_latency_ratio``; ``pareto``: the
    non-dominated points, latency ascending and metric strictly ascending; ``history``: every
    point in order; ``fp32_metric``: the metric of the float model; ``stopped``: why the
    search ended."""

    config: Dict[str, Any]
    metric: float
    latency_s: float
    baseline_latency_s: float
    target: float
    max_latency_ratio: float
    met: bool
    pareto: List[Point]
    history: List[Point]
    fp32_metric: float
    stopped: str
    chosen: Point

    @property
    def latency_ratio(self) -> float:
        return self.latency_s / self.baseline_latency_s if self.baseline_latency_s else math.nan

    def table(self) -> str:
        """History as aligned text: label, metric, latency (us), ratio, kept on the front."""
        front = {id(p) for p in self.pareto}
        lines = [f"{'candidate':<48} {'metric':>9} {'latency us':>11} {'ratio':>6}  front  note"]
        for p in self.history:
            metric = "-" if p.metric is None else f"{p.metric:.5f}"
            lines.append(f"{p.label[:48]:<48} {metric:>9} {p.latency_s * 1e6:>11.2f} "
                         f"{p.latency_s / self.baseline_latency_s:>6.3f}  {'*' if id(p) in front else ' ':^5}  {p.note}")
        lines.append(f"chosen: {self.chosen.label} (metric {self.metric:.5f}, latency ratio "
                     f"{self.latency_ratio:.3f}, target {'met' if self.met else 'NOT met'}; {self.stopped})")
        return "\n".join(lines)

    def plot(self, path: str) -> str:
        """Draw metric vs predicted latency (every point, the front, target, latency limit,
        the choice) into the image ``path`` (PNG by extension); returns ``path``."""
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6.4, 4.4))
        try:
            run = [p for p in self.history if p.metric is not None]
            ax.scatter([p.latency_s * 1e6 for p in run], [p.metric for p in run], s=14, c="0.6",
                       label="candidates")
            ax.step([p.latency_s * 1e6 for p in self.pareto], [p.metric for p in self.pareto], "o-",
                    where="post", c="C0", label="Pareto front")
            ax.axhline(self.target, ls="--", c="C2", label=f"target {self.target:g}")
            ax.axvline(self.baseline_latency_s * self.max_latency_ratio * 1e6, ls=":", c="C3",
                       label=f"{self.max_latency_ratio:g} x all-int8 latency")
            ax.scatter([self.latency_s * 1e6], [self.metric], s=90, facecolors="none", edgecolors="C1",
                       linewidths=2, label="chosen")
            ax.set_xlabel("predicted NPU latency per inference (us)")
            ax.set_ylabel("metric")
            ax.legend(fontsize=8, loc="lower right")
            fig.tight_layout()
            fig.savefig(path)
        finally:
            plt.close(fig)
        return path


def pareto_front(points: Sequence[Point]) -> List[Point]:
    """Points with a metric not dominated by another (lower or equal latency and higher or
    equal metric, one of them strictly): latency ascending, metric strictly ascending."""
    front: List[Point] = []
    for p in sorted((p for p in points if p.metric is not None), key=lambda p: (p.latency_s, -p.metric)):
        if not front or p.metric > front[-1].metric:
            front.append(p)
    return front


def cosine_metric(outputs: Sequence[np.ndarray], reference: Sequence[np.ndarray]) -> float:
    """The lowest over the model's outputs of the cosine similarity of all its values to
    the float model's (as bench/real_models.py reports)."""
    result = 1.0
    for q, f in zip(outputs, reference):
        q, f = np.asarray(q, np.float64).ravel(), np.asarray(f, np.float64).ravel()
        norm = np.linalg.norm(q) * np.linalg.norm(f)
        result = min(result, float(q @ f / norm) if norm > 0 else float(np.array_equal(q, f)))
    return result


# ------------------------------------------------------------------ the search
class _Budget(Exception):
    """The evaluation or time budget is spent."""


class Tuner:
    """One search (see the module docstring); :meth:`run` returns the :class:`TuneResult`."""

    def __init__(self, conv, data: Any, metric: Optional[Callable] = None, target: float = 0.99,
                 max_latency_ratio: float = 1.3, max_evals: int = 40, time_budget_s: Optional[float] = None,
                 calibration_data: Any = None, batch_size: Optional[int] = None, progress: bool = True,
                 passes: Optional[Sequence[str]] = None, borders: bool = True, int16_budget: bool = True) -> None:
        from .calibration.progress import Progress
        from .config import ConfigError
        for name, value, ok, expected in (
                ("target", target, lambda v: math.isfinite(v), "a finite number"),
                ("max_latency_ratio", max_latency_ratio, lambda v: v >= 1.0, "a number >= 1"),
                ("max_evals", max_evals, lambda v: v >= 1 and float(v).is_integer(), "an integer >= 1"),
                ("time_budget_s", 0.0 if time_budget_s is None else time_budget_s, lambda v: v >= 0, "None or seconds >= 0")):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not ok(value):
                raise ConfigError(f"tune: {name} must be {expected}, got {value!r}")
        if metric is not None and not callable(metric):
            raise ConfigError(f"tune: metric must be None or a callable (outputs, data) -> float, got {metric!r}")
        self.conv = conv
        self.data, self.metric_fn, self.target = data, metric, float(target)
        self.ratio, self.max_evals, self.time_budget_s = float(max_latency_ratio), int(max_evals), time_budget_s
        self.calibration_data = data if calibration_data is None else calibration_data
        self.borders = bool(borders)
        self.int16_budget = bool(int16_budget)
        self.batch_size = batch_size
        self.root = os.path.join(str(conv.config["output_dir"]), "tune")
        self.start = time.monotonic()
        self.history: List[Point] = []
        self.seen: Dict[str, Point] = {}
        self.families: Dict[str, Tuple[Any, str]] = {}
        self.user_layers = list(conv.config.get("layer_configs") or [])
        unknown = set(passes or ()) - {k for k, _ in PASSES}
        if unknown:
            raise ConfigError(f"tune: unknown passes {sorted(unknown)}; known: {[k for k, _ in PASSES]}")
        self.known_passes = [(k, v) for k, v in PASSES if k in _config_keys() and (passes is None or k in passes)]
        self.evals = 0
        self.adaround_codes: Dict[str, np.ndarray] = {}   # quantization.adaround.code_cache
        self.baseline: Optional[Point] = None
        self.bar = Progress(self.max_evals, "tune", unit="candidates", enabled=progress)

    # ---------------------------------------------------------- budget and data
    def _check_budget(self) -> None:
        if self.baseline is None:   # the all-int8 baseline is always evaluated
            return
        if self.evals >= self.max_evals:
            raise _Budget(f"stopped at max_evals={self.max_evals}")
        if self.time_budget_s is not None and time.monotonic() - self.start >= self.time_budget_s:
            raise _Budget(f"stopped at time_budget_s={self.time_budget_s:g}")

    def _prepare(self) -> None:
        self.conv.handler.ensure_ops()
        batches = self.conv.calibration_data(self.data, self.batch_size)
        self.batches = [(b.feeds, b.size) for b in batches]
        if not self.batches:
            from .calibration.data import DataError
            raise DataError("tune: data holds no sample")
        self.outputs = list(self.conv.config["output_nodes"])
        source = self.conv.source
        self.reference = self._run(source)
        self.fp32_metric = self._score(self.reference)

    def _run(self, model: Any) -> List[np.ndarray]:
        from .runners import run_model
        parts = [[o[:size] for o in run_model(self.conv.handler.framework, model, feeds, self.outputs)]
                 for feeds, size in self.batches]
        return [np.concatenate(p) for p in zip(*parts)]

    def _score(self, outputs: List[np.ndarray]) -> float:
        if self.metric_fn is None:
            return cosine_metric(outputs, self.reference)
        from .config import ConfigError
        value = self.metric_fn(outputs, self.data)
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not math.isfinite(number):
            raise ConfigError(f"tune: metric must return a finite number, got {value!r}")
        return number

    # ---------------------------------------------------------- statistics families
    def _family(self, settings: Mapping[str, Any]):
        """(converter, output_dir) for the pass settings of ``settings``: the base
        calibration when it serves them, else their own."""
        passes = {k: settings[k] for k, _ in self.known_passes if k in settings and settings[k] != PASS_OFF[k]}
        name = "base" if not passes else "-".join(f"{k}={v}" for k, v in sorted(passes.items()))
        if name in self.families:
            return self.families[name]
        base = self.families.get("base")
        if base is None:
            conv, out = self._calibrated("base", {})
        else:
            conv = type(self.conv)(self.conv.handler, self.conv.source, dict(self.conv.config, output_dir=base[1], **passes),
                               self.conv.device_info)
            out = base[1]
            if conv.fingerprint != base[0].fingerprint or not _quantizes(conv):
                conv, out = self._calibrated(name, passes)
        self.families[name] = (conv, out)
        return conv, out

    def _calibrated(self, name: str, passes: Mapping[str, Any]):
        from .calibration.manifest import start_fresh
        out = os.path.join(self.root, _slug(name))
        os.makedirs(out, exist_ok=True)
        start_fresh(out)
        conv = type(self.conv)(self.conv.handler, self.conv.source, dict(self.conv.config, output_dir=out, **passes),
                           self.conv.device_info)
        conv.calibrate(self.calibration_data, self.batch_size, progress=False)
        return conv, out

    def _candidate(self, settings: Mapping[str, Any]):
        """(converter of ``settings``: its statistics family's, with the candidate's normalized
        config; that family's output_dir)."""
        from .config import normalize
        family, out = self._family(settings)
        conv = copy.copy(family)
        conv.config = normalize(dict(self.conv.config, output_dir=out, **settings), family.handler.framework)
        return conv, out

    # ---------------------------------------------------------- one candidate
    def evaluate(self, label: str, settings: Dict[str, Any], run: bool = True) -> Point:
        """Price and (``run``) judge one candidate; repeated settings are not evaluated again."""
        key = json.dumps(settings, sort_keys=True, default=str)
        if key in self.seen:
            return self.seen[key]
        self._check_budget()
        t0 = time.monotonic()
        from .quantization.adaround import code_cache
        from .quantization.layerwalk import time_limit
        from .quantization.thresholds import KLDDegenerateWarning
        deadline = None if self.time_budget_s is None or self.baseline is None else self.start + self.time_budget_s
        cheap = _without_data_passes(settings, self.known_passes)
        try:
            conv, _ = self._candidate(settings)
            # a search tries kld on every tensor: no warning per try; AdaRound codes shared
            # by candidates with the same configuration upstream of a layer
            with warnings.catch_warnings(), time_limit(deadline), code_cache(self.adaround_codes):
                warnings.simplefilter("ignore", KLDDegenerateWarning)
                if self.baseline is not None and cheap != settings:
                    # priced before the data-driven passes run: they change codes, not dtypes
                    cheap_conv, _ = self._candidate(cheap)
                    try:
                        latency = self._price(cheap_conv.quantized_ir(), cheap_conv)[2]
                    except ValueError:   # no engine left
                        latency = None
                    if latency is not None and self._over(latency):
                        point = Point(label, settings, None, latency, False, time.monotonic() - t0,
                                      f"over {self.ratio:g} x all-int8 latency: not run (priced without the data-driven passes)")
                        return self._record(key, point)
                qgraph = conv.quantized_ir()
        except TimeLimitExceeded as e:   # a data-driven pass outran time_budget_s
            raise _Budget(f"stopped at time_budget_s={self.time_budget_s:g} ({e}, trying {label})") from None
        except RatelError as e:   # missing statistics, a pass that cannot run on this graph
            point = Point(label, settings, None, math.nan, False, time.monotonic() - t0,
                          f"skipped: {type(e).__name__}: {str(e).splitlines()[0][:150]}")
            return self._record(key, point)
        try:
            compiled, prof, latency = self._price(qgraph, conv)
        except ValueError as e:   # no engine left
            point = Point(label, settings, None, math.nan, False, time.monotonic() - t0, f"skipped: {e}")
            return self._record(key, point)
        fits = all(e.latency.fits_sram for e in prof.engines)
        over = self._over(latency)
        metric, note = None, ""
        if over:
            note = f"over {self.ratio:g} x all-int8 latency: not run"
        elif run:
            model = conv.handler.export_graph(compiled)
            metric = self._score(self._run(model))
            self.evals += 1
            self.bar.update()
        digest = hashlib.sha256(b"".join(n.attrs["engine"] for n in compiled.nodes if n.op == "Engine"))
        point = Point(label, settings, metric, latency, fits, time.monotonic() - t0, note, digest.hexdigest())
        return self._record(key, point)

    def _over(self, latency: float) -> bool:
        return self.baseline is not None and latency > self.ratio * self.baseline.latency_s * (1 + 1e-9)

    def _price(self, qgraph, conv) -> Tuple[Any, Any, float]:
        """(compiled graph, Profile, predicted latency of one inference: engines + host fp32
        layers) of the quantized ``qgraph`` of ``conv``; ValueError when it has no engine."""
        from .compiler import compile_graph
        from .profile import profile
        compiled = compile_graph(qgraph, conv.config, conv.device_info)
        prof = profile(compiled, 1, conv.device_info or None)
        return compiled, prof, prof.latency_s + self._host_seconds(qgraph, conv.config)

    def _record(self, key: str, point: Point) -> Point:
        self.seen[key] = point
        self.history.append(point)
        return point

    def _host_seconds(self, qgraph, config) -> float:
        """Host time of the layers this candidate keeps in fp32 although the all-int8 plan
        quantizes them (:data:`HOST_FLOAT_MACS_PER_S`)."""
        from .quantization.policy import make_plan
        if self.baseline is None:
            return 0.0
        moved = self.baseline_quantized - set(make_plan(qgraph, config).quantized_nodes)
        graph = self.conv.graph
        macs = 0.0
        for node in graph.nodes:
            if node.name in moved:
                macs += _node_macs(graph, node)
        return macs / HOST_FLOAT_MACS_PER_S + len(moved) * HOST_LAYER_OVERHEAD_S

    # ---------------------------------------------------------- stages
    def _feasible(self, p: Point) -> bool:
        return (p.metric is not None and p.latency_s <= self.ratio * self.baseline.latency_s * (1 + 1e-9)
                and (p.fits_sram or not self.baseline.fits_sram))

    def _meets(self, p: Point) -> bool:
        return self._feasible(p) and p.metric >= self.target

    def _better(self, p: Point, than: Point) -> bool:
        return self._feasible(p) and p.metric > than.metric + MIN_GAIN

    def _settings(self, method: str, layers: Sequence[Mapping[str, Any]] = (), auto_int16: bool = False,
                  passes: Optional[Mapping[str, Any]] = None) -> Dict[str, Any]:
        s = {"quantize_algorithm": method, "auto_int16": auto_int16,
             "layer_configs": self.user_layers + [dict(e) for e in layers]}
        s.update(passes or {})
        return s

    def _stage_methods(self) -> Point:
        from .quantization.policy import make_plan
        best = None
        for method in METHODS:
            p = self.evaluate(method, self._settings(method))
            if self.baseline is None:
                if p.metric is None:
                    raise RatelError(f"tune: the all-int8 baseline cannot be evaluated ({p.note})")
                self.baseline = p
                conv = copy.copy(self.families["base"][0])
                self.baseline_quantized = set(make_plan(conv.graph, dict(self.conv.config, **p.settings)).quantized_nodes)
            if best is None or self._better(p, best):
                best = p
        return best

    def _stage_auto_int16(self, best: Point) -> Point:
        found = best
        for label, extra in AUTO_INT16:
            p = self.evaluate(f"{best.label} + {label}", dict(best.settings, **extra))
            if self._better(p, found):
                found = p
        return found

    def _stage_chains(self, best: Point) -> Point:
        """int16 on every layer of :func:`recurrence_layers` but the user's, kept when it
        raises the metric."""
        from .quantization.policy import make_plan
        conv, _ = self._candidate(best.settings)
        fixed = {str(e.get("layer_name")) for e in self.user_layers}
        names = [n for n in recurrence_layers(conv.graph, make_plan(conv.graph, conv.config).quantized_nodes)
                 if n not in fixed]
        if not names:
            return best
        entries = {e["layer_name"]: e for e in best.settings["layer_configs"][len(self.user_layers):]}
        entries.update((n, {"layer_name": n, "data_type": "int16"}) for n in names)
        settings = dict(best.settings, layer_configs=self.user_layers + list(entries.values()))
        p = self.evaluate(f"{best.settings['quantize_algorithm']} + int16 on {len(names)} recurrence layers", settings)
        return p if self._better(p, best) else best

    def _stage_passes(self, best: Point, keys: Sequence[str]) -> Point:
        for key, values in [(k, v) for k, v in self.known_passes if k in keys]:
            found = best
            for value in values:
                s = dict(best.settings, **{key: value})
                p = self.evaluate(f"{best.label} + {key}={value}", s)
                if self._better(p, found):
                    found = p
            best = found
        return best

    def _border_moves(self, best: Point) -> List[Tuple[str, List[str], List[str]]]:
        """(sensitive op, fp32 node names, int16 layer names) per float op of
        :data:`SENSITIVE_OPS` reading a quantized tensor, in graph order.  fp32: the quantized
        nodes producing that tensor (through scale-preserving ones up to its anchor's
        producer), so it stays float; int16: every 8-bit anchor upstream of the op, back to
        the previous sensitive op or a graph input (a quantized node by its name, a graph
        input or a float op's output border by the input's or the float op's name)."""
        from .quantization.policy import activation_inputs, is_scale_preserving, make_plan
        conv, _ = self._candidate(best.settings)
        graph = conv.graph
        plan = make_plan(graph, conv.config)
        quantized, anchors = set(plan.quantized_nodes), set(plan.anchors)
        producers = {t: n for n in graph.nodes for t in n.outputs}
        fixed = {str(e.get("layer_name")) for e in self.user_layers}
        moves, seen_moves = [], set()
        for op in graph.nodes:
            if op.name in quantized or not _sensitive(op):
                continue
            fp32: List[str] = []
            for t in activation_inputs(graph, op):
                node = producers.get(t)
                while node is not None and node.name in quantized and node.name not in fp32:
                    fp32.append(node.name)
                    node = producers.get(node.inputs[0]) if is_scale_preserving(node) else None
            fp32 = [n for n in fp32 if n not in fixed]
            if not fp32:
                continue
            int16: List[str] = []
            stack, visited = list(activation_inputs(graph, op)), set()
            while stack:
                t = stack.pop()
                if t in visited:
                    continue
                visited.add(t)
                node = producers.get(t)
                if node is None or node.name not in quantized:   # a border: input or float op output
                    name = t if node is None else node.name
                    if t in anchors and name not in int16:
                        int16.append(name)
                    if node is None or _sensitive(node):
                        continue
                elif not is_scale_preserving(node) and node.name not in fp32 and node.name not in int16:
                    int16.append(node.name)
                stack.extend(activation_inputs(graph, node))
            int16 = [n for n in int16 if n not in fixed]
            key = (tuple(fp32), tuple(sorted(int16)))
            if key not in seen_moves:
                seen_moves.add(key)
                moves.append((op.name, fp32, int16))
        return moves

    def _stage_borders(self, best: Point) -> Point:
        """The border moves of :meth:`_border_moves` on ``best``: all at once, then each on
        its own, kept cumulatively when it raises the metric (a move's fp32 and int16 halves
        go together: either alone may gain nothing)."""
        moves = self._border_moves(best)
        method = best.settings["quantize_algorithm"]

        def trial(label: str, base: Point, chosen) -> Point:
            entries = {e["layer_name"]: e for e in base.settings["layer_configs"][len(self.user_layers):]}
            for _, fp32, int16 in chosen:
                for names, dtype in ((int16, "int16"), (fp32, "fp32")):
                    for name in names:
                        entries.pop(name, None)
                        entries[name] = {"layer_name": name, "data_type": dtype}
            settings = dict(base.settings, layer_configs=self.user_layers + list(entries.values()))
            return self.evaluate(f"{method} + {label}", settings)

        found = best
        if len(moves) > 1:
            p = trial(f"fp32 at {len(moves)} sensitive borders, int16 upstream", best, moves)
            if self._meets(p):
                return p
            found = p if self._better(p, found) else found
        step = best
        for move in moves:
            p = trial(f"fp32 at border {move[0]}, int16 upstream", step, [move])
            if self._better(p, step):
                step = p
                if self._meets(step):
                    break
        return step if self._meets(step) or self._better(step, found) else found

    def _ranked_layers(self, best: Point, prices: Optional[Mapping[str, float]] = None
                       ) -> List[Tuple[str, List[Dict[str, str]], List[Dict[str, str]]]]:
        """(layer, int16 entries, fp32 entries) of every 8-bit layer (and quantized graph
        input), least precise first: by the SQNR the layer loses on the first batch
        (``analysis.layer_rows``, per-channel; measured without the data-driven passes, which
        would run again for the ranking alone), or, when the numpy evaluator cannot run the
        graph, by the 8-bit SQNR its histogram predicts (``thresholds.sqnr_db``).  With
        ``prices`` (anchor tensor -> predicted seconds of it in int16, :meth:`_int16_prices`):
        by SQNR loss per predicted second instead (measured losses only)."""
        from .analysis import layer_rows
        from .calibration.stats import load_statistics
        from .ir import arith
        from .ir.evaluate import EvaluationError
        from .quantization.policy import is_scale_preserving, make_plan
        from .quantization.quantizer import quantize
        from .quantization.thresholds import sqnr_db
        conv, out = self._candidate(_without_data_passes(best.settings, self.known_passes))
        graph = conv.graph
        plan = make_plan(graph, conv.config)
        quantized = set(plan.quantized_nodes)
        producers = {t: n for n in graph.nodes for t in n.outputs}

        def options(t: str):
            """(layer, int16 entries, fp32 entries) for the 8-bit anchor ``t``, or None."""
            node = producers.get(t)
            if t in graph.inputs:
                readers = [n.name for n in graph.consumers(t) if n.name in quantized]
                return (t, [{"layer_name": t, "data_type": "int16"}],
                        [{"layer_name": r, "data_type": "fp32"} for r in readers])
            if node is not None and node.name in quantized and not is_scale_preserving(node):
                return (node.name, [{"layer_name": node.name, "data_type": "int16"}],
                        [{"layer_name": node.name, "data_type": "fp32"}])
            if node is not None and node.name not in quantized:   # border: a float op's output
                readers = [n.name for n in graph.consumers(t) if n.name in quantized]
                return (t, [], [{"layer_name": r, "data_type": "fp32"} for r in readers])
            return None

        scored = []
        try:
            floor = min([v for v in (prices or {}).values() if v > 0] or [1.0])
            for row in layer_rows(conv, self.batches[0][0]):
                if row.dtype in ("int8", "uint8"):
                    per = 1.0 if prices is None else max(prices.get(row.tensor, 0.0), floor)
                    scored.append((-row.sqnr_drop_db / per, row.tensor))
        except EvaluationError:
            stats = load_statistics(out)
            qgraph = quantize(graph, stats, conv.config)
            for t in plan.anchors:
                qp = qgraph.qparams[t]
                if qp.dtype in ("int8", "uint8") and getattr(stats[t], "histogram", None) is not None:
                    scored.append((sqnr_db(stats[t], float(np.max(qp.scale)) * arith.qmax_of(qp.dtype), qp.dtype), t))
        ranked, seen = [], set()
        for _, t in sorted(scored, key=lambda s: s[0]):
            option = options(t)
            if option is not None and option[0] not in seen:
                seen.add(option[0])
                ranked.append(option)
        return ranked

    def _int16_prices(self, best: Point) -> Dict[str, float]:
        """Anchor tensor -> predicted extra seconds of one inference with that 8-bit tensor in
        int16 alone: per engine instruction writing or reading it, the cost model's cycles
        (``layer_cycles``, one core) with its bytes doubled and its product int16 x int8,
        minus its cycles now; scaled by the all-int8 latency over the summed cycles of the
        all-int8 model (the cores' split); an estimate for ranking, the candidates are priced in
        full."""
        from .compiler import compile_graph
        from .npu.costmodel import layer_cycles
        from .npu.costs import instruction_layer_cost
        from .npu.engine import Engine
        from .proto import engine_pb2
        conv, _ = self._candidate(_without_data_passes(best.settings, self.known_passes))
        compiled = compile_graph(conv.quantized_ir(), conv.config, conv.device_info)
        extra: Dict[str, float] = {}
        total = 0.0
        for node in compiled.nodes:
            if node.op != "Engine":
                continue
            engine = Engine.from_bytes(node.attrs["engine"])
            tensors = engine.proto.tensors
            for ins in engine.instructions:
                cost = instruction_layer_cost(engine, ins)
                now = layer_cycles(cost)[0]
                total += now
                for slot, ids in (("in", ins.inputs), ("out", ins.outputs)):
                    for i in ids:
                        t = tensors[i]
                        if t.dtype == engine_pb2.INT16:
                            continue
                        size = float(np.prod(t.shape[1:], dtype=np.int64))
                        wide = (dataclasses.replace(cost, bits=16, in_bytes=cost.in_bytes + size) if slot == "in"
                                else dataclasses.replace(cost, out_bytes=cost.out_bytes + size))
                        extra[t.name] = extra.get(t.name, 0.0) + layer_cycles(wide)[0] - now
        scale = self.baseline.latency_s / total if total > 0 else 0.0
        return {t: c * scale for t, c in extra.items()}

    def _stage_budget(self, best: Point) -> Point:
        """int16 on the layers that lose the most SQNR per predicted second
        (:meth:`_int16_prices`), as many as the estimate fits in the latency limit, judged
        at that count first (then more or fewer as :meth:`_prefixes` bisects)."""
        prices = self._int16_prices(best)
        ranked = [r for r in self._ranked_layers(best, prices) if r[1]]
        room = self.ratio * self.baseline.latency_s - best.latency_s
        anchors = _anchor_tensors(self.conv.graph)
        k, spent = 0, 0.0
        for _, entries, _ in ranked:
            cost = sum(prices.get(anchors.get(e["layer_name"], e["layer_name"]), 0.0) for e in entries)
            if spent + cost > room:
                break
            spent, k = spent + cost, k + 1
        if k == 0:
            return best
        sizes = [k] + ([min(2 * k, len(ranked))] if k < len(ranked) else [])
        return self._prefixes(best, ranked, 1, "int16", sizes=sizes, label="per predicted us")

    def _stage_layers(self, best: Point) -> Point:
        ranked = self._ranked_layers(best)
        start = best
        for kind, dtype in ((1, "int16"), (2, "fp32")):   # each from the same start
            if self._meets(best):
                break
            p = self._prefixes(start, [r for r in ranked if r[kind]], kind, dtype)
            best = p if self._meets(p) or self._better(p, best) else best
        return best

    def _prefixes(self, best: Point, options, kind: int, dtype: str, sizes: Optional[Sequence[int]] = None,
                  label: str = "") -> Point:
        """``dtype`` on the first k of ``options`` (least precise first) on top of ``best``,
        k = ``sizes`` (default 1, 2, 4, ... all); bisected down to the fewest layers that meet
        the target, or up to the most that stay within the latency limit.  Returns the best
        point found."""
        current = {e["layer_name"]: e for e in best.settings["layer_configs"][len(self.user_layers):]}
        method = best.settings["quantize_algorithm"]

        def trial(k: int) -> Point:
            entries = dict(current)
            for option in options[:k]:
                entries.pop(option[0], None)
                entries.update((e["layer_name"], e) for e in option[kind])
            settings = dict(best.settings, layer_configs=self.user_layers + list(entries.values()))
            return self.evaluate(f"{method} + {dtype} on the {k} least precise layer(s){' ' + label if label else ''}",
                                 settings)

        if sizes is None:
            sizes = sorted({min(2 ** i, len(options)) for i in range(len(options).bit_length() + 1)} - {0})
        found, below = best, 0
        for k in sizes:
            p = trial(k)
            if p.metric is None:          # over the latency limit: the most layers that fit
                while k - below > 1:
                    mid = (below + k) // 2
                    q = trial(mid)
                    if q.metric is None:
                        k = mid
                    else:
                        below = mid
                        found = q if self._better(q, found) else found
                return found
            if self._meets(p):            # the fewest layers that meet the target
                while k - below > 1:
                    mid = (below + k) // 2
                    q = trial(mid)
                    if self._meets(q):
                        k, p = mid, q
                    else:
                        below = mid
                return p
            found = p if self._better(p, found) else found
            below = k
        return found

    def _stage_prune(self, best: Point) -> Point:
        layers = best.settings["layer_configs"][len(self.user_layers):]
        for entry in list(reversed(layers)):
            current = best.settings["layer_configs"][len(self.user_layers):]
            if entry not in current:
                continue
            trial = [e for e in current if e != entry]
            s = dict(best.settings, layer_configs=self.user_layers + trial)
            p = self.evaluate(f"{best.settings['quantize_algorithm']} - {entry['layer_name']} {entry['data_type']}", s)
            if self._meets(p) and p.latency_s <= best.latency_s:
                best = p
        return best

    def run(self) -> TuneResult:
        self._prepare()
        stopped = "search done"
        try:
            try:
                best = self._stage_methods()
                best = self._stage_passes(best, [k for k, _ in PASSES if k not in LATE_PASSES])
                if not self._meets(best) and self.int16_budget:
                    best = self._stage_budget(best)
                if not self._meets(best):
                    best = self._stage_auto_int16(best)
                if not self._meets(best):
                    best = self._stage_chains(best)
                if not self._meets(best) and self.borders:
                    best = self._stage_borders(best)
                if not self._meets(best):
                    best = self._stage_layers(best)
                if not self._meets(best):   # minutes per try: after the cheap dtype moves
                    best = self._stage_passes(best, LATE_PASSES)
                if self._meets(best) and best.settings["layer_configs"] != self.user_layers:
                    self._stage_prune(best)
            except _Budget as e:
                stopped = str(e)
        finally:
            self.bar.close()
        if self.baseline is None:
            raise RatelError(f"tune: no candidate evaluated ({stopped})")
        return self._result(stopped)

    def _result(self, stopped: str) -> TuneResult:
        run = [p for p in self.history if p.metric is not None]
        meeting = [p for p in run if self._meets(p)]
        if meeting:
            chosen = min(meeting, key=lambda p: (round(p.latency_s, 10), len(p.settings["layer_configs"]), -p.metric))
        else:
            feasible = [p for p in run if self._feasible(p)] or run
            chosen = max(feasible, key=lambda p: (p.metric, -p.latency_s))
        _, out = self._family(chosen.settings)
        config = dict(chosen.settings, output_dir=out)
        if not chosen.settings["layer_configs"]:
            config["layer_configs"] = []
        return TuneResult(config, chosen.metric, chosen.latency_s, self.baseline.latency_s, self.target,
                          self.ratio, bool(meeting), pareto_front(self.history), list(self.history),
                          self.fp32_metric, stopped, chosen)


def tune(conv, data: Any, metric: Optional[Callable] = None, target: float = 0.99,
         max_latency_ratio: float = 1.3, max_evals: int = 40, time_budget_s: Optional[float] = None,
         calibration_data: Any = None, batch_size: Optional[int] = None, progress: bool = True,
         passes: Optional[Sequence[str]] = None, borders: bool = True, int16_budget: bool = True) -> TuneResult:
    """See :meth:`ratelnn.convert.ConvertImpl.tune`."""
    return Tuner(conv, data, metric, target, max_latency_ratio, max_evals, time_budget_s,
                 calibration_data, batch_size, progress, passes, borders, int16_budget).run()


# ------------------------------------------------------------------ helpers
def recurrence_layers(graph, quantized: Sequence[str]) -> List[str]:
    """The ``quantized`` :data:`CHAIN_OPS` nodes of ``graph`` connected (producer to reader,
    skipping scale-preserving nodes) into a group whose longest path holds at least
    :data:`MIN_CHAIN` of them, in graph order: an unrolled recurrence, such as an LSTM's cell
    state (every step's f * c, i * g and their sum)."""
    from .quantization.policy import activation_inputs, is_scale_preserving
    quantized = set(quantized)
    producers = {t: n for n in graph.nodes for t in n.outputs}
    chain = [n for n in graph.nodes if n.name in quantized and n.op in CHAIN_OPS]
    preds: Dict[str, List[str]] = {}
    for node in chain:
        preds[node.name] = []
        for t in activation_inputs(graph, node):
            p = producers.get(t)
            while p is not None and p.name in quantized and is_scale_preserving(p):
                p = producers.get(p.inputs[0])
            if p is not None and p.name in preds:
                preds[node.name].append(p.name)
    group = {n.name: n.name for n in chain}   # union-find over the producer-reader links

    def root(name: str) -> str:
        while group[name] != name:
            group[name] = name = group[group[name]]
        return name
    longest = {n.name: 1 for n in chain}      # longest path ending at the node
    for node in chain:                        # graph order is topological
        longest[node.name] += max((longest[p] for p in preds[node.name]), default=0)
        for p in preds[node.name]:
            group[root(p)] = root(node.name)
    groups: Dict[str, int] = {}
    for name, length in longest.items():
        groups[root(name)] = max(groups.get(root(name), 0), length)
    return [n.name for n in chain if groups[root(n.name)] >= MIN_CHAIN]


def _config_keys() -> set:
    from .config import DEFAULTS
    return set(DEFAULTS)


def _sensitive(node) -> bool:
    """Whether ``node`` is a float op of :data:`SENSITIVE_OPS` (Opaque: by its framework type)."""
    kind = node.attrs.get("type") if node.op == "Opaque" else node.op
    return str(kind).lower() in SENSITIVE_OPS


def _without_data_passes(settings: Mapping[str, Any], known) -> Dict[str, Any]:
    """``settings`` with the passes that fit on data (bias correction, AdaRound) off."""
    off = {k: PASS_OFF[k] for k, _ in known if k in ("bias_correction", "adaround_iterations")}
    return dict(settings, **off)


def _anchor_tensors(graph) -> Dict[str, str]:
    """layer_configs name -> the tensor it sets: a node's first output (a graph input: itself)."""
    return {n.name: n.outputs[0] for n in graph.nodes if n.outputs}


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_=." else "_" for c in name)


def _quantizes(conv) -> bool:
    """Whether ``conv`` quantizes from the statistics in its output_dir."""
    try:
        conv.quantized_ir()
        return True
    except CalibrationError:
        return False


def _node_macs(graph, node) -> float:
    """Multiply-adds (or element operations) of one float inference of ``node``."""
    shape = [d for d in (graph.tensors[node.outputs[0]].shape if node.outputs[0] in graph.tensors else [])]
    out = float(np.prod([d for d in shape[1:] if d])) if shape else 0.0
    if registry.is_weighted(node.op) and len(node.inputs) > 1 and graph.is_param(node.inputs[1]):
        w = np.asarray(graph.params[node.inputs[1]])
        channels = [c for c in (shape[-1] if shape else None, shape[1] if len(shape) > 1 else None) if c]
        out_ch = next((d for d in (w.shape[-1], w.shape[0]) if d in channels), w.shape[-1])
        return out * w.size / max(out_ch, 1)
    return out
