"""JointConvertImpl: several models compiled together onto the cores of the emulated NPU
(docs/architecture.md §8), built on one :class:`ratelnn.convert.ConvertImpl` per model."""
from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

from ..convert import ConvertImpl
from ..gc_pause import with_collector_paused
from ..model_handler import ModelHandler
from ..npu.device import all_devices_info
from .planning import compare
from .compile import compile_jointly, distinct_model_names


class JointConvertImpl:
    """Joint compilation of several models onto the cores of the emulated NPU (docs/architecture.md §8).

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
        self.device_info = dict(device_info) if device_info else all_devices_info()
        self.converters: List[ConvertImpl] = [
            ConvertImpl(model_handler, g, c, self.device_info) for g, c in zip(graph_def_list, config_list)]
        # distinct names: they name engines, files and scheme entries
        for conv, name in zip(self.converters, distinct_model_names([c.config for c in self.converters])):
            conv.graph.name = name
        self.scheme = None
        self.model_specs = None

    @with_collector_paused
    def to_npu(self, graph_quant_list: Optional[Sequence[Any]] = None, executor: Any = None) -> List[Any]:
        """The compiled models, in input order, their engines placed by the chosen scheme.

        ``executor`` (e.g. a ``ratelnn.distributed.RayExecutor``): compile the models in
        parallel on its workers (docs/distributed.md); the result is the same."""
        if graph_quant_list is not None and len(graph_quant_list) != len(self.converters):
            raise ValueError(f"{len(graph_quant_list)} quantized models for {len(self.converters)} models")
        qgraphs = [c.quantized_ir(None if graph_quant_list is None else graph_quant_list[i])
                   for i, c in enumerate(self.converters)]
        compiled, self.model_specs, self.scheme = compile_jointly(
            qgraphs, [c.build_config(q) for c, q in zip(self.converters, qgraphs)], self.device_info, executor)
        self.converters[0].handler.ensure_ops()
        return [c.handler.export_graph(g) for c, g in zip(self.converters, compiled)]

    def compare(self, frames: int = 200):
        """Simulated results of the chosen scheme and of the baselines (docs/architecture.md §8)."""
        if self.scheme is None:
            raise RuntimeError("call to_npu() before compare(): there is no scheme yet")
        return compare(self.model_specs, self.device_info, frames=frames, chosen=self.scheme)
