"""ConvertImpl / JointConvertImpl: the framework-neutral converters of DESIGN §2.

A frontend supplies a *model handler* (see :class:`ModelHandler`) that translates its
framework's model to the IR and back; everything in between works on the IR.
"""
from __future__ import annotations

import abc
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import config as config_mod
from .ir import Graph


def model_name(config: Mapping[str, Any]) -> str:
    """Config ``model_name`` (made identifier-safe), else one derived from the first output
    node: without a ``:0`` port, identifier-safe, lower case (``Identity`` -> ``identity``)."""
    import re
    explicit = config.get("model_name")
    name = explicit or re.sub(r":0$", "", str(config["output_nodes"][0]))
    name = re.sub(r"[^A-Za-z0-9_.\-]", "_", str(name))
    return name if explicit else name.lower()


class ModelHandler(abc.ABC):
    """Translation between one framework and the IR; a frontend implements
    :meth:`translate`, :meth:`export_graph` and :meth:`ensure_ops`."""

    framework: str = ""

    @abc.abstractmethod
    def ensure_ops(self) -> None:
        """Load the framework's custom-op library (tf_init / mx_init)."""

    @abc.abstractmethod
    def translate(self, model: Any, config: config_mod.QuantConfig) -> Graph:
        """Framework model -> IR as it is (input shapes specialised, no passes).

        Raises ModelError for unknown input/output nodes, wrong input rank, non-frozen graphs.
        """

    @abc.abstractmethod
    def export_graph(self, graph: Graph) -> Any:
        """IR (possibly holding MinMax/Quant/Dequant/Engine nodes) -> framework model."""

    def import_graph(self, graph_def: Any, config: config_mod.QuantConfig) -> Graph:
        """Framework model -> optimised float IR (the default passes of docs/ir.md)."""
        from .ir.passes import run_default_passes
        return _validated(run_default_passes(self.translate(graph_def, config)))

    def import_quantized(self, graph_quant: Any, config: config_mod.QuantConfig) -> Graph:
        """A quantized model made by ``to_quant`` -> IR keeping its Quant/Dequant structure,
        ``qparams`` filled from it (``strip_qdq`` turns it into quantized IR)."""
        from .ir.passes import remove_identity
        from .quantization.recover import record_qdq_qparams
        graph = self.translate(graph_quant, config)
        remove_identity(graph)
        graph.prune()
        record_qdq_qparams(graph)
        return _validated(graph)


def _validated(graph: Graph) -> Graph:
    from .errors import ModelError
    from .ir import GraphError
    try:
        graph.validate()
    except GraphError as e:
        raise ModelError(f"the translated graph is invalid: {e}") from e
    return graph


class ConvertImpl:
    """Converter of one model: ``to_cal``, ``to_quant``, ``to_npu`` (DESIGN §1, §2)."""

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
        from .quantization.emit import emit_calibration
        self.handler.ensure_ops()
        return self.handler.export_graph(emit_calibration(self.graph, self.config))

    def quantized_ir(self, graph_quant: Any = None) -> Graph:
        """The quantized IR (qparams filled): from the statistics in ``output_dir``, or
        recovered from ``graph_quant``, a quantized model made by ``to_quant``."""
        if graph_quant is not None:
            from .quantization.recover import strip_qdq
            qgraph = strip_qdq(self.handler.import_quantized(graph_quant, self.config))
            qgraph.name = self.graph.name
            return qgraph
        from .calibration.stats import load_statistics
        from .quantization.quantizer import quantize
        stats = load_statistics(self.config["output_dir"])
        return quantize(self.graph, stats, self.config)

    def to_quant(self) -> Any:
        """The quantized model: Quant/Dequant ops and integer constants, runnable in the
        framework; raises CalibrationError when statistics are missing."""
        from .quantization.emit import emit_qdq
        self.handler.ensure_ops()
        return self.handler.export_graph(emit_qdq(self.quantized_ir(), self.config))

    def to_npu(self, graph_quant: Any = None) -> Any:
        """The compiled model (DESIGN §6): NPU-supported regions become engine ops.

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

    def calibrate(self, data: Any, batch_size: Optional[int] = None, progress: bool = True):
        """Run the calibration model in this process on ``data``, recording statistics into
        ``output_dir``; returns the statistics now there (tensor name -> TensorStats).

        ``data``: see :meth:`calibration_data`; ``progress``: print batches done, rate and
        ETA on stderr."""
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
                max_batches: Optional[int] = None, progress: bool = False):
        """Per-layer precision of the quantized (``against="quant"``) or compiled
        (``"npu"``) model against the float model on ``data``: a
        :class:`ratelnn.analysis.Report` (``.rows``, ``.table()``, ``.to_json()``,
        ``.output_similarity``, ``.suggestions``).  Needs calibration statistics."""
        from .analysis import analyze
        return analyze(self, data, against, batch_size, max_batches, progress)


class JointConvertImpl:
    """Joint compilation of several models onto the cores of the emulated NPU (DESIGN §8).

    Each config may carry ``invocations_per_frame`` (default 1) and ``model_name``; models
    without one, or whose derived names clash, get distinct names (``identity``,
    ``identity_1``, ...: :func:`ratelnn.joint.compile.distinct_model_names`).
    ``device_info``: the target, ``{device: n_cores}`` or ``{device: [core ids]}``, which may
    name devices this machine lacks (compiling is ahead of time); empty means every locally
    configured device.  After :meth:`to_npu`, :attr:`scheme` holds the execution scheme."""

    def __init__(self, model_handler: ModelHandler, graph_def_list: Sequence[Any],
                 config_list: Sequence[Mapping[str, Any]], device_info=None) -> None:
        if len(graph_def_list) != len(config_list):
            raise ValueError(f"{len(graph_def_list)} models but {len(config_list)} configs")
        if not graph_def_list:
            raise ValueError("joint_converter needs at least one model")
        self.device_info = dict(device_info) if device_info else _all_devices()
        self.converters: List[ConvertImpl] = [
            ConvertImpl(model_handler, g, c, self.device_info) for g, c in zip(graph_def_list, config_list)]
        from .joint.compile import distinct_model_names   # names engines, files, scheme entries
        for conv, name in zip(self.converters, distinct_model_names([c.config for c in self.converters])):
            conv.graph.name = name
        self.scheme = None
        self.model_specs = None

    def to_npu(self, graph_quant_list: Optional[Sequence[Any]] = None) -> List[Any]:
        """The compiled models, in input order, their engines placed by the chosen scheme."""
        from .joint.compile import compile_jointly
        if graph_quant_list is not None and len(graph_quant_list) != len(self.converters):
            raise ValueError(f"{len(graph_quant_list)} quantized models for {len(self.converters)} models")
        qgraphs = [c.quantized_ir(None if graph_quant_list is None else graph_quant_list[i])
                   for i, c in enumerate(self.converters)]
        compiled, self.model_specs, self.scheme = compile_jointly(
            qgraphs, [c.config for c in self.converters], self.device_info)
        self.converters[0].handler.ensure_ops()
        return [c.handler.export_graph(g) for c, g in zip(self.converters, compiled)]

    def compare(self, frames: int = 200):
        """Simulated results of the chosen scheme and of the baselines (DESIGN §8)."""
        from .joint.baselines import compare
        if self.scheme is None:
            raise RuntimeError("call to_npu() before compare(): there is no scheme yet")
        return compare(self.model_specs, self.device_info, frames=frames, chosen=self.scheme)


def _all_devices() -> Dict[int, int]:
    from .npu.device import all_devices_info
    return all_devices_info()
