"""The TensorFlow model handler: GraphDef <-> IR for :class:`ratelnn.ConvertImpl`."""
from __future__ import annotations

from typing import Any

import numpy as np

from ...config import QuantConfig
from ...convert import ModelHandler
from ...errors import ModelError
from ...ir import Graph, GraphError, QParams
from ...ir.passes import remove_identity, run_default_passes
from .exporter import export_graphdef
from .importer import import_graphdef


def _import(graph_def: Any, config: QuantConfig) -> Graph:
    return import_graphdef(graph_def, config["input_nodes"], config["output_nodes"], config["input_shapes"])


def _validated(graph: Graph) -> Graph:
    try:
        graph.validate()
    except GraphError as e:
        raise ModelError(f"the translated graph is invalid: {e}") from e
    return graph


class TFModelHandler(ModelHandler):
    """Frozen TF GraphDefs to and from the IR."""

    framework = "tensorflow"

    def ensure_ops(self) -> None:
        import ratelnn
        ratelnn.tf_init()

    def import_graph(self, graph_def: Any, config: QuantConfig) -> Graph:
        return _validated(run_default_passes(_import(graph_def, config)))

    def import_quantized(self, graph_quant: Any, config: QuantConfig) -> Graph:
        """Import without folding, keeping the Quant/Dequant structure; ``graph.qparams``
        is filled from the Quant nodes."""
        graph = _import(graph_quant, config)
        remove_identity(graph)
        graph.prune()
        for node in graph.nodes:
            if node.op == "Quant":
                per_channel = node.attrs.get("scales") is not None
                scale = np.asarray(node.attrs["scales"], np.float32) if per_channel else float(node.attrs["scale"])
                axis = int(node.attrs["axis"]) if per_channel else None
                graph.qparams[node.outputs[0]] = QParams(node.attrs["dtype"], scale, axis)
        return _validated(graph)

    def export_graph(self, graph: Graph) -> Any:
        return export_graphdef(graph)
