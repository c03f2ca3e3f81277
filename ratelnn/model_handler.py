"""The model-handler contract between a frontend and the framework-neutral converters
(:class:`ratelnn.ConvertImpl`, :class:`ratelnn.JointConvertImpl`): each frontend
(ratelnn.frontend.tensorflow, ratelnn.frontend.mxnet) subclasses :class:`ModelHandler` to
translate its framework's models to the IR and back.  It sits beside the converters, below
the frontends, so a converter never imports a frontend."""
from __future__ import annotations

import abc
from typing import Any, Optional

from .config import QuantConfig
from .errors import ModelError
from .ir import Graph, GraphError
from .ir import registry
from .ir.passes import remove_identity, run_default_passes
from .ir.patches import apply_patches
from .quantization.recover import record_qdq_qparams


class ModelHandler(abc.ABC):
    """Translation between one framework and the IR; a frontend implements
    :meth:`translate`, :meth:`export_graph` and :meth:`ensure_ops`."""

    framework: str = ""

    @abc.abstractmethod
    def ensure_ops(self) -> None:
        """Load the framework's custom-op library (tf_init / mx_init)."""

    @abc.abstractmethod
    def translate(self, model: Any, config: QuantConfig) -> Graph:
        """Framework model -> IR as it is (input shapes specialised, no passes).

        Raises ModelError for unknown input/output nodes, wrong input rank, non-frozen graphs.
        """

    @abc.abstractmethod
    def export_graph(self, graph: Graph) -> Any:
        """IR (possibly holding MinMax/Quant/Dequant/Engine nodes) -> framework model."""

    def import_graph(self, graph_def: Any, config: QuantConfig) -> Graph:
        """Framework model -> optimised float IR (the default passes of docs/ir.md); the
        config's graph patches are applied first (docs/architecture.md §14)."""
        _check_op_types(config)
        return checked_float_ir(apply_patches(self.translate(graph_def, config), config))

    def import_prequantized(self, graph_quant: Any, config: QuantConfig) -> Optional[Graph]:
        """The quantized IR of a pre-quantized (quantization-aware-trained) model, from its
        own fake-quantization nodes; None when the model has none (docs/quantization.md)."""
        return None

    def import_quantized(self, graph_quant: Any, config: QuantConfig) -> Graph:
        """A quantized model made by ``to_quant`` -> IR keeping its Quant/Dequant structure,
        ``qparams`` filled from it (``strip_qdq`` turns it into quantized IR)."""
        graph = self.translate(graph_quant, config)
        remove_identity(graph)
        graph.prune()
        record_qdq_qparams(graph)
        return _validated(graph)


def _check_op_types(config: QuantConfig) -> None:
    """ConfigError for a ``layer_configs`` op_type that names no op, before any work."""
    for i, entry in enumerate(config.get("layer_configs") or []):
        types = entry.get("op_type", [])
        for name in [types] if isinstance(types, str) else types:
            registry.config_op_types(name, f"layer_configs[{i}].op_type")


def checked_float_ir(graph: Graph) -> Graph:
    """A translated float IR after the default passes, validated (ModelError otherwise)."""
    return _integer_inputs_checked(_validated(run_default_passes(graph)))


def _integer_inputs_checked(graph: Graph) -> Graph:
    """ModelError if a non-float graph input feeds an op the SDK would quantize: integer
    inputs may only feed ops that stay in the framework (a Cast, a Gather...)."""
    for name in graph.inputs:
        dtype = graph.tensors[name].dtype
        if str(dtype).startswith(("float", "bfloat")):
            continue
        frontier, seen = [name], set()
        while frontier:
            tensor = frontier.pop()
            for reader in graph.consumers(tensor):
                if reader.op == "Opaque" or id(reader) in seen:
                    continue
                if registry.moves_values(reader.op):  # an integer reshaped is still an integer
                    seen.add(id(reader))
                    frontier.extend(reader.outputs)
                    continue
                raise ModelError(
                    f"input {name!r} is {dtype}: ratelnn quantizes float inputs, and an integer "
                    f"input may only feed ops that stay in the framework (Cast, Gather, ...); "
                    f"node {reader.name!r} ({reader.op}) reads it. Cast it to float in the "
                    "model first, or make the input float")
    return graph


def _validated(graph: Graph) -> Graph:
    try:
        graph.validate()
    except GraphError as e:
        raise ModelError(f"the translated graph is invalid: {e}") from e
    return graph
