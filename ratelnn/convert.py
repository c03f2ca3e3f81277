"""ConvertImpl: the framework-neutral converter of one model (docs/architecture.md §2).

A frontend supplies a *model handler* (:class:`ratelnn.model_handler.ModelHandler`) that
translates its framework's model to the IR and back; everything in between works on the IR.
Several models compiled together: :class:`ratelnn.joint.convert.JointConvertImpl`.
"""
from __future__ import annotations

import collections.abc
from typing import Any, Dict, Mapping, Optional

import numpy as np

from . import config as config_mod
from .gc_pause import collector_paused, with_collector_paused
from .model_handler import ModelHandler
from .ir import Graph


def model_name(config: Mapping[str, Any]) -> str:
    """Config ``model_name`` (made identifier-safe), else one derived from the first output
    node: without a ``:0`` port, identifier-safe, lower case (``Identity`` -> ``identity``)."""
    import re
    explicit = config.get("model_name")
    name = explicit or re.sub(r":0$", "", str(config["output_nodes"][0]))
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(name))
    return name if explicit else name.lower()


class ConvertImpl:
    """Converter of one model: ``to_cal``, ``to_quant``, ``to_npu`` (docs/architecture.md §1, §2)."""

    @with_collector_paused
    def __init__(self, model_handler: ModelHandler, graph_def: Any, config: Mapping[str, Any],
                 device_info: Optional[Dict[int, Any]] = None) -> None:
        self.handler = model_handler
        self.config = config_mod.normalize(config, model_handler.framework)
        self.device_info = dict(device_info or {})
        self.source = graph_def   # the framework model, for converters of other configs (tune)
        self.graph: Graph = model_handler.import_graph(graph_def, self.config)
        if self.config["equalization"]:   # before calibration: the statistics are of this graph
            from .ir.equalize import equalize
            equalize(self.graph, self.config["equalization_iterations"])
        # names the engines (<model>_engine_<k>) and their device-time counters
        self.graph.name = model_name(self.config)

    @with_collector_paused
    def to_cal(self) -> Any:
        """The calibration model: the float model plus MinMax ops on every tensor the
        quantized model needs; running it records statistics into ``output_dir``."""
        from .calibration.manifest import claim
        from .quantization.emit import emit_calibration
        from .quantization.policy import calibration_tensors
        self.handler.ensure_ops()
        claim(self.config["output_dir"], self.graph.name, self.fingerprint,  # docs/statistics.md
              calibration_tensors(self.graph, self.config), self.config["merge_statistics"])
        return self.handler.export_graph(emit_calibration(self.graph, self.config))

    @property
    def fingerprint(self) -> str:
        """SHA-256 of the float graph: the owner of this model's statistics files."""
        if getattr(self, "_fingerprint", None) is None:
            from .calibration.manifest import graph_fingerprint
            self._fingerprint = graph_fingerprint(self.graph)
        return self._fingerprint

    @with_collector_paused
    def quantized_ir(self, graph_quant: Any = None) -> Graph:
        """The quantized IR (qparams filled): from the statistics in ``output_dir``, or
        recovered from ``graph_quant``: a quantized model made by ``to_quant``, or a
        pre-quantized (quantization-aware-trained) model whose own fake-quantization nodes
        give the ranges (docs/quantization.md "Importing pre-quantized (QAT) graphs").

        From statistics the model is quantized once per :meth:`_build_key` (config,
        statistics and sample files): ``to_quant`` and ``to_npu`` share it, each caller gets
        its own copy to edit."""
        if graph_quant is not None:
            from .quantization.recover import strip_qdq
            qgraph = self.handler.import_prequantized(graph_quant, self.config)
            if qgraph is None:
                qgraph = strip_qdq(self.handler.import_quantized(graph_quant, self.config))
            qgraph.name = self.graph.name
            return qgraph
        return self._built_ir().copy()

    def _built_ir(self) -> Graph:
        """The quantized IR from statistics, built once per :meth:`_build_key` (not a copy:
        callers that edit it take :meth:`quantized_ir`)."""
        key = self._build_key()
        cached = getattr(self, "_quantized", None)
        if cached is None or cached[0] != key:
            from .calibration.manifest import check_owner
            from .calibration.stats import load_statistics
            check_owner(self.config["output_dir"], self.graph.name, self.fingerprint,
                        self.config["merge_statistics"])
            stats = load_statistics(self.config["output_dir"])
            qgraph = self._auto_quantized(stats) if self.config["accuracy_auto"] else self.quantize(stats)
            cached = self._quantized = (key, qgraph)
        return cached[1]

    def _auto_quantized(self, stats: Mapping[str, Any]) -> Graph:
        """The default build (config ``accuracy_auto``, docs/quantization.md "Automatic
        defaults"): checked on the held-out part of the calibration sample, remedied where it
        loses too much, the line printed.  The decision: ``self.accuracy_auto`` and the IR's
        ``meta["accuracy_auto"]``."""
        from .tune.auto import auto_quantize, report
        qgraph, decision = auto_quantize(self, stats)
        report(decision)
        self.accuracy_auto = decision
        qgraph.meta["accuracy_auto"] = decision.record(self.config["output_dir"])
        return qgraph

    def _build_key(self) -> str:
        """What the quantized IR from statistics depends on: the config, the graph's name, the
        device info, and the bytes of the statistics and calibration sample files (statistics
        still in this process's memory written first)."""
        import json
        from .calibration.digest import calibration_digests
        files = calibration_digests(self.config["output_dir"], self.fingerprint)
        return json.dumps([self.config, self.graph.name, self.device_info, files], sort_keys=True,
                          default=_key_text)

    @property
    def built_config(self) -> Dict[str, Any]:
        """The config that rebuilds the last default build without the automatic step: this
        converter's with the automatic decision's keys and ``accuracy_auto`` off (the config
        itself when no automatic build ran or it kept the plain build)."""
        decision = getattr(self, "accuracy_auto", None)
        if decision is None or not decision.settings:
            return dict(self.config)
        return dict(self.config, **decision.settings, accuracy_auto=False)

    def build_config(self, qgraph: Graph) -> Mapping[str, Any]:
        """The config ``qgraph`` (made by :meth:`quantized_ir`) was quantized with, which
        emitting and compiling it must use: this converter's, with the automatic decision's
        keys when the automatic step made it (an ``fp32`` layer entry changes the plan)."""
        decision = qgraph.meta.get("accuracy_auto")
        if not decision or not decision["settings"]:
            return self.config
        from .tune.auto import resolved, with_settings
        return with_settings(self, resolved(decision["settings"], self.config["output_dir"])).config

    def quantize(self, stats: Mapping[str, Any], config: Optional[Mapping[str, Any]] = None) -> Graph:
        """The quantized IR of this model from ``stats`` under ``config`` (default: the
        converter's), with the accuracy passes the config asks for (docs/quantization.md §8):
        AdaRound of the weights, then bias correction, each kept only if it does not lower
        the lowest output cosine on the held-out part of the calibration sample."""
        from .quantization.accuracy import apply_passes
        from .quantization.quantizer import quantize
        config = self.config if config is None else config
        qgraph = quantize(self.graph, stats, config)
        if config["adaround_iterations"] > 0 or config["bias_correction"] != "none":
            key = "adaround_iterations" if config["adaround_iterations"] > 0 else "bias_correction"
            qgraph = apply_passes(self.graph, qgraph, config,
                                  self._sample(key, required=key != "bias_correction"
                                               or config["bias_correction"] == "empirical"))
        return qgraph

    def _sample(self, key: str, required: bool = True) -> Optional[Dict[str, np.ndarray]]:
        """The calibration sample kept by calibrate(); None, or if ``required`` a
        CalibrationError naming ``key``, when there is none."""
        from .calibration.sample import read_sample, sample_path
        from .errors import CalibrationError
        sample = read_sample(self.config["output_dir"], self.fingerprint)
        if sample is None and required:
            raise CalibrationError(
                f"config key {key!r} needs the calibration sample that calibrate() keeps "
                f"({sample_path(self.config['output_dir'], self.fingerprint)} does not exist): "
                "run c.calibrate(data), or c.keep_sample(data) after running the calibration "
                "model yourself, with accuracy_samples > 0")
        return sample

    @with_collector_paused
    def to_quant(self) -> Any:
        """The quantized model: Quant/Dequant ops and integer constants, runnable in the
        framework; raises CalibrationError when statistics are missing."""
        from .quantization.emit import emit_qdq
        self.handler.ensure_ops()
        qgraph = self.quantized_ir()
        return self.handler.export_graph(emit_qdq(qgraph, self.build_config(qgraph)))

    @with_collector_paused
    def to_npu(self, graph_quant: Any = None) -> Any:
        """The compiled model (docs/architecture.md §6): NPU-supported regions become engine ops.

        ``graph_quant``: a quantized model made by ``to_quant`` to compile; None quantizes
        from the statistics in ``output_dir``."""
        self.handler.ensure_ops()
        return self.handler.export_graph(self.compiled_ir(graph_quant))

    @with_collector_paused
    def compiled_ir(self, graph_quant: Any = None) -> Graph:
        """The compiled IR that :meth:`to_npu` exports (engines as ``Engine`` nodes with their
        bytes): the quantized IR compiled under :meth:`build_config`, input processors and
        the compiler check included; for tools that read or run the engines themselves."""
        from .compiler import compile_graph
        from .compiler.input_processors import input_processors
        qgraph = self.quantized_ir(graph_quant)
        config = self.build_config(qgraph)
        processors = input_processors(qgraph, config, self.handler.framework)
        compiled = compile_graph(qgraph, config, self.device_info, processors=processors)
        if config["compiler_check"]:   # the model's engines, fed the quantized model's input codes
            checked = compile_graph(qgraph, config, self.device_info) if processors else compiled
            self.compiler_check_report = self._compiler_check(qgraph, checked)
        return compiled

    def _compiler_check(self, qgraph: Graph, compiled: Graph):
        """``compiler_check`` (docs/multi-batch.md): the compiled model against the quantized
        model on a sample of as many rows as the compiled batch: from ``compiler_check_data``
        (any calibration data form) when set, else the calibration sample :meth:`calibrate`
        keeps in ``output_dir``, else inputs drawn uniformly (seed 0) from each input's
        calibrated range; the report is also written to ``output_dir/compiler_check.json``.
        A mismatch raises CompileError."""
        import os

        from .compiler.check import check_compiled, report_json
        from .fileio import write_atomic
        feeds, sample = self._check_sample(qgraph)
        report = check_compiled(qgraph, compiled, self.build_config(qgraph), feeds, sample, self.device_info)
        os.makedirs(self.config["output_dir"], exist_ok=True)
        write_atomic(os.path.join(self.config["output_dir"], "compiler_check.json"), report_json(report).encode())
        return report

    def _check_sample(self, qgraph: Graph) -> tuple:
        """(feeds, description) of the compiler check's sample (:meth:`_compiler_check`)."""
        from .calibration.sample import read_sample
        rows = qgraph.shape(qgraph.inputs[0])[0] if qgraph.inputs else None
        given = self.config.get("compiler_check_data")
        if given is not None:
            batch = next(iter(self.calibration_data(given, rows)), None)
            if batch is None:
                from .errors import CalibrationError
                raise CalibrationError(f"config key 'compiler_check_data' ({given}) holds no sample")
            return ({t: np.asarray(v)[:batch.size] for t, v in batch.feeds.items()},
                    f"{batch.size} rows of {given}")
        kept = read_sample(self.config["output_dir"], self.fingerprint) or {}
        feeds = {t: np.asarray(kept[t])[:rows] for t in qgraph.inputs if t in kept}
        if (not rows or len(feeds) != len(qgraph.inputs)
                or any(feeds[t].shape != tuple(qgraph.shape(t)) for t in qgraph.inputs)):
            return _random_feeds(qgraph), "uniform in the calibrated input ranges (seed 0)"
        return feeds, f"{rows} rows of the calibration sample"

    def calibration_data(self, data: Any, batch_size: Optional[int] = None):
        """``data`` (array, dict, iterable, or .npy/.bin/.tar path) as batches of feed dicts
        for this model's inputs (:class:`ratelnn.calibration.data.CalibrationData`)."""
        from .calibration.data import CalibrationData, model_inputs
        return CalibrationData(data, model_inputs(self.graph), self.config, batch_size,
                               self.handler.framework)

    def calibrate(self, data: Any, batch_size: Optional[int] = None, progress: bool = True,
                  executor: Any = None):
        """Run the calibration model in this process on ``data``, recording statistics into
        ``output_dir``; returns the statistics now there (tensor name -> TensorStats).

        ``data``: see :meth:`calibration_data`; ``progress``: print batches done, rate and
        ETA on stderr; ``executor``: run the shards elsewhere instead, e.g. a
        ``ratelnn.distributed.RayExecutor`` (docs/distributed.md), with the same result."""
        if executor is not None:
            stats = executor.calibrate(self, data, batch_size, progress)
            if not isinstance(data, collections.abc.Iterator):   # a one-shot iterator is spent
                self.keep_sample(data, batch_size)
            return stats
        from .calibration.progress import Progress
        from .calibration.stats import load_statistics
        from .runners import runner_for
        batches = self.calibration_data(data, batch_size)
        with collector_paused():   # building the session, not running the batches
            runner = runner_for(self.handler.framework, self.to_cal())
        kept = None
        with Progress(batches.num_batches, "calibrate", enabled=progress) as bar:
            for batch in batches:
                runner.run(batch.feeds, self.config["output_nodes"])
                kept = self._keep(batch, kept)
                bar.update()
        return load_statistics(self.config["output_dir"])

    def keep_sample(self, data: Any, batch_size: Optional[int] = None) -> int:
        """Keep the first ``accuracy_samples`` inputs of ``data`` for the accuracy passes
        that need data (``bias_correction="empirical"``, ``adaround_iterations``; docs/
        quantization.md, "Accuracy passes"); ``calibrate()`` does it itself.  Returns the
        number of samples kept."""
        if self.config["accuracy_samples"] == 0:
            return 0
        kept = None
        for batch in self.calibration_data(data, batch_size):
            kept = self._keep(batch, kept)
            if kept >= self.config["accuracy_samples"]:
                break
        return kept or 0

    def _keep(self, batch, kept: Optional[int]) -> int:
        """Add ``batch``'s real rows to the kept sample while it has fewer than
        ``accuracy_samples``; ``kept``: the count after the previous batch (None: unknown)."""
        from .calibration.sample import keep_sample
        limit = self.config["accuracy_samples"]
        if kept is not None and kept >= limit:
            return kept
        feeds = {k: np.asarray(v)[:batch.size] for k, v in batch.feeds.items()}
        return keep_sample(self.config["output_dir"], self.fingerprint, feeds, limit)

    def analyze(self, data: Any = None, against: Optional[str] = None, batch_size: Optional[int] = None,
                max_batches: Optional[int] = None, progress: bool = False, executor: Any = None,
                method: Optional[str] = None):
        """Per-layer precision of the quantized (``against="quant"``) or compiled
        (``"npu"``) model, as the default build makes it (:meth:`as_built`), against the
        float model on ``data``: a
        :class:`ratelnn.analysis.Report` (``.rows``, ``.table()``, ``.to_json()``,
        ``.output_similarity``, ``.suggestions``).  Needs calibration statistics.
        ``executor``: measure the batches on e.g. a ``ratelnn.distributed.RayExecutor``.
        ``data`` None: the config's ``precision_analysis_data``, else its ``calibration_data``.
        Defaults from config ``precision_analysis_mode`` (Reference: quant, NPUBackend: npu)
        and ``precision_analysis_method`` (PerLayer: each layer also fed the float inputs, or
        EndToEnd; docs/quantization.md "Precision analysis: PerLayer vs EndToEnd")."""
        from .analysis import analyze
        return analyze(self.as_built(), data, against, batch_size, max_batches, progress, executor, method)

    def as_built(self) -> "ConvertImpl":
        """This converter, or with ``accuracy_auto`` a copy configured as the default build
        decided (:attr:`built_config`, the check off): what ``to_quant``/``to_npu`` build."""
        if not self.config["accuracy_auto"]:
            return self
        from .tune.auto import built_converter
        self._built_ir()
        return built_converter(self, self.accuracy_auto.settings)

    def tune(self, data: Any, metric: Any = None, target: float = 0.99, max_latency_ratio: float = 1.3,
             max_evals: int = 40, time_budget_s: Optional[float] = None, calibration_data: Any = None,
             batch_size: Optional[int] = None, progress: bool = True, passes: Any = None,
             borders: bool = True, int16_budget: bool = True, hold_out: bool = True):
        """Search methods, accuracy passes and per-layer int8/int16/fp32 for the cheapest
        configuration (NPU cost model) whose ``metric`` on ``data`` reaches ``target``
        (docs/quantization.md "Accuracy tuning", docs/architecture.md §12).

        ``data`` is split (docs/quantization.md "Held-out judgement"): every 4th sample is
        held out, the search calibrates and judges on the rest, the choice is judged again on
        the held-out samples and a ``HeldOutWarning`` fires when the figures differ by more
        than 0.005.  ``metric``: None = lowest cosine over the outputs of the compiled model
        to FP32, or ``metric(outputs, data[, rows]) -> float`` (outputs: one array per output
        node, the samples of one part; data: that part; rows: their indices in ``data``);
        ``max_latency_ratio``: latency limit as a multiple of the all-int8 model's;
        ``max_evals`` / ``time_budget_s``: stop there with the best found;
        ``calibration_data``: data to calibrate on (default the tuning part of ``data``); ``passes``: the
        accuracy-pass keys to try (default every one the config knows); ``borders``: whether
        to try sensitive float ops' input borders in fp32 with int16 upstream; ``int16_budget``:
        whether to try int16 on the layers losing most SQNR per predicted microsecond, as many
        as the latency limit allows, right after the passes; ``hold_out``: False searches on
        all of ``data`` (no held-out figure), for data the caller has split.  Statistics go to
        ``<output_dir>/tune/``.  Returns a :class:`ratelnn.tune.TuneResult` (``.config``,
        ``.pareto``, ``.plot(path)``, ``.table()``)."""
        from .tune import tune
        return tune(self, data, metric, target, max_latency_ratio, max_evals, time_budget_s,
                    calibration_data, batch_size, progress, passes, borders, int16_budget, hold_out)


def _key_text(value: Any) -> str:
    """A config value JSON cannot hold, as key text: an array by its dtype, shape and bytes."""
    if isinstance(value, np.ndarray):
        import hashlib
        return f"array {value.dtype} {value.shape} {hashlib.blake2b(np.ascontiguousarray(value).tobytes()).hexdigest()}"
    return repr(value)


def _random_feeds(qgraph: Graph) -> Dict[str, np.ndarray]:
    """Inputs at the compiled shapes: uniform over a quantized input's calibrated range
    (its codes' range times its scale), uniform in [-1, 1] for other float inputs, zeros for
    integer inputs; seed 0."""
    from .ir import arith
    rng = np.random.default_rng(0)
    feeds = {}
    for t in qgraph.inputs:
        info, qp = qgraph.tensors[t], qgraph.qparams.get(t)
        shape = tuple(1 if d is None else int(d) for d in info.shape)
        if qp is not None and not qp.per_channel:
            lo, hi = arith.QRANGE[qp.dtype]
            feeds[t] = rng.uniform(lo * float(qp.scale), hi * float(qp.scale), shape).astype(np.float32)
        elif info.dtype == "float32":
            feeds[t] = rng.uniform(-1.0, 1.0, shape).astype(np.float32)
        else:
            feeds[t] = np.zeros(shape, info.dtype)
    return feeds
