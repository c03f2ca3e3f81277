"""ConvertImpl: the framework-neutral converter of one model (docs/architecture.md §2).

A frontend supplies a *model handler* (:class:`ratelnn.frontend.handler.ModelHandler`) that
translates its framework's model to the IR and back; everything in between works on the IR.
Several models compiled together: :class:`ratelnn.joint.convert.JointConvertImpl`.
"""
from __future__ import annotations

from typing import Any, Dict, Mapping, Optional

from . import config as config_mod
from .frontend.handler import ModelHandler
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

    def __init__(self, model_handler: ModelHandler, graph_def: Any, config: Mapping[str, Any],
                 device_info: Optional[Dict[int, Any]] = None) -> None:
        self.handler = model_handler
        self.config = config_mod.normalize(config, model_handler.framework)
        self.device_info = dict(device_info or {})
        self.graph: Graph = model_handler.import_graph(graph_def, self.config)
        # names the engines (<model>_engine_<k>) and their device-time counters
        self.graph.name = model_name(self.config)

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

    def quantized_ir(self, graph_quant: Any = None) -> Graph:
        """The quantized IR (qparams filled): from the statistics in ``output_dir``, or
        recovered from ``graph_quant``, a quantized model made by ``to_quant``."""
        if graph_quant is not None:
            from .quantization.recover import strip_qdq
            qgraph = strip_qdq(self.handler.import_quantized(graph_quant, self.config))
            qgraph.name = self.graph.name
            return qgraph
        from .calibration.manifest import check_owner
        from .calibration.stats import load_statistics
        from .quantization.quantizer import quantize
        check_owner(self.config["output_dir"], self.graph.name, self.fingerprint,
                    self.config["merge_statistics"])
        stats = load_statistics(self.config["output_dir"])
        return quantize(self.graph, stats, self.config)

    def to_quant(self) -> Any:
        """The quantized model: Quant/Dequant ops and integer constants, runnable in the
        framework; raises CalibrationError when statistics are missing."""
        from .quantization.emit import emit_qdq
        self.handler.ensure_ops()
        return self.handler.export_graph(emit_qdq(self.quantized_ir(), self.config))

    def to_npu(self, graph_quant: Any = None) -> Any:
        """The compiled model (docs/architecture.md §6): NPU-supported regions become engine ops.

        ``graph_quant``: a quantized model made by ``to_quant`` to compile; None quantizes
        from the statistics in ``output_dir``."""
        from .compiler import compile_graph
        self.handler.ensure_ops()
        qgraph = self.quantized_ir(graph_quant)
        return self.handler.export_graph(compile_graph(qgraph, self.config, self.device_info))

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
            return executor.calibrate(self, data, batch_size, progress)
        from .calibration.progress import Progress
        from .calibration.stats import load_statistics
        from .runners import runner_for
        batches = self.calibration_data(data, batch_size)
        runner = runner_for(self.handler.framework, self.to_cal())
        with Progress(batches.num_batches, "calibrate", enabled=progress) as bar:
            for batch in batches:
                runner.run(batch.feeds, self.config["output_nodes"])
                bar.update()
        return load_statistics(self.config["output_dir"])

    def analyze(self, data: Any, against: str = "quant", batch_size: Optional[int] = None,
                max_batches: Optional[int] = None, progress: bool = False, executor: Any = None):
        """Per-layer precision of the quantized (``against="quant"``) or compiled
        (``"npu"``) model against the float model on ``data``: a
        :class:`ratelnn.analysis.Report` (``.rows``, ``.table()``, ``.to_json()``,
        ``.output_similarity``, ``.suggestions``).  Needs calibration statistics.
        ``executor``: measure the batches on e.g. a ``ratelnn.distributed.RayExecutor``."""
        from .analysis import analyze
        return analyze(self, data, against, batch_size, max_batches, progress, executor)
