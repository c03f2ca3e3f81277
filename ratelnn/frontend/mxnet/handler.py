"""The MXNet model handler: ``(symbol, arg_params, aux_params)`` <-> IR for
:class:`ratelnn.ConvertImpl`."""
from __future__ import annotations

from typing import Any

from ...config import QuantConfig
from ...convert import ModelHandler
from ...errors import ModelError
from ...ir import Graph, GraphError, QParams
from ...ir.passes import remove_identity, run_default_passes
from .exporter import export_symbol
from .importer import import_symbol


def _import(graph_def: Any, config: QuantConfig) -> Graph:
    return import_symbol(graph_def, config["input_nodes"], config["output_nodes"], config["input_shapes"])


def _validated(graph: Graph) -> Graph:
    try:
        graph.validate()
    except GraphError as e:
        raise ModelError(f"the translated graph is invalid: {e}") from e
    return graph


def _scale_qparams(dtype: str, attrs: dict) -> QParams:
    if attrs.get("scales") is not None:
        return QParams(dtype, attrs["scales"], attrs.get("axis"))
    return QParams(dtype, attrs["scale"])


class MXModelHandler(ModelHandler):
    """MXNet 1.9 symbols with their params to and from the IR (NCHW layout)."""

    framework = "mxnet"

    def ensure_ops(self) -> None:
        import ratelnn
        ratelnn.mx_init()

    def import_graph(self, graph_def: Any, config: QuantConfig) -> Graph:
        return _validated(run_default_passes(_import(graph_def, config)))

    def import_quantized(self, graph_quant: Any, config: QuantConfig) -> Graph:
        """Import without folding, keeping the Quant/Dequant structure; ``graph.qparams``
        is filled from the Quant nodes and from the Dequant nodes reading integer params."""
        graph = _import(graph_quant, config)
        remove_identity(graph)
        graph.prune()
        for node in graph.nodes:
            if node.op == "Quant":
                graph.qparams[node.outputs[0]] = _scale_qparams(node.attrs["dtype"], node.attrs)
            elif node.op == "Dequant" and graph.is_param(node.inputs[0]):
                param = node.inputs[0]
                graph.qparams[param] = _scale_qparams(str(graph.params[param].dtype), node.attrs)
        return _validated(graph)

    def export_graph(self, graph: Graph) -> Any:
        return export_symbol(graph)
