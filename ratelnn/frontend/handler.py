"""The model-handler contract between a frontend and the framework-neutral converters:
each frontend (ratelnn.frontend.tensorflow, ratelnn.frontend.mxnet) subclasses
:class:`ModelHandler` to translate its framework's models to the IR and back."""
from __future__ import annotations

import abc
from typing import Any

from ..config import QuantConfig
from ..errors import ModelError
from ..ir import Graph, GraphError
from ..ir.passes import remove_identity, run_default_passes
from ..quantization.recover import record_qdq_qparams


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
        """Framework model -> optimised float IR (the default passes of docs/ir.md)."""
        return _validated(run_default_passes(self.translate(graph_def, config)))

    def import_quantized(self, graph_quant: Any, config: QuantConfig) -> Graph:
        """A quantized model made by ``to_quant`` -> IR keeping its Quant/Dequant structure,
        ``qparams`` filled from it (``strip_qdq`` turns it into quantized IR)."""
        graph = self.translate(graph_quant, config)
        remove_identity(graph)
        graph.prune()
        record_qdq_qparams(graph)
        return _validated(graph)


def _validated(graph: Graph) -> Graph:
    try:
        graph.validate()
    except GraphError as e:
        raise ModelError(f"the translated graph is invalid: {e}") from e
    return graph
